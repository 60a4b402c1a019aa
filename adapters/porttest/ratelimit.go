package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunRateLimiter runs the core.RateLimiter contract against limiters made
// by newLimiter; each subtest gets a fresh limiter.
func RunRateLimiter(t *testing.T, newLimiter func(t *testing.T) core.RateLimiter, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	rate := core.Rate{Limit: 5, Period: 2 * time.Second} // one more every 400 ms once used up
	interval := rate.Period / time.Duration(rate.Limit)

	allow := func(t *testing.T, l core.RateLimiter, key string) core.RateDecision {
		t.Helper()
		d, err := l.Allow(ctx, key, rate)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	useUp := func(t *testing.T, l core.RateLimiter, key string) {
		t.Helper()
		for i := range rate.Limit {
			d := allow(t, l, key)
			if !d.Allowed || d.Limit != rate.Limit || d.Remaining != rate.Limit-1-i || d.ResetAfter <= 0 || d.ResetAfter > rate.Period {
				t.Fatalf("event %d of %d: %+v", i+1, rate.Limit, d)
			}
		}
	}

	t.Run("TheWholeLimitThenRefused", func(t *testing.T) {
		l := newLimiter(t)
		useUp(t, l, "k")
		d := allow(t, l, "k")
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > interval {
			t.Fatalf("past the limit: %+v, want refused with a wait in (0, %v]", d, interval)
		}
		if d := allow(t, l, "other"); !d.Allowed || d.Remaining != rate.Limit-1 {
			t.Fatalf("another key: %+v", d)
		}
	})

	t.Run("OneMoreFitsAfterTheWait", func(t *testing.T) {
		l := newLimiter(t)
		useUp(t, l, "k")
		refused := allow(t, l, "k")
		// Refused events do not count: the wait does not grow.
		if again := allow(t, l, "k"); again.Allowed || again.RetryAfter > refused.RetryAfter {
			t.Fatalf("asked again: %+v after %+v", again, refused)
		}
		time.Sleep(refused.RetryAfter + 20*time.Millisecond)
		if d := allow(t, l, "k"); !d.Allowed {
			t.Fatalf("refused after waiting %v: %+v", refused.RetryAfter, d)
		}
		if d := allow(t, l, "k"); d.Allowed {
			t.Fatalf("two fit after one interval: %+v", d)
		}
	})

	// A large limit is kept exactly, however the adapter counts.
	large := core.Rate{Limit: 1000, Period: time.Hour}
	t.Run("LargeLimitsExactly", func(t *testing.T) {
		l := newLimiter(t)
		for i := range large.Limit {
			d, err := l.Allow(ctx, "k", large)
			if err != nil || !d.Allowed || d.Remaining != large.Limit-1-i {
				t.Fatalf("event %d: %+v %v", i+1, d, err)
			}
		}
		if d, err := l.Allow(ctx, "k", large); err != nil || d.Allowed {
			t.Fatalf("past a large limit: %+v %v", d, err)
		}
	})

	if o.Shared {
		t.Run("ReplicasShareALargeLimit", func(t *testing.T) {
			replicas := []core.RateLimiter{newLimiter(t), newLimiter(t)}
			admitted, refused := 0, 0
			for i := 0; refused < 2; i++ {
				d, err := replicas[i%2].Allow(ctx, "k", large)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted, refused = admitted+1, 0
				} else {
					refused++
				}
				if i > 3*large.Limit {
					t.Fatal("never refused")
				}
			}
			if admitted != large.Limit {
				t.Fatalf("two replicas admitted %d, want the limit %d", admitted, large.Limit)
			}
		})
		t.Run("ReplicasShareCounts", func(t *testing.T) {
			a, b := newLimiter(t), newLimiter(t)
			useUp(t, a, "k")
			if d := allow(t, b, "k"); d.Allowed {
				t.Fatal("events counted on one replica are not seen by another")
			}
		})
	}
}
