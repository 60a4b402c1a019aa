package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestMountctlRollouts runs the real mountctl against a real mountd:
// rollouts create with every flag, list, show (counts per state, each
// phase's progress, the mounts), pause, resume, cancel and their
// conflicts with the problem's code; firmware check --mount; events
// prints a rollout event; bad flags exit 1 with the reason.
func TestMountctlRollouts(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Fleet")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
			"MOUNTCTL_CLIENT_ID=" + a.creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + a.creds.ClientSecret}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	in.publish(t, "HM-C", "1.0.0", 32)
	in.publish(t, "HM-C", "1.1.0", 48)
	uids := []string{"RC-0001", "RC-0002", "RC-0003", "RC-0004"}
	for _, uid := range uids {
		a.associate(t, uid, map[string]any{"modelNumber": "HM-C", "softwareRevision": "1.0.0", "devicePublicKey": newDevice(uid).publicKey()})
		a.confirm(t, uid)
	}

	var ro rolloutView
	if err := json.Unmarshal([]byte(must("--json", "rollouts", "create", "--model", "HM-C", "--revision", "1.1.0",
		"--phases", "50,100", "--failure-threshold", "20", "--min-sample", "2", "--health-window", "10m", "--require-idle=false",
		"--filter", `modelNumber = "HM-C"`)), &ro); err != nil {
		t.Fatal(err)
	}
	if ro.ID == "" || ro.State != "RUNNING" || ro.Targets != 4 || ro.Counts != (rolloutCountsView{Pending: 2, Eligible: 2}) ||
		ro.HealthWindow != "10m0s" || ro.RequireIdle || ro.FailureThreshold != 20 || ro.MinSample != 2 || ro.Filter != `modelNumber = "HM-C"` {
		t.Fatalf("created %+v", ro)
	}
	if out := must("rollouts", "list"); !strings.Contains(out, ro.ID+"  RUNNING") || !strings.Contains(out, "HM-C → 1.1.0") ||
		!strings.Contains(out, "1 rollouts") {
		t.Errorf("rollouts list:\n%s", out)
	}
	out := must("rollouts", "show", ro.ID)
	for _, want := range []string{
		"targets 4: pending 2, eligible 2, installing 0, healthy 0, failed 0",
		"phase 1  up to  50%  2 mounts  open, current  decided 0/2",
		"phase 2  up to 100%  2 mounts  waiting  decided 0/2",
		"ELIGIBLE", "PENDING", "mounts page 1 of 1, 4 mounts",
		"failure threshold 20% of at least 2  health window 10m0s  require idle false",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rollouts show lacks %q:\n%s", want, out)
		}
	}
	if out := must("rollouts", "show", ro.ID, "--page-size", "1"); !strings.Contains(out, "mounts page 1 of 4, 4 mounts") || strings.Contains(out, "decided") {
		t.Errorf("rollouts show, one target a page:\n%s", out)
	}
	for uid, target := range a.rolloutMounts(t, ro.ID) {
		want := "UP_TO_DATE" // PENDING: the catalogue below 1.1.0
		if target.State == "ELIGIBLE" {
			want = "UPDATE_AVAILABLE: HM-C 1.1.0"
		}
		if out := must("firmware", "check", "--model", "HM-C", "--revision", "1.0.0", "--mount", uid); !strings.HasPrefix(out, want) {
			t.Errorf("firmware check --mount %s (%s):\n%s, want %s", uid, target.State, out, want)
		}
	}
	if out := must("events", "--from-start", "--types", "ROLLOUT_PHASE_OPENED", "--cursor-file", t.TempDir()+"/cursor"); !strings.Contains(out, "ROLLOUT_PHASE_OPENED") ||
		!strings.Contains(out, "rollout "+ro.ID+" RUNNING HM-C 1.1.0 phase 1 of 2") {
		t.Errorf("events --types ROLLOUT_PHASE_OPENED:\n%s", out)
	}

	if out := must("rollouts", "pause", ro.ID); !strings.Contains(out, "PAUSED (MANUAL)") {
		t.Errorf("rollouts pause:\n%s", out)
	}
	if out, err := run("rollouts", "pause", ro.ID); err == nil || !strings.Contains(out, "409 CONFLICT") {
		t.Errorf("pause twice: %v\n%s", err, out)
	}
	if out := must("rollouts", "resume", ro.ID); !strings.Contains(out, "RUNNING") {
		t.Errorf("rollouts resume:\n%s", out)
	}
	if out := must("rollouts", "cancel", ro.ID); !strings.Contains(out, "CANCELED") || !strings.Contains(out, "ended ") {
		t.Errorf("rollouts cancel:\n%s", out)
	}
	for _, verb := range []string{"pause", "resume", "cancel"} {
		if out, err := run("rollouts", verb, ro.ID); err == nil || !strings.Contains(out, "409 CONFLICT") {
			t.Errorf("%s a canceled rollout: %v\n%s", verb, err, out)
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"rollouts", "show", "ro_nonexistent"}, "404 ROLLOUT_NOT_FOUND"},
		{[]string{"rollouts", "show"}, "give the rollout's id"},
		{[]string{"rollouts", "create", "--model", "HM-C"}, "revision"},
		{[]string{"rollouts", "create", "--model", "HM-C", "--revision", "1.1.0", "--phases", "half"}, "--phases"},
		{[]string{"rollouts", "create", "--model", "HM-C", "--revision", "9.9.9"}, "400 VALIDATION_FAILED"},
		{[]string{"rollouts", "create", "--model", "HM-C", "--revision", "1.1.0", "--phases", "50,90"}, "phases"},
		{[]string{"rollouts", "create", "--model", "HM-C", "--revision", "1.1.0", "--health-window", "1y"}, "healthWindow"},
		{[]string{"rollouts", "create", "--model", "HM-C", "--revision", "1.1.0", "--filter", "voltage < 3"}, "filter"},
	} {
		out, err := run(c.args...)
		if err == nil || !strings.Contains(out, c.want) || strings.Contains(out, "INTERNAL") {
			t.Errorf("mountctl %v: %v, want an error saying %q\n%s", c.args, err, c.want, out)
		}
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() != 1 {
			t.Errorf("mountctl %v: exit %d, want 1", c.args, ee.ExitCode())
		}
	}
}
