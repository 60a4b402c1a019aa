package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMountctlAudit: mountctl audit prints the account's entries, one a
// line or as JSON lines, filtered, across pages of --limit, and with
// --follow the entries of changes made after it started; a restricted
// token is told the log is for owners.
func TestMountctlAudit(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Fleet")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
		"MOUNTCTL_CLIENT_ID=" + a.creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + a.creds.ClientSecret}
	mountctl := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := mountctl(args...)
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	for _, uid := range []string{"MA-1", "MA-2", "MA-3"} {
		a.ok(t, http.MethodPost, "/api/v1/mounts", map[string]any{"uid": uid, "name": "Front " + uid})
	}
	a.ok(t, http.MethodPatch, "/api/v1/mounts/MA-2", map[string]any{"name": "Rear"})

	out := must("audit")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 ||
		!strings.Contains(lines[3], "mount.update") || !strings.Contains(lines[3], "mount:MA-2") ||
		!strings.Contains(lines[3], "by client Fleet API client from 127.0.0.1") || !strings.Contains(lines[3], `name="Rear"`) {
		t.Fatalf("audit:\n%s", out)
	}
	// Pages of one entry still print them all; JSON is one entry a line.
	out = must("--json", "audit", "--limit", "1", "--action", "mount.request-association")
	var uids []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e auditView
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		uids = append(uids, e.Target)
	}
	if strings.Join(uids, " ") != "mount:MA-1 mount:MA-2 mount:MA-3" {
		t.Fatalf("request entries %v", uids)
	}
	if out, err := mountctl("audit", "--limit", "0"); err == nil || !strings.Contains(out, "limit") {
		t.Fatalf("limit 0: %v\n%s", err, out)
	}

	// --follow prints what comes after it started.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	follow := exec.CommandContext(ctx, bin, "audit", "--follow", "--target", "mount:MA-3")
	follow.Env = env
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = follow.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.Contains(lines.Text(), "mount.request-association") {
		t.Fatalf("follow's first line %q", lines.Text())
	}
	a.noContent(t, http.MethodDelete, "/api/v1/mounts/MA-3/abandon", nil)
	if !lines.Scan() || !strings.Contains(lines.Text(), "mount.abandon") {
		t.Fatalf("follow did not print the abandon: %q %v", lines.Text(), lines.Err())
	}

	restricted := in.token(a.creds, "openid", "sub", audItem, "role:restricted")
	if out, err := mountctl("--token", restricted, "audit"); err == nil || !strings.Contains(out, "owners") {
		t.Fatalf("restricted: %v\n%s", err, out)
	}
}
