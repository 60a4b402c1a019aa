package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

type accountEvent struct {
	ID   string  `json:"id"`
	Type string  `json:"type"`
	Job  *gqlJob `json:"job"`
}

// TestGraphQLJobs: jobs through GraphQL with REST's rules, and the
// accountEvents subscription. A job over a fleet filter targets the
// associated mounts it selects; one that selects none is COMPLETED at once,
// and its JOB_COMPLETED reaches accountEvents (replayed after a cursor, then
// live, for owners and maintainers, refused to a rider), never mountEvents
// nor the events query. Another account's job is JOB_NOT_FOUND; a filter
// that does not parse is VALIDATION_FAILED on filter.
func TestGraphQLJobs(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")
	m1, m2 := uniqueUID("JB1"), uniqueUID("JB2")
	a.associated(t, m1)
	a.associated(t, m2)
	a.report(t, m1, entry("BATTERY_LEVEL", "12", time.Now()))
	a.report(t, m2, entry("BATTERY_LEVEL", "80", time.Now()))
	rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+m1)}
	maintainer := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted")}

	// The fleet filter, and its refusal.
	mounts := field[struct{ Mounts []struct{ UID string } }](t, a.gql(t, `{ mounts(filter: {expression: "batteryLevel < 20"}) { mounts { uid } } }`, nil), "mounts")
	if len(mounts.Mounts) != 1 || mounts.Mounts[0].UID != m1 {
		t.Fatalf("filtered fleet %+v", mounts)
	}
	if r := a.gql(t, `{ mounts(filter: {expression: "batteryLevel <"}) { mounts { uid } } }`, nil); r.code() != "VALIDATION_FAILED" ||
		!strings.Contains(string(mustJSON(t, r.Errors[0].Extensions)), `"field":"filter"`) {
		t.Fatalf("a malformed filter: %+v", r.Errors)
	}

	from := field[struct{ Next string }](t, a.gql(t, `{ events(limit: 1000) { next } }`, nil), "events").Next
	create := `mutation($in: CreateJobInput!) { createJob(input: $in) { ` + jobFields + ` } }`
	job := field[gqlJob](t, a.gql(t, create, map[string]any{"in": map[string]any{"code": "CONFIGURE_ALARM",
		"params": map[string]any{"alarmMode": "ON", "alarmSensitivity": "HIGH", "alarmVolume": "LOW"}, "filter": "batteryLevel < 20", "description": "night"}}), "createJob")
	if job.State != "ACTIVE" || job.Targets != 1 || job.Counts.Pending != 1 || job.Filter == nil || *job.Filter != "batteryLevel < 20" ||
		job.Params["alarmMode"] != "ON" || job.Description != "night" {
		t.Fatalf("created %+v", job)
	}
	targets := field[struct {
		Mounts []struct {
			UID, Status string
			CommandID   *string
		}
	}](t, a.gql(t, `query($id: ID!) { jobMounts(id: $id) { mounts { uid status commandId } } }`, map[string]any{"id": job.ID}), "jobMounts")
	if len(targets.Mounts) != 1 || targets.Mounts[0].UID != m1 || targets.Mounts[0].Status != "PENDING" || targets.Mounts[0].CommandID != nil {
		t.Fatalf("jobMounts %+v", targets)
	}
	for _, q := range []string{`query($id: ID!) { job(id: $id) { id } }`, `query($id: ID!) { jobMounts(id: $id) { mounts { uid } } }`, `mutation($id: ID!) { cancelJob(id: $id) { id } }`} {
		if r := b.gql(t, q, map[string]any{"id": job.ID}); r.code() != "JOB_NOT_FOUND" {
			t.Errorf("B: %s: %+v", q, r.Errors)
		}
	}
	if r := maintainer.gql(t, `{ jobs { jobs { id } } }`, nil); r.code() != "FORBIDDEN" {
		t.Errorf("a maintainer's jobs: %+v", r.Errors)
	}
	if got := field[gqlJob](t, a.gql(t, `mutation($id: ID!) { cancelJob(id: $id) { `+jobFields+` } }`, map[string]any{"id": job.ID}), "cancelJob"); got.State != "CANCELED" {
		t.Fatalf("cancelled %+v", got)
	}
	if r := a.gql(t, `mutation($id: ID!) { cancelJob(id: $id) { id } }`, map[string]any{"id": job.ID}); r.code() != "CONFLICT" {
		t.Fatalf("cancelled twice: %+v", r.Errors)
	}

	// A job selecting no mount completes at once: JOB_COMPLETED.
	none := map[string]any{"in": map[string]any{"code": "RELEASE_HELMET", "filter": `uid = "nothing-here"`}}
	empty := field[gqlJob](t, a.gql(t, create, none), "createJob")
	if empty.State != "COMPLETED" || empty.Targets != 0 {
		t.Fatalf("a job without targets: %+v", empty)
	}
	const accountSub = `subscription($after: ID) { accountEvents(after: $after, types: [JOB_COMPLETED]) { id type occurredAt job { ` + jobFields + ` } } }`
	owner := in.wsReady(t, a.token)
	owner.Subscribe("acc", accountSub, map[string]any{"after": from})
	first := nextData[accountEvent](t, owner, "acc", "accountEvents")
	if first.Type != "JOB_COMPLETED" || first.Job == nil || first.Job.ID != empty.ID || first.Job.State != "COMPLETED" {
		t.Fatalf("replayed %+v", first)
	}
	// Live: the next one arrives on the open subscription.
	second := field[gqlJob](t, a.gql(t, create, none), "createJob")
	if e := nextData[accountEvent](t, owner, "acc", "accountEvents"); e.Job == nil || e.Job.ID != second.ID {
		t.Fatalf("live %+v", e)
	}
	// Resumed after the first: the second only.
	resumed := in.wsReady(t, maintainer.token)
	resumed.Subscribe("acc", accountSub, map[string]any{"after": first.ID})
	if e := nextData[accountEvent](t, resumed, "acc", "accountEvents"); e.Job == nil || e.Job.ID != second.ID {
		t.Fatalf("a maintainer's, resumed: %+v", e)
	}
	resumed.Quiet(200 * time.Millisecond)

	// A rider is refused; the socket stays open.
	riding := in.wsReady(t, rider.token)
	riding.Subscribe("acc", accountSub, nil)
	if m := riding.Expect("error"); len(m.Errors()) != 1 || m.Errors()[0].Code() != "FORBIDDEN" {
		t.Fatalf("a rider: %s", m)
	}

	// mountEvents replayed from the same cursor: the mount's events only.
	events := in.wsReady(t, a.token)
	events.Subscribe("ev", `subscription($after: ID) { mountEvents(after: $after) { id type uid } }`, map[string]any{"after": from})
	a.report(t, m2, entry("BATTERY_LEVEL", "79", time.Now()))
	for {
		e := nextData[struct{ Type, UID string }](t, events, "ev", "mountEvents")
		if e.UID == "" || e.Type == "JOB_COMPLETED" {
			t.Fatalf("mountEvents carried %+v", e)
		}
		if e.UID == m2 && e.Type == "STATES_REPORTED" {
			break
		}
	}
	page := field[struct{ Events []struct{ Type, UID string } }](t, a.gql(t, `query($after: ID) { events(after: $after) { events { type uid } } }`, map[string]any{"after": from}), "events")
	for _, e := range page.Events {
		if e.UID == "" || e.Type == "JOB_COMPLETED" {
			t.Fatalf("the events query carried %+v", e)
		}
	}
}

// A webhook of JOB_COMPLETED made over REST reads back over GraphQL, and
// asking the events query for JOB_COMPLETED answers no event rather than an
// error: the enum knows the type, the query never carries account-level
// events.
func TestGraphQLKnowsJobCompleted(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://receiver.example/hook", "eventTypes": []string{"JOB_COMPLETED"}})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
	}
	a.createJob(t, map[string]any{"code": "RELEASE_HELMET", "filter": `modelNumber = "none"`}) // no targets: COMPLETED at once
	r := a.gql(t, `{ webhooks { webhooks { eventTypes } } events(types: [JOB_COMPLETED]) { events { type } } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("errors: %+v", r.Errors)
	}
	var d struct {
		Webhooks struct {
			Webhooks []struct{ EventTypes []string }
		}
		Events struct{ Events []struct{ Type string } }
	}
	if err := json.Unmarshal(r.Data, &d); err != nil || len(d.Webhooks.Webhooks) != 1 ||
		len(d.Webhooks.Webhooks[0].EventTypes) != 1 || d.Webhooks.Webhooks[0].EventTypes[0] != "JOB_COMPLETED" || len(d.Events.Events) != 0 {
		t.Fatalf("data %s (%v)", r.Data, err)
	}
}
