// Package porttest holds one contract test suite per core port. Every
// adapter of a port runs the same suite, so the in-process and the Redis
// adapters cannot drift apart.
package porttest

import (
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
