package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/mountd/mountd/client"
)

// TestMountctlJobs runs the real mountctl against a real mountd: jobs
// create (by --mount and by --filter, with --param), list, show (counts
// and the mounts' statuses, paged), cancel, cancel again refused with the
// problem's code; mounts list --filter; bad flags and bad filters exit 1
// with the reason, never INTERNAL.
func TestMountctlJobs(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base,
			"MOUNTCTL_CLIENT_ID=" + acc.ClientID, "MOUNTCTL_CLIENT_SECRET=" + acc.ClientSecret}
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
	api := client.New(in.base, client.CredentialsSource(client.ClientCredentials(in.base, acc.ClientID, acc.ClientSecret,
		[]string{"openid", "sub", audItem}), nil))
	for _, uid := range []string{"JOB-0001", "JOB-0002", "JOB-0003"} {
		associate(t, api, uid)
	}

	var job struct {
		ID      string         `json:"id"`
		State   string         `json:"state"`
		Targets int            `json:"targets"`
		Params  map[string]any `json:"params"`
		Counts  map[string]int `json:"counts"`
	}
	if err := json.Unmarshal([]byte(must("--json", "jobs", "create", "--code", "configure_alarm", "--param", "alarmMode=ON",
		"--param", "alarmSensitivity=LOW", "--param", "alarmVolume=HIGH", "--mount", "JOB-0001", "--mount", "JOB-0002",
		"--description", "night mode", "--expires-at", "48h")), &job); err != nil {
		t.Fatal(err)
	}
	if job.ID == "" || job.State != "ACTIVE" || job.Targets != 2 || job.Params["alarmMode"] != "ON" || job.Counts["pending"] != 2 {
		t.Fatalf("created %+v", job)
	}
	out := must("jobs", "create", "--code", "RELEASE_HELMET", "--filter", `uid = "JOB-0003"`)
	if !strings.Contains(out, "ACTIVE") || !strings.Contains(out, "1 targets") || !strings.Contains(out, `filter "uid = \"JOB-0003\""`) {
		t.Errorf("create by filter:\n%s", out)
	}
	byFilter := strings.Fields(out)[0]
	if out := must("jobs", "list"); !strings.Contains(out, job.ID) || !strings.Contains(out, byFilter) || !strings.Contains(out, "2 jobs") ||
		strings.Index(out, byFilter) > strings.Index(out, job.ID) {
		t.Errorf("jobs list (newest first):\n%s", out)
	}
	out = must("jobs", "show", job.ID, "--page-size", "1")
	if !strings.Contains(out, "pending=2 issued=0 executed=0") || !strings.Contains(out, "JOB-0001") || strings.Contains(out, "JOB-0002") ||
		!strings.Contains(out, "PENDING") || !strings.Contains(out, "mounts page 1 of 2, 2 mounts") {
		t.Errorf("jobs show, page 1:\n%s", out)
	}
	if out := must("jobs", "show", job.ID, "--page-size", "1", "--page", "2"); !strings.Contains(out, "JOB-0002") || strings.Contains(out, "JOB-0001") {
		t.Errorf("jobs show, page 2:\n%s", out)
	}
	if out := must("jobs", "cancel", job.ID); !strings.Contains(out, "CANCELED") {
		t.Errorf("jobs cancel:\n%s", out)
	}
	if out, err := run("jobs", "cancel", job.ID); err == nil || !strings.Contains(out, "409 CONFLICT") {
		t.Errorf("cancel twice: %v\n%s", err, out)
	}
	if out, err := run("jobs", "show", "job_nonexistent"); err == nil || !strings.Contains(out, "404 JOB_NOT_FOUND") {
		t.Errorf("show an unknown job: %v\n%s", err, out)
	}

	// A job that selects nothing completes at once; mountctl events prints
	// its JOB_COMPLETED, which has no mount.
	out = must("jobs", "create", "--code", "RELEASE_HELMET", "--filter", `uid = "NOT-HERE"`)
	if !strings.Contains(out, "COMPLETED") || !strings.Contains(out, "0 targets") {
		t.Errorf("a job without targets:\n%s", out)
	}
	empty := strings.Fields(out)[0]
	if out := must("events", "--from-start", "--types", "JOB_COMPLETED", "--cursor-file", t.TempDir()+"/cursor"); !strings.Contains(out, "JOB_COMPLETED") ||
		!strings.Contains(out, "job "+empty+" COMPLETED RELEASE_HELMET pending=0") {
		t.Errorf("events --types JOB_COMPLETED:\n%s", out)
	}

	if out := must("mounts", "list", "--filter", `uid = "JOB-0002" OR uid = "JOB-0003"`); !strings.Contains(out, "JOB-0002") ||
		!strings.Contains(out, "JOB-0003") || strings.Contains(out, "JOB-0001") || !strings.Contains(out, "2 mounts") {
		t.Errorf("mounts list --filter:\n%s", out)
	}
	if out := must("mounts", "list", "--all", "--filter", `associationState = "ASSOCIATED"`); !strings.Contains(out, "3 mounts") {
		t.Errorf("mounts list --all --filter:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mounts", "list", "--filter", "batteryLevel <"}, "400 VALIDATION_FAILED"},
		{[]string{"mounts", "list", "--filter", "voltage < 3"}, "filter"},
		{[]string{"jobs", "create", "--code", "RELEASE_HELMET"}, "--filter or --mount"},
		{[]string{"jobs", "create", "--code", "RELEASE_HELMET", "--filter", "", "--mount", "JOB-0001"}, "--filter or --mount"},
		{[]string{"jobs", "create", "--code", "RELEASE_HELMET", "--mount", "JOB-0001", "--param", "x"}, "NAME=VALUE"},
		{[]string{"jobs", "create", "--code", "RELEASE_HELMET", "--mount", "JOB-0001", "--expires-at", "never"}, "--expires-at"},
		{[]string{"jobs", "create", "--code", "EXPLODE", "--mount", "JOB-0001"}, "400 VALIDATION_FAILED"},
		{[]string{"jobs", "create", "--code", "RELEASE_HELMET", "--filter", "voltage < 3"}, "filter"},
		{[]string{"jobs", "show"}, "give the job's id"},
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
