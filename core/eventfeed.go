package core

import (
	"context"
	"log/slog"
	"runtime"
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
	// runq holds the streams with events (or their end) to hand over, for
	// the feed's workers (work), which run as long as Run.
	runq    []*feedSub
	runWake *sync.Cond
	stopped bool // Run ended: the workers exit once runq is empty
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

	// A stream (deliver set) has no channel and no goroutine while it
	// waits: its events queue here, grown on demand, and one of the
	// feed's workers hands them over, in order (scheduled: it is in runq
	// or a worker has it). A goroutine per live subscription was 8-16 KiB
	// of stack each, and a channel of FeedBuffer pointers 2 KiB.
	deliver   func(e *Event) bool
	end       func()
	queue     []*Event
	scheduled bool
	over      bool        // deliver returned false or end ran (the worker's)
	stop      func() bool // ends the removal when ctx ends
}

// NewEventFeed returns a feed over the log; Run starts it.
func NewEventFeed(log EventLog, waker EventWaker, logger *slog.Logger) *EventFeed {
	if logger == nil {
		logger = slog.Default()
	}
	f := &EventFeed{log: log, waker: waker, logger: logger, ready: make(chan struct{}),
		subs: map[string]map[*feedSub]struct{}{}, kick: make(chan struct{}, 1)}
	f.runWake = sync.NewCond(&f.mu)
	return f
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
	var workers sync.WaitGroup
	for range feedWorkers() {
		workers.Go(f.work)
	}
	defer func() {
		f.mu.Lock()
		f.stopped = true
		f.runWake.Broadcast()
		f.mu.Unlock()
		workers.Wait()
	}()
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
		if s.deliver != nil {
			if len(s.queue) >= FeedBuffer {
				f.logger.Warn("event subscriber too slow, dropping it", "account", e.AccountID, "buffer", FeedBuffer)
				f.removeLocked(s)
				continue
			}
			s.queue = append(s.queue, e)
			f.scheduleLocked(s)
			continue
		}
		select {
		case s.ch <- e:
		default:
			f.logger.Warn("event subscriber too slow, dropping it", "account", e.AccountID, "buffer", FeedBuffer)
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
	if s.deliver != nil {
		f.scheduleLocked(s) // a worker ends it after what is queued
		return
	}
	close(s.ch)
}

// scheduleLocked queues s for a worker unless one has it already.
func (f *EventFeed) scheduleLocked(s *feedSub) {
	if s.scheduled {
		return
	}
	s.scheduled = true
	f.runq = append(f.runq, s)
	f.runWake.Signal()
}

// feedWorkers is how many goroutines hand live events to streams. Handing
// over runs the subscriber's work (a GraphQL result: CPU, now and then a
// read), so a few more than the CPUs keep them busy while one waits.
func feedWorkers() int { return max(4, 2*runtime.GOMAXPROCS(0)) }

// work hands queued events to streams, one stream at a time per worker,
// and ends the streams that were removed or whose deliver said stop.
func (f *EventFeed) work() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for {
		for len(f.runq) == 0 {
			if f.stopped {
				return
			}
			f.runWake.Wait()
		}
		s := f.runq[0]
		f.runq[0] = nil
		f.runq = f.runq[1:]
		batch, closed := s.queue, s.closed
		s.queue = nil
		f.mu.Unlock()
		for _, e := range batch {
			if s.over = !s.deliver(e); s.over {
				break
			}
		}
		end := (s.over || closed) && s.end != nil
		if end {
			s.over = true
			s.end()
			s.end = nil
		}
		f.mu.Lock()
		if end {
			f.removeLocked(s) // stays scheduled: nothing queues it again
			continue
		}
		s.scheduled = false
		if len(s.queue) > 0 || s.closed {
			f.scheduleLocked(s)
		}
	}
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
	err := f.stream(ctx, after, q, func(e Event, _ bool) bool {
		select {
		case out <- e:
			return true
		case <-ctx.Done():
			return false
		}
	}, func() { close(out) }, false)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// stream is follow with a callback instead of a channel: send gets each
// event, in order, until it returns false, ctx ends or the subscriber falls
// behind; end is called then, once. On an error nothing starts and end is
// not called. live tells a replayed event (false) from one the feed hands
// out. A pooled stream's send must not block for long: live events are
// handed over by the feed's workers, and the stream holds no goroutine
// while it waits (only while it replays). Otherwise the stream runs on a
// goroutine of its own.
func (f *EventFeed) stream(ctx context.Context, after *Cursor, q EventQuery, send func(e Event, live bool) bool, end func(), pooled bool) error {
	if !pooled {
		return f.streamOwn(ctx, after, q, send, end)
	}
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
	sub := &feedSub{accountID: q.AccountID}
	sub.deliver = func(e *Event) bool {
		return !q.Selects(*e) || (ctx.Err() == nil && send(*e, true))
	}
	sub.end = func() {
		f.mu.Lock()
		stop := sub.stop
		f.mu.Unlock()
		if stop != nil {
			stop()
		}
		end()
	}
	// live attaches sub: from then on the feed's workers deliver, and a
	// stream whose ctx ends is removed (a worker then calls end).
	live := func() (bool, error) {
		sub.from = cur
		ok, err := f.attach(ctx, sub)
		if ok {
			stop := context.AfterFunc(ctx, func() { f.detach(sub) })
			f.mu.Lock()
			sub.stop = stop
			f.mu.Unlock()
		}
		return ok, err
	}
	if after == nil {
		// What happens from now on: nothing to read first, and no
		// goroutine at all unless the feed moved on meanwhile.
		if ok, err := live(); err != nil || ok {
			return err
		}
	}
	go func() {
		full := len(backlog) == feedPage
		for {
			for _, e := range backlog {
				if q.Selects(e) && (ctx.Err() != nil || !send(e, false)) {
					end()
					return
				}
			}
			if !full {
				ok, err := live()
				if err != nil {
					end()
					return
				}
				if ok {
					return
				}
			}
			q.After = &cur
			events, next, err := f.log.ReadEvents(ctx, q)
			if err != nil {
				// The stream ends; the client resumes from its last cursor.
				if ctx.Err() == nil {
					f.logger.WarnContext(ctx, "event replay failed", "account", q.AccountID, "err", err)
				}
				end()
				return
			}
			backlog, cur, full = events, next, len(events) == feedPage
		}
	}()
	return nil
}

// streamOwn is stream on a goroutine of its own, for a send that may
// block: live events reach it through a channel.
func (f *EventFeed) streamOwn(ctx context.Context, after *Cursor, q EventQuery, send func(e Event, live bool) bool, end func()) error {
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
		deliver := func(e Event, live bool) bool {
			return !q.Selects(e) || (ctx.Err() == nil && send(e, live))
		}
		full := len(backlog) == feedPage
		for {
			for _, e := range backlog {
				if !deliver(e, false) {
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
				if !ok || !deliver(*e, true) {
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
	sub := &feedSub{accountID: q.AccountID, from: after, ch: make(chan *Event, 1)}
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
