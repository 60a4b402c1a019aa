package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReadmeOperatorFlow runs the guide's operator flow with the real
// mountctl and mountsim binaries against a running mountd, checking what
// the guide's blocks (run word for word by TestReadmeBlocks) do not show:
// scan's order, the device fields --deliver sends, the errors of a foreign
// rider token, of a download over a file and of mountctl without
// credentials, events resuming, and mountsim's summary.
func TestReadmeOperatorFlow(t *testing.T) {
	mountctlBin, mountsimBin := mountctlBinary(t), mountsimBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Demo Fleet")
	air := freeAddr(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Secrets in the environment, as the guide passes them (not in argv).
	sim := exec.CommandContext(ctx, mountsimBin, "--mounts", "3", "--air", air, "--api", in.base, "--report-interval", "1h")
	sim.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+acc.ClientID, "MOUNTSIM_CLIENT_SECRET="+acc.ClientSecret)
	var simOut bytes.Buffer
	sim.Stdout, sim.Stderr = &simOut, &simOut
	if err := sim.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = sim.Wait() }()
	waitListening(t, air)

	env := append(os.Environ(), "MOUNTCTL_API="+in.base, "MOUNTCTL_BLE=sim://"+air,
		"MOUNTCTL_CLIENT_ID="+acc.ClientID, "MOUNTCTL_CLIENT_SECRET="+acc.ClientSecret)
	mountctl := func(token string, args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(mountctlBin, args...)
		cmd.Env = append(env, "MOUNTCTL_TOKEN="+token)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(token string, args ...string) string {
		t.Helper()
		out, err := mountctl(token, args...)
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s\nmountsim:\n%s", args, err, out, simOut.String())
		}
		return out
	}

	// Without credentials, token says in one line what is missing.
	bare := exec.Command(mountctlBin, "--api", in.base, "token")
	bare.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	if out, err := bare.CombinedOutput(); err == nil || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 ||
		!strings.Contains(string(out), "MOUNTCTL_CLIENT_ID") || !strings.Contains(string(out), "MOUNTCTL_CLIENT_SECRET") {
		t.Fatalf("token without credentials: %v\n%s", err, out)
	}

	owner := strings.TrimSpace(must("", "token"))
	out := must(owner, "scan", "--duration", "1s")
	i1, i2, i3 := strings.Index(out, "SIM-0001"), strings.Index(out, "SIM-0002"), strings.Index(out, "SIM-0003")
	if !strings.Contains(out, "scanning for mounts nearby for 1s") || !strings.Contains(out, "3 mounts") || i1 < 0 || i1 > i2 || i2 > i3 {
		t.Fatalf("scan (says it scans, lists sorted):\n%s", out)
	}
	if out := must(owner, "mounts", "associate", "SIM-0001", "--deliver"); !strings.Contains(out, "delivered over BLE and confirmed") {
		t.Fatalf("associate:\n%s", out)
	}
	rider := strings.TrimSpace(must("", "token", "--role", "restricted", "--mount", "SIM-0001"))
	if out := must(rider, "release-helmet", "SIM-0001"); !strings.Contains(out, "MOUNT_LOCKED=0") || !strings.Contains(out, "HELMET_MOUNTED=0") {
		t.Fatalf("release-helmet:\n%s", out)
	}
	if out := must(owner, "mounts", "get", "SIM-0001"); !strings.Contains(out, "locked=false helmet=false") {
		t.Fatalf("mounts get:\n%s", out)
	}
	// --deliver sent what the mount's info characteristic says.
	if out := must(owner, "--json", "mounts", "get", "SIM-0001"); !strings.Contains(out, `"serialNumber":"SN-SIM-000001"`) ||
		strings.Contains(out, `"macAddress":""`) || !strings.Contains(out, `"modelNumber":"MNT-SIM"`) ||
		!strings.Contains(out, `"firmwareRevision":"1.0.0"`) || !strings.Contains(out, `"softwareRevision":"1.0.0"`) {
		t.Fatalf("the associated mount lacks its device fields:\n%s", out)
	}
	if out := must(owner, "--json", "mounts", "list"); !strings.Contains(out, `"totalItems":1`) {
		t.Fatalf("mounts list --json:\n%s", out)
	}
	// The guide's firmware download: the latest of a model, verified.
	_, image := in.publish(t, "HM-1", "1.4.0", 100_000)
	fw := filepath.Join(t.TempDir(), "fw.bin")
	if out := must(owner, "firmware", "download", "--model", "HM-1", "-o", fw); !strings.Contains(out, "verified") {
		t.Fatalf("firmware download:\n%s", out)
	}
	if got, err := os.ReadFile(fw); err != nil || !bytes.Equal(got, image) {
		t.Fatalf("downloaded file differs from the published one (%v)", err)
	}
	if out, err := mountctl(owner, "firmware", "download", "--model", "HM-1", "-o", fw); err == nil || !strings.Contains(out, "--force") {
		t.Fatalf("download over an existing file: %v\n%s", err, out)
	}
	// A rider token for another mount is refused with a clear error.
	other := strings.TrimSpace(must("", "token", "--role", "restricted", "--mount", "SIM-0002"))
	if out, err := mountctl(other, "release-helmet", "SIM-0001"); err == nil || !strings.Contains(out, "does not allow this mount") {
		t.Fatalf("foreign token: %v\n%s", err, out)
	}
	// events prints the log and resumes after the last event printed
	// (association events only: mountsim keeps reporting states meanwhile).
	cursor := filepath.Join(t.TempDir(), "cursor")
	lifecycle := []string{"events", "--types", "ASSOCIATION_REQUESTED,ASSOCIATION_CONFIRMED", "--cursor-file", cursor}
	if out := must(owner, lifecycle...); !strings.Contains(out, "ASSOCIATION_CONFIRMED") || !strings.Contains(out, "SIM-0001") {
		t.Fatalf("events:\n%s", out)
	}
	// Nothing new: said on stderr, rather than nothing at all.
	if out := must(owner, lifecycle...); strings.Contains(out, "ASSOCIATION_") || !strings.Contains(out, "no events after ") ||
		!strings.Contains(out, "--from-start reads from the beginning") {
		t.Fatalf("events again printed what it had printed, or not that nothing is new:\n%s", out)
	}
	if res, body := in.call("POST", "/api/v1/mounts", owner, map[string]any{"uid": "EVT-0001"}); res.StatusCode != 200 {
		t.Fatalf("request an association: %d %s", res.StatusCode, body)
	}
	if out := must(owner, append(lifecycle, "--json")...); strings.Count(out, "\n") != 1 || !strings.Contains(out, `"EVT-0001"`) {
		t.Fatalf("events after one request:\n%s", out)
	}
	// webhooks: the secret is printed once; list and deliveries show it.
	created := must(owner, "webhooks", "create", "https://203.0.113.10/hooks", "--types", "DELETED", "--json")
	var hook struct{ ID, Secret string }
	if err := json.Unmarshal([]byte(created), &hook); err != nil || !strings.HasPrefix(hook.Secret, "whsec_") {
		t.Fatalf("webhooks create:\n%s", created)
	}
	if out := must(owner, "webhooks", "list"); !strings.Contains(out, hook.ID) || !strings.Contains(out, "DELETED") || strings.Contains(out, "whsec_") {
		t.Fatalf("webhooks list:\n%s", out)
	}
	must(owner, "webhooks", "deliveries", hook.ID)
	// watch prints a live report.
	done := make(chan string, 1)
	go func() { out, _ := mountctl(owner, "watch", "SIM-0001", "--count", "1"); done <- out }()
	deadline := time.After(15 * time.Second)
	for i := 0; ; i++ {
		in.call("POST", "/api/v1/mounts/SIM-0001/states", owner, map[string]any{"states": []any{
			entry("BATTERY_LEVEL", fmt.Sprint(40+i%50), time.Now().UTC())}})
		select {
		case out := <-done:
			if !strings.Contains(out, "watching mount SIM-0001") || !strings.Contains(out, "BATTERY_LEVEL=") {
				t.Fatalf("watch:\n%s", out)
			}
			// mountsim's summary counts the mount the phone associated, and
			// it never reported for the two that are not associated.
			if err := sim.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			_ = sim.Wait()
			if s := simOut.String(); !strings.Contains(s, "mounts 3, associated 1,") || !strings.Contains(s, "errors 0,") || !strings.Contains(s, "not associated on the server 0)") {
				t.Fatalf("mountsim summary:\n%s", s)
			}
			return
		case <-deadline:
			t.Fatal("watch printed nothing")
		case <-time.After(300 * time.Millisecond):
		}
	}
}
