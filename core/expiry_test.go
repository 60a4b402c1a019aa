package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// downScheduler is a scheduler whose backend is down: nothing it is asked
// to schedule ever fires.
type downScheduler struct{}

func (downScheduler) Schedule(context.Context, string, time.Time) error {
	return errors.New("scheduler down")
}
func (downScheduler) Cancel(context.Context, string) error { return errors.New("scheduler down") }
func (downScheduler) Run(ctx context.Context, _ func(context.Context, string)) error {
	<-ctx.Done()
	return nil
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// count is how many events of type t about uid the log holds.
func (f lapseFixture) count(t core.EventType, uid string) int {
	events, _, err := f.store.ReadEvents(context.Background(), core.EventQuery{Limit: 1 << 20})
	if err != nil {
		panic(err)
	}
	n := 0
	for _, e := range events {
		if e.Type == t && e.UID == uid {
			n++
		}
	}
	return n
}

type lapseFixture struct {
	svc      *core.MountService
	clock    *fakeClock
	store    *memory.Store
	waker    *memory.Waker
	a, b     core.Principal
	window   time.Duration
	accounts *core.AccountService
}

// newLapseFixture is a MountService on the in-memory store (the storage
// contract suite holds it to the database's semantics), a scheduler that
// never fires and a clock moved by hand: no database, no sleep.
func newLapseFixture(t *testing.T) lapseFixture {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	waker := memory.NewWaker()
	const window = 10 * time.Minute
	svc := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: waker, Window: core.AssociationWindow(window), Logger: logger})
	clock := &fakeClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	svc.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	principal := func(name string) core.Principal {
		acc, err := accounts.Create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
			Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	}
	return lapseFixture{svc: svc, clock: clock, store: store, waker: waker, a: principal("A"), b: principal("B"), window: window, accounts: accounts}
}

// TestLapsedIdleCountsAsInactive: with the scheduler down, an IDLE mount
// whose window passed counts as INACTIVE for claim, listing and GET, and
// the sweep expires what the scheduler never fired.
func TestLapsedIdleCountsAsInactive(t *testing.T) {
	ctx := context.Background()
	f := newLapseFixture(t)
	listed := func(p core.Principal) int {
		t.Helper()
		_, pg, err := f.svc.ListMounts(ctx, p, core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		return pg.TotalItems
	}
	if _, err := f.svc.RequestAssociation(ctx, f.a, "L1", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RequestAssociation(ctx, f.a, "L2", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if n := listed(f.a); n != 2 {
		t.Fatalf("inside the window A lists %d mounts, want 2", n)
	}
	// Another account inside the window: 409.
	if _, err := f.svc.RequestAssociation(ctx, f.b, "L1", core.MountFields{}); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("B's claim inside the window: %v", err)
	}

	f.clock.Advance(f.window)
	// At the deadline the window has passed (confirm needs deadline > now).
	if n := listed(f.a); n != 0 {
		t.Fatalf("after the window A lists %d mounts, want 0", n)
	}
	if _, err := f.svc.Mount(ctx, f.a, "L2"); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("GET of a lapsed mount: %v, want %s", err, core.CodeMountNotFound)
	}
	if f.count(core.EventAssociationExpired, "L2") != 1 {
		t.Fatalf("the GET that found L2 lapsed did not expire it")
	}
	// B claims L1 the worker never expired.
	if _, err := f.svc.RequestAssociation(ctx, f.b, "L1", core.MountFields{}); err != nil {
		t.Fatalf("B's claim after the window: %v", err)
	}
	if f.count(core.EventAssociationExpired, "L1") != 1 {
		t.Fatalf("A was not told its association of L1 expired")
	}
	if _, err := f.svc.ConfirmAssociation(ctx, f.b, "L1"); err != nil {
		t.Fatalf("B confirms: %v", err)
	}
	if _, err := f.svc.ConfirmAssociation(ctx, f.a, "L1"); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("A confirms B's mount: %v", err)
	}

	// The sweep catches windows nobody touched.
	if _, err := f.svc.RequestAssociation(ctx, f.a, "L3", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if n, err := f.svc.SweepLapsed(ctx); err != nil || n != 0 {
		t.Fatalf("sweep inside the window: %d, %v", n, err)
	}
	f.clock.Advance(f.window + time.Millisecond)
	if n, err := f.svc.SweepLapsed(ctx); err != nil || n != 1 {
		t.Fatalf("sweep after the window: %d, %v; want 1", n, err)
	}
	if f.count(core.EventAssociationExpired, "L3") != 1 {
		t.Fatalf("the sweep did not expire L3")
	}
	if _, err := f.svc.ConfirmAssociation(ctx, f.a, "L3"); core.ErrorCode(err) != core.CodeAssociationExpired {
		t.Fatalf("A's late confirm: %v, want %s", err, core.CodeAssociationExpired)
	}
	// A lapsed mount refuses reports, updates and commands as INACTIVE.
	if _, err := f.svc.RequestAssociation(ctx, f.a, "L4", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(f.window)
	if _, err := f.svc.ReportStates(ctx, f.a, "L4", []core.StateInput{{Code: "BATTERY_LEVEL", Value: "50", OccurredAt: f.clock.Now().Add(-time.Second), HasOccurredAt: true}}, nil); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("report on a lapsed mount: %v", err)
	}
	name := "x"
	if _, err := f.svc.UpdateMount(ctx, f.a, "L4", core.MountUpdate{Name: &name}); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("update of a lapsed mount: %v", err)
	}

}

// flakyMounts is the in-memory store whose ExpireAssociation fails while
// failures remain (a busy or failing-over database).
type flakyMounts struct {
	*memory.Store
	mu       sync.Mutex
	failures int
}

func (m *flakyMounts) ExpireAssociation(ctx context.Context, uid string, now time.Time, e *core.Event) (core.Mount, bool, error) {
	m.mu.Lock()
	fail := m.failures > 0
	if fail {
		m.failures--
	}
	m.mu.Unlock()
	if fail {
		return core.Mount{}, false, errors.New("connection reset by peer")
	}
	return m.Store.ExpireAssociation(ctx, uid, now, e)
}

// handScheduler fires the deadlines a test hands it, and tells each one
// scheduled.
type handScheduler struct {
	fire      chan string
	scheduled chan time.Time
}

func (s handScheduler) Schedule(_ context.Context, _ string, at time.Time) error {
	s.scheduled <- at
	return nil
}
func (s handScheduler) Cancel(context.Context, string) error { return nil }
func (s handScheduler) Run(ctx context.Context, fire func(context.Context, string)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case uid := <-s.fire:
			fire(ctx, uid)
		}
	}
}

// TestFailedExpiryIsRetried: the scheduler hands a deadline out once; an
// expiry that fails (the database busy) schedules it again ExpiryRetry
// later instead of leaving the lapsed mount IDLE, and its
// ASSOCIATION_EXPIRED unsent, until the next sweep (SweepEvery).
func TestFailedExpiryIsRetried(t *testing.T) {
	ctx := t.Context()
	store := &flakyMounts{Store: memory.NewStore()}
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sched := handScheduler{fire: make(chan string), scheduled: make(chan time.Time, 16)}
	svc := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: sched,
		Waker: memory.NewWaker(), Window: core.AssociationWindow(time.Minute), Logger: slog.New(slog.DiscardHandler)})
	clock := &fakeClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	svc.SetClock(clock.Now)
	acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	p := core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
		Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	if _, err := svc.RequestAssociation(ctx, p, "X1", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	<-sched.scheduled
	clock.Advance(time.Minute)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunExpiry(runCtx) }()
	defer func() { stop(); <-done }()
	<-sched.scheduled // RecoverDeadlines
	expired := func() int {
		events, _, _ := store.ReadEvents(ctx, core.EventQuery{AccountID: acc.AccountID, Types: []core.EventType{core.EventAssociationExpired}, Limit: 10})
		return len(events)
	}

	store.mu.Lock()
	store.failures = 1
	store.mu.Unlock()
	sched.fire <- "X1"
	select {
	case at := <-sched.scheduled:
		if want := clock.Now().Add(core.ExpiryRetry); !at.Equal(want) {
			t.Fatalf("retry at %s, want %s", at, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed expiry was dropped: nothing scheduled again")
	}
	if n := expired(); n != 0 {
		t.Fatalf("%d ASSOCIATION_EXPIRED after a failed attempt", n)
	}
	clock.Advance(core.ExpiryRetry)
	sched.fire <- "X1"
	sched.fire <- "X1"   // a stale second firing: nothing left to do, nothing scheduled
	sched.fire <- "NONE" // once taken, the firing before it has ended
	if n := expired(); n != 1 {
		t.Fatalf("%d ASSOCIATION_EXPIRED after the retry, want 1", n)
	}
	select {
	case at := <-sched.scheduled:
		t.Fatalf("scheduled again at %s after a successful expiry", at)
	default:
	}
}
