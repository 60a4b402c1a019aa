package bunstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/testenv"
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
	url := testenv.PostgresURL(t)
	store := MustOpen(t, url)
	ctx := context.Background()
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	raw := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url)))
	t.Cleanup(func() { _ = raw.Close() })
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
