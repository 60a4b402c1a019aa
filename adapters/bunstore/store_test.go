package bunstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// forEachDatabase runs fn against a migrated store on SQLite and on PostgreSQL.
func forEachDatabase(t *testing.T, fn func(t *testing.T, url string, store *bunstore.Store)) {
	for name, newURL := range testenv.Databases(t) {
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

func TestAccountStore(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		ctx := context.Background()
		created := time.Date(2026, 11, 22, 1, 40, 13, 123_000_000, time.UTC)
		acc := core.Account{ID: "acc_1", Name: "Fleet One", CreatedAt: created}
		cl := core.APIClient{ClientID: "cli_1", AccountID: "acc_1", SecretHash: "$argon2id$x", CreatedAt: created}
		if err := store.CreateAccount(ctx, acc, cl); err != nil {
			t.Fatalf("CreateAccount: %v", err)
		}

		gotAcc, err := store.Account(ctx, "acc_1")
		if err != nil || gotAcc != acc {
			t.Fatalf("Account = %+v, %v; want %+v", gotAcc, err, acc)
		}
		gotCl, err := store.APIClient(ctx, "cli_1")
		if err != nil || gotCl != cl {
			t.Fatalf("APIClient = %+v, %v; want %+v", gotCl, err, cl)
		}

		tests := []struct {
			name string
			call func() error
			want core.Code
		}{
			{"unknown account", func() error { _, err := store.Account(ctx, "acc_x"); return err }, core.CodeNotFound},
			{"unknown client", func() error { _, err := store.APIClient(ctx, "cli_x"); return err }, core.CodeNotFound},
			{"duplicate account", func() error {
				return store.CreateAccount(ctx, acc, core.APIClient{ClientID: "cli_2", AccountID: "acc_1", CreatedAt: created})
			}, core.CodeConflict},
			{"duplicate client id", func() error {
				return store.CreateAccount(ctx, core.Account{ID: "acc_2", Name: "Two", CreatedAt: created}, cl)
			}, core.CodeConflict},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				if got := core.ErrorCode(tt.call()); got != tt.want {
					t.Fatalf("code = %s, want %s", got, tt.want)
				}
			})
		}

		// A failed CreateAccount is all-or-nothing: the account whose client
		// clashed must not exist.
		if _, err := store.Account(ctx, "acc_2"); core.ErrorCode(err) != core.CodeNotFound {
			t.Fatalf("acc_2 after failed create: err = %v, want not found", err)
		}
	})
}

func TestAccountServiceOnStore(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		ctx := context.Background()
		svc := core.NewAccountService(store, nil)
		created, err := svc.Create(ctx, "Fleet")
		if err != nil {
			t.Fatal(err)
		}
		cl, err := store.APIClient(ctx, created.ClientID)
		if err != nil {
			t.Fatal(err)
		}
		if cl.SecretHash == created.ClientSecret || len(cl.SecretHash) < 60 {
			t.Fatalf("secret stored as %q: want an argon2id hash", cl.SecretHash)
		}
		if _, err := svc.Authenticate(ctx, created.ClientID, created.ClientSecret, "test"); err != nil {
			t.Fatalf("Authenticate with the right secret: %v", err)
		}
		if _, err := svc.Authenticate(ctx, created.ClientID, created.ClientSecret+"x", "test"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("Authenticate with a wrong secret: %v", err)
		}
	})
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
