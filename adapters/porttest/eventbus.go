package porttest

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunEventBus runs the core.EventBus contract against buses made by newBus;
// each subtest gets fresh instances. It assumes a per-subscriber buffer of
// fewer than 1000 events.
func RunEventBus(t *testing.T, newBus func(t *testing.T) core.EventBus, opts ...Options) {
	o := options(opts)
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	// event numbers the events of one mount through Mount.Name.
	event := func(account, uid string, seq int) core.Event {
		return core.Event{Type: core.EventStatesReported, UID: uid, AccountID: account,
			Mount:      core.Mount{UID: uid, Name: strconv.Itoa(seq), OwnerID: account},
			OccurredAt: base.Add(time.Duration(seq) * time.Millisecond)}
	}
	publish := func(t *testing.T, bus core.EventBus, e core.Event) {
		t.Helper()
		if err := bus.Publish(context.Background(), e); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	subscribe := func(t *testing.T, ctx context.Context, bus core.EventBus, account string) <-chan core.Event {
		t.Helper()
		ch, err := bus.Subscribe(ctx, account)
		if err != nil {
			t.Fatalf("Subscribe: %v", err)
		}
		return ch
	}

	t.Run("DeliversOwnAccountOnly", func(t *testing.T) {
		bus := newBus(t)
		a1 := subscribe(t, t.Context(), bus, "acc1")
		a1b := subscribe(t, t.Context(), bus, "acc1")
		a2 := subscribe(t, t.Context(), bus, "acc2")
		publish(t, bus, event("acc1", "m1", 0))
		publish(t, bus, event("acc2", "m2", 0))
		publish(t, bus, event("acc3", "m3", 0))
		publish(t, bus, event("acc1", "m1", 1))
		for _, ch := range []<-chan core.Event{a1, a1b} {
			expectEvent(t, ch, "m1", "0")
			expectEvent(t, ch, "m1", "1")
		}
		expectEvent(t, a2, "m2", "0")
		for _, ch := range []<-chan core.Event{a1, a1b, a2} {
			expectNothing(t, ch, 200*time.Millisecond)
		}
	})

	t.Run("EventRoundTrips", func(t *testing.T) {
		bus := newBus(t)
		ch := subscribe(t, t.Context(), bus, "acc1")
		want := fullEvent()
		publish(t, bus, want)
		got := receive(t, ch)
		if !got.OccurredAt.Equal(want.OccurredAt) || !got.Mount.IdleDeadline.Equal(want.Mount.IdleDeadline) ||
			len(got.States) != len(want.States) || !got.States[1].OccurredAt.Equal(want.States[1].OccurredAt) ||
			got.Mount.Latest.BatteryLevel == nil || *got.Mount.Latest.BatteryLevel != 87 {
			t.Fatalf("event changed in transit:\ngot  %+v\nwant %+v", got, want)
		}
		// Every exported field, compared through its JSON form (times by
		// their text, so a changed zone or precision shows too).
		g, _ := json.Marshal(got)
		w, _ := json.Marshal(want)
		if string(g) != string(w) {
			t.Fatalf("event changed in transit:\ngot  %s\nwant %s", g, w)
		}
	})

	t.Run("OrderPerMount", func(t *testing.T) {
		bus := newBus(t)
		c := collect(subscribe(t, t.Context(), bus, "acc1"))
		const n = 1000
		for i := range n {
			publish(t, bus, event("acc1", "m1", i))
			if (i+1)%100 == 0 { // pace below any sane buffer: this checks order, not speed
				waitFor(t, 10*time.Second, func() bool { return c.count() >= i+1 }, fmt.Sprintf("%d events", i+1))
			}
		}
		expectSequence(t, c.snapshot(), "m1", n)
	})

	t.Run("CancelClosesWithoutLeak", func(t *testing.T) {
		bus := newBus(t)
		publish(t, bus, event("nobody", "m0", 0)) // let lazy connections start first
		before := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		var chans []<-chan core.Event
		for i := range 20 {
			chans = append(chans, subscribe(t, ctx, bus, fmt.Sprintf("acc%d", i%3)))
		}
		publish(t, bus, event("acc1", "m1", 0))
		cancel()
		for _, ch := range chans {
			expectClosed(t, ch, 5*time.Second)
		}
		done, stop := context.WithCancel(context.Background())
		stop()
		expectClosed(t, subscribe(t, done, bus, "acc1"), 5*time.Second)
		waitFor(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before },
			fmt.Sprintf("goroutines back to %d", before))
		// The bus still works for new subscribers (of another account: the
		// event above may still be on its way).
		ch := subscribe(t, t.Context(), bus, "acc9")
		publish(t, bus, event("acc9", "m9", 1))
		expectEvent(t, ch, "m9", "1")
	})

	t.Run("SlowSubscriberDropped", func(t *testing.T) {
		bus := newBus(t)
		slow := subscribe(t, t.Context(), bus, "acc1") // never read until the end
		fast := collect(subscribe(t, t.Context(), bus, "acc1"))
		const n = 1000
		var slowest time.Duration
		for i := range n {
			start := time.Now()
			published := make(chan error, 1)
			go func() { published <- bus.Publish(context.Background(), event("acc1", "m1", i)) }()
			select {
			case err := <-published:
				if err != nil {
					t.Fatalf("Publish: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Publish blocked on the slow subscriber")
			}
			slowest = max(slowest, time.Since(start))
			if (i+1)%100 == 0 {
				waitFor(t, 10*time.Second, func() bool { return fast.count() >= i+1 }, fmt.Sprintf("%d events", i+1))
			}
		}
		if slowest > 2*time.Second {
			t.Errorf("a Publish took %v: it waited for the slow subscriber", slowest)
		}
		expectSequence(t, fast.snapshot(), "m1", n)
		if fast.isClosed() {
			t.Fatal("the subscriber that kept up was dropped")
		}
		// The slow one kept a prefix of the events, then its channel closed.
		var got []core.Event
		timeout := time.After(5 * time.Second)
		for open := true; open; {
			select {
			case e, ok := <-slow:
				if ok {
					got = append(got, e)
				}
				open = ok
			case <-timeout:
				t.Fatalf("slow subscriber not dropped (read %d events, channel still open)", len(got))
			}
		}
		if len(got) >= n {
			t.Fatalf("slow subscriber got all %d events: it was never dropped", n)
		}
		expectSequence(t, got, "m1", len(got))
	})

	t.Run("SharedInstances", func(t *testing.T) {
		if !o.Shared {
			t.Skip("instances of this adapter do not share a backend")
		}
		a, b := newBus(t), newBus(t)
		onA := collect(subscribe(t, t.Context(), a, "acc1"))
		onB := collect(subscribe(t, t.Context(), b, "acc1"))
		otherB := subscribe(t, t.Context(), b, "acc2")
		for i := range 50 {
			publish(t, a, event("acc1", "m1", i))
		}
		for i := range 50 {
			publish(t, b, event("acc1", "m2", i))
		}
		for _, c := range []*collector{onA, onB} {
			waitFor(t, 10*time.Second, func() bool { return c.count() >= 100 }, "100 events on each instance")
			var m1, m2 []core.Event
			for _, e := range c.snapshot() {
				if e.UID == "m1" {
					m1 = append(m1, e)
				} else {
					m2 = append(m2, e)
				}
			}
			expectSequence(t, m1, "m1", 50)
			expectSequence(t, m2, "m2", 50)
		}
		expectNothing(t, otherB, 200*time.Millisecond)
	})
}

// fullEvent sets every field an event can carry, to check that none is lost
// on the way.
func fullEvent() core.Event {
	at := time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)
	battery, temp, locked := 87, 41.5, true
	return core.Event{
		Type: core.EventAssociationConfirmed, UID: "m-full", AccountID: "acc1",
		Mount: core.Mount{
			UID: "m-full", Name: "Front rack", SerialNumber: "SN-1", MACAddress: "AA:BB:CC:DD:EE:FF",
			FirmwareRevision: "1.2.3", SoftwareRevision: "4.5.6", ModelNumber: "HX-9",
			State: core.StateAssociated, OwnerID: "acc1", ExpiredOwnerID: "acc0",
			IdleDeadline: at.Add(time.Minute), AssociatedAt: at.Add(-time.Hour),
			Key:       core.MountKey{ID: "key-1", PublicKey: []byte{0, 1, 2, 254, 255}, SealedPrivateKey: "sealed"},
			CreatedAt: at.Add(-48 * time.Hour), UpdatedAt: at,
			Latest: core.LatestStates{MountLocked: &locked, BatteryLevel: &battery, CPUTemperature: &temp,
				At: map[core.StateCode]time.Time{core.StateMountLocked: at, core.StateBatteryLevel: at.Add(-time.Second)}},
		},
		States: []core.StateEntry{
			{Code: core.StateMountLocked, Value: "1", OccurredAt: at, ReceivedAt: at.Add(time.Millisecond)},
			{Code: core.StateBatteryLevel, Value: "87", OccurredAt: at.Add(-time.Second), ReceivedAt: at},
		},
		OccurredAt: at,
	}
}

// collector reads a subscription in the background.
type collector struct {
	mu     sync.Mutex
	events []core.Event
	closed bool
}

func collect(ch <-chan core.Event) *collector {
	c := &collector{}
	go func() {
		for e := range ch {
			c.mu.Lock()
			c.events = append(c.events, e)
			c.mu.Unlock()
		}
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
	}()
	return c
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

func (c *collector) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *collector) snapshot() []core.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]core.Event(nil), c.events...)
}

func receive(t *testing.T, ch <-chan core.Event) core.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("channel closed, want an event")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	panic("unreachable")
}

func expectEvent(t *testing.T, ch <-chan core.Event, uid, name string) {
	t.Helper()
	if e := receive(t, ch); e.UID != uid || e.Mount.Name != name {
		t.Fatalf("got event %s#%s, want %s#%s", e.UID, e.Mount.Name, uid, name)
	}
}

// expectNothing checks that ch delivers nothing for a while.
func expectNothing(t *testing.T, ch <-chan core.Event, wait time.Duration) {
	t.Helper()
	select {
	case e, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event %s#%s for account %s", e.UID, e.Mount.Name, e.AccountID)
		}
		t.Fatal("channel closed unexpectedly")
	case <-time.After(wait):
	}
}

func expectClosed(t *testing.T, ch <-chan core.Event, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("channel still open after %v", timeout)
		}
	}
}

// expectSequence checks that events are uid's numbers 0..n-1 in order.
func expectSequence(t *testing.T, events []core.Event, uid string, n int) {
	t.Helper()
	if len(events) != n {
		t.Fatalf("got %d events of %s, want %d", len(events), uid, n)
	}
	for i, e := range events {
		if e.UID != uid || e.Mount.Name != strconv.Itoa(i) {
			t.Fatalf("event %d is %s#%s, want %s#%d: order not kept", i, e.UID, e.Mount.Name, uid, i)
		}
	}
}
