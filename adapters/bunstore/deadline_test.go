package bunstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/bunstore"
)

// TestStatementsStopAtTheirDeadline: a statement whose context ends stops
// in the database within a second, not when it would have finished. On
// PostgreSQL the backend must be idle again (pgdriver alone closed its
// socket and left the backend computing); on SQLite the statement is
// interrupted, also while its rows are being read.
func TestStatementsStopAtTheirDeadline(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, url string, store *bunstore.Store) {
		db := store.DB()
		if store.Postgres() {
			for _, cancelled := range []string{"deadline", "cancel"} {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				if cancelled == "cancel" {
					ctx, cancel = context.WithCancel(context.Background())
					time.AfterFunc(300*time.Millisecond, cancel)
				}
				marker := "deadline_probe_" + cancelled
				start := time.Now()
				err := readAll(ctx, db, "SELECT pg_sleep(30), '"+marker+"'")
				cancel()
				if err == nil {
					t.Fatalf("%s: a 30 s statement under a 300 ms deadline succeeded", cancelled)
				}
				if took := time.Since(start); took > 1500*time.Millisecond {
					t.Fatalf("%s: the statement returned after %v", cancelled, took)
				}
				waitNoActiveBackend(t, url, marker, start)
			}
			// A transaction's statement too.
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			start := time.Now()
			err := db.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.ExecContext(ctx, "SELECT pg_sleep(30), 'deadline_probe_tx'")
				return err
			})
			cancel()
			if err == nil {
				t.Fatal("a 30 s statement in a transaction under a 300 ms deadline succeeded")
			}
			waitNoActiveBackend(t, url, "deadline_probe_tx", start)
			// The pool still works afterwards.
			var one int
			if err := db.QueryRowContext(context.Background(), "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after cancelled statements: %v", err)
			}
			return
		}
		// SQLite: a recursive count that takes minutes, stopped at once.
		slow := "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000000) "
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		start := time.Now()
		var n int64
		err := db.QueryRowContext(ctx, slow+"SELECT count(*) FROM c").Scan(&n)
		cancel()
		if err == nil || time.Since(start) > 1500*time.Millisecond {
			t.Fatalf("count under a 300 ms deadline: %v after %v", err, time.Since(start))
		}
		// Its rows: the first comes at once, the second only after minutes.
		ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		rows, err := db.QueryContext(ctx, slow+"SELECT x FROM c WHERE x = 1 OR x = 9999999999")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		err = rows.Err()
		rows.Close()
		if took := time.Since(start); err == nil || took > 1500*time.Millisecond {
			t.Fatalf("rows under a 300 ms deadline: %v after %v", err, took)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "interrupt") {
			t.Fatalf("rows under a deadline: %v", err)
		}
	})
}

// waitNoActiveBackend fails unless, within a second of the statement's
// deadline, no backend runs a statement containing marker.
func waitNoActiveBackend(t *testing.T, url, marker string, start time.Time) {
	t.Helper()
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url)))
	defer admin.Close()
	deadline := start.Add(300*time.Millisecond + time.Second)
	for {
		var n int
		if err := admin.QueryRow("SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()", marker).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d backend(s) still run %s %v after the deadline", n, marker, time.Since(start)-300*time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readAll runs query and reads its rows; it returns the first error.
func readAll(ctx context.Context, db *bun.DB, query string) error {
	rows, err := db.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}
