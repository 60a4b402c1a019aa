package core_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestVerifiedValuesDecide (docs/api.md, "The truth from the mount"): an
// owner's unsigned entries dated 290 s ahead decide the computed fields only
// until the mount's own signed report comes; from then on unsigned entries of
// those codes, even newer ones, change nothing: not the mount's fields, not
// its alarms.
func TestVerifiedValuesDecide(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	alarms := core.NewAlarmService(core.AlarmDeps{Store: f.store, Mounts: f.svc, Waker: f.meter,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	alarms.SetClock(f.clock.Now)
	name, sev := "helmet out", "WARNING"
	conds := []core.AlarmCondition{{Code: core.StateHelmetMounted, Op: "==", Value: "0"}}
	if _, err := alarms.CreateRule(ctx, f.owner, core.AlarmRuleInput{Name: &name, Severity: &sev, Conditions: &conds}); err != nil {
		t.Fatal(err)
	}
	f.associate(t, "M1", f.deviceHex)
	entries := func(d time.Duration, locked, helmet string) []core.StateInput {
		at := f.clock.Now().Add(d)
		return []core.StateInput{{Code: "MOUNT_LOCKED", Value: locked, OccurredAt: at, HasOccurredAt: true},
			{Code: "HELMET_MOUNTED", Value: helmet, OccurredAt: at, HasOccurredAt: true}}
	}
	counter := uint64(0)
	signed := func(locked, helmet string) {
		t.Helper()
		counter++
		in := entries(0, locked, helmet)
		if _, err := f.svc.ReportStates(ctx, f.owner, "M1", in, f.signReport("M1", counter, "1.0.0", in)); err != nil {
			t.Fatal(err)
		}
	}
	unsigned := func(d time.Duration, locked, helmet string) {
		t.Helper()
		if _, err := f.svc.ReportStates(ctx, f.owner, "M1", entries(d, locked, helmet), nil); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(step string, locked, helmet, verified bool, active int) {
		t.Helper()
		m, err := f.svc.Mount(ctx, f.owner, "M1")
		if err != nil {
			t.Fatal(err)
		}
		l := m.Latest
		if l.MountLocked == nil || *l.MountLocked != locked || l.HelmetMounted == nil || *l.HelmetMounted != helmet ||
			l.Verified[core.StateMountLocked] != verified || l.Verified[core.StateHelmetMounted] != verified {
			t.Fatalf("%s: locked %v helmet %v verified %v, want %v %v %v", step, deref(l.MountLocked), deref(l.HelmetMounted),
				l.Verified, locked, helmet, verified)
		}
		state := core.AlarmActive
		list, _, err := alarms.ListAlarms(ctx, f.owner, core.AlarmFilter{State: &state}, core.Page{CurrentPage: 1, PageSize: 10})
		if err != nil || len(list) != active {
			t.Fatalf("%s: active alarms %+v (%v), want %d", step, list, err, active)
		}
	}
	unsigned(290*time.Second, "1", "1")
	expect("unsigned ahead", true, true, false, 0)
	f.clock.Advance(time.Second)
	signed("0", "0")
	expect("signed", false, false, true, 1)
	f.clock.Advance(time.Second)
	unsigned(295*time.Second, "1", "1")
	expect("unsigned after signed", false, false, true, 1)
	f.clock.Advance(time.Second)
	signed("1", "1")
	expect("signed again", true, true, true, 0)
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestReportRevisionFollowsHighestCounter (docs/api.md, "The truth from
// the mount"): a replayed
// report (only duplicates, a lower counter) leaves the mount's revision
// where the highest counter put it; a counter the stores cannot keep is
// refused.
func TestReportRevisionFollowsHighestCounter(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	f.associate(t, "M1", f.deviceHex)
	at := f.clock.Now().Add(-time.Minute)
	report := func(counter uint64, revision, value string) error {
		in := []core.StateInput{{Code: "BATTERY_LEVEL", Value: value, OccurredAt: at, HasOccurredAt: true}}
		_, err := f.svc.ReportStates(ctx, f.owner, "M1", in, f.signReport("M1", counter, revision, in))
		return err
	}
	revision := func() string {
		t.Helper()
		m, err := f.svc.Mount(ctx, f.owner, "M1")
		if err != nil {
			t.Fatal(err)
		}
		return m.SoftwareRevision
	}
	if err := report(3, "1.0.0", "50"); err != nil {
		t.Fatal(err)
	}
	at = at.Add(time.Second)
	if err := report(7, "2.0.0", "49"); err != nil || revision() != "2.0.0" {
		t.Fatalf("the newer report: %v, revision %q", err, revision())
	}
	at = at.Add(-time.Second)
	if err := report(3, "1.0.0", "50"); err != nil {
		t.Fatal(err)
	}
	if got := revision(); got != "2.0.0" {
		t.Fatalf("a replayed report set the revision to %q", got)
	}
	err := report(math.MaxInt64+1, "3.0.0", "48")
	if core.ErrorCode(err) != core.CodeValidation || revision() != "2.0.0" {
		t.Fatalf("counter 2^63: %v, revision %q", err, revision())
	}
}

// TestRolloutRequireIdleReadsVerified: requireIdle reads the values every
// reader does (docs/api.md, "The truth from the mount"): an owner's unsigned
// "locked, helmet in" dated ahead does not outrank the mount's signed
// "unlocked, helmet out".
func TestRolloutRequireIdleReadsVerified(t *testing.T) {
	f := newRolloutFixture(t)
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	f.create(t, core.RolloutInput{Phases: []int{100}})
	at := f.clock.Now().Add(290 * time.Second)
	if _, err := f.mounts.ReportStates(context.Background(), f.owner, "M1", []core.StateInput{
		{Code: "MOUNT_LOCKED", Value: "1", OccurredAt: at, HasOccurredAt: true},
		{Code: "HELMET_MOUNTED", Value: "1", OccurredAt: at, HasOccurredAt: true}}, nil); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	f.report(t, "M1", "1.0.0", 0, "0", "0")
	if got := f.installs(t, "M1"); len(got) != 0 {
		t.Fatalf("offered %d installs while the mount says it is in use", len(got))
	}
	f.clock.Advance(time.Second)
	f.report(t, "M1", "1.0.0", 0, "1", "1")
	if got := f.installs(t, "M1"); len(got) != 1 {
		t.Fatalf("offered %d installs once the mount says it is idle", len(got))
	}
}
