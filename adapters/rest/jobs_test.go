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

// fakeJobs keeps jobs by account with the rules the transport relies on:
// another account's job is JOB_NOT_FOUND, cancelling is for ACTIVE jobs.
// It records the input of the last creation.
type fakeJobs struct {
	mu   sync.Mutex
	jobs map[string]core.Job
	last core.JobInput
	at   time.Time
}

func (f *fakeJobs) CreateJob(_ context.Context, p core.Principal, in core.JobInput) (core.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = in
	if in.Code == "" {
		return core.Job{}, &core.Error{Code: core.CodeValidation, Message: "the request is invalid",
			Fields: []core.FieldError{{Field: "code", Message: "is required"}}}
	}
	filter := ""
	if in.Filter != nil {
		filter = *in.Filter
	}
	expires := f.at.Add(core.DefaultJobLifetime)
	if in.ExpiresAt != nil {
		expires = *in.ExpiresAt
	}
	j := core.Job{ID: fmt.Sprintf("job_%d", len(f.jobs)+1), AccountID: p.AccountID, Code: core.CommandCode(in.Code), Params: in.Params,
		Filter: filter, Description: in.Description, State: core.JobActive, CreatedAt: f.at, ExpiresAt: expires,
		Targets: len(in.MountUIDs), Counts: core.JobCounts{Pending: len(in.MountUIDs)}}
	f.jobs[j.ID] = j
	return j, nil
}

func (f *fakeJobs) ListJobs(_ context.Context, p core.Principal, page core.Page) ([]core.Job, core.Pagination, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []core.Job
	for _, j := range f.jobs {
		if j.AccountID == p.AccountID {
			out = append(out, j)
		}
	}
	return out, core.NewPagination(page, len(out)), nil
}

func (f *fakeJobs) Job(_ context.Context, p core.Principal, id string) (core.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok || j.AccountID != p.AccountID {
		return core.Job{}, core.Errorf(core.CodeJobNotFound, "job %q not found", id)
	}
	return j, nil
}

func (f *fakeJobs) JobMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.JobTarget, core.Pagination, error) {
	if _, err := f.Job(ctx, p, id); err != nil {
		return nil, core.Pagination{}, err
	}
	targets := []core.JobTarget{{JobID: id, UID: "M1", Status: core.TargetPending},
		{JobID: id, UID: "M2", Status: core.TargetExecuted, Final: true, CommandID: nonce}}
	return targets, core.NewPagination(page, len(targets)), nil
}

func (f *fakeJobs) CancelJob(ctx context.Context, p core.Principal, id string) (core.Job, error) {
	j, err := f.Job(ctx, p, id)
	if err != nil {
		return core.Job{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if j.State != core.JobActive {
		return core.Job{}, core.Errorf(core.CodeConflict, "job %q is %s", id, j.State)
	}
	j.State = core.JobCanceled
	f.jobs[id] = j
	return j, nil
}

// pendingMounts answers pending-commands with one job's command; the rest
// of the mount rules are not reached by these tests.
type pendingMounts struct {
	rest.Mounts
	at time.Time
}

func (m pendingMounts) PendingCommands(_ context.Context, p core.Principal, uid string) ([]core.Command, error) {
	if err := p.AuthorizeMount(core.ActionQueryCommand, uid); err != nil {
		return nil, err
	}
	return []core.Command{{ID: nonce, MountUID: uid, Code: "RELEASE_HELMET", Data: map[string]any{"expiresAt": "2026-11-22T01:45:13.123Z"},
		GeneratedAt: m.at, Payload: "1795311613123;RELEASE_HELMET;" + uid + ";;" + nonce, SignedToken: signature,
		IssuedBy: "client-1", Status: core.CommandIssued, StatusAt: m.at, JobID: "job_1"}}, nil
}

// TestJobsTransport runs the jobs routes and pending-commands over the
// real handler tree with fake services: bodies decode strictly naming
// the field, absent and empty filters and uid lists reach core as sent,
// roles are refused before the body is read, and every answer is what
// openapi.json says.
func TestJobsTransport(t *testing.T) {
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
	jobs := &fakeJobs{jobs: map[string]core.Job{}, at: at}
	srv := rest.NewServer(rest.Deps{
		Logger:   slog.New(slog.DiscardHandler),
		Verifier: fakeVerifier{"owner": owner, "other": other, "rider": rider, "maintainer": maintainer},
		Jobs:     jobs,
		Mounts:   pendingMounts{at: at},
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
		filter, empty := "batteryLevel < 20", ""
		when := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		for _, c := range []struct {
			body string
			want core.JobInput
		}{
			{`{"code":"RELEASE_HELMET","mountUids":["M1","M2"]}`,
				core.JobInput{Code: "RELEASE_HELMET", MountUIDs: []string{"M1", "M2"}}},
			{`{"code":"CONFIGURE_ALARM","params":{"alarmMode":"ON"},"filter":"batteryLevel < 20","description":"d","expiresAt":"2026-11-29T01:00:00+01:00"}`,
				core.JobInput{Code: "CONFIGURE_ALARM", Params: map[string]string{"alarmMode": "ON"}, Filter: &filter, Description: "d", ExpiresAt: &when}},
			{`{"code":"RELEASE_HELMET","filter":""}`, core.JobInput{Code: "RELEASE_HELMET", Filter: &empty}},
			{`{"code":"RELEASE_HELMET","mountUids":[]}`, core.JobInput{Code: "RELEASE_HELMET", MountUIDs: []string{}}},
			{`{"code":"RELEASE_HELMET"}`, core.JobInput{Code: "RELEASE_HELMET"}},
			{`{"code":"RELEASE_HELMET","filter":"presence = \"OFFLINE\"","mountUids":["M1"]}`,
				core.JobInput{Code: "RELEASE_HELMET", Filter: ptrTo(`presence = "OFFLINE"`), MountUIDs: []string{"M1"}}},
		} {
			do("POST", "/api/v1/jobs", "owner", c.body, 201, "")
			jobs.mu.Lock()
			got := jobs.last
			jobs.mu.Unlock()
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("%s reached core as %+v, want %+v", c.body, got, c.want)
			}
		}
	})

	t.Run("bad fields", func(t *testing.T) {
		for _, c := range []struct{ body, field string }{
			{`{"code":5}`, "code"},
			{`{"code":"RELEASE_HELMET","params":[]}`, "params"},
			{`{"code":"RELEASE_HELMET","params":{"alarmMode":1}}`, "params.alarmMode"},
			{`{"code":"RELEASE_HELMET","filter":1}`, "filter"},
			{`{"code":"RELEASE_HELMET","filter":["a"]}`, "filter"},
			{`{"code":"RELEASE_HELMET","mountUids":"M1"}`, "mountUids"},
			{`{"code":"RELEASE_HELMET","mountUids":[1]}`, "mountUids"},
			{`{"code":"RELEASE_HELMET","description":true}`, "description"},
			{`{"code":"RELEASE_HELMET","expiresAt":"tomorrow"}`, "expiresAt"},
			{`{"code":"RELEASE_HELMET","expiresAt":1795311613}`, "expiresAt"},
			{`{"code":"RELEASE_HELMET","colour":"red"}`, "colour"},
			{`{"code":"RELEASE_HELMET","params":{"alarmMode":"ON","alarmVolume":null}}`, "params.alarmVolume"},
			{`{}`, "code"},
		} {
			if got := field(do("POST", "/api/v1/jobs", "owner", c.body, 400, "VALIDATION_FAILED")); got != c.field {
				t.Errorf("%s: field %s, want %s", c.body, got, c.field)
			}
		}
		for _, body := range []string{``, `[]`, `{"code":"RELEASE_HELMET"} {}`, `{"code":`} {
			do("POST", "/api/v1/jobs", "owner", body, 400, "VALIDATION_FAILED")
		}
		do("POST", "/api/v1/jobs", "owner", `{"description":"`+strings.Repeat("x", rest.MaxBodyBytes)+`"}`, 413, "PAYLOAD_TOO_LARGE")
		do("GET", "/api/v1/jobs?pageSize=0", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/jobs?colour=red", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/jobs/job_1/mounts?currentPage=0", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/jobs/job_1?verbose=1", "owner", "", 400, "VALIDATION_FAILED")
		do("GET", "/api/v1/mounts/M1/pending-commands?code=RELEASE_HELMET", "owner", "", 400, "VALIDATION_FAILED")
	})

	t.Run("reads, cancel, and another account", func(t *testing.T) {
		created := do("POST", "/api/v1/jobs", "owner", `{"code":"RELEASE_HELMET","mountUids":["M1","M2"]}`, 201, "")
		var j map[string]any
		if err := json.Unmarshal(created, &j); err != nil {
			t.Fatal(err)
		}
		id := j["id"].(string)
		if j["state"] != "ACTIVE" || j["targets"] != 2.0 || j["createdAt"] != "2026-11-22T01:40:13.123Z" ||
			j["expiresAt"] != "2026-11-29T01:40:13.123Z" || j["filter"] != "" {
			t.Errorf("created job %s", created)
		}
		if c := j["counts"].(map[string]any); len(c) != 5 || c["pending"] != 2.0 || c["executed"] != 0.0 {
			t.Errorf("counts %v", c)
		}
		do("GET", "/api/v1/jobs", "owner", "", 200, "")
		do("GET", "/api/v1/jobs/"+id, "owner", "", 200, "")
		mounts := do("GET", "/api/v1/jobs/"+id+"/mounts?pageSize=50", "owner", "", 200, "")
		var page struct {
			Mounts []map[string]any
		}
		_ = json.Unmarshal(mounts, &page)
		if len(page.Mounts) != 2 || page.Mounts[0]["commandId"] != nil || page.Mounts[1]["commandId"] != nonce || page.Mounts[1]["status"] != "EXECUTED" {
			t.Errorf("job mounts %s", mounts)
		}
		for _, path := range []string{"/api/v1/jobs/" + id, "/api/v1/jobs/" + id + "/mounts", "/api/v1/jobs/job_404"} {
			do("GET", path, "other", "", 404, "JOB_NOT_FOUND")
		}
		var list struct{ Jobs []any }
		_ = json.Unmarshal(do("GET", "/api/v1/jobs", "other", "", 200, ""), &list)
		if len(list.Jobs) != 0 {
			t.Errorf("another account lists %d jobs", len(list.Jobs))
		}
		do("POST", "/api/v1/jobs/"+id+"/cancel", "other", "", 404, "JOB_NOT_FOUND")
		canceled := do("POST", "/api/v1/jobs/"+id+"/cancel", "owner", "", 200, "")
		if !strings.Contains(string(canceled), `"state":"CANCELED"`) {
			t.Errorf("canceled job %s", canceled)
		}
		do("POST", "/api/v1/jobs/"+id+"/cancel", "owner", "", 409, "CONFLICT")
	})

	t.Run("roles", func(t *testing.T) {
		for _, token := range []string{"rider", "maintainer"} {
			// Refused before the body is looked at.
			do("POST", "/api/v1/jobs", token, `{"colour":`, 403, "FORBIDDEN")
			do("GET", "/api/v1/jobs", token, "", 403, "FORBIDDEN")
			do("GET", "/api/v1/jobs/job_1", token, "", 403, "FORBIDDEN")
			do("GET", "/api/v1/jobs/job_1/mounts", token, "", 403, "FORBIDDEN")
			do("POST", "/api/v1/jobs/job_1/cancel", token, "", 403, "FORBIDDEN")
		}
		do("GET", "/api/v1/jobs", "", "", 401, "UNAUTHENTICATED")
	})

	t.Run("pending commands", func(t *testing.T) {
		body := do("GET", "/api/v1/mounts/M1/pending-commands", "rider", "", 200, "")
		var res struct {
			Commands []map[string]any
		}
		if err := json.Unmarshal(body, &res); err != nil || len(res.Commands) != 1 {
			t.Fatalf("pending commands %s", body)
		}
		if c := res.Commands[0]; c["jobId"] != "job_1" || c["issuedBy"] != nil || c["signedToken"] != signature {
			t.Errorf("pending command %v", c)
		}
		do("GET", "/api/v1/mounts/M2/pending-commands", "rider", "", 404, "MOUNT_NOT_FOUND")
		do("GET", "/api/v1/mounts/M2/pending-commands", "owner", "", 200, "")
	})
}

func ptrTo[T any](v T) *T { return &v }
