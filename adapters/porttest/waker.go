package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunEventWaker runs the core.EventWaker contract against wakers made by
// newWaker; each subtest gets fresh instances.
func RunEventWaker(t *testing.T, newWaker func(t *testing.T) core.EventWaker, opts ...Options) {
	o := options(opts)
	receive := func(t *testing.T, ch <-chan core.Cursor) core.Cursor {
		t.Helper()
		select {
		case c, ok := <-ch:
			if !ok {
				t.Fatal("wake-up channel closed")
			}
			return c
		case <-time.After(5 * time.Second):
			t.Fatal("no wake-up within 5s")
		}
		return core.Cursor{}
	}

	t.Run("WakesEveryListener", func(t *testing.T) {
		w := newWaker(t)
		a, err := w.Wakeups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		b, err := w.Wakeups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := core.Cursor{Tx: 7, Seq: 42}
		if err := w.Wake(t.Context(), want); err != nil {
			t.Fatal(err)
		}
		for _, ch := range []<-chan core.Cursor{a, b} {
			if got := receive(t, ch); got != want {
				t.Fatalf("woken with %v, want %v", got, want)
			}
		}
	})

	t.Run("ClosesWhenDone", func(t *testing.T) {
		w := newWaker(t)
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := w.Wakeups(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case _, ok := <-ch:
				if !ok {
					return
				}
			case <-deadline:
				t.Fatal("wake-up channel still open after its context ended")
			}
		}
	})

	// A change is committed before its wake-up: a caller gone by then (a
	// client that hung up) must not keep the event from the feeds.
	t.Run("WakesAfterTheCallerIsGone", func(t *testing.T) {
		w := newWaker(t)
		ch, err := w.Wakeups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		gone, cancel := context.WithCancel(t.Context())
		cancel()
		want := core.Cursor{Tx: 3, Seq: 9}
		if err := w.Wake(gone, want); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, ch); got != want {
			t.Fatalf("woken with %v, want %v", got, want)
		}
	})

	t.Run("NeverBlocksTheWriter", func(t *testing.T) {
		w := newWaker(t)
		if _, err := w.Wakeups(t.Context()); err != nil { // never read
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := range 10_000 {
				_ = w.Wake(context.Background(), core.Cursor{Seq: int64(i)})
			}
		}()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatal("Wake blocked on a listener that does not read")
		}
	})

	if !o.Shared {
		return
	}
	t.Run("CrossesInstances", func(t *testing.T) {
		a, b := newWaker(t), newWaker(t)
		ch, err := b.Wakeups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		want := core.Cursor{Tx: 1, Seq: 2}
		if err := a.Wake(t.Context(), want); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, ch); got != want {
			t.Fatalf("woken with %v, want %v", got, want)
		}
	})
}
