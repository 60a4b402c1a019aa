package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// fakeJobs answers as JobService would, and keeps what it was asked.
type fakeJobs struct {
	jobs    map[string]core.Job
	targets []core.JobTarget
	created core.JobInput
}

func (f *fakeJobs) CreateJob(_ context.Context, _ core.Principal, in core.JobInput) (core.Job, error) {
	f.created = in
	j := core.Job{ID: "job_new", Code: core.CommandCode(in.Code), Params: in.Params, Description: in.Description,
		State: core.JobActive, Targets: 3, Counts: core.JobCounts{Pending: 3}}
	if in.Filter != nil {
		j.Filter = *in.Filter
	}
	return j, nil
}

func (f *fakeJobs) ListJobs(_ context.Context, _ core.Principal, p core.Page) ([]core.Job, core.Pagination, error) {
	out := []core.Job{}
	for _, j := range f.jobs {
		out = append(out, j)
	}
	return out, core.Pagination{CurrentPage: p.CurrentPage, PageSize: p.PageSize, TotalItems: len(out), TotalPages: 1}, nil
}

func (f *fakeJobs) Job(_ context.Context, _ core.Principal, id string) (core.Job, error) {
	j, ok := f.jobs[id]
	if !ok {
		return core.Job{}, core.Errorf(core.CodeJobNotFound, "job %q not found", id)
	}
	return j, nil
}

func (f *fakeJobs) JobMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.JobTarget, core.Pagination, error) {
	if _, err := f.Job(ctx, p, id); err != nil {
		return nil, core.Pagination{}, err
	}
	return f.targets, core.Pagination{CurrentPage: page.CurrentPage, PageSize: page.PageSize, TotalItems: len(f.targets), TotalPages: 1}, nil
}

func (f *fakeJobs) CancelJob(ctx context.Context, p core.Principal, id string) (core.Job, error) {
	j, err := f.Job(ctx, p, id)
	if err != nil {
		return j, err
	}
	if j.State != core.JobActive {
		return core.Job{}, core.Errorf(core.CodeConflict, "job %q is %s", id, j.State)
	}
	j.State = core.JobCanceled
	f.jobs[id] = j
	return j, nil
}

// fakeFleet answers mounts with the filter's text refused as the parser
// would refuse a malformed one.
type fakeFleet struct {
	Mounts
	filter core.MountFilter
}

func (f *fakeFleet) ListMounts(_ context.Context, _ core.Principal, filter core.MountFilter, _ core.Page) ([]core.Mount, core.Pagination, error) {
	f.filter = filter
	if filter.Expression == "batteryLevel <" {
		var v core.Validation
		v.Add("filter", "unexpected end of filter at 1:14")
		return nil, core.Pagination{}, v.Err()
	}
	return []core.Mount{{UID: "M-1"}}, core.Pagination{CurrentPage: 1, PageSize: 20, TotalItems: 1, TotalPages: 1}, nil
}

// fakeLog streams the events it holds, as the event log would for the
// filter (types and mounts), and keeps the filter.
type fakeLog struct {
	EventLog
	events []core.Event
	filter core.EventFilter
}

func (f *fakeLog) Stream(_ context.Context, _ core.Principal, filter core.EventFilter, send func(core.Event) bool, end func()) error {
	f.filter = filter
	go func() {
		defer end()
		for _, e := range f.events {
			if filter.Types != nil && !slices.Contains(filter.Types, e.Type) {
				continue
			}
			if !send(e) {
				return
			}
		}
	}()
	return nil
}

func (f *fakeLog) Events(context.Context, core.Principal, core.EventsRequest) (core.EventPage, error) {
	return core.EventPage{Events: f.events, Next: f.events[len(f.events)-1].ID}, nil
}

var jobsOwner = core.Principal{AccountID: "acc", ClientID: "c", Grant: core.Grant{Complete: true, Role: core.RoleOwner}}

func jobsResolver() (*Resolver, *fakeJobs, *fakeFleet, *fakeLog) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	jobs := &fakeJobs{jobs: map[string]core.Job{"job_1": {ID: "job_1", Code: "SET_ALARM_MODE", Params: map[string]string{"alarmMode": "ON"},
		Filter: "batteryLevel < 20", State: core.JobActive, CreatedAt: at, ExpiresAt: at.Add(core.DefaultJobLifetime), Targets: 4,
		Counts: core.JobCounts{Pending: 1, Issued: 1, Executed: 1, Refused: 1}}},
		targets: []core.JobTarget{{UID: "M-1", Status: core.TargetExecuted, CommandID: "cmd1"}, {UID: "M-2", Status: core.TargetPending}}}
	fleet := &fakeFleet{}
	job := jobs.jobs["job_1"]
	log := &fakeLog{events: []core.Event{
		{ID: core.Cursor{Tx: 1}, Type: core.EventStatesReported, UID: "M-1", OccurredAt: at},
		{ID: core.Cursor{Tx: 2}, Type: core.EventJobCompleted, Job: &job, OccurredAt: at},
		{ID: core.Cursor{Tx: 3}, Type: core.EventCommandExecuted, UID: "M-1", Command: &core.Command{ID: "cmd1", JobID: "job_1"}, OccurredAt: at},
	}}
	r := &Resolver{JobService: jobs, MountService: fleet, EventLog: log, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Cursors: core.NewCursorCodec([32]byte{1})}
	return r, jobs, fleet, log
}

type gqlAnswer struct {
	Data   map[string]any
	Errors []struct {
		Message    string
		Extensions map[string]any
	}
}

func postGraphQL(t *testing.T, r *Resolver, p core.Principal, query string, vars map[string]any) gqlAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/graphql", bytes.NewReader(body)).WithContext(core.WithPrincipal(context.Background(), p))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	NewHandler(r, nil, DefaultOptions).ServeHTTP(rec, req)
	var out gqlAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s: %v", rec.Body, err)
	}
	return out
}

func errorCode(a gqlAnswer) string {
	if len(a.Errors) == 0 {
		return ""
	}
	code, _ := a.Errors[0].Extensions["code"].(string)
	return code
}

// TestJobResolvers: createJob hands core the input as REST would, and
// jobs, job, jobMounts and cancelJob show core's answers and its codes.
func TestJobResolvers(t *testing.T) {
	r, jobs, _, _ := jobsResolver()
	const fields = `id code params filter description state createdAt expiresAt targets counts { pending issued executed refused unconfirmed }`

	a := postGraphQL(t, r, jobsOwner, `mutation($in: CreateJobInput!) { createJob(input: $in) { `+fields+` } }`, map[string]any{"in": map[string]any{
		"code": "SET_ALARM_MODE", "params": map[string]any{"alarmMode": "ON"}, "filter": `modelNumber = "HM-1"`,
		"description": "night mode", "expiresAt": "2026-11-30T00:00:00.000Z"}})
	if len(a.Errors) > 0 {
		t.Fatalf("createJob: %+v", a.Errors)
	}
	in := jobs.created
	if in.Code != "SET_ALARM_MODE" || in.Params["alarmMode"] != "ON" || len(in.Params) != 1 || in.Filter == nil || *in.Filter != `modelNumber = "HM-1"` ||
		in.MountUIDs != nil || in.Description != "night mode" || in.ExpiresAt == nil || !in.ExpiresAt.Equal(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("core got %+v", in)
	}
	created := a.Data["createJob"].(map[string]any)
	if created["targets"] != 3.0 || created["state"] != "ACTIVE" || created["counts"].(map[string]any)["pending"] != 3.0 {
		t.Fatalf("created %v", created)
	}

	a = postGraphQL(t, r, jobsOwner, `{ jobs { jobs { `+fields+` } pagination { totalItems } } job(id: "job_1") { filter counts { executed refused } } }`, nil)
	if len(a.Errors) > 0 {
		t.Fatalf("jobs: %+v", a.Errors)
	}
	listed := a.Data["jobs"].(map[string]any)["jobs"].([]any)[0].(map[string]any)
	if listed["params"].(map[string]any)["alarmMode"] != "ON" || listed["filter"] != "batteryLevel < 20" || listed["expiresAt"] != "2026-12-03T12:00:00.000Z" {
		t.Fatalf("listed %v", listed)
	}
	if c := a.Data["job"].(map[string]any)["counts"].(map[string]any); c["executed"] != 1.0 || c["refused"] != 1.0 {
		t.Fatalf("job %v", a.Data["job"])
	}

	a = postGraphQL(t, r, jobsOwner, `{ jobMounts(id: "job_1", pageSize: 5) { mounts { uid status commandId } pagination { pageSize totalItems } } }`, nil)
	mounts := a.Data["jobMounts"].(map[string]any)["mounts"].([]any)
	if len(mounts) != 2 || mounts[0].(map[string]any)["status"] != "EXECUTED" || mounts[0].(map[string]any)["commandId"] != "cmd1" ||
		mounts[1].(map[string]any)["status"] != "PENDING" || mounts[1].(map[string]any)["commandId"] != nil {
		t.Fatalf("jobMounts %v", mounts)
	}

	for _, q := range []string{`{ job(id: "job_other") { id } }`, `{ jobMounts(id: "job_other") { mounts { uid } } }`, `mutation { cancelJob(id: "job_other") { id } }`} {
		if code := errorCode(postGraphQL(t, r, jobsOwner, q, nil)); code != "JOB_NOT_FOUND" {
			t.Errorf("%s: %s, want JOB_NOT_FOUND", q, code)
		}
	}
	a = postGraphQL(t, r, jobsOwner, `mutation { cancelJob(id: "job_1") { state } }`, nil)
	if a.Data["cancelJob"].(map[string]any)["state"] != "CANCELED" {
		t.Fatalf("cancel %+v", a)
	}
	if code := errorCode(postGraphQL(t, r, jobsOwner, `mutation { cancelJob(id: "job_1") { state } }`, nil)); code != "CONFLICT" {
		t.Fatalf("second cancel: %s", code)
	}
	if code := errorCode(postGraphQL(t, r, jobsOwner, `{ jobs(pageSize: 0) { jobs { id } } }`, nil)); code != "VALIDATION_FAILED" {
		t.Fatalf("pageSize 0: %s", code)
	}
}

// TestMountFilterExpression: the expression reaches core as its text, and
// core's refusal is VALIDATION_FAILED on the field filter.
func TestMountFilterExpression(t *testing.T) {
	r, _, fleet, _ := jobsResolver()
	a := postGraphQL(t, r, jobsOwner, `{ mounts(filter: {expression: "batteryLevel < 20", serialNumber: "S1"}) { mounts { uid } } }`, nil)
	if len(a.Errors) > 0 || fleet.filter.Expression != "batteryLevel < 20" || *fleet.filter.SerialNumber != "S1" {
		t.Fatalf("%+v, core got %+v", a, fleet.filter)
	}
	a = postGraphQL(t, r, jobsOwner, `{ mounts(filter: {expression: "batteryLevel <"}) { mounts { uid } } }`, nil)
	if errorCode(a) != "VALIDATION_FAILED" {
		t.Fatalf("%+v", a)
	}
	fields := a.Errors[0].Extensions["errors"].([]any)
	if fields[0].(map[string]any)["field"] != "filter" {
		t.Fatalf("fields %v", fields)
	}
}

// TestAccountEvents: accountEvents asks the log for account-level types
// only and delivers only account-level events; mountEvents and the events
// query never carry them; a token limited to mounts is refused.
func TestAccountEvents(t *testing.T) {
	r, _, _, log := jobsResolver()
	sub := &subscriptionResolver{r}
	ctx, cancel := context.WithCancel(core.WithPrincipal(context.Background(), jobsOwner))
	defer cancel()

	ch, err := sub.AccountEvents(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(log.filter.Types, core.AccountEventTypes) || log.filter.MountUIDs != nil {
		t.Fatalf("filter %+v", log.filter)
	}
	var got []string
	for e := range ch {
		if e.Job == nil || e.Job.ID != "job_1" || e.Job.Counts.Executed != 1 {
			t.Fatalf("event %+v", e)
		}
		got = append(got, string(e.Type))
	}
	if !slices.Equal(got, []string{"JOB_COMPLETED"}) {
		t.Fatalf("accountEvents delivered %v", got)
	}

	ch2, err := sub.MountEvents(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for e := range ch2 {
		got = append(got, string(e.Type))
		if e.Command != nil && (e.Command.JobID == nil || *e.Command.JobID != "job_1") {
			t.Fatalf("command %+v", e.Command)
		}
	}
	if !slices.Equal(got, []string{"STATES_REPORTED", "COMMAND_EXECUTED"}) {
		t.Fatalf("mountEvents delivered %v", got)
	}

	page, err := (&queryResolver{r}).Events(ctx, nil, nil, nil, nil)
	if err != nil || len(page.Events) != 2 {
		t.Fatalf("events %+v, %v", page, err)
	}

	limited := jobsOwner
	limited.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M-1"}}
	if _, err := sub.AccountEvents(core.WithPrincipal(ctx, limited), nil, nil); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("limited token: %v", err)
	}
	maintainer := jobsOwner
	maintainer.Grant = core.Grant{Complete: true, Role: core.RoleRestricted}
	if _, err := sub.AccountEvents(core.WithPrincipal(ctx, maintainer), nil, nil); err != nil {
		t.Fatalf("maintainer: %v", err)
	}
}
