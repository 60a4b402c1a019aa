package core_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

func TestAdvanceJobTarget(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	before := now.Add(-time.Minute)
	target := func(status core.JobTargetStatus, final bool, cmd string) core.JobTarget {
		return core.JobTarget{JobID: "job", UID: "M1", Status: status, Final: final, CommandID: cmd, UpdatedAt: before}
	}
	cmd := func(id string, status core.CommandStatus, reason string) core.Command {
		return core.Command{ID: id, Status: status, Reason: reason, JobID: "job"}
	}
	for _, c := range []struct {
		name string
		t    core.JobTarget
		c    core.Command
		want core.JobTarget // zero: unchanged
	}{
		{"issued from pending", target(core.TargetPending, false, ""), cmd("c1", core.CommandIssued, ""),
			target(core.TargetIssued, false, "c1")},
		{"a newer command becomes the latest", target(core.TargetIssued, false, "c1"), cmd("c2", core.CommandIssued, ""),
			target(core.TargetIssued, false, "c2")},
		{"issued after unconfirmed", target(core.TargetUnconfirmed, false, "c1"), cmd("c2", core.CommandIssued, ""),
			target(core.TargetIssued, false, "c2")},
		{"issued after a stale refusal", target(core.TargetRefused, false, "c1"), cmd("c2", core.CommandIssued, ""),
			target(core.TargetIssued, false, "c2")},
		{"executed", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandExecuted, ""),
			target(core.TargetExecuted, true, "c1")},
		{"an older command executes", target(core.TargetIssued, false, "c2"), cmd("c1", core.CommandExecuted, ""),
			target(core.TargetExecuted, true, "c1")},
		{"executed over a final refusal", target(core.TargetRefused, true, "c1"), cmd("c2", core.CommandExecuted, ""),
			target(core.TargetExecuted, true, "c2")},
		{"executed stays", target(core.TargetExecuted, true, "c1"), cmd("c2", core.CommandExecuted, ""), core.JobTarget{}},
		{"executed stays on a refusal", target(core.TargetExecuted, true, "c1"), cmd("c2", core.CommandRefused, "helmet absent"), core.JobTarget{}},
		{"executed stays on a new command", target(core.TargetExecuted, true, "c1"), cmd("c2", core.CommandIssued, ""), core.JobTarget{}},
		{"a final refusal", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandRefused, "helmet absent"),
			target(core.TargetRefused, true, "c1")},
		{"an older command's final refusal is final", target(core.TargetIssued, false, "c2"), cmd("c1", core.CommandRefused, "helmet absent"),
			target(core.TargetRefused, true, "c1")},
		{"a final refusal stays on a new command", target(core.TargetRefused, true, "c1"), cmd("c2", core.CommandIssued, ""), core.JobTarget{}},
		{"a final refusal stays on unconfirmed", target(core.TargetRefused, true, "c1"), cmd("c1", core.CommandUnconfirmed, ""), core.JobTarget{}},
		{"stale leaves it open", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandRefused, core.ReasonStaleCommand),
			target(core.TargetRefused, false, "c1")},
		{"replayed leaves it open", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandRefused, core.ReasonReplayedNonce),
			target(core.TargetRefused, false, "c1")},
		{"an older command's stale refusal is not the latest", target(core.TargetIssued, false, "c2"),
			cmd("c1", core.CommandRefused, core.ReasonStaleCommand), core.JobTarget{}},
		{"unconfirmed", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandUnconfirmed, ""),
			target(core.TargetUnconfirmed, false, "c1")},
		{"an older command unconfirmed", target(core.TargetIssued, false, "c2"), cmd("c1", core.CommandUnconfirmed, ""), core.JobTarget{}},
		{"a stale refusal after unconfirmed", target(core.TargetUnconfirmed, false, "c1"), cmd("c1", core.CommandRefused, core.ReasonStaleCommand),
			target(core.TargetRefused, false, "c1")},
		{"the same status again", target(core.TargetIssued, false, "c1"), cmd("c1", core.CommandIssued, ""), core.JobTarget{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := core.AdvanceJobTarget(c.t, c.c, now)
			want := c.want
			if want == (core.JobTarget{}) {
				want = c.t
			} else {
				want.UpdatedAt = now
			}
			if got != want || changed != (c.want != core.JobTarget{}) {
				t.Fatalf("AdvanceJobTarget = %+v, %v; want %+v", got, changed, want)
			}
		})
	}
}

func TestApplyJobTarget(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	j := core.Job{State: core.JobActive, Targets: 2, Counts: core.JobCounts{Pending: 2}}
	pending := core.JobTarget{Status: core.TargetPending}
	issued := core.JobTarget{Status: core.TargetIssued, CommandID: "c"}
	executed := core.JobTarget{Status: core.TargetExecuted, Final: true, CommandID: "c"}
	refused := core.JobTarget{Status: core.TargetRefused, Final: true, CommandID: "c"}
	if core.ApplyJobTarget(&j, pending, issued, now) || j.Counts != (core.JobCounts{Pending: 1, Issued: 1}) {
		t.Fatalf("issued: %+v", j)
	}
	if core.ApplyJobTarget(&j, issued, refused, now) || j.Finished != 1 || j.Counts != (core.JobCounts{Pending: 1, Refused: 1}) {
		t.Fatalf("refused: %+v", j)
	}
	// A final target executed late: counts move, Finished does not.
	if core.ApplyJobTarget(&j, refused, executed, now) || j.Finished != 1 || j.Counts != (core.JobCounts{Pending: 1, Executed: 1}) {
		t.Fatalf("executed late: %+v", j)
	}
	if !core.ApplyJobTarget(&j, pending, executed, now) || j.State != core.JobCompleted || !j.EndedAt.Equal(now) || j.Finished != 2 {
		t.Fatalf("completed: %+v", j)
	}
	// A job no longer ACTIVE keeps its counts true but does not complete
	// again.
	c := core.Job{State: core.JobCanceled, Targets: 1, Counts: core.JobCounts{Issued: 1}}
	if core.ApplyJobTarget(&c, issued, executed, now) || c.State != core.JobCanceled || c.Counts.Executed != 1 {
		t.Fatalf("canceled: %+v", c)
	}
}

// fakeFilters parses `uid = "X"` and refuses anything else.
type fakeFilters struct{}

func (fakeFilters) ParseFilter(text string) (*core.FilterExpr, error) {
	uid, ok := strings.CutPrefix(text, `uid = "`)
	if !ok || !strings.HasSuffix(uid, `"`) {
		var v core.Validation
		v.Add("filter", "cannot parse %q", text)
		return nil, v.Err()
	}
	return &core.FilterExpr{Op: core.FilterEq, Field: core.FilterUID, String: strings.TrimSuffix(uid, `"`)}, nil
}

// wakeLog records the positions woken.
type wakeLog struct {
	mu    sync.Mutex
	woken []core.Cursor
}

func (w *wakeLog) Wake(_ context.Context, c core.Cursor) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.woken = append(w.woken, c)
	return nil
}

func (w *wakeLog) Wakeups(ctx context.Context) (<-chan core.Cursor, error) { return nil, nil }

func (w *wakeLog) has(c core.Cursor) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.woken {
		if x == c {
			return true
		}
	}
	return false
}

type jobFixture struct {
	store  *memory.Store
	mounts *core.MountService
	jobs   *core.JobService
	clock  *fakeClock
	waker  *wakeLog
	owner  core.Principal
	other  core.Principal
	rider  core.Principal
}

// newJobFixture builds the fixture; opts change the MountService's ports
// and settings (commands live a minute unless one says otherwise).
func newJobFixture(t *testing.T, opts ...func(*core.MountDeps)) *jobFixture {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	waker := &wakeLog{}
	deps := core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: waker, Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(time.Minute),
		Logger: logger, Jobs: store, Filters: fakeFilters{}}
	for _, o := range opts {
		o(&deps)
	}
	mounts := core.NewMountService(deps)
	jobs := core.NewJobService(core.JobDeps{Store: store, Filters: fakeFilters{}, Waker: waker,
		OfflineAfter: core.OfflineAfter(core.DefaultOfflineAfter), Logger: logger})
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	mounts.SetClock(clock.Now)
	jobs.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	owner := func(name string) core.Principal {
		acc, err := accounts.Create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
			Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	}
	f := &jobFixture{store: store, mounts: mounts, jobs: jobs, clock: clock, waker: waker, owner: owner("A"), other: owner("B")}
	f.rider = core.Principal{AccountID: f.owner.AccountID, ClientID: "rider",
		Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1", "M2"}, Scopes: []string{}}}
	return f
}

func (f *jobFixture) associate(t *testing.T, p core.Principal, uids ...string) {
	t.Helper()
	for _, uid := range uids {
		if _, err := f.mounts.RequestAssociation(context.Background(), p, uid, core.MountFields{}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.mounts.ConfirmAssociation(context.Background(), p, uid); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *jobFixture) create(t *testing.T, in core.JobInput) core.Job {
	t.Helper()
	if in.Code == "" {
		in.Code = "RELEASE_HELMET"
	}
	j, err := f.jobs.CreateJob(context.Background(), f.owner, in)
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	return j
}

func (f *jobFixture) pending(t *testing.T, p core.Principal, uid string) []core.Command {
	t.Helper()
	cmds, err := f.mounts.PendingCommands(context.Background(), p, uid)
	if err != nil {
		t.Fatalf("PendingCommands(%s): %v", uid, err)
	}
	return cmds
}

func (f *jobFixture) receipt(t *testing.T, uid string, c core.Command, outcome, reason string, counter uint64) {
	t.Helper()
	in := []core.ReceiptInput{{Nonce: c.ID, Outcome: outcome, Reason: reason, Counter: counter, At: f.clock.Now()}}
	if _, err := f.mounts.UploadReceipts(context.Background(), f.rider, uid, in); err != nil {
		t.Fatalf("UploadReceipts: %v", err)
	}
}

func (f *jobFixture) job(t *testing.T, id string) core.Job {
	t.Helper()
	j, err := f.jobs.Job(context.Background(), f.owner, id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func fieldsOf(err error) []string {
	var e *core.Error
	if !errors.As(err, &e) {
		return nil
	}
	out := []string{}
	for _, fe := range e.Fields {
		out = append(out, fe.Field)
	}
	return out
}

func TestJobValidation(t *testing.T) {
	f := newJobFixture(t)
	now := f.clock.Now()
	all, bad := "", "nonsense"
	past, far, fine := now.Add(-time.Second), now.Add(core.MaxJobLifetime+time.Second), now.Add(core.MaxJobLifetime)
	tooMany := make([]string, core.MaxJobTargets+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("M%d", i)
	}
	for _, c := range []struct {
		name  string
		in    core.JobInput
		field string // "" valid
	}{
		{"no code", core.JobInput{Filter: &all}, "code"},
		{"unknown code", core.JobInput{Code: "SELF_DESTRUCT", Filter: &all}, "code"},
		{"ASSOCIATE_OWNER", core.JobInput{Code: "ASSOCIATE_OWNER", Filter: &all}, "code"},
		{"INSTALL_FIRMWARE", core.JobInput{Code: "INSTALL_FIRMWARE", Filter: &all}, "code"},
		{"missing params", core.JobInput{Code: "SET_RFID_MODE", Filter: &all}, "params.rfidMode"},
		{"unknown param", core.JobInput{Code: "RELEASE_HELMET", Params: map[string]string{"x": "1"}, Filter: &all}, "params.x"},
		{"neither filter nor uids", core.JobInput{Code: "RELEASE_HELMET"}, "filter"},
		{"empty uids", core.JobInput{Code: "RELEASE_HELMET", MountUIDs: []string{}}, "filter"},
		{"both", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, MountUIDs: []string{"M1"}}, "filter"},
		{"bad filter", core.JobInput{Code: "RELEASE_HELMET", Filter: &bad}, "filter"},
		{"bad uid", core.JobInput{Code: "RELEASE_HELMET", MountUIDs: []string{"M1", "no spaces"}}, "mountUids[1]"},
		{"too many uids", core.JobInput{Code: "RELEASE_HELMET", MountUIDs: tooMany}, "mountUids"},
		{"long description", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, Description: strings.Repeat("é", core.MaxJobDescriptionLength+1)}, "description"},
		{"control characters", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, Description: "a\nb"}, "description"},
		{"expired", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, ExpiresAt: &past}, "expiresAt"},
		{"too far", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, ExpiresAt: &far}, "expiresAt"},
		{"at the longest lifetime", core.JobInput{Code: "RELEASE_HELMET", Filter: &all, ExpiresAt: &fine, Description: strings.Repeat("é", core.MaxJobDescriptionLength)}, ""},
		{"params normalised", core.JobInput{Code: "ADD_NFC_TAG", Params: map[string]string{"tagUid": "04:a2:b3:c4"}, Filter: &all}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := f.jobs.CreateJob(context.Background(), f.owner, c.in)
			if c.field == "" {
				if err != nil {
					t.Fatalf("CreateJob: %v", err)
				}
				return
			}
			if core.ErrorCode(err) != core.CodeValidation || !slicesContains(fieldsOf(err), c.field) {
				t.Fatalf("CreateJob = %+v, %v (fields %v); want VALIDATION_FAILED on %s", j, err, fieldsOf(err), c.field)
			}
		})
	}
	list, _, err := f.jobs.ListJobs(context.Background(), f.owner, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(list) != 2 {
		t.Fatalf("jobs stored = %+v, %v", list, err)
	}
	// Defaults and normalisation.
	tag := list[0]
	if tag.Code != core.CmdAddNfcTag {
		tag = list[1]
	}
	if tag.Params["tagUid"] != "04A2B3C4" || !tag.ExpiresAt.Equal(now.Add(core.DefaultJobLifetime)) || tag.CreatedBy != f.owner.ClientID {
		t.Fatalf("job = %+v", tag)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestJobsOwnerOnly(t *testing.T) {
	f := newJobFixture(t)
	ctx := context.Background()
	all := ""
	j := f.create(t, core.JobInput{Filter: &all})
	partial := core.Principal{AccountID: f.owner.AccountID, ClientID: "x", Grant: core.Grant{Complete: false}}
	for name, p := range map[string]core.Principal{"restricted": f.rider, "incomplete": partial} {
		want := core.CodeForbidden
		if name == "incomplete" {
			want = core.CodeInsufficientScope
		}
		for call, fn := range map[string]func() error{
			"create": func() error {
				_, err := f.jobs.CreateJob(ctx, p, core.JobInput{Code: "RELEASE_HELMET", Filter: &all})
				return err
			},
			"list": func() error {
				_, _, err := f.jobs.ListJobs(ctx, p, core.Page{CurrentPage: 1, PageSize: 10})
				return err
			},
			"get": func() error { _, err := f.jobs.Job(ctx, p, j.ID); return err },
			"mounts": func() error {
				_, _, err := f.jobs.JobMounts(ctx, p, j.ID, core.Page{CurrentPage: 1, PageSize: 10})
				return err
			},
			"cancel": func() error { _, err := f.jobs.CancelJob(ctx, p, j.ID); return err },
		} {
			if err := fn(); core.ErrorCode(err) != want {
				t.Fatalf("%s %s: %v, want %s", name, call, err, want)
			}
		}
	}
	// Another account's owner: JOB_NOT_FOUND.
	for call, fn := range map[string]func() error{
		"get": func() error { _, err := f.jobs.Job(ctx, f.other, j.ID); return err },
		"mounts": func() error {
			_, _, err := f.jobs.JobMounts(ctx, f.other, j.ID, core.Page{CurrentPage: 1, PageSize: 10})
			return err
		},
		"cancel": func() error { _, err := f.jobs.CancelJob(ctx, f.other, j.ID); return err },
	} {
		if err := fn(); core.ErrorCode(err) != core.CodeJobNotFound {
			t.Fatalf("other account %s: %v", call, err)
		}
	}
}

// TestJobLifecycle: a job over two mounts, fetched by a rider's phone,
// moves with the receipts and completes once, with JOB_COMPLETED woken.
func TestJobLifecycle(t *testing.T) {
	f := newJobFixture(t)
	ctx := context.Background()
	f.associate(t, f.owner, "M1", "M2", "M3")
	f.associate(t, f.other, "B1")
	j := f.create(t, core.JobInput{MountUIDs: []string{"M1", "M2", "B1"}, Description: "release all"})
	if j.State != core.JobActive || j.Targets != 2 || j.Counts.Pending != 2 {
		t.Fatalf("created %+v", j)
	}
	audit, err := f.store.ReadAudit(ctx, core.AuditQuery{AccountID: f.owner.AccountID, Action: string(core.AuditJobCreate), Limit: 10})
	if err != nil || len(audit) != 1 || audit[0].Target != "job:"+j.ID || audit[0].Details["mountUids"] != float64(3) ||
		audit[0].Details["code"] != "RELEASE_HELMET" {
		t.Fatalf("audit = %+v, %v", audit, err)
	}
	if cmds := f.pending(t, f.owner, "M3"); len(cmds) != 0 {
		t.Fatalf("M3 is no target: %+v", cmds)
	}
	c1 := f.pending(t, f.rider, "M1")
	if len(c1) != 1 || c1[0].JobID != j.ID || c1[0].Code != core.CmdReleaseHelmet || c1[0].SignedToken == "" {
		t.Fatalf("pending at M1 = %+v", c1)
	}
	// Fetched again: a fresh command, still one target issued.
	c1b := f.pending(t, f.rider, "M1")
	if len(c1b) != 1 || c1b[0].ID == c1[0].ID {
		t.Fatalf("second fetch = %+v", c1b)
	}
	if got := f.job(t, j.ID); got.Counts != (core.JobCounts{Pending: 1, Issued: 1}) {
		t.Fatalf("counts after two fetches = %+v", got.Counts)
	}
	f.receipt(t, "M1", c1b[0], "EXECUTED", "", 1)
	if cmds := f.pending(t, f.rider, "M1"); len(cmds) != 0 {
		t.Fatalf("executed target still pending: %+v", cmds)
	}
	c2 := f.pending(t, f.rider, "M2")
	f.receipt(t, "M2", c2[0], "REFUSED", core.ReasonStaleCommand, 2)
	if got := f.job(t, j.ID); got.Counts != (core.JobCounts{Executed: 1, Refused: 1}) || got.State != core.JobActive {
		t.Fatalf("after a stale refusal = %+v", got)
	}
	c2b := f.pending(t, f.rider, "M2")
	if len(c2b) != 1 {
		t.Fatalf("a stale refusal is offered again: %+v", c2b)
	}
	f.receipt(t, "M2", c2b[0], "EXECUTED", "", 3)
	done := f.job(t, j.ID)
	if done.State != core.JobCompleted || done.Counts != (core.JobCounts{Executed: 2}) || !done.EndedAt.Equal(f.clock.Now()) {
		t.Fatalf("done = %+v", done)
	}
	events, _, err := f.store.ReadEvents(ctx, core.EventQuery{AccountID: f.owner.AccountID, Types: []core.EventType{core.EventJobCompleted}, Limit: 10})
	if err != nil || len(events) != 1 || events[0].Job.ID != j.ID || !events[0].AccountLevel() || !f.waker.has(events[0].ID) {
		t.Fatalf("JOB_COMPLETED = %+v, %v (woken %v)", events, err, f.waker.woken)
	}
	targets, page, err := f.jobs.JobMounts(ctx, f.owner, j.ID, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || page.TotalItems != 2 || targets[0].UID != "M1" || targets[0].CommandID != c1b[0].ID || targets[1].CommandID != c2b[0].ID {
		t.Fatalf("JobMounts = %+v %+v, %v", targets, page, err)
	}
	if _, err := f.jobs.CancelJob(ctx, f.owner, j.ID); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("cancel a completed job: %v", err)
	}
	// The command audit shows the job.
	cmds, _, err := f.mounts.CommandAudit(ctx, f.owner, "M2", core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(cmds) < 2 || cmds[0].JobID != j.ID {
		t.Fatalf("CommandAudit = %+v, %v", cmds, err)
	}
}

func TestPendingCommandsRules(t *testing.T) {
	f := newJobFixture(t)
	ctx := context.Background()
	f.associate(t, f.owner, "M1", "M3")
	f.associate(t, f.other, "B1")
	if _, err := f.mounts.RequestAssociation(ctx, f.owner, "M2", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	all := ""
	for _, c := range []struct {
		name string
		p    core.Principal
		uid  string
		want core.Code
	}{
		{"another account's mount", f.owner, "B1", core.CodeMountNotFound},
		{"an unknown mount", f.owner, "NOPE", core.CodeMountNotFound},
		{"a mount outside the token's items", f.rider, "M3", core.CodeMountNotFound},
		{"an IDLE mount", f.owner, "M2", core.CodeMountNotAssociated},
	} {
		if _, err := f.mounts.PendingCommands(ctx, c.p, c.uid); core.ErrorCode(err) != c.want {
			t.Fatalf("%s: %v, want %s", c.name, err, c.want)
		}
	}
	// Jobs oldest first; a canceled one is left out; SYNC_NFC_TAGS signs
	// the association's tags.
	first := f.create(t, core.JobInput{Filter: &all})
	f.clock.Advance(time.Millisecond)
	second := f.create(t, core.JobInput{Code: "SYNC_NFC_TAGS", Filter: &all})
	f.clock.Advance(time.Millisecond)
	canceled := f.create(t, core.JobInput{Filter: &all})
	if _, err := f.jobs.CancelJob(ctx, f.owner, canceled.ID); err != nil {
		t.Fatal(err)
	}
	cmds := f.pending(t, f.owner, "M1")
	if len(cmds) != 2 || cmds[0].JobID != first.ID || cmds[1].JobID != second.ID || cmds[1].Code != core.CmdSyncNfcTags {
		t.Fatalf("pending = %+v", cmds)
	}
	if _, ok := cmds[1].Data["tagUids"]; !ok {
		t.Fatalf("SYNC_NFC_TAGS without tagUids: %+v", cmds[1].Data)
	}
	// A filter selects the targets.
	one := `uid = "M3"`
	j := f.create(t, core.JobInput{Filter: &one})
	if j.Targets != 1 || j.Filter != one {
		t.Fatalf("filter job = %+v", j)
	}
}

func TestJobExpiryAndBounds(t *testing.T) {
	f := newJobFixture(t)
	ctx := context.Background()
	f.associate(t, f.owner, "M1")
	all := ""
	soon := f.clock.Now().Add(time.Hour)
	j := f.create(t, core.JobInput{Filter: &all, ExpiresAt: &soon})
	for i := 1; i < core.MaxActiveJobsPerAccount; i++ {
		f.create(t, core.JobInput{Filter: &all})
	}
	_, err := f.jobs.CreateJob(ctx, f.owner, core.JobInput{Code: "RELEASE_HELMET", Filter: &all})
	if core.ErrorCode(err) != core.CodeConflict || !strings.Contains(core.ErrorMessage(err), "active jobs") {
		t.Fatalf("job past the active bound: %v", err)
	}
	if n, err := f.jobs.SweepJobs(ctx); err != nil || n != 0 {
		t.Fatalf("early sweep = %d, %v", n, err)
	}
	f.clock.Advance(time.Hour)
	if cmds := f.pending(t, f.owner, "M1"); len(cmds) != core.MaxPendingCommands || slices.ContainsFunc(cmds, func(c core.Command) bool {
		return c.JobID == j.ID
	}) {
		t.Fatalf("an expired job is still offered: %d commands", len(cmds))
	}
	if n, err := f.jobs.SweepJobs(ctx); err != nil || n != 1 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if n, err := f.jobs.SweepJobs(ctx); err != nil || n != 0 {
		t.Fatalf("second sweep = %d, %v", n, err)
	}
	got := f.job(t, j.ID)
	if got.State != core.JobCompleted || !got.EndedAt.Equal(soon) {
		t.Fatalf("expired job = %+v", got)
	}
	events, _, err := f.store.ReadEvents(ctx, core.EventQuery{AccountID: f.owner.AccountID, Types: []core.EventType{core.EventJobCompleted}, Limit: 10})
	if err != nil || len(events) != 1 || !f.waker.has(events[0].ID) {
		t.Fatalf("expiry events = %+v, %v", events, err)
	}
	// Room again for one more.
	f.create(t, core.JobInput{Filter: &all})
	// A job without targets completes at once, woken.
	none := []string{"NOPE"}
	c, err := f.jobs.CancelJob(ctx, f.owner, got.ID)
	if core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("cancel an expired job = %+v, %v", c, err)
	}
	list, _, _ := f.jobs.ListJobs(ctx, f.owner, core.Page{CurrentPage: 1, PageSize: 1})
	if _, err := f.jobs.CancelJob(ctx, f.owner, list[0].ID); err != nil {
		t.Fatal(err)
	}
	empty := f.create(t, core.JobInput{MountUIDs: none})
	if empty.State != core.JobCompleted || empty.Targets != 0 {
		t.Fatalf("job without targets = %+v", empty)
	}
	audit, err := f.store.ReadAudit(ctx, core.AuditQuery{AccountID: f.owner.AccountID, Action: string(core.AuditJobCancel), Limit: 10})
	if err != nil || len(audit) != 1 || audit[0].Target != "job:"+list[0].ID {
		t.Fatalf("cancel audit = %+v, %v", audit, err)
	}
}

// withCommandTTL makes the fixture's commands live ttl.
func withCommandTTL(ttl time.Duration) func(*core.MountDeps) {
	return func(d *core.MountDeps) { d.CommandTTL = core.CommandTTL(ttl) }
}

// countEvents is how many events of type typ the account's log holds.
func countEvents(t *testing.T, store *memory.Store, accountID string, typ core.EventType) int {
	t.Helper()
	events, _, err := store.ReadEvents(context.Background(), core.EventQuery{AccountID: accountID, Types: []core.EventType{typ}, Limit: 10_000})
	if err != nil {
		t.Fatal(err)
	}
	return len(events)
}

// TestPendingCommandsHandOutAgain: a job's unanswered command is handed
// out again, the same one (id, nonce, signature), while it is at least 2
// minutes from its expiresAt: no new command, COMMAND_ISSUED event or
// audit entry (docs/api.md, "Jobs"); closer to it a freshly signed one
// replaces it; an answered one is not handed out again.
func TestPendingCommandsHandOutAgain(t *testing.T) {
	f := newJobFixture(t, withCommandTTL(5*time.Minute))
	ctx := context.Background()
	f.associate(t, f.owner, "M1")
	all := ""
	release := f.create(t, core.JobInput{Filter: &all})
	f.clock.Advance(time.Millisecond)
	tags := f.create(t, core.JobInput{Code: "SYNC_NFC_TAGS", Filter: &all})
	f.clock.Advance(time.Millisecond)
	lock := f.create(t, core.JobInput{Filter: &all})
	issued := func() int { return countEvents(t, f.store, f.owner.AccountID, core.EventCommandIssued) }
	audited := func() int {
		_, page, err := f.mounts.CommandAudit(ctx, f.owner, "M1", core.Page{CurrentPage: 1, PageSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		return page.TotalItems
	}
	same := func(a, b []core.Command) bool {
		return slices.EqualFunc(a, b, func(x, y core.Command) bool {
			return x.ID == y.ID && x.Payload == y.Payload && x.SignedToken == y.SignedToken && x.JobID == y.JobID &&
				x.ExpiresAt.Equal(y.ExpiresAt)
		})
	}
	base := audited() // ASSOCIATE_OWNER
	first := f.pending(t, f.rider, "M1")
	if len(first) != 3 || first[0].JobID != release.ID || first[1].JobID != tags.ID || first[2].JobID != lock.ID ||
		issued() != 3 || audited() != base+3 {
		t.Fatalf("first fetch %+v (%d issued, %d audited)", first, issued(), audited())
	}
	// Up to expiresAt - 2m, the same commands, whoever asks.
	for _, step := range []time.Duration{time.Second, time.Minute, 2*time.Minute - time.Second - 2*time.Millisecond} {
		f.clock.Advance(step)
		for _, p := range []core.Principal{f.rider, f.owner} {
			if again := f.pending(t, p, "M1"); !same(again, first) || issued() != 3 || audited() != base+3 {
				t.Fatalf("at %s: %+v (%d issued, %d audited)", f.clock.Now(), again, issued(), audited())
			}
		}
	}
	if got := f.job(t, release.ID); got.Counts != (core.JobCounts{Issued: 1}) {
		t.Fatalf("counts %+v", got.Counts)
	}
	// The first is answered (EXECUTED), the second refused as stale: the
	// first is no longer offered, the second is signed afresh; the third
	// is still handed out as it was.
	f.receipt(t, "M1", first[0], "EXECUTED", "", 1)
	f.receipt(t, "M1", first[1], "REFUSED", core.ReasonStaleCommand, 2)
	next := f.pending(t, f.rider, "M1")
	if len(next) != 2 || next[0].JobID != tags.ID || next[0].ID == first[1].ID || !same(next[1:], first[2:]) || issued() != 4 {
		t.Fatalf("after the answers %+v (%d issued)", next, issued())
	}
	// Less than 2 minutes from its expiresAt: a fresh one.
	f.clock.Advance(2 * time.Millisecond) // the third's expiresAt - 2m exactly: still the same
	if again := f.pending(t, f.rider, "M1"); !same(again[1:], first[2:]) {
		t.Fatalf("at expiresAt - 2m: %+v", again)
	}
	f.clock.Advance(time.Millisecond)
	fresh := f.pending(t, f.rider, "M1")
	if len(fresh) != 2 || !same(fresh[:1], next[:1]) || fresh[1].ID == first[2].ID || fresh[1].JobID != lock.ID || issued() != 5 {
		t.Fatalf("near expiry %+v (%d issued)", fresh, issued())
	}
	if !fresh[1].ExpiresAt.Equal(f.clock.Now().Add(5 * time.Minute)) {
		t.Fatalf("fresh command expires %s", fresh[1].ExpiresAt)
	}
}

// TestPendingCommandsBound: 50 jobs waiting at a mount: a call hands out
// 10, oldest job first; calls again hand out the same 10 and sign nothing;
// as they are answered the next ones come.
func TestPendingCommandsBound(t *testing.T) {
	f := newJobFixture(t, withCommandTTL(5*time.Minute))
	f.associate(t, f.owner, "M1")
	all := ""
	var jobs []string
	for range core.MaxActiveJobsPerAccount {
		jobs = append(jobs, f.create(t, core.JobInput{Filter: &all}).ID)
		f.clock.Advance(time.Millisecond)
	}
	jobIDs := func(cmds []core.Command) []string {
		out := []string{}
		for _, c := range cmds {
			out = append(out, c.JobID)
		}
		return out
	}
	first := f.pending(t, f.rider, "M1")
	if !slices.Equal(jobIDs(first), jobs[:core.MaxPendingCommands]) {
		t.Fatalf("first call: %v", jobIDs(first))
	}
	for range 9 {
		f.clock.Advance(time.Second)
		if again := f.pending(t, f.rider, "M1"); len(again) != core.MaxPendingCommands || again[0].ID != first[0].ID || again[9].ID != first[9].ID {
			t.Fatalf("again: %v", jobIDs(again))
		}
	}
	if n := countEvents(t, f.store, f.owner.AccountID, core.EventCommandIssued); n != core.MaxPendingCommands {
		t.Fatalf("10 calls signed %d commands", n)
	}
	for i, c := range first[:5] {
		f.receipt(t, "M1", c, "EXECUTED", "", uint64(i+1))
	}
	if next := f.pending(t, f.rider, "M1"); !slices.Equal(jobIDs(next), jobs[5:15]) || next[0].ID != first[5].ID {
		t.Fatalf("after 5 answers: %v", jobIDs(next))
	}
}

// TestHandOutAgain: the rule itself, with the key of the mount's
// association.
func TestHandOutAgain(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	pub, priv, err := ed25519.GenerateKey(strings.NewReader(strings.Repeat("association key!", 4)))
	if err != nil {
		t.Fatal(err)
	}
	otherPub, _, err := ed25519.GenerateKey(strings.NewReader(strings.Repeat("another key, too", 4)))
	if err != nil {
		t.Fatal(err)
	}
	m := core.Mount{UID: "M1", AssociatedAt: now.Add(-time.Hour), Key: core.MountKey{ID: "k1", PublicKey: pub}}
	params := map[string]string{"tagUids": "T1+T2"}
	issued := now.Add(-time.Minute)
	payload := protocol.BuildPayload(issued, "SYNC_NFC_TAGS", "M1", params, "0123456789abcdef0123456789abcdef")
	c := core.Command{ID: "0123456789abcdef0123456789abcdef", MountUID: "M1", Code: core.CmdSyncNfcTags, GeneratedAt: issued,
		Payload: payload, SignedToken: hex.EncodeToString(ed25519.Sign(priv, []byte(payload))), ExpiresAt: issued.Add(5 * time.Minute),
		Status: core.CommandIssued, JobID: "job_1"}
	with := func(change func(*core.Command)) *core.Command {
		x := c
		change(&x)
		return &x
	}
	for _, tc := range []struct {
		name   string
		m      core.Mount
		c      *core.Command
		params map[string]string
		now    time.Time
		want   bool
	}{
		{"unanswered, 4 minutes left", m, &c, params, now, true},
		{"exactly 2 minutes left", m, &c, params, issued.Add(3 * time.Minute), true},
		{"less than 2 minutes left", m, &c, params, issued.Add(3*time.Minute + time.Millisecond), false},
		{"expired", m, &c, params, issued.Add(6 * time.Minute), false},
		{"none", m, nil, params, now, false},
		{"executed", m, with(func(x *core.Command) { x.Status = core.CommandExecuted }), params, now, false},
		{"refused", m, with(func(x *core.Command) { x.Status = core.CommandRefused }), params, now, false},
		{"unconfirmed", m, with(func(x *core.Command) { x.Status = core.CommandUnconfirmed }), params, now, false},
		{"the tags changed since", m, &c, map[string]string{"tagUids": "T1"}, now, false},
		{"another code", m, with(func(x *core.Command) { x.Code = core.CmdReleaseHelmet }), params, now, false},
		{"another mount", core.Mount{UID: "M2", AssociatedAt: m.AssociatedAt, Key: m.Key}, &c, params, now, false},
		{"signed by another key", core.Mount{UID: "M1", AssociatedAt: m.AssociatedAt, Key: core.MountKey{ID: "k2", PublicKey: otherPub}},
			&c, params, now, false},
		{"of an earlier association", core.Mount{UID: "M1", AssociatedAt: now.Add(-time.Second), Key: m.Key}, &c, params, now, false},
		{"a broken signature", m, with(func(x *core.Command) { x.SignedToken = "zz" }), params, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := core.HandOutAgain(tc.m, tc.c, core.CmdSyncNfcTags, tc.params, tc.now)
			if ok != tc.want || ok && (got.ID != c.ID || got.SignedToken != c.SignedToken || got.Params["tagUids"] != "T1+T2") {
				t.Fatalf("HandOutAgain = %+v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}
