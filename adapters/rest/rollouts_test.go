package rest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/adapters/rest/openapitest"
	"github.com/mountd/mountd/core"
)

// fakeRollouts keeps rollouts by account with the rules the transport
// relies on: another account's rollout is ROLLOUT_NOT_FOUND, one RUNNING
// or PAUSED rollout per model, pause/resume/cancel only from their
// states. It records the input of the last creation.
type fakeRollouts struct {
	mu       sync.Mutex
	rollouts map[string]core.Rollout
	last     core.RolloutInput
	at       time.Time
}

func (f *fakeRollouts) CreateRollout(_ context.Context, p core.Principal, in core.RolloutInput) (core.Rollout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = in
	if in.SoftwareRevision != "1.3.0" {
		return core.Rollout{}, &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: "softwareRevision", Message: "is not published for the model"}}}
	}
	for _, r := range f.rollouts {
		if r.AccountID == p.AccountID && r.ModelNumber == in.ModelNumber && (r.State == core.RolloutRunning || r.State == core.RolloutPaused) {
			return core.Rollout{}, core.Errorf(core.CodeConflict, "model %s has a rollout", in.ModelNumber)
		}
	}
	if in.Phases != nil && len(in.Phases) == 0 {
		return core.Rollout{}, &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: "phases", Message: "must hold 1 to 10 percentages"}}}
	}
	phases := in.Phases
	if phases == nil {
		phases = core.DefaultRolloutPhases
	}
	r := core.Rollout{ID: fmt.Sprintf("ro_%d", len(f.rollouts)+1), AccountID: p.AccountID, ModelNumber: in.ModelNumber,
		SoftwareRevision: in.SoftwareRevision, Phases: phases, FailureThreshold: 5, MinSample: 10,
		HealthWindow: time.Hour, State: core.RolloutRunning, Targets: 3, Counts: core.RolloutCounts{Eligible: 1, Pending: 2},
		CreatedAt: f.at}
	f.rollouts[r.ID] = r
	return r, nil
}

func (f *fakeRollouts) ListRollouts(_ context.Context, p core.Principal, page core.Page) ([]core.Rollout, core.Pagination, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []core.Rollout
	for _, r := range f.rollouts {
		if r.AccountID == p.AccountID {
			out = append(out, r)
		}
	}
	return out, core.NewPagination(page, len(out)), nil
}

func (f *fakeRollouts) Rollout(_ context.Context, p core.Principal, id string) (core.Rollout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.rollouts[id]
	if !ok || r.AccountID != p.AccountID {
		return core.Rollout{}, core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
	}
	return r, nil
}

func (f *fakeRollouts) RolloutMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.RolloutTarget, core.Pagination, error) {
	if _, err := f.Rollout(ctx, p, id); err != nil {
		return nil, core.Pagination{}, err
	}
	targets := []core.RolloutTarget{
		{RolloutID: id, UID: "M1", State: core.TargetStateInstalling, CommandID: nonce, InstallingSince: f.at},
		{RolloutID: id, UID: "M2", Phase: 1, State: core.TargetStatePending},
		{RolloutID: id, UID: "M3", Phase: 1, State: core.TargetStateFailed, CommandID: nonce, InstallingSince: f.at, Reason: "rollback"},
	}
	return targets, core.NewPagination(page, len(targets)), nil
}

func (f *fakeRollouts) change(ctx context.Context, p core.Principal, id string, from []core.RolloutState, to core.RolloutState) (core.Rollout, error) {
	r, err := f.Rollout(ctx, p, id)
	if err != nil {
		return core.Rollout{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range from {
		if r.State == s {
			r.State, r.PausedReason = to, ""
			if to == core.RolloutPaused {
				r.PausedReason = core.PausedManual
			}
			if to == core.RolloutCanceled {
				r.EndedAt = f.at.Add(time.Minute)
			}
			f.rollouts[id] = r
			return r, nil
		}
	}
	return core.Rollout{}, core.Errorf(core.CodeConflict, "rollout %q is %s", id, r.State)
}

func (f *fakeRollouts) PauseRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, []core.RolloutState{core.RolloutRunning}, core.RolloutPaused)
}

func (f *fakeRollouts) ResumeRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, []core.RolloutState{core.RolloutPaused}, core.RolloutRunning)
}

func (f *fakeRollouts) CancelRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, []core.RolloutState{core.RolloutRunning, core.RolloutPaused}, core.RolloutCanceled)
}

// TestRolloutsTransport runs the rollout routes over the real handler tree
// with a fake service: bodies decode strictly naming the field, absent
// fields reach core as nil, roles are refused before the body is read,
// another account's rollout is 404, a change in the wrong state 409, and
// every answer is what openapi.json says.
func TestRolloutsTransport(t *testing.T) {
	v := openapitest.New(t)
	at := time.Date(2026, 11, 22, 1, 40, 13, 123e6, time.UTC)
	expires := time.Now().Add(time.Hour)
	grant := func(role core.Role, uids ...string) core.Grant {
		if uids == nil {
			uids = []string{}
		}
		return core.Grant{Complete: true, Role: role, MountUIDs: uids, Scopes: []string{"openid", "sub"}}
	}
	owner := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires, Grant: grant(core.RoleOwner)}
	other := core.Principal{AccountID: "acc-2", ClientID: "client-2", ExpiresAt: expires, Grant: grant(core.RoleOwner)}
	rider := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires, Grant: grant(core.RoleRestricted, "M1")}
	maintainer := core.Principal{AccountID: "acc-1", ClientID: "client-1", ExpiresAt: expires, Grant: grant(core.RoleRestricted)}
	rollouts := &fakeRollouts{rollouts: map[string]core.Rollout{}, at: at}
	srv := rest.NewServer(rest.Deps{
		Logger:   slog.New(slog.DiscardHandler),
		Verifier: fakeVerifier{"owner": owner, "other": other, "rider": rider, "maintainer": maintainer},
		Rollouts: rollouts,
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	do := func(method, path, token, body string, status int, code string) []byte {
		t.Helper()
		res, got := call(t, ts.URL, method, path, token, body)
		if res.StatusCode != status {
			t.Errorf("%s %s %s: status %d, want %d: %s", method, path, body, res.StatusCode, status, got)
		}
		if code != "" {
			var p struct{ Code string }
			if err := json.Unmarshal(got, &p); err != nil || p.Code != code {
				t.Errorf("%s %s %s: code %q, want %q", method, path, body, p.Code, code)
			}
		}
		v.Check(t, res.Request, res, got)
		return got
	}
	field := func(body []byte) string {
		var p struct {
			Errors []struct{ Field string }
		}
		_ = json.Unmarshal(body, &p)
		if len(p.Errors) != 1 {
			return fmt.Sprintf("%d fields", len(p.Errors))
		}
		return p.Errors[0].Field
	}

	t.Run("good bodies reach core as sent", func(t *testing.T) {
		filter, window := `name = "x"`, "5s"
		threshold, sample, idle := 0, 1, true
		for _, c := range []struct {
			body string
			want core.RolloutInput
		}{
			{`{"modelNumber":"HM-A","softwareRevision":"1.3.0"}`, core.RolloutInput{ModelNumber: "HM-A", SoftwareRevision: "1.3.0"}},
			{`{"modelNumber":"HM-B","softwareRevision":"1.3.0","filter":"name = \"x\"","phases":[50,100],"failureThreshold":0,` +
				`"minSample":1,"healthWindow":"5s","requireIdle":true}`,
				core.RolloutInput{ModelNumber: "HM-B", SoftwareRevision: "1.3.0", Filter: &filter, Phases: []int{50, 100},
					FailureThreshold: &threshold, MinSample: &sample, HealthWindow: &window, RequireIdle: &idle}},
			{`{"modelNumber":"HM-C","softwareRevision":"1.3.0","phases":null,"filter":null,"requireIdle":null}`,
				core.RolloutInput{ModelNumber: "HM-C", SoftwareRevision: "1.3.0"}},
			// Given and empty is not absent: core refuses it.
			{`{"modelNumber":"HM-D","softwareRevision":"1.3.0","phases":[]}`,
				core.RolloutInput{ModelNumber: "HM-D", SoftwareRevision: "1.3.0", Phases: []int{}}},
		} {
			status := 201
			if strings.Contains(c.body, "[]") {
				status = 400
			}
			do("POST", "/api/v1/rollouts", "owner", c.body, status, "")
			rollouts.mu.Lock()
			got := rollouts.last
			rollouts.mu.Unlock()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s reached core as %+v, want %+v", c.body, got, c.want)
			}
		}
	})

	t.Run("bad fields", func(t *testing.T) {
		for _, c := range []struct{ body, field string }{
			{`{"modelNumber":5}`, "modelNumber"},
			{`{"softwareRevision":1.3}`, "softwareRevision"},
			{`{"filter":1}`, "filter"},
			{`{"phases":"1,100"}`, "phases"},
			{`{"phases":[1.5,100]}`, "phases"},
			{`{"phases":["1"]}`, "phases"},
			{`{"failureThreshold":"5"}`, "failureThreshold"},
			{`{"failureThreshold":5.5}`, "failureThreshold"},
			{`{"minSample":true}`, "minSample"},
			{`{"healthWindow":3600}`, "healthWindow"},
			{`{"requireIdle":"yes"}`, "requireIdle"},
			{`{"modelNumber":"HM-1","colour":"red"}`, "colour"},
			{`{"modelNumber":"HM-1","softwareRevision":"9.9.9"}`, "softwareRevision"},
		} {
			if got := field(do("POST", "/api/v1/rollouts", "owner", c.body, 400, "VALIDATION_FAILED")); got != c.field {
				t.Errorf("%s: field %s, want %s", c.body, got, c.field)
			}
		}
		for _, body := range []string{``, `[]`, `{"modelNumber":"HM-1"} {}`, `{"modelNumber":`, `null x`} {
			do("POST", "/api/v1/rollouts", "owner", body, 400, "VALIDATION_FAILED")
		}
		do("POST", "/api/v1/rollouts", "owner", `{"filter":"`+strings.Repeat("x", rest.MaxBodyBytes)+`"}`, 413, "PAYLOAD_TOO_LARGE")
		do("GET", "/api/v1/rollouts?pageSize=0", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/rollouts?colour=red", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/rollouts/ro_1/mounts?currentPage=0", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/rollouts/ro_1?verbose=1", "owner", "", 400, "VALIDATION_FAILED")
		do("POST", "/api/v1/rollouts/ro_1/pause?now=1", "owner", "", 400, "VALIDATION_FAILED")
	})

	t.Run("reads, changes, and another account", func(t *testing.T) {
		created := do("POST", "/api/v1/rollouts", "owner", `{"modelNumber":"HM-1","softwareRevision":"1.3.0"}`, 201, "")
		do("POST", "/api/v1/rollouts", "owner", `{"modelNumber":"HM-1","softwareRevision":"1.3.0"}`, 409, "CONFLICT")
		var ro map[string]any
		if err := json.Unmarshal(created, &ro); err != nil {
			t.Fatal(err)
		}
		id := ro["id"].(string)
		if ro["state"] != "RUNNING" || ro["targets"] != 3.0 || ro["createdAt"] != "2026-11-22T01:40:13.123Z" ||
			ro["healthWindow"] != "1h0m0s" || ro["pausedReason"] != nil || ro["endedAt"] != nil || ro["openPhase"] != 0.0 ||
			!reflect.DeepEqual(ro["phases"], []any{1.0, 10.0, 50.0, 100.0}) || ro["filter"] != "" {
			t.Errorf("created rollout %s", created)
		}
		if c := ro["counts"].(map[string]any); len(c) != 5 || c["pending"] != 2.0 || c["eligible"] != 1.0 {
			t.Errorf("counts %v", c)
		}
		var list struct {
			Rollouts   []map[string]any
			Pagination map[string]any
		}
		_ = json.Unmarshal(do("GET", "/api/v1/rollouts", "owner", "", 200, ""), &list)
		if len(list.Rollouts) == 0 || list.Pagination == nil {
			t.Errorf("list %+v", list)
		}
		do("GET", "/api/v1/rollouts/"+id, "owner", "", 200, "")
		mounts := do("GET", "/api/v1/rollouts/"+id+"/mounts?pageSize=50", "owner", "", 200, "")
		var page struct{ Mounts []map[string]any }
		_ = json.Unmarshal(mounts, &page)
		if len(page.Mounts) != 3 || page.Mounts[0]["commandId"] != nonce || page.Mounts[0]["state"] != "INSTALLING" ||
			page.Mounts[0]["installingSince"] != "2026-11-22T01:40:13.123Z" || page.Mounts[1]["commandId"] != nil ||
			page.Mounts[1]["phase"] != 1.0 || page.Mounts[2]["reason"] != "rollback" || page.Mounts[1]["reason"] != nil {
			t.Errorf("rollout mounts %s", mounts)
		}
		for _, path := range []string{"/api/v1/rollouts/" + id, "/api/v1/rollouts/" + id + "/mounts", "/api/v1/rollouts/ro_404"} {
			do("GET", path, "other", "", 404, "ROLLOUT_NOT_FOUND")
		}
		for _, verb := range []string{"pause", "resume", "cancel"} {
			do("POST", "/api/v1/rollouts/"+id+"/"+verb, "other", "", 404, "ROLLOUT_NOT_FOUND")
		}
		var others struct{ Rollouts []any }
		_ = json.Unmarshal(do("GET", "/api/v1/rollouts", "other", "", 200, ""), &others)
		if len(others.Rollouts) != 0 {
			t.Errorf("another account lists %d rollouts", len(others.Rollouts))
		}

		do("POST", "/api/v1/rollouts/"+id+"/resume", "owner", "", 409, "CONFLICT")
		paused := do("POST", "/api/v1/rollouts/"+id+"/pause", "owner", "", 200, "")
		if !strings.Contains(string(paused), `"state":"PAUSED"`) || !strings.Contains(string(paused), `"pausedReason":"MANUAL"`) {
			t.Errorf("paused rollout %s", paused)
		}
		do("POST", "/api/v1/rollouts/"+id+"/pause", "owner", "", 409, "CONFLICT")
		resumed := do("POST", "/api/v1/rollouts/"+id+"/resume", "owner", "", 200, "")
		if !strings.Contains(string(resumed), `"pausedReason":null`) {
			t.Errorf("resumed rollout %s", resumed)
		}
		canceled := do("POST", "/api/v1/rollouts/"+id+"/cancel", "owner", "", 200, "")
		if !strings.Contains(string(canceled), `"state":"CANCELED"`) || !strings.Contains(string(canceled), `"endedAt":"2026-11-22T01:41:13.123Z"`) {
			t.Errorf("canceled rollout %s", canceled)
		}
		for _, verb := range []string{"pause", "resume", "cancel"} {
			do("POST", "/api/v1/rollouts/"+id+"/"+verb, "owner", "", 409, "CONFLICT")
		}
	})

	t.Run("roles", func(t *testing.T) {
		for _, token := range []string{"rider", "maintainer"} {
			// Refused before the body is looked at.
			do("POST", "/api/v1/rollouts", token, `{"colour":`, 403, "FORBIDDEN")
			do("GET", "/api/v1/rollouts", token, "", 403, "FORBIDDEN")
			do("GET", "/api/v1/rollouts/ro_1", token, "", 403, "FORBIDDEN")
			do("GET", "/api/v1/rollouts/ro_1/mounts", token, "", 403, "FORBIDDEN")
			for _, verb := range []string{"pause", "resume", "cancel"} {
				do("POST", "/api/v1/rollouts/ro_1/"+verb, token, "", 403, "FORBIDDEN")
			}
		}
		do("GET", "/api/v1/rollouts", "", "", 401, "UNAUTHENTICATED")
		do("POST", "/api/v1/rollouts/ro_1/pause", "", "", 401, "UNAUTHENTICATED")
	})
}

// TestRolloutEventRendering shows an account-level ROLLOUT_* event as the
// event log and webhooks do: uid and mount null, the rollout under
// "rollout", checked against the document.
func TestRolloutEventRendering(t *testing.T) {
	v := openapitest.New(t)
	at := time.Date(2026, 11, 22, 1, 40, 13, 123e6, time.UTC)
	ro := core.Rollout{ID: "ro_1", AccountID: "acc-1", ModelNumber: "HM-1", SoftwareRevision: "1.3.0", Phases: []int{10, 100},
		FailureThreshold: 5, MinSample: 10, HealthWindow: 90 * time.Second, State: core.RolloutPaused,
		PausedReason: core.PausedFailureThreshold, OpenPhase: 1, Targets: 20,
		Counts: core.RolloutCounts{Pending: 0, Eligible: 10, Installing: 2, Healthy: 3, Failed: 5}, CreatedAt: at}
	ev := core.RolloutEvent(core.EventRolloutPaused, ro, at.Add(time.Minute))
	ev.ID = core.Cursor{Tx: 3, Seq: 7}
	body, err := rest.WebhookBody(core.NewCursorCodec([32]byte{}), time.Minute)(*ev)
	if err != nil {
		t.Fatal(err)
	}
	var hook struct {
		Type string
		Data map[string]any
	}
	if err := json.Unmarshal(body, &hook); err != nil {
		t.Fatal(err)
	}
	r, _ := hook.Data["rollout"].(map[string]any)
	if hook.Type != "ROLLOUT_PAUSED" || hook.Data["uid"] != nil || hook.Data["mount"] != nil || r == nil ||
		r["pausedReason"] != "FAILURE_THRESHOLD" || r["healthWindow"] != "1m30s" || r["openPhase"] != 1.0 || hook.Data["job"] != nil {
		t.Fatalf("webhook body %s", body)
	}
	// The same object is what GET /events lists: check it there.
	data, _ := json.Marshal(map[string]any{"events": []any{hook.Data}, "next": hook.Data["id"]})
	ex := exchange{"rollout event", "GET", "/api/v1/events", 200, map[string]string{"Content-Type": jsonCT}, string(data)}
	if errs := ex.check(t, v); len(errs) > 0 {
		t.Errorf("the rollout event does not match the document: %s", strings.Join(errs, "\n"))
	}
}
