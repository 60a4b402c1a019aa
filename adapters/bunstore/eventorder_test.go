package bunstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/core"
)

// TestEventLogNeverSkipsALateCommit forces, on PostgreSQL, the commit
// orders that make a log read by id skip events: two transactions append,
// the one holding the higher id (or the older transaction id) commits
// first, a reader reads, then the other commits. Every reader that resumes
// from the cursor it was given must still see the late event, once.
func TestEventLogNeverSkipsALateCommit(t *testing.T) {
	// PostgreSQL only: SQLite has one writer at a time, so commit order is
	// id order there.
	store, raw := openPostgres(t)
	ctx := context.Background()
	appendRaw := func(tx *sql.Tx, uid string) {
		t.Helper()
		if _, err := tx.ExecContext(ctx, `INSERT INTO events (account_id, type, mount_uid, occurred_at, body)
			VALUES ('acc_o', 'STATES_REPORTED', $1, 0, '{"mount":{"uid":"x"}}')`, uid); err != nil {
			t.Fatal(err)
		}
	}
	begin := func() *sql.Tx {
		t.Helper()
		tx, err := raw.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	read := func(after core.Cursor) ([]string, core.Cursor) {
		t.Helper()
		events, next, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_o", After: &after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var uids []string
		for _, e := range events {
			uids = append(uids, e.UID)
		}
		return uids, next
	}

	for _, tc := range []struct {
		name string
		// run takes the two transactions up to the first commit and
		// returns the one still open.
		run func() (late *sql.Tx)
	}{
		{"the lower id commits last", func() *sql.Tx {
			a, b := begin(), begin()
			appendRaw(a, "late")  // takes the lower id
			appendRaw(b, "early") // takes the higher id
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			return a
		}},
		{"the older transaction takes the higher id and commits first", func() *sql.Tx {
			b, a := begin(), begin()
			// b gets its transaction id first, a takes the lower event id.
			if _, err := b.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
			appendRaw(a, "late")
			appendRaw(b, "early")
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, start, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_o"})
			if err != nil {
				t.Fatal(err)
			}
			late := tc.run()
			seen, next := read(start)
			if err := late.Commit(); err != nil {
				t.Fatal(err)
			}
			more, _ := read(next)
			seen = append(seen, more...)
			if len(seen) != 2 || seen[0] == seen[1] {
				t.Fatalf("a reader resuming from its cursors saw %v, want early and late once each", seen)
			}
		})
	}
}

// TestEventLogOrdersTransactionIDsAsNumbers: positions order by the
// transaction id as a number. Read as text, 1001 sorts before 999 (a
// fault seen when a feed read crossed 1000); the test burns transaction
// ids up to just below a power of ten and appends events across it.
func TestEventLogOrdersTransactionIDsAsNumbers(t *testing.T) {
	store, raw := openPostgres(t)
	ctx := context.Background()
	current := func() uint64 {
		var s string
		if err := raw.QueryRowContext(ctx, `SELECT pg_current_xact_id()::text`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.ParseUint(s, 10, 64)
		return n
	}
	x := current()
	power := uint64(10)
	for power <= x+20 {
		power *= 10
	}
	if power-x > 200_000 {
		t.Skipf("transaction id %d is too far below %d to burn up to it", x, power)
	}
	// Each loop iteration commits, so each takes a transaction id of its own.
	if _, err := raw.ExecContext(ctx, fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`,
		power-x-10)); err != nil {
		t.Fatal(err)
	}
	var appended []core.Cursor
	for i := 0; i < 40 && (len(appended) == 0 || appended[len(appended)-1].Tx < power+2); i++ {
		var tx, id string
		if err := raw.QueryRowContext(ctx, `INSERT INTO events (account_id, type, mount_uid, occurred_at, body)
			VALUES ('acc_n', 'DELETED', 'N1', 0, '{"mount":{"uid":"N1"}}') RETURNING tx::text, id::text`).Scan(&tx, &id); err != nil {
			t.Fatal(err)
		}
		txn, _ := strconv.ParseUint(tx, 10, 64)
		idn, _ := strconv.ParseInt(id, 10, 64)
		appended = append(appended, core.Cursor{Tx: txn, Seq: idn})
	}
	if appended[0].Tx >= power || appended[len(appended)-1].Tx < power {
		t.Skipf("the events did not straddle %d (%v … %v): other transactions ran meanwhile", power, appended[0], appended[len(appended)-1])
	}
	events, _, err := store.ReadEvents(ctx, core.EventQuery{AccountID: "acc_n", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != len(appended) {
		t.Fatalf("read %d events, appended %d", len(events), len(appended))
	}
	for i, e := range events {
		if e.ID != appended[i] {
			t.Fatalf("event %d is %v, want %v (in the order appended)", i, e.ID, appended[i])
		}
	}
}

// TestHeadWaitsForAnOlderTransaction: on PostgreSQL a transaction of the
// cluster still open, however unrelated, keeps the events committed after
// it began unsettled. The account's head (GraphQL eventCursor) waits for
// it: it is the account's event committed meanwhile as soon as the older
// transaction commits, and the settled head before it while that
// transaction outlives core.SettleWait, never the unsettled event.
func TestHeadWaitsForAnOlderTransaction(t *testing.T) {
	store, raw := openPostgres(t)
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	events := core.NewEventService(core.NewEventFeed(store, nil, logger), store, nil, logger)
	appendEvent := func(account string) core.Cursor {
		t.Helper()
		var tx, id string
		if err := raw.QueryRowContext(ctx, `INSERT INTO events (account_id, type, mount_uid, occurred_at, body)
			VALUES ($1, 'STATES_REPORTED', 'W1', 0, '{"mount":{"uid":"W1"}}') RETURNING tx::text, id::text`, account).Scan(&tx, &id); err != nil {
			t.Fatal(err)
		}
		txn, _ := strconv.ParseUint(tx, 10, 64)
		idn, _ := strconv.ParseInt(id, 10, 64)
		return core.Cursor{Tx: txn, Seq: idn}
	}
	for _, tc := range []struct {
		name string
		// commitsWhileWaiting: the older transaction commits when the head
		// first finds the event unsettled; otherwise it stays open past
		// the bound.
		commitsWhileWaiting bool
	}{
		{"the older transaction commits", true},
		{"the older transaction outlives the bound", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := core.Principal{AccountID: "acc_" + strconv.FormatBool(tc.commitsWhileWaiting),
				Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
			earlier := appendEvent(p.AccountID)
			events.SetClock(time.Now, func(_ context.Context, d time.Duration) error { time.Sleep(d); return nil })
			if head, err := events.Head(ctx, p); err != nil || head != earlier {
				t.Fatalf("head before the older transaction: %v, %v; want %v", head, err, earlier)
			}
			older, err := raw.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = older.Rollback() }()
			// A transaction id makes it hold back the settled head, as a
			// write would.
			if _, err := older.ExecContext(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
			event := appendEvent(p.AccountID)
			waited := 0
			if tc.commitsWhileWaiting {
				events.SetClock(time.Now, func(_ context.Context, d time.Duration) error {
					if waited++; waited == 1 {
						if err := older.Commit(); err != nil {
							t.Error(err)
						}
					}
					time.Sleep(d)
					return nil
				})
			} else {
				clock := porttest.NewClock()
				events.SetClock(clock.Now, func(_ context.Context, d time.Duration) error {
					waited++
					clock.Advance(d)
					return nil
				})
			}
			head, err := events.Head(ctx, p)
			want := map[bool]core.Cursor{true: event, false: earlier}[tc.commitsWhileWaiting]
			if err != nil || head != want {
				t.Fatalf("head = %v, %v; want %v (the event before the older transaction %v, the one after it %v)", head, err, want, earlier, event)
			}
			if waited == 0 {
				t.Fatal("the head did not wait: the event settled before the older transaction ended")
			}
		})
	}
}
