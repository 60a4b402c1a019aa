package core_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// eventService starts a feed over the fixture's log and returns the event
// rules on it; both stop with the test.
func (f lapseFixture) eventService(t *testing.T) *core.EventService {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	feed := core.NewEventFeed(f.store, f.waker, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return core.NewEventService(feed, f.store, f.svc, slog.New(slog.DiscardHandler))
}

func (f lapseFixture) report(t *testing.T, uid, value string) {
	t.Helper()
	if _, err := f.svc.ReportStates(context.Background(), f.a, uid, []core.StateInput{{Code: "BATTERY_LEVEL", Value: value,
		OccurredAt: f.clock.Now().Add(-time.Second), HasOccurredAt: true}}, nil); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Millisecond)
}

func receiveEvent(t *testing.T, ch <-chan core.Event) core.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("event stream closed")
		}
		return e
	case <-time.After(30 * time.Second):
		t.Fatal("no event within 30s")
	}
	return core.Event{}
}

// TestSubscriptionRights: a subscriber sees the events of what it may see
// and asked for, nothing else; a named mount it cannot reach is refused.
func TestSubscriptionRights(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx := t.Context()
	for _, uid := range []string{"S1", "S2"} {
		mustOK(t, f.requestErr(ctx, uid))
	}
	rider := f.a
	rider.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"S1"}, Scopes: []string{}}

	for _, tc := range []struct {
		name string
		p    core.Principal
		f    core.EventFilter
		want core.Code
	}{
		{"owner, a mount of another account", f.b, core.EventFilter{MountUIDs: []string{"S1"}}, core.CodeMountNotFound},
		{"rider, a mount outside its items", rider, core.EventFilter{MountUIDs: []string{"S2"}}, core.CodeMountNotFound},
		{"rider, its mount", rider, core.EventFilter{MountUIDs: []string{"S1"}}, ""},
		{"owner, more mounts than a subscription names", f.a, core.EventFilter{MountUIDs: slices.Repeat([]string{"S1"}, core.MaxSubscribedMounts+1)}, core.CodeValidation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := events.Authorize(ctx, tc.p, tc.f); tc.want == "" && err != nil || tc.want != "" && core.ErrorCode(err) != tc.want {
				t.Fatalf("Authorize = %v, want %q", err, tc.want)
			}
		})
	}
	stream, err := events.Subscribe(ctx, rider, core.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	f.report(t, "S2", "50")
	f.report(t, "S1", "51")
	if e := receiveEvent(t, stream); e.UID != "S1" || e.Type != core.EventStatesReported {
		t.Fatalf("the rider got %s of %s", e.Type, e.UID)
	}
	// The feed, REST's view of the log, holds to the same rights.
	page, err := events.Events(ctx, rider, core.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range page.Events {
		if e.UID != "S1" {
			t.Fatalf("the rider's feed shows %s of %s", e.Type, e.UID)
		}
	}
	page, err = events.Events(ctx, f.b, core.EventsRequest{})
	if err != nil || len(page.Events) != 0 {
		t.Fatalf("another account's feed: %d events, %v", len(page.Events), err)
	}
}

// TestSubscriptionResumes: with a cursor, a subscriber gets every event
// after it from the log, then live ones, each once and in log order,
// including events appended while the replay ran.
func TestSubscriptionResumes(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx := t.Context()
	mustOK(t, f.requestErr(ctx, "R1"))
	for i := range 1200 { // more than one page of the log
		f.report(t, "R1", strconv.Itoa(i%100))
	}
	all, err := events.Events(ctx, f.a, core.EventsRequest{Limit: ptr(1000)})
	if err != nil {
		t.Fatal(err)
	}
	from := all.Events[10].ID
	stream, err := events.Subscribe(ctx, f.a, core.EventFilter{After: &from})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range 50 {
			f.report(t, "R1", strconv.Itoa(i))
		}
	}()
	last := from
	for n := 0; n < 1201-11+50; n++ { // the request, 1,200 reports, 50 more
		e := receiveEvent(t, stream)
		if !last.Before(e.ID) {
			t.Fatalf("event %d: %v does not follow %v (duplicate or out of order)", n, e.ID, last)
		}
		last = e.ID
	}
	select {
	case e := <-stream:
		t.Fatalf("an extra event %v", e.ID)
	case <-time.After(100 * time.Millisecond):
	}
	if n := f.count(core.EventStatesReported, "R1"); n != 1250 {
		t.Fatalf("the log holds %d reports, want 1250", n)
	}
}

// TestEventsPaging: limit, next, types and mount filters; next never goes
// back; a long poll answers when an event arrives, or with next unchanged.
func TestEventsPaging(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx := t.Context()
	mustOK(t, f.requestErr(ctx, "P1"))
	mustOK(t, f.requestErr(ctx, "P2"))
	f.report(t, "P1", "10")
	f.report(t, "P2", "20")
	f.report(t, "P1", "30")

	page, err := events.Events(ctx, f.a, core.EventsRequest{Limit: ptr(2)})
	if err != nil || len(page.Events) != 2 || page.Events[0].Type != core.EventAssociationRequested {
		t.Fatalf("first page: %+v, %v", page.Events, err)
	}
	page, err = events.Events(ctx, f.a, core.EventsRequest{After: &page.Next, Limit: ptr(100)})
	if err != nil || len(page.Events) != 3 {
		t.Fatalf("second page: %d events, %v", len(page.Events), err)
	}
	if s := page.Events[2].States; len(s) != 1 || s[0].Value != "30" || page.Events[2].Mount.Latest.BatteryLevel == nil {
		t.Fatalf("the report's event lacks its states or the mount's latest values: %+v", page.Events[2])
	}
	uid := "P1"
	page, err = events.Events(ctx, f.a, core.EventsRequest{Types: []core.EventType{core.EventStatesReported}, MountUID: &uid})
	if err != nil || len(page.Events) != 2 {
		t.Fatalf("filtered: %d events, %v", len(page.Events), err)
	}
	end := page.Next

	// Nothing follows: with or without a wait, no event and the cursor
	// unmoved, also where the filters leave out what does follow.
	f.report(t, "P2", "35")
	for _, r := range []core.EventsRequest{
		{After: &end, Types: []core.EventType{core.EventStatesReported}, MountUID: &uid},
		{After: &end, Types: []core.EventType{core.EventStatesReported}, MountUID: &uid, Wait: 50 * time.Millisecond},
	} {
		page, err = events.Events(ctx, f.a, r)
		if err != nil || len(page.Events) != 0 || page.Next != end {
			t.Fatalf("nothing follows (wait %v): %+v, %v; want no event and next = after", r.Wait, page, err)
		}
	}
	// A rider naming a mount outside its items is told it does not exist.
	rider := f.a
	rider.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"P2"}, Scopes: []string{}}
	if _, err := events.Events(ctx, rider, core.EventsRequest{MountUID: &uid}); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("a rider filtering by a mount outside its items: %v, want MOUNT_NOT_FOUND", err)
	}
	if page, err = events.Events(ctx, f.a, core.EventsRequest{After: &end}); err != nil || len(page.Events) != 1 {
		t.Fatalf("after the filtered reads: %+v, %v", page, err)
	}
	end = page.Next
	// An event during the wait ends it.
	go func() { time.Sleep(20 * time.Millisecond); f.report(t, "P2", "40") }()
	page, err = events.Events(ctx, f.a, core.EventsRequest{After: &end, Wait: 5 * time.Second})
	if err != nil || len(page.Events) != 1 || page.Events[0].UID != "P2" {
		t.Fatalf("wait: %+v, %v", page, err)
	}

	// tail=N: the last N events the caller may see, oldest first, next
	// after the last of them; filters apply before the count.
	all, err := events.Events(ctx, f.a, core.EventsRequest{Limit: ptr(1000)})
	if err != nil {
		t.Fatal(err)
	}
	page, err = events.Events(ctx, f.a, core.EventsRequest{Tail: ptr(2)})
	if err != nil || len(page.Events) != 2 || page.Events[0].ID != all.Events[len(all.Events)-2].ID ||
		page.Events[1].ID != all.Events[len(all.Events)-1].ID || page.Next != page.Events[1].ID {
		t.Fatalf("tail=2: %+v, %v; want the last two of %d, oldest first", page, err, len(all.Events))
	}
	page, err = events.Events(ctx, f.a, core.EventsRequest{Tail: ptr(2), Types: []core.EventType{core.EventStatesReported}, MountUID: &uid})
	if err != nil || len(page.Events) != 2 || page.Events[0].States[0].Value != "10" || page.Events[1].States[0].Value != "30" {
		t.Fatalf("tail=2 of P1's reports: %+v, %v", page.Events, err)
	}
	if page, err = events.Events(ctx, f.a, core.EventsRequest{Tail: ptr(1000)}); err != nil || len(page.Events) != len(all.Events) {
		t.Fatalf("tail=1000: %d events, %v; want all %d", len(page.Events), err, len(all.Events))
	}
	if page, err = events.Events(ctx, rider, core.EventsRequest{Tail: ptr(1000)}); err != nil || len(page.Events) == 0 {
		t.Fatalf("a rider's tail: %+v, %v", page, err)
	}
	for _, e := range page.Events {
		if e.UID != "P2" {
			t.Fatalf("a rider's tail shows %s's event", e.UID)
		}
	}
	bs, err := events.Events(ctx, f.b, core.EventsRequest{Tail: ptr(5)})
	if err != nil || len(bs.Events) != 0 {
		t.Fatalf("another account's tail: %+v, %v", bs, err)
	}
	first := all.Events[0].ID
	for _, tc := range []struct {
		name string
		r    core.EventsRequest
	}{
		{"tail 0", core.EventsRequest{Tail: ptr(0)}},
		{"tail 1001", core.EventsRequest{Tail: ptr(1001)}},
		{"tail with after", core.EventsRequest{Tail: ptr(5), After: &first}},
		{"tail with limit", core.EventsRequest{Tail: ptr(5), Limit: ptr(5)}},
		{"tail with wait", core.EventsRequest{Tail: ptr(5), Wait: time.Second}},
	} {
		_, err := events.Events(ctx, f.a, tc.r)
		var ce *core.Error
		if !errors.As(err, &ce) || ce.Code != core.CodeValidation || len(ce.Fields) != 1 || ce.Fields[0].Field != "tail" {
			t.Errorf("%s: %v, want VALIDATION_FAILED on tail", tc.name, err)
		}
	}

	for _, tc := range []struct {
		name string
		r    core.EventsRequest
	}{
		{"limit over the maximum", core.EventsRequest{Limit: ptr(1001)}},
		{"negative limit", core.EventsRequest{Limit: ptr(-1)}},
		{"wait over 30s", core.EventsRequest{Wait: 31 * time.Second}},
		{"unknown type", core.EventsRequest{Types: []core.EventType{"EXPLODED"}}},
	} {
		if _, err := events.Events(ctx, f.a, tc.r); core.ErrorCode(err) != core.CodeValidation {
			t.Errorf("%s: %v, want VALIDATION_FAILED", tc.name, err)
		}
	}
	codec := core.NewCursorCodec([32]byte{1})
	valid := codec.Encode(core.Cursor{Tx: 7, Seq: 42})
	raw := core.Cursor{Tx: 7, Seq: 42}.Internal()
	other := core.NewCursorCodec([32]byte{2}).Encode(core.Cursor{Tx: 7, Seq: 42})
	for _, s := range []string{"not-a-cursor", raw, other, valid[:len(valid)-1] + "A", "A" + valid[1:]} {
		if s == valid {
			continue
		}
		if _, err := codec.Decode(s); core.ErrorCode(err) != core.CodeValidation {
			t.Errorf("cursor %q: %v, want VALIDATION_FAILED", s, err)
		}
	}
	if c, err := codec.Decode(valid); err != nil || c != (core.Cursor{Tx: 7, Seq: 42}) || codec.Encode(c) != valid {
		t.Errorf("a cursor does not come back: %v %v", c, err)
	}
}

// TestCursorExpired: a cursor older than the retained log is refused by the
// feed and by a subscription; the head cursor stays good.
func TestCursorExpired(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx := t.Context()
	mustOK(t, f.requestErr(ctx, "X1"))
	first, err := events.Events(ctx, f.a, core.EventsRequest{})
	if err != nil || len(first.Events) != 1 {
		t.Fatalf("%+v, %v", first, err)
	}
	before := first.Events[0].ID
	var zero core.Cursor
	f.report(t, "X1", "1")
	f.clock.Advance(2 * time.Minute)
	f.report(t, "X1", "2")
	if n, err := f.store.PruneEvents(ctx, f.clock.Now().Add(-time.Minute), 100); err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	if _, err := events.Events(ctx, f.a, core.EventsRequest{After: &zero}); core.ErrorCode(err) != core.CodeCursorExpired {
		t.Fatalf("the zero cursor after pruning: %v, want CURSOR_EXPIRED", err)
	}
	if _, err := events.Subscribe(ctx, f.a, core.EventFilter{After: &before}); core.ErrorCode(err) != core.CodeCursorExpired {
		t.Fatalf("subscribing after a pruned event: %v, want CURSOR_EXPIRED", err)
	}
	page, err := events.Events(ctx, f.a, core.EventsRequest{})
	if err != nil || len(page.Events) != 1 || page.Events[0].States[0].Value != "2" {
		t.Fatalf("from the oldest retained: %+v, %v", page, err)
	}
}

// TestHeadIsTheAccountsOwn: the head a client starts a subscription
// from (GraphQL eventCursor) moves with its account's events only, never
// with another account's; a subscription from it misses none of its
// account's later events, and sees none before it.
func TestHeadIsTheAccountsOwn(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx := t.Context()
	empty, err := events.Head(ctx, f.a)
	if err != nil {
		t.Fatal(err)
	}
	// B's events move nothing of A's.
	if _, err := f.svc.RequestAssociation(ctx, f.b, "HB1", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if again, err := events.Head(ctx, f.a); err != nil || again != empty {
		t.Fatalf("A's head moved with B's event: %v, then %v (%v)", empty, again, err)
	}
	mustOK(t, f.requestErr(ctx, "HA1"))
	f.report(t, "HA1", "50")
	head, err := events.Head(ctx, f.a)
	if err != nil {
		t.Fatal(err)
	}
	page, err := events.Events(ctx, f.a, core.EventsRequest{})
	if err != nil || len(page.Events) != 2 || head != page.Events[1].ID {
		t.Fatalf("A's head %v after its events %+v (%v), want its last", head, page, err)
	}
	for i := range 3 {
		if _, err := f.svc.RequestAssociation(ctx, f.b, "HB"+strconv.Itoa(i+2), core.MountFields{}); err != nil {
			t.Fatal(err)
		}
	}
	if again, err := events.Head(ctx, f.a); err != nil || again != head {
		t.Fatalf("A's head moved with B's events: %v, then %v (%v)", head, again, err)
	}
	// A subscription from it gets A's next event, and nothing before.
	stream, err := events.Subscribe(ctx, f.a, core.EventFilter{After: &head})
	if err != nil {
		t.Fatal(err)
	}
	f.report(t, "HA1", "51")
	if e := receiveEvent(t, stream); e.Type != core.EventStatesReported || e.States[0].Value != "51" {
		t.Fatalf("after the head: %s %+v", e.Type, e.States)
	}
}

func (f lapseFixture) requestErr(ctx context.Context, uid string) error {
	_, err := f.svc.RequestAssociation(ctx, f.a, uid, core.MountFields{})
	return err
}

func ptr[T any](v T) *T { return &v }

// TestLongPollsPerToken: one token cannot take every long poll of its
// account: each token holds at most MaxWaitsPerToken, restricted tokens
// together at most MaxRestrictedWaitsPerAccount, so the owner keeps some.
func TestLongPollsPerToken(t *testing.T) {
	f := newLapseFixture(t)
	events := f.eventService(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	head, err := events.Events(ctx, f.a, core.EventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rider := func(token string) core.Principal {
		p := f.a
		p.TokenID = token
		p.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{}, Scopes: []string{}}
		return p
	}
	owner := f.a
	owner.TokenID = "owner"
	poll := func(p core.Principal) error {
		_, err := events.Events(ctx, p, core.EventsRequest{After: &head.Next, Wait: core.MaxEventWait})
		return err
	}
	held := 0
	// hold opens n long polls of p and waits until all are open.
	hold := func(p core.Principal, n int) {
		t.Helper()
		for range n {
			go func() { _ = poll(p) }()
		}
		held += n
		for deadline := time.Now().Add(30 * time.Second); events.OpenWaits(f.a.AccountID) < held; {
			if time.Now().After(deadline) {
				t.Fatalf("%d long polls open, want %d", events.OpenWaits(f.a.AccountID), held)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	hold(rider("r1"), core.MaxWaitsPerToken)
	if err := poll(rider("r1")); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("a token's long poll beyond %d: %v, want RATE_LIMITED", core.MaxWaitsPerToken, err)
	}
	for i := 2; held+core.MaxWaitsPerToken <= core.MaxRestrictedWaitsPerAccount; i++ {
		hold(rider("r"+strconv.Itoa(i)), core.MaxWaitsPerToken)
	}
	if err := poll(rider("other")); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("restricted long polls beyond %d: %v, want RATE_LIMITED", core.MaxRestrictedWaitsPerAccount, err)
	}
	// The owner's token still gets its long polls, up to the account's bound.
	hold(owner, core.MaxWaitsPerAccount-held)
	if err := poll(owner); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("the account's long poll beyond %d: %v, want RATE_LIMITED", core.MaxWaitsPerAccount, err)
	}
}

// laggingLog is the memory store's log as PostgreSQL shows it while an
// older transaction of the cluster is open: the events after frozen are
// committed (AccountNewest sees them) but not settled (reads, the feed
// and AccountHead stop at frozen), until AccountHead has been read
// unsettledReads more times (never when negative).
type laggingLog struct {
	*memory.Store
	mu             sync.Mutex
	frozen         *core.Cursor
	unsettledReads int
}

// hold freezes the settled log where it stands now, for reads more reads
// of the head.
func (l *laggingLog) hold(t *testing.T, reads int) {
	t.Helper()
	_, head, err := l.Store.ReadEvents(context.Background(), core.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.frozen, l.unsettledReads = &head, reads
	l.mu.Unlock()
}

func (l *laggingLog) settled() *core.Cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frozen
}

func (l *laggingLog) ReadEvents(ctx context.Context, q core.EventQuery) ([]core.Event, core.Cursor, error) {
	events, next, err := l.Store.ReadEvents(ctx, q)
	frozen := l.settled()
	if err != nil || frozen == nil {
		return events, next, err
	}
	n := 0
	for n < len(events) && !frozen.Before(events[n].ID) {
		n++
	}
	if n < len(events) || frozen.Before(next) {
		return events[:n], *frozen, nil
	}
	return events, next, nil
}

func (l *laggingLog) AccountHead(ctx context.Context, accountID string) (core.Cursor, error) {
	l.mu.Lock()
	switch {
	case l.frozen == nil, l.unsettledReads < 0:
	case l.unsettledReads == 0:
		l.frozen = nil // the older transaction ended
	default:
		l.unsettledReads--
	}
	l.mu.Unlock()
	head, err := l.Store.AccountHorizon(ctx, accountID)
	if err != nil {
		return core.Cursor{}, err
	}
	events, _, err := l.ReadEvents(ctx, core.EventQuery{AccountID: accountID, Limit: core.MaxEventPage})
	if err != nil {
		return core.Cursor{}, err
	}
	if len(events) > 0 {
		head = events[len(events)-1].ID
	}
	return head, nil
}

// laggingEventService is the event rules over a laggingLog of the
// fixture's store, with a clock moved by hand whose sleeps are recorded
// and move it.
func (f lapseFixture) laggingEventService(t *testing.T) (*core.EventService, *laggingLog, *[]time.Duration) {
	t.Helper()
	log := &laggingLog{Store: f.store}
	ctx, cancel := context.WithCancel(context.Background())
	feed := core.NewEventFeed(log, f.waker, slog.New(slog.DiscardHandler))
	done := make(chan struct{})
	go func() { defer close(done); _ = feed.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	events := core.NewEventService(feed, log, f.svc, slog.New(slog.DiscardHandler))
	var sleeps []time.Duration
	events.SetClock(f.clock.Now, func(ctx context.Context, d time.Duration) error {
		sleeps = append(sleeps, d)
		f.clock.Advance(d)
		return ctx.Err()
	})
	return events, log, &sleeps
}

// TestHeadWaitsForTheAccountsEventsToSettle: the head (GraphQL
// eventCursor) lies after the account's events committed before it was
// asked for, waiting with a backoff for an older transaction to end; it
// never hands out an unsettled position: past SettleWait it is the
// settled head, and a request ending stops the wait.
func TestHeadWaitsForTheAccountsEventsToSettle(t *testing.T) {
	// bound is every sleep up to SettleWait: 5 ms doubling to 100 ms, the
	// last one cut at the bound.
	var bound []time.Duration
	for d, total := 5*time.Millisecond, time.Duration(0); total < core.SettleWait; d = min(2*d, 100*time.Millisecond) {
		step := min(d, core.SettleWait-total)
		bound = append(bound, step)
		total += step
	}
	backoff := bound[:3]
	for _, tc := range []struct {
		name string
		// unsettledReads is how many reads of the head still find the
		// older transaction open (negative: it outlives the bound).
		unsettledReads int
		cancel         bool
		wantSettled    bool
		wantSleeps     []time.Duration
		wantErr        error
	}{
		{"settled at once", 0, false, true, nil, nil},
		{"settles after three reads", 3, false, true, backoff, nil},
		{"outlives the bound", -1, false, false, bound, nil},
		{"the request ends while waiting", -1, true, false, bound[:1], context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLapseFixture(t)
			events, log, sleeps := f.laggingEventService(t)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			mustOK(t, f.requestErr(ctx, "W1"))
			before, err := events.Head(ctx, f.a)
			if err != nil {
				t.Fatal(err)
			}
			log.hold(t, tc.unsettledReads)
			f.report(t, "W1", "40")
			newest, err := f.store.AccountNewest(ctx, f.a.AccountID)
			if err != nil || !before.Before(newest) {
				t.Fatalf("newest %v (%v) after the head %v", newest, err, before)
			}
			if tc.cancel {
				events.SetClock(f.clock.Now, func(_ context.Context, d time.Duration) error {
					*sleeps = append(*sleeps, d)
					cancel()
					return context.Canceled
				})
			}
			head, err := events.Head(ctx, f.a)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Head = %v, %v; want %v", head, err, tc.wantErr)
				}
			} else if want := map[bool]core.Cursor{true: newest, false: before}[tc.wantSettled]; err != nil || head != want {
				t.Fatalf("Head = %v, %v; want %v (settled head before the report %v, the report %v)", head, err, want, before, newest)
			}
			if !slices.Equal(*sleeps, tc.wantSleeps) {
				t.Fatalf("waited %v, want %v", *sleeps, tc.wantSleeps)
			}
		})
	}
}

// TestSubscriptionFromNowWaitsForTheAccountsEvents: a subscription
// without a cursor starts after the account's events committed before it,
// also while an older transaction keeps them unsettled: its first event is
// the one written after it, not an older one of the account.
func TestSubscriptionFromNowWaitsForTheAccountsEvents(t *testing.T) {
	f := newLapseFixture(t)
	events, log, sleeps := f.laggingEventService(t)
	ctx := t.Context()
	log.hold(t, 2)
	mustOK(t, f.requestErr(ctx, "N1")) // committed, not settled
	stream, err := events.Subscribe(ctx, f.a, core.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(*sleeps) != 2 {
		t.Fatalf("the subscription waited %v, want two reads of the head that found it unsettled", *sleeps)
	}
	f.report(t, "N1", "60")
	if e := receiveEvent(t, stream); e.Type != core.EventStatesReported {
		t.Fatalf("first event from now: %s %s, want the report written after subscribing", e.Type, e.UID)
	}
}
