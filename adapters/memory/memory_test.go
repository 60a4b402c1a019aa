package memory_test

import (
	"io"
	"log/slog"
	"testing"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/core"
)

// Memory instances share nothing, so the suites skip their multi-replica
// cases (Options.Shared stays false).

func TestStateCache(t *testing.T) {
	porttest.RunStateCache(t, func(*testing.T) core.StateCache { return memory.NewStateCache() })
}

func TestEventBus(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	porttest.RunEventBus(t, func(*testing.T) core.EventBus { return memory.NewEventBus(logger) })
}

func TestExpiryScheduler(t *testing.T) {
	porttest.RunExpiryScheduler(t, func(*testing.T) core.ExpiryScheduler { return memory.NewExpiryScheduler() })
}

func TestFailureLimiter(t *testing.T) {
	porttest.RunFailureLimiter(t, func(*testing.T) core.FailureLimiter { return memory.NewFailureLimiter() })
}

func TestEventBusClose(t *testing.T) {
	bus := memory.NewEventBus(nil)
	ch, err := bus.Subscribe(t.Context(), "acc1")
	if err != nil {
		t.Fatal(err)
	}
	bus.Close()
	if _, ok := <-ch; ok {
		t.Fatal("channel open after Close")
	}
	if _, err := bus.Subscribe(t.Context(), "acc1"); err != memory.ErrClosed {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if err := bus.Publish(t.Context(), core.Event{AccountID: "acc1"}); err != memory.ErrClosed {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
	bus.Close() // idempotent
}
