package porttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunRateLimiter runs the core.RateLimiter contract against limiters made
// by newLimiter, which read their time from now (a Clock the suite moves;
// nil: the adapter's own clock); each subtest gets a fresh limiter.
func RunRateLimiter(t *testing.T, newLimiter func(t *testing.T, now func() time.Time) core.RateLimiter, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	// One more every 12 s once used up. The period is long: the suite's
	// clock is moved by hand, and a Redis key expires in real time.
	rate := core.Rate{Limit: 5, Period: time.Minute}
	interval := rate.Period / time.Duration(rate.Limit)

	allow := func(t *testing.T, l core.RateLimiter, key string, r core.Rate) core.RateDecision {
		t.Helper()
		d, err := l.Allow(ctx, key, r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	useUp := func(t *testing.T, l core.RateLimiter, key string) {
		t.Helper()
		for i := range rate.Limit {
			d := allow(t, l, key, rate)
			if !d.Allowed || d.Limit != rate.Limit || d.Remaining != rate.Limit-1-i || d.ResetAfter <= 0 || d.ResetAfter > rate.Period {
				t.Fatalf("event %d of %d: %+v", i+1, rate.Limit, d)
			}
		}
	}

	t.Run("TheWholeLimitThenRefused", func(t *testing.T) {
		l := newLimiter(t, NewClock().Now)
		useUp(t, l, "k")
		d := allow(t, l, "k", rate)
		if d.Allowed || d.Remaining != 0 || d.RetryAfter <= 0 || d.RetryAfter > interval {
			t.Fatalf("past the limit: %+v, want refused with a wait in (0, %v]", d, interval)
		}
		if d := allow(t, l, "other", rate); !d.Allowed || d.Remaining != rate.Limit-1 {
			t.Fatalf("another key: %+v", d)
		}
	})

	t.Run("OneMoreFitsAfterTheWait", func(t *testing.T) {
		c := NewClock()
		l := newLimiter(t, c.Now)
		useUp(t, l, "k")
		refused := allow(t, l, "k", rate)
		// Refused events do not count: the wait does not grow.
		if again := allow(t, l, "k", rate); again.Allowed || again.RetryAfter > refused.RetryAfter {
			t.Fatalf("asked again: %+v after %+v", again, refused)
		}
		c.Advance(refused.RetryAfter)
		if d := allow(t, l, "k", rate); !d.Allowed {
			t.Fatalf("refused after waiting %v: %+v", refused.RetryAfter, d)
		}
		if d := allow(t, l, "k", rate); d.Allowed {
			t.Fatalf("two fit after one interval: %+v", d)
		}
		c.Advance(rate.Period)
		useUp(t, l, "k") // a whole period on, the whole limit again
	})

	// A large limit is kept exactly, however the adapter counts.
	large := core.Rate{Limit: 1000, Period: time.Hour}
	t.Run("LargeLimitsExactly", func(t *testing.T) {
		l := newLimiter(t, NewClock().Now)
		for i := range large.Limit {
			d := allow(t, l, "k", large)
			if !d.Allowed || d.Remaining != large.Limit-1-i {
				t.Fatalf("event %d: %+v", i+1, d)
			}
		}
		if d := allow(t, l, "k", large); d.Allowed {
			t.Fatalf("past a large limit: %+v", d)
		}
	})

	// Sparse requests use no more than they are: 1200 a minute, one
	// request every 300 ms (180 a minute) for 100 s, then 50 at once,
	// all admitted with nearly the whole limit left (on two replicas
	// taking turns when shared).
	t.Run("SparseRequestsThenABurst", func(t *testing.T) {
		c := NewClock()
		replicas := []core.RateLimiter{newLimiter(t, c.Now)}
		if o.Shared {
			replicas = append(replicas, newLimiter(t, c.Now))
		}
		r := core.Rate{Limit: 1200, Period: time.Minute}
		n := 0
		for range 100 * time.Second / (300 * time.Millisecond) {
			d := allow(t, replicas[n%len(replicas)], "k", r)
			n++
			if !d.Allowed || d.Remaining < r.Limit-2 {
				t.Fatalf("sparse request %d: %+v, want admitted with nearly %d left", n, d, r.Limit)
			}
			c.Advance(300 * time.Millisecond)
		}
		var (
			mu    sync.Mutex
			least = r.Limit
			wg    sync.WaitGroup
		)
		for i := range 50 {
			wg.Go(func() {
				d, err := replicas[i%len(replicas)].Allow(ctx, "k", r)
				if err != nil || !d.Allowed {
					t.Errorf("burst request %d: %+v %v", i+1, d, err)
					return
				}
				mu.Lock()
				least = min(least, d.Remaining)
				mu.Unlock()
			})
		}
		wg.Wait()
		// What a replica holds for its next requests may not show.
		if want := r.Limit - 50 - len(replicas)*r.Limit/100; least < want {
			t.Fatalf("after the burst: %d left, want at least %d", least, want)
		}
		d := allow(t, replicas[0], "k", r)
		if !d.Allowed {
			t.Fatalf("after the burst: %+v", d)
		}
	})

	// Dense requests get the whole limit and no more, then one more per
	// interval, however the adapter counts.
	t.Run("DenseRequestsGetTheLimitAMinute", func(t *testing.T) {
		c := NewClock()
		replicas := []core.RateLimiter{newLimiter(t, c.Now)}
		if o.Shared {
			replicas = append(replicas, newLimiter(t, c.Now))
		}
		r := core.Rate{Limit: 1200, Period: time.Minute}
		admitted := 0
		// Two minutes of 40 requests a second (2400 a minute): the limit
		// at once, then 20 a second.
		for i := range 2 * 60 * 40 {
			if allow(t, replicas[i%len(replicas)], "k", r).Allowed {
				admitted++
			}
			c.Advance(25 * time.Millisecond)
		}
		// What replicas hold at the end may still be unused.
		if want := r.Limit + 2*60*20; admitted > want || admitted < want-len(replicas)*r.Limit/100-1 {
			t.Fatalf("two minutes of dense requests: %d admitted, want %d", admitted, want)
		}
	})

	t.Run("OwnClock", func(t *testing.T) {
		l := newLimiter(t, nil)
		useUp(t, l, "k")
		if d := allow(t, l, "k", rate); d.Allowed || d.RetryAfter <= 0 || d.RetryAfter > interval {
			t.Fatalf("past the limit: %+v", d)
		}
	})

	if o.Shared {
		t.Run("ReplicasShareALargeLimit", func(t *testing.T) {
			c := NewClock()
			replicas := []core.RateLimiter{newLimiter(t, c.Now), newLimiter(t, c.Now)}
			admitted, refused := 0, 0
			for i := 0; refused < 2; i++ {
				if allow(t, replicas[i%2], "k", large).Allowed {
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
			c := NewClock()
			a, b := newLimiter(t, c.Now), newLimiter(t, c.Now)
			useUp(t, a, "k")
			if d := allow(t, b, "k", rate); d.Allowed {
				t.Fatal("events counted on one replica are not seen by another")
			}
		})
	}
}
