package core_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

var (
	testSecretKey  = core.ClientSecretKey{1, 2, 3}
	otherSecretKey = core.ClientSecretKey{9}
)

// TestClientSecretKey: a generated secret is stored as an HMAC that says
// so and is told from argon2id by its prefix; it matches only its secret
// under its key.
func TestClientSecretKey(t *testing.T) {
	h := testSecretKey.Hash("s3cret")
	if !strings.HasPrefix(h, "$hmac-sha256$v=1$") || !core.IsKeyedSecretHash(h) {
		t.Fatalf("hash %q: want the $hmac-sha256$v=1$ prefix", h)
	}
	if h != testSecretKey.Hash("s3cret") {
		t.Fatal("two hashes of one secret under one key differ")
	}
	argon, err := core.HashSecret("s3cret")
	if err != nil {
		t.Fatal(err)
	}
	if core.IsKeyedSecretHash(argon) {
		t.Fatalf("argon2id hash %q taken for an HMAC", argon)
	}
	for _, tt := range []struct {
		name, hash, secret string
		want               bool
	}{
		{"its secret", h, "s3cret", true},
		{"another secret", h, "s3cret ", false},
		{"empty secret", h, "", false},
		{"made under another key", otherSecretKey.Hash("s3cret"), "s3cret", false},
		{"an argon2id hash of the secret", argon, "s3cret", false},
		{"not base64", "$hmac-sha256$v=1$!!", "s3cret", false},
		{"cut short", h[:len(h)-4], "s3cret", false},
		{"another version", strings.Replace(h, "v=1", "v=2", 1), "s3cret", false},
		{"the secret itself", "s3cret", "s3cret", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := testSecretKey.Verify(tt.hash, tt.secret); got != tt.want {
				t.Fatalf("Verify(%q, %q) = %v, want %v", tt.hash, tt.secret, got, tt.want)
			}
		})
	}
}

// codeOf is err's code, "" for none.
func codeOf(err error) core.Code {
	if err == nil {
		return ""
	}
	return core.ErrorCode(err)
}

// holdGate replaces the hash gate with one whose only slot is taken and
// which lets no one wait, for the duration of the test: any argon2id check
// is then turned away with UNAVAILABLE.
func holdGate(t *testing.T) {
	t.Helper()
	g := core.NewHashGate(1, 0, time.Millisecond)
	t.Cleanup(core.SetHashGate(g))
	held, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = g.Do(context.Background(), func() { close(held); <-release })
	}()
	<-held
	t.Cleanup(func() { close(release); wg.Wait() })
}

// TestKeyedClientSecrets: a keyed service stores new and rotated secrets
// as HMAC and checks them without the hash gate; a secret still stored as
// argon2id is checked in the gate and stored as HMAC at its first
// successful use, and a wrong secret or an unknown client id changes
// nothing.
func TestKeyedClientSecrets(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	keyed := core.NewKeyedAccountService(store, nil, testSecretKey)
	stored := func(clientID string) string {
		t.Helper()
		cl, err := store.APIClient(ctx, clientID)
		if err != nil {
			t.Fatal(err)
		}
		return cl.SecretHash
	}

	fresh, err := keyed.Create(ctx, "Fresh")
	if err != nil {
		t.Fatal(err)
	}
	if h := stored(fresh.ClientID); h != testSecretKey.Hash(fresh.ClientSecret) {
		t.Fatalf("a new secret stored as %q, want its HMAC", h)
	}
	old, err := core.NewAccountService(store, nil).Create(ctx, "Old")
	if err != nil {
		t.Fatal(err)
	}
	oldHash := stored(old.ClientID)
	if core.IsKeyedSecretHash(oldHash) {
		t.Fatalf("an unkeyed service stored %q, want argon2id", oldHash)
	}

	t.Run("HMAC checks need no slot of the gate", func(t *testing.T) {
		holdGate(t)
		for _, tc := range []struct {
			name, clientID, secret string
			want                   core.Code
		}{
			{"right secret", fresh.ClientID, fresh.ClientSecret, ""},
			{"wrong secret", fresh.ClientID, "wrong", core.CodeUnauthenticated},
			{"unknown client id", "cli_unknown", fresh.ClientSecret, core.CodeUnauthenticated},
			{"an argon2id secret waits for the gate", old.ClientID, old.ClientSecret, core.CodeUnavailable},
		} {
			t.Run(tc.name, func(t *testing.T) {
				_, err := keyed.Authenticate(ctx, tc.clientID, tc.secret, "10.0.0.1")
				if codeOf(err) != tc.want {
					t.Fatalf("Authenticate = %v, want %q", err, tc.want)
				}
			})
		}
		if h := stored(old.ClientID); h != oldHash {
			t.Fatalf("a check turned away changed the stored hash to %q", h)
		}
	})

	t.Run("an argon2id secret is rehashed at its first use", func(t *testing.T) {
		if _, err := keyed.Authenticate(ctx, old.ClientID, "wrong", "10.0.0.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("wrong secret: %v", err)
		}
		if h := stored(old.ClientID); h != oldHash {
			t.Fatalf("a wrong secret changed the stored hash to %q", h)
		}
		cl, err := keyed.Authenticate(ctx, old.ClientID, old.ClientSecret, "10.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		want := testSecretKey.Hash(old.ClientSecret)
		if h := stored(old.ClientID); h != want || cl.SecretHash != want {
			t.Fatalf("after its use the secret is stored as %q (returned %q), want its HMAC", h, cl.SecretHash)
		}
		holdGate(t) // from now on it needs no slot
		if _, err := keyed.Authenticate(ctx, old.ClientID, old.ClientSecret, "10.0.0.1"); err != nil {
			t.Fatalf("the rehashed secret: %v", err)
		}
	})

	t.Run("a rotated secret stops working at once", func(t *testing.T) {
		rotated, err := keyed.RotateSecret(ctx, fresh.AccountID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := keyed.Authenticate(ctx, fresh.ClientID, fresh.ClientSecret, "10.0.0.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("the secret before the rotation: %v, want UNAUTHENTICATED", err)
		}
		if _, err := keyed.Authenticate(ctx, rotated.ClientID, rotated.ClientSecret, "10.0.0.1"); err != nil {
			t.Fatalf("the rotated secret: %v", err)
		}
		if h := stored(fresh.ClientID); h != testSecretKey.Hash(rotated.ClientSecret) {
			t.Fatalf("the rotated secret stored as %q, want its HMAC", h)
		}
	})
}

// rotatingStore rotates the account's secret right after the lookup of
// the client's stored hash: the rotation lands between the check of the
// old secret and its rehash.
type rotatingStore struct {
	*memory.Store
	rotate func()
	once   sync.Once
}

func (s *rotatingStore) APIClient(ctx context.Context, clientID string) (core.APIClient, error) {
	cl, err := s.Store.APIClient(ctx, clientID)
	s.once.Do(s.rotate)
	return cl, err
}

// TestRehashDoesNotUndoARotation: the old secret matched what the lookup
// read, but the rotation committed before its rehash: the rehash must not
// store the old secret again.
func TestRehashDoesNotUndoARotation(t *testing.T) {
	ctx := context.Background()
	mem := memory.NewStore()
	old, err := core.NewAccountService(mem, nil).Create(ctx, "Old")
	if err != nil {
		t.Fatal(err)
	}
	var rotated core.NewAccount
	store := &rotatingStore{Store: mem}
	keyed := core.NewKeyedAccountService(store, nil, testSecretKey)
	store.rotate = func() {
		var err error
		if rotated, err = keyed.RotateSecret(ctx, old.AccountID); err != nil {
			t.Error(err)
		}
	}
	// The check itself began before the rotation, like a request already
	// in flight; what matters is every check after it.
	if _, err := keyed.Authenticate(ctx, old.ClientID, old.ClientSecret, "10.0.0.1"); err != nil {
		t.Fatalf("the check in flight: %v", err)
	}
	cl, err := mem.APIClient(ctx, old.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if want := testSecretKey.Hash(rotated.ClientSecret); cl.SecretHash != want {
		t.Fatalf("stored %q after the rehash, want the rotation's %q", cl.SecretHash, want)
	}
	for _, tc := range []struct {
		name, secret string
		want         core.Code
	}{
		{"the old secret", old.ClientSecret, core.CodeUnauthenticated},
		{"the rotated secret", rotated.ClientSecret, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := keyed.Authenticate(ctx, old.ClientID, tc.secret, "10.0.0.1"); codeOf(err) != tc.want {
				t.Fatalf("Authenticate = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestKeyedFailureLimits: HMAC checks keep the failure limits. A flood of
// wrong secrets for one client id from one address holds that client id
// there and nowhere else, until its failures leave the window.
func TestKeyedFailureLimits(t *testing.T) {
	t.Cleanup(core.SetTarpitDelay(0))
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	svc := core.NewKeyedAccountService(memory.NewStore(), memory.NewFailureLimiter().WithClock(clock.Now), testSecretKey)
	acc, err := svc.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	holdGate(t) // nothing here may need a slot
	for i := range core.ClientFailuresPerSource.Limit {
		if _, err := svc.Authenticate(ctx, acc.ClientID, "wrong", "192.0.2.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	for _, tc := range []struct {
		name, secret, source string
		advance              time.Duration
		want                 core.Code
	}{
		{"the flood's address, wrong secret", "wrong", "192.0.2.1", 0, core.CodeRateLimited},
		{"the flood's address, right secret", acc.ClientSecret, "192.0.2.1", 0, core.CodeRateLimited},
		{"the client's own address", acc.ClientSecret, "198.51.100.7", 0, ""},
		{"the flood's address a window later", acc.ClientSecret, "192.0.2.1", core.ClientFailuresPerSource.Period, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.Advance(tc.advance)
			if _, err := svc.Authenticate(ctx, acc.ClientID, tc.secret, tc.source); codeOf(err) != tc.want {
				t.Fatalf("Authenticate = %v, want %q", err, tc.want)
			}
		})
	}
}
