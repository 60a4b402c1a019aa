package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMountctlCommandsAndReceipts: mountctl mounts commands lists each
// command with its id, code, status, statusAt, reason and verified, and
// mountctl watch prints a receipt as a line when it arrives.
func TestMountctlCommandsAndReceipts(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Fleet")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
		"MOUNTCTL_CLIENT_ID=" + a.creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + a.creds.ClientSecret}
	d := newDevice("MC-1")
	a.associate(t, "MC-1", map[string]any{"devicePublicKey": d.publicKey()})
	a.confirm(t, "MC-1")
	refused := a.issue(t, "MC-1", "code=SET_RFID_MODE&rfidMode=LEARN")
	executed := a.issue(t, "MC-1", "code=RELEASE_HELMET")
	res, raw := a.call("POST", "/api/v1/mounts/MC-1/commands/receipts", receipts(d.receipt(refused.ID, "REFUSED", "stale command", time.Now())))
	if res.StatusCode != 200 {
		t.Fatalf("receipt: %d %s", res.StatusCode, raw)
	}

	// watch, subscribed before the receipt it is to print.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	watch := exec.CommandContext(ctx, bin, "watch", "--count", "1", "MC-1")
	watch.Env = env
	stdout, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := watch.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = watch.Wait() }()
	if sc := bufio.NewScanner(stderr); !sc.Scan() || !strings.Contains(sc.Text(), "watching mount MC-1") {
		t.Fatalf("watch did not start: %q", sc.Text())
	}
	time.Sleep(500 * time.Millisecond) // the subscription reaches the server
	res, raw = a.call("POST", "/api/v1/mounts/MC-1/commands/receipts", receipts(d.receipt(executed.ID, "EXECUTED", "", time.Now())))
	if res.StatusCode != 200 {
		t.Fatalf("receipt: %d %s", res.StatusCode, raw)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		t.Fatalf("watch printed nothing: %v", sc.Err())
	}
	if line := sc.Text(); !strings.Contains(line, "MC-1") || !strings.Contains(line, executed.ID) || !strings.Contains(line, "RELEASE_HELMET") ||
		!strings.Contains(line, "EXECUTED") || !strings.Contains(line, "verified=true") {
		t.Fatalf("watch's receipt line: %q", line)
	}

	cmd := exec.Command(bin, "mounts", "commands", "MC-1")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("mounts commands: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	// Newest first: the release, the RFID mode, ASSOCIATE_OWNER; then the page line.
	if len(lines) != 4 || !strings.HasPrefix(lines[0], executed.ID) || !strings.Contains(lines[0], "EXECUTED") || !strings.Contains(lines[0], "verified=true") ||
		!strings.HasPrefix(lines[1], refused.ID) || !strings.Contains(lines[1], "REFUSED") || !strings.Contains(lines[1], `reason="stale command"`) ||
		!strings.Contains(lines[2], "ASSOCIATE_OWNER") || !strings.Contains(lines[2], "ISSUED") || lines[3] != "page 1 of 1, 3 commands" ||
		!strings.HasSuffix(lines[0], ` by "Fleet API client"`) || !strings.HasSuffix(lines[2], ` by "Fleet API client"`) {
		t.Fatalf("mounts commands:\n%s", out)
	}
}
