package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// TestMountctlOutlivesTokensAndRestarts: watch and events --follow, with
// client credentials and no token, run across several token lifetimes
// (MOUNTD_TOKEN_TTL=4s) and a restart of the mountd they talk to (stopped
// with SIGTERM, another started on the same address and database): they
// print every report made before, during and after, once each, in order.
func TestMountctlOutlivesTokensAndRestarts(t *testing.T) {
	t.Parallel() // it waits for tokens to expire: other waits overlap
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		data := t.TempDir()
		outlive(t, addr, []string{"MOUNTD_DATABASE_URL=sqlite://" + filepath.Join(data, "mountd.db"), "MOUNTD_DATA_DIR=" + data,
			"MOUNTD_MASTER_KEY=" + strings.Repeat("cd", 32), "MOUNTD_PUBLIC_URL=http://" + addr, "MOUNTD_PROJECT_ID=mountd",
			"MOUNTD_IDP_NAME=mountd", "MOUNTD_LOG_LEVEL=warn", "MOUNTD_TOKEN_TTL=4s"})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		redisURL, prefix := testenv.RedisURL(t)
		outlive(t, addr, replicaEnv(t, testenv.PostgresURL(t), redisURL, "http://"+addr, "MOUNTD_TOKEN_TTL=4s",
			"MOUNTD_REDIS_PREFIX="+prefix)) // the last of a name wins
	})
}

func outlive(t *testing.T, addr string, env []string) {
	bin := mountctlBinary(t)
	p := startProc(t, addr, env)
	api, creds := p.ownerClient(t, "Fleet")
	associate(t, api, "LONG-0001")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(args ...string) (stdout, stderr *syncBuffer, wait func()) {
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + p.base,
			"MOUNTCTL_CLIENT_ID=" + creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + creds.ClientSecret}
		stdout, stderr = &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return stdout, stderr, func() { _ = cmd.Wait() }
	}
	watchOut, watchErr, waitWatch := run("--json", "watch", "LONG-0001")
	followOut, followErr, waitFollow := run("--json", "events", "--follow", "--types", "STATES_REPORTED",
		"--cursor-file", filepath.Join(t.TempDir(), "cursor"))
	defer func() { cancel(); waitWatch(); waitFollow() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(watchErr.String(), "watching mount") ||
		!strings.Contains(followErr.String(), "following"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mountctl did not start:\nwatch: %s\nevents: %s", watchErr, followErr)
		}
	}

	// watch says so once its subscription is sent; give the server a moment
	// to register it (a report before that is not live for it, and it has
	// no cursor yet).
	time.Sleep(time.Second)

	var want []string
	post := func(n int) {
		for range n {
			v := len(want) + 1
			for !report(t, api, "LONG-0001", v, time.Now().UTC()) {
				time.Sleep(100 * time.Millisecond)
			}
			want = append(want, fmt.Sprint(v))
			time.Sleep(500 * time.Millisecond)
		}
	}
	waitAll := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			w, f := battery(watchOut.String()), battery(followOut.String())
			if strings.Join(w, ",") == strings.Join(want, ",") && strings.Join(f, ",") == strings.Join(want, ",") {
				return
			}
			if time.Now().After(deadline) || len(w) > len(want) || len(f) > len(want) {
				t.Fatalf("%s: want %v\nwatch printed  %v (stderr: %s)\nevents printed %v (stderr: %s)\nmountd: %s",
					what, want, w, watchErr, f, followErr, p.out)
			}
		}
	}
	// Three token lifetimes: the socket is closed at each expiry (4403)
	// and the long poll's token is renewed.
	post(24)
	waitAll("across token lifetimes")
	if !strings.Contains(watchErr.String(), "reconnected") {
		t.Errorf("watch did not reconnect after its token expired:\n%s", watchErr)
	}

	// The server restarts: SIGTERM closes the sockets with 1001; the
	// clients retry until another process answers on the same address.
	before := len(watchErr.String())
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	p = startProc(t, addr, env)
	api = p.clientFor(creds)
	post(6)
	waitAll("across a restart")
	// It says why in words: the server going away, or (when the token's
	// lifetime ended just then) the expiry, or (when the stop came during
	// that reconnection) the refused connections: "replica gone".
	if after := watchErr.String()[before:]; !strings.Contains(after, "going away") && !strings.Contains(after, "token expired") &&
		!strings.Contains(after, "replica gone") {
		t.Errorf("watch did not say why it reconnected:\n%s", watchErr)
	}
	// In words, one line per outage: not the raw dial errors of each attempt.
	if strings.Contains(watchErr.String(), "dial tcp") || strings.Contains(followErr.String(), "dial tcp") {
		t.Errorf("a raw dial error reached the operator:\nwatch: %s\nevents: %s", watchErr, followErr)
	}
}

// TestMountctlSaysWhatHappened: errors of watch and events name the cause
// (a mount that does not exist, a token refused), not a close code or JSON.
func TestMountctlSaysWhatHappened(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	mountctl := func(env []string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base}, env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("mountctl %v succeeded:\n%s", args, out)
		}
		return string(out)
	}
	creds := []string{"MOUNTCTL_CLIENT_ID=" + acc.ClientID, "MOUNTCTL_CLIENT_SECRET=" + acc.ClientSecret}
	if out := mountctl(creds, "watch", "NOPE-0001"); !strings.Contains(out, "not found") || strings.Contains(out, "{") {
		t.Errorf("watch of an unknown mount:\n%s", out)
	}
	for _, args := range [][]string{{"watch", "NOPE-0001"}, {"events", "--follow"}} {
		if out := mountctl([]string{"MOUNTCTL_TOKEN=not-a-token"}, args...); !strings.Contains(out, "refused the token") ||
			!strings.Contains(out, "MOUNTCTL_CLIENT_ID") || strings.Contains(out, "4403") {
			t.Errorf("%v with a refused token:\n%s", args, out)
		}
	}
}

// TestMountctlWebhooksAndPages: the webhook subcommands beyond create (a
// test delivery included), and page errors naming mountctl's flags.
func TestMountctlWebhooksAndPages(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	mountctl := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
			"MOUNTCTL_CLIENT_ID=" + acc.ClientID, "MOUNTCTL_CLIENT_SECRET=" + acc.ClientSecret}
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
	for _, args := range [][]string{{"mounts", "list", "--page-size", "1000"}, {"webhooks", "list", "--page-size", "0"}} {
		if out, err := mountctl(args...); err == nil || !strings.Contains(out, "--page-size") || strings.Contains(out, "; pageSize") {
			t.Errorf("%v: %v\n%s", args, err, out)
		}
	}
	var hook struct{ ID, Secret string }
	if err := json.Unmarshal([]byte(must("--json", "webhooks", "create", "https://203.0.113.10/hooks")), &hook); err != nil {
		t.Fatal(err)
	}
	if out := must("webhooks", "disable", hook.ID); !strings.Contains(out, "disabled") {
		t.Errorf("disable:\n%s", out)
	}
	if out := must("webhooks", "enable", hook.ID); !strings.Contains(out, "enabled") {
		t.Errorf("enable:\n%s", out)
	}
	if out := must("webhooks", "rotate-secret", hook.ID); !strings.Contains(out, "whsec_") || strings.Contains(out, hook.Secret) {
		t.Errorf("rotate-secret:\n%s", out)
	}
	// 203.0.113.10 (TEST-NET-3) answers nothing: a failed test exits non-zero.
	if out, err := mountctl("webhooks", "test", hook.ID); err == nil || !strings.Contains(out, "FAILED") || !strings.Contains(out, "did not accept") {
		t.Errorf("test of an unreachable receiver: %v\n%s", err, out)
	}
	if out, err := mountctl("webhooks", "test", hook.ID); err == nil || !strings.Contains(out, "RATE_LIMITED") {
		t.Errorf("a second test at once: %v\n%s", err, out)
	}
	must("webhooks", "delete", hook.ID)
	if out := must("webhooks", "list"); strings.Contains(out, hook.ID) {
		t.Errorf("deleted webhook still listed:\n%s", out)
	}
	if out, err := mountctl("webhooks", "delete", hook.ID); err == nil || !strings.Contains(out, "WEBHOOK_NOT_FOUND") {
		t.Errorf("delete twice: %v\n%s", err, out)
	}
}

// TestMountctlListsAllAndFirmware: mounts list --all pages through every
// mount; firmware list and check show the catalogue.
func TestMountctlListsAllAndFirmware(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	mountctl := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
			"MOUNTCTL_CLIENT_ID=" + acc.ClientID, "MOUNTCTL_CLIENT_SECRET=" + acc.ClientSecret}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	api := client.New(in.base, client.CredentialsSource(client.ClientCredentials(in.base, acc.ClientID, acc.ClientSecret,
		[]string{"openid", "sub", audItem}), nil))
	for i := range 101 {
		associate(t, api, fmt.Sprintf("ALL-%04d", i))
	}
	out := mountctl("mounts", "list", "--all")
	if !strings.Contains(out, "ALL-0000") || !strings.Contains(out, "ALL-0100") || !strings.Contains(out, "101 mounts") {
		t.Errorf("mounts list --all:\n%s", out)
	}
	var all struct {
		Mounts     []mountView `json:"mounts"`
		TotalItems int         `json:"totalItems"`
	}
	if err := json.Unmarshal([]byte(mountctl("--json", "mounts", "list", "--all")), &all); err != nil || len(all.Mounts) != 101 || all.TotalItems != 101 {
		t.Errorf("mounts list --all --json: %v, %d mounts, total %d", err, len(all.Mounts), all.TotalItems)
	}

	in.publish(t, "HM-1", "1.3.0", 1000)
	in.publish(t, "HM-1", "1.4.0", 1000)
	if out := mountctl("firmware", "list", "--model", "HM-1"); !strings.Contains(out, "HM-1 1.3.0") || !strings.Contains(out, "HM-1 1.4.0") {
		t.Errorf("firmware list:\n%s", out)
	}
	if out := mountctl("firmware", "check", "--model", "HM-1", "--revision", "1.3.0"); !strings.Contains(out, "UPDATE_AVAILABLE: HM-1 1.4.0") {
		t.Errorf("firmware check (older):\n%s", out)
	}
	if out := mountctl("firmware", "check", "--model", "HM-1", "--revision", "1.4.0"); strings.TrimSpace(out) != "UP_TO_DATE" {
		t.Errorf("firmware check (latest):\n%s", out)
	}
}
