package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/core"
)

// signedRevision (docs/api.md, "The truth from the mount"): the mount's
// softwareRevision follows its verified report with the highest counter of
// its device key. A replay of an older report (only duplicates, lower
// counter) or an older report uploaded late changes it no more, also when the
// newest report repeated the revision; the highest counter moves it also
// when the report stores nothing new; reports racing on several connections
// leave the highest; a new device key starts its counter afresh; unsigned
// reports never move it.
func signedRevision(t *testing.T, store Store) {
	ctx := context.Background()
	a, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	key, rev := testDeviceKey, "1.0.0"
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "RV", AccountID: a.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: testKey(), Fields: core.MountFields{DevicePublicKey: &key, SoftwareRevision: &rev}}, nil); err != nil {
		t.Fatal(err)
	}
	ok := core.ReportCheck{Check: func(core.Mount) error { return nil }}
	report := func(counter uint64, revision string, entries ...core.StateEntry) core.Mount {
		t.Helper()
		r := ok
		r.SoftwareRevision, r.Counter = revision, &counter
		ev := &core.Event{Type: core.EventStatesReported, UID: "RV", AccountID: a.AccountID, OccurredAt: now}
		m, _, err := store.InsertReport(ctx, "RV", a.AccountID, entries, r, ev)
		if err != nil {
			t.Fatalf("report %d %s: %v", counter, revision, err)
		}
		if ev.Mount.UID != "" && ev.Mount.SoftwareRevision != m.SoftwareRevision {
			t.Fatalf("report %d: event's revision %q, mount's %q", counter, ev.Mount.SoftwareRevision, m.SoftwareRevision)
		}
		return m
	}
	battery := func(v string, d time.Duration) core.StateEntry {
		return core.StateEntry{Code: core.StateBatteryLevel, Value: v, OccurredAt: now.Add(-time.Hour + d), ReceivedAt: now, Verified: true}
	}
	expect := func(step, want string) {
		t.Helper()
		m, err := store.Mount(ctx, "RV")
		if err != nil || m.SoftwareRevision != want {
			t.Fatalf("%s: revision %q (%v), want %q", step, m.SoftwareRevision, err, want)
		}
	}
	old := battery("50", 0)
	report(10, "1.0.0", old)
	if m := report(20, "1.1.0", battery("40", time.Minute)); m.SoftwareRevision != "1.1.0" {
		t.Fatalf("the newer report's revision: %q", m.SoftwareRevision)
	}
	expect("newer report", "1.1.0")
	// The replay: only duplicates, a lower counter.
	if m := report(10, "1.0.0", old); m.SoftwareRevision != "1.1.0" {
		t.Fatalf("a replayed report answered revision %q", m.SoftwareRevision)
	}
	expect("replayed report", "1.1.0")
	// An older report uploaded late, with new entries.
	report(15, "1.0.0", battery("45", 30*time.Second))
	expect("late report", "1.1.0")
	// The same revision with a higher counter, then a late report between.
	report(30, "1.1.0", battery("39", 2*time.Minute))
	report(25, "1.2.0", battery("38", 90*time.Second))
	expect("late report below the highest", "1.1.0")
	// A higher counter with nothing new to store (only duplicates) still
	// moves it, and its answer says so.
	if m := report(40, "1.3.0", old); m.SoftwareRevision != "1.3.0" {
		t.Fatalf("a report of duplicates with the highest counter answered revision %q", m.SoftwareRevision)
	}
	expect("highest counter, duplicates only", "1.3.0")
	// Unsigned reports never move it.
	if _, _, err := store.InsertReport(ctx, "RV", a.AccountID, []core.StateEntry{{Code: core.StateBatteryLevel, Value: "1",
		OccurredAt: now, ReceivedAt: now}}, core.ReportCheck{SoftwareRevision: "6.6.6", Check: ok.Check}, nil); err != nil {
		t.Fatal(err)
	}
	expect("unsigned report", "1.3.0")
	// Racing reports: the highest counter's revision stays, whatever the
	// order in which they commit.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			counter := uint64(100 + i)
			_, _, err := store.InsertReport(ctx, "RV", a.AccountID, []core.StateEntry{battery(fmt.Sprint(i), 3*time.Minute)},
				core.ReportCheck{Check: ok.Check, SoftwareRevision: fmt.Sprintf("2.0.%d", i), Counter: &counter}, nil)
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	expect("racing reports", "2.0.19")
	// Another device key (a reset mount in a new association of the same
	// account): its counter starts afresh.
	key2 := "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "RV", AccountID: a.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: testKey(), Fields: core.MountFields{DevicePublicKey: &key2}}, nil); err != nil {
		t.Fatal(err)
	}
	report(1, "3.0.0", battery("70", 4*time.Minute))
	expect("new device key", "3.0.0")
	report(0, "1.0.0", battery("71", 5*time.Minute))
	expect("lower counter of the new key", "3.0.0")
}

// verifiedLatest (docs/api.md, "The truth from the mount"): for a mount with
// a device key, each latest value is its code's latest verified entry once
// one exists; an unverified entry counts only while none does. Every reader
// follows: the latest rows, the mount with its latest values, the listing and
// its fleet filter, the report's event and what the report's watch (alarms)
// sees. A new association starts without verified values.
func verifiedLatest(t *testing.T, store Store) {
	ctx := context.Background()
	a, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := testDeviceKey
	claim := func(key *string) {
		t.Helper()
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "VL", AccountID: a.AccountID, Now: now, Deadline: now.Add(time.Hour),
			Key: testKey(), Fields: core.MountFields{DevicePublicKey: key}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	claim(&key)
	entry := func(code core.StateCode, value string, d time.Duration, verified bool) core.StateEntry {
		return core.StateEntry{Code: code, Value: value, OccurredAt: now.Add(d), ReceivedAt: now, Verified: verified}
	}
	var watched []core.StateEntry
	var event *core.Event
	report := func(entries ...core.StateEntry) {
		t.Helper()
		event = &core.Event{Type: core.EventStatesReported, UID: "VL", AccountID: a.AccountID, OccurredAt: now}
		r := core.ReportCheck{Check: func(core.Mount) error { return nil },
			Watch: func(w core.MountWatch) (core.WatchChanges, error) {
				watched = w.Latest
				return core.WatchChanges{}, nil
			}}
		if _, _, err := store.InsertReport(ctx, "VL", a.AccountID, entries, r, event); err != nil {
			t.Fatal(err)
		}
	}
	filter := func(text string) bool {
		t.Helper()
		f := core.MountFilter{Expression: text}
		if err := core.ParseMountFilter(aipfilter.New(), &f, testOfflineAfter, now); err != nil {
			t.Fatal(err)
		}
		list, _, err := store.ListMounts(ctx, a.AccountID, f, core.Page{CurrentPage: 1, PageSize: 10}, now)
		if err != nil {
			t.Fatal(err)
		}
		return len(list) == 1
	}
	// expect checks every reader against want: code → value, with a "*"
	// suffix when verified.
	expect := func(step string, want map[core.StateCode]string) {
		t.Helper()
		show := func(es []core.StateEntry) map[core.StateCode]string {
			out := map[core.StateCode]string{}
			for _, e := range es {
				out[e.Code] = e.Value
				if e.Verified {
					out[e.Code] += "*"
				}
			}
			return out
		}
		latest, err := store.LatestStates(ctx, "VL", a.AccountID)
		if err != nil {
			t.Fatal(err)
		}
		if got := show(latest); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: latest %v, want %v", step, got, want)
		}
		if got := show(watched); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the watch saw %v, want %v", step, got, want)
		}
		if got := showLatest(event.Mount.Latest); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: the event's mount %v, want %v", step, got, want)
		}
		m, err := store.MountWithLatest(ctx, "VL")
		if err != nil {
			t.Fatal(err)
		}
		if got := showLatest(m.Latest); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: MountWithLatest %v, want %v", step, got, want)
		}
		list, _, err := store.ListMounts(ctx, a.AccountID, core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 10}, now)
		if err != nil || len(list) != 1 {
			t.Fatal(list, err)
		}
		if got := showLatest(list[0].Latest); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: ListMounts %v, want %v", step, got, want)
		}
		locked := want[core.StateMountLocked] == "1" || want[core.StateMountLocked] == "1*"
		if filter("mountLocked = true") != locked || filter("mountLocked = false") == locked {
			t.Fatalf("%s: the filter on mountLocked disagrees with %v", step, want)
		}
	}
	// An owner's unsigned entries dated 290 s ahead, before anything signed.
	report(entry(core.StateMountLocked, "1", 290*time.Second, false), entry(core.StateHelmetMounted, "1", 290*time.Second, false))
	expect("unsigned ahead", map[core.StateCode]string{core.StateMountLocked: "1", core.StateHelmetMounted: "1"})
	// The mount's own signed report, dated now: it decides.
	report(entry(core.StateBatteryLevel, "80", 0, false))
	report(entry(core.StateMountLocked, "0", 0, true), entry(core.StateHelmetMounted, "0", 0, true))
	expect("signed", map[core.StateCode]string{core.StateMountLocked: "0*", core.StateHelmetMounted: "0*", core.StateBatteryLevel: "80"})
	// Unsigned entries, newer still, change nothing once a verified entry
	// of their code exists; a code without one keeps latest-wins.
	report(entry(core.StateMountLocked, "1", 295*time.Second, false), entry(core.StateBatteryLevel, "20", time.Second, false))
	expect("unsigned after signed", map[core.StateCode]string{core.StateMountLocked: "0*", core.StateHelmetMounted: "0*", core.StateBatteryLevel: "20"})
	// An older signed entry does not replace a newer signed one; a newer
	// one does; a signed entry replaces an unsigned one dated ahead.
	report(entry(core.StateMountLocked, "1", -time.Second, true), entry(core.StateBatteryLevel, "60", -time.Minute, true))
	expect("older signed", map[core.StateCode]string{core.StateMountLocked: "0*", core.StateHelmetMounted: "0*", core.StateBatteryLevel: "60*"})
	report(entry(core.StateMountLocked, "1", time.Second, true))
	expect("newer signed", map[core.StateCode]string{core.StateMountLocked: "1*", core.StateHelmetMounted: "0*", core.StateBatteryLevel: "60*"})
	// A new association (abandoned, claimed again without a device key):
	// the former association's verified values no longer outrank, so the
	// latest entry wins again. (A report's entries share one Verified:
	// it is signed or not.)
	if _, err := store.AbandonMount(ctx, "VL", a.AccountID, now, nil); err != nil {
		t.Fatal(err)
	}
	claim(nil)
	report(entry(core.StateMountLocked, "0", 2*time.Second, false))
	expect("new association", map[core.StateCode]string{core.StateMountLocked: "0", core.StateHelmetMounted: "0", core.StateBatteryLevel: "60"})
}

// showLatest is verifiedLatest's view of computed fields: code → value,
// with a "*" suffix when verified.
func showLatest(l core.LatestStates) map[core.StateCode]string {
	out := map[core.StateCode]string{}
	flag := func(b *bool) string {
		if *b {
			return "1"
		}
		return "0"
	}
	if l.MountLocked != nil {
		out[core.StateMountLocked] = flag(l.MountLocked)
	}
	if l.HelmetMounted != nil {
		out[core.StateHelmetMounted] = flag(l.HelmetMounted)
	}
	if l.BatteryLevel != nil {
		out[core.StateBatteryLevel] = fmt.Sprint(*l.BatteryLevel)
	}
	if l.CPUTemperature != nil {
		out[core.StateCPUTemperature] = fmt.Sprint(*l.CPUTemperature)
	}
	for code := range out {
		if l.Verified[code] {
			out[code] += "*"
		}
	}
	return out
}
