package dbread

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"
)

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestMemoryPins(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	pins := NewMemoryPins(c.now)
	ctx := context.Background()
	pinned := func(client string) bool {
		t.Helper()
		ok, err := pins.Pinned(ctx, client)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if pinned("a") {
		t.Fatal("a client that never wrote is pinned")
	}
	_ = pins.Pin(ctx, "a", 2*time.Second)
	c.t = c.t.Add(time.Second)
	_ = pins.Pin(ctx, "a", 500*time.Millisecond) // shorter: keeps the longer pin
	if !pinned("a") || pinned("b") {
		t.Fatal("want a pinned, b not")
	}
	c.t = c.t.Add(999 * time.Millisecond)
	if !pinned("a") {
		t.Fatal("a's pin ended early")
	}
	c.t = c.t.Add(time.Millisecond)
	if pinned("a") {
		t.Fatal("a's pin outlived its time")
	}
}

func TestMemoryPinsFull(t *testing.T) {
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	pins := NewMemoryPins(c.now)
	ctx := context.Background()
	for i := range maxMemoryPins {
		_ = pins.Pin(ctx, strconv.Itoa(i), time.Minute)
	}
	// No room: every client reads the primary until the refused pin ends.
	_ = pins.Pin(ctx, "late", time.Minute)
	if ok, _ := pins.Pinned(ctx, "never wrote"); !ok {
		t.Fatal("with the pins full, an unknown client may read a replica")
	}
	c.t = c.t.Add(time.Minute)
	_ = pins.Pin(ctx, "late", time.Second) // the expired ones make room
	if ok, _ := pins.Pinned(ctx, "late"); !ok {
		t.Fatal("late not pinned once there was room")
	}
	if ok, _ := pins.Pinned(ctx, "never wrote"); ok {
		t.Fatal("an unknown client still pinned after the pins emptied")
	}
}

type failingPins struct{}

func (failingPins) Pin(context.Context, string, time.Duration) error { return errors.New("down") }
func (failingPins) Pinned(context.Context, string) (bool, error)     { return false, errors.New("down") }

func TestPolicy(t *testing.T) {
	ctx := context.Background()
	var none *Policy
	if ReplicaAllowed(none.Read(ctx, "a")) {
		t.Error("without replicas a read was marked")
	}
	none.Write(ctx, "a") // no panic

	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	p := &Policy{Pins: NewMemoryPins(c.now), MaxLag: time.Second, RequestTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if !ReplicaAllowed(p.Read(ctx, "a")) {
		t.Error("a client that never wrote did not get a replica")
	}
	if ReplicaAllowed(p.Read(ctx, "")) {
		t.Error("a client without a token id got a replica")
	}
	p.Write(ctx, "a")
	c.t = c.t.Add(10*time.Second + 999*time.Millisecond)
	if ReplicaAllowed(p.Read(ctx, "a")) {
		t.Error("a read within the request timeout and the lag after a write got a replica")
	}
	if !ReplicaAllowed(p.Read(ctx, "b")) {
		t.Error("another client was pinned by a's write")
	}
	c.t = c.t.Add(time.Millisecond)
	if !ReplicaAllowed(p.Read(ctx, "a")) {
		t.Error("a stays pinned after its pin ended")
	}
	p.Pins = failingPins{}
	if ReplicaAllowed(p.Read(ctx, "a")) {
		t.Error("with the pins unreadable a read got a replica")
	}
}
