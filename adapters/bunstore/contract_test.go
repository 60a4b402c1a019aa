package bunstore_test

import (
	"context"
	"testing"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/storetest"
	"github.com/mountd/mountd/adapters/testenv"
)

// TestStoreContract runs the storage ports' contract suite on SQLite and
// on PostgreSQL, each case on a fresh, migrated database.
func TestStoreContract(t *testing.T) {
	for name, newURL := range testenv.MigratedDatabases(t) {
		t.Run(name, func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) storetest.Store {
				store := MustOpen(t, newURL(t))
				if _, err := store.Migrate(context.Background()); err != nil {
					t.Fatalf("migrate: %v", err)
				}
				return store
			})
		})
	}
}

// TestRolloutContract runs the rollouts' cases of the contract suite on
// SQLite and on PostgreSQL, each case on a fresh, migrated database.
func TestRolloutContract(t *testing.T) {
	for name, newURL := range testenv.MigratedDatabases(t) {
		t.Run(name, func(t *testing.T) {
			storetest.RunRollouts(t, func(t *testing.T) storetest.Store {
				store := MustOpen(t, newURL(t))
				if _, err := store.Migrate(context.Background()); err != nil {
					t.Fatalf("migrate: %v", err)
				}
				return store
			})
		})
	}
}

// TestRiderGrantContract runs the rider grants' contract on SQLite and on
// PostgreSQL, and its revoking cases once more with one mount per
// transaction (a rider's revocation across many mounts takes several).
func TestRiderGrantContract(t *testing.T) {
	for name, newURL := range testenv.MigratedDatabases(t) {
		newStore := func(t *testing.T) storetest.GrantStore {
			store := MustOpen(t, newURL(t))
			if _, err := store.Migrate(context.Background()); err != nil {
				t.Fatalf("migrate: %v", err)
			}
			return store
		}
		t.Run(name, func(t *testing.T) { storetest.RunRiderGrants(t, newStore) })
		t.Run(name+"/chunks of one mount", func(t *testing.T) {
			defer bunstore.SetRevokeChunk(1)()
			storetest.RunRiderGrantRevocations(t, newStore)
		})
	}
}
