package porttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunFailureLimiter runs the core.FailureLimiter contract against limiters
// made by newLimiter, which read their time from now (a Clock the suite
// moves; nil: the adapter's own clock); each subtest gets a fresh limiter.
//
// The contract is an exact sliding window: a key has at most Limit
// attempts within any window of Period, and once it has Limit, Reserve
// waits until the oldest of them leaves the window. (GCRA, which these
// adapters once were, let one more through every Period/Limit: nearly
// twice the limit within one period.) Asking and counting are one atomic
// step, and a refunded attempt no longer counts.
func RunFailureLimiter(t *testing.T, newLimiter func(t *testing.T, now func() time.Time) core.FailureLimiter, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	// The period is long: the suite's clock is moved by hand, and a Redis
	// key expires with the period in real time.
	rate := core.Rate{Limit: 3, Period: 10 * time.Minute}
	P := rate.Period

	// reserve counts n attempts of key, which must all fit.
	reserve := func(t *testing.T, l core.FailureLimiter, key string, n int) []string {
		t.Helper()
		var tokens []string
		for i := 0; i < n; i++ {
			wait, token, err := l.Reserve(ctx, key, rate)
			if err != nil || wait != 0 || token == "" {
				t.Fatalf("attempt %d of %d: wait %v, token %q, %v", i+1, n, wait, token, err)
			}
			tokens = append(tokens, token)
		}
		return tokens
	}
	// held asks for one more attempt of key, which must not fit, and
	// returns the wait.
	held := func(t *testing.T, l core.FailureLimiter, key string) time.Duration {
		t.Helper()
		wait, token, err := l.Reserve(ctx, key, rate)
		if err != nil || wait <= 0 || token != "" {
			t.Fatalf("past the limit: wait %v, token %q, %v; want a wait and no token", wait, token, err)
		}
		if wait > P {
			t.Fatalf("past the limit: wait %v, more than the period %v", wait, P)
		}
		return wait
	}
	wantWait := func(t *testing.T, got, want time.Duration) {
		t.Helper()
		// Redis counts in microseconds.
		if d := got - want; d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("wait %v, want %v", got, want)
		}
	}

	t.Run("HeldForThePeriodOnceTheLimitIsReached", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		reserve(t, l, "k", rate.Limit)
		wantWait(t, held(t, l, "k"), P) // the whole window, not Period/Limit
		c.Advance(time.Minute)
		wantWait(t, held(t, l, "k"), P-time.Minute) // a refused attempt does not count
		reserve(t, l, "other", 1)
		c.Advance(P - time.Minute)
		reserve(t, l, "k", rate.Limit) // all left the window together
	})

	t.Run("ExactlyOneMoreFitsOnceTheOldestLeaves", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		reserve(t, l, "k", 1)
		c.Advance(time.Minute)
		reserve(t, l, "k", rate.Limit-1)
		c.Advance(time.Minute)
		// GCRA would have let one more through by now.
		wantWait(t, held(t, l, "k"), P-2*time.Minute)
		c.Advance(P - 2*time.Minute) // the oldest leaves
		reserve(t, l, "k", 1)
		// Then the key is held until the two of the second minute leave.
		wantWait(t, held(t, l, "k"), time.Minute)
		c.Advance(time.Minute)
		reserve(t, l, "k", 2)
		held(t, l, "k")
	})

	t.Run("SpreadAttemptsHoldUntilTheFirstLeaves", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		for range rate.Limit {
			reserve(t, l, "k", 1)
			c.Advance(2 * time.Minute)
		}
		wantWait(t, held(t, l, "k"), P-6*time.Minute)
		c.Advance(P - 6*time.Minute)
		reserve(t, l, "k", 1)
		wantWait(t, held(t, l, "k"), 2*time.Minute) // until the second leaves
	})

	t.Run("KeysAreIndependent", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		reserve(t, l, "a", rate.Limit)
		reserve(t, l, "b", rate.Limit-1)
		held(t, l, "a")
		reserve(t, l, "b", 1)
	})

	t.Run("ARefundedAttemptDoesNotCount", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		tokens := reserve(t, l, "k", rate.Limit)
		c.Advance(time.Minute)
		if err := l.Refund(ctx, "k", tokens[1]); err != nil {
			t.Fatal(err)
		}
		if err := l.Refund(ctx, "k", tokens[1]); err != nil {
			t.Fatalf("refunded twice: %v", err)
		}
		if err := l.Refund(ctx, "k", "unknown"); err != nil {
			t.Fatalf("an unknown token: %v", err)
		}
		reserve(t, l, "k", 1)
		wantWait(t, held(t, l, "k"), P-time.Minute) // the first is the oldest still
		c.Advance(P)
		if err := l.Refund(ctx, "k", tokens[0]); err != nil {
			t.Fatalf("a token that left the window: %v", err)
		}
	})

	// A burst of parallel attempts (on two replicas when shared): exactly
	// Limit of them fit, whatever the interleaving.
	t.Run("ParallelAttemptsGetExactlyTheLimit", func(t *testing.T) {
		c := NewClock()
		replicas := []core.FailureLimiter{newLimiter(t, c.Now)}
		if o.Shared {
			replicas = append(replicas, newLimiter(t, c.Now))
		}
		burst := core.Rate{Limit: 5, Period: P}
		var (
			mu       sync.Mutex
			admitted int
			wg       sync.WaitGroup
		)
		for i := range 60 {
			wg.Go(func() {
				wait, token, err := replicas[i%len(replicas)].Reserve(ctx, "k", burst)
				if err != nil {
					t.Error(err)
					return
				}
				if wait == 0 && token != "" {
					mu.Lock()
					admitted++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if admitted != burst.Limit {
			t.Fatalf("60 parallel attempts: %d fit, want %d", admitted, burst.Limit)
		}
	})

	// On the adapter's own clock (Redis's TIME): bounded generously, as a
	// real clock runs on while the test does.
	t.Run("OwnClock", func(t *testing.T) {
		l := newLimiter(t, nil)
		short := core.Rate{Limit: 2, Period: time.Minute}
		for range short.Limit {
			if wait, token, err := l.Reserve(ctx, "k", short); err != nil || wait != 0 || token == "" {
				t.Fatalf("within the limit: %v %q %v", wait, token, err)
			}
		}
		wait, _, err := l.Reserve(ctx, "k", short)
		if err != nil || wait <= 0 || wait > short.Period {
			t.Fatalf("past the limit: wait %v, %v; want (0, %v]", wait, err, short.Period)
		}
	})

	if o.Shared {
		t.Run("ReplicasShareCounts", func(t *testing.T) {
			c := NewClock()
			a, b := newLimiter(t, c.Now), newLimiter(t, c.Now)
			reserve(t, a, "k", rate.Limit-1)
			tokens := reserve(t, b, "k", 1)
			held(t, a, "k")
			if err := a.Refund(ctx, "k", tokens[0]); err != nil {
				t.Fatal(err)
			}
			reserve(t, b, "k", 1)
		})
	}
}
