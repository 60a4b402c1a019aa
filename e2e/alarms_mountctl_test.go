package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

// TestMountctlAlarms runs the real mountctl: alarm-rules create (conditions
// in mountctl's notation, --for, --mount), list, suggested, delete; alarms
// list and ack; presence in mounts list and get; a rider refused.
func TestMountctlAlarms(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	creds := []string{"MOUNTCTL_CLIENT_ID=" + acc.ClientID, "MOUNTCTL_CLIENT_SECRET=" + acc.ClientSecret}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(creds, args...)
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	api := client.New(in.base, client.CredentialsSource(client.ClientCredentials(in.base, acc.ClientID, acc.ClientSecret,
		[]string{"openid", "sub", audItem}), nil))
	const uid = "ALARM-0001"
	associate(t, api, uid)

	if out := must("mounts", "get", uid); !strings.Contains(out, "UNKNOWN") || !strings.Contains(out, "seen=never") {
		t.Errorf("mounts get before any report:\n%s", out)
	}
	if get, show := must("mounts", "get", uid), must("mounts", "show", uid); show != get {
		t.Errorf("mounts show printed\n%s\nmounts get\n%s", show, get)
	}
	// Empty lists say so.
	if out := must("alarm-rules", "list"); strings.TrimSpace(out) != "0 rules" {
		t.Errorf("alarm-rules list without rules:\n%s", out)
	}
	if out := must("alarms", "list"); strings.TrimSpace(out) != "0 alarms" {
		t.Errorf("alarms list without alarms:\n%s", out)
	}

	var rule client.AlarmRule
	if err := json.Unmarshal([]byte(must("--json", "alarm-rules", "create", "--name", "Battery low", "--severity", "critical",
		"--condition", "BATTERY_LEVEL<20", "--condition", "MOUNT_LOCKED=1", "--mount", uid)), &rule); err != nil {
		t.Fatal(err)
	}
	if rule.ID == "" || rule.Severity != "CRITICAL" || len(rule.Conditions) != 2 || rule.Conditions[1].Op != "==" ||
		len(rule.MountUIDs) != 1 || rule.ForSeconds != 0 {
		t.Fatalf("created %+v", rule)
	}
	out := must("alarm-rules", "create", "--name", "Quiet", "--condition", "presence=OFFLINE", "--for", "10m")
	if !strings.Contains(out, "presence=OFFLINE") || !strings.Contains(out, "10m0s") || !strings.Contains(out, "every mount") {
		t.Errorf("create a presence rule:\n%s", out)
	}
	quiet := strings.Fields(out)[0]
	if out := must("alarm-rules", "list"); !strings.Contains(out, rule.ID) || !strings.Contains(out, "BATTERY_LEVEL<20 AND MOUNT_LOCKED==1") ||
		!strings.Contains(out, quiet) || !strings.Contains(out, "2 rules") {
		t.Errorf("alarm-rules list:\n%s", out)
	}
	if out := must("alarm-rules", "suggested"); strings.TrimSpace(out) == "" {
		t.Errorf("alarm-rules suggested printed nothing")
	}
	for _, args := range [][]string{
		{"alarm-rules", "create", "--name", "x", "--condition", "BATTERY_LEVEL"},
		{"alarm-rules", "create", "--name", "x", "--condition", "VOLTAGE<3"},
		{"alarm-rules", "create", "--name", "x", "--condition", "BATTERY_LEVEL<20", "--for", "1500ms"},
	} {
		if out, err := run(creds, args...); err == nil || strings.Contains(out, "INTERNAL") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}

	// watch shows the mount's presence and when it was last seen.
	watchOut, watchErr := &syncBuffer{}, &syncBuffer{}
	watchCmd := exec.Command(bin, "watch", uid, "--count", "1")
	watchCmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base}, creds...)
	watchCmd.Stdout, watchCmd.Stderr = watchOut, watchErr
	if err := watchCmd.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan error, 1)
	go func() { watchDone <- watchCmd.Wait() }()
	t.Cleanup(func() { _ = watchCmd.Process.Kill() })
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(watchErr.String(), "watching mount"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("watch did not subscribe: %s", watchErr)
		}
	}

	now := time.Now()
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{
		entry("BATTERY_LEVEL", "10", now.Add(-time.Minute)), entry("MOUNT_LOCKED", "1", now.Add(-time.Minute))}}, nil); err != nil {
		t.Fatal(err)
	}
	if out := must("mounts", "list"); !strings.Contains(out, "ONLINE") || strings.Contains(out, "seen=never") {
		t.Errorf("mounts list after a report:\n%s", out)
	}
	select {
	case err := <-watchDone:
		if out := watchOut.String(); err != nil || !strings.Contains(out, "BATTERY_LEVEL=10") || !strings.Contains(out, " ONLINE ") ||
			!strings.Contains(out, "seen=20") {
			t.Errorf("watch: %v\n%s\n%s", err, out, watchErr)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("watch printed no report in 20s:\n%s\n%s", watchOut, watchErr)
	}
	var page struct {
		Alarms []client.Alarm `json:"alarms"`
	}
	if err := json.Unmarshal([]byte(must("--json", "alarms", "list", "--state", "ACTIVE", "--mount", uid, "--rule", rule.ID, "--severity", "CRITICAL")), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Alarms) != 1 || page.Alarms[0].RuleID != rule.ID {
		t.Fatalf("alarms list --json: %+v", page)
	}
	id := page.Alarms[0].ID
	// The event log's line names the alarm's rule and severity.
	if out := must("events", "--from-start", "--types", "ALARM_RAISED", "--cursor-file", t.TempDir()+"/cursor"); !strings.Contains(out,
		`CRITICAL "Battery low" ACTIVE alarm `+id) {
		t.Errorf("events of ALARM_RAISED:\n%s", out)
	}
	if out := must("alarms", "list"); !strings.Contains(out, id) || !strings.Contains(out, `"Battery low"`) ||
		!strings.Contains(out, "BATTERY_LEVEL=10") || !strings.Contains(out, "ACTIVE") {
		t.Errorf("alarms list:\n%s", out)
	}
	// Acknowledged by the client, named by its name, not its id (issue 38).
	if out := must("alarms", "ack", id); !strings.Contains(out, "acknowledged") || !strings.Contains(out, "ACTIVE") ||
		!strings.Contains(out, `by "Fleet API client"`) || strings.Contains(out, acc.ClientID) {
		t.Errorf("alarms ack:\n%s", out)
	}
	if out := must("alarms", "ack", id); !strings.Contains(out, "acknowledged") {
		t.Errorf("alarms ack twice:\n%s", out)
	}
	if out, err := run(creds, "alarms", "list", "--state", "OPEN"); err == nil || !strings.Contains(out, "state") {
		t.Errorf("alarms list --state OPEN: %v\n%s", err, out)
	}
	rider := []string{"MOUNTCTL_TOKEN=" + in.token(acc, "openid", "sub", audItem, "role:restricted", "mount:"+uid)}
	for _, args := range [][]string{{"alarms", "list"}, {"alarms", "ack", id}, {"alarm-rules", "list"}} {
		if out, err := run(rider, args...); err == nil || !strings.Contains(out, "FORBIDDEN") {
			t.Errorf("a rider's %v: %v\n%s", args, err, out)
		}
	}

	if out := must("alarm-rules", "delete", rule.ID); !strings.Contains(out, "deleted") {
		t.Errorf("alarm-rules delete:\n%s", out)
	}
	if out, err := run(creds, "alarm-rules", "delete", rule.ID); err == nil || !strings.Contains(out, "ALARM_RULE_NOT_FOUND") {
		t.Errorf("delete twice: %v\n%s", err, out)
	}
	if out := must("alarms", "list", "--state", "ACTIVE"); strings.Contains(out, id) || strings.TrimSpace(out) != "0 alarms" {
		t.Errorf("the deleted rule's alarm is still active:\n%s", out)
	}
}
