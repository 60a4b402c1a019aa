package core_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// TestAuthenticateThrottle: failures are limited per client id and source
// address, and per address; successes never count, and another address
// is never locked out by someone else's failures.
func TestAuthenticateThrottle(t *testing.T) {
	t.Cleanup(core.SetTarpitDelay(time.Millisecond))

	ctx := context.Background()
	svc := core.NewAccountService(memory.NewStore(), memory.NewFailureLimiter())
	acc, err := svc.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	try := func(clientID, secret, source string) error {
		_, err := svc.Authenticate(ctx, clientID, secret, source)
		return err
	}
	limit := core.ClientFailuresPerSource.Limit
	for i := 0; i < limit; i++ {
		if err := try(acc.ClientID, "wrong", "10.0.0.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	for _, tc := range []struct {
		name     string
		clientID string
		secret   string
		source   string
		want     core.Code
	}{
		{"the attacker's address, over the limit", acc.ClientID, "wrong", "10.0.0.1", core.CodeRateLimited},
		{"the attacker's address, right secret too", acc.ClientID, acc.ClientSecret, "10.0.0.1", core.CodeRateLimited},
		{"the operator's server elsewhere", acc.ClientID, acc.ClientSecret, "10.0.0.2", ""},
		{"a wrong secret elsewhere is counted apart", acc.ClientID, "wrong", "10.0.0.2", core.CodeUnauthenticated},
		{"another client id from the attacker's address", "cli_unknown", "wrong", "10.0.0.1", core.CodeUnauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := try(tc.clientID, tc.secret, tc.source)
			if tc.want == "" && err != nil || tc.want != "" && core.ErrorCode(err) != tc.want {
				t.Fatalf("Authenticate = %v, want %q", err, tc.want)
			}
			if tc.want == core.CodeRateLimited {
				if ce := err.(*core.Error); ce.RetryAfter <= 0 || ce.RetryAfter > time.Minute {
					t.Fatalf("RetryAfter %v", ce.RetryAfter)
				}
			}
		})
	}
	// Successes never count.
	for i := 0; i < 2*limit; i++ {
		if err := try(acc.ClientID, acc.ClientSecret, "10.0.0.3"); err != nil {
			t.Fatalf("success %d: %v", i+1, err)
		}
	}
	// Walking through unknown client ids from one address meets the limit
	// on unknown client ids per address (cli_unknown above was the first).
	for i := 1; i < core.UnknownClientFailuresPerAddress.Limit; i++ {
		if err := try(fmt.Sprintf("cli_walk_%d", i), "wrong", "10.0.0.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("unknown client id %d: %v", i+1, err)
		}
	}
	if err := try("cli_walk_more", "wrong", "10.0.0.1"); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("after %d unknown client ids from one address: %v, want %s", core.UnknownClientFailuresPerAddress.Limit, err, core.CodeRateLimited)
	}
}

// keyRecorder is a failure limiter that never blocks and keeps the keys
// it was given.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *keyRecorder) Reserve(_ context.Context, key string, _ core.Rate) (time.Duration, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	return 0, "t", nil
}

func (r *keyRecorder) Refund(context.Context, string, string) error { return nil }

// TestThrottleKeysAreBounded: a client id of a megabyte does not become a
// megabyte-long key in the limiter (an LRU of 100,000 keys, or Redis).
func TestThrottleKeysAreBounded(t *testing.T) {
	rec := &keyRecorder{}
	svc := core.NewAccountService(memory.NewStore(), rec)
	huge := strings.Repeat("x", 1<<20)
	if _, err := svc.Authenticate(context.Background(), huge, "secret", "192.0.2.1"); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("Authenticate: %v", err)
	}
	if len(rec.keys) == 0 {
		t.Fatal("the limiter was not asked")
	}
	for _, k := range rec.keys {
		if len(k) > 128 {
			t.Fatalf("a limiter key of %d bytes", len(k))
		}
	}
}

// TestThrottleKeysBySource: an IPv6 caller counts by its /64, an IPv4 one
// (mapped or not) by its address; anything else as given.
func TestThrottleKeysBySource(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"},
		{"2001:db8:1:2::1%eth0", "2001:db8:1:2::2"},
		{"192.0.2.1", "::ffff:192.0.2.1"},
		{"not an address", "not an address"},
	} {
		rec := &keyRecorder{}
		svc := core.NewAccountService(memory.NewStore(), rec)
		_, _ = svc.Authenticate(context.Background(), "cli_x", "secret", tc.a)
		_, _ = svc.Authenticate(context.Background(), "cli_x", "secret", tc.b)
		n := len(rec.keys) / 2
		if n == 0 || !slices.Equal(rec.keys[:n], rec.keys[n:]) {
			t.Errorf("%s and %s: keys %v, want the same twice", tc.a, tc.b, rec.keys)
		}
	}
	rec := &keyRecorder{}
	svc := core.NewAccountService(memory.NewStore(), rec)
	_, _ = svc.Authenticate(context.Background(), "cli_x", "secret", "2001:db8:1:2::1")
	_, _ = svc.Authenticate(context.Background(), "cli_x", "secret", "2001:db8:1:3::1")
	if n := len(rec.keys) / 2; slices.Equal(rec.keys[:n], rec.keys[n:]) {
		t.Errorf("two /64s share keys %v", rec.keys)
	}
}

// TestHashGate: at most slots run at once, at most queue wait, a waiter
// gives up after the wait; beyond, UNAVAILABLE with a Retry-After.
func TestHashGate(t *testing.T) {
	g := core.NewHashGate(2, 1, 200*time.Millisecond)
	ctx := context.Background()
	release := make(chan struct{})
	var running, peak atomic.Int32
	hold := func() {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		running.Add(-1)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- g.Do(ctx, hold) }()
	}
	for running.Load() != 2 {
		time.Sleep(time.Millisecond)
	}
	wg.Add(1)
	go func() { defer wg.Done(); errs <- g.Do(ctx, hold) }() // queued
	// Polled, not slept: a busy machine may take long to queue it.
	for core.GateWaiting(g) != 1 {
		time.Sleep(time.Millisecond)
	}
	err := g.Do(ctx, func() { t.Error("ran beyond the queue") })
	if ce, ok := err.(*core.Error); !ok || ce.Code != core.CodeUnavailable || ce.RetryAfter <= 0 {
		t.Fatalf("beyond the queue: %v, want UNAVAILABLE with RetryAfter", err)
	}
	for core.GateWaiting(g) != 0 { // the queued one gives up after its wait
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	close(errs)
	var busy int
	for err := range errs {
		if core.ErrorCode(err) == core.CodeUnavailable {
			busy++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if busy != 1 || peak.Load() != 2 {
		t.Fatalf("busy %d (want 1, the queued one timing out), peak %d (want 2)", busy, peak.Load())
	}
	// Freed slots serve again.
	if err := g.Do(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
}

// TestOthersFailuresDoNotHoldACorrectSecret: failed authentications of
// other existing clients from one address, however many, never refuse a
// correct secret from there; failures naming client ids that do not exist
// count per address and hold only such names.
func TestOthersFailuresDoNotHoldACorrectSecret(t *testing.T) {
	t.Cleanup(core.SetTarpitDelay(0))
	ctx := context.Background()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	svc := core.NewAccountService(memory.NewStore(), memory.NewFailureLimiter().WithClock(clock.Now))
	per, perAddress := core.ClientFailuresPerSource.Limit, core.UnknownClientFailuresPerAddress.Limit
	var clients []core.NewAccount
	for range perAddress/per + 1 {
		acc, err := svc.Create(ctx, "Fleet")
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, acc)
	}
	good := clients[len(clients)-1]
	try := func(clientID, secret string) error {
		_, err := svc.Authenticate(ctx, clientID, secret, "10.0.0.1")
		return err
	}
	for i := range perAddress {
		if err := try(clients[i/per].ClientID, "wrong"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("failure %d: %v", i+1, err)
		}
	}
	if err := try(good.ClientID, good.ClientSecret); err != nil {
		t.Fatalf("a correct secret after %d failures of other clients from its address: %v", perAddress, err)
	}
	if err := try(good.ClientID, "wrong"); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("a wrong secret of a client that has not failed: %v, want UNAUTHENTICATED", err)
	}
	if err := try(clients[0].ClientID, clients[0].ClientSecret); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("a client after its own %d failures: %v, want RATE_LIMITED", per, err)
	}
	for i := range perAddress {
		if err := try(fmt.Sprintf("cli_unknown%d", i), "wrong"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("unknown client id %d: %v", i+1, err)
		}
	}
	if err := try("cli_unknown_more", "wrong"); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("an unknown client id past %d from one address: %v, want RATE_LIMITED", perAddress, err)
	}
	if err := try(good.ClientID, good.ClientSecret); err != nil {
		t.Fatalf("a correct secret after unknown client ids from its address: %v", err)
	}
	// A minute on, every count has left its window.
	clock.Advance(core.UnknownClientFailuresPerAddress.Period)
	if err := try("cli_unknown_later", "wrong"); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("an unknown client id a minute later: %v", err)
	}
	if err := try(clients[0].ClientID, clients[0].ClientSecret); err != nil {
		t.Fatalf("a client a minute after its own failures: %v", err)
	}
}

// TestParallelFailuresAreCountedBeforeTheHash: a burst of parallel wrong
// secrets (or passwords) gets exactly the limit of tries: each is counted
// before its hash, not after.
func TestParallelFailuresAreCountedBeforeTheHash(t *testing.T) {
	t.Cleanup(core.SetTarpitDelay(0))
	// Room for the whole burst in the gate, so that no try is turned away busy.
	t.Cleanup(core.SetHashGate(core.NewHashGate(4, 1024, time.Minute)))
	ctx := context.Background()
	store := memory.NewStore()
	failures := memory.NewFailureLimiter()
	accounts := core.NewAccountService(store, failures)
	acc, err := accounts.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	users := core.NewUserService(store, failures)
	if _, err := users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "alice", Role: core.RoleOwner, Password: "correct horse battery"}); err != nil {
		t.Fatal(err)
	}
	codes := burst(40, func() error {
		_, err := accounts.Authenticate(ctx, acc.ClientID, "wrong", "10.0.0.1")
		return err
	})
	if codes[core.CodeUnauthenticated] != core.ClientFailuresPerSource.Limit || codes[core.CodeRateLimited] != 40-core.ClientFailuresPerSource.Limit {
		t.Fatalf("40 parallel wrong secrets: %v, want %d tries", codes, core.ClientFailuresPerSource.Limit)
	}
	codes = burst(60, func() error {
		_, err := users.SignIn(ctx, "alice", "wrong password!", core.SignInSource{Address: "10.0.0.2"})
		return err
	})
	if codes[core.CodeUnauthenticated] != core.SignInFailures.Limit || codes[core.CodeRateLimited] != 60-core.SignInFailures.Limit {
		t.Fatalf("60 parallel wrong passwords: %v, want %d tries", codes, core.SignInFailures.Limit)
	}
}

// TestParallelCorrectSecretsBeyondTheLimit: more correct secrets at once
// than the failure limit (a farm of servers starting together behind one
// address) all get in: a place held by an attempt in flight frees when it
// succeeds, and a caller finding the limit full waits for one. Wrong
// secrets still get exactly the limit of tries, after that wait.
func TestParallelCorrectSecretsBeyondTheLimit(t *testing.T) {
	t.Cleanup(core.SetTarpitDelay(0))
	t.Cleanup(core.SetPlaceWait(30 * time.Second)) // longer than any burst here takes
	t.Cleanup(core.SetHashGate(core.NewHashGate(2, 1024, time.Minute)))
	ctx := context.Background()
	accounts := core.NewAccountService(memory.NewStore(), memory.NewFailureLimiter())
	acc, err := accounts.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	n := 3 * core.ClientFailuresPerSource.Limit
	try := func(secret string) func() error {
		return func() error {
			_, err := accounts.Authenticate(ctx, acc.ClientID, secret, "10.0.0.1")
			return err
		}
	}
	if codes := burst(n, try(acc.ClientSecret)); codes["ok"] != n {
		t.Fatalf("%d parallel correct secrets: %v, want every one in", n, codes)
	}
	// Failures stay: the wait for a place ends in a refusal.
	t.Cleanup(core.SetPlaceWait(50 * time.Millisecond))
	if codes := burst(n, try("wrong")); codes[core.CodeUnauthenticated] != core.ClientFailuresPerSource.Limit || codes[core.CodeRateLimited] != n-core.ClientFailuresPerSource.Limit {
		t.Fatalf("%d parallel wrong secrets: %v, want %d tries", n, codes, core.ClientFailuresPerSource.Limit)
	}
}

// burst runs try n times at once and counts the outcomes by error code
// ("ok" for none).
func burst(n int, try func() error) map[core.Code]int {
	var (
		mu    sync.Mutex
		codes = map[core.Code]int{}
		wg    sync.WaitGroup
	)
	for range n {
		wg.Go(func() {
			code := core.Code("ok")
			if err := try(); err != nil {
				code = core.ErrorCode(err)
			}
			mu.Lock()
			codes[code]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return codes
}
