package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// Rollouts: targets fixed at creation and split into phases; every
// transition (an install fetched, a refusal, a verified report, the end of
// a health window, pause, resume, cancel) in one transaction under the
// rollout's lock, so that each target is decided once and the counts stay
// exact.

// RunRollouts runs the rollouts' cases of the suite (TestRolloutContract
// in the stores' packages); newStore gives each case a fresh, empty store.
func RunRollouts(t *testing.T, newStore func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, store Store)
	}{
		{"RolloutCreation", rolloutCreation},
		{"RolloutProgress", rolloutProgress},
		{"RolloutChanges", rolloutChanges},
		{"RunningRolloutsOf", runningRolloutsOf},
		{"RolloutLateReports", rolloutLateReports},
		{"RolloutMountLeaves", rolloutMountLeaves},
		{"RacingRolloutSweeps", racingRolloutSweeps},
		{"RacingRolloutCreations", racingRolloutCreations},
		{"RacingRolloutMoves", racingRolloutMoves},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

// rolloutTargetLimiter is a store whose bound of targets a test can lower.
type rolloutTargetLimiter interface{ LimitRolloutTargets(n int) }

// deviceMount claims and confirms uid for accountID with model, revision
// and, unless keyless, a device key.
func deviceMount(t *testing.T, store Store, uid, accountID, model, revision string, keyless bool, now time.Time) {
	t.Helper()
	ctx := context.Background()
	fields := core.MountFields{ModelNumber: &model, SoftwareRevision: &revision}
	if !keyless {
		key := strings.Repeat("ab", 32)
		fields.DevicePublicKey = &key
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: accountID, Fields: fields, Now: now,
		Deadline: now.Add(time.Hour), Key: testKey()}, nil); err != nil {
		t.Fatalf("claim %s: %v", uid, err)
	}
	if _, _, err := store.ConfirmAssociation(ctx, uid, accountID, now, nil); err != nil {
		t.Fatalf("confirm %s: %v", uid, err)
	}
}

func newRollout(id, accountID string, phases []int, now time.Time) core.Rollout {
	return core.Rollout{ID: id, AccountID: accountID, ModelNumber: "RX", SoftwareRevision: "2.0.0", SHA256: strings.Repeat("a", 64),
		Size: 1234, Phases: phases, FailureThreshold: 50, MinSample: 2, HealthWindow: time.Minute, RequireIdle: true,
		State: core.RolloutRunning, CreatedAt: now, CreatedBy: "cli_" + accountID}
}

// installCommand is an ISSUED INSTALL_FIRMWARE of rollout on uid.
func installCommand(uid, accountID, rolloutID string, i int, at time.Time) core.Command {
	c := jobCommand(uid, accountID, "", i, at)
	c.Code, c.RolloutID = core.CmdInstallFirmware, rolloutID
	return c
}

func rolloutTargets(t *testing.T, store Store, accountID, id string) map[string]core.RolloutTarget {
	t.Helper()
	list, total, err := store.RolloutTargets(context.Background(), accountID, id, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil || total != len(list) {
		t.Fatalf("RolloutTargets(%s) = %d of %d, %v", id, len(list), total, err)
	}
	out := map[string]core.RolloutTarget{}
	for _, x := range list {
		out[x.UID] = x
	}
	return out
}

func rolloutEventTypes(t *testing.T, store Store, accountID string, want int) ([]core.EventType, []core.Event) {
	t.Helper()
	q := core.EventQuery{AccountID: accountID,
		Types: []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPaused, core.EventRolloutCompleted}}
	// An event shows once every older transaction of the cluster ended.
	WaitForEvents(t, store, q, want)
	events := readAll(t, store, q)
	var types []core.EventType
	for _, e := range events {
		if e.Rollout == nil || e.UID != "" || e.Mount.UID != "" || e.AccountID != accountID {
			t.Fatalf("rollout event %+v", e)
		}
		types = append(types, e.Type)
	}
	return types, events
}

// verifiedReport stores a report of uid signed with counter on revision
// and returns the rollout events it made.
func verifiedReport(t *testing.T, store Store, uid, accountID, revision string, counter uint64, at time.Time) []*core.Event {
	t.Helper()
	var events []*core.Event
	entry := core.StateEntry{Code: core.StateBatteryLevel, Value: fmt.Sprint(counter % 100), OccurredAt: at.Add(-time.Second),
		ReceivedAt: at, Verified: true}
	if _, _, err := store.InsertReport(context.Background(), uid, accountID, []core.StateEntry{entry},
		core.ReportCheck{SoftwareRevision: revision, Counter: &counter, RolloutEvents: &events}, nil); err != nil {
		t.Fatalf("InsertReport(%s): %v", uid, err)
	}
	return events
}

func refuseCommand(t *testing.T, store Store, uid, accountID, id, reason string, counter uint64, at time.Time) []*core.Event {
	t.Helper()
	return decideCommand(t, store, uid, accountID, id, core.CommandRefused, reason, counter, at)
}

// executeCommand stores a signed EXECUTED receipt of command id at at
// and returns the account events it appended.
func executeCommand(t *testing.T, store Store, uid, accountID, id string, counter uint64, at time.Time) []*core.Event {
	t.Helper()
	return decideCommand(t, store, uid, accountID, id, core.CommandExecuted, "", counter, at)
}

func decideCommand(t *testing.T, store Store, uid, accountID, id string, status core.CommandStatus, reason string, counter uint64,
	at time.Time) []*core.Event {
	t.Helper()
	d := core.CommandDecision{UID: uid, AccountID: accountID, ID: id, Status: status, Reason: reason,
		Counter: counter, Verified: true, At: at, AccountEvents: &[]*core.Event{}}
	if _, _, err := store.DecideCommand(context.Background(), d, nil); err != nil {
		t.Fatalf("DecideCommand(%s): %v", id, err)
	}
	return *d.AccountEvents
}

// rolloutCreation: the targets are the ASSOCIATED mounts of the account
// and model with a device key, not on the revision, within the filter,
// split into phases by core.AssignRolloutPhases; one RUNNING or PAUSED
// rollout per model; the bound; an empty rollout completes at once.
func rolloutCreation(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	now := time.Now().UTC().Truncate(time.Millisecond)
	uids := []string{"RA1", "RA2", "RA3", "RA4", "RA5"}
	for _, uid := range uids {
		deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, now)
	}
	deviceMount(t, store, "RA6", "acc_a", "RX", "2.0.0", false, now) // on it already
	deviceMount(t, store, "RA7", "acc_a", "RX", "1.0.0", true, now)  // no device key
	deviceMount(t, store, "RA8", "acc_a", "RY", "1.0.0", false, now) // another model
	deviceMount(t, store, "RB1", "acc_b", "RX", "1.0.0", false, now) // another account
	associateAt(t, store, "RA9", "acc_a", now, false)                // IDLE

	// Past the bound: VALIDATION_FAILED on filter, nothing stored.
	if lim, ok := store.(rolloutTargetLimiter); ok {
		lim.LimitRolloutTargets(4)
		_, _, err := store.CreateRollout(ctx, newRollout("ro_big", "acc_a", []int{100}, now), core.MountFilter{}, now)
		var v *core.Error
		if !errors.As(err, &v) || v.Code != core.CodeValidation || len(v.Fields) != 1 || v.Fields[0].Field != "filter" {
			t.Fatalf("CreateRollout past the bound: %v", err)
		}
		if _, err := store.Rollout(ctx, "acc_a", "ro_big"); core.ErrorCode(err) != core.CodeRolloutNotFound {
			t.Fatalf("a rollout refused past the bound was stored: %v", err)
		}
		lim.LimitRolloutTargets(0)
	}

	actx := core.WithAudit(ctx, core.AuditEntry{At: now, AccountID: "acc_a", Actor: core.Actor{Type: core.ActorClient, ID: "cli"},
		Action: core.AuditRolloutCreate, Target: "rollout:ro_1", Details: map[string]any{"modelNumber": "RX"}})
	phases := []int{40, 100}
	r, events, err := store.CreateRollout(actx, newRollout("ro_1", "acc_a", phases, now), core.MountFilter{}, now)
	want := core.AssignRolloutPhases(uids, phases)
	first := 0
	for _, p := range want {
		if p == 0 {
			first++
		}
	}
	if err != nil || r.State != core.RolloutRunning || r.Targets != 5 || r.OpenPhase != 0 ||
		r.Counts != (core.RolloutCounts{Eligible: first, Pending: 5 - first}) || len(events) != 1 ||
		events[0].Type != core.EventRolloutPhaseOpened || events[0].Rollout == nil || events[0].ID == (core.Cursor{}) {
		t.Fatalf("CreateRollout = %+v, %+v, %v", r, events, err)
	}
	targets := rolloutTargets(t, store, "acc_a", "ro_1")
	for i, uid := range uids {
		state := core.TargetStatePending
		if want[i] == 0 {
			state = core.TargetStateEligible
		}
		if tg := targets[uid]; tg.Phase != want[i] || tg.State != state || tg.CommandID != "" || !tg.InstallingSince.IsZero() ||
			tg.NewRevisionCounter != nil {
			t.Fatalf("target %s = %+v; want phase %d %s", uid, tg, want[i], state)
		}
	}
	if len(targets) != 5 {
		t.Fatalf("targets %v", targets)
	}
	got, err := store.Rollout(ctx, "acc_a", "ro_1")
	if err != nil || got.SHA256 != r.SHA256 || got.Size != 1234 || !slices.Equal(got.Phases, phases) || got.HealthWindow != time.Minute ||
		!got.RequireIdle || got.MinSample != 2 || got.FailureThreshold != 50 || got.CreatedBy != "cli_acc_a" || got.Counts != r.Counts {
		t.Fatalf("Rollout = %+v, %v", got, err)
	}
	types, logged := rolloutEventTypes(t, store, "acc_a", 1)
	if !slices.Equal(types, []core.EventType{core.EventRolloutPhaseOpened}) || logged[0].Rollout.ID != "ro_1" ||
		logged[0].Rollout.SoftwareRevision != "2.0.0" || !slices.Equal(logged[0].Rollout.Phases, phases) ||
		logged[0].Rollout.HealthWindow != time.Minute || logged[0].Rollout.Counts != r.Counts || !logged[0].OccurredAt.Equal(now) {
		t.Fatalf("logged %+v", logged)
	}
	audit := settledAudit(t, store, core.AuditQuery{AccountID: "acc_a", Action: string(core.AuditRolloutCreate)}, 1)
	if len(audit) != 1 || audit[0].Target != "rollout:ro_1" {
		t.Fatalf("audit = %+v", audit)
	}
	// One RUNNING or PAUSED rollout per account and model.
	if _, _, err := store.CreateRollout(ctx, newRollout("ro_2", "acc_a", []int{100}, now), core.MountFilter{}, now); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("a second rollout of RX: %v", err)
	}
	if rb, _, err := store.CreateRollout(ctx, newRollout("ro_b", "acc_b", []int{100}, now), core.MountFilter{}, now); err != nil || rb.Targets != 1 {
		t.Fatalf("acc_b's rollout of RX: %+v, %v", rb, err)
	}
	// RolloutFor: the live rollout of the model, with the target.
	if fr, tg, ok, err := store.RolloutFor(ctx, "acc_a", "RX", "RA1"); err != nil || !ok || fr.ID != "ro_1" || tg == nil || tg.UID != "RA1" {
		t.Fatalf("RolloutFor(RA1) = %+v, %+v, %v, %v", fr, tg, ok, err)
	}
	if fr, tg, ok, err := store.RolloutFor(ctx, "acc_a", "RX", "RA6"); err != nil || !ok || fr.ID != "ro_1" || tg != nil {
		t.Fatalf("RolloutFor(RA6) = %+v, %+v, %v, %v", fr, tg, ok, err)
	}
	if _, _, ok, err := store.RolloutFor(ctx, "acc_a", "RY", "RA8"); err != nil || ok {
		t.Fatalf("RolloutFor(RY) = %v, %v", ok, err)
	}
	// Other accounts: ROLLOUT_NOT_FOUND.
	for name, call := range map[string]func() error{
		"Rollout": func() error { _, err := store.Rollout(ctx, "acc_b", "ro_1"); return err },
		"RolloutTargets": func() error {
			_, _, err := store.RolloutTargets(ctx, "acc_b", "ro_1", core.Page{CurrentPage: 1, PageSize: 10})
			return err
		},
		"ChangeRollout": func() error {
			_, _, err := store.ChangeRollout(ctx, "acc_b", "ro_1", now, core.ChangeRolloutState(core.AuditRolloutPause, now))
			return err
		},
	} {
		if err := call(); core.ErrorCode(err) != core.CodeRolloutNotFound {
			t.Fatalf("%s of another account's rollout: %v", name, err)
		}
	}
	// A filter narrows; an empty rollout opens every phase and completes.
	if _, _, err := store.ChangeRollout(ctx, "acc_a", "ro_1", now, core.ChangeRolloutState(core.AuditRolloutCancel, now)); err != nil {
		t.Fatal(err)
	}
	expr := &core.FilterExpr{Op: core.FilterEq, Field: core.FilterUID, String: "RA2"}
	fr := newRollout("ro_f", "acc_a", []int{100}, now.Add(time.Millisecond))
	fr.Filter = `uid = "RA2"`
	got, _, err = store.CreateRollout(ctx, fr, core.MountFilter{Expression: fr.Filter, Expr: expr, OfflineCut: now.Add(-time.Minute)}, now)
	if err != nil || got.Targets != 1 || got.Filter != fr.Filter {
		t.Fatalf("CreateRollout over a filter = %+v, %v", got, err)
	}
	if _, _, err := store.ChangeRollout(ctx, "acc_a", "ro_f", now, core.ChangeRolloutState(core.AuditRolloutCancel, now)); err != nil {
		t.Fatal(err)
	}
	none := &core.FilterExpr{Op: core.FilterEq, Field: core.FilterUID, String: "NOPE"}
	empty, events, err := store.CreateRollout(ctx, newRollout("ro_e", "acc_a", []int{10, 50, 100}, now.Add(2*time.Millisecond)),
		core.MountFilter{Expression: "x", Expr: none}, now)
	if err != nil || empty.State != core.RolloutCompleted || empty.Targets != 0 || empty.OpenPhase != 2 || !empty.EndedAt.Equal(now) ||
		len(events) != 4 || events[3].Type != core.EventRolloutCompleted {
		t.Fatalf("empty rollout = %+v, %d events, %v", empty, len(events), err)
	}
	list, total, err := store.ListRollouts(ctx, "acc_a", core.Page{CurrentPage: 1, PageSize: 2})
	if err != nil || total != 3 || len(list) != 2 || list[0].ID != "ro_e" || list[1].ID != "ro_f" {
		t.Fatalf("ListRollouts = %+v (%d), %v", list, total, err)
	}
	if list, total, err := store.ListRollouts(ctx, "acc_b", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 1 || len(list) != 1 {
		t.Fatalf("ListRollouts of acc_b = %+v, %v", list, err)
	}
	// A mount's rollouts: newest first with its target, paged; only the
	// caller's account's, whoever else rolled out to the mount.
	if at, total, err := store.MountRollouts(ctx, "acc_a", "RA2", core.Page{CurrentPage: 1, PageSize: 1}); err != nil || total != 2 || len(at) != 1 ||
		at[0].Rollout.ID != "ro_f" || at[0].Target.UID != "RA2" || at[0].Target.RolloutID != "ro_f" || at[0].Target.State != core.TargetStateEligible {
		t.Fatalf("MountRollouts(RA2) page 1 = %+v (%d), %v", at, total, err)
	}
	if at, total, err := store.MountRollouts(ctx, "acc_a", "RA2", core.Page{CurrentPage: 2, PageSize: 1}); err != nil || total != 2 || len(at) != 1 ||
		at[0].Rollout.ID != "ro_1" || at[0].Rollout.State != core.RolloutCanceled || at[0].Target.Phase != want[1] {
		t.Fatalf("MountRollouts(RA2) page 2 = %+v (%d), %v", at, total, err)
	}
	for _, c := range []struct{ account, uid, rollout string }{{"acc_b", "RA2", ""}, {"acc_a", "RB1", ""}, {"acc_b", "RB1", "ro_b"}, {"acc_a", "RA6", ""}} {
		at, total, err := store.MountRollouts(ctx, c.account, c.uid, core.Page{CurrentPage: 1, PageSize: 10})
		if err != nil || total != len(at) || (c.rollout == "" && len(at) != 0) || (c.rollout != "" && (len(at) != 1 || at[0].Rollout.ID != c.rollout)) {
			t.Fatalf("MountRollouts(%s, %s) = %+v, %v", c.account, c.uid, at, err)
		}
	}
}

// rolloutProgress: a command fetched leaves its target ELIGIBLE; the
// first signed EXECUTED receipt of any of its install commands makes it
// INSTALLING, the window counting from the receipt (docs/api.md,
// "Rollouts"); offers; a verified report on the new
// revision, then the window's end: HEALTHY, and the next phase opens; a
// rollback and a refusal fail at once, a stale refusal does not; the
// rollout completes.
func rolloutProgress(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	uids := []string{"RP1", "RP2", "RP3", "RP4"}
	for _, uid := range uids {
		deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, t0)
	}
	// Thresholds out of the way: 100% may fail.
	ro := newRollout("ro_p", "acc_a", []int{25, 100}, t0)
	ro.FailureThreshold = 100
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	var first string
	var rest []string
	for i, p := range core.AssignRolloutPhases(uids, ro.Phases) {
		if p == 0 {
			first = uids[i]
		} else {
			rest = append(rest, uids[i])
		}
	}
	if first == "" || len(rest) != 3 {
		t.Fatalf("phases: %q %v", first, rest)
	}
	// Offers: the ELIGIBLE target only.
	if offers, err := store.RolloutOffers(ctx, first, "acc_a"); err != nil || len(offers) != 1 || offers[0].Rollout.ID != "ro_p" ||
		offers[0].Target.State != core.TargetStateEligible || offers[0].Rollout.SHA256 != ro.SHA256 {
		t.Fatalf("RolloutOffers(%s) = %+v, %v", first, offers, err)
	}
	if offers, err := store.RolloutOffers(ctx, rest[0], "acc_a"); err != nil || len(offers) != 0 {
		t.Fatalf("RolloutOffers(%s) = %+v, %v", rest[0], offers, err)
	}
	// A PENDING target, a mount that is no target: CONFLICT, nothing stored.
	for i, uid := range []string{rest[0], "RPX"} {
		if uid == "RPX" {
			deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, t0)
		}
		if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_p", 90+i, t0), nil); core.ErrorCode(err) != core.CodeConflict {
			t.Fatalf("install on %s: %v", uid, err)
		}
	}
	if cmds, _, err := store.ListCommands(ctx, rest[0], "acc_a", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || len(cmds) != 0 {
		t.Fatalf("commands stored on a conflict: %+v, %v", cmds, err)
	}
	if err := store.InsertCommand(ctx, installCommand(first, "acc_a", "ro_p", 1, t0), nil); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(10 * time.Second)
	if err := store.InsertCommand(ctx, installCommand(first, "acc_a", "ro_p", 2, t1), nil); err != nil {
		t.Fatal(err)
	}
	tg := rolloutTargets(t, store, "acc_a", "ro_p")[first]
	if tg.State != core.TargetStateEligible || !tg.InstallingSince.IsZero() || tg.CommandID != nonceOf(2) {
		t.Fatalf("fetched target %+v", tg)
	}
	if cmds, err := store.CommandsByID(ctx, first, "acc_a", []string{nonceOf(2)}); err != nil || len(cmds) != 1 || cmds[0].RolloutID != "ro_p" {
		t.Fatalf("the command's rollout: %+v, %v", cmds, err)
	}
	if r, _ := store.Rollout(ctx, "acc_a", "ro_p"); r.Counts != (core.RolloutCounts{Eligible: 1, Pending: 3}) {
		t.Fatalf("counts after fetches %+v", r.Counts)
	}
	if offers, err := store.RolloutOffers(ctx, first, "acc_a"); err != nil || len(offers) != 1 || offers[0].Target.CommandID != nonceOf(2) {
		t.Fatalf("RolloutOffers(%s) after fetches = %+v, %v", first, offers, err)
	}
	// The first command's EXECUTED receipt, at t1: INSTALLING from then,
	// with it as the target's command; the second's later receipt moves
	// nothing.
	if ev := executeCommand(t, store, first, "acc_a", nonceOf(1), 1, t1); len(ev) != 0 {
		t.Fatalf("events of an EXECUTED install %+v", ev)
	}
	tg = rolloutTargets(t, store, "acc_a", "ro_p")[first]
	if tg.State != core.TargetStateInstalling || !tg.InstallingSince.Equal(t1) || tg.CommandID != nonceOf(1) {
		t.Fatalf("installing target %+v", tg)
	}
	executeCommand(t, store, first, "acc_a", nonceOf(2), 2, t1.Add(time.Second))
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[first]; tg.State != core.TargetStateInstalling || !tg.InstallingSince.Equal(t1) {
		t.Fatalf("a second EXECUTED install moved %+v", tg)
	}
	if r, _ := store.Rollout(ctx, "acc_a", "ro_p"); r.Counts != (core.RolloutCounts{Installing: 1, Pending: 3}) {
		t.Fatalf("counts %+v", r.Counts)
	}
	// A report on the new revision; before the window's end nothing is
	// decided.
	if ev := verifiedReport(t, store, first, "acc_a", "2.0.0", 5, t1); len(ev) != 0 {
		t.Fatalf("events of a report %+v", ev)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[first]; tg.NewRevisionCounter == nil || *tg.NewRevisionCounter != 5 {
		t.Fatalf("target after the report %+v", tg)
	}
	if n, ev, err := store.DecideRolloutTargets(ctx, t1.Add(time.Minute-time.Millisecond), 100); err != nil || n != 0 || len(ev) != 0 {
		t.Fatalf("decided early: %d, %+v, %v", n, ev, err)
	}
	n, ev, err := store.DecideRolloutTargets(ctx, t1.Add(time.Minute), 100)
	if err != nil || n != 1 || len(ev) != 1 || ev[0].Type != core.EventRolloutPhaseOpened || ev[0].Rollout.OpenPhase != 1 ||
		ev[0].Rollout.Counts != (core.RolloutCounts{Healthy: 1, Eligible: 3}) {
		t.Fatalf("window end: %+v, %v", ev, err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[first]; tg.State != core.TargetStateHealthy {
		t.Fatalf("target %+v", tg)
	}
	if n, ev, err := store.DecideRolloutTargets(ctx, t0.Add(time.Hour), 100); err != nil || n != 0 || len(ev) != 0 {
		t.Fatalf("decided again: %d, %+v, %v", n, ev, err)
	}
	// Rollback: the new revision, then the old with a higher counter.
	t2 := t0.Add(2 * time.Minute)
	a, b, c := rest[0], rest[1], rest[2]
	for i, uid := range rest {
		if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_p", 10+i, t2), nil); err != nil {
			t.Fatal(err)
		}
	}
	verifiedReport(t, store, a, "acc_a", "1.0.0", 3, t2) // before the new: no rollback
	verifiedReport(t, store, a, "acc_a", "2.0.0", 4, t2)
	verifiedReport(t, store, a, "acc_a", "1.0.0", 5, t2)
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[a]; tg.State != core.TargetStateFailed || tg.Reason != "rollback" {
		t.Fatalf("rollback %+v", tg)
	}
	// A stale refusal leaves it ELIGIBLE; bad image fails it.
	if ev := refuseCommand(t, store, b, "acc_a", nonceOf(11), core.ReasonStaleCommand, 7, t2); len(ev) != 0 {
		t.Fatalf("events of a stale refusal %+v", ev)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[b]; tg.State != core.TargetStateEligible {
		t.Fatalf("stale %+v", tg)
	}
	if err := store.InsertCommand(ctx, installCommand(b, "acc_a", "ro_p", 20, t2), nil); err != nil {
		t.Fatalf("offered again after a stale refusal: %v", err)
	}
	refuseCommand(t, store, b, "acc_a", nonceOf(20), "bad image", 8, t2)
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[b]; tg.State != core.TargetStateFailed || tg.Reason != "refused: bad image" {
		t.Fatalf("refused %+v", tg)
	}
	if err := store.InsertCommand(ctx, installCommand(b, "acc_a", "ro_p", 21, t2), nil); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("install on a FAILED target: %v", err)
	}
	// The last target: executed, no report on the new revision, FAILED
	// at the end; the rollout completes.
	executeCommand(t, store, c, "acc_a", nonceOf(12), 9, t2)
	n, ev, err = store.DecideRolloutTargets(ctx, t2.Add(time.Minute), 100)
	if err != nil || n != 1 || len(ev) != 1 || ev[0].Type != core.EventRolloutCompleted {
		t.Fatalf("completion: %+v, %v", ev, err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_p")[c]; tg.State != core.TargetStateFailed || tg.Reason != "no report on the new revision" {
		t.Fatalf("no report %+v", tg)
	}
	r, err := store.Rollout(ctx, "acc_a", "ro_p")
	if err != nil || r.State != core.RolloutCompleted || r.Counts != (core.RolloutCounts{Healthy: 1, Failed: 3}) || !r.EndedAt.Equal(t2.Add(time.Minute)) {
		t.Fatalf("completed %+v, %v", r, err)
	}
	types, logged := rolloutEventTypes(t, store, "acc_a", 3)
	if !slices.Equal(types, []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutCompleted}) ||
		logged[2].Rollout.State != core.RolloutCompleted {
		t.Fatalf("events %v", types)
	}
	if offers, err := store.RolloutOffers(ctx, c, "acc_a"); err != nil || len(offers) != 0 {
		t.Fatalf("a completed rollout offers %+v, %v", offers, err)
	}
}

// rolloutLateReports: reports relayed out of order still catch a
// rollback (the old revision at counter 9, then the new one at 7), the
// counter kept across transactions; a verified report on the new
// revision at an ELIGIBLE target (installed by hand) makes it INSTALLING
// from then, with no offer left.
func rolloutLateReports(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	uids := []string{"RL1", "RL2"}
	for _, uid := range uids {
		deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, t0)
	}
	ro := newRollout("ro_l", "acc_a", []int{100}, t0)
	ro.FailureThreshold = 100
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	if err := store.InsertCommand(ctx, installCommand("RL1", "acc_a", "ro_l", 1, t0), nil); err != nil {
		t.Fatal(err)
	}
	executeCommand(t, store, "RL1", "acc_a", nonceOf(1), 1, t0)
	t1 := t0.Add(time.Second)
	verifiedReport(t, store, "RL1", "acc_a", "1.0.0", 9, t1)
	if tg := rolloutTargets(t, store, "acc_a", "ro_l")["RL1"]; tg.State != core.TargetStateInstalling ||
		tg.OldRevisionCounter == nil || *tg.OldRevisionCounter != 9 {
		t.Fatalf("after the old report: %+v", tg)
	}
	verifiedReport(t, store, "RL1", "acc_a", "2.0.0", 7, t1.Add(time.Second))
	if tg := rolloutTargets(t, store, "acc_a", "ro_l")["RL1"]; tg.State != core.TargetStateFailed || tg.Reason != "rollback" {
		t.Fatalf("new@7 after old@9: %+v", tg)
	}

	t2 := t1.Add(2 * time.Second)
	verifiedReport(t, store, "RL2", "acc_a", "2.0.0", 4, t2)
	tg := rolloutTargets(t, store, "acc_a", "ro_l")["RL2"]
	if tg.State != core.TargetStateInstalling || !tg.InstallingSince.Equal(t2) || tg.NewRevisionCounter == nil ||
		*tg.NewRevisionCounter != 4 || tg.CommandID != "" {
		t.Fatalf("installed by hand: %+v", tg)
	}
	if r, err := store.Rollout(ctx, "acc_a", "ro_l"); err != nil || r.Counts != (core.RolloutCounts{Installing: 1, Failed: 1}) {
		t.Fatalf("rollout = %+v, %v", r.Counts, err)
	}
	// Its health window counts from the report: HEALTHY at its end.
	if n, _, err := store.DecideRolloutTargets(ctx, t2.Add(ro.HealthWindow-time.Millisecond), 10); err != nil || n != 0 {
		t.Fatalf("before the window's end: %d, %v", n, err)
	}
	if n, _, err := store.DecideRolloutTargets(ctx, t2.Add(ro.HealthWindow), 10); err != nil || n != 1 {
		t.Fatalf("at the window's end: %d, %v", n, err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_l")["RL2"]; tg.State != core.TargetStateHealthy {
		t.Fatalf("decided: %+v", tg)
	}
}

// rolloutMountLeaves: a target whose mount leaves the account (deleted,
// abandoned) FAILED "mount left the account" in the mount's transaction,
// outside the failure sample, and the rollout moves on: the next phase
// opens, then it completes; the rollout events hang on the mount's event.
// A refreshed claim by the same account leaves the targets alone. Claimed
// by another account, the mount's rollouts are each account's own.
func rolloutMountLeaves(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	uids := []string{"RM1", "RM2", "RM3", "RM4"}
	for _, uid := range uids {
		deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, t0)
	}
	ro := newRollout("ro_m", "acc_a", []int{25, 100}, t0)
	ro.MinSample, ro.FailureThreshold = 1, 0
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	var first string
	var rest []string
	for i, p := range core.AssignRolloutPhases(uids, ro.Phases) {
		if p == 0 {
			first = uids[i]
		} else {
			rest = append(rest, uids[i])
		}
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: first, AccountID: "acc_a", Now: t0, Deadline: t0.Add(time.Hour),
		Key: testKey()}, nil); err != nil {
		t.Fatal(err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_m")[first]; tg.State != core.TargetStateEligible {
		t.Fatalf("after the owner's claim: %+v", tg)
	}
	if err := store.InsertCommand(ctx, installCommand(first, "acc_a", "ro_m", 1, t0), nil); err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(time.Second)
	del := &core.Event{Type: core.EventDeleted, UID: first, AccountID: "acc_a", OccurredAt: t1}
	if _, err := store.DeleteMount(ctx, first, "acc_a", del); err != nil {
		t.Fatal(err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_m")[first]; tg.State != core.TargetStateFailed || tg.Reason != core.RolloutReasonMountLeft {
		t.Fatalf("deleted: %+v", tg)
	}
	if len(del.Then) != 1 || del.Then[0].Type != core.EventRolloutPhaseOpened || del.Then[0].Rollout.OpenPhase != 1 {
		t.Fatalf("the delete's rollout events: %+v", del.Then)
	}
	r, err := store.Rollout(ctx, "acc_a", "ro_m")
	if err != nil || r.State != core.RolloutRunning || r.SampleFailed != 0 ||
		r.Counts != (core.RolloutCounts{Eligible: 3, Failed: 1}) {
		t.Fatalf("after the delete (no pause: the sample is empty): %+v, %v", r, err)
	}
	for i, uid := range rest {
		if i == 0 {
			if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_m", 10, t1), nil); err != nil {
				t.Fatal(err)
			}
		}
		ab := &core.Event{Type: core.EventAbandoned, UID: uid, AccountID: "acc_a", OccurredAt: t1}
		if _, err := store.AbandonMount(ctx, uid, "acc_a", t1, ab); err != nil {
			t.Fatal(err)
		}
		if last := i == len(rest)-1; last != (len(ab.Then) == 1 && ab.Then[0].Type == core.EventRolloutCompleted) || !last && len(ab.Then) != 0 {
			t.Fatalf("the abandon of %s: %+v", uid, ab.Then)
		}
	}
	r, err = store.Rollout(ctx, "acc_a", "ro_m")
	if err != nil || r.State != core.RolloutCompleted || r.SampleFailed != 0 || r.Counts != (core.RolloutCounts{Failed: 4}) {
		t.Fatalf("after the abandons: %+v, %v", r, err)
	}
	types, _ := rolloutEventTypes(t, store, "acc_a", 3)
	if !slices.Equal(types, []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutCompleted}) {
		t.Fatalf("rollout events %v", types)
	}
	// The mount in other hands: each account sees its own rollouts of it.
	t2 := t1.Add(time.Second)
	deviceMount(t, store, rest[0], "acc_b", "RX", "1.0.0", false, t2)
	if _, _, err := store.CreateRollout(ctx, newRollout("ro_mb", "acc_b", []int{100}, t2), core.MountFilter{}, t2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ account, rollout string }{{"acc_a", "ro_m"}, {"acc_b", "ro_mb"}} {
		at, total, err := store.MountRollouts(ctx, c.account, rest[0], core.Page{CurrentPage: 1, PageSize: 10})
		if err != nil || total != 1 || len(at) != 1 || at[0].Rollout.ID != c.rollout || at[0].Target.UID != rest[0] {
			t.Fatalf("MountRollouts(%s, %s) = %+v (%d), %v", c.account, rest[0], at, total, err)
		}
	}
}

// rolloutChanges: pause, resume, cancel and their conflicts; the threshold
// pauses; a paused rollout offers nothing and takes no command but still
// decides; a resume opens the next phase when the open ones are decided;
// a canceled rollout's targets are not decided.
// runningRolloutsOf: the RUNNING rollouts of a model's revision, across
// accounts, by id; not a paused one, nor another revision's or model's.
func runningRolloutsOf(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b", "acc_c")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	for _, m := range []struct{ uid, account, model string }{{"RR1", "acc_a", "RX"}, {"RR2", "acc_b", "RX"}, {"RR3", "acc_c", "RX"}, {"RR4", "acc_a", "RY"}} {
		deviceMount(t, store, m.uid, m.account, m.model, "1.0.0", false, t0)
	}
	for _, r := range []struct{ id, account, model, revision string }{
		{"ro_rb", "acc_b", "RX", "2.0.0"}, {"ro_ra", "acc_a", "RX", "2.0.0"}, {"ro_rc", "acc_c", "RX", "2.0.0"}, {"ro_ry", "acc_a", "RY", "2.0.0"},
	} {
		ro := newRollout(r.id, r.account, []int{100}, t0)
		ro.ModelNumber, ro.SoftwareRevision = r.model, r.revision
		if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
			t.Fatal(err)
		}
	}
	actx := core.WithAudit(ctx, core.AuditEntry{At: t0, AccountID: "acc_c", Actor: core.Actor{Type: core.ActorClient, ID: "cli"},
		Action: core.AuditRolloutPause, Target: "rollout:ro_rc", Details: map[string]any{}})
	if _, _, err := store.ChangeRollout(actx, "acc_c", "ro_rc", t0, core.ChangeRolloutState(core.AuditRolloutPause, t0)); err != nil {
		t.Fatal(err)
	}
	got, err := store.RunningRolloutsOf(ctx, "RX", "2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range got {
		if r.ModelNumber != "RX" || r.SoftwareRevision != "2.0.0" || r.State != core.RolloutRunning {
			t.Fatalf("rollout %+v", r)
		}
		ids = append(ids, r.ID)
	}
	if !slices.Equal(ids, []string{"ro_ra", "ro_rb"}) {
		t.Fatalf("running rollouts of RX 2.0.0: %v", ids)
	}
	if got, err := store.RunningRolloutsOf(ctx, "RX", "3.0.0"); err != nil || len(got) != 0 {
		t.Fatalf("another revision: %+v, %v", got, err)
	}
}

func rolloutChanges(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	uids := []string{"RC1", "RC2", "RC3"}
	for _, uid := range uids {
		deviceMount(t, store, uid, "acc_a", "RX", "1.0.0", false, t0)
	}
	// Threshold 0 with a sample of 1: the first failure pauses.
	ro := newRollout("ro_c", "acc_a", []int{100}, t0)
	ro.FailureThreshold, ro.MinSample = 0, 1
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	for i, uid := range uids {
		if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_c", i, t0), nil); err != nil {
			t.Fatal(err)
		}
		if uid == "RC3" {
			executeCommand(t, store, uid, "acc_a", nonceOf(i), 1, t0) // INSTALLING, no report
		}
	}
	change := func(action core.AuditAction) (core.Rollout, []*core.Event, error) {
		actx := core.WithAudit(ctx, core.AuditEntry{At: t0, AccountID: "acc_a", Actor: core.Actor{Type: core.ActorClient, ID: "cli"},
			Action: action, Target: "rollout:ro_c", Details: map[string]any{}})
		return store.ChangeRollout(actx, "acc_a", "ro_c", t0, core.ChangeRolloutState(action, t0))
	}
	if _, _, err := change(core.AuditRolloutResume); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("resume a running rollout: %v", err)
	}
	ev := refuseCommand(t, store, "RC1", "acc_a", nonceOf(0), "bad image", 1, t0)
	if len(ev) != 1 || ev[0].Type != core.EventRolloutPaused || ev[0].Rollout.PausedReason != core.PausedFailureThreshold {
		t.Fatalf("threshold: %+v", ev)
	}
	if _, _, err := change(core.AuditRolloutPause); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("pause a paused rollout: %v", err)
	}
	// Paused: no offer, no command; reports and the window still decide.
	if offers, err := store.RolloutOffers(ctx, "RC2", "acc_a"); err != nil || len(offers) != 0 {
		t.Fatalf("paused offers %+v, %v", offers, err)
	}
	if err := store.InsertCommand(ctx, installCommand("RC2", "acc_a", "ro_c", 10, t0), nil); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("install while paused: %v", err)
	}
	verifiedReport(t, store, "RC2", "acc_a", "2.0.0", 2, t0)
	if tg := rolloutTargets(t, store, "acc_a", "ro_c")["RC2"]; tg.State != core.TargetStateInstalling {
		t.Fatalf("a verified report on the new revision while paused: %+v", tg)
	}
	if n, _, err := store.DecideRolloutTargets(ctx, t0.Add(time.Minute), 100); err != nil || n != 2 {
		t.Fatalf("decided %d while paused, %v; want 2", n, err)
	}
	r, _ := store.Rollout(ctx, "acc_a", "ro_c")
	if r.State != core.RolloutPaused || r.Counts != (core.RolloutCounts{Healthy: 1, Failed: 2}) {
		t.Fatalf("paused rollout decided %+v", r)
	}
	// Resumed: every phase decided, so it completes at once.
	r, ev, err := change(core.AuditRolloutResume)
	if err != nil || r.State != core.RolloutCompleted || r.SampleFailed != 0 || len(ev) != 1 || ev[0].Type != core.EventRolloutCompleted {
		t.Fatalf("resume: %+v, %+v, %v", r, ev, err)
	}
	for _, a := range []core.AuditAction{core.AuditRolloutPause, core.AuditRolloutResume, core.AuditRolloutCancel} {
		if _, _, err := change(a); core.ErrorCode(err) != core.CodeConflict {
			t.Fatalf("%s a completed rollout: %v", a, err)
		}
	}
	audit := settledAudit(t, store, core.AuditQuery{AccountID: "acc_a", Action: string(core.AuditRolloutResume)}, 1)
	if len(audit) != 1 {
		t.Fatalf("audit = %+v", audit)
	}

	// Manual pause, then cancel: INSTALLING targets stay undecided.
	ro = newRollout("ro_d", "acc_a", []int{100}, t0.Add(time.Millisecond))
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	if err := store.InsertCommand(ctx, installCommand("RC1", "acc_a", "ro_d", 30, t0), nil); err != nil {
		t.Fatal(err)
	}
	executeCommand(t, store, "RC1", "acc_a", nonceOf(30), 3, t0)
	p, ev, err := store.ChangeRollout(ctx, "acc_a", "ro_d", t0, core.ChangeRolloutState(core.AuditRolloutPause, t0))
	if err != nil || p.State != core.RolloutPaused || p.PausedReason != core.PausedManual || len(ev) != 1 {
		t.Fatalf("pause: %+v, %+v, %v", p, ev, err)
	}
	cr, _, err := store.ChangeRollout(ctx, "acc_a", "ro_d", t0, core.ChangeRolloutState(core.AuditRolloutCancel, t0))
	if err != nil || cr.State != core.RolloutCanceled || !cr.EndedAt.Equal(t0) || cr.PausedReason != "" {
		t.Fatalf("cancel: %+v, %v", cr, err)
	}
	if n, ev, err := store.DecideRolloutTargets(ctx, t0.Add(time.Hour), 100); err != nil || n != 0 || len(ev) != 0 {
		t.Fatalf("a canceled rollout decided: %d, %+v, %v", n, ev, err)
	}
	if tg := rolloutTargets(t, store, "acc_a", "ro_d")["RC1"]; tg.State != core.TargetStateInstalling {
		t.Fatalf("canceled target %+v", tg)
	}
	if _, _, ok, err := store.RolloutFor(ctx, "acc_a", "RX", "RC1"); err != nil || ok {
		t.Fatalf("RolloutFor after cancel: %v, %v", ok, err)
	}
}

// racingRolloutSweeps: two sweeps at once decide each target once and
// complete the rollout once.
func racingRolloutSweeps(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	const n = 16
	ro := newRollout("ro_r", "acc_a", []int{100}, t0)
	ro.FailureThreshold = 100
	for i := range n {
		deviceMount(t, store, fmt.Sprintf("RR%02d", i), "acc_a", "RX", "1.0.0", false, t0)
	}
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		uid := fmt.Sprintf("RR%02d", i)
		if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_r", i, t0), nil); err != nil {
			t.Fatal(err)
		}
		executeCommand(t, store, uid, "acc_a", nonceOf(i), 1, t0)
		if i%2 == 0 {
			verifiedReport(t, store, uid, "acc_a", "2.0.0", 1, t0)
		}
	}
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		completed int
		decided   int
	)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, ev, err := store.DecideRolloutTargets(ctx, t0.Add(time.Minute), 100)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			completed += len(ev)
			decided += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	r, err := store.Rollout(ctx, "acc_a", "ro_r")
	if err != nil || r.State != core.RolloutCompleted || r.Counts != (core.RolloutCounts{Healthy: n / 2, Failed: n / 2}) ||
		r.SampleHealthy != n/2 || r.SampleFailed != n/2 {
		t.Fatalf("rollout after racing sweeps = %+v, %v", r, err)
	}
	if decided != n {
		t.Fatalf("%d decisions reported; want %d", decided, n)
	}
	if types, _ := rolloutEventTypes(t, store, "acc_a", 2); completed != 1 || len(types) != 2 {
		t.Fatalf("%d events returned, %v logged; want one ROLLOUT_COMPLETED", completed, types)
	}
}

// racingRolloutCreations: two creations for one model at once: one
// CONFLICT.
func racingRolloutCreations(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	deviceMount(t, store, "RN1", "acc_a", "RX", "1.0.0", false, t0)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = store.CreateRollout(ctx, newRollout(fmt.Sprintf("ro_n%d", i), "acc_a", []int{100}, t0), core.MountFilter{}, t0)
		}()
	}
	wg.Wait()
	ok, conflicts := 0, 0
	for _, err := range errs {
		switch core.ErrorCode(err) {
		case core.CodeConflict:
			conflicts++
		default:
			if err == nil {
				ok++
			} else {
				t.Fatalf("CreateRollout: %v", err)
			}
		}
	}
	if ok != 1 || conflicts != 1 {
		t.Fatalf("creations: %d created, %d CONFLICT (%v)", ok, conflicts, errs)
	}
	if list, total, err := store.ListRollouts(ctx, "acc_a", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 1 || len(list) != 1 {
		t.Fatalf("ListRollouts = %+v, %v", list, err)
	}
}

// racingRolloutMoves: installs fetched, verified reports and refusals of
// one rollout's mounts at once: each move takes the rollout's lock, so
// none fails and the counts stay exact.
func racingRolloutMoves(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	const n = 12
	ro := newRollout("ro_m", "acc_a", []int{100}, t0)
	ro.FailureThreshold = 100
	for i := range n {
		deviceMount(t, store, fmt.Sprintf("RM%02d", i), "acc_a", "RX", "1.0.0", false, t0)
	}
	if _, _, err := store.CreateRollout(ctx, ro, core.MountFilter{}, t0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := fmt.Sprintf("RM%02d", i)
			if err := store.InsertCommand(ctx, installCommand(uid, "acc_a", "ro_m", i, t0), nil); err != nil {
				t.Error(err)
				return
			}
			for c := uint64(1); c <= 3; c++ {
				var events []*core.Event
				entry := core.StateEntry{Code: core.StateBatteryLevel, Value: fmt.Sprint(c), OccurredAt: t0.Add(-time.Duration(c) * time.Second),
					ReceivedAt: t0, Verified: true}
				if _, _, err := store.InsertReport(ctx, uid, "acc_a", []core.StateEntry{entry},
					core.ReportCheck{SoftwareRevision: "2.0.0", Counter: &c, RolloutEvents: &events}, nil); err != nil {
					t.Error(err)
					return
				}
			}
			if i%3 == 0 {
				d := core.CommandDecision{UID: uid, AccountID: "acc_a", ID: nonceOf(i), Status: core.CommandRefused, Reason: "bad image",
					Counter: 9, Verified: true, At: t0, AccountEvents: &[]*core.Event{}}
				if _, _, err := store.DecideCommand(ctx, d, nil); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	r, err := store.Rollout(ctx, "acc_a", "ro_m")
	if err != nil || r.Counts != (core.RolloutCounts{Installing: n - n/3, Failed: n / 3}) {
		t.Fatalf("rollout after racing moves = %+v, %v", r, err)
	}
	for uid, tg := range rolloutTargets(t, store, "acc_a", "ro_m") {
		if tg.State == core.TargetStateInstalling && (tg.NewRevisionCounter == nil || *tg.NewRevisionCounter != 3) {
			t.Fatalf("%s: %+v", uid, tg)
		}
	}
}
