package bunstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
)

// BenchmarkRevokeRider revokes every live grant of a rider key that holds
// a grant on each of n mounts of a 100,000-mount fleet (the "rider
// banned" runbook for a technician with fleet-wide access); n = 1 is one
// grant's revocation.
func BenchmarkRevokeRider(b *testing.B) {
	ctx := context.Background()
	store := MustOpen(b, testenv.PostgresURL(b))
	if _, err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := store.DB().NewRaw(`INSERT INTO accounts (id, name, created_at) VALUES ('acc_bench', 'bench', 0)`).Exec(ctx); err != nil {
		b.Fatal(err)
	}
	const fleet = 100_000
	if _, err := store.DB().NewRaw(`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at)
		SELECT 'B' || i, 'ASSOCIATED', 'acc_bench', 0, 0 FROM generate_series(1, ?) AS i`, fleet).Exec(ctx); err != nil {
		b.Fatal(err)
	}
	far := time.Now().Add(24 * time.Hour).UnixMilli()
	round := 0
	seed := func(b *testing.B, key string, n int) {
		round++
		if _, err := store.DB().NewRaw(`INSERT INTO rider_grants (id, mount_uid, account_id, rider_key, rights, not_before, not_after, epoch, label, created_at, created_by, token_id, key_id, text, signature)
			SELECT 'gr_' || ? || '_' || i, 'B' || i, 'acc_bench', ?, 'RELEASE_HELMET', 0, ?, 1, '', 0, 'bench', '', 'k', 't', 's'
			FROM generate_series(1, ?) AS i`, round, key, far, n).Exec(ctx); err != nil {
			b.Fatal(err)
		}
		// As autovacuum would have by then: the plans a fleet this size gets.
		if _, err := store.DB().NewRaw(`ANALYZE`).Exec(ctx); err != nil {
			b.Fatal(err)
		}
	}
	for _, n := range []int{1, 1_000, 10_000, fleet} {
		b.Run(fmt.Sprintf("mounts=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				key := fmt.Sprintf("rider%d", round)
				seed(b, key, n)
				b.StartTimer()
				revoked, err := store.RevokeGrants(ctx, "acc_bench", nil, key, time.Now(), nil)
				if err != nil || len(revoked) != n {
					b.Fatalf("%d revoked, %v; want %d", len(revoked), err, n)
				}
			}
		})
	}
}
