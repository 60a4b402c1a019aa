package core

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// FeedBuffer is how many events a live subscriber may lag behind before it
// is dropped; it lets a reader absorb a burst without slowing the feed.
const FeedBuffer = 256

// feedPage is how many events the feed reads from the log at once.
const feedPage = 500

// feedPoll is how often the feed reads the log without a wake-up, so that
// a wake-up lost (Redis down, a replica killed after its commit) delays
// events by at most this.
const feedPoll = time.Second

// EventFeed follows the event log for the whole process: one reader per
// replica, woken by the EventWaker (and polling), hands each account's
// events in log order to that account's live subscribers. Subscribers do
// not read the log themselves once live, so a thousand of them cost one
// read per batch of events.
type EventFeed struct {
	log    EventLog
	waker  EventWaker
	logger *slog.Logger

	mu      sync.Mutex
	started bool
	ready   chan struct{}
	pos     Cursor // everything up to here has been handed out
	lag     atomic.Int64
	subs    map[string]map[*feedSub]struct{}
	// kick makes the feed read at once (a subscriber attached to an idle
	// feed).
	kick chan struct{}
}

// feedSub is one live subscriber of an account.
type feedSub struct {
	accountID string
	from      Cursor // events at or before it are skipped
	// ch carries pointers: every subscriber of the account gets the same
	// event, read only. A buffer of FeedBuffer events by value was 116 KiB
	// per subscription, and each event was copied into each of them.
	ch     chan *Event
	closed bool
	// wakeOnly marks a long poll's subscriber (await): it only waits for
	// an event, then reads the log, so a full buffer ends it quietly as an
	// event would. Only a live stream that falls behind loses events.
	wakeOnly bool
}

// NewEventFeed returns a feed over the log; Run starts it.
func NewEventFeed(log EventLog, waker EventWaker, logger *slog.Logger) *EventFeed {
	if logger == nil {
		logger = slog.Default()
	}
	return &EventFeed{log: log, waker: waker, logger: logger, ready: make(chan struct{}),
		subs: map[string]map[*feedSub]struct{}{}, kick: make(chan struct{}, 1)}
}

// Run follows the log until ctx ends, then closes every subscriber.
func (f *EventFeed) Run(ctx context.Context) error {
	wakeups, err := f.waker.Wakeups(ctx)
	if err != nil {
		return err
	}
	// Start at the head: the feed hands out what follows its start;
	// subscribers with a cursor read what came before from the log.
	var head Cursor
	for {
		_, head, err = f.log.ReadEvents(ctx, EventQuery{})
		if err == nil {
			break
		}
		f.logger.WarnContext(ctx, "event feed cannot read the log; retrying", "err", err)
		select {
		case <-ctx.Done():
			f.closeAll()
			return nil
		case <-time.After(feedPoll):
		}
	}
	f.mu.Lock()
	f.pos, f.started = head, true
	close(f.ready)
	f.mu.Unlock()

	var wanted Cursor // the newest position announced and not yet read
	retry := time.Duration(0)
	poll := time.NewTimer(feedPoll)
	defer poll.Stop()
	for {
		var retryC <-chan time.Time
		if retry > 0 {
			retryC = time.After(retry)
		}
		select {
		case <-ctx.Done():
			f.closeAll()
			return nil
		case c := <-wakeups:
			if wanted.Before(c) {
				wanted = c
			}
		case <-poll.C:
			poll.Reset(feedPoll)
		case <-retryC:
		case <-f.kick:
		}
		f.mu.Lock()
		idle := len(f.subs) == 0
		f.mu.Unlock()
		if idle {
			// Nobody listens: the feed does not read (an idle replica costs
			// the database nothing) and catches up when someone attaches.
			retry = 0
			continue
		}
		if err := f.catchUp(ctx); err != nil {
			if ctx.Err() != nil {
				continue
			}
			f.logger.WarnContext(ctx, "event feed read failed", "err", err)
		}
		// An announced event not yet settled (an older transaction is
		// still in flight) is read again soon, backing off to the poll.
		f.mu.Lock()
		pending := f.pos.Before(wanted)
		f.mu.Unlock()
		switch {
		case !pending:
			retry = 0
		case retry == 0:
			retry = 2 * time.Millisecond
		case retry < feedPoll/4:
			retry *= 2
		}
	}
}

// catchUp reads every settled event after the feed's position and hands
// each to its account's subscribers.
func (f *EventFeed) catchUp(ctx context.Context) error {
	for {
		f.mu.Lock()
		pos := f.pos
		f.mu.Unlock()
		events, next, err := f.log.ReadEvents(ctx, EventQuery{After: &pos, Limit: feedPage})
		if err != nil {
			if ErrorCode(err) == CodeCursorExpired {
				// Retention outran the feed (it was stopped for longer than
				// the log keeps events): start again from the head.
				_, next, err = f.log.ReadEvents(ctx, EventQuery{})
				if err != nil {
					return err
				}
				f.mu.Lock()
				f.pos = next
				f.mu.Unlock()
				return nil
			}
			return err
		}
		f.mu.Lock()
		for i := range events {
			f.dispatchLocked(&events[i])
		}
		if f.pos.Before(next) {
			f.pos = next
		}
		f.mu.Unlock()
		if len(events) < feedPage {
			return nil
		}
	}
}

// Lag is how long after it occurred the newest event handed out by the
// feed was handed out: the delay from a change to this replica's
// subscribers (mountd_event_log_lag_seconds).
func (f *EventFeed) Lag() time.Duration { return time.Duration(f.lag.Load()) }

func (f *EventFeed) dispatchLocked(e *Event) {
	f.lag.Store(int64(time.Since(e.OccurredAt)))
	for s := range f.subs[e.AccountID] {
		if !s.from.Before(e.ID) {
			continue
		}
		select {
		case s.ch <- e:
		default:
			if !s.wakeOnly {
				f.logger.Warn("event subscriber too slow, dropping it", "account", e.AccountID, "buffer", cap(s.ch))
			}
			f.removeLocked(s)
		}
	}
}

// attach makes s live if the feed has handed out nothing after s.from
// that s has not seen; otherwise the caller reads the log on to a later
// cursor and tries again. It waits for the feed to start.
func (f *EventFeed) attach(ctx context.Context, s *feedSub) (bool, error) {
	select {
	case <-f.ready:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) == 0 {
		// An idle feed has read nothing anyone needs: it starts at the
		// first subscriber's cursor, now.
		if f.pos.Before(s.from) {
			f.pos = s.from
		}
		select {
		case f.kick <- struct{}{}:
		default:
		}
	}
	if s.from.Before(f.pos) {
		return false, nil
	}
	set, ok := f.subs[s.accountID]
	if !ok {
		set = map[*feedSub]struct{}{}
		f.subs[s.accountID] = set
	}
	set[s] = struct{}{}
	return true, nil
}

// position waits for the feed to start and returns how far it has handed
// events out; an idle feed, which reads nothing, first moves to the head.
func (f *EventFeed) position(ctx context.Context) (Cursor, error) {
	select {
	case <-f.ready:
	case <-ctx.Done():
		return Cursor{}, ctx.Err()
	}
	f.mu.Lock()
	idle, pos := len(f.subs) == 0, f.pos
	f.mu.Unlock()
	if !idle {
		return pos, nil
	}
	_, head, err := f.log.ReadEvents(ctx, EventQuery{})
	if err != nil {
		return Cursor{}, err
	}
	if pos.Before(head) {
		pos = head
	}
	return pos, nil
}

// detach removes s; its channel closes.
func (f *EventFeed) detach(s *feedSub) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeLocked(s)
}

func (f *EventFeed) removeLocked(s *feedSub) {
	if s.closed {
		return
	}
	s.closed = true
	if set := f.subs[s.accountID]; set != nil {
		delete(set, s)
		if len(set) == 0 {
			delete(f.subs, s.accountID)
		}
	}
	close(s.ch)
}

func (f *EventFeed) closeAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, set := range f.subs {
		for s := range set {
			f.removeLocked(s)
		}
	}
}

// follow streams the events after `after` that q selects (q names the
// account): first from the log, then live from the feed, with no gap and no
// duplicate at the seam. The first read happens before it returns, so an
// expired cursor is an error here, not a closed stream. With after nil it
// starts at the feed's position (what happens from now on).
func (f *EventFeed) follow(ctx context.Context, after *Cursor, q EventQuery) (<-chan Event, error) {
	out := make(chan Event, 1)
	err := f.stream(ctx, after, q, func(e Event) bool {
		select {
		case out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}, func() { close(out) })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stream is follow with a callback instead of a channel: send gets each
// event on the stream's one goroutine, until it returns false, ctx ends or
// the subscriber falls behind; end is called then, once. On an error
// nothing starts and end is not called. A subscriber that converts events
// for a channel of its own spares a goroutine and a channel this way (each
// GraphQL subscription held three goroutines besides its socket's reader).
func (f *EventFeed) stream(ctx context.Context, after *Cursor, q EventQuery, send func(Event) bool, end func()) error {
	q.Limit = feedPage
	var (
		backlog []Event
		cur     Cursor
	)
	if after == nil {
		pos, err := f.position(ctx)
		if err != nil {
			return err
		}
		cur = pos
	} else {
		cur = *after
		q.After = &cur
		events, next, err := f.log.ReadEvents(ctx, q)
		if err != nil {
			return err
		}
		backlog, cur = events, next
	}
	sub := &feedSub{accountID: q.AccountID, ch: make(chan *Event, FeedBuffer)}
	go func() {
		defer end()
		defer f.detach(sub)
		deliver := func(e Event) bool {
			return !q.Selects(e) || (ctx.Err() == nil && send(e))
		}
		full := len(backlog) == feedPage
		for {
			for _, e := range backlog {
				if !deliver(e) {
					return
				}
			}
			if !full {
				sub.from = cur
				ok, err := f.attach(ctx, sub)
				if err != nil {
					return
				}
				if ok {
					break
				}
			}
			q.After = &cur
			events, next, err := f.log.ReadEvents(ctx, q)
			if err != nil {
				// The stream ends; the client resumes from its last cursor.
				if ctx.Err() == nil {
					f.logger.WarnContext(ctx, "event replay failed", "account", q.AccountID, "err", err)
				}
				return
			}
			backlog, cur, full = events, next, len(events) == feedPage
		}
		for {
			select {
			case e, ok := <-sub.ch:
				if !ok || !deliver(*e) {
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// await returns once the feed hands out an event after `after` that q
// selects (q names the account), or at once when the feed is already past
// `after` (the log may hold such events: the caller reads it), or with
// ctx's error. It holds one slot of buffer: a burst it cannot take ends
// the wait as an event would, and the caller reads the log.
func (f *EventFeed) await(ctx context.Context, after Cursor, q EventQuery) error {
	sub := &feedSub{accountID: q.AccountID, from: after, ch: make(chan *Event, 1), wakeOnly: true}
	ok, err := f.attach(ctx, sub)
	if err != nil || !ok {
		return err
	}
	defer f.detach(sub)
	for {
		select {
		case e, open := <-sub.ch:
			if !open || q.Selects(*e) {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
