package porttest

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/internal/dbread"
)

// RunReadPins runs the dbread.Pins contract against pins made by newPins:
// a client is pinned from Pin for its duration and then no longer, pins are
// per client, and with Options.Shared a pin made through one instance is
// seen through another (replicas of mountd).
func RunReadPins(t *testing.T, newPins func(t *testing.T) dbread.Pins, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	pinned := func(t *testing.T, p dbread.Pins, client string) bool {
		t.Helper()
		ok, err := p.Pinned(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	t.Run("pinned for its duration, per client", func(t *testing.T) {
		p := newPins(t)
		if pinned(t, p, "writer") {
			t.Fatal("a client that never wrote is pinned")
		}
		if err := p.Pin(ctx, "writer", 300*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if !pinned(t, p, "writer") {
			t.Fatal("not pinned right after Pin")
		}
		if pinned(t, p, "reader") {
			t.Fatal("another client is pinned by the writer's pin")
		}
		deadline := time.Now().Add(5 * time.Second)
		for pinned(t, p, "writer") {
			if time.Now().After(deadline) {
				t.Fatal("a 300 ms pin still holds after 5 s")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("a new pin lengthens it", func(t *testing.T) {
		p := newPins(t)
		if err := p.Pin(ctx, "writer", 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := p.Pin(ctx, "writer", time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond)
		if !pinned(t, p, "writer") {
			t.Fatal("the minute's pin ended with the first one")
		}
	})
	if o.Shared {
		t.Run("shared", func(t *testing.T) {
			a, b := newPins(t), newPins(t)
			if err := a.Pin(ctx, "writer", time.Minute); err != nil {
				t.Fatal(err)
			}
			if !pinned(t, b, "writer") {
				t.Fatal("a pin made on one replica is not seen on another")
			}
		})
	}
}
