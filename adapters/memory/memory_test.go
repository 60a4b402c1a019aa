package memory_test

import (
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/core"
)

// Memory instances share nothing, so the suites skip their multi-replica
// cases (Options.Shared stays false).

func TestStateCache(t *testing.T) {
	porttest.RunStateCache(t, func(*testing.T) core.StateCache { return memory.NewStateCache() })
}

func TestEventWaker(t *testing.T) {
	porttest.RunEventWaker(t, func(*testing.T) core.EventWaker { return memory.NewWaker() })
}

func TestExpiryScheduler(t *testing.T) {
	porttest.RunExpiryScheduler(t, func(*testing.T) core.ExpiryScheduler { return memory.NewExpiryScheduler() })
}

func TestFailureLimiter(t *testing.T) {
	porttest.RunFailureLimiter(t, func(_ *testing.T, now func() time.Time) core.FailureLimiter {
		l := memory.NewFailureLimiter()
		if now != nil {
			l.WithClock(now)
		}
		return l
	})
}

func TestRateLimiter(t *testing.T) {
	porttest.RunRateLimiter(t, func(_ *testing.T, now func() time.Time) core.RateLimiter {
		l := memory.NewRateLimiter()
		if now != nil {
			l.WithClock(now)
		}
		return l
	})
}
