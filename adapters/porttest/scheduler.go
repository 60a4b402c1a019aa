package porttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunExpiryScheduler runs the core.ExpiryScheduler contract against
// schedulers made by newScheduler; each subtest gets fresh instances. Their
// poll interval should be well under a second.
func RunExpiryScheduler(t *testing.T, newScheduler func(t *testing.T) core.ExpiryScheduler, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	schedule := func(t *testing.T, s core.ExpiryScheduler, uid string, at time.Time) {
		t.Helper()
		if err := s.Schedule(ctx, uid, at); err != nil {
			t.Fatalf("Schedule(%s): %v", uid, err)
		}
	}
	cancel := func(t *testing.T, s core.ExpiryScheduler, uid string) {
		t.Helper()
		if err := s.Cancel(ctx, uid); err != nil {
			t.Fatalf("Cancel(%s): %v", uid, err)
		}
	}
	const timeout = 5 * time.Second

	t.Run("FiresAfterDeadline", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		at1 := time.Now().Add(250 * time.Millisecond)
		schedule(t, s, "u1", at1) // before Run starts
		rec.run(t, s)
		at2 := time.Now().Add(100 * time.Millisecond)
		schedule(t, s, "u2", at2) // while Run waits
		rec.expectFiredAfter(t, "u2", at2, timeout)
		rec.expectFiredAfter(t, "u1", at1, timeout)
		schedule(t, s, "sentinel", time.Now().Add(200*time.Millisecond))
		rec.wait(t, "sentinel", timeout)
		rec.expectCount(t, "u1", 1)
		rec.expectCount(t, "u2", 1)
	})

	t.Run("MoveLaterDelays", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		schedule(t, s, "u1", time.Now().Add(100*time.Millisecond))
		later := time.Now().Add(500 * time.Millisecond)
		schedule(t, s, "u1", later)
		rec.run(t, s)
		rec.expectFiredAfter(t, "u1", later, timeout)
		schedule(t, s, "sentinel", time.Now().Add(100*time.Millisecond))
		rec.wait(t, "sentinel", timeout)
		rec.expectCount(t, "u1", 1)
	})

	t.Run("MoveEarlier", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		schedule(t, s, "u1", time.Now().Add(time.Hour))
		rec.run(t, s)
		time.Sleep(50 * time.Millisecond) // let Run settle on the hour-long wait
		at := time.Now().Add(100 * time.Millisecond)
		schedule(t, s, "u1", at)
		rec.expectFiredAfter(t, "u1", at, timeout)
	})

	t.Run("CancelPreventsFiring", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		schedule(t, s, "before-run", time.Now().Add(100*time.Millisecond))
		cancel(t, s, "before-run")
		cancel(t, s, "never-scheduled")
		rec.run(t, s)
		schedule(t, s, "while-running", time.Now().Add(150*time.Millisecond))
		cancel(t, s, "while-running")
		// The sentinel is due after both, so their turn has passed when it fires.
		schedule(t, s, "sentinel", time.Now().Add(300*time.Millisecond))
		rec.wait(t, "sentinel", timeout)
		rec.expectCount(t, "before-run", 0)
		rec.expectCount(t, "while-running", 0)
	})

	t.Run("PastDeadlineFiresPromptly", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		rec.run(t, s)
		start := time.Now()
		schedule(t, s, "u1", start.Add(-time.Hour))
		rec.wait(t, "u1", timeout)
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("a past deadline took %v to fire", took)
		}
	})

	t.Run("OncePerScheduling", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		rec.run(t, s)
		schedule(t, s, "u1", time.Now().Add(-time.Second))
		rec.wait(t, "u1", timeout)
		schedule(t, s, "u1", time.Now().Add(-time.Second))
		waitFor(t, timeout, func() bool { return rec.count("u1") == 2 }, "the second firing")
		schedule(t, s, "sentinel", time.Now().Add(200*time.Millisecond))
		rec.wait(t, "sentinel", timeout)
		rec.expectCount(t, "u1", 2)
	})

	t.Run("TwoRunLoopsFireOnce", func(t *testing.T) {
		s, rec := newScheduler(t), newRecorder()
		rec.run(t, s)
		rec.run(t, s)
		expectEachOnce(t, rec, 100, func(i int) core.ExpiryScheduler { return s })
	})

	t.Run("SharedInstancesFireOnce", func(t *testing.T) {
		if !o.Shared {
			t.Skip("instances of this adapter do not share a backend")
		}
		a, b := newScheduler(t), newScheduler(t)
		rec := newRecorder()
		rec.run(t, a)
		rec.run(t, b)
		// Either instance may move or cancel what the other scheduled.
		schedule(t, a, "moved", time.Now().Add(time.Hour))
		schedule(t, b, "moved", time.Now().Add(-time.Second))
		schedule(t, a, "cancelled", time.Now().Add(200*time.Millisecond))
		cancel(t, b, "cancelled")
		expectEachOnce(t, rec, 200, func(i int) core.ExpiryScheduler { return []core.ExpiryScheduler{a, b}[i%2] })
		rec.expectCount(t, "moved", 1)
		rec.expectCount(t, "cancelled", 0)
	})
}

// expectEachOnce schedules n deadlines, from just past to 300ms ahead, on
// the schedulers that on(i) picks, and checks that each fires exactly once
// in total, not before its time.
func expectEachOnce(t *testing.T, rec *recorder, n int, on func(i int) core.ExpiryScheduler) {
	t.Helper()
	now := time.Now()
	ats := map[string]time.Time{}
	for i := range n {
		uid := fmt.Sprintf("bulk-%03d", i)
		ats[uid] = now.Add(time.Duration(i%35)*10*time.Millisecond - 50*time.Millisecond)
		if err := on(i).Schedule(context.Background(), uid, ats[uid]); err != nil {
			t.Fatalf("Schedule(%s): %v", uid, err)
		}
	}
	waitFor(t, 15*time.Second, func() bool { return rec.countPrefix("bulk-") >= n }, fmt.Sprintf("%d deadlines to fire", n))
	time.Sleep(500 * time.Millisecond) // room for duplicates to show
	for uid, at := range ats {
		rec.expectCount(t, uid, 1)
		rec.expectFiredAfter(t, uid, at, 0)
	}
	if got := rec.countPrefix("bulk-"); got != n {
		t.Fatalf("%d firings, want %d", got, n)
	}
}

// recorder collects the firings of one or more Run loops.
type recorder struct {
	mu    sync.Mutex
	fired map[string][]time.Time
}

func newRecorder() *recorder { return &recorder{fired: map[string][]time.Time{}} }

// run starts a Run loop; the test's cleanup stops it and checks that Run
// returns once its ctx ends.
func (r *recorder) run(t *testing.T, s core.ExpiryScheduler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(ctx context.Context, uid string) {
			r.mu.Lock()
			r.fired[uid] = append(r.fired[uid], time.Now())
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return within 5s of its ctx ending")
		}
	})
}

func (r *recorder) count(uid string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fired[uid])
}

func (r *recorder) countPrefix(prefix string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for uid, fs := range r.fired {
		if len(uid) >= len(prefix) && uid[:len(prefix)] == prefix {
			n += len(fs)
		}
	}
	return n
}

func (r *recorder) wait(t *testing.T, uid string, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, func() bool { return r.count(uid) > 0 }, uid+" to fire")
}

func (r *recorder) expectCount(t *testing.T, uid string, want int) {
	t.Helper()
	if got := r.count(uid); got != want {
		t.Fatalf("%s fired %d times, want %d", uid, got, want)
	}
}

// expectFiredAfter waits for uid's first firing and checks it was not early.
func (r *recorder) expectFiredAfter(t *testing.T, uid string, at time.Time, timeout time.Duration) {
	t.Helper()
	if timeout > 0 {
		r.wait(t, uid, timeout)
	}
	r.mu.Lock()
	fs := r.fired[uid]
	r.mu.Unlock()
	if len(fs) == 0 {
		t.Fatalf("%s did not fire", uid)
	}
	if fs[0].Before(at) {
		t.Fatalf("%s fired %v before its deadline", uid, at.Sub(fs[0]))
	}
}
