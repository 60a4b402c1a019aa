package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// The command lifecycle and the truth from the mount: device keys pinned
// by claims, receipts deciding a command by one conditional update, the
// UNCONFIRMED sweep, signed reports' checks and verified entries.

const testDeviceKey = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"

func testKey() core.MountKey {
	return core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
}

// testIssuerName is the issuer's name issueAt's commands keep.
const testIssuerName = "Fleet ops API client"

func nonceOf(i int) string { return fmt.Sprintf("%032x", i) }

// issueAt stores an ISSUED command of acc on uid, generated at t and
// expiring ttl later, issued by client "cli" named testIssuerName.
func issueAt(t *testing.T, store Store, uid, accountID string, i int, at time.Time, ttl time.Duration) core.Command {
	t.Helper()
	c := core.Command{ID: nonceOf(i), MountUID: uid, AccountID: accountID, Code: core.CmdReleaseHelmet,
		Data: map[string]any{"expiresAt": core.FormatTime(at.Add(ttl))}, GeneratedAt: at, Payload: "p;" + nonceOf(i),
		SignedToken: "ab", IssuedBy: "cli", IssuedByName: testIssuerName, ExpiresAt: at.Add(ttl), Status: core.CommandIssued, StatusAt: at}
	if err := store.InsertCommand(context.Background(), c, nil); err != nil {
		t.Fatal(err)
	}
	return c
}

func unconfirmedEvent(now time.Time) func(core.Command) *core.Event {
	return func(c core.Command) *core.Event {
		return &core.Event{Type: core.EventCommandUnconfirmed, UID: c.MountUID, AccountID: c.AccountID, OccurredAt: now}
	}
}

// deviceKeys: a claim pins the device key it brings; the owner's claim
// without one during its own association keeps the key pinned before. A
// key lives and dies with its association (docs/api.md, "The truth from the
// mount"): a claim of an INACTIVE uid (abandoned or lapsed, by another
// account or the same one) starts with the key it brings, or none, never the
// one pinned before. Reads and events show it. AssociationStartedAt is the
// claim that began the association, kept by the owner's claims during it.
func deviceKeys(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	a, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().UTC().Truncate(time.Millisecond)
	now := start
	key1, key2 := testDeviceKey, "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
	claim := func(accountID string, key *string) core.Mount {
		t.Helper()
		m, err := store.ClaimMount(ctx, core.Claim{UID: "DK", AccountID: accountID, Now: now, Deadline: now.Add(time.Hour),
			Key: testKey(), Fields: core.MountFields{DevicePublicKey: key}},
			&core.Event{Type: core.EventAssociationRequested, UID: "DK", AccountID: accountID, OccurredAt: now})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	check := func(name string, m core.Mount, want string, started time.Time) {
		t.Helper()
		if m.DevicePublicKey != want || !m.AssociationStartedAt.Equal(started) {
			t.Fatalf("%s: claim answers key %q started %v, want %q started %v", name, m.DevicePublicKey, m.AssociationStartedAt, want, started)
		}
		if m, err := store.Mount(ctx, "DK"); err != nil || m.DevicePublicKey != want || !m.AssociationStartedAt.Equal(started) {
			t.Fatalf("%s: Mount = %q started %v, %v", name, m.DevicePublicKey, m.AssociationStartedAt, err)
		}
	}
	for _, step := range []struct {
		name    string
		account string
		key     *string
		want    string
	}{
		{"new mount with a key", a.AccountID, &key1, key1},
		{"again without a key", a.AccountID, nil, key1},
		{"again with another key", a.AccountID, &key2, key2},
	} {
		check(step.name, claim(step.account, step.key), step.want, start)
		now = now.Add(time.Second)
	}
	if _, ok, err := store.ConfirmAssociation(ctx, "DK", a.AccountID, now, nil); err != nil || !ok {
		t.Fatalf("confirm: %v, %v", ok, err)
	}
	now = now.Add(time.Second)
	check("again while ASSOCIATED, without a key", claim(a.AccountID, nil), key2, start)
	if list, _, err := store.ListMounts(ctx, a.AccountID, core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 10}, now); err != nil ||
		len(list) != 1 || list[0].DevicePublicKey != key2 {
		t.Fatalf("ListMounts = %+v, %v", list, err)
	}
	if m, err := store.MountWithLatest(ctx, "DK"); err != nil || m.DevicePublicKey != key2 || !m.AssociationStartedAt.Equal(start) {
		t.Fatalf("MountWithLatest = %+v, %v", m, err)
	}
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: a.AccountID, Types: []core.EventType{core.EventAssociationRequested}, Limit: 100})
	if err != nil || len(events) != 4 || events[2].Mount.DevicePublicKey != key2 || events[0].Mount.DevicePublicKey != key1 {
		t.Fatalf("events' mounts: %+v, %v", events, err)
	}
	// Abandoned and claimed by another account without a key: the key
	// pinned by the first association does not pass to it (it could be
	// one the former owner chose to plant).
	if _, err := store.AbandonMount(ctx, "DK", a.AccountID, now, nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	check("another account's claim without a key", claim(b.AccountID, nil), "", now)
	now = now.Add(time.Second)
	check("its own claim with a key during its association", claim(b.AccountID, &key1), key1, now.Add(-time.Second))
	// The same account again after an abandon: a new association, none.
	if _, err := store.AbandonMount(ctx, "DK", b.AccountID, now, nil); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	check("the same account after its abandon, without a key", claim(b.AccountID, nil), "", now)
	// A lapsed window ends the association as well.
	abandoned := now
	now = now.Add(time.Second)
	check("a key brought while IDLE", claim(b.AccountID, &key2), key2, abandoned)
	if _, ok, err := store.ExpireAssociation(ctx, "DK", now.Add(2*time.Hour), nil); err != nil || !ok {
		t.Fatalf("expire: %v, %v", ok, err)
	}
	now = now.Add(2*time.Hour + time.Second)
	check("a claim after the window lapsed, without a key", claim(a.AccountID, nil), "", now)
	// An unknown uid starts with the key it brings.
	if m, err := store.ClaimMount(ctx, core.Claim{UID: "DK2", AccountID: a.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: testKey(), Fields: core.MountFields{DevicePublicKey: &key1}}, nil); err != nil || m.DevicePublicKey != key1 || !m.AssociationStartedAt.Equal(now) {
		t.Fatalf("an unknown uid's claim: %+v, %v", m, err)
	}
}

// receipts: the deciding rule as conditional updates. An EXECUTED receipt
// decides whatever its counter; a REFUSED one decides over ISSUED,
// UNCONFIRMED or a REFUSED one of a higher counter; anything else is a
// duplicate. Each change appends its event with the command.
func receipts(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	a, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	key := testDeviceKey
	// The claim's ASSOCIATE_OWNER has the lifecycle too (stored with the
	// claim, in its statement on PostgreSQL).
	assoc := core.Command{ID: nonceOf(100), MountUID: "RC", AccountID: a.AccountID, Code: core.CmdAssociateOwner,
		Data: map[string]any{}, GeneratedAt: t0, Payload: "p;" + nonceOf(100), IssuedBy: "usr_1", IssuedByName: "ana",
		ExpiresAt: t0.Add(5 * time.Minute), Status: core.CommandIssued, StatusAt: t0}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "RC", AccountID: a.AccountID, Now: t0, Deadline: t0.Add(time.Hour),
		Key: testKey(), Fields: core.MountFields{DevicePublicKey: &key}, Command: &assoc},
		&core.Event{Type: core.EventAssociationRequested, UID: "RC", AccountID: a.AccountID, OccurredAt: t0}); err != nil {
		t.Fatal(err)
	}
	if got, err := store.CommandsByID(ctx, "RC", a.AccountID, []string{assoc.ID}); err != nil || len(got) != 1 ||
		got[0].Status != core.CommandIssued || !got[0].ExpiresAt.Equal(assoc.ExpiresAt) || !got[0].StatusAt.Equal(t0) ||
		got[0].IssuedBy != "usr_1" || got[0].IssuedByName != "ana" {
		t.Fatalf("the claim's command: %+v, %v", got, err)
	}
	issued := issueAt(t, store, "RC", a.AccountID, 1, t0, 5*time.Minute)
	issueAt(t, store, "RC", a.AccountID, 2, t0, 5*time.Minute)

	// Lookups are scoped to the mount and the account.
	if got, err := store.CommandsByID(ctx, "RC", a.AccountID, []string{nonceOf(1), nonceOf(2), nonceOf(9)}); err != nil || len(got) != 2 {
		t.Fatalf("CommandsByID = %+v, %v; want 2", got, err)
	}
	got, err := store.CommandsByID(ctx, "RC", a.AccountID, []string{nonceOf(1)})
	if err != nil || len(got) != 1 || got[0].ID != issued.ID || got[0].Status != core.CommandIssued ||
		!got[0].ExpiresAt.Equal(issued.ExpiresAt) || !got[0].StatusAt.Equal(t0) || got[0].Payload != issued.Payload ||
		got[0].IssuedByName != testIssuerName {
		t.Fatalf("CommandsByID(1) = %+v, %v", got, err)
	}
	if got, err := store.CommandsByID(ctx, "RC", b.AccountID, []string{nonceOf(1)}); err != nil || len(got) != 0 {
		t.Fatalf("another account's lookup = %+v, %v", got, err)
	}
	if got, err := store.CommandsByID(ctx, "OTHER", a.AccountID, []string{nonceOf(1)}); err != nil || len(got) != 0 {
		t.Fatalf("another mount's lookup = %+v, %v", got, err)
	}

	for i, step := range []struct {
		name       string
		status     core.CommandStatus
		reason     string
		counter    uint64
		changed    bool
		wantStatus core.CommandStatus
		wantReason string
		// wantAt is the step whose instant StatusAt keeps (-1: t0).
		wantAt int
	}{
		{"first REFUSED decides", core.CommandRefused, "stale command", 50, true, core.CommandRefused, "stale command", 0},
		{"REFUSED of a higher counter: duplicate", core.CommandRefused, "later", 70, false, core.CommandRefused, "stale command", 0},
		{"REFUSED of the same counter: duplicate", core.CommandRefused, "stale command", 50, false, core.CommandRefused, "stale command", 0},
		{"REFUSED of a lower counter decides, status unchanged", core.CommandRefused, "replayed nonce", 30, true, core.CommandRefused, "replayed nonce", 0},
		{"EXECUTED overrides whatever its counter", core.CommandExecuted, "", 90, true, core.CommandExecuted, "", 4},
		{"a second EXECUTED: duplicate", core.CommandExecuted, "", 10, false, core.CommandExecuted, "", 4},
		{"REFUSED after EXECUTED: duplicate", core.CommandRefused, "x", 1, false, core.CommandExecuted, "", 4},
	} {
		at := t0.Add(time.Duration(i+1) * time.Second)
		typ := core.EventCommandRefused
		if step.status == core.CommandExecuted {
			typ = core.EventCommandExecuted
		}
		ev := &core.Event{Type: typ, UID: "RC", AccountID: a.AccountID, OccurredAt: at}
		c, changed, err := store.DecideCommand(ctx, core.CommandDecision{UID: "RC", AccountID: a.AccountID, ID: nonceOf(1),
			Status: step.status, Reason: step.reason, Counter: step.counter, Verified: true, At: at}, ev)
		if err != nil || changed != step.changed {
			t.Fatalf("%s: changed = %v, %v; want %v", step.name, changed, err, step.changed)
		}
		wantAt := t0.Add(time.Duration(step.wantAt+1) * time.Second)
		if c.Status != step.wantStatus || c.Reason != step.wantReason || !c.Verified || !c.StatusAt.Equal(wantAt) || c.ID != nonceOf(1) {
			t.Fatalf("%s: command %+v; want %s %q since %s", step.name, c, step.wantStatus, step.wantReason, wantAt)
		}
		if changed && (ev.Command == nil || ev.Command.Status != step.wantStatus || ev.Mount.UID != "RC" || ev.ID == (core.Cursor{})) {
			t.Fatalf("%s: event %+v", step.name, ev)
		}
	}
	// No such command for the account.
	if _, _, err := store.DecideCommand(ctx, core.CommandDecision{UID: "RC", AccountID: b.AccountID, ID: nonceOf(1),
		Status: core.CommandExecuted, At: t0}, nil); core.ErrorCode(err) != core.CodeCommandNotFound {
		t.Fatalf("another account's decision: %v", err)
	}

	// The log keeps the command with each event.
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: a.AccountID, Limit: 100,
		Types: []core.EventType{core.EventCommandExecuted, core.EventCommandRefused}})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range events {
		if e.Command == nil {
			t.Fatalf("event %s without its command", e.Type)
		}
		c := e.Command
		if c.ID != nonceOf(1) || c.MountUID != "RC" || c.Code != core.CmdReleaseHelmet || c.Payload != issued.Payload ||
			!c.ExpiresAt.Equal(issued.ExpiresAt) || !c.GeneratedAt.Equal(t0) || !c.Verified || c.Data["expiresAt"] == nil ||
			e.Mount.DevicePublicKey != key {
			t.Fatalf("stored event %s: command %+v, mount %+v", e.Type, c, e.Mount)
		}
		kinds = append(kinds, string(e.Type)+":"+string(c.Status)+":"+c.Reason)
	}
	want := []string{"COMMAND_REFUSED:REFUSED:stale command", "COMMAND_REFUSED:REFUSED:replayed nonce", "COMMAND_EXECUTED:EXECUTED:"}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	// The audit lists the lifecycle too.
	list, _, err := store.ListCommands(ctx, "RC", a.AccountID, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(list) != 3 {
		t.Fatalf("ListCommands = %+v, %v", list, err)
	}
	for _, c := range list {
		want := core.CommandIssued
		if c.ID == nonceOf(1) {
			want = core.CommandExecuted
		}
		if c.Status != want || c.ExpiresAt.IsZero() {
			t.Fatalf("listed %s: %+v", c.ID, c)
		}
	}
}

// unconfirmCommands: ISSUED commands past their expiry turn UNCONFIRMED
// once, with their event; others stay; a late receipt still moves an
// UNCONFIRMED command on.
func unconfirmCommands(t *testing.T, store Store) {
	ctx := context.Background()
	a, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "UC", AccountID: a.AccountID, Now: t0, Deadline: t0.Add(24 * time.Hour), Key: testKey()}, nil); err != nil {
		t.Fatal(err)
	}
	issueAt(t, store, "UC", a.AccountID, 1, t0, time.Minute)   // due at t0+1m
	issueAt(t, store, "UC", a.AccountID, 2, t0, 3*time.Minute) // due at t0+3m
	issueAt(t, store, "UC", a.AccountID, 3, t0, time.Minute)   // decided before its expiry
	if _, changed, err := store.DecideCommand(ctx, core.CommandDecision{UID: "UC", AccountID: a.AccountID, ID: nonceOf(3),
		Status: core.CommandExecuted, At: t0}, nil); err != nil || !changed {
		t.Fatal(changed, err)
	}
	sweep := func(now time.Time) []*core.Event {
		t.Helper()
		events, err := store.UnconfirmCommands(ctx, now, 100, unconfirmedEvent(now))
		if err != nil {
			t.Fatal(err)
		}
		return events
	}
	if got := sweep(t0.Add(time.Minute - time.Millisecond)); len(got) != 0 {
		t.Fatalf("before any expiry: %d events", len(got))
	}
	at := t0.Add(time.Minute)
	got := sweep(at)
	if len(got) != 1 || got[0].Command.ID != nonceOf(1) || got[0].Command.Status != core.CommandUnconfirmed ||
		!got[0].Command.StatusAt.Equal(at) || got[0].ID == (core.Cursor{}) || got[0].Mount.UID != "UC" ||
		got[0].Command.IssuedByName != testIssuerName {
		t.Fatalf("at the first expiry: %+v", got)
	}
	if got := sweep(at); len(got) != 0 {
		t.Fatalf("the second sweep turned %d again", len(got))
	}
	if got := sweep(t0.Add(time.Hour)); len(got) != 1 || got[0].Command.ID != nonceOf(2) {
		t.Fatalf("at the second expiry: %+v", got)
	}
	// A late receipt moves UNCONFIRMED on.
	c, changed, err := store.DecideCommand(ctx, core.CommandDecision{UID: "UC", AccountID: a.AccountID, ID: nonceOf(1),
		Status: core.CommandRefused, Reason: "stale command", Counter: 4, At: t0.Add(2 * time.Hour)}, nil)
	if err != nil || !changed || c.Status != core.CommandRefused || !c.StatusAt.Equal(t0.Add(2*time.Hour)) || c.Verified {
		t.Fatalf("late receipt: %+v, %v, %v", c, changed, err)
	}
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: a.AccountID, Types: []core.EventType{core.EventCommandUnconfirmed}, Limit: 100})
	if err != nil || len(events) != 2 || events[0].Command == nil || events[0].Command.Status != core.CommandUnconfirmed ||
		events[0].Command.IssuedByName != testIssuerName {
		t.Fatalf("UNCONFIRMED events in the log: %+v, %v", events, err)
	}

	// An ended association: abandoned, its command still turns with its
	// event; once another account owns the mount, without one (the event's
	// mount would show the new association to the former owner).
	t1 := t0.Add(3 * time.Hour)
	issueAt(t, store, "UC", a.AccountID, 4, t1, time.Minute)
	issueAt(t, store, "UC", a.AccountID, 5, t1, 2*time.Minute)
	if _, err := store.AbandonMount(ctx, "UC", a.AccountID, t1, nil); err != nil {
		t.Fatal(err)
	}
	if got := sweep(t1.Add(time.Minute)); len(got) != 1 || got[0].Command.ID != nonceOf(4) || got[0].ID == (core.Cursor{}) {
		t.Fatalf("abandoned mount's command: %+v", got)
	}
	b, err := core.NewAccountService(store, nil).Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	name := "B's scooter"
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "UC", AccountID: b.AccountID, Now: t1, Deadline: t1.Add(time.Hour), Key: testKey(),
		Fields: core.MountFields{Name: &name}}, nil); err != nil {
		t.Fatal(err)
	}
	got = sweep(t1.Add(2 * time.Minute))
	if len(got) != 1 || got[0].Command.ID != nonceOf(5) || got[0].Command.Status != core.CommandUnconfirmed || got[0].ID != (core.Cursor{}) {
		t.Fatalf("former owner's command after another claim: %+v", got)
	}
	if c, err := store.CommandsByID(ctx, "UC", a.AccountID, []string{nonceOf(5)}); err != nil || len(c) != 1 || c[0].Status != core.CommandUnconfirmed {
		t.Fatalf("turned without an event: %+v, %v", c, err)
	}
	unconfirmed := core.EventQuery{AccountID: a.AccountID, Types: []core.EventType{core.EventCommandUnconfirmed}, Limit: 100}
	WaitForEvents(t, store, unconfirmed, 3) // settled on a busy cluster
	events, _, err = store.ReadEvents(ctx, unconfirmed)
	if err != nil || len(events) != 3 {
		t.Fatalf("the former owner's UNCONFIRMED events: %d, %v; want 3", len(events), err)
	}
	for _, e := range events {
		if e.Mount.Name == name {
			t.Fatalf("an event showed the new owner's mount: %+v", e.Mount)
		}
	}
}

// concurrentSweeps: sweepers racing (replicas) turn each command once, one
// event per command.
func concurrentSweeps(t *testing.T, store Store) {
	ctx := context.Background()
	a, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "CS", AccountID: a.AccountID, Now: t0, Deadline: t0.Add(time.Hour), Key: testKey()}, nil); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		issueAt(t, store, "CS", a.AccountID, i, t0, time.Duration(i)*time.Millisecond)
	}
	now := t0.Add(time.Minute)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		turns = map[string]int{}
	)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				// Small batches, so the sweepers overlap on the same rows.
				events, err := store.UnconfirmCommands(ctx, now, 7, unconfirmedEvent(now))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range events {
					turns[e.Command.ID]++
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
		t.Fatalf("%d commands turned, want %d", len(turns), n)
	}
	for id, k := range turns {
		if k != 1 {
			t.Fatalf("command %s turned %d times", id, k)
		}
	}
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: a.AccountID, Types: []core.EventType{core.EventCommandUnconfirmed}, Limit: 1000})
	if err != nil || len(events) != n {
		t.Fatalf("%d UNCONFIRMED events in the log, want %d (%v)", len(events), n, err)
	}
}

// signedReports: InsertReport's check sees the row and stops the report
// (nothing stored); the signed revision becomes the mount's; verified
// entries are stored, listed, exported, kept as latest and carried by the
// event; a signed entry equal to a stored unverified one is a duplicate.
func signedReports(t *testing.T, store Store) {
	ctx := context.Background()
	a, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := testDeviceKey
	rev := "1.0.0"
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "SR", AccountID: a.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: testKey(), Fields: core.MountFields{DevicePublicKey: &key, SoftwareRevision: &rev}}, nil); err != nil {
		t.Fatal(err)
	}
	entry := func(code core.StateCode, value string, d time.Duration, verified bool) core.StateEntry {
		return core.StateEntry{Code: code, Value: value, OccurredAt: now.Add(-time.Hour + d), ReceivedAt: now, Verified: verified}
	}
	report := func(uid string) *core.Event {
		return &core.Event{Type: core.EventStatesReported, UID: uid, AccountID: a.AccountID, OccurredAt: now}
	}
	// The check refuses: nothing stored, the revision unchanged.
	var seen core.Mount
	refuse := core.ReportCheck{SoftwareRevision: "9.9.9", Check: func(m core.Mount) error {
		seen = m
		return core.Errorf(core.CodeSignatureRequired, "no")
	}}
	if _, _, err := store.InsertReport(ctx, "SR", a.AccountID, []core.StateEntry{entry(core.StateBatteryLevel, "50", 0, true)}, refuse, report("SR")); core.ErrorCode(err) != core.CodeSignatureRequired {
		t.Fatalf("refused report: %v", err)
	}
	if seen.UID != "SR" || seen.DevicePublicKey != key || seen.OwnerID != a.AccountID {
		t.Fatalf("the check saw %+v", seen)
	}
	if _, total, err := store.ListStates(ctx, "SR", a.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 0 {
		t.Fatalf("a refused report stored %d entries (%v)", total, err)
	}
	if m, err := store.Mount(ctx, "SR"); err != nil || m.SoftwareRevision != "1.0.0" {
		t.Fatalf("a refused report moved the revision: %+v, %v", m, err)
	}
	// Unsigned first, then a signed report repeating one entry.
	if _, stored, err := store.InsertStates(ctx, "SR", a.AccountID, []core.StateEntry{entry(core.StateBatteryLevel, "50", 0, false)}, report("SR")); err != nil || len(stored) != 1 {
		t.Fatalf("unsigned report: %v %v", stored, err)
	}
	ev := report("SR")
	m, stored, err := store.InsertReport(ctx, "SR", a.AccountID, []core.StateEntry{
		entry(core.StateBatteryLevel, "50", 0, true),
		entry(core.StateBatteryLevel, "40", time.Minute, true),
		entry(core.StateMountLocked, "1", time.Minute, true),
	}, core.ReportCheck{SoftwareRevision: "1.1.0", Counter: new(uint64(1)), Check: func(core.Mount) error { return nil }}, ev)
	if err != nil || len(stored) != 2 {
		t.Fatalf("signed report stored %v, %v; want 2 (one duplicate)", stored, err)
	}
	for _, e := range stored {
		if !e.Verified {
			t.Fatalf("signed entry stored unverified: %+v", e)
		}
	}
	if m.SoftwareRevision != "1.1.0" || ev.Mount.SoftwareRevision != "1.1.0" {
		t.Fatalf("signed revision: mount %q, event's %q", m.SoftwareRevision, ev.Mount.SoftwareRevision)
	}
	if got, err := store.Mount(ctx, "SR"); err != nil || got.SoftwareRevision != "1.1.0" {
		t.Fatalf("stored revision %+v, %v", got, err)
	}
	if len(ev.States) != 2 || !ev.States[0].Verified || !ev.States[1].Verified {
		t.Fatalf("event states %+v", ev.States)
	}
	if !ev.Mount.Latest.Verified[core.StateBatteryLevel] || !ev.Mount.Latest.Verified[core.StateMountLocked] {
		t.Fatalf("event's latest %+v", ev.Mount.Latest)
	}
	history, _, err := store.ListStates(ctx, "SR", a.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(history) != 3 {
		t.Fatal(history, err)
	}
	verified := map[string]bool{}
	for _, e := range history {
		verified[e.Value] = e.Verified
	}
	if verified["50"] || !verified["40"] || !verified["1"] {
		t.Fatalf("history's verified: %v (the repeated entry stays unverified)", verified)
	}
	latest, err := store.LatestStates(ctx, "SR", a.AccountID)
	if err != nil || len(latest) != 2 || !latest[0].Verified || !latest[1].Verified {
		t.Fatalf("latest %+v, %v", latest, err)
	}
	if got, err := store.MountWithLatest(ctx, "SR"); err != nil || !got.Latest.Verified[core.StateBatteryLevel] {
		t.Fatalf("MountWithLatest %+v, %v", got.Latest, err)
	}
	list, _, err := store.ListMounts(ctx, a.AccountID, core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 10}, now)
	if err != nil || len(list) != 1 || !list[0].Latest.Verified[core.StateMountLocked] {
		t.Fatalf("ListMounts latest %+v, %v", list, err)
	}
	exported := map[string]bool{}
	if err := store.EachState(ctx, "SR", a.AccountID, core.StateFilter{}, func(e core.StateEntry) error {
		exported[e.Value] = e.Verified
		return nil
	}); err != nil || fmt.Sprint(exported) != fmt.Sprint(verified) {
		t.Fatalf("exported %v, want %v (%v)", exported, verified, err)
	}
	if err := store.EachMount(ctx, a.AccountID, core.MountFilter{}, now, func(m core.Mount) error {
		if m.DevicePublicKey != key || !m.Latest.Verified[core.StateBatteryLevel] {
			return fmt.Errorf("exported mount %+v", m)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: a.AccountID, Types: []core.EventType{core.EventStatesReported}, Limit: 10})
	if err != nil || len(events) != 2 || events[0].States[0].Verified || !events[1].States[0].Verified ||
		!events[1].Mount.Latest.Verified[core.StateBatteryLevel] {
		t.Fatalf("stored report events %+v, %v", events, err)
	}
}
