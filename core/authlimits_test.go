package core_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// accountMap is an in-memory core.AccountStore.
type accountMap struct {
	mu       sync.Mutex
	accounts map[string]core.Account
	clients  map[string]core.APIClient
}

func (s *accountMap) CreateAccount(_ context.Context, a core.Account, c core.APIClient) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[a.ID], s.clients[c.ClientID] = a, c
	return nil
}

func (s *accountMap) Account(_ context.Context, id string) (core.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.accounts[id]; ok {
		return a, nil
	}
	return core.Account{}, core.Errorf(core.CodeNotFound, "no account")
}

func (s *accountMap) APIClient(_ context.Context, id string) (core.APIClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.clients[id]; ok {
		return c, nil
	}
	return core.APIClient{}, core.Errorf(core.CodeNotFound, "no client")
}

// TestAuthenticateThrottle: failures are limited per client id and source
// address, and per address; successes never count, and another address
// is never locked out by someone else's failures.
func TestAuthenticateThrottle(t *testing.T) {
	saved := core.FailuresPerAddress
	core.FailuresPerAddress = core.Rate{Limit: 15, Period: time.Minute}
	t.Cleanup(func() { core.FailuresPerAddress = saved })
	t.Cleanup(core.SetTarpitDelay(time.Millisecond))

	ctx := context.Background()
	svc := core.NewAccountService(&accountMap{accounts: map[string]core.Account{}, clients: map[string]core.APIClient{}}, memory.NewFailureLimiter())
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
