package bunstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// BenchmarkMountsBehindRevocations counts mountd_mounts_behind_revocations
// over 100,000 associated mounts, every one with a revocation made and
// half of them told current, against the count of mountd_mounts (every
// mount by state) on the same rows: what the new gauge costs a scrape.
func BenchmarkMountsBehindRevocations(b *testing.B) {
	ctx := context.Background()
	store := MustOpen(b, testenv.PostgresURL(b))
	if _, err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	const fleet = 100_000
	now := time.Now().UnixMilli()
	// In chunks: one statement stays within the test store's timeouts.
	if _, err := store.DB().NewRaw(`INSERT INTO accounts (id, name, created_at) VALUES ('acc_bench', 'bench', 0)`).Exec(ctx); err != nil {
		b.Fatal(err)
	}
	const chunk = 5_000
	for from := 1; from <= fleet; from += chunk {
		to := from + chunk - 1
		if _, err := store.DB().NewRaw(`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at, offline_revocation_version, offline_at)
			SELECT 'B' || i, 'ASSOCIATED', 'acc_bench', 0, 0, CASE WHEN i % 2 = 0 THEN 5 END, CASE WHEN i % 2 = 0 THEN ? END
			FROM generate_series(?, ?) AS i`, now, from, to).Exec(ctx); err != nil {
			b.Fatal(err)
		}
		if _, err := store.DB().NewRaw(`INSERT INTO mount_revocations (uid, version, epoch) SELECT 'B' || i, 5, 1 FROM generate_series(?, ?) AS i`,
			from, to).Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := store.DB().NewRaw(`ANALYZE mounts`).Exec(ctx); err != nil {
		b.Fatal(err)
	}
	b.Run("behind", func(b *testing.B) {
		for b.Loop() {
			if n, err := store.MountsBehindRevocations(ctx); err != nil || n != fleet/2 {
				b.Fatalf("%d, %v; want %d", n, err, fleet/2)
			}
		}
	})
	b.Run("baseline=mount-counts", func(b *testing.B) {
		for b.Loop() {
			if c, err := store.MountCounts(ctx); err != nil || c[string(core.StateAssociated)] != fleet {
				b.Fatalf("%v, %v", c, err)
			}
		}
	})
}
