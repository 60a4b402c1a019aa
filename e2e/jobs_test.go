package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// Jobs over the API (docs/api.md, "Jobs"), on both backends.

type jobTargetView struct {
	UID       string  `json:"uid"`
	Status    string  `json:"status"`
	CommandID *string `json:"commandId"`
}

func (f fleet) job(t *testing.T, id string) jobView {
	t.Helper()
	return decode[jobView](t, f.ok(t, http.MethodGet, "/api/v1/jobs/"+id, nil))
}

func (f fleet) jobMounts(t *testing.T, id string) map[string]jobTargetView {
	t.Helper()
	page := decode[struct {
		Mounts []jobTargetView `json:"mounts"`
	}](t, f.ok(t, http.MethodGet, "/api/v1/jobs/"+id+"/mounts?pageSize=100", nil))
	out := map[string]jobTargetView{}
	for _, m := range page.Mounts {
		out[m.UID] = m
	}
	return out
}

// jobEventView is an event as GET /events shows it, uid and mount nullable.
type jobEventView struct {
	Type  string         `json:"type"`
	UID   *string        `json:"uid"`
	Mount map[string]any `json:"mount"`
	Job   *jobView       `json:"job"`
}

func (in *instance) jobEvents(t *testing.T, token, query string) []jobEventView {
	t.Helper()
	res, raw := in.call(http.MethodGet, "/api/v1/events?limit=1000&"+query, token, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("events?%s: %d %s", query, res.StatusCode, raw)
	}
	return decode[struct {
		Events []jobEventView `json:"events"`
	}](t, raw).Events
}

// TestJobsEndToEnd: a job over two mounts' uids; a rider's phone fetches
// the pending command twice (the same command handed out again, the
// target counted once),
// uploads the mount's signed EXECUTED receipt; the other mount refuses
// for good; the job COMPLETES and JOB_COMPLETED (uid and mount null)
// reaches the event log of owners and maintainers and the webhook without
// mountUids, never riders, mountUid= or the webhook with mountUids.
// Cancel, another account, and bad bodies around it.
func TestJobsEndToEnd(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receivers listen on loopback
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")
			uid1, uid2, idle := uniqueUID("J1"), uniqueUID("J2"), uniqueUID("J3")
			d1, d2 := newDevice(uid1), newDevice(uid2)
			a.associate(t, uid1, map[string]any{"devicePublicKey": d1.publicKey()})
			a.confirm(t, uid1)
			a.associate(t, uid2, map[string]any{"devicePublicKey": d2.publicKey()})
			a.confirm(t, uid2)
			a.associate(t, idle, nil) // IDLE: never a target
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid1)
			maintainer := in.token(a.creds, "openid", "sub", audItem, "role:restricted")

			all, scoped := newReceiver(t), newReceiver(t)
			for _, c := range []struct {
				r    *receiver
				body map[string]any
			}{{all, map[string]any{"url": all.URL}}, {scoped, map[string]any{"url": scoped.URL, "mountUids": []string{uid1}}}} {
				res, raw := a.call(http.MethodPost, "/api/v1/webhooks", c.body)
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
				}
				c.r.setSecret(decode[webhookView](t, raw).Secret)
			}
			res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": all.URL, "eventTypes": []string{"JOB_COMPLETED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("a webhook for JOB_COMPLETED: %d %s", res.StatusCode, raw)
			}
			a.noContent(t, http.MethodDelete, "/api/v1/webhooks/"+decode[webhookView](t, raw).ID, nil)

			job := a.createJob(t, map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid2, uid1, idle, "NOT-MINE"},
				"description": "release all"})
			created, _ := time.Parse(time.RFC3339Nano, job.CreatedAt)
			expires, _ := time.Parse(time.RFC3339Nano, job.ExpiresAt)
			if job.ID == "" || job.State != "ACTIVE" || job.Targets != 2 || job.Counts != (jobCountsView{Pending: 2}) ||
				job.Filter != "" || job.Description != "release all" || job.Params == nil || expires.Sub(created) != 7*24*time.Hour {
				t.Fatalf("created %+v", job)
			}
			if got := a.jobMounts(t, job.ID); len(got) != 2 || got[uid1].Status != "PENDING" || got[uid1].CommandID != nil || got[uid2].Status != "PENDING" {
				t.Fatalf("targets %+v", got)
			}

			// The rider's phone fetches twice: the unanswered command is
			// handed out again (docs/api.md, "Jobs"), counted once.
			first := in.pending(t, rider, uid1)
			second := in.pending(t, rider, uid1)
			if len(first) != 1 || len(second) != 1 || first[0].ID != second[0].ID || *first[0].SignedToken != *second[0].SignedToken ||
				first[0].Payload != second[0].Payload || first[0].JobID != job.ID ||
				first[0].Code != "RELEASE_HELMET" || first[0].SignedToken == nil || first[0].IssuedBy != nil || first[0].Status != "ISSUED" {
				t.Fatalf("pending commands %+v then %+v", first, second)
			}
			if got := a.job(t, job.ID); got.Counts != (jobCountsView{Pending: 1, Issued: 1}) {
				t.Fatalf("after two fetches: %+v", got.Counts)
			}
			if got := a.jobMounts(t, job.ID)[uid1]; got.Status != "ISSUED" || got.CommandID == nil || *got.CommandID != second[0].ID {
				t.Fatalf("the fetched target %+v, want ISSUED with %s", got, second[0].ID)
			}
			// The audit shows the command with its job, once.
			if audit := string(a.ok(t, http.MethodGet, "/api/v1/mounts/"+uid1+"/commands", nil)); strings.Count(audit, `"jobId":"`+job.ID+`"`) != 1 {
				t.Fatalf("audit %s", audit)
			}
			res, raw = in.call(http.MethodGet, "/api/v1/mounts/"+uid2+"/pending-commands", rider, nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			res, raw = b.call(http.MethodGet, "/api/v1/mounts/"+uid1+"/pending-commands", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// The mount executes the second command; the rider uploads.
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/"+uid1+"/commands/receipts", rider,
				receipts(d1.receipt(second[0].ID, "EXECUTED", "", time.Now())))
			if res.StatusCode != 200 {
				t.Fatalf("receipt: %d %s", res.StatusCode, raw)
			}
			if got := a.jobMounts(t, job.ID)[uid1]; got.Status != "EXECUTED" || *got.CommandID != second[0].ID {
				t.Fatalf("the executed target %+v", got)
			}
			if got := in.pending(t, rider, uid1); len(got) != 0 {
				t.Fatalf("an executed target still offers %+v", got)
			}
			if got := a.job(t, job.ID); got.State != "ACTIVE" || got.Counts != (jobCountsView{Pending: 1, Executed: 1}) {
				t.Fatalf("half done: %+v", got)
			}

			// The other mount refuses for good: the job completes.
			cmd2 := in.pending(t, maintainer, uid2)
			if len(cmd2) != 1 {
				t.Fatalf("the maintainer's fetch: %+v", cmd2)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/"+uid2+"/commands/receipts",
				receipts(d2.receipt(cmd2[0].ID, "REFUSED", "helmet not mounted", time.Now())))
			if res.StatusCode != 200 {
				t.Fatalf("refusal: %d %s", res.StatusCode, raw)
			}
			done := a.job(t, job.ID)
			if done.State != "COMPLETED" || done.Counts != (jobCountsView{Executed: 1, Refused: 1}) {
				t.Fatalf("completed %+v", done)
			}
			if got := a.jobMounts(t, job.ID)[uid2]; got.Status != "REFUSED" || *got.CommandID != cmd2[0].ID {
				t.Fatalf("the refused target %+v", got)
			}

			// JOB_COMPLETED: account-level, in the owner's and maintainer's log.
			// On PostgreSQL an event shows in the log once every older
			// transaction of the cluster ended: wait for it to settle.
			waitForStep(t, "JOB_COMPLETED in the log", func() bool { return len(in.jobEvents(t, a.token, "types=JOB_COMPLETED")) > 0 })
			for _, token := range []string{a.token, maintainer} {
				evs := in.jobEvents(t, token, "types=JOB_COMPLETED")
				if len(evs) != 1 || evs[0].UID != nil || evs[0].Mount != nil || evs[0].Job == nil || evs[0].Job.ID != job.ID ||
					evs[0].Job.State != "COMPLETED" || evs[0].Job.Counts != done.Counts {
					t.Fatalf("JOB_COMPLETED in the log: %+v", evs)
				}
			}
			if evs := in.jobEvents(t, a.token, ""); !slices.ContainsFunc(evs, func(e jobEventView) bool { return e.Type == "JOB_COMPLETED" }) {
				t.Fatal("the unfiltered log lacks JOB_COMPLETED")
			}
			for _, c := range []struct{ token, query string }{{a.token, "mountUid=" + uid1}, {rider, ""}, {rider, "types=JOB_COMPLETED"}} {
				for _, e := range in.jobEvents(t, c.token, c.query) {
					if e.Type == "JOB_COMPLETED" || e.UID == nil {
						t.Fatalf("events?%s shows %+v", c.query, e)
					}
				}
			}
			if evs := in.jobEvents(t, b.token, "types=JOB_COMPLETED"); len(evs) != 0 {
				t.Fatalf("another account reads %+v", evs)
			}
			calls := all.waitFor(t, "JOB_COMPLETED delivered", func(c []webhookCall) bool {
				return slices.ContainsFunc(c, func(c webhookCall) bool { return c.Type == "JOB_COMPLETED" })
			})
			for _, c := range calls {
				if c.Type == "JOB_COMPLETED" && (c.Data.UID != "" || c.Data.Mount.Presence != "") {
					t.Fatalf("the delivery %+v", c)
				}
			}
			// The scoped webhook gets its mount's events, never the job's.
			scopedCalls := scoped.waitFor(t, "the executed command delivered", func(c []webhookCall) bool {
				return slices.Contains(types(c), "COMMAND_EXECUTED "+uid1)
			})
			if slices.ContainsFunc(scopedCalls, func(c webhookCall) bool { return c.Type == "JOB_COMPLETED" }) {
				t.Fatal("a webhook with mountUids received JOB_COMPLETED")
			}

			// Cancel: only ACTIVE jobs; another account's is not found.
			res, raw = a.call(http.MethodPost, "/api/v1/jobs/"+job.ID+"/cancel", nil)
			wantProblem(t, res, raw, 409, "CONFLICT")
			second2 := a.createJob(t, map[string]any{"code": "CONFIGURE_ALARM", "mountUids": []string{uid1},
				"params": map[string]string{"alarmMode": "ON", "alarmSensitivity": "LOW", "alarmVolume": "HIGH"}})
			if second2.Params["alarmMode"] != "ON" || second2.Targets != 1 {
				t.Fatalf("created %+v", second2)
			}
			if got := in.pending(t, rider, uid1); len(got) != 1 || got[0].JobID != second2.ID || got[0].Code != "CONFIGURE_ALARM" {
				t.Fatalf("pending after a second job %+v", got)
			}
			for _, c := range []struct {
				method, path string
			}{
				{http.MethodGet, "/api/v1/jobs/" + second2.ID},
				{http.MethodGet, "/api/v1/jobs/" + second2.ID + "/mounts"},
				{http.MethodPost, "/api/v1/jobs/" + second2.ID + "/cancel"},
				{http.MethodGet, "/api/v1/jobs/nonexistent"},
			} {
				res, raw := b.call(c.method, c.path, nil)
				wantProblem(t, res, raw, 404, "JOB_NOT_FOUND")
			}
			if list := decode[struct{ Jobs []jobView }](t, b.ok(t, http.MethodGet, "/api/v1/jobs", nil)); len(list.Jobs) != 0 {
				t.Fatalf("another account lists %+v", list.Jobs)
			}
			for _, token := range []string{rider, maintainer} {
				res, raw := in.call(http.MethodPost, "/api/v1/jobs/"+second2.ID+"/cancel", token, nil)
				wantProblem(t, res, raw, 403, "FORBIDDEN")
				res, raw = in.call(http.MethodPost, "/api/v1/jobs", token, map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}})
				wantProblem(t, res, raw, 403, "FORBIDDEN")
			}
			canceled := decode[jobView](t, a.ok(t, http.MethodPost, "/api/v1/jobs/"+second2.ID+"/cancel", nil))
			if canceled.State != "CANCELED" {
				t.Fatalf("canceled %+v", canceled)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/jobs/"+second2.ID+"/cancel", nil)
			wantProblem(t, res, raw, 409, "CONFLICT")
			if got := in.pending(t, rider, uid1); len(got) != 0 {
				t.Fatalf("a canceled job still offers %+v", got)
			}
			list := decode[struct {
				Jobs       []jobView      `json:"jobs"`
				Pagination map[string]int `json:"pagination"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/jobs", nil))
			if len(list.Jobs) != 2 || list.Jobs[0].ID != second2.ID || list.Pagination["totalItems"] != 2 {
				t.Fatalf("list %+v", list)
			}

			// Bad bodies: 400 naming the field, never a 500.
			for _, c := range []struct {
				body  map[string]any
				field string
			}{
				{map[string]any{"code": "RELEASE_HELMET", "filter": "", "mountUids": []string{uid1}}, ""},
				{map[string]any{"code": "RELEASE_HELMET"}, ""},
				{map[string]any{"code": "ASSOCIATE_OWNER", "mountUids": []string{uid1}}, "code"},
				{map[string]any{"code": "EXPLODE", "mountUids": []string{uid1}}, "code"},
				{map[string]any{"code": "CONFIGURE_ALARM", "mountUids": []string{uid1}, "params": map[string]any{"alarmMode": "LOUD"}}, ""},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "params": map[string]any{"alarmMode": 1}}, "params.alarmMode"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "expiresAt": "soon"}, "expiresAt"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "expiresAt": "2000-01-01T00:00:00Z"}, "expiresAt"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "expiresAt": time.Now().Add(400 * 24 * time.Hour).Format(time.RFC3339)}, "expiresAt"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "description": strings.Repeat("d", 501)}, "description"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": "all"}, "mountUids"},
				{map[string]any{"code": "RELEASE_HELMET", "filter": 7}, "filter"},
				{map[string]any{"code": "RELEASE_HELMET", "filter": "batteryLevel <"}, "filter"},
				{map[string]any{"code": "RELEASE_HELMET", "filter": "voltage < 3"}, "filter"},
				{map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid1}, "colour": "red"}, "colour"},
			} {
				res, raw := a.call(http.MethodPost, "/api/v1/jobs", c.body)
				p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
				if c.field != "" && !slices.Contains(fieldsOf(p), c.field) {
					t.Errorf("%v: fields %v, want %s", c.body, fieldsOf(p), c.field)
				}
			}
			if list := decode[struct{ Jobs []jobView }](t, a.ok(t, http.MethodGet, "/api/v1/jobs?pageSize=100", nil)); len(list.Jobs) != 2 {
				t.Fatalf("refused bodies created jobs: %d", len(list.Jobs))
			}
		})
	}
}

// TestPendingCommandsBoundEndToEnd: 50 active jobs wait at a mount; 10
// rider calls of pending-commands hand out 10 commands each, oldest job
// first, the same 10 every time: 10 signed commands and 10
// COMMAND_ISSUED events in all, not 500 (issue 37; docs/api.md, "Jobs"). Once some are answered, the next jobs' commands come.
func TestPendingCommandsBoundEndToEnd(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			uid := uniqueUID("JB")
			d := newDevice(uid)
			a.associate(t, uid, map[string]any{"devicePublicKey": d.publicKey()})
			a.confirm(t, uid)
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
			var jobs []string
			for range 50 {
				jobs = append(jobs, a.createJob(t, map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid}}).ID)
			}
			jobIDs := func(cmds []pendingView) []string {
				out := []string{}
				for _, c := range cmds {
					out = append(out, c.JobID)
				}
				return out
			}
			first := in.pending(t, rider, uid)
			if !slices.Equal(jobIDs(first), jobs[:10]) {
				t.Fatalf("the first call hands out %v, want the 10 oldest jobs %v", jobIDs(first), jobs[:10])
			}
			for i := 1; i < 10; i++ {
				again := in.pending(t, rider, uid)
				if len(again) != 10 || !slices.EqualFunc(again, first, func(x, y pendingView) bool {
					return x.ID == y.ID && *x.SignedToken == *y.SignedToken && x.Payload == y.Payload
				}) {
					t.Fatalf("call %d hands out %v", i+1, jobIDs(again))
				}
			}
			issued := func() int {
				return len(in.jobEvents(t, a.token, "types=COMMAND_ISSUED&mountUid="+uid))
			}
			waitForStep(t, "10 COMMAND_ISSUED in the log", func() bool { return issued() >= 10 })
			time.Sleep(200 * time.Millisecond) // anything more would have committed by now
			if n := issued(); n != 10 {
				t.Fatalf("10 calls appended %d COMMAND_ISSUED events; want 10", n)
			}
			if audit := string(a.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/commands?pageSize=100", nil)); strings.Count(audit, `"jobId":"`) != 10 {
				t.Fatalf("the command audit holds %d job commands; want 10", strings.Count(audit, `"jobId":"`))
			}
			// Three answered: the next three jobs' commands come, the seven
			// others are still the same.
			var rs []any
			for _, c := range first[:3] {
				rs = append(rs, d.receipt(c.ID, "EXECUTED", "", time.Now()))
			}
			res, raw := in.call(http.MethodPost, "/api/v1/mounts/"+uid+"/commands/receipts", rider, receipts(rs...))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("receipts: %d %s", res.StatusCode, raw)
			}
			next := in.pending(t, rider, uid)
			if !slices.Equal(jobIDs(next), jobs[3:13]) || next[0].ID != first[3].ID {
				t.Fatalf("after three answers: %v", jobIDs(next))
			}
		})
	}
}
