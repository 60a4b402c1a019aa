package core_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

func TestAssignRolloutPhases(t *testing.T) {
	uids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("M%03d", i)
		}
		return out
	}
	for _, c := range []struct {
		name   string
		n      int
		phases []int
		sizes  []int
	}{
		{"none", 0, []int{1, 10, 50, 100}, []int{0, 0, 0, 0}},
		{"one in the first phase", 1, []int{1, 10, 50, 100}, []int{1, 0, 0, 0}},
		{"ten", 10, []int{1, 10, 50, 100}, []int{1, 0, 4, 5}},
		{"a hundred", 100, []int{1, 10, 50, 100}, []int{1, 9, 40, 50}},
		{"one phase", 7, []int{100}, []int{7}},
		{"ceil", 3, []int{34, 67, 100}, []int{2, 1, 0}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := uids(c.n)
			got := core.AssignRolloutPhases(in, c.phases)
			sizes := make([]int, len(c.phases))
			for _, p := range got {
				sizes[p]++
			}
			if !slices.Equal(sizes, c.sizes) {
				t.Fatalf("phase sizes = %v; want %v", sizes, c.sizes)
			}
			// Stable: the order of the uids does not matter.
			rev := slices.Clone(in)
			slices.Reverse(rev)
			again := core.AssignRolloutPhases(rev, c.phases)
			for i, uid := range rev {
				if again[i] != got[slices.Index(in, uid)] {
					t.Fatalf("%s: phase %d reversed, %d in order", uid, again[i], got[slices.Index(in, uid)])
				}
			}
		})
	}
}

// TestDecideRolloutReceipt: the install's first signed receipt decides an
// ELIGIBLE target (docs/api.md, "Rollouts"): EXECUTED makes it INSTALLING
// from now with that command, REFUSED fails it (but a stale or replayed
// command); an unsigned receipt, or a target in any other state, moves
// nothing.
func TestDecideRolloutReceipt(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	eligible := core.RolloutTarget{UID: "M1", State: core.TargetStateEligible, CommandID: "newer"}
	installing := core.RolloutTarget{UID: "M1", State: core.TargetStateInstalling, CommandID: "c1", InstallingSince: now.Add(-time.Hour)}
	cmd := func(status core.CommandStatus, reason string, verified bool) core.Command {
		return core.Command{ID: "c1", Status: status, Reason: reason, Verified: verified}
	}
	for _, c := range []struct {
		name    string
		t       core.RolloutTarget
		c       core.Command
		changed bool
		want    core.RolloutTarget
	}{
		{"executed: installing from now", eligible, cmd(core.CommandExecuted, "", true), true,
			core.RolloutTarget{UID: "M1", State: core.TargetStateInstalling, CommandID: "c1", InstallingSince: now, UpdatedAt: now}},
		{"refused: failed", eligible, cmd(core.CommandRefused, "bad image", true), true,
			core.RolloutTarget{UID: "M1", State: core.TargetStateFailed, CommandID: "newer", Reason: "refused: bad image", UpdatedAt: now}},
		{"stale: still eligible", eligible, cmd(core.CommandRefused, core.ReasonStaleCommand, true), false, eligible},
		{"unsigned executed", eligible, cmd(core.CommandExecuted, "", false), false, eligible},
		{"unsigned refused", eligible, cmd(core.CommandRefused, "bad image", false), false, eligible},
		{"executed again: the window stays", installing, cmd(core.CommandExecuted, "", true), false, installing},
		{"pending", core.RolloutTarget{State: core.TargetStatePending}, cmd(core.CommandExecuted, "", true), false,
			core.RolloutTarget{State: core.TargetStatePending}},
		{"healthy", core.RolloutTarget{State: core.TargetStateHealthy}, cmd(core.CommandRefused, "bad image", true), false,
			core.RolloutTarget{State: core.TargetStateHealthy}},
		{"still issued", eligible, cmd(core.CommandIssued, "", true), false, eligible},
		{"unconfirmed", eligible, cmd(core.CommandUnconfirmed, "", true), false, eligible},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, changed := core.DecideRolloutReceipt(c.t, c.c, now)
			if changed != c.changed || got.State != c.want.State || got.CommandID != c.want.CommandID || got.Reason != c.want.Reason ||
				!got.InstallingSince.Equal(c.want.InstallingSince) || !got.UpdatedAt.Equal(c.want.UpdatedAt) {
				t.Fatalf("got %+v, %v; want %+v, %v", got, changed, c.want, c.changed)
			}
		})
	}
}

func TestRolloutTargetRules(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	r := core.Rollout{SoftwareRevision: "2.0.0"}
	ctr := func(n uint64) *uint64 { return &n }
	installing := func(c *uint64) core.RolloutTarget {
		return core.RolloutTarget{UID: "M1", State: core.TargetStateInstalling, NewRevisionCounter: c}
	}
	failed := func(reason string, c *uint64) core.RolloutTarget {
		return core.RolloutTarget{UID: "M1", State: core.TargetStateFailed, NewRevisionCounter: c, Reason: reason, UpdatedAt: now}
	}
	same := core.RolloutTarget{}
	eq := func(a, b core.RolloutTarget) bool {
		return a.State == b.State && a.Reason == b.Reason && a.UpdatedAt.Equal(b.UpdatedAt) &&
			(a.NewRevisionCounter == nil) == (b.NewRevisionCounter == nil) &&
			(a.NewRevisionCounter == nil || *a.NewRevisionCounter == *b.NewRevisionCounter) &&
			(a.OldRevisionCounter == nil) == (b.OldRevisionCounter == nil) &&
			(a.OldRevisionCounter == nil || *a.OldRevisionCounter == *b.OldRevisionCounter) &&
			a.InstallingSince.Equal(b.InstallingSince)
	}
	withOld := func(t core.RolloutTarget, old uint64) core.RolloutTarget {
		t.OldRevisionCounter = ctr(old)
		return t
	}
	t.Run("refuse", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			t      core.RolloutTarget
			reason string
			want   core.RolloutTarget
		}{
			{"bad image fails", installing(nil), "bad image", failed("refused: bad image", nil)},
			{"stale is offered again", installing(nil), core.ReasonStaleCommand, same},
			{"replayed is offered again", installing(nil), core.ReasonReplayedNonce, same},
			{"decided stays", core.RolloutTarget{State: core.TargetStateHealthy}, "bad image", same},
			{"failed stays", failed("rollback", nil), "bad image", same},
		} {
			t.Run(c.name, func(t *testing.T) {
				got, changed := core.RefuseRolloutTarget(c.t, c.reason, now)
				want := c.want
				if want.State == "" {
					want = c.t
				}
				if !eq(got, want) || changed != (c.want.State != "") {
					t.Fatalf("RefuseRolloutTarget = %+v, %v; want %+v", got, changed, want)
				}
			})
		}
	})
	t.Run("observe", func(t *testing.T) {
		for _, c := range []struct {
			name     string
			t        core.RolloutTarget
			revision string
			counter  uint64
			want     core.RolloutTarget
		}{
			{"first report on the new revision", installing(nil), "2.0.0", 5,
				core.RolloutTarget{State: core.TargetStateInstalling, NewRevisionCounter: ctr(5), UpdatedAt: now}},
			{"a later one raises the counter", installing(ctr(5)), "2.0.0", 7,
				core.RolloutTarget{State: core.TargetStateInstalling, NewRevisionCounter: ctr(7), UpdatedAt: now}},
			{"an older one does not", installing(ctr(5)), "2.0.0", 4, same},
			{"the old revision before any new is no rollback but is kept", installing(nil), "1.0.0", 9,
				core.RolloutTarget{State: core.TargetStateInstalling, OldRevisionCounter: ctr(9), UpdatedAt: now}},
			{"the old revision before the new report is no rollback", installing(ctr(5)), "1.0.0", 4,
				core.RolloutTarget{State: core.TargetStateInstalling, NewRevisionCounter: ctr(5), OldRevisionCounter: ctr(4), UpdatedAt: now}},
			{"a lower old counter than the one kept changes nothing", withOld(installing(nil), 9), "1.0.0", 8, same},
			{"the old revision after the new is a rollback", installing(ctr(5)), "1.0.0", 6, failed("rollback", ctr(5))},
			{"the new revision relayed after a later old one is a rollback", withOld(installing(nil), 9), "2.0.0", 7,
				withOld(failed("rollback", nil), 9)},
			{"the new revision after the old one is no rollback", withOld(installing(nil), 9), "2.0.0", 10,
				core.RolloutTarget{State: core.TargetStateInstalling, NewRevisionCounter: ctr(10), OldRevisionCounter: ctr(9), UpdatedAt: now}},
			{"installed by hand while eligible counts as installing from now", core.RolloutTarget{State: core.TargetStateEligible}, "2.0.0", 5,
				core.RolloutTarget{State: core.TargetStateInstalling, NewRevisionCounter: ctr(5), InstallingSince: now, UpdatedAt: now}},
			{"eligible on the old revision stays", core.RolloutTarget{State: core.TargetStateEligible}, "1.0.0", 5, same},
			{"pending stays", core.RolloutTarget{State: core.TargetStatePending}, "2.0.0", 5, same},
			{"decided", core.RolloutTarget{State: core.TargetStateHealthy, NewRevisionCounter: ctr(5)}, "1.0.0", 6, same},
		} {
			t.Run(c.name, func(t *testing.T) {
				got, changed := core.ObserveRolloutReport(r, c.t, c.revision, c.counter, now)
				want := c.want
				if want.State == "" {
					want = c.t
				}
				if !eq(got, want) || changed != (c.want.State != "") {
					t.Fatalf("ObserveRolloutReport = %+v, %v; want %+v", got, changed, want)
				}
			})
		}
	})
	t.Run("window end", func(t *testing.T) {
		if got := core.DecideAtWindowEnd(r, installing(ctr(3)), now); got.State != core.TargetStateHealthy || !got.UpdatedAt.Equal(now) {
			t.Fatalf("with a report: %+v", got)
		}
		if got := core.DecideAtWindowEnd(r, installing(nil), now); got.State != core.TargetStateFailed || got.Reason != "no report on the new revision" {
			t.Fatalf("without: %+v", got)
		}
	})
}

func TestApplyRolloutTarget(t *testing.T) {
	r := core.Rollout{Targets: 3, Counts: core.RolloutCounts{Eligible: 3}}
	st := func(s core.RolloutTargetState) core.RolloutTarget { return core.RolloutTarget{State: s} }
	core.ApplyRolloutTarget(&r, st(core.TargetStateEligible), st(core.TargetStateInstalling))
	core.ApplyRolloutTarget(&r, st(core.TargetStateEligible), st(core.TargetStateInstalling))
	core.ApplyRolloutTarget(&r, st(core.TargetStateInstalling), st(core.TargetStateHealthy))
	core.ApplyRolloutTarget(&r, st(core.TargetStateInstalling), st(core.TargetStateFailed))
	core.ApplyRolloutTarget(&r, st(core.TargetStateFailed), st(core.TargetStateFailed))
	if r.Counts != (core.RolloutCounts{Eligible: 1, Healthy: 1, Failed: 1}) || r.SampleHealthy != 1 || r.SampleFailed != 1 {
		t.Fatalf("rollout = %+v", r)
	}
}

func TestLeaveRolloutTarget(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, s := range []core.RolloutTargetState{core.TargetStatePending, core.TargetStateEligible, core.TargetStateInstalling} {
		got, changed := core.LeaveRolloutTarget(core.RolloutTarget{State: s}, now)
		if !changed || got.State != core.TargetStateFailed || got.Reason != core.RolloutReasonMountLeft || !got.UpdatedAt.Equal(now) {
			t.Fatalf("%s: %+v, %v", s, got, changed)
		}
		r := core.Rollout{Targets: 1}
		*map[core.RolloutTargetState]*int{core.TargetStatePending: &r.Counts.Pending, core.TargetStateEligible: &r.Counts.Eligible,
			core.TargetStateInstalling: &r.Counts.Installing}[s] = 1
		core.ApplyRolloutTarget(&r, core.RolloutTarget{State: s}, got)
		if r.Counts != (core.RolloutCounts{Failed: 1}) || r.SampleFailed != 0 || r.SampleHealthy != 0 {
			t.Fatalf("%s: the sample counts a mount that left: %+v", s, r)
		}
	}
	for _, s := range []core.RolloutTargetState{core.TargetStateHealthy, core.TargetStateFailed} {
		if got, changed := core.LeaveRolloutTarget(core.RolloutTarget{State: s}, now); changed || got.State != s {
			t.Fatalf("%s: %+v, %v", s, got, changed)
		}
	}
}

func TestAdvanceRollout(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	base := func(mod func(*core.Rollout)) core.Rollout {
		r := core.Rollout{State: core.RolloutRunning, Phases: []int{10, 50, 100}, FailureThreshold: 10, MinSample: 10, Targets: 20}
		mod(&r)
		return r
	}
	for _, c := range []struct {
		name   string
		r      core.Rollout
		open   int
		state  core.RolloutState
		events []core.EventType
	}{
		{"installing holds the phase", base(func(r *core.Rollout) { r.Counts = core.RolloutCounts{Installing: 1, Pending: 19} }),
			-1, core.RolloutRunning, nil},
		{"eligible holds the phase", base(func(r *core.Rollout) { r.Counts = core.RolloutCounts{Eligible: 1, Pending: 19} }),
			-1, core.RolloutRunning, nil},
		{"all decided opens the next", base(func(r *core.Rollout) { r.Counts = core.RolloutCounts{Healthy: 2, Pending: 18} }),
			1, core.RolloutRunning, []core.EventType{core.EventRolloutPhaseOpened}},
		{"the last phase decided completes", base(func(r *core.Rollout) {
			r.OpenPhase, r.Counts = 2, core.RolloutCounts{Healthy: 20}
		}), -1, core.RolloutCompleted, []core.EventType{core.EventRolloutCompleted}},
		{"more than the threshold pauses", base(func(r *core.Rollout) {
			r.Counts, r.SampleHealthy, r.SampleFailed = core.RolloutCounts{Healthy: 8, Failed: 2, Installing: 10}, 8, 2
		}), -1, core.RolloutPaused, []core.EventType{core.EventRolloutPaused}},
		{"exactly the threshold does not", base(func(r *core.Rollout) {
			r.Counts, r.SampleHealthy, r.SampleFailed = core.RolloutCounts{Healthy: 9, Failed: 1, Installing: 10}, 9, 1
		}), -1, core.RolloutRunning, nil},
		{"below the minimum sample does not", base(func(r *core.Rollout) {
			r.Counts, r.SampleFailed = core.RolloutCounts{Failed: 9, Installing: 11}, 9
		}), -1, core.RolloutRunning, nil},
		{"the sample, not the counts, decides", base(func(r *core.Rollout) {
			r.Counts, r.SampleHealthy, r.SampleFailed = core.RolloutCounts{Failed: 9, Healthy: 1, Installing: 10}, 1, 0
		}), -1, core.RolloutRunning, nil},
		{"threshold 0 pauses on one failure", base(func(r *core.Rollout) {
			r.FailureThreshold, r.MinSample, r.Counts, r.SampleFailed = 0, 1, core.RolloutCounts{Failed: 1, Installing: 19}, 1
		}), -1, core.RolloutPaused, []core.EventType{core.EventRolloutPaused}},
		{"threshold 100 never pauses", base(func(r *core.Rollout) {
			r.FailureThreshold, r.Counts, r.SampleFailed = 100, core.RolloutCounts{Failed: 2, Pending: 18}, 10
		}), 1, core.RolloutRunning, []core.EventType{core.EventRolloutPhaseOpened}},
		{"paused does nothing", base(func(r *core.Rollout) {
			r.State, r.Counts = core.RolloutPaused, core.RolloutCounts{Healthy: 2, Pending: 18}
		}), -1, core.RolloutPaused, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			open, events := core.AdvanceRollout(&r, now)
			var types []core.EventType
			for _, e := range events {
				types = append(types, e.Type)
				if e.Rollout == nil || e.AccountID != r.AccountID || e.UID != "" {
					t.Fatalf("event %+v", e)
				}
			}
			if open != c.open || r.State != c.state || !slices.Equal(types, c.events) {
				t.Fatalf("AdvanceRollout = %d, %v, %s; want %d, %v, %s", open, types, r.State, c.open, c.events, c.state)
			}
			if r.State == core.RolloutPaused && c.r.State == core.RolloutRunning && r.PausedReason != core.PausedFailureThreshold {
				t.Fatalf("paused reason %q", r.PausedReason)
			}
			if open >= 0 && r.OpenPhase != open {
				t.Fatalf("OpenPhase %d, open %d", r.OpenPhase, open)
			}
		})
	}
	t.Run("empty phases open through to completion", func(t *testing.T) {
		r := base(func(r *core.Rollout) { r.Targets, r.Counts = 1, core.RolloutCounts{Healthy: 1} })
		var opened []int
		events, err := core.AdvanceRolloutWith(&r, now, func(p int) (int, error) { opened = append(opened, p); return 0, nil })
		if err != nil || !slices.Equal(opened, []int{1, 2}) || r.State != core.RolloutCompleted || len(events) != 3 ||
			events[2].Type != core.EventRolloutCompleted {
			t.Fatalf("opened %v, %+v, %d events, %v", opened, r, len(events), err)
		}
	})
}

func TestChangeRolloutState(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		action core.AuditAction
		from   core.RolloutState
		to     core.RolloutState // "" CONFLICT
		event  core.EventType
	}{
		{core.AuditRolloutPause, core.RolloutRunning, core.RolloutPaused, core.EventRolloutPaused},
		{core.AuditRolloutPause, core.RolloutPaused, "", ""},
		{core.AuditRolloutPause, core.RolloutCompleted, "", ""},
		{core.AuditRolloutPause, core.RolloutCanceled, "", ""},
		{core.AuditRolloutResume, core.RolloutPaused, core.RolloutRunning, ""},
		{core.AuditRolloutResume, core.RolloutRunning, "", ""},
		{core.AuditRolloutResume, core.RolloutCompleted, "", ""},
		{core.AuditRolloutResume, core.RolloutCanceled, "", ""},
		{core.AuditRolloutCancel, core.RolloutRunning, core.RolloutCanceled, ""},
		{core.AuditRolloutCancel, core.RolloutPaused, core.RolloutCanceled, ""},
		{core.AuditRolloutCancel, core.RolloutCompleted, "", ""},
		{core.AuditRolloutCancel, core.RolloutCanceled, "", ""},
	} {
		t.Run(string(c.action)+" "+string(c.from), func(t *testing.T) {
			r := core.Rollout{ID: "ro_1", State: c.from, SampleFailed: 3, SampleHealthy: 4}
			if c.from == core.RolloutPaused {
				r.PausedReason = core.PausedFailureThreshold
			}
			events, err := core.ChangeRolloutState(c.action, now)(&r)
			if c.to == "" {
				if core.ErrorCode(err) != core.CodeConflict {
					t.Fatalf("err = %v; want CONFLICT", err)
				}
				return
			}
			if err != nil || r.State != c.to {
				t.Fatalf("%+v, %v", r, err)
			}
			if (c.event == "") != (len(events) == 0) || (c.event != "" && events[0].Type != c.event) {
				t.Fatalf("events %+v", events)
			}
			switch c.to {
			case core.RolloutPaused:
				if r.PausedReason != core.PausedManual {
					t.Fatalf("reason %q", r.PausedReason)
				}
			case core.RolloutRunning:
				if r.PausedReason != "" || r.SampleFailed != 0 || r.SampleHealthy != 0 {
					t.Fatalf("resumed %+v", r)
				}
			case core.RolloutCanceled:
				if !r.EndedAt.Equal(now) || r.PausedReason != "" {
					t.Fatalf("canceled %+v", r)
				}
			}
		})
	}
}

// rolloutFixture is a MountService and a RolloutService on the memory
// store, a clock moved by hand, an owner with mounts of model "MX" that
// share one device key, and revision 2.0.0 in the catalogue.
type rolloutFixture struct {
	store    *memory.Store
	mounts   *core.MountService
	rollouts *core.RolloutService
	clock    *fakeClock
	owner    core.Principal
	other    core.Principal
	device   ed25519.PrivateKey
	counter  map[string]uint64
}

func newRolloutFixture(t *testing.T, opts ...func(*core.MountDeps)) *rolloutFixture {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	waker := memory.NewWaker()
	deps := core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: waker, Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(time.Minute),
		Logger: logger, Jobs: store, Rollouts: store, Firmware: store, Filters: fakeFilters{}}
	for _, o := range opts {
		o(&deps)
	}
	mounts := core.NewMountService(deps)
	rollouts := core.NewRolloutService(core.RolloutDeps{Store: store, Firmware: store, Filters: fakeFilters{}, Waker: waker,
		OfflineAfter: core.OfflineAfter(core.DefaultOfflineAfter), Logger: logger})
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	mounts.SetClock(clock.Now)
	rollouts.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	owner := func(name string) core.Principal {
		acc, err := accounts.Create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
			Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	}
	_, priv, err := ed25519.GenerateKey(strings.NewReader(strings.Repeat("device key seed!", 4)))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []core.FirmwareVersion{
		{ModelNumber: "MX", SoftwareRevision: "1.0.0", AvailableSince: clock.Now().Add(-48 * time.Hour), SHA256: strings.Repeat("1", 64), Size: 100},
		{ModelNumber: "MX", SoftwareRevision: "2.0.0", AvailableSince: clock.Now().Add(-time.Hour), SHA256: strings.Repeat("a", 64), Size: 1234},
		{ModelNumber: "MX", SoftwareRevision: "3.0.0", AvailableSince: clock.Now().Add(time.Hour), SHA256: strings.Repeat("b", 64), Size: 1},
		{ModelNumber: "MX", SoftwareRevision: "0.9.0", AvailableSince: clock.Now().Add(-72 * time.Hour), SHA256: strings.Repeat("c", 64), Size: 1, Deprecated: true},
		{ModelNumber: "MY", SoftwareRevision: "2.0.0", AvailableSince: clock.Now().Add(-time.Hour), SHA256: strings.Repeat("d", 64), Size: 1},
	} {
		if err := store.InsertFirmware(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.DeprecateFirmware(ctx, "MX", "0.9.0"); err != nil {
		t.Fatal(err)
	}
	return &rolloutFixture{store: store, mounts: mounts, rollouts: rollouts, clock: clock, owner: owner("A"), other: owner("B"),
		device: priv, counter: map[string]uint64{}}
}

// mount associates uid for p with model and revision, with the device key
// unless keyless.
func (f *rolloutFixture) mount(t *testing.T, p core.Principal, uid, model, revision string, keyless bool) {
	t.Helper()
	ctx := context.Background()
	fields := core.MountFields{ModelNumber: &model, SoftwareRevision: &revision}
	if !keyless {
		key := hex.EncodeToString(f.device.Public().(ed25519.PublicKey))
		fields.DevicePublicKey = &key
	}
	if _, err := f.mounts.RequestAssociation(ctx, p, uid, fields); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mounts.ConfirmAssociation(ctx, p, uid); err != nil {
		t.Fatal(err)
	}
}

// report sends a report signed by uid on revision, with the next counter
// (or counter when not 0), of locked and helmet.
func (f *rolloutFixture) report(t *testing.T, uid, revision string, counter uint64, locked, helmet string) {
	t.Helper()
	if counter == 0 {
		f.counter[uid]++
		counter = f.counter[uid]
	}
	at := f.clock.Now().Truncate(time.Millisecond)
	// Distinct instants, never ahead of the clock, later with the counter.
	occurred := at.Add(-time.Duration(10_000-counter) * time.Millisecond)
	in := []core.StateInput{{Code: "MOUNT_LOCKED", Value: locked, OccurredAt: occurred, HasOccurredAt: true},
		{Code: "HELMET_MOUNTED", Value: helmet, OccurredAt: occurred, HasOccurredAt: true}}
	r := protocol.Report{UID: uid, Counter: counter, SoftwareRevision: revision}
	for _, e := range in {
		r.Entries = append(r.Entries, protocol.ReportEntry{Code: protocol.StateCode(e.Code), Value: e.Value, OccurredAt: e.OccurredAt})
	}
	sig := &core.ReportSignature{Counter: counter, SoftwareRevision: revision, Signature: protocol.Sign(f.device, protocol.BuildReportText(r))}
	if _, err := f.mounts.ReportStates(context.Background(), f.owner, uid, in, sig); err != nil {
		t.Fatalf("ReportStates(%s): %v", uid, err)
	}
}

func (f *rolloutFixture) refuse(t *testing.T, uid string, c core.Command, reason string) {
	t.Helper()
	f.counter[uid]++
	at := f.clock.Now().Truncate(time.Millisecond)
	r := core.ReceiptInput{Nonce: c.ID, Outcome: "REFUSED", Reason: reason, Counter: f.counter[uid], At: at}
	r.Signature = protocol.Sign(f.device, protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: c.ID,
		Outcome: r.Outcome, Reason: reason, Counter: r.Counter, At: at}))
	if _, err := f.mounts.UploadReceipts(context.Background(), f.owner, uid, []core.ReceiptInput{r}); err != nil {
		t.Fatalf("UploadReceipts: %v", err)
	}
}

// installs is the INSTALL_FIRMWARE commands pending at uid.
func (f *rolloutFixture) installs(t *testing.T, uid string) []core.Command {
	t.Helper()
	cmds, err := f.mounts.PendingCommands(context.Background(), f.owner, uid)
	if err != nil {
		t.Fatalf("PendingCommands(%s): %v", uid, err)
	}
	var out []core.Command
	for _, c := range cmds {
		if c.Code == core.CmdInstallFirmware {
			out = append(out, c)
		}
	}
	return out
}

func (f *rolloutFixture) create(t *testing.T, in core.RolloutInput) core.Rollout {
	t.Helper()
	if in.ModelNumber == "" {
		in.ModelNumber, in.SoftwareRevision = "MX", "2.0.0"
	}
	r, err := f.rollouts.CreateRollout(context.Background(), f.owner, in)
	if err != nil {
		t.Fatalf("CreateRollout: %v", err)
	}
	return r
}

func (f *rolloutFixture) get(t *testing.T, id string) core.Rollout {
	t.Helper()
	r, err := f.rollouts.Rollout(context.Background(), f.owner, id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *rolloutFixture) targets(t *testing.T, id string) map[string]core.RolloutTarget {
	t.Helper()
	list, _, err := f.rollouts.RolloutMounts(context.Background(), f.owner, id, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]core.RolloutTarget{}
	for _, x := range list {
		out[x.UID] = x
	}
	return out
}

func (f *rolloutFixture) rolloutEvents(t *testing.T) []core.EventType {
	t.Helper()
	events, _, err := f.store.ReadEvents(context.Background(), core.EventQuery{AccountID: f.owner.AccountID,
		Types: []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPaused, core.EventRolloutCompleted}, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []core.EventType
	for _, e := range events {
		if e.Rollout == nil || e.UID != "" {
			t.Fatalf("event %+v", e)
		}
		out = append(out, e.Type)
	}
	return out
}

func TestRolloutValidation(t *testing.T) {
	f := newRolloutFixture(t)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	bad := "nonsense"
	for _, c := range []struct {
		name  string
		in    core.RolloutInput
		field string // "" valid
	}{
		{"no model", core.RolloutInput{SoftwareRevision: "2.0.0"}, "modelNumber"},
		{"no revision", core.RolloutInput{ModelNumber: "MX"}, "softwareRevision"},
		{"unknown revision", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "9.9.9"}, "softwareRevision"},
		{"not yet available", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "3.0.0"}, "softwareRevision"},
		{"deprecated", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "0.9.0"}, "softwareRevision"},
		{"another model's", core.RolloutInput{ModelNumber: "MZ", SoftwareRevision: "2.0.0"}, "softwareRevision"},
		{"empty phases", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{}}, "phases"},
		{"too many phases", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}}, "phases"},
		{"not ascending", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{50, 50, 100}}, "phases"},
		{"not ending at 100", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{10, 50}}, "phases"},
		{"zero", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{0, 100}}, "phases"},
		{"above 100", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{50, 101}}, "phases"},
		{"threshold below 0", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", FailureThreshold: ptr(-1)}, "failureThreshold"},
		{"threshold above 100", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", FailureThreshold: ptr(101)}, "failureThreshold"},
		{"min sample 0", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", MinSample: ptr(0)}, "minSample"},
		{"window not a duration", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("1 hour")}, "healthWindow"},
		{"window 0", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("0s")}, "healthWindow"},
		{"window under a millisecond", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("500us")}, "healthWindow"},
		{"window under a second", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("999ms")}, "healthWindow"},
		{"window negative", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("-1h")}, "healthWindow"},
		{"window too long", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", HealthWindow: ptr("168h1s")}, "healthWindow"},
		{"bad filter", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Filter: &bad}, "filter"},
		{"valid at the bounds", core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{100},
			FailureThreshold: ptr(100), MinSample: ptr(1), HealthWindow: ptr("168h"), RequireIdle: ptr(false)}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := f.rollouts.CreateRollout(context.Background(), f.owner, c.in)
			if c.field == "" {
				if err != nil {
					t.Fatalf("CreateRollout: %v", err)
				}
				if _, err := f.rollouts.CancelRollout(context.Background(), f.owner, r.ID); err != nil {
					t.Fatal(err)
				}
				return
			}
			if core.ErrorCode(err) != core.CodeValidation || !slicesContains(fieldsOf(err), c.field) {
				t.Fatalf("CreateRollout = %+v, %v (fields %v); want VALIDATION_FAILED on %s", r, err, fieldsOf(err), c.field)
			}
		})
	}
	r := f.create(t, core.RolloutInput{})
	if !slices.Equal(r.Phases, core.DefaultRolloutPhases) || r.FailureThreshold != 5 || r.MinSample != 10 ||
		r.HealthWindow != time.Hour || !r.RequireIdle || r.State != core.RolloutRunning || r.SHA256 != strings.Repeat("a", 64) ||
		r.Size != 1234 || !strings.HasPrefix(r.ID, "ro_") || len(r.ID) != 27 || r.CreatedBy != f.owner.ClientID {
		t.Fatalf("defaults: %+v", r)
	}
}

func TestRolloutsOwnerOnly(t *testing.T) {
	f := newRolloutFixture(t)
	ctx := context.Background()
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	r := f.create(t, core.RolloutInput{})
	maintainer := f.owner
	maintainer.Role = core.RoleRestricted
	if _, err := f.rollouts.CreateRollout(ctx, maintainer, core.RolloutInput{ModelNumber: "MY", SoftwareRevision: "2.0.0"}); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("maintainer create: %v", err)
	}
	if _, err := f.rollouts.PauseRollout(ctx, maintainer, r.ID); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("maintainer pause: %v", err)
	}
	for name, call := range map[string]func() error{
		"get": func() error { _, err := f.rollouts.Rollout(ctx, f.other, r.ID); return err },
		"mounts": func() error {
			_, _, err := f.rollouts.RolloutMounts(ctx, f.other, r.ID, core.Page{CurrentPage: 1, PageSize: 10})
			return err
		},
		"pause":  func() error { _, err := f.rollouts.PauseRollout(ctx, f.other, r.ID); return err },
		"resume": func() error { _, err := f.rollouts.ResumeRollout(ctx, f.other, r.ID); return err },
		"cancel": func() error { _, err := f.rollouts.CancelRollout(ctx, f.other, r.ID); return err },
	} {
		if err := call(); core.ErrorCode(err) != core.CodeRolloutNotFound {
			t.Fatalf("%s of another account's: %v", name, err)
		}
	}
	list, _, err := f.rollouts.ListRollouts(ctx, f.other, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(list) != 0 {
		t.Fatalf("other's list = %v, %v", list, err)
	}
	// One RUNNING or PAUSED rollout per model.
	if _, err := f.rollouts.CreateRollout(ctx, f.owner, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "1.0.0"}); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("second rollout of MX: %v", err)
	}
	if _, err := f.rollouts.CreateRollout(ctx, f.other, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0"}); err != nil {
		t.Fatalf("another account's rollout of MX: %v", err)
	}
	if _, err := f.rollouts.PauseRollout(ctx, f.owner, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rollouts.CreateRollout(ctx, f.owner, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "1.0.0"}); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("second rollout of MX while paused: %v", err)
	}
	if _, err := f.rollouts.CancelRollout(ctx, f.owner, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rollouts.CreateRollout(ctx, f.owner, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "1.0.0"}); err != nil {
		t.Fatalf("after cancel: %v", err)
	}
	entries, err := f.store.ReadAudit(ctx, core.AuditQuery{AccountID: f.owner.AccountID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var actions []core.AuditAction
	for _, e := range entries {
		if strings.HasPrefix(string(e.Action), "rollout.") {
			actions = append(actions, e.Action)
			if e.Target != "rollout:"+r.ID && e.Action != core.AuditRolloutCreate {
				t.Fatalf("entry %+v", e)
			}
		}
	}
	if len(actions) != 4 {
		t.Fatalf("audit actions %v", actions)
	}
}

// TestRolloutTargetsAndPhases: targets are the ASSOCIATED mounts of the
// model with a device key not on the revision, within the filter; the
// first phase is ELIGIBLE; an empty rollout completes at once.
func TestRolloutTargetsAndPhases(t *testing.T) {
	f := newRolloutFixture(t)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M2", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M3", "MX", "2.0.0", false) // already on it
	f.mount(t, f.owner, "M4", "MX", "1.0.0", true)  // no device key
	f.mount(t, f.owner, "M5", "MY", "1.0.0", false) // another model
	f.mount(t, f.other, "M6", "MX", "1.0.0", false) // another account
	r := f.create(t, core.RolloutInput{Phases: []int{50, 100}})
	targets := f.targets(t, r.ID)
	if len(targets) != 2 || r.Targets != 2 || r.Counts != (core.RolloutCounts{Eligible: 1, Pending: 1}) || r.OpenPhase != 0 {
		t.Fatalf("rollout %+v targets %+v", r, targets)
	}
	phases := core.AssignRolloutPhases([]string{"M1", "M2"}, []int{50, 100})
	for i, uid := range []string{"M1", "M2"} {
		want := core.TargetStatePending
		if phases[i] == 0 {
			want = core.TargetStateEligible
		}
		if targets[uid].Phase != phases[i] || targets[uid].State != want {
			t.Fatalf("%s: %+v", uid, targets[uid])
		}
	}
	if got := f.rolloutEvents(t); !slices.Equal(got, []core.EventType{core.EventRolloutPhaseOpened}) {
		t.Fatalf("events %v", got)
	}
	if _, err := f.rollouts.CancelRollout(context.Background(), f.owner, r.ID); err != nil {
		t.Fatal(err)
	}
	// A filter narrows; none left completes the rollout at once.
	one := `uid = "M2"`
	r = f.create(t, core.RolloutInput{Filter: &one})
	if r.Targets != 1 || r.Filter != one {
		t.Fatalf("filtered %+v", r)
	}
	if _, err := f.rollouts.CancelRollout(context.Background(), f.owner, r.ID); err != nil {
		t.Fatal(err)
	}
	none := `uid = "M9"`
	r = f.create(t, core.RolloutInput{Filter: &none})
	if r.State != core.RolloutCompleted || r.Targets != 0 || r.EndedAt.IsZero() || r.OpenPhase != 3 {
		t.Fatalf("empty %+v", r)
	}
	want := []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened,
		core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutCompleted}
	if got := f.rolloutEvents(t); !slices.Equal(got, want) {
		t.Fatalf("events %v", got)
	}
	// Too many targets.
	f.store.LimitRolloutTargets(1)
	defer f.store.LimitRolloutTargets(0)
	if _, err := f.rollouts.CreateRollout(context.Background(), f.owner, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0"}); core.ErrorCode(err) != core.CodeValidation || !slicesContains(fieldsOf(err), "filter") {
		t.Fatalf("too many: %v", err)
	}
}

// TestRolloutLifecycle: a mount of the open phase is offered the install;
// a fetch is no outcome (the target stays ELIGIBLE, offered again); the
// install's first signed EXECUTED receipt makes it INSTALLING, the window
// counting from the receipt (docs/api.md, "Rollouts"); a verified report
// on the new revision makes it HEALTHY at the end of the window, which
// opens the next phase; a mount without one FAILS; then the rollout
// completes.
func TestRolloutLifecycle(t *testing.T) {
	f := newRolloutFixture(t)
	ctx := context.Background()
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M2", "MX", "1.0.0", false)
	phases := core.AssignRolloutPhases([]string{"M1", "M2"}, []int{50, 100})
	first, second := "M1", "M2"
	if phases[0] != 0 {
		first, second = second, first
	}
	r := f.create(t, core.RolloutInput{Phases: []int{50, 100}, RequireIdle: ptr(false), MinSample: ptr(5)})
	if got := f.installs(t, second); len(got) != 0 {
		t.Fatalf("a pending target is offered %+v", got)
	}
	cmds := f.installs(t, first)
	if len(cmds) != 1 || cmds[0].RolloutID != r.ID || cmds[0].Params["revision"] != "2.0.0" ||
		cmds[0].Params["sha256"] != strings.Repeat("a", 64) || cmds[0].Params["size"] != "1234" || cmds[0].SignedToken == "" {
		t.Fatalf("offered %+v", cmds)
	}
	tg := f.targets(t, r.ID)[first]
	if tg.State != core.TargetStateEligible || !tg.InstallingSince.IsZero() || tg.CommandID != cmds[0].ID {
		t.Fatalf("fetched target %+v", tg)
	}
	if got := f.get(t, r.ID); got.Counts != (core.RolloutCounts{Eligible: 1, Pending: 1}) {
		t.Fatalf("counts after a fetch %+v", got.Counts)
	}
	// Offered again while no outcome is known (this fixture's commands
	// live a minute, too short to hand out the same one again): a new
	// command, the target still ELIGIBLE, and hours of fetches with no
	// answer decide nothing.
	f.clock.Advance(time.Minute)
	again := f.installs(t, first)
	if len(again) != 1 || again[0].ID == cmds[0].ID {
		t.Fatalf("offered again %+v", again)
	}
	if tg := f.targets(t, r.ID)[first]; tg.State != core.TargetStateEligible || tg.CommandID != again[0].ID {
		t.Fatalf("target %+v", tg)
	}
	f.clock.Advance(2 * time.Hour)
	if n, err := f.rollouts.SweepRollouts(ctx); err != nil || n != 0 {
		t.Fatalf("sweep after a fetch with no answer: %d, %v", n, err)
	}
	again = f.installs(t, first)
	if len(again) != 1 || f.targets(t, r.ID)[first].State != core.TargetStateEligible || f.get(t, r.ID).State != core.RolloutRunning {
		t.Fatalf("after hours unanswered: %+v %+v", again, f.targets(t, r.ID)[first])
	}
	// The install's signed EXECUTED receipt: INSTALLING from now.
	f.clock.Advance(10 * time.Second)
	f.execute(t, first, again[0])
	since := f.clock.Now()
	if tg := f.targets(t, r.ID)[first]; tg.State != core.TargetStateInstalling || !tg.InstallingSince.Equal(since) || tg.CommandID != again[0].ID {
		t.Fatalf("executed target %+v", tg)
	}
	f.report(t, first, "2.0.0", 0, "1", "1")
	f.clock.Advance(time.Hour - time.Millisecond)
	if n, err := f.rollouts.SweepRollouts(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before the window ends: %d, %v", n, err)
	}
	if tg := f.targets(t, r.ID)[first]; tg.State != core.TargetStateInstalling {
		t.Fatalf("decided early: %+v", tg)
	}
	f.clock.Advance(time.Millisecond)
	if _, err := f.rollouts.SweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, r.ID)
	if got.OpenPhase != 1 || got.Counts != (core.RolloutCounts{Healthy: 1, Eligible: 1}) || f.targets(t, r.ID)[first].State != core.TargetStateHealthy {
		t.Fatalf("after the first phase %+v", got)
	}
	cmds = f.installs(t, second)
	if len(cmds) != 1 {
		t.Fatalf("second phase offered %+v", cmds)
	}
	f.execute(t, second, cmds[0])
	// No report on the new revision: FAILED at the window's end.
	f.report(t, second, "1.0.0", 0, "1", "1")
	f.clock.Advance(time.Hour)
	if _, err := f.rollouts.SweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	got = f.get(t, r.ID)
	tg = f.targets(t, r.ID)[second]
	if got.State != core.RolloutCompleted || got.Counts != (core.RolloutCounts{Healthy: 1, Failed: 1}) ||
		tg.State != core.TargetStateFailed || tg.Reason != "no report on the new revision" || got.EndedAt.IsZero() {
		t.Fatalf("completed %+v %+v", got, tg)
	}
	want := []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPhaseOpened, core.EventRolloutCompleted}
	if got := f.rolloutEvents(t); !slices.Equal(got, want) {
		t.Fatalf("events %v", got)
	}
	if got := f.installs(t, second); len(got) != 0 {
		t.Fatalf("a completed rollout offers %+v", got)
	}
	// The event carries the rollout as it then stood.
	events, _, _ := f.store.ReadEvents(ctx, core.EventQuery{AccountID: f.owner.AccountID, Types: []core.EventType{core.EventRolloutPhaseOpened}, Limit: 10})
	if len(events) != 2 || events[1].Rollout.OpenPhase != 1 || events[1].Rollout.Counts.Eligible != 1 || events[1].Rollout.ID != r.ID {
		t.Fatalf("phase events %+v", events)
	}
}

// TestRolloutFailsAtOnce: a rollback and a refusal fail the target at
// once; a stale or replayed refusal offers the install again.
func TestRolloutFailsAtOnce(t *testing.T) {
	f := newRolloutFixture(t)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M2", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M3", "MX", "1.0.0", false)
	r := f.create(t, core.RolloutInput{Phases: []int{100}, RequireIdle: ptr(false), FailureThreshold: ptr(100)})
	// Rollback: the new revision, then the old with a higher counter.
	f.installs(t, "M1")
	f.report(t, "M1", "1.0.0", 0, "1", "1") // before the install: no rollback
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateEligible {
		t.Fatalf("M1 %+v", tg)
	}
	f.report(t, "M1", "2.0.0", 0, "1", "1")
	f.report(t, "M1", "1.0.0", 0, "1", "1")
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateFailed || tg.Reason != "rollback" {
		t.Fatalf("M1 %+v", tg)
	}
	// Stale and replayed: offered again; any other refusal: FAILED.
	cmds := f.installs(t, "M2")
	f.refuse(t, "M2", cmds[0], core.ReasonStaleCommand)
	cmds = f.installs(t, "M2")
	if len(cmds) != 1 {
		t.Fatalf("not offered again after a stale refusal")
	}
	f.refuse(t, "M2", cmds[0], core.ReasonReplayedNonce)
	cmds = f.installs(t, "M2")
	if tg := f.targets(t, r.ID)["M2"]; len(cmds) != 1 || tg.State != core.TargetStateEligible {
		t.Fatalf("after replayed: %+v", tg)
	}
	f.refuse(t, "M2", cmds[0], "bad image")
	if tg := f.targets(t, r.ID)["M2"]; tg.State != core.TargetStateFailed || tg.Reason != "refused: bad image" {
		t.Fatalf("M2 %+v", tg)
	}
	if got := f.installs(t, "M2"); len(got) != 0 {
		t.Fatalf("a failed target is offered %+v", got)
	}
	// The last target decides the rollout.
	f.installs(t, "M3")
	f.report(t, "M3", "2.0.0", 0, "1", "1")
	f.clock.Advance(time.Hour)
	if _, err := f.rollouts.SweepRollouts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, r.ID); got.State != core.RolloutCompleted || got.Counts != (core.RolloutCounts{Healthy: 1, Failed: 2}) {
		t.Fatalf("rollout %+v", got)
	}
}

// TestRolloutRequireIdle: offered only while the latest values say locked
// with the helmet present.
func TestRolloutRequireIdle(t *testing.T) {
	f := newRolloutFixture(t)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	r := f.create(t, core.RolloutInput{Phases: []int{100}})
	for _, c := range []struct{ locked, helmet string }{{"", ""}, {"0", "1"}, {"1", "0"}, {"0", "0"}, {"1", "1"}} {
		if c.locked != "" {
			f.clock.Advance(time.Second)
			f.report(t, "M1", "1.0.0", 0, c.locked, c.helmet)
		}
		got := f.installs(t, "M1")
		if want := c.locked == "1" && c.helmet == "1"; (len(got) == 1) != want {
			t.Fatalf("locked %q helmet %q: offered %d", c.locked, c.helmet, len(got))
		}
	}
	// Fetched, unanswered: still ELIGIBLE.
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateEligible || tg.CommandID == "" {
		t.Fatalf("target %+v", tg)
	}
}

// TestRolloutManualPause: a paused rollout offers nothing but still
// decides its INSTALLING targets; pause, resume and cancel in the wrong
// state are CONFLICT.
func TestRolloutManualPause(t *testing.T) {
	f := newRolloutFixture(t)
	ctx := context.Background()
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M2", "MX", "1.0.0", false)
	r := f.create(t, core.RolloutInput{Phases: []int{100}, RequireIdle: ptr(false)})
	f.installs(t, "M1")
	if _, err := f.rollouts.ResumeRollout(ctx, f.owner, r.ID); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("resume running: %v", err)
	}
	p, err := f.rollouts.PauseRollout(ctx, f.owner, r.ID)
	if err != nil || p.State != core.RolloutPaused || p.PausedReason != core.PausedManual {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	if _, err := f.rollouts.PauseRollout(ctx, f.owner, r.ID); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("pause paused: %v", err)
	}
	if got := f.installs(t, "M1"); len(got) != 0 {
		t.Fatalf("paused offers %+v", got)
	}
	if got := f.installs(t, "M2"); len(got) != 0 {
		t.Fatalf("paused offers %+v", got)
	}
	f.report(t, "M1", "2.0.0", 0, "1", "1")
	f.clock.Advance(time.Hour)
	if _, err := f.rollouts.SweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateHealthy {
		t.Fatalf("M1 %+v", tg)
	}
	if got := f.get(t, r.ID); got.State != core.RolloutPaused || got.Counts != (core.RolloutCounts{Healthy: 1, Eligible: 1}) {
		t.Fatalf("paused %+v", got)
	}
	res, err := f.rollouts.ResumeRollout(ctx, f.owner, r.ID)
	if err != nil || res.State != core.RolloutRunning || res.PausedReason != "" {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	m2 := f.installs(t, "M2")
	if len(m2) != 1 {
		t.Fatalf("resumed offers %+v", m2)
	}
	f.execute(t, "M2", m2[0])
	c, err := f.rollouts.CancelRollout(ctx, f.owner, r.ID)
	if err != nil || c.State != core.RolloutCanceled || c.EndedAt.IsZero() {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	for name, call := range map[string]func(context.Context, core.Principal, string) (core.Rollout, error){
		"pause": f.rollouts.PauseRollout, "resume": f.rollouts.ResumeRollout, "cancel": f.rollouts.CancelRollout,
	} {
		if _, err := call(ctx, f.owner, r.ID); core.ErrorCode(err) != core.CodeConflict {
			t.Fatalf("%s canceled: %v", name, err)
		}
	}
	if got := f.installs(t, "M2"); len(got) != 0 {
		t.Fatalf("canceled offers %+v", got)
	}
	f.clock.Advance(2 * time.Hour)
	if _, err := f.rollouts.SweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	if tg := f.targets(t, r.ID)["M2"]; tg.State != core.TargetStateInstalling {
		t.Fatalf("a canceled rollout decided %+v", tg)
	}
}

// TestRolloutThresholdAndResume: more than failureThreshold percent of at
// least minSample decided targets pauses the rollout; after a resume only
// targets decided after it count, and the next phase opens at once when
// the open ones are decided.
func TestRolloutThresholdAndResume(t *testing.T) {
	f := newRolloutFixture(t)
	ctx := context.Background()
	var uids []string
	for i := range 6 {
		uids = append(uids, fmt.Sprintf("M%d", i+1))
		f.mount(t, f.owner, uids[i], "MX", "1.0.0", false)
	}
	var first, second []string
	for i, p := range core.AssignRolloutPhases(uids, []int{50, 100}) {
		if p == 0 {
			first = append(first, uids[i])
		} else {
			second = append(second, uids[i])
		}
	}
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("phases %v %v", first, second)
	}
	r := f.create(t, core.RolloutInput{Phases: []int{50, 100}, RequireIdle: ptr(false), FailureThreshold: ptr(50), MinSample: ptr(2)})
	a, b, c := first[0], first[1], first[2]
	f.refuse(t, a, f.installs(t, a)[0], "bad image") // 1 failed of 1: below the sample
	if got := f.get(t, r.ID); got.State != core.RolloutRunning {
		t.Fatalf("paused below the sample %+v", got)
	}
	f.installs(t, b)
	f.execute(t, c, f.installs(t, c)[0])
	f.report(t, b, "2.0.0", 0, "1", "1")
	f.clock.Advance(time.Hour)
	if _, err := f.rollouts.SweepRollouts(ctx); err != nil {
		t.Fatal(err)
	}
	got := f.get(t, r.ID)
	if got.State != core.RolloutPaused || got.PausedReason != core.PausedFailureThreshold || got.OpenPhase != 0 ||
		got.Counts != (core.RolloutCounts{Healthy: 1, Failed: 2, Pending: 3}) {
		t.Fatalf("not paused %+v", got)
	}
	if evs := f.rolloutEvents(t); !slices.Equal(evs, []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPaused}) {
		t.Fatalf("events %v", evs)
	}
	// Resumed: the first phase is decided, so the second opens at once.
	got, err := f.rollouts.ResumeRollout(ctx, f.owner, r.ID)
	if err != nil || got.State != core.RolloutRunning || got.OpenPhase != 1 || got.Counts.Eligible != 3 {
		t.Fatalf("resumed %+v, %v", got, err)
	}
	d, e := second[0], second[1]
	// One failure after the resume is below the sample (the two before it
	// no longer count).
	f.refuse(t, d, f.installs(t, d)[0], "bad image")
	if got := f.get(t, r.ID); got.State != core.RolloutRunning {
		t.Fatalf("the sample before the resume counted %+v", got)
	}
	f.refuse(t, e, f.installs(t, e)[0], "bad image")
	if got := f.get(t, r.ID); got.State != core.RolloutPaused || got.PausedReason != core.PausedFailureThreshold {
		t.Fatalf("not paused again %+v", got)
	}
	want := []core.EventType{core.EventRolloutPhaseOpened, core.EventRolloutPaused, core.EventRolloutPhaseOpened, core.EventRolloutPaused}
	if evs := f.rolloutEvents(t); !slices.Equal(evs, want) {
		t.Fatalf("events %v", evs)
	}
}

// TestDeprecatingPausesRollouts: deprecating a version pauses every
// RUNNING rollout of it, in every account, as the operator's MANUAL pause
// (event and audit entry in the rollout's account); nothing more is
// offered, a resume is a CONFLICT, and other versions' rollouts run on.
func TestDeprecatingPausesRollouts(t *testing.T) {
	f := newRolloutFixture(t)
	ctx := context.Background()
	firmware := core.NewFirmwareService(f.store, nil, core.DownloadTTL(time.Minute), f.store, slog.New(slog.NewTextHandler(io.Discard, nil)))
	firmware.SetClock(f.clock.Now)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.mount(t, f.owner, "M2", "MY", "1.0.0", false)
	f.mount(t, f.other, "N1", "MX", "1.0.0", false)
	mine := f.create(t, core.RolloutInput{Phases: []int{100}, RequireIdle: ptr(false)})
	otherModel := f.create(t, core.RolloutInput{ModelNumber: "MY", SoftwareRevision: "2.0.0", Phases: []int{100}, RequireIdle: ptr(false)})
	theirs, err := f.rollouts.CreateRollout(ctx, f.other, core.RolloutInput{ModelNumber: "MX", SoftwareRevision: "2.0.0", Phases: []int{100}, RequireIdle: ptr(false)})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.installs(t, "M1"); len(got) != 1 {
		t.Fatalf("before: offers %+v", got)
	}

	fw, paused, err := firmware.Deprecate(ctx, "MX", "2.0.0")
	if err != nil || !fw.Deprecated {
		t.Fatalf("Deprecate: %+v, %v", fw, err)
	}
	var ids []string
	for _, r := range paused {
		if r.State != core.RolloutPaused || r.PausedReason != core.PausedManual {
			t.Fatalf("paused %+v", r)
		}
		ids = append(ids, r.ID)
	}
	if want := []string{mine.ID, theirs.ID}; !slices.Equal(ids, slices.Sorted(slices.Values(want))) {
		t.Fatalf("paused %v, want %v", ids, want)
	}
	if got := f.get(t, otherModel.ID); got.State != core.RolloutRunning {
		t.Fatalf("another model's rollout %+v", got)
	}
	if got := f.installs(t, "M1"); len(got) != 0 {
		t.Fatalf("a deprecated version offered: %+v", got)
	}
	if got := f.installs(t, "M2"); len(got) != 1 {
		t.Fatalf("another model's offers %+v", got)
	}
	if got := f.rolloutEvents(t); !slices.Contains(got, core.EventRolloutPaused) {
		t.Fatalf("events %v", got)
	}
	entries, err := f.store.ReadAudit(ctx, core.AuditQuery{AccountID: f.other.AccountID, Action: string(core.AuditRolloutPause), Limit: 10})
	if err != nil || len(entries) != 1 || entries[0].Target != "rollout:"+theirs.ID || entries[0].Details["reason"] != "firmware deprecated" {
		t.Fatalf("the other account's audit: %+v, %v", entries, err)
	}
	if _, err := f.rollouts.ResumeRollout(ctx, f.owner, mine.ID); core.ErrorCode(err) != core.CodeConflict || !strings.Contains(err.Error(), "deprecated") {
		t.Fatalf("resume a deprecated version's rollout: %v", err)
	}
	if c, err := f.rollouts.CancelRollout(ctx, f.owner, mine.ID); err != nil || c.State != core.RolloutCanceled {
		t.Fatalf("cancel: %+v, %v", c, err)
	}
	// Again: nothing left to pause, and no error.
	if _, paused, err := firmware.Deprecate(ctx, "MX", "2.0.0"); err != nil || len(paused) != 0 {
		t.Fatalf("deprecate again: %+v, %v", paused, err)
	}
}
