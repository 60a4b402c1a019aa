package storetest

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// makeAccounts creates accounts with these ids.
func makeAccounts(t *testing.T, store Store, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if err := store.CreateAccount(context.Background(), core.Account{ID: id, Name: id, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)},
			core.APIClient{ClientID: "cli_" + id, AccountID: id, SecretHash: "x", CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}); err != nil {
			t.Fatalf("CreateAccount %s: %v", id, err)
		}
	}
}

// readAll reads the whole log as one account sees it.
func readAll(t *testing.T, store Store, q core.EventQuery) []core.Event {
	t.Helper()
	q.Limit = core.MaxEventPage
	// On PostgreSQL an event shows once every older transaction of the
	// cluster has ended, a moment after its commit on a cluster busy with
	// other tests: read until two reads 50 ms apart agree (at most 2 s).
	last := -1
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		events, _, err := store.ReadEvents(context.Background(), q)
		if err != nil {
			t.Fatalf("ReadEvents: %v", err)
		}
		if len(events) == last || time.Now().After(deadline) {
			return events
		}
		last = len(events)
	}
}

// WaitForEvents waits until the event log shows at least n events that q
// selects (its Limit aside). On
// PostgreSQL an event shows once every older transaction of the cluster
// has ended, which on a busy cluster (other tests' stores beside this
// one) takes a moment after its own commit: a test that reads the log
// right after writing it waits here first.
func WaitForEvents(t testing.TB, store core.EventLog, q core.EventQuery, n int) {
	t.Helper()
	q.Limit = n
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		events, _, err := store.ReadEvents(context.Background(), q)
		if err != nil {
			t.Fatalf("ReadEvents: %v", err)
		}
		if len(events) >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events readable after 30 s", len(events), n)
		}
	}
}

// eventLog: each change given an event appends it in its own transaction,
// only when the change happens, completed with its position and the mount
// as the change left it; reads select, page and bound as the port says.
func eventLog(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	ev := func(ty core.EventType, uid, account string) *core.Event {
		return &core.Event{Type: ty, UID: uid, AccountID: account, OccurredAt: now}
	}
	makeAccounts(t, store, "acc_a", "acc_b")
	_, head, err := store.ReadEvents(ctx, core.EventQuery{})
	if err != nil {
		t.Fatalf("head of an empty log: %v", err)
	}

	claim := ev(core.EventAssociationRequested, "E1", "acc_a")
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "E1", AccountID: "acc_a", Now: now, Deadline: now.Add(time.Hour), Key: key}, claim); err != nil {
		t.Fatal(err)
	}
	if !head.Before(claim.ID) || claim.Mount.UID != "E1" || claim.Mount.State != core.StateIdle || claim.Mount.Key.ID != "" {
		t.Fatalf("the claim's event: id %v after head %v, mount %+v (no key material)", claim.ID, head, claim.Mount)
	}
	// A change refused appends nothing.
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "E1", AccountID: "acc_b", Now: now, Deadline: now.Add(time.Hour), Key: key},
		ev(core.EventAssociationRequested, "E1", "acc_b")); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("a claim of another's mount: %v", err)
	}
	if _, ok, err := store.ConfirmAssociation(ctx, "E1", "acc_b", now, ev(core.EventAssociationConfirmed, "E1", "acc_b")); ok || err != nil {
		t.Fatalf("another account's confirm: ok %v, %v", ok, err)
	}
	confirm := ev(core.EventAssociationConfirmed, "E1", "acc_a")
	if _, ok, err := store.ConfirmAssociation(ctx, "E1", "acc_a", now, confirm); !ok || err != nil {
		t.Fatalf("confirm: ok %v, %v", ok, err)
	}
	entries := []core.StateEntry{{Code: core.StateBatteryLevel, Value: "77", OccurredAt: now, ReceivedAt: now}}
	report := ev(core.EventStatesReported, "E1", "acc_a")
	if _, _, err := store.InsertStates(ctx, "E1", "acc_a", entries, report); err != nil {
		t.Fatal(err)
	}
	dup := ev(core.EventStatesReported, "E1", "acc_a")
	if _, accepted, err := store.InsertStates(ctx, "E1", "acc_a", entries, dup); err != nil || len(accepted) != 0 {
		t.Fatalf("a duplicate report: %d accepted, %v", len(accepted), err)
	}
	if (dup.ID != core.Cursor{}) {
		t.Fatalf("a report with nothing new appended an event at %v", dup.ID)
	}
	if b := report.Mount.Latest.BatteryLevel; b == nil || *b != 77 || len(report.States) != 1 {
		t.Fatalf("the report's event: latest battery %v, states %+v", b, report.States)
	}
	sync := ev(core.EventNfcTagsSynced, "E1", "acc_a")
	if _, _, err := store.SyncTags(ctx, "acc_a", "E1", []string{"04A1B2C3"}, now, sync); err != nil {
		t.Fatal(err)
	}
	issued := ev(core.EventCommandIssued, "E1", "acc_a")
	if err := store.InsertCommand(ctx, core.Command{ID: "cmd_e1", MountUID: "E1", AccountID: "acc_a", Code: core.CmdReleaseHelmet,
		Payload: "p", GeneratedAt: now, Data: map[string]any{}}, issued); err != nil {
		t.Fatal(err)
	}
	abandon := ev(core.EventAbandoned, "E1", "acc_a")
	if _, err := store.AbandonMount(ctx, "E1", "acc_a", now, abandon); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "E2", AccountID: "acc_b", Now: now, Deadline: now, Key: key},
		ev(core.EventAssociationRequested, "E2", "acc_b")); err != nil {
		t.Fatal(err)
	}
	expire := &core.Event{Type: core.EventAssociationExpired, UID: "E2", OccurredAt: now}
	if _, ok, err := store.ExpireAssociation(ctx, "E2", now, expire); !ok || err != nil || expire.AccountID != "acc_b" {
		t.Fatalf("expire: ok %v, %v, the event's account %q", ok, err, expire.AccountID)
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "E3", AccountID: "acc_a", Now: now, Deadline: now.Add(time.Hour), Key: key}, nil); err != nil {
		t.Fatal(err)
	}
	del := ev(core.EventDeleted, "E3", "acc_a")
	if _, err := store.DeleteMount(ctx, "E3", "acc_a", del); err != nil {
		t.Fatal(err)
	}

	got := readAll(t, store, core.EventQuery{AccountID: "acc_a"})
	want := []*core.Event{claim, confirm, report, sync, issued, abandon, del}
	if len(got) != len(want) {
		t.Fatalf("acc_a's log holds %d events, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.Type != w.Type || g.UID != w.UID || g.AccountID != "acc_a" || !g.OccurredAt.Equal(now) {
			t.Errorf("event %d = %v %s %s %s, want %v %s %s", i, g.ID, g.Type, g.UID, g.AccountID, w.ID, w.Type, w.UID)
		}
		if i > 0 && !got[i-1].ID.Before(g.ID) {
			t.Errorf("event %d is not after event %d", i, i-1)
		}
		if g.Mount.UID != w.UID || g.Mount.State != w.Mount.State {
			t.Errorf("event %d's mount = %s %s, want %s %s", i, g.Mount.UID, g.Mount.State, w.UID, w.Mount.State)
		}
	}
	if g := got[2]; len(g.States) != 1 || g.States[0].Value != "77" || g.Mount.Latest.BatteryLevel == nil {
		t.Errorf("the stored report: states %+v, latest %+v", g.States, g.Mount.Latest)
	}
	if g := got[5]; g.Mount.State != core.StateInactive || g.Mount.OwnerID != "" {
		t.Errorf("the stored abandon: mount %+v", g.Mount)
	}

	for _, tc := range []struct {
		name string
		q    core.EventQuery
		want []core.EventType
	}{
		{"another account", core.EventQuery{AccountID: "acc_b"}, []core.EventType{core.EventAssociationRequested, core.EventAssociationExpired}},
		{"by type", core.EventQuery{AccountID: "acc_a", Types: []core.EventType{core.EventAbandoned, core.EventDeleted}},
			[]core.EventType{core.EventAbandoned, core.EventDeleted}},
		{"by mount", core.EventQuery{AccountID: "acc_a", MountUIDs: []string{"E3"}}, []core.EventType{core.EventDeleted}},
		{"no mount", core.EventQuery{AccountID: "acc_a", MountUIDs: []string{}}, nil},
		{"after", core.EventQuery{AccountID: "acc_a", After: &abandon.ID}, []core.EventType{core.EventDeleted}},
		{"every account", core.EventQuery{After: &abandon.ID}, []core.EventType{core.EventAssociationRequested, core.EventAssociationExpired, core.EventDeleted}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var types []core.EventType
			for _, e := range readAll(t, store, tc.q) {
				types = append(types, e.Type)
			}
			if !slices.Equal(types, tc.want) {
				t.Fatalf("types %v, want %v", types, tc.want)
			}
		})
	}

	// Paging: a full page ends at its last event; a short one at the head,
	// past every event, and never before the cursor given.
	page, next, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", Limit: 3})
	if err != nil || len(page) != 3 || next != page[2].ID {
		t.Fatalf("a full page: %d events, next %v, %v", len(page), next, err)
	}
	page, next, err = store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", After: &next, Limit: 10})
	if err != nil || len(page) != 4 || next.Before(del.ID) {
		t.Fatalf("the rest: %d events, next %v (last event %v), %v", len(page), next, del.ID, err)
	}
	page, again, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", After: &next, Limit: 10})
	if err != nil || len(page) != 0 || again.Before(next) {
		t.Fatalf("after the end: %d events, next %v before %v, %v", len(page), again, next, err)
	}
	// Tail: the last Limit settled events selected, in log order.
	tail, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", Limit: 2, Tail: true})
	if err != nil || len(tail) != 2 || tail[0].ID != abandon.ID || tail[1].ID != del.ID {
		t.Fatalf("the last 2: %+v, %v; want the abandon and the delete", tail, err)
	}
	tail, _, err = store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", Limit: 2, Tail: true, MountUIDs: []string{"E1"},
		Types: []core.EventType{core.EventStatesReported, core.EventNfcTagsSynced, core.EventAssociationConfirmed}})
	if err != nil || len(tail) != 2 || tail[0].ID != report.ID || tail[1].ID != sync.ID || len(tail[0].States) != 1 {
		t.Fatalf("the last 2 selected: %+v, %v; want the report and the sync", tail, err)
	}
	if tail, _, err = store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", Limit: 100, Tail: true}); err != nil || len(tail) != len(want) || tail[0].ID != claim.ID {
		t.Fatalf("a tail longer than the log: %d events, %v", len(tail), err)
	}
	if tail, _, err = store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_b", Limit: 1, Tail: true}); err != nil || len(tail) != 1 || tail[0].Type != core.EventAssociationExpired {
		t.Fatalf("acc_b's last: %+v, %v", tail, err)
	}
	// A cursor past the log's end was never handed out: refused, so that
	// no reader (nor an idle feed) waits for positions that never come.
	for _, far := range []core.Cursor{{Tx: again.Tx, Seq: again.Seq + 1}, {Tx: again.Tx + 1}, {Tx: math.MaxUint64 >> 1, Seq: math.MaxInt64}} {
		if !again.Before(far) {
			continue // again.Seq is already the largest of its Tx
		}
		page, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_a", After: &far, Limit: 10})
		if far.Tx == again.Tx+1 && err == nil && len(page) == 0 {
			// On a PostgreSQL cluster shared with other databases (make
			// test's), their transactions may have moved the log's end
			// past this one meanwhile: then it is a fair, empty cursor.
			continue
		}
		if core.ErrorCode(err) != core.CodeValidation {
			t.Errorf("after %v, past the end %v: %v, want VALIDATION_FAILED", far, again, err)
		}
	}
}

// eventRetention: pruning deletes the oldest events past retention; a
// cursor before the newest pruned one is CURSOR_EXPIRED, one after it is
// not.
func eventRetention(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	makeAccounts(t, store, "acc_a")
	var ids []core.Cursor
	for i, at := range []time.Time{now.Add(-3 * time.Hour), now.Add(-2 * time.Hour), now} {
		e := &core.Event{Type: core.EventAssociationRequested, UID: "T1", AccountID: "acc_a", OccurredAt: at}
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "T1", AccountID: "acc_a", Now: at, Deadline: now.Add(time.Hour), Key: key}, e); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		ids = append(ids, e.ID)
	}
	_, head, err := store.ReadEvents(ctx, core.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := store.PruneEvents(ctx, now.Add(-time.Hour), 1); err != nil || n != 1 {
		t.Fatalf("prune one: %d, %v", n, err)
	}
	if n, err := store.PruneEvents(ctx, now.Add(-time.Hour), 100); err != nil || n != 1 {
		t.Fatalf("prune the rest: %d, %v", n, err)
	}
	if n, err := store.PruneEvents(ctx, now.Add(-time.Hour), 100); err != nil || n != 0 {
		t.Fatalf("prune again: %d, %v", n, err)
	}
	var zero core.Cursor
	for _, c := range []core.Cursor{zero, ids[0]} {
		if _, _, err := store.ReadEvents(ctx, core.EventQuery{After: &c, Limit: 10}); core.ErrorCode(err) != core.CodeCursorExpired {
			t.Errorf("after %v: %v, want CURSOR_EXPIRED", c, err)
		}
	}
	for _, c := range []core.Cursor{ids[1], head} {
		if _, _, err := store.ReadEvents(ctx, core.EventQuery{After: &c, Limit: 10}); err != nil {
			t.Errorf("after %v: %v", c, err)
		}
	}
	// The retained event shows once every older transaction of the
	// cluster has ended (a busy cluster: other tests' stores).
	WaitForEvents(t, store, core.EventQuery{}, 1)
	if got := readAll(t, store, core.EventQuery{}); len(got) != 1 || got[0].ID != ids[2] {
		t.Fatalf("retained: %+v", got)
	}
}

// claimAt claims uid for account at `at` (its window open an hour from
// now) with an ASSOCIATION_REQUESTED event, and returns its position.
func claimAt(t *testing.T, store Store, account, uid string, at time.Time) core.Cursor {
	t.Helper()
	deadline := time.Now().Add(time.Hour)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	e := &core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: account, OccurredAt: at}
	if _, err := store.ClaimMount(context.Background(), core.Claim{UID: uid, AccountID: account, Now: at, Deadline: deadline, Key: key}, e); err != nil {
		t.Fatalf("claim %s: %v", uid, err)
	}
	return e.ID
}

// pruneAll prunes every event created before before.
func pruneAll(t *testing.T, store Store, before time.Time) {
	t.Helper()
	for {
		n, err := store.PruneEvents(context.Background(), before, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
	}
}

// eventAccountHorizons: for one account's reads, expiry is decided by that
// account's pruned events only: another account's, however many and old,
// neither expire its cursors nor show through AccountHorizon.
func eventAccountHorizons(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	makeAccounts(t, store, "hz_a", "hz_b", "hz_c")
	b1 := claimAt(t, store, "hz_b", "HB1", now.Add(-3*time.Hour))
	a1 := claimAt(t, store, "hz_a", "HA1", now.Add(-2*time.Hour))
	a2 := claimAt(t, store, "hz_a", "HA2", now)
	WaitForEvents(t, store, core.EventQuery{}, 3) // they are pruned only once readable
	pruneAll(t, store, now.Add(-time.Hour))
	var zero core.Cursor
	for _, tc := range []struct {
		name    string
		account string
		after   core.Cursor
		expired bool
	}{
		{"a, from the start", "hz_a", zero, true},
		{"a, at its pruned event", "hz_a", a1, false},
		{"b, from the start", "hz_b", zero, true},
		{"b, at its pruned event", "hz_b", b1, false},
		{"c, without events, from the start", "hz_c", zero, false},
	} {
		_, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: tc.account, After: &tc.after, Limit: 10})
		if got := core.ErrorCode(err) == core.CodeCursorExpired; got != tc.expired || !tc.expired && err != nil {
			t.Errorf("%s: %v, want expired %v", tc.name, err, tc.expired)
		}
	}
	for account, want := range map[string]core.Cursor{"hz_a": a1, "hz_b": b1, "hz_c": zero} {
		if got, err := store.AccountHorizon(ctx, account); err != nil || got != want {
			t.Errorf("AccountHorizon(%s) = %v, %v; want %v", account, got, err, want)
		}
	}
	if got := readAll(t, store, core.EventQuery{AccountID: "hz_a"}); len(got) != 1 || got[0].ID != a2 {
		t.Fatalf("retained: %+v", got)
	}
}

// eventAccountHead: an account's head is its newest settled event, moved
// by its own events only (never by another account's); with every event
// pruned, its horizon; the zero cursor for an account without any.
// Reading on from it is valid.
func eventAccountHead(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	makeAccounts(t, store, "hd_a", "hd_b", "hd_c")
	head := func(account string, want core.Cursor) {
		t.Helper()
		got, err := store.AccountHead(ctx, account)
		if err != nil || got != want {
			t.Fatalf("AccountHead(%s) = %v, %v; want %v", account, got, err, want)
		}
		if _, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: account, After: &got, Limit: 10}); err != nil {
			t.Fatalf("reading on from %s's head: %v", account, err)
		}
	}
	var zero core.Cursor
	head("hd_a", zero)
	a1 := claimAt(t, store, "hd_a", "HDA1", now.Add(-3*time.Hour))
	WaitForEvents(t, store, core.EventQuery{AccountID: "hd_a"}, 1)
	head("hd_a", a1)
	a2 := claimAt(t, store, "hd_a", "HDA2", now.Add(-2*time.Hour))
	claimAt(t, store, "hd_b", "HDB1", now)
	claimAt(t, store, "hd_b", "HDB2", now)
	WaitForEvents(t, store, core.EventQuery{}, 4)
	head("hd_a", a2)
	head("hd_c", zero)
	// Retention takes A's events: its head stays where they ended.
	pruneAll(t, store, now.Add(-time.Hour))
	if got := readAll(t, store, core.EventQuery{AccountID: "hd_a"}); len(got) != 0 {
		t.Fatalf("A's events after pruning: %+v", got)
	}
	head("hd_a", a2)
	claimAt(t, store, "hd_b", "HDB3", now)
	WaitForEvents(t, store, core.EventQuery{AccountID: "hd_b"}, 3)
	head("hd_a", a2)
	head("hd_c", zero)
}

// eventAccountNewest: an account's newest position is its newest
// committed event as soon as the append returns, before it has settled
// (no wait for the log here), moved by its own events only; never before
// its head; with every event pruned, its horizon; the zero cursor for an
// account without any.
func eventAccountNewest(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	makeAccounts(t, store, "nw_a", "nw_b", "nw_c")
	newest := func(account string, want core.Cursor) {
		t.Helper()
		got, err := store.AccountNewest(ctx, account)
		if err != nil || got != want {
			t.Fatalf("AccountNewest(%s) = %v, %v; want %v", account, got, err, want)
		}
		if head, err := store.AccountHead(ctx, account); err != nil || got.Before(head) {
			t.Fatalf("AccountHead(%s) = %v, %v: after the newest, %v", account, head, err, got)
		}
	}
	var zero core.Cursor
	newest("nw_a", zero)
	a1 := claimAt(t, store, "nw_a", "NWA1", now.Add(-3*time.Hour))
	newest("nw_a", a1)
	a2 := claimAt(t, store, "nw_a", "NWA2", now.Add(-2*time.Hour))
	newest("nw_a", a2)
	b1 := claimAt(t, store, "nw_b", "NWB1", now)
	newest("nw_a", a2)
	newest("nw_b", b1)
	newest("nw_c", zero)
	WaitForEvents(t, store, core.EventQuery{}, 3) // they are pruned only once readable
	pruneAll(t, store, now.Add(-time.Hour))
	newest("nw_a", a2)
	newest("nw_b", b1)
}

// claimCommand: a claim given a command stores it in the claim's
// transaction, on the insert of a new mount and on the update of a known
// one; a refused claim stores none.
func claimCommand(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	makeAccounts(t, store, "acc_a", "acc_b")
	cmd := func(id, account string) *core.Command {
		return &core.Command{ID: id, MountUID: "C1", AccountID: account, Code: core.CmdAssociateOwner,
			Params: map[string]string{"accountId": account}, Data: map[string]any{"accountId": account},
			GeneratedAt: now, Payload: "p-" + id, IssuedBy: "client"}
	}
	commands := func(account string) []string {
		t.Helper()
		list, _, err := store.ListCommands(ctx, "C1", account, core.Page{CurrentPage: 1, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, c := range list {
			ids = append(ids, c.ID)
		}
		return ids
	}
	claim := func(account, id string) error {
		_, err := store.ClaimMount(ctx, core.Claim{UID: "C1", AccountID: account, Now: now, Deadline: now.Add(time.Hour),
			Key: key, Command: cmd(id, account)}, &core.Event{Type: core.EventAssociationRequested, UID: "C1", AccountID: account, OccurredAt: now})
		return err
	}
	if err := claim("acc_a", "cmd_new"); err != nil {
		t.Fatal(err)
	}
	if got := commands("acc_a"); len(got) != 1 || got[0] != "cmd_new" {
		t.Fatalf("after the claim of a new mount: commands %v, want [cmd_new]", got)
	}
	if err := claim("acc_b", "cmd_refused"); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("another account's claim: %v", err)
	}
	if got := commands("acc_b"); len(got) != 0 {
		t.Fatalf("a refused claim stored commands %v", got)
	}
	if err := claim("acc_a", "cmd_again"); err != nil {
		t.Fatal(err)
	}
	if got := commands("acc_a"); len(got) != 2 {
		t.Fatalf("after the owner's second claim: commands %v, want two", got)
	}
}

// claimLapsed: a claim of a mount whose IDLE window has lapsed is refused,
// even by its owner, and stores nothing; once expired, it is claimed.
func claimLapsed(t *testing.T, store Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	makeAccounts(t, store, "acc_a", "acc_b")
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "L1", AccountID: "acc_a", Now: now, Deadline: now.Add(time.Minute), Key: key}, nil); err != nil {
		t.Fatal(err)
	}
	later := now.Add(time.Minute)
	for _, account := range []string{"acc_a", "acc_b"} {
		e := &core.Event{Type: core.EventAssociationRequested, UID: "L1", AccountID: account, OccurredAt: later}
		_, err := store.ClaimMount(ctx, core.Claim{UID: "L1", AccountID: account, Now: later, Deadline: later.Add(time.Minute), Key: key}, e)
		if core.ErrorCode(err) != core.CodeMountAlreadyOwned {
			t.Fatalf("%s's claim of a lapsed mount: %v, want MOUNT_ALREADY_OWNED", account, err)
		}
		if (e.ID != core.Cursor{}) {
			t.Fatalf("%s's refused claim appended an event", account)
		}
	}
	if _, ok, err := store.ExpireAssociation(ctx, "L1", later, nil); !ok || err != nil {
		t.Fatalf("expire: %v, %v", ok, err)
	}
	m, err := store.ClaimMount(ctx, core.Claim{UID: "L1", AccountID: "acc_b", Now: later, Deadline: later.Add(time.Minute), Key: key}, nil)
	if err != nil || m.OwnerID != "acc_b" || m.State != core.StateIdle {
		t.Fatalf("claim after expiry: %+v, %v", m, err)
	}
}
