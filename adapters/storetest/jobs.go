package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// Jobs (docs/api.md, "Jobs"): targets fixed at creation in one statement,
// counts kept by the transactions of the commands that move them, completion
// and expiry once.

// jobTargetLimiter is a store whose bound of targets a test can lower, so
// that the suite crosses it without seeding 100,000 mounts (the database
// benchmark does that).
type jobTargetLimiter interface{ LimitJobTargets(n int) }

// associateAt claims uid for accountID and, with confirm, confirms it.
func associateAt(t *testing.T, store Store, uid, accountID string, now time.Time, confirm bool) {
	t.Helper()
	ctx := context.Background()
	if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: accountID, Now: now, Deadline: now.Add(time.Hour),
		Key: testKey()}, nil); err != nil {
		t.Fatalf("claim %s: %v", uid, err)
	}
	if !confirm {
		return
	}
	if _, _, err := store.ConfirmAssociation(ctx, uid, accountID, now, nil); err != nil {
		t.Fatalf("confirm %s: %v", uid, err)
	}
}

func newJob(id, accountID string, now time.Time) core.Job {
	return core.Job{ID: id, AccountID: accountID, Code: core.CmdReleaseHelmet, Params: map[string]string{},
		Description: "release " + id, CreatedAt: now, ExpiresAt: now.Add(time.Hour), CreatedBy: "cli_" + accountID}
}

// jobCommand is an ISSUED command of job on uid, generated at.
func jobCommand(uid, accountID, jobID string, i int, at time.Time) core.Command {
	return core.Command{ID: nonceOf(i), MountUID: uid, AccountID: accountID, Code: core.CmdReleaseHelmet,
		Data: map[string]any{"expiresAt": core.FormatTime(at.Add(time.Minute))}, GeneratedAt: at, Payload: "p;" + nonceOf(i),
		SignedToken: "ab", IssuedBy: "cli", ExpiresAt: at.Add(time.Minute), Status: core.CommandIssued, StatusAt: at, JobID: jobID}
}

func targetUIDs(t *testing.T, store Store, accountID, jobID string) []string {
	t.Helper()
	targets, total, err := store.JobTargets(context.Background(), accountID, jobID, core.Page{CurrentPage: 1, PageSize: 1000})
	if err != nil || total != len(targets) {
		t.Fatalf("JobTargets(%s) = %d of %d, %v", jobID, len(targets), total, err)
	}
	uids := []string{}
	for _, tg := range targets {
		if tg.Status != core.TargetPending || tg.Final || tg.CommandID != "" {
			t.Fatalf("new target %+v", tg)
		}
		uids = append(uids, tg.UID)
	}
	return uids
}

func jobEvents(t *testing.T, store Store, accountID string) []core.Event {
	t.Helper()
	return readAll(t, store, core.EventQuery{AccountID: accountID, Types: []core.EventType{core.EventJobCompleted}})
}

// jobCreation: only the account's ASSOCIATED mounts become targets, over
// uids or a filter; the bound refuses with nothing stored; a job without
// targets is COMPLETED at once with its account-level event; other
// accounts see nothing; the audit entry rides in the transaction.
func jobCreation(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, uid := range []string{"JA1", "JA2", "JA3"} {
		associateAt(t, store, uid, "acc_a", now, true)
	}
	associateAt(t, store, "JA4", "acc_a", now, false) // IDLE: no target
	associateAt(t, store, "JB1", "acc_b", now, true)

	actx := core.WithAudit(ctx, core.AuditEntry{At: now, AccountID: "acc_a", Actor: core.Actor{Type: core.ActorClient, ID: "cli"},
		Action: core.AuditJobCreate, Target: "job:job_u", Details: map[string]any{"code": "RELEASE_HELMET"}})
	j, ev, err := store.CreateJob(actx, newJob("job_u", "acc_a", now), core.MountFilter{UIDs: []string{"JA1", "JA3", "JA4", "JB1", "NOPE"}}, now)
	if err != nil || ev != nil || j.State != core.JobActive || j.Targets != 2 || j.Counts != (core.JobCounts{Pending: 2}) || j.Finished != 0 {
		t.Fatalf("CreateJob over uids = %+v, %v, %v", j, ev, err)
	}
	if got := targetUIDs(t, store, "acc_a", "job_u"); !slices.Equal(got, []string{"JA1", "JA3"}) {
		t.Fatalf("targets over uids = %v", got)
	}
	if got, err := store.Job(ctx, "acc_a", "job_u"); err != nil || got.Targets != 2 || got.Counts.Pending != 2 ||
		got.Description != "release job_u" || !got.ExpiresAt.Equal(now.Add(time.Hour)) || got.CreatedBy != "cli_acc_a" || got.Params == nil {
		t.Fatalf("Job = %+v, %v", got, err)
	}
	audit := settledAudit(t, store, core.AuditQuery{AccountID: "acc_a", Action: string(core.AuditJobCreate)}, 1)
	if len(audit) != 1 || audit[0].Target != "job:job_u" {
		t.Fatalf("audit = %+v", audit)
	}

	all, _, err := store.CreateJob(ctx, newJob("job_all", "acc_a", now.Add(time.Millisecond)), core.MountFilter{}, now)
	if err != nil || all.Targets != 3 {
		t.Fatalf("CreateJob over every mount = %+v, %v", all, err)
	}
	if got := targetUIDs(t, store, "acc_a", "job_all"); !slices.Equal(got, []string{"JA1", "JA2", "JA3"}) {
		t.Fatalf("targets over every mount = %v", got)
	}

	// A fleet filter narrows the targets as it narrows GET /mounts.
	expr := &core.FilterExpr{Op: core.FilterOr, Args: []*core.FilterExpr{
		{Op: core.FilterEq, Field: core.FilterUID, String: "JA2"}, {Op: core.FilterEq, Field: core.FilterUID, String: "JA3"}}}
	f := core.MountFilter{Expression: `uid = "JA2" OR uid = "JA3"`, Expr: expr, OfflineCut: now.Add(-time.Minute)}
	fj := newJob("job_f", "acc_a", now.Add(2*time.Millisecond))
	fj.Filter = f.Expression
	got, _, err := store.CreateJob(ctx, fj, f, now)
	if err != nil || got.Targets != 2 || got.Filter != f.Expression {
		t.Fatalf("CreateJob over a filter = %+v, %v", got, err)
	}
	if uids := targetUIDs(t, store, "acc_a", "job_f"); !slices.Equal(uids, []string{"JA2", "JA3"}) {
		t.Fatalf("targets over a filter = %v", uids)
	}
	// A filter on latest values and presence: none was reported.
	lf := core.MountFilter{Expression: "batteryLevel < 20", OfflineCut: now.Add(-time.Minute),
		Expr: &core.FilterExpr{Op: core.FilterLt, Field: core.FilterBatteryLevel, Number: 20}}
	if got, _, err := store.CreateJob(ctx, newJob("job_lf", "acc_a", now), lf, now); err != nil || got.Targets != 0 || got.State != core.JobCompleted {
		t.Fatalf("CreateJob over batteryLevel < 20 = %+v, %v", got, err)
	}
	uf := core.MountFilter{Expression: `presence = "UNKNOWN"`, OfflineCut: now.Add(-time.Minute),
		Expr: &core.FilterExpr{Op: core.FilterEq, Field: core.FilterPresence, String: "UNKNOWN"}}
	if got, _, err := store.CreateJob(ctx, newJob("job_pf", "acc_a", now), uf, now); err != nil || got.Targets != 3 {
		t.Fatalf("CreateJob over presence = %+v, %v", got, err)
	}

	// Past the bound: VALIDATION_FAILED on the field that selected, and
	// nothing stored.
	if lim, ok := store.(jobTargetLimiter); ok {
		lim.LimitJobTargets(2)
		for _, c := range []struct {
			f     core.MountFilter
			field string
		}{{core.MountFilter{}, "filter"}, {core.MountFilter{UIDs: []string{"JA1", "JA2", "JA3"}}, "mountUids"}} {
			_, _, err := store.CreateJob(ctx, newJob("job_big", "acc_a", now), c.f, now)
			var v *core.Error
			if !errors.As(err, &v) || v.Code != core.CodeValidation || len(v.Fields) != 1 || v.Fields[0].Field != c.field {
				t.Fatalf("CreateJob past the bound: %v, want VALIDATION_FAILED on %s", err, c.field)
			}
			if _, err := store.Job(ctx, "acc_a", "job_big"); core.ErrorCode(err) != core.CodeJobNotFound {
				t.Fatalf("a job refused past the bound was stored: %v", err)
			}
		}
		// At the bound exactly, it is created.
		if j, _, err := store.CreateJob(ctx, newJob("job_at", "acc_a", now), core.MountFilter{UIDs: []string{"JA1", "JA2"}}, now); err != nil || j.Targets != 2 {
			t.Fatalf("CreateJob at the bound = %+v, %v", j, err)
		}
		lim.LimitJobTargets(0)
	}

	// No target: COMPLETED at once, with JOB_COMPLETED (no mount).
	empty, ev, err := store.CreateJob(ctx, newJob("job_none", "acc_a", now), core.MountFilter{UIDs: []string{"JB1"}}, now)
	if err != nil || empty.State != core.JobCompleted || !empty.EndedAt.Equal(now) || empty.Targets != 0 || ev == nil ||
		ev.Type != core.EventJobCompleted || ev.ID == (core.Cursor{}) || ev.UID != "" || ev.Job == nil || ev.Job.ID != "job_none" {
		t.Fatalf("CreateJob without targets = %+v, %+v, %v", empty, ev, err)
	}
	logged := jobEvents(t, store, "acc_a") // job_lf's, then job_none's
	logged = logged[len(logged)-1:]
	if len(logged) != 1 || logged[0].ID != ev.ID || logged[0].UID != "" || logged[0].Mount.UID != "" || logged[0].Job == nil ||
		logged[0].Job.ID != "job_none" || logged[0].Job.State != core.JobCompleted || logged[0].AccountID != "acc_a" ||
		!logged[0].OccurredAt.Equal(now) {
		t.Fatalf("JOB_COMPLETED in the log = %+v", logged)
	}
	// A read by mount leaves account-level events out.
	if byMount := readAll(t, store, core.EventQuery{AccountID: "acc_a", MountUIDs: []string{"JA1"}}); len(byMount) != 0 {
		t.Fatalf("events of JA1 = %+v", byMount)
	}

	list, total, err := store.ListJobs(ctx, "acc_a", core.Page{CurrentPage: 1, PageSize: 2})
	if err != nil || total < 3 || len(list) != 2 || list[0].CreatedAt.Before(list[1].CreatedAt) {
		t.Fatalf("ListJobs = %+v (%d), %v", list, total, err)
	}
	// Other accounts: JOB_NOT_FOUND, and an empty list.
	for name, call := range map[string]func() error{
		"Job": func() error { _, err := store.Job(ctx, "acc_b", "job_u"); return err },
		"JobTargets": func() error {
			_, _, err := store.JobTargets(ctx, "acc_b", "job_u", core.Page{CurrentPage: 1, PageSize: 10})
			return err
		},
		"CancelJob": func() error { _, err := store.CancelJob(ctx, "acc_b", "job_u", now); return err },
	} {
		if err := call(); core.ErrorCode(err) != core.CodeJobNotFound {
			t.Fatalf("%s of another account's job: %v", name, err)
		}
	}
	if list, total, err := store.ListJobs(ctx, "acc_b", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 0 || len(list) != 0 {
		t.Fatalf("ListJobs of acc_b = %+v, %v", list, err)
	}

	// The bound of ACTIVE jobs per account: CONFLICT past it.
	n, err := store.ActiveJobs(ctx, "acc_a")
	if err != nil {
		t.Fatal(err)
	}
	for i := n; i < core.MaxActiveJobsPerAccount; i++ {
		if _, _, err := store.CreateJob(ctx, newJob(fmt.Sprintf("job_n%d", i), "acc_a", now), core.MountFilter{UIDs: []string{"JA1"}}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.CreateJob(ctx, newJob("job_over", "acc_a", now), core.MountFilter{UIDs: []string{"JA1"}}, now); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("job past the active bound: %v, want CONFLICT", err)
	}
	if n, err := store.ActiveJobs(ctx, "acc_a"); err != nil || n != core.MaxActiveJobsPerAccount {
		t.Fatalf("ActiveJobs = %d, %v", n, err)
	}
}

// jobProgress: each command of a job moves its target in its own
// transaction, as core.AdvanceJobTarget says, and the job's counts with
// it; the job completes once, with one JOB_COMPLETED.
func jobProgress(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	for _, uid := range []string{"P1", "P2", "P3", "P4"} {
		associateAt(t, store, uid, "acc_a", t0, true)
	}
	if _, _, err := store.CreateJob(ctx, newJob("job_p", "acc_a", t0), core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	var jobEvs []*core.Event
	issue := func(uid string, i int) {
		t.Helper()
		if err := store.InsertCommand(ctx, jobCommand(uid, "acc_a", "job_p", i, t0), nil); err != nil {
			t.Fatalf("issue %d on %s: %v", i, uid, err)
		}
	}
	decide := func(uid string, i int, status core.CommandStatus, reason string, counter uint64) {
		t.Helper()
		d := core.CommandDecision{UID: uid, AccountID: "acc_a", ID: nonceOf(i), Status: status, Reason: reason, Counter: counter,
			At: t0.Add(time.Second), AccountEvents: &[]*core.Event{}}
		if _, _, err := store.DecideCommand(ctx, d, &core.Event{Type: core.EventCommandExecuted, UID: uid, AccountID: "acc_a", OccurredAt: t0}); err != nil {
			t.Fatalf("decide %d: %v", i, err)
		}
		jobEvs = append(jobEvs, *d.AccountEvents...)
	}
	unconfirm := func() {
		t.Helper()
		now := t0.Add(2 * time.Minute)
		if _, err := store.UnconfirmCommands(ctx, now, 100, unconfirmedEvent(now)); err != nil {
			t.Fatal(err)
		}
	}
	type want struct {
		counts   core.JobCounts
		finished int
		state    core.JobState
		target   string // uid
		status   core.JobTargetStatus
		final    bool
		command  int
	}
	for _, step := range []struct {
		name string
		do   func()
		want want
	}{
		{"issued at P1", func() { issue("P1", 1) },
			want{core.JobCounts{Pending: 3, Issued: 1}, 0, core.JobActive, "P1", core.TargetIssued, false, 1}},
		{"P1 fetched again counts once", func() { issue("P1", 2) },
			want{core.JobCounts{Pending: 3, Issued: 1}, 0, core.JobActive, "P1", core.TargetIssued, false, 2}},
		{"the older command's stale refusal is not the latest", func() { decide("P1", 1, core.CommandRefused, core.ReasonStaleCommand, 5) },
			want{core.JobCounts{Pending: 3, Issued: 1}, 0, core.JobActive, "P1", core.TargetIssued, false, 2}},
		{"a replayed refusal leaves the target open", func() { decide("P1", 2, core.CommandRefused, core.ReasonReplayedNonce, 6) },
			want{core.JobCounts{Pending: 3, Refused: 1}, 0, core.JobActive, "P1", core.TargetRefused, false, 2}},
		{"executed at P2", func() { issue("P2", 3); decide("P2", 3, core.CommandExecuted, "", 7) },
			want{core.JobCounts{Pending: 2, Refused: 1, Executed: 1}, 1, core.JobActive, "P2", core.TargetExecuted, true, 3}},
		{"another refusal is final", func() { issue("P3", 4); decide("P3", 4, core.CommandRefused, "helmet absent", 8) },
			want{core.JobCounts{Pending: 1, Refused: 2, Executed: 1}, 2, core.JobActive, "P3", core.TargetRefused, true, 4}},
		{"unconfirmed at P4", func() { issue("P4", 5); unconfirm() },
			want{core.JobCounts{Refused: 2, Executed: 1, Unconfirmed: 1}, 2, core.JobActive, "P4", core.TargetUnconfirmed, false, 5}},
		{"a late receipt executes P4", func() { decide("P4", 5, core.CommandExecuted, "", 9) },
			want{core.JobCounts{Refused: 2, Executed: 2}, 3, core.JobActive, "P4", core.TargetExecuted, true, 5}},
		{"the older command at P1 executes late: complete", func() { decide("P1", 1, core.CommandExecuted, "", 4) },
			want{core.JobCounts{Refused: 1, Executed: 3}, 4, core.JobCompleted, "P1", core.TargetExecuted, true, 1}},
		{"an executed target stays", func() { decide("P1", 2, core.CommandExecuted, "", 10) },
			want{core.JobCounts{Refused: 1, Executed: 3}, 4, core.JobCompleted, "P1", core.TargetExecuted, true, 1}},
	} {
		step.do()
		j, err := store.Job(ctx, "acc_a", "job_p")
		if err != nil || j.Counts != step.want.counts || j.Finished != step.want.finished || j.State != step.want.state {
			t.Fatalf("%s: job %+v, %v; want %+v", step.name, j, err, step.want)
		}
		targets, _, err := store.JobTargets(ctx, "acc_a", "job_p", core.Page{CurrentPage: 1, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(targets, func(tg core.JobTarget) bool { return tg.UID == step.want.target })
		if i < 0 || targets[i].Status != step.want.status || targets[i].Final != step.want.final || targets[i].CommandID != nonceOf(step.want.command) {
			t.Fatalf("%s: targets %+v", step.name, targets)
		}
	}
	if len(jobEvs) != 1 || jobEvs[0].Type != core.EventJobCompleted || jobEvs[0].Job.ID != "job_p" || jobEvs[0].ID == (core.Cursor{}) {
		t.Fatalf("job events from the decisions = %+v", jobEvs)
	}
	logged := jobEvents(t, store, "acc_a")
	if len(logged) != 1 || logged[0].Job.State != core.JobCompleted || logged[0].Job.Counts.Executed != 3 {
		t.Fatalf("JOB_COMPLETED in the log = %+v", logged)
	}
	if j, _ := store.Job(ctx, "acc_a", "job_p"); !j.EndedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("endedAt = %v", j.EndedAt)
	}
	// Commands read back carry their job.
	cmds, err := store.CommandsByID(ctx, "P1", "acc_a", []string{nonceOf(1)})
	if err != nil || len(cmds) != 1 || cmds[0].JobID != "job_p" {
		t.Fatalf("CommandsByID = %+v, %v", cmds, err)
	}
	if list, _, err := store.ListCommands(ctx, "P2", "acc_a", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || len(list) != 1 || list[0].JobID != "job_p" {
		t.Fatalf("ListCommands = %+v, %v", list, err)
	}
	// A completed job takes no more commands: CONFLICT, nothing stored.
	if err := store.InsertCommand(ctx, jobCommand("P3", "acc_a", "job_p", 20, t0), &core.Event{Type: core.EventCommandIssued, UID: "P3", AccountID: "acc_a", OccurredAt: t0}); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("command of a completed job: %v, want CONFLICT", err)
	}
	// Nor a job of another account, nor one the mount is not a target of.
	if _, _, err := store.CreateJob(ctx, newJob("job_q", "acc_a", t0), core.MountFilter{UIDs: []string{"P1"}}, t0); err != nil {
		t.Fatal(err)
	}
	refused := []core.Command{jobCommand("P3", "acc_a", "job_p", 20, t0), jobCommand("P2", "acc_a", "job_q", 21, t0),
		jobCommand("P1", "acc_b", "job_q", 22, t0), jobCommand("P1", "acc_a", "job_q", 23, t0.Add(2*time.Hour))}
	for _, c := range refused[1:] {
		if err := store.InsertCommand(ctx, c, nil); core.ErrorCode(err) != core.CodeConflict {
			t.Fatalf("command %+v: %v, want CONFLICT", c, err)
		}
	}
	for _, c := range refused {
		if cmds, err := store.CommandsByID(ctx, c.MountUID, c.AccountID, []string{c.ID}); err != nil || len(cmds) != 0 {
			t.Fatalf("a refused command was stored: %+v", cmds)
		}
	}
}

// jobExpiry: ExpireJobs completes each expired ACTIVE job once, however
// many callers race, with one JOB_COMPLETED each; an expired job takes no
// command even before the sweep.
func jobExpiry(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	associateAt(t, store, "E1", "acc_a", t0, true)
	const n = 12
	for i := 0; i < n; i++ {
		j := newJob(fmt.Sprintf("job_e%02d", i), "acc_a", t0)
		j.ExpiresAt = t0.Add(time.Duration(i+1) * time.Second)
		if _, _, err := store.CreateJob(ctx, j, core.MountFilter{}, t0); err != nil {
			t.Fatal(err)
		}
	}
	late := newJob("job_late", "acc_a", t0)
	late.ExpiresAt = t0.Add(time.Hour)
	if _, _, err := store.CreateJob(ctx, late, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(time.Minute)
	if err := store.InsertCommand(ctx, jobCommand("E1", "acc_a", "job_e00", 1, now), nil); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("command of an expired job: %v, want CONFLICT", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		turns = map[string]int{}
	)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				events, err := store.ExpireJobs(ctx, now, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range events {
					if e.Type != core.EventJobCompleted || e.ID == (core.Cursor{}) || e.UID != "" || e.Job.State != core.JobCompleted {
						t.Errorf("expiry event %+v", e)
					}
					turns[e.Job.ID]++
				}
				mu.Unlock()
				if len(events) == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(turns) != n {
		t.Fatalf("%d jobs expired, want %d", len(turns), n)
	}
	for id, k := range turns {
		if k != 1 {
			t.Fatalf("job %s expired %d times", id, k)
		}
	}
	if got := jobEvents(t, store, "acc_a"); len(got) != n {
		t.Fatalf("%d JOB_COMPLETED in the log, want %d", len(got), n)
	}
	j, err := store.Job(ctx, "acc_a", "job_e03")
	if err != nil || j.State != core.JobCompleted || !j.EndedAt.Equal(j.ExpiresAt) || j.Counts.Pending != 1 {
		t.Fatalf("expired job = %+v, %v", j, err)
	}
	if j, _ := store.Job(ctx, "acc_a", "job_late"); j.State != core.JobActive {
		t.Fatalf("an unexpired job was completed: %+v", j)
	}
}

// jobCancel: only an ACTIVE job is canceled, once, with its audit entry;
// its targets no longer wait.
func jobCancel(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	associateAt(t, store, "C1", "acc_a", t0, true)
	if _, _, err := store.CreateJob(ctx, newJob("job_c", "acc_a", t0), core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	actx := core.WithAudit(ctx, core.AuditEntry{At: t0, AccountID: "acc_a", Actor: core.Actor{Type: core.ActorClient, ID: "cli"},
		Action: core.AuditJobCancel, Target: "job:job_c"})
	j, err := store.CancelJob(actx, "acc_a", "job_c", t0.Add(time.Second))
	if err != nil || j.State != core.JobCanceled || !j.EndedAt.Equal(t0.Add(time.Second)) {
		t.Fatalf("CancelJob = %+v, %v", j, err)
	}
	if _, err := store.CancelJob(actx, "acc_a", "job_c", t0.Add(2*time.Second)); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("second cancel: %v, want CONFLICT", err)
	}
	if _, err := store.CancelJob(ctx, "acc_a", "job_nope", t0); core.ErrorCode(err) != core.CodeJobNotFound {
		t.Fatalf("cancel of no job: %v", err)
	}
	if audit := settledAudit(t, store, core.AuditQuery{AccountID: "acc_a", Action: string(core.AuditJobCancel)}, 1); len(audit) != 1 {
		t.Fatalf("cancel audit = %+v", audit)
	}
	if pending, err := store.PendingJobs(ctx, "C1", "acc_a", t0, 10); err != nil || len(pending) != 0 {
		t.Fatalf("PendingJobs of a canceled job = %+v, %v", pending, err)
	}
	if err := store.InsertCommand(ctx, jobCommand("C1", "acc_a", "job_c", 1, t0), nil); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("command of a canceled job: %v", err)
	}
	if n, err := store.ActiveJobs(ctx, "acc_a"); err != nil || n != 0 {
		t.Fatalf("ActiveJobs = %d, %v", n, err)
	}
}

// pendingJobs: the ACTIVE, unexpired jobs whose target at the mount is
// not final, oldest first (in the order of creation, even within one
// millisecond), at most limit, of the account only, each with
// its target there (its latest command: what pending-commands may hand
// out again).
func pendingJobs(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	associateAt(t, store, "Q1", "acc_a", t0, true)
	associateAt(t, store, "Q2", "acc_a", t0, true)
	mk := func(id string, created time.Time, expires time.Duration, uids ...string) {
		t.Helper()
		j := newJob(id, "acc_a", created)
		j.ExpiresAt = t0.Add(expires)
		if _, _, err := store.CreateJob(ctx, j, core.MountFilter{UIDs: uids}, t0); err != nil {
			t.Fatal(err)
		}
	}
	// Created in one millisecond, they keep the order of creation: a job
	// is created after the account's newest.
	mk("job_other", t0, time.Hour, "Q2")
	mk("job_expired", t0, time.Second, "Q1")
	mk("job_canceled", t0, time.Hour, "Q1")
	mk("job_done", t0, time.Hour, "Q1", "Q2")
	mk("job_1", t0, time.Hour, "Q1")
	mk("job_2", t0, time.Hour, "Q1", "Q2")
	mk("job_open", t0, time.Hour, "Q1")
	if _, err := store.CancelJob(ctx, "acc_a", "job_canceled", t0); err != nil {
		t.Fatal(err)
	}
	// job_done is final at Q1 (executed), open at Q2; job_open's refusal
	// at Q1 was stale: still waiting.
	for i, c := range []struct {
		job    string
		status core.CommandStatus
		reason string
	}{{"job_done", core.CommandExecuted, ""}, {"job_open", core.CommandRefused, core.ReasonStaleCommand}} {
		if err := store.InsertCommand(ctx, jobCommand("Q1", "acc_a", c.job, i+1, t0), nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.DecideCommand(ctx, core.CommandDecision{UID: "Q1", AccountID: "acc_a", ID: nonceOf(i + 1),
			Status: c.status, Reason: c.reason, At: t0}, nil); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Minute)
	ids := func(jobs []core.PendingJob) []string {
		out := []string{}
		for _, j := range jobs {
			out = append(out, j.Job.ID)
		}
		return out
	}
	// job_1 got a command at Q1, unanswered: the target says which.
	if err := store.InsertCommand(ctx, jobCommand("Q1", "acc_a", "job_1", 3, t0), nil); err != nil {
		t.Fatal(err)
	}
	got, err := store.PendingJobs(ctx, "Q1", "acc_a", now, 10)
	if err != nil || !slices.Equal(ids(got), []string{"job_1", "job_2", "job_open"}) {
		t.Fatalf("PendingJobs(Q1) = %v, %v", ids(got), err)
	}
	for i, want := range []core.JobTarget{
		{JobID: "job_1", UID: "Q1", Status: core.TargetIssued, CommandID: nonceOf(3)},
		{JobID: "job_2", UID: "Q1", Status: core.TargetPending},
		{JobID: "job_open", UID: "Q1", Status: core.TargetRefused, CommandID: nonceOf(2)},
	} {
		tg := got[i].Target
		if tg.JobID != want.JobID || tg.UID != want.UID || tg.Status != want.Status || tg.CommandID != want.CommandID || tg.Final {
			t.Errorf("PendingJobs(Q1)[%d].Target = %+v, want %+v", i, tg, want)
		}
		if got[i].Job.AccountID != "acc_a" || got[i].Job.State != core.JobActive || got[i].Job.Code == "" {
			t.Errorf("PendingJobs(Q1)[%d].Job = %+v", i, got[i].Job)
		}
	}
	if got, err := store.PendingJobs(ctx, "Q1", "acc_a", now, 2); err != nil || !slices.Equal(ids(got), []string{"job_1", "job_2"}) {
		t.Fatalf("PendingJobs(Q1, 2) = %v, %v", ids(got), err)
	}
	if got, err := store.PendingJobs(ctx, "Q2", "acc_a", now, 10); err != nil || !slices.Equal(ids(got), []string{"job_other", "job_done", "job_2"}) &&
		!slices.Equal(ids(got), []string{"job_done", "job_other", "job_2"}) {
		t.Fatalf("PendingJobs(Q2) = %v, %v", ids(got), err)
	}
	if got, err := store.PendingJobs(ctx, "Q1", "acc_b", now, 10); err != nil || len(got) != 0 {
		t.Fatalf("PendingJobs of another account = %v, %v", ids(got), err)
	}
}

// racingJobReceipts: receipts of one job at many mounts decided at once
// keep the counts exact (each move locks the job) and complete the job
// once.
func racingJobReceipts(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	const n = 24
	for i := 0; i < n; i++ {
		associateAt(t, store, fmt.Sprintf("R%02d", i), "acc_a", t0, true)
	}
	if _, _, err := store.CreateJob(ctx, newJob("job_r", "acc_a", t0), core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		if err := store.InsertCommand(ctx, jobCommand(fmt.Sprintf("R%02d", i), "acc_a", "job_r", i, t0), nil); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu        sync.Mutex
		completed int
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, reason := core.CommandExecuted, ""
			if i%3 == 0 {
				status, reason = core.CommandRefused, "helmet absent"
			}
			d := core.CommandDecision{UID: fmt.Sprintf("R%02d", i), AccountID: "acc_a", ID: nonceOf(i), Status: status, Reason: reason,
				At: t0, AccountEvents: &[]*core.Event{}}
			if _, _, err := store.DecideCommand(ctx, d, nil); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			completed += len(*d.AccountEvents)
			mu.Unlock()
		}()
	}
	wg.Wait()
	j, err := store.Job(ctx, "acc_a", "job_r")
	if err != nil || j.State != core.JobCompleted || j.Finished != n || j.Counts != (core.JobCounts{Executed: n - n/3, Refused: n / 3}) {
		t.Fatalf("job after racing receipts = %+v, %v", j, err)
	}
	if got := jobEvents(t, store, "acc_a"); completed != 1 || len(got) != 1 {
		t.Fatalf("%d completions reported, %d JOB_COMPLETED logged; want 1", completed, len(got))
	}
}
