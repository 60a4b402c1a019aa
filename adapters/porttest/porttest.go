// Package porttest holds one contract test suite per core port. Every
// adapter of a port runs the same suite, so the in-process and the Redis
// adapters cannot drift apart.
package porttest

import (
	"sync"
	"testing"
	"time"
)

// Options adapt a suite to what an adapter can offer.
type Options struct {
	// Shared says that the factory, called twice within one test, returns
	// two instances over the same backend, as replicas sharing one Redis
	// prefix are. The multi-replica cases run only then.
	Shared bool
}

func options(opts []Options) Options {
	if len(opts) > 1 {
		panic("porttest: at most one Options")
	}
	if len(opts) == 1 {
		return opts[0]
	}
	return Options{}
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Clock is a clock a suite moves by hand. It starts at the real time, so
// that an adapter on Redis, whose keys expire in real time, keeps them.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at the real time, to the microsecond.
func NewClock() *Clock { return &Clock{t: time.Now().Truncate(time.Microsecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
