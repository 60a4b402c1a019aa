package storetest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/core"
)

// filterFleet is a fleet of account A seeded for the fleet filter, with
// each mount's latest values as reported (the model the store must agree
// with), and what the listing reads at now.
type filterFleet struct {
	a, b   core.Principal
	now    time.Time
	cut    time.Time
	t0     time.Time
	latest map[string]map[core.StateCode]string
}

// seedFilterFleet: at now (t0+20m, the offline cut t0+5m), A owns
//
//	F1 "Garage" HM-1 1.0/2.0 ASSOCIATED, seen t0 (OFFLINE): battery 15, cpu 45.5, locked, no helmet
//	F2 "shed"   HM-1 1.0/2.1 ASSOCIATED, seen t0+10m (ONLINE): battery 80, cpu 30
//	F3 "Attic"  HM-2 1.1/2.0 ASSOCIATED, never seen (UNKNOWN), no values
//	F4 ""       HM-2         IDLE, never seen, no values
//	F5 "Porch"  HM-1 1.0/2.0 ASSOCIATED, seen t0+5m (OFFLINE at the cut): battery 19.5, unlocked
//
// and B owns FB (HM-1, battery 5), which A never sees.
func seedFilterFleet(t *testing.T, store Store) filterFleet {
	t.Helper()
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	clock := &alarmClock{now: t0}
	w := newAlarmWorld(t, store, clock)
	f := filterFleet{a: ownerPrincipal(t, store, "A"), b: ownerPrincipal(t, store, "B"), t0: t0,
		latest: map[string]map[core.StateCode]string{}}
	claim := func(p core.Principal, uid, name, model, fw, sw string, confirm bool) {
		t.Helper()
		fields := core.MountFields{Name: &name, ModelNumber: &model, FirmwareRevision: &fw, SoftwareRevision: &sw}
		if _, err := w.mounts.RequestAssociation(ctx, p, uid, fields); err != nil {
			t.Fatalf("request %s: %v", uid, err)
		}
		if confirm {
			if _, err := w.mounts.ConfirmAssociation(ctx, p, uid); err != nil {
				t.Fatalf("confirm %s: %v", uid, err)
			}
		}
	}
	report := func(p core.Principal, uid string, kv ...string) {
		t.Helper()
		w.report(t, p, uid, clock.Now(), kv...)
		if f.latest[uid] == nil {
			f.latest[uid] = map[core.StateCode]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			f.latest[uid][core.StateCode(kv[i])] = kv[i+1]
		}
	}
	claim(f.a, "F1", "Garage", "HM-1", "1.0", "2.0", true)
	claim(f.a, "F2", "shed", "HM-1", "1.0", "2.1", true)
	claim(f.a, "F3", "Attic", "HM-2", "1.1", "2.0", true)
	claim(f.a, "F5", "Porch", "HM-1", "1.0", "2.0", true)
	claim(f.b, "FB", "Other", "HM-1", "1.0", "2.0", true)
	report(f.a, "F1", "BATTERY_LEVEL", "15", "CPU_TEMPERATURE", "45.5", "MOUNT_LOCKED", "1", "HELMET_MOUNTED", "0")
	report(f.b, "FB", "BATTERY_LEVEL", "5")
	clock.Advance(5 * time.Minute)
	report(f.a, "F5", "BATTERY_LEVEL", "19.5", "MOUNT_LOCKED", "0")
	clock.Advance(5 * time.Minute)
	report(f.a, "F2", "BATTERY_LEVEL", "80", "CPU_TEMPERATURE", "30")
	clock.Advance(9 * time.Minute)
	claim(f.a, "F4", "", "HM-2", "", "", false)
	clock.Advance(time.Minute)
	f.now, f.cut = clock.Now(), clock.Now().Add(-testOfflineAfter)
	return f
}

// list lists A's mounts through f, filter text parsed as the services do.
func (ff filterFleet) list(t *testing.T, store Store, text string, f core.MountFilter) ([]core.Mount, int) {
	t.Helper()
	f.Expression = text
	if err := core.ParseMountFilter(aipfilter.New(), &f, testOfflineAfter, ff.now); err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	mounts, total, err := store.ListMounts(context.Background(), ff.a.AccountID, f, core.Page{CurrentPage: 1, PageSize: 100}, ff.now)
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return mounts, total
}

func uidsOf(mounts []core.Mount) string {
	uids := make([]string, len(mounts))
	for i, m := range mounts {
		uids[i] = m.UID
	}
	return strings.Join(uids, ",")
}

// fleetFilter: the filters of docs/api.md select the same mounts from
// every store, ListMounts and EachMount alike, together with the other
// filters.
func fleetFilter(t *testing.T, store Store) {
	ff := seedFilterFleet(t, store)
	at := func(d time.Duration) string { return ff.t0.Add(d).Format(time.RFC3339) }
	for _, c := range []struct {
		filter string
		f      core.MountFilter
		want   string
	}{
		{``, core.MountFilter{}, "F1,F2,F3,F4,F5"},
		{`batteryLevel < 20`, core.MountFilter{}, "F1,F5"},
		// As reported: 19.5 is not 20, though the REST field rounds it.
		{`batteryLevel > 19`, core.MountFilter{}, "F2,F5"},
		{`batteryLevel = 19.5`, core.MountFilter{}, "F5"},
		{`batteryLevel != 15`, core.MountFilter{}, "F2,F5"},
		{`NOT batteryLevel < 20`, core.MountFilter{}, "F2,F3,F4"},
		{`batteryLevel >= 0 OR NOT batteryLevel >= 0`, core.MountFilter{}, "F1,F2,F3,F4,F5"},
		{`cpuTemperature >= 45.5`, core.MountFilter{}, "F1"},
		{`cpuTemperature < 45.5`, core.MountFilter{}, "F2"},
		{`mountLocked = true`, core.MountFilter{}, "F1"},
		{`mountLocked != true`, core.MountFilter{}, "F5"},
		{`NOT mountLocked = true`, core.MountFilter{}, "F2,F3,F4,F5"},
		{`helmetMounted = false`, core.MountFilter{}, "F1"},
		{`presence = "OFFLINE"`, core.MountFilter{}, "F1,F5"},
		{`presence = "ONLINE"`, core.MountFilter{}, "F2"},
		{`presence = "UNKNOWN"`, core.MountFilter{}, "F3,F4"},
		{`presence != "ONLINE"`, core.MountFilter{}, "F1,F3,F4,F5"},
		{`lastSeenAt < "` + at(5*time.Minute) + `"`, core.MountFilter{}, "F1"},
		{`lastSeenAt >= "` + at(5*time.Minute) + `"`, core.MountFilter{}, "F2,F5"},
		{`lastSeenAt = "` + at(5*time.Minute) + `"`, core.MountFilter{}, "F5"},
		{`NOT lastSeenAt >= "` + at(5*time.Minute) + `"`, core.MountFilter{}, "F1,F3,F4"},
		{`associationState = "IDLE"`, core.MountFilter{}, "F4"},
		{`associationState != "IDLE"`, core.MountFilter{}, "F1,F2,F3,F5"},
		{`modelNumber = "HM-2"`, core.MountFilter{}, "F3,F4"},
		{`firmwareRevision = "1.1" OR softwareRevision = "2.1"`, core.MountFilter{}, "F2,F3"},
		// Bytes: "shed" sorts after "Z", "" before everything.
		{`name > "Z"`, core.MountFilter{}, "F2"},
		{`name < "B"`, core.MountFilter{}, "F3,F4"},
		{`uid = "F2" OR uid = "FB"`, core.MountFilter{}, "F2"},
		{`batteryLevel < 20 AND presence = "OFFLINE" AND modelNumber = "HM-1"`, core.MountFilter{}, "F1,F5"},
		{`modelNumber = "HM-1" AND (batteryLevel < 20 OR presence = "ONLINE")`, core.MountFilter{}, "F1,F2,F5"},
		{`(modelNumber = "HM-2" OR name = "Garage") AND NOT presence = "UNKNOWN"`, core.MountFilter{}, "F1"},
		{`NOT (batteryLevel < 20 OR cpuTemperature < 40)`, core.MountFilter{}, "F3,F4"},
		{`presence = "OFFLINE"`, core.MountFilter{MountUID: ptr("F1")}, "F1"},
		{`batteryLevel < 20`, core.MountFilter{UIDs: []string{"F2", "F5", "FB"}}, "F5"},
		{`batteryLevel < 20`, core.MountFilter{UIDs: []string{}}, ""},
	} {
		t.Run(c.filter, func(t *testing.T) {
			got, total := ff.list(t, store, c.filter, c.f)
			if uidsOf(got) != c.want || total != len(got) {
				t.Fatalf("ListMounts: %s (total %d), want %s", uidsOf(got), total, c.want)
			}
			f := c.f
			f.Expression = c.filter
			if err := core.ParseMountFilter(aipfilter.New(), &f, testOfflineAfter, ff.now); err != nil {
				t.Fatal(err)
			}
			var each []core.Mount
			if err := store.EachMount(context.Background(), ff.a.AccountID, f, ff.now, func(m core.Mount) error {
				each = append(each, m)
				return nil
			}); err != nil || uidsOf(each) != c.want {
				t.Fatalf("EachMount: %s, %v; want %s", uidsOf(each), err, c.want)
			}
		})
	}
	// A page of a filtered listing counts the whole selection.
	f := core.MountFilter{Expression: `modelNumber = "HM-1"`}
	if err := core.ParseMountFilter(aipfilter.New(), &f, testOfflineAfter, ff.now); err != nil {
		t.Fatal(err)
	}
	page, total, err := store.ListMounts(context.Background(), ff.a.AccountID, f, core.Page{CurrentPage: 2, PageSize: 2}, ff.now)
	if err != nil || uidsOf(page) != "F5" || total != 3 {
		t.Fatalf("page 2: %s of %d, %v", uidsOf(page), total, err)
	}
}

// fleetFilterProperty: random filters select from the store exactly the
// mounts core's evaluator selects from the same fleet (the store's SQL and
// the memory store's evaluator cannot drift apart).
func fleetFilterProperty(t *testing.T, store Store) {
	ff := seedFilterFleet(t, store)
	all, _ := ff.list(t, store, "", core.MountFilter{})
	rng := rand.New(rand.NewPCG(7, 11))
	n := 300
	if testing.Short() {
		n = 60
	}
	for i := range n {
		e := randomFilter(rng, ff, 3)
		var want []core.Mount
		for _, m := range all {
			if e.Matches(m, ff.latest[m.UID], ff.cut) {
				want = append(want, m)
			}
		}
		got, err := func() ([]core.Mount, error) {
			mounts, _, err := store.ListMounts(context.Background(), ff.a.AccountID,
				core.MountFilter{Expr: e, OfflineCut: ff.cut}, core.Page{CurrentPage: 1, PageSize: 100}, ff.now)
			return mounts, err
		}()
		if err != nil || uidsOf(got) != uidsOf(want) {
			t.Fatalf("filter %d %s: store %s, %v; evaluator %s", i, showFilter(e), uidsOf(got), err, uidsOf(want))
		}
	}
}

// randomFilter builds a tree of up to depth levels over values near the
// fleet's own, boundaries included.
func randomFilter(rng *rand.Rand, ff filterFleet, depth int) *core.FilterExpr {
	if depth > 0 && rng.IntN(3) > 0 {
		switch rng.IntN(3) {
		case 0:
			return &core.FilterExpr{Op: core.FilterNot, Args: []*core.FilterExpr{randomFilter(rng, ff, depth-1)}}
		default:
			op := []core.FilterOp{core.FilterAnd, core.FilterOr}[rng.IntN(2)]
			args := make([]*core.FilterExpr, 2+rng.IntN(2))
			for i := range args {
				args[i] = randomFilter(rng, ff, depth-1)
			}
			return &core.FilterExpr{Op: op, Args: args}
		}
	}
	fields := make([]core.FilterField, 0, len(core.FilterFields))
	for f := range core.FilterFields {
		fields = append(fields, f)
	}
	slices.Sort(fields)
	field := fields[rng.IntN(len(fields))]
	ops := []core.FilterOp{core.FilterEq, core.FilterNe, core.FilterLt, core.FilterLe, core.FilterGt, core.FilterGe}
	e := &core.FilterExpr{Field: field, Op: ops[rng.IntN(len(ops))]}
	pick := func(values ...string) string { return values[rng.IntN(len(values))] }
	switch field {
	case core.FilterBatteryLevel, core.FilterCPUTemperature:
		e.Number = []float64{-1, 0, 15, 19.5, 20, 30, 45.5, 80, 100}[rng.IntN(9)]
	case core.FilterMountLocked, core.FilterHelmetMounted:
		e.Op, e.Bool = ops[rng.IntN(2)], rng.IntN(2) == 0
	case core.FilterLastSeenAt:
		e.Time = ff.t0.Add(time.Duration(rng.IntN(5)) * 5 * time.Minute)
	case core.FilterPresence:
		e.Op, e.String = ops[rng.IntN(2)], pick("ONLINE", "OFFLINE", "UNKNOWN")
	case core.FilterAssociationState:
		e.Op, e.String = ops[rng.IntN(2)], pick("IDLE", "ASSOCIATED")
	case core.FilterName:
		e.String = pick("", "Garage", "shed", "Z", "a", "Porch")
	case core.FilterUID:
		e.String = pick("F1", "F3", "F5", "FB", "G")
	case core.FilterModelNumber:
		e.String = pick("HM-1", "HM-2", "HM-10")
	default:
		e.String = pick("", "1.0", "1.1", "2.0", "2.1")
	}
	return e
}

func showFilter(e *core.FilterExpr) string {
	switch e.Op {
	case core.FilterAnd, core.FilterOr, core.FilterNot:
		parts := make([]string, len(e.Args))
		for i, a := range e.Args {
			parts[i] = showFilter(a)
		}
		return string(e.Op) + "(" + strings.Join(parts, ", ") + ")"
	}
	return fmt.Sprintf("%s %s %q/%g/%t/%s", e.Field, e.Op, e.String, e.Number, e.Bool, e.Time.Format(time.RFC3339))
}

// fleetFilterAcrossOwners: a comparison on a latest value reads the
// owner's latest values alone, through every change of owner. B reports on
// X and abandons it; A claims X and sees no value of B's; A reports and
// abandons; B claims X again and sees its own former value, as the listing
// shows it.
func fleetFilterAcrossOwners(t *testing.T, store Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)
	clock := &alarmClock{now: t0}
	w := newAlarmWorld(t, store, clock)
	a, b := ownerPrincipal(t, store, "A"), ownerPrincipal(t, store, "B")
	claim := func(p core.Principal) {
		t.Helper()
		if _, err := w.mounts.RequestAssociation(ctx, p, "X", core.MountFields{}); err != nil {
			t.Fatalf("request: %v", err)
		}
		if _, err := w.mounts.ConfirmAssociation(ctx, p, "X"); err != nil {
			t.Fatalf("confirm: %v", err)
		}
	}
	abandon := func(p core.Principal) {
		t.Helper()
		if err := w.mounts.AbandonMount(ctx, p, "X"); err != nil {
			t.Fatalf("abandon: %v", err)
		}
	}
	matches := func(p core.Principal, text string) string {
		t.Helper()
		f := core.MountFilter{Expression: text}
		if err := core.ParseMountFilter(aipfilter.New(), &f, testOfflineAfter, clock.Now()); err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		mounts, total, err := store.ListMounts(ctx, p.AccountID, f, core.Page{CurrentPage: 1, PageSize: 10}, clock.Now())
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		if total != len(mounts) {
			t.Fatalf("%s: total %d for %d mounts", text, total, len(mounts))
		}
		return uidsOf(mounts)
	}
	step := func(p core.Principal, want map[string]string) {
		t.Helper()
		for text, uids := range want {
			if got := matches(p, text); got != uids {
				t.Errorf("%s: %q, want %q", text, got, uids)
			}
		}
	}
	claim(b)
	w.report(t, b, "X", clock.Now(), "BATTERY_LEVEL", "5", "MOUNT_LOCKED", "1")
	step(b, map[string]string{`batteryLevel = 5`: "X", `mountLocked = true`: "X"})
	clock.Advance(time.Minute)
	abandon(b)
	claim(a)
	step(a, map[string]string{`batteryLevel = 5`: "", `batteryLevel < 100`: "", `NOT batteryLevel < 100`: "X",
		`mountLocked = true`: "", `mountLocked = false`: ""})
	w.report(t, a, "X", clock.Now(), "BATTERY_LEVEL", "50", "HELMET_MOUNTED", "0")
	step(a, map[string]string{`batteryLevel = 50`: "X", `helmetMounted = false`: "X", `mountLocked = true`: ""})
	clock.Advance(time.Minute)
	abandon(a)
	claim(b)
	step(b, map[string]string{`batteryLevel = 5`: "X", `mountLocked = true`: "X", `helmetMounted = false`: "", `batteryLevel = 50`: ""})
	// An older report changes nothing; a newer one moves the value.
	w.report(t, b, "X", t0.Add(-time.Hour), "BATTERY_LEVEL", "7")
	step(b, map[string]string{`batteryLevel = 5`: "X", `batteryLevel = 7`: ""})
	w.report(t, b, "X", clock.Now(), "BATTERY_LEVEL", "9", "CPU_TEMPERATURE", "61")
	step(b, map[string]string{`batteryLevel = 9 AND cpuTemperature > 60`: "X", `mountLocked = true`: "X"})
}
