package core_test

import (
	"context"
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
	// Walking through client ids from one address meets the address limit
	// (10.0.0.1 has 11 failures so far).
	var last error
	for i := 0; i < core.FailuresPerAddress.Limit; i++ {
		last = try("cli_walk_"+string(rune('a'+i)), "wrong", "10.0.0.1")
	}
	if core.ErrorCode(last) != core.CodeRateLimited {
		t.Fatalf("after %d failures from one address: %v, want %s", core.FailuresPerAddress.Limit, last, core.CodeRateLimited)
	}
}

// keyRecorder is a failure limiter that never blocks and keeps the keys
// it was given.
type keyRecorder struct {
	mu   sync.Mutex
	keys []string
}

func (r *keyRecorder) Blocked(_ context.Context, key string, _ core.Rate) (time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keys = append(r.keys, key)
	return 0, nil
}

func (r *keyRecorder) Failed(ctx context.Context, key string, rate core.Rate) error {
	_, err := r.Blocked(ctx, key, rate)
	return err
}

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
	time.Sleep(20 * time.Millisecond)
	err := g.Do(ctx, func() { t.Error("ran beyond the queue") })
	if ce, ok := err.(*core.Error); !ok || ce.Code != core.CodeUnavailable || ce.RetryAfter <= 0 {
		t.Fatalf("beyond the queue: %v, want UNAVAILABLE with RetryAfter", err)
	}
	time.Sleep(300 * time.Millisecond) // the queued one gives up
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
