package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunFailureLimiter runs the core.FailureLimiter contract against limiters
// made by newLimiter; each subtest gets a fresh limiter.
//
// The contract is an exact sliding window: a key has at most Limit
// failures within any window of Period, and once it has Limit, Blocked
// waits until the oldest of them leaves the window. (GCRA, which these
// adapters once were, let one more through every Period/Limit: nearly
// twice the limit within one period.)
func RunFailureLimiter(t *testing.T, newLimiter func(t *testing.T) core.FailureLimiter, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	rate := core.Rate{Limit: 3, Period: 2 * time.Second}
	// slack is how far a wait may fall short of the one computed from the
	// test's sleeps: the time the calls themselves take (sleeps overrun
	// too, which only shortens waits).
	const slack = 250 * time.Millisecond

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

	// A step records fail failures of key (default "k"), then sleeps (or,
	// with pastWait, sleeps until just past what Blocked says), then asks
	// Blocked for key: want 0 means not blocked; otherwise the wait must
	// be within (want-slack, want] and never above the Period.
	type step struct {
		key      string
		fail     int
		sleep    time.Duration
		pastWait bool
		want     time.Duration
	}
	P := rate.Period
	cases := []struct {
		name  string
		steps []step
	}{
		{"BlockedForThePeriodOnceTheLimitIsReached", []step{
			{want: 0},                       // a fresh key
			{fail: rate.Limit - 1, want: 0}, // one short of the limit
			{fail: 1, want: P},              // full: the whole window, not Period/Limit
			{want: P},                       // asking does not count, and it stays blocked
			{key: "other", want: 0},
		}},
		{"ExactlyOneMoreFitsOnceTheOldestLeaves", []step{
			{fail: 1, sleep: 600 * time.Millisecond},
			{fail: rate.Limit - 1, want: P - 600*time.Millisecond},
			// GCRA would have let one more through by now.
			{sleep: 700 * time.Millisecond, want: P - 1300*time.Millisecond},
			{pastWait: true, want: 0}, // the oldest left the window
			// One more fits, and then the key is blocked again until
			// the two failures of 600 ms leave.
			{fail: 1, want: 600 * time.Millisecond},
			{pastWait: true, want: 0},
			{fail: 1, want: 0}, // two in the window now
		}},
		{"SpreadFailuresBlockUntilTheFirstLeaves", []step{
			{fail: 1, sleep: 600 * time.Millisecond, want: 0},
			{fail: 1, sleep: 600 * time.Millisecond, want: 0},
			{fail: 1, want: P - 1200*time.Millisecond},
			{pastWait: true, want: 0},
			{fail: 1, want: 600 * time.Millisecond}, // until the second leaves
		}},
		{"KeysAreIndependent", []step{
			{key: "a", fail: rate.Limit, want: P},
			{key: "b", want: 0},
			{key: "b", fail: rate.Limit - 1, want: 0},
			{key: "a", want: P},
		}},
		{"FailuresBeyondTheLimitBlockAtMostAPeriod", []step{
			// Failures counted while blocked (a caller that could not
			// read the throttle) keep the newest Limit: the wait runs
			// from the last of them, never longer than the window.
			{fail: 10 * rate.Limit, want: P},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := newLimiter(t)
			for i, s := range c.steps {
				key := s.key
				if key == "" {
					key = "k"
				}
				fail(t, l, key, s.fail)
				if s.pastWait {
					s.sleep = blocked(t, l, key) + 20*time.Millisecond
				}
				time.Sleep(s.sleep)
				w := blocked(t, l, key)
				switch {
				case s.want == 0 && w != 0:
					t.Fatalf("step %d (%+v): blocked for %v, want not blocked", i, s, w)
				case s.want != 0 && (w <= s.want-slack || w > s.want || w > P):
					t.Fatalf("step %d (%+v): blocked for %v, want (%v, %v]", i, s, w, s.want-slack, s.want)
				}
			}
		})
	}

	if o.Shared {
		t.Run("ReplicasShareCounts", func(t *testing.T) {
			a, b := newLimiter(t), newLimiter(t)
			fail(t, a, "k", rate.Limit-1)
			if w := blocked(t, b, "k"); w != 0 {
				t.Fatalf("blocked for %v one short of the limit", w)
			}
			fail(t, b, "k", 1)
			if w := blocked(t, a, "k"); w <= 0 {
				t.Fatal("failures counted on two replicas do not add up")
			}
		})
	}
}
