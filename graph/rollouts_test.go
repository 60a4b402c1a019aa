package graph

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/generated"
	"github.com/mountd/mountd/graph/model"
)

// fakeRollouts answers as RolloutService would, and keeps what it was
// asked.
type fakeRollouts struct {
	rollouts map[string]core.Rollout
	targets  []core.RolloutTarget
	created  core.RolloutInput
	page     core.Page
	uid      string
}

func (f *fakeRollouts) CreateRollout(_ context.Context, _ core.Principal, in core.RolloutInput) (core.Rollout, error) {
	f.created = in
	if in.ModelNumber == "HM-9" {
		var v core.Validation
		v.Add("softwareRevision", "is not published for the model")
		return core.Rollout{}, v.Err()
	}
	r := core.Rollout{ID: "rol_new", ModelNumber: in.ModelNumber, SoftwareRevision: in.SoftwareRevision, Phases: in.Phases,
		FailureThreshold: *in.FailureThreshold, MinSample: *in.MinSample, HealthWindow: 30 * time.Minute, RequireIdle: *in.RequireIdle,
		State: core.RolloutRunning, Targets: 3, Counts: core.RolloutCounts{Eligible: 1, Pending: 2}}
	if in.Filter != nil {
		r.Filter = *in.Filter
	}
	return r, nil
}

func (f *fakeRollouts) ListRollouts(_ context.Context, _ core.Principal, p core.Page) ([]core.Rollout, core.Pagination, error) {
	f.page = p
	out := []core.Rollout{}
	for _, r := range f.rollouts {
		out = append(out, r)
	}
	return out, core.Pagination{CurrentPage: p.CurrentPage, PageSize: p.PageSize, TotalItems: len(out), TotalPages: 1}, nil
}

func (f *fakeRollouts) Rollout(_ context.Context, _ core.Principal, id string) (core.Rollout, error) {
	r, ok := f.rollouts[id]
	if !ok {
		return core.Rollout{}, core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
	}
	return r, nil
}

func (f *fakeRollouts) RolloutMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.RolloutTarget, core.Pagination, error) {
	if _, err := f.Rollout(ctx, p, id); err != nil {
		return nil, core.Pagination{}, err
	}
	f.page = page
	return f.targets, core.Pagination{CurrentPage: page.CurrentPage, PageSize: page.PageSize, TotalItems: len(f.targets), TotalPages: 1}, nil
}

// MountRollouts answers rol_1 with its first target for that target's
// mount, nothing for another.
func (f *fakeRollouts) MountRollouts(_ context.Context, _ core.Principal, uid string, page core.Page) ([]core.RolloutOffer, core.Pagination, error) {
	f.page, f.uid = page, uid
	out := []core.RolloutOffer{}
	if uid == f.targets[0].UID {
		out = append(out, core.RolloutOffer{Rollout: f.rollouts["rol_1"], Target: f.targets[0]})
	}
	return out, core.Pagination{CurrentPage: page.CurrentPage, PageSize: page.PageSize, TotalItems: len(out), TotalPages: 1}, nil
}

// change moves a rollout from one of the states from to to, as
// ChangeRolloutState would: CONFLICT from any other.
func (f *fakeRollouts) change(ctx context.Context, p core.Principal, id string, to core.RolloutState, reason string, from ...core.RolloutState) (core.Rollout, error) {
	r, err := f.Rollout(ctx, p, id)
	if err != nil {
		return r, err
	}
	if !slices.Contains(from, r.State) {
		return core.Rollout{}, core.Errorf(core.CodeConflict, "rollout %q is %s", id, r.State)
	}
	r.State, r.PausedReason = to, reason
	f.rollouts[id] = r
	return r, nil
}

func (f *fakeRollouts) PauseRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, core.RolloutPaused, core.PausedManual, core.RolloutRunning)
}

func (f *fakeRollouts) ResumeRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, core.RolloutRunning, "", core.RolloutPaused)
}

func (f *fakeRollouts) CancelRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error) {
	return f.change(ctx, p, id, core.RolloutCanceled, "", core.RolloutRunning, core.RolloutPaused)
}

var rolloutsAt = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func rolloutsResolver() (*Resolver, *fakeRollouts, *fakeLog) {
	ro := &fakeRollouts{rollouts: map[string]core.Rollout{"rol_1": {ID: "rol_1", AccountID: "acc", ModelNumber: "HM-1", SoftwareRevision: "2.1.0",
		Filter: `batteryLevel > 50`, Phases: []int{10, 100}, FailureThreshold: 20, MinSample: 5, HealthWindow: 90 * time.Minute, RequireIdle: true,
		State: core.RolloutPaused, PausedReason: core.PausedFailureThreshold, OpenPhase: 1, Targets: 10,
		Counts:    core.RolloutCounts{Pending: 1, Eligible: 2, Installing: 3, Healthy: 2, Failed: 2},
		CreatedAt: rolloutsAt, SampleHealthy: 2, SampleFailed: 2}},
		targets: []core.RolloutTarget{
			{UID: "M-1", Phase: 0, State: core.TargetStateFailed, CommandID: "cmd1", InstallingSince: rolloutsAt.Add(time.Minute), Reason: "rollback",
				UpdatedAt: rolloutsAt.Add(2 * time.Minute)},
			{UID: "M-2", Phase: 1, State: core.TargetStatePending}}}
	paused := ro.rollouts["rol_1"]
	log := &fakeLog{events: []core.Event{
		{ID: core.Cursor{Tx: 1}, Type: core.EventStatesReported, UID: "M-1", OccurredAt: rolloutsAt},
		{ID: core.Cursor{Tx: 2}, Type: core.EventRolloutPaused, AccountID: "acc", Rollout: &paused, OccurredAt: rolloutsAt},
		{ID: core.Cursor{Tx: 3}, Type: core.EventCommandIssued, UID: "M-1", Command: &core.Command{ID: "cmd1", RolloutID: "rol_1"}, OccurredAt: rolloutsAt},
	}}
	r := &Resolver{RolloutService: ro, EventLog: log, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Cursors: core.NewCursorCodec([32]byte{1})}
	return r, ro, log
}

const rolloutFields = `id modelNumber softwareRevision filter phases failureThreshold minSample healthWindow requireIdle state pausedReason openPhase targets
	counts { pending eligible installing healthy failed } createdAt endedAt`

// TestRolloutResolvers: createRollout hands core the input as REST would
// (fields left out stay nil, for core's defaults), and rollouts, rollout,
// rolloutMounts and the state changes show core's answers and its codes.
func TestRolloutResolvers(t *testing.T) {
	r, ro, _ := rolloutsResolver()
	create := `mutation($in: RolloutInput!) { createRollout(input: $in) { ` + rolloutFields + ` } }`

	a := postGraphQL(t, r, jobsOwner, create, map[string]any{"in": map[string]any{"modelNumber": "HM-1", "softwareRevision": "2.1.0",
		"filter": `presence = "ONLINE"`, "phases": []int{5, 50, 100}, "failureThreshold": 10, "minSample": 3, "healthWindow": "30m", "requireIdle": false}})
	if len(a.Errors) > 0 {
		t.Fatalf("createRollout: %+v", a.Errors)
	}
	in := ro.created
	if in.ModelNumber != "HM-1" || in.SoftwareRevision != "2.1.0" || in.Filter == nil || *in.Filter != `presence = "ONLINE"` ||
		!slices.Equal(in.Phases, []int{5, 50, 100}) || *in.FailureThreshold != 10 || *in.MinSample != 3 || *in.HealthWindow != "30m" || *in.RequireIdle {
		t.Fatalf("core got %+v", in)
	}
	created := a.Data["createRollout"].(map[string]any)
	if created["id"] != "rol_new" || created["state"] != "RUNNING" || created["pausedReason"] != nil || created["healthWindow"] != "30m0s" ||
		created["targets"] != 3.0 || created["counts"].(map[string]any)["eligible"] != 1.0 || created["endedAt"] != nil || created["requireIdle"] != false {
		t.Fatalf("created %v", created)
	}

	// Left out, the optional fields reach core as nil: its defaults apply.
	a = postGraphQL(t, r, jobsOwner, `mutation { createRollout(input: {modelNumber: "HM-9", softwareRevision: "9.9.9"}) { id } }`, nil)
	if in := ro.created; in.Filter != nil || in.Phases != nil || in.FailureThreshold != nil || in.MinSample != nil || in.HealthWindow != nil || in.RequireIdle != nil {
		t.Fatalf("core got %+v", in)
	}
	if errorCode(a) != "VALIDATION_FAILED" || a.Errors[0].Extensions["errors"].([]any)[0].(map[string]any)["field"] != "softwareRevision" {
		t.Fatalf("an unpublished revision: %+v", a.Errors)
	}

	a = postGraphQL(t, r, jobsOwner, `{ rollouts(currentPage: 1, pageSize: 5) { rollouts { `+rolloutFields+` } pagination { pageSize totalItems } } }`, nil)
	if len(a.Errors) > 0 {
		t.Fatalf("rollouts: %+v", a.Errors)
	}
	page := a.Data["rollouts"].(map[string]any)
	listed := page["rollouts"].([]any)[0].(map[string]any)
	counts := listed["counts"].(map[string]any)
	if listed["id"] != "rol_1" || listed["state"] != "PAUSED" || listed["pausedReason"] != "FAILURE_THRESHOLD" || listed["filter"] != "batteryLevel > 50" ||
		listed["healthWindow"] != "1h30m0s" || listed["openPhase"] != 1.0 || listed["createdAt"] != "2026-11-26T12:00:00.000Z" ||
		len(listed["phases"].([]any)) != 2 || listed["phases"].([]any)[1] != 100.0 || counts["installing"] != 3.0 || counts["failed"] != 2.0 ||
		page["pagination"].(map[string]any)["pageSize"] != 5.0 || ro.page.PageSize != 5 {
		t.Fatalf("listed %v", page)
	}

	a = postGraphQL(t, r, jobsOwner, `{ rolloutMounts(id: "rol_1", currentPage: 2, pageSize: 2) { mounts { uid state phase commandId installingSince reason } pagination { currentPage } } }`, nil)
	mounts := a.Data["rolloutMounts"].(map[string]any)["mounts"].([]any)
	first, second := mounts[0].(map[string]any), mounts[1].(map[string]any)
	if first["state"] != "FAILED" || first["commandId"] != "cmd1" || first["installingSince"] != "2026-11-26T12:01:00.000Z" || first["reason"] != "rollback" ||
		second["state"] != "PENDING" || second["phase"] != 1.0 || second["commandId"] != nil || second["installingSince"] != nil || second["reason"] != nil ||
		ro.page.CurrentPage != 2 {
		t.Fatalf("rolloutMounts %v", mounts)
	}

	// A mount's rollouts: each with its target, the failure's reason and
	// when the target last changed; paged and bounded like every list.
	a = postGraphQL(t, r, jobsOwner, `{ mountRollouts(uid: "M-1", currentPage: 1, pageSize: 5) { rollouts { rollout { id softwareRevision state createdAt }
		target { uid state phase commandId reason updatedAt } } pagination { totalItems } } }`, nil)
	if len(a.Errors) > 0 {
		t.Fatalf("mountRollouts: %+v", a.Errors)
	}
	mr := a.Data["mountRollouts"].(map[string]any)["rollouts"].([]any)
	if len(mr) != 1 || ro.uid != "M-1" || ro.page.PageSize != 5 {
		t.Fatalf("mountRollouts %v (asked %s, %+v)", mr, ro.uid, ro.page)
	}
	rollout, target := mr[0].(map[string]any)["rollout"].(map[string]any), mr[0].(map[string]any)["target"].(map[string]any)
	if rollout["id"] != "rol_1" || rollout["softwareRevision"] != "2.1.0" || rollout["state"] != "PAUSED" || rollout["createdAt"] != "2026-11-26T12:00:00.000Z" ||
		target["uid"] != "M-1" || target["state"] != "FAILED" || target["reason"] != "rollback" || target["commandId"] != "cmd1" ||
		target["updatedAt"] != "2026-11-26T12:02:00.000Z" {
		t.Fatalf("mountRollouts %v", mr)
	}
	if a := postGraphQL(t, r, jobsOwner, `{ mountRollouts(uid: "M-2") { rollouts { rollout { id } } } }`, nil); len(a.Errors) > 0 ||
		len(a.Data["mountRollouts"].(map[string]any)["rollouts"].([]any)) != 0 || ro.page.PageSize != 20 {
		t.Fatalf("mountRollouts of M-2: %+v", a)
	}
	for _, size := range []int{0, 1001} {
		if code := errorCode(postGraphQL(t, r, jobsOwner, `query($n: Int) { mountRollouts(uid: "M-1", pageSize: $n) { rollouts { rollout { id } } } }`,
			map[string]any{"n": size})); code != "VALIDATION_FAILED" {
			t.Errorf("mountRollouts(pageSize: %d): %s, want VALIDATION_FAILED", size, code)
		}
	}

	for _, q := range []string{`{ rollout(id: "rol_other") { id } }`, `{ rolloutMounts(id: "rol_other") { mounts { uid } } }`,
		`mutation { pauseRollout(id: "rol_other") { id } }`, `mutation { resumeRollout(id: "rol_other") { id } }`, `mutation { cancelRollout(id: "rol_other") { id } }`} {
		if code := errorCode(postGraphQL(t, r, jobsOwner, q, nil)); code != "ROLLOUT_NOT_FOUND" {
			t.Errorf("%s: %s, want ROLLOUT_NOT_FOUND", q, code)
		}
	}

	// The state changes, each refused in the wrong state.
	for _, step := range []struct{ mutation, state, reason, code string }{
		{"pauseRollout", "", "", "CONFLICT"}, // already PAUSED
		{"resumeRollout", "RUNNING", "", ""},
		{"resumeRollout", "", "", "CONFLICT"},
		{"pauseRollout", "PAUSED", "MANUAL", ""},
		{"cancelRollout", "CANCELED", "", ""},
		{"cancelRollout", "", "", "CONFLICT"},
	} {
		a := postGraphQL(t, r, jobsOwner, `mutation { `+step.mutation+`(id: "rol_1") { state pausedReason } }`, nil)
		if code := errorCode(a); code != step.code {
			t.Fatalf("%s: %s, want %q", step.mutation, code, step.code)
		}
		if step.code != "" {
			continue
		}
		got := a.Data[step.mutation].(map[string]any)
		if reason, _ := got["pausedReason"].(string); got["state"] != step.state || reason != step.reason {
			t.Fatalf("%s: %v", step.mutation, got)
		}
	}
	if code := errorCode(postGraphQL(t, r, jobsOwner, `{ rollouts(pageSize: 0) { rollouts { id } } }`, nil)); code != "VALIDATION_FAILED" {
		t.Fatalf("pageSize 0: %s", code)
	}
}

// TestRolloutAccountEvents: accountEvents carries ROLLOUT_* events with
// the rollout as it was; mountEvents carries the mount's commands with
// their rollout, never the rollout's events.
func TestRolloutAccountEvents(t *testing.T) {
	r, _, log := rolloutsResolver()
	sub := &subscriptionResolver{r}
	ctx, cancel := context.WithCancel(core.WithPrincipal(context.Background(), jobsOwner))
	defer cancel()

	ch, err := sub.AccountEvents(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for e := range ch {
		if e.Job != nil || e.Rollout == nil || e.Rollout.ID != "rol_1" || e.Rollout.State != "PAUSED" || *e.Rollout.PausedReason != "FAILURE_THRESHOLD" {
			t.Fatalf("event %+v", e)
		}
		got = append(got, string(e.Type))
	}
	if !slices.Equal(got, []string{"ROLLOUT_PAUSED"}) {
		t.Fatalf("accountEvents delivered %v", got)
	}

	// Asked for other types only, the log is asked for those.
	ch, err = sub.AccountEvents(ctx, nil, []model.AccountEventType{model.AccountEventTypeRolloutCompleted, model.AccountEventTypeRolloutPhaseOpened})
	if err != nil {
		t.Fatal(err)
	}
	for e := range ch {
		t.Fatalf("delivered %+v", e)
	}
	if !slices.Equal(log.filter.Types, []core.EventType{core.EventRolloutCompleted, core.EventRolloutPhaseOpened}) {
		t.Fatalf("filter %+v", log.filter)
	}

	ch2, err := sub.MountEvents(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for e := range ch2 {
		got = append(got, string(e.Type))
		if e.Command != nil && (e.Command.RolloutID == nil || *e.Command.RolloutID != "rol_1" || e.Command.JobID != nil) {
			t.Fatalf("command %+v", e.Command)
		}
	}
	if !slices.Equal(got, []string{"STATES_REPORTED", "COMMAND_ISSUED"}) {
		t.Fatalf("mountEvents delivered %v", got)
	}
}

// TestEventTypeEnumsMatchCore: MountEventType (which webhooks and their
// deliveries use) names every event type core has, and AccountEventType
// exactly the account-level ones, so that a webhook or a delivery of a new
// type reads back over GraphQL instead of failing the enum.
func TestEventTypeEnumsMatchCore(t *testing.T) {
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	names := func(enum string) []string {
		def := schema.Types[enum]
		if def == nil {
			t.Fatalf("no %s in the schema", enum)
		}
		var out []string
		for _, v := range def.EnumValues {
			out = append(out, v.Name)
		}
		slices.Sort(out)
		return out
	}
	want := func(types []core.EventType) []string {
		var out []string
		for _, e := range types {
			out = append(out, string(e))
		}
		slices.Sort(out)
		return out
	}
	if got, w := names("MountEventType"), want(core.EventTypes); !slices.Equal(got, w) {
		t.Errorf("MountEventType has %v, core has %v", got, w)
	}
	if got, w := names("AccountEventType"), want(core.AccountEventTypes); !slices.Equal(got, w) {
		t.Errorf("AccountEventType has %v, core has %v", got, w)
	}
}
