package bunstore_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/mountd/mountd/core"
)

// TestAuditNeverSkipsALateCommit: on PostgreSQL an entry whose transaction
// began first but commits last is held back until it commits, so that a
// reader paging on from the last entry it read still gets it.
func TestAuditNeverSkipsALateCommit(t *testing.T) {
	store, raw := openPostgres(t)
	ctx := context.Background()
	record := func(tx *sql.Tx, target string) {
		t.Helper()
		if _, err := tx.ExecContext(ctx, `INSERT INTO audit_log (account_id, at, actor_type, actor_id, actor_name, action, target, source_address, details)
			VALUES ('acc_o', 0, 'client', 'c', 'c', 'mount.update', $1, '', '{}')`, target); err != nil {
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
	read := func(after *core.Cursor) []core.AuditEntry {
		t.Helper()
		entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_o", After: after, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return entries
	}
	late, early := begin(), begin()
	record(late, "mount:late")   // the older transaction, the lower id
	record(early, "mount:early") // commits first
	if err := early.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := read(nil); len(got) != 0 {
		t.Fatalf("read while an older transaction is open: %+v", got)
	}
	if err := late.Commit(); err != nil {
		t.Fatal(err)
	}
	got := read(nil)
	if len(got) != 2 || got[0].Target != "mount:late" || got[1].Target != "mount:early" {
		t.Fatalf("after both commits: %+v", got)
	}
	if rest := read(&got[0].Position); len(rest) != 1 || rest[0].Target != "mount:early" {
		t.Fatalf("after the first: %+v", rest)
	}
}
