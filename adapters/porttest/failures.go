package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunFailureLimiter runs the core.FailureLimiter contract against limiters
// made by newLimiter; each subtest gets a fresh limiter.
func RunFailureLimiter(t *testing.T, newLimiter func(t *testing.T) core.FailureLimiter, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	rate := core.Rate{Limit: 5, Period: 2 * time.Second} // one more failure every 400 ms once full

	blocked := func(t *testing.T, l core.FailureLimiter, key string) time.Duration {
		t.Helper()
		wait, err := l.Blocked(ctx, key, rate)
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	fail := func(t *testing.T, l core.FailureLimiter, key string, n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			if err := l.Failed(ctx, key, rate); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("BlockedOnceTheLimitIsReached", func(t *testing.T) {
		l := newLimiter(t)
		if w := blocked(t, l, "k"); w != 0 {
			t.Fatalf("a fresh key is blocked for %v", w)
		}
		fail(t, l, "k", rate.Limit-1)
		if w := blocked(t, l, "k"); w != 0 {
			t.Fatalf("blocked for %v after %d of %d failures", w, rate.Limit-1, rate.Limit)
		}
		fail(t, l, "k", 1)
		w := blocked(t, l, "k")
		if interval := rate.Period / time.Duration(rate.Limit); w <= 0 || w > interval {
			t.Fatalf("after %d failures blocked for %v, want (0, %v]", rate.Limit, w, interval)
		}
		// Asking does not count: still blocked for no longer.
		if again := blocked(t, l, "k"); again <= 0 || again > w {
			t.Fatalf("second ask %v after %v", again, w)
		}
		if w := blocked(t, l, "other"); w != 0 {
			t.Fatalf("another key is blocked for %v", w)
		}
	})

	t.Run("OneMoreFitsAfterTheWait", func(t *testing.T) {
		l := newLimiter(t)
		fail(t, l, "k", rate.Limit)
		w := blocked(t, l, "k")
		time.Sleep(w + 20*time.Millisecond)
		if w := blocked(t, l, "k"); w != 0 {
			t.Fatalf("still blocked for %v after waiting", w)
		}
		fail(t, l, "k", 1)
		if w := blocked(t, l, "k"); w <= 0 {
			t.Fatalf("not blocked again after the failure that refilled the window")
		}
	})

	t.Run("FailuresBeyondTheLimitDoNotExtendIt", func(t *testing.T) {
		l := newLimiter(t)
		fail(t, l, "k", 10*rate.Limit)
		if w := blocked(t, l, "k"); w > rate.Period/time.Duration(rate.Limit) {
			t.Fatalf("blocked for %v: failures past the limit must not push the window out", w)
		}
	})

	if o.Shared {
		t.Run("ReplicasShareCounts", func(t *testing.T) {
			a, b := newLimiter(t), newLimiter(t)
			fail(t, a, "k", rate.Limit)
			if w := blocked(t, b, "k"); w <= 0 {
				t.Fatal("a failure counted on one replica is not seen by another")
			}
		})
	}
}
