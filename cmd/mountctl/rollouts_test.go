package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
)

const fakeRollout = `{"id":"ro_1","modelNumber":"HM-1","softwareRevision":"1.3.0","filter":"","phases":[10,50,100],` +
	`"failureThreshold":5,"minSample":10,"healthWindow":"1h0m0s","requireIdle":true,"state":"%s","pausedReason":%s,` +
	`"openPhase":1,"targets":10,"counts":{"pending":5,"eligible":2,"installing":1,"healthy":1,"failed":1},` +
	`"createdAt":"2026-11-22T01:40:13.123Z","endedAt":null}`

// recorder keeps each request a fake API answered, as line says it, with
// its JSON body.
type recorder struct {
	mu       sync.Mutex
	requests []string
	bodies   []map[string]any
}

// record reads r's body and keeps it with line; it answers the body.
func (f *recorder) record(r *http.Request, line string) map[string]any {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, line)
	f.bodies = append(f.bodies, body)
	return body
}

// last is the latest request kept, and its body.
func (f *recorder) last() (string, map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests[len(f.requests)-1], f.bodies[len(f.bodies)-1]
}

// rolloutServer is a fake API that answers the rollout routes and records
// each request with its body.
type rolloutServer struct{ recorder }

func (f *rolloutServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := f.record(r, r.Method+" "+r.URL.RequestURI()+" "+r.Header.Get("Access-Key"))
	rollout := func(state, reason string) string {
		return strings.Replace(strings.Replace(fakeRollout, "%s", state, 1), "%s", reason, 1)
	}
	w.Header().Set("Content-Type", "application/json")
	switch r.Method + " " + r.URL.Path {
	case "POST /api/v1/rollouts":
		if body["softwareRevision"] == "9.9.9" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"Bad Request","status":400,"code":"VALIDATION_FAILED",`+
				`"detail":"the request is invalid","errors":[{"field":"softwareRevision","message":"is not published for the model"}]}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, rollout("RUNNING", "null"))
	case "GET /api/v1/rollouts":
		_, _ = io.WriteString(w, `{"rollouts":[`+rollout("RUNNING", "null")+`],"pagination":{"currentPage":1,"pageSize":20,"totalItems":1,"totalPages":1}}`)
	case "GET /api/v1/rollouts/ro_1":
		_, _ = io.WriteString(w, rollout("PAUSED", `"FAILURE_THRESHOLD"`))
	case "GET /api/v1/rollouts/ro_1/mounts":
		_, _ = io.WriteString(w, `{"mounts":[`+
			`{"uid":"M1","state":"HEALTHY","phase":0,"commandId":"c1","installingSince":"2026-11-22T01:41:00.000Z","reason":null},`+
			`{"uid":"M2","state":"FAILED","phase":1,"commandId":"c2","installingSince":"2026-11-22T01:42:00.000Z","reason":"rollback"},`+
			`{"uid":"M3","state":"INSTALLING","phase":1,"commandId":"c3","installingSince":"2026-11-22T01:43:00.000Z","reason":null},`+
			`{"uid":"M4","state":"ELIGIBLE","phase":1,"commandId":null,"installingSince":null,"reason":null},`+
			`{"uid":"M5","state":"ELIGIBLE","phase":1,"commandId":null,"installingSince":null,"reason":null}`+
			`],"pagination":{"currentPage":1,"pageSize":5,"totalItems":10,"totalPages":2}}`)
	case "POST /api/v1/rollouts/ro_1/pause":
		_, _ = io.WriteString(w, rollout("PAUSED", `"MANUAL"`))
	case "POST /api/v1/rollouts/ro_1/resume":
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Conflict","status":409,"code":"CONFLICT","detail":"rollout \"ro_1\" is RUNNING"}`)
	case "POST /api/v1/rollouts/ro_1/cancel":
		_, _ = io.WriteString(w, rollout("CANCELED", "null"))
	case "GET /api/v1/firmware/check-update":
		_, _ = io.WriteString(w, `{"code":"UP_TO_DATE"}`)
	default:
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"code":"ROLLOUT_NOT_FOUND","detail":"no such rollout"}`)
	}
}

// TestRolloutsCommand runs `mountctl rollouts` against a fake API: create
// sends only the flags given, show prints the counts and each phase's
// progress, pause/resume/cancel post to their paths, and the API's
// refusals come back as errors naming the code.
func TestRolloutsCommand(t *testing.T) {
	fake := &rolloutServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	run := func(args ...string) (string, error) {
		t.Helper()
		var out, errOut bytes.Buffer
		err := newCommand(&out, &errOut).Run(context.Background(), append([]string{"mountctl", "--api", srv.URL, "--token", "tok"}, args...))
		return out.String(), err
	}
	last := fake.last

	t.Run("create", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want map[string]any
		}{
			{[]string{"--model", "HM-1", "--revision", "1.3.0"}, map[string]any{"modelNumber": "HM-1", "softwareRevision": "1.3.0"}},
			{[]string{"--model", "HM-1", "--revision", "1.3.0", "--filter", `presence = "ONLINE"`, "--phases", "10, 50%,100",
				"--failure-threshold", "0", "--min-sample", "3", "--health-window", "30m", "--require-idle"},
				map[string]any{"modelNumber": "HM-1", "softwareRevision": "1.3.0", "filter": `presence = "ONLINE"`,
					"phases": []any{10.0, 50.0, 100.0}, "failureThreshold": 0.0, "minSample": 3.0, "healthWindow": "30m", "requireIdle": true}},
			{[]string{"--model", "HM-1", "--revision", "1.3.0", "--require-idle=false", "--filter", ""},
				map[string]any{"modelNumber": "HM-1", "softwareRevision": "1.3.0", "requireIdle": false, "filter": ""}},
		} {
			out, err := run(append([]string{"rollouts", "create"}, c.args...)...)
			if err != nil {
				t.Fatalf("%v: %v", c.args, err)
			}
			req, body := last()
			if req != "POST /api/v1/rollouts tok" || !reflect.DeepEqual(body, c.want) {
				t.Errorf("%v sent %s %v, want %v", c.args, req, body, c.want)
			}
			if !strings.Contains(out, "ro_1  RUNNING") || !strings.Contains(out, "HM-1 → 1.3.0") {
				t.Errorf("create printed %q", out)
			}
		}
		if _, err := run("rollouts", "create", "--model", "HM-1", "--revision", "1.3.0", "--phases", "ten"); err == nil ||
			!strings.Contains(err.Error(), "--phases") {
			t.Errorf("bad --phases: %v", err)
		}
		if _, err := run("rollouts", "create", "--model", "HM-1"); err == nil {
			t.Error("create without --revision was accepted")
		}
		if _, err := run("rollouts", "create", "--model", "HM-1", "--revision", "9.9.9"); err == nil ||
			!strings.Contains(err.Error(), "softwareRevision") {
			t.Errorf("refused create: %v", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		out, err := run("rollouts", "list", "--page-size", "5")
		if err != nil {
			t.Fatal(err)
		}
		if req, _ := last(); req != "GET /api/v1/rollouts?currentPage=1&pageSize=5 tok" {
			t.Errorf("list asked %s", req)
		}
		if !strings.Contains(out, "ro_1") || !strings.Contains(out, "page 1 of 1, 1 rollouts") {
			t.Errorf("list printed %q", out)
		}
	})

	t.Run("show", func(t *testing.T) {
		out, err := run("rollouts", "show", "ro_1", "--page-size", "5")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"ro_1  PAUSED (FAILURE_THRESHOLD)",
			"targets 10: pending 5, eligible 2, installing 1, healthy 1, failed 1",
			"phase 1  up to  10%  1 mounts  open, passed",
			"phase 2  up to  50%  4 mounts  open, current",
			"phase 3  up to 100%  5 mounts  waiting",
			`M2                   phase 2  FAILED     c2  installing since 2026-11-22T01:42:00.000Z  "rollback"`,
			"mounts page 1 of 2, 10 mounts",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("show lacks %q:\n%s", want, out)
			}
		}
		// The page does not list every target: no per-phase tally from it.
		if strings.Contains(out, "decided") {
			t.Errorf("show tallied a partial page:\n%s", out)
		}
		if _, err := run("rollouts", "show"); err == nil {
			t.Error("show without an id was accepted")
		}
		if _, err := run("rollouts", "show", "ro_9"); err == nil || !strings.Contains(err.Error(), "ROLLOUT_NOT_FOUND") {
			t.Errorf("show of another account's rollout: %v", err)
		}
		var js bytes.Buffer
		if err := newCommand(&js, io.Discard).Run(context.Background(),
			[]string{"mountctl", "--api", srv.URL, "--token", "tok", "--json", "rollouts", "show", "ro_1"}); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Rollout struct{ State string }
			Mounts  []struct{ UID string }
		}
		if err := json.Unmarshal(js.Bytes(), &doc); err != nil || doc.Rollout.State != "PAUSED" || len(doc.Mounts) != 5 {
			t.Errorf("show --json %s", js.String())
		}
	})

	t.Run("pause, resume, cancel", func(t *testing.T) {
		out, err := run("rollouts", "pause", "ro_1")
		if req, _ := last(); err != nil || req != "POST /api/v1/rollouts/ro_1/pause tok" || !strings.Contains(out, "PAUSED (MANUAL)") {
			t.Errorf("pause: %v %s %q", err, req, out)
		}
		if _, err := run("rollouts", "resume", "ro_1"); err == nil || !strings.Contains(err.Error(), "CONFLICT") {
			t.Errorf("resume in the wrong state: %v", err)
		}
		out, err = run("rollouts", "cancel", "ro_1")
		if req, _ := last(); err != nil || req != "POST /api/v1/rollouts/ro_1/cancel tok" || !strings.Contains(out, "CANCELED") {
			t.Errorf("cancel: %v %s %q", err, req, out)
		}
	})

	t.Run("firmware check for a mount", func(t *testing.T) {
		if _, err := run("firmware", "check", "--model", "HM-1", "--revision", "1.3.0", "--mount", "M1"); err != nil {
			t.Fatal(err)
		}
		req, _ := last()
		if !strings.HasPrefix(req, "GET /api/v1/firmware/check-update?") || !strings.Contains(req, "mountUid=M1") {
			t.Errorf("check asked %s", req)
		}
	})
}

func TestPhaseStatus(t *testing.T) {
	for _, c := range []struct {
		state string
		open  int
		want  []string
	}{
		{"RUNNING", 1, []string{"open, passed", "open, current", "waiting"}},
		{"PAUSED", 0, []string{"open, current", "waiting", "waiting"}},
		{"COMPLETED", 2, []string{"open, passed", "open, passed", "open, last"}},
		{"CANCELED", 1, []string{"open, passed", "canceled", "canceled"}},
		{"CANCELED", 2, []string{"open, passed", "open, passed", "canceled"}},
	} {
		r := rolloutView{State: c.state, OpenPhase: c.open, Phases: []int{10, 50, 100}}
		for i, want := range c.want {
			if got := phaseStatus(r, i); got != want {
				t.Errorf("%s open %d: phase %d %q, want %q", c.state, c.open, i, got, want)
			}
		}
	}
}

func TestParsePhases(t *testing.T) {
	if got, err := parsePhases("1, 10,50%,100"); err != nil || !slices.Equal(got, []int{1, 10, 50, 100}) {
		t.Errorf("parsePhases = %v, %v", got, err)
	}
}

func TestDescribeRolloutEvent(t *testing.T) {
	raw := `{"id":"e1","type":"ROLLOUT_PAUSED","uid":null,"mount":null,"occurredAt":"2026-11-22T01:50:00.000Z","rollout":` +
		strings.Replace(strings.Replace(fakeRollout, "%s", "PAUSED", 1), "%s", `"FAILURE_THRESHOLD"`, 1) + `}`
	got := describeEvent(json.RawMessage(raw))
	want := "rollout ro_1 PAUSED FAILURE_THRESHOLD HM-1 1.3.0 phase 2 of 3 pending=5 eligible=2 installing=1 healthy=1 failed=1"
	if !strings.Contains(got, want) || !strings.HasPrefix(got, "2026-11-22T01:50:00.000Z  ROLLOUT_PAUSED") {
		t.Errorf("describeEvent = %q, want it to hold %q", got, want)
	}
}
