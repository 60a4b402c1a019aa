package bunstore_test

import (
	"context"
	"database/sql"
	"strings"
	"sync"
	"testing"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/testenv"
)

// forEachDatabase runs fn against a migrated store on SQLite and on PostgreSQL.
func forEachDatabase(t *testing.T, fn func(t *testing.T, url string, store *bunstore.Store)) {
	for name, newURL := range testenv.MigratedDatabases(t) {
		t.Run(name, func(t *testing.T) {
			url := newURL(t)
			store := MustOpen(t, url)
			if _, err := store.Migrate(context.Background()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			fn(t, url, store)
		})
	}
}

// MustOpen opens a store that closes when the test ends.
func MustOpen(tb testing.TB, url string) *bunstore.Store {
	tb.Helper()
	store, closeStore, err := bunstore.Open(context.Background(), url)
	if err != nil {
		tb.Fatalf("open %s: %v", url, err)
	}
	tb.Cleanup(closeStore)
	return store
}

// openPostgres opens a migrated store on a PostgreSQL database of its own
// and a plain pool of connections to it, for transactions the test holds
// open beside the store's.
func openPostgres(t *testing.T) (*bunstore.Store, *sql.DB) {
	t.Helper()
	url := testenv.PostgresURL(t)
	store := MustOpen(t, url)
	if _, err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(url)))
	t.Cleanup(func() { _ = raw.Close() })
	return store, raw
}

func TestMigrateTwiceAndConcurrently(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			url := newURL(t)
			const processes = 4
			var wg sync.WaitGroup
			errs := make([]error, processes)
			applied := make([][]string, processes)
			for i := range processes {
				store := MustOpen(t, url) // a pool of its own, as another process would have
				wg.Add(1)
				go func() {
					defer wg.Done()
					applied[i], errs[i] = store.Migrate(context.Background())
				}()
			}
			wg.Wait()
			total := 0
			for i, err := range errs {
				if err != nil {
					t.Fatalf("concurrent migrate %d: %v", i, err)
				}
				total += len(applied[i])
			}
			store := MustOpen(t, url)
			again, err := store.Migrate(context.Background())
			if err != nil || len(again) != 0 {
				t.Fatalf("second migrate applied %v, err %v; want nothing", again, err)
			}
			var count int
			if err := store.DB().NewRaw("SELECT COUNT(*) FROM bun_migrations").Scan(context.Background(), &count); err != nil {
				t.Fatal(err)
			}
			if total != count {
				t.Fatalf("migrations applied %d times in all, %d recorded: each must apply exactly once", total, count)
			}
		})
	}
}

func TestIdentityKeyIsCreatedOnce(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		sealer, err := keyring.NewSealer(make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		const replicas = 4
		ids := make([]string, replicas)
		var wg sync.WaitGroup
		for i := range replicas {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, key, err := keyring.IdentityKey(context.Background(), store, sealer)
				if err != nil || key == nil {
					t.Errorf("IdentityKey: %v", err)
				}
				ids[i] = id
			}()
		}
		wg.Wait()
		for _, id := range ids[1:] {
			if id != ids[0] {
				t.Fatalf("replicas got different keys: %v", ids)
			}
		}
		k, found, err := store.SigningKey(context.Background(), keyring.PurposeIdentityProvider)
		if err != nil || !found {
			t.Fatalf("stored key: %v %v", found, err)
		}
		if k.SealedPrivateKey == "" || k.PublicKey == "" {
			t.Fatalf("stored key incomplete: %+v", k)
		}
		other, _ := keyring.NewSealer(append(make([]byte, 31), 1))
		if _, _, err := keyring.IdentityKey(context.Background(), store, other); err == nil {
			t.Fatal("the key opened under another master key")
		}
	})
}

// TestStartAfterALogicalCopy: a database copied with pg_dump into another
// server holds event positions (transaction ids of the source) ahead of the
// new server's; at start mountd moves the server's transaction ids past
// them, so that a new event sorts after every restored one.
func TestStartAfterALogicalCopy(t *testing.T) {
	ctx := context.Background()
	store, raw := openPostgres(t)
	// The source's newest event, 30,000 transactions ahead of this server.
	var ahead string
	if err := raw.QueryRowContext(ctx, `INSERT INTO events (tx, account_id, type, mount_uid, occurred_at, body)
		VALUES ((pg_current_xact_id()::text::bigint + 30000)::text::xid8, 'acc_copy', 'MOUNT_OFFLINE', 'CP1', 0, '{}')
		RETURNING tx::text`).Scan(&ahead); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var after bool
	if err := raw.QueryRowContext(ctx, `INSERT INTO events (account_id, type, mount_uid, occurred_at, body)
		VALUES ('acc_copy', 'MOUNT_ONLINE', 'CP1', 0, '{}') RETURNING tx > $1::xid8`, ahead).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if !after {
		t.Fatalf("an event written after the start sorts before the copied one at %s", ahead)
	}
	// A copy from too far ahead is refused with a reason, not served.
	if _, err := raw.ExecContext(ctx, `INSERT INTO events (tx, account_id, type, mount_uid, occurred_at, body)
		VALUES ((pg_current_xact_id()::text::bigint + 4000000000)::text::xid8, 'acc_copy', 'MOUNT_OFFLINE', 'CP1', 0, '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Migrate(ctx); err == nil || !strings.Contains(err.Error(), "restore it physically") {
		t.Fatalf("a copy 4e9 transactions ahead: %v, want a refusal that says what to do", err)
	}
}
