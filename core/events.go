package core

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// EventFilter is what a subscriber asks for: the events of the named mounts,
// or, with MountUIDs nil, of every mount the principal may see; with After,
// first every retained event after that cursor, then live ones.
type EventFilter struct {
	MountUIDs []string
	After     *Cursor
	// Types narrows the events to these types; nil selects all.
	Types []EventType
}

// EventsRequest is a read of the event feed (docs/api.md, "Event log").
type EventsRequest struct {
	After *Cursor
	// Limit is nil for the default page.
	Limit    *int
	Types    []EventType
	MountUID *string
	// Wait is how long to wait for an event when none follows After.
	Wait time.Duration
	// Tail, when not nil, asks for the last Tail events instead of a page
	// after After (see TailRule).
	Tail *int
}

// EventPage is a page of the feed and the cursor to read on from.
type EventPage struct {
	Events []Event
	Next   Cursor
}

// MaxWaitsPerAccount bounds an account's long polls held open at once on
// one replica; more are refused with RATE_LIMITED.
const MaxWaitsPerAccount = 64

// MaxWaitsPerToken bounds one token's long polls held open at once on one
// replica, and MaxRestrictedWaitsPerAccount those of an account's
// restricted tokens together, so that a rider's tokens cannot take every
// long poll of the account from its owner.
const (
	MaxWaitsPerToken             = 16
	MaxRestrictedWaitsPerAccount = 48
)

// EventService holds the rules of the event log: who may read and follow
// which mounts' events, the feed's inputs, and retention.
type EventService struct {
	feed   *EventFeed
	log    EventLog
	mounts *MountService
	logger *slog.Logger

	mu sync.Mutex
	// Long polls open: by account, by account for its restricted tokens,
	// and by token. Keys live only while a poll is open.
	waits, restrictedWaits, tokenWaits map[string]int
	// stopping ends every long poll early (an empty page), so that a
	// shutdown does not wait for them.
	stopping    context.Context
	stopWaiting context.CancelFunc

	// now and sleep time the wait for the account's head to settle
	// (settledHead); tests replace them with a clock moved by hand.
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	// lastUnsettledWarning is when settledHead last warned (unix nanos),
	// so that a transaction held open for long warns once a minute, not
	// on every request.
	lastUnsettledWarning atomic.Int64
}

// NewEventService returns an EventService over the log and the process's
// feed; mounts decides whether a named mount is reachable.
func NewEventService(feed *EventFeed, log EventLog, mounts *MountService, logger *slog.Logger) *EventService {
	stopping, stop := context.WithCancel(context.Background())
	return &EventService{feed: feed, log: log, mounts: mounts, logger: logger, waits: map[string]int{},
		restrictedWaits: map[string]int{}, tokenWaits: map[string]int{}, stopping: stopping, stopWaiting: stop,
		now: time.Now, sleep: sleepContext}
}

// SetClock replaces the clock the service waits with (tests): now tells
// the time, sleep waits d or until ctx ends.
func (s *EventService) SetClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) {
	s.now, s.sleep = now, sleep
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// StopWaiting answers every long poll now and every later one at once.
func (s *EventService) StopWaiting() { s.stopWaiting() }

// MaxSubscribedMounts bounds the mounts one subscription names.
const MaxSubscribedMounts = 1000

// Authorize decides whether p may subscribe with f: the action, and each
// named mount under the rules of reading it (a mount p cannot reach is
// MOUNT_NOT_FOUND). A subscriber that joins a running shared execution is
// checked here, since it runs no subscription of its own.
func (s *EventService) Authorize(ctx context.Context, p Principal, f EventFilter) error {
	if err := p.Authorize(ActionSubscribe); err != nil {
		return err
	}
	if len(f.MountUIDs) > MaxSubscribedMounts {
		// Each named mount is read here and matched against every event.
		var v Validation
		v.Add("uids", "names at most %d mounts; leave it out for all of them", MaxSubscribedMounts)
		return v.Err()
	}
	for _, uid := range f.MountUIDs {
		if _, err := s.mounts.Mount(ctx, p, uid); err != nil {
			return err
		}
	}
	return nil
}

// visibleMounts narrows named (nil: all) to what p may see: nil still
// means all.
func visibleMounts(p Principal, named []string) []string {
	if !p.LimitedToMounts() {
		return named
	}
	if named == nil {
		return slices.Clone(p.MountUIDs)
	}
	out := []string{}
	for _, uid := range named {
		if p.CanSeeMount(uid) {
			out = append(out, uid)
		}
	}
	return out
}

// visibleTypes narrows types (nil: all) to what p may see: a restricted
// token with mount items never receives ALARM_* events, GRANT_REVOKED (other
// riders' grants), nor account-level ones (its mounts select none of those
// either).
func visibleTypes(p Principal, types []EventType) []EventType {
	if !p.LimitedToMounts() {
		return types
	}
	if types == nil {
		types = EventTypes
	}
	out := []EventType{}
	for _, t := range types {
		if t != EventAlarmRaised && t != EventAlarmCleared && t != EventAlarmAcknowledged && t != EventGrantRevoked &&
			!slices.Contains(AccountEventTypes, t) {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		// Nothing it may see: a type no event has selects none.
		out = append(out, NoEventType)
	}
	return out
}

// Subscribe returns the events p may see that f asks for, in log order,
// until ctx ends or the subscriber falls behind; the channel closes then.
// With f.After, the retained events after it come first (CURSOR_EXPIRED
// when it is older than the log), with no gap and no duplicate before the
// live ones.
func (s *EventService) Subscribe(ctx context.Context, p Principal, f EventFilter) (<-chan Event, error) {
	if err := s.Authorize(ctx, p, f); err != nil {
		return nil, err
	}
	after, err := s.start(ctx, p.AccountID, f.After)
	if err != nil {
		return nil, err
	}
	return s.feed.follow(ctx, after, EventQuery{AccountID: p.AccountID, Types: visibleTypes(p, f.Types), MountUIDs: visibleMounts(p, f.MountUIDs)})
}

// Stream is Subscribe with a callback: send gets each event, in log order,
// on the stream's goroutine until it returns false, ctx ends or the
// subscriber falls behind; end is called then, once (not when Stream
// returns an error).
func (s *EventService) Stream(ctx context.Context, p Principal, f EventFilter, send func(Event) bool, end func()) error {
	if err := s.Authorize(ctx, p, f); err != nil {
		return err
	}
	after, err := s.start(ctx, p.AccountID, f.After)
	if err != nil {
		return err
	}
	return s.feed.stream(ctx, after, EventQuery{AccountID: p.AccountID, Types: visibleTypes(p, f.Types), MountUIDs: visibleMounts(p, f.MountUIDs)}, send, end)
}

// start is where a subscription begins: after, or without it "from now",
// after every event of the account committed before the call. That is
// the feed's position (nil) when it already lies after them; otherwise,
// on PostgreSQL while an older transaction of the cluster is still open,
// the account's head once it has settled past them (settledHead).
func (s *EventService) start(ctx context.Context, accountID string, after *Cursor) (*Cursor, error) {
	if after != nil {
		return after, nil
	}
	newest, err := s.log.AccountNewest(ctx, accountID)
	if err != nil {
		return nil, err
	}
	pos, err := s.feed.position(ctx)
	if err != nil {
		return nil, err
	}
	if !pos.Before(newest) {
		return nil, nil
	}
	head, err := s.settledHead(ctx, accountID, newest)
	if err != nil {
		return nil, err
	}
	return &head, nil
}

// SettleWait bounds how long a position "from now" (Head, a subscription
// without a cursor) waits for the account's head to settle past the
// account's newest committed event. On PostgreSQL the head lags behind
// every transaction of the cluster still open, however unrelated; past
// the bound the settled head is returned (the client may then receive
// events it wrote before again, but never misses one).
const SettleWait = 2 * time.Second

// settleFirstPoll and settleMaxPoll are the backoff of settledHead's
// reads: short first (transactions usually end within milliseconds), at
// most a few reads a second per waiting request.
const (
	settleFirstPoll = 5 * time.Millisecond
	settleMaxPoll   = 100 * time.Millisecond
)

// settledHead returns the account's head (never an unsettled position)
// once it lies at or after newest, reading it again with a backoff for up
// to SettleWait; past that, the head as it stands.
func (s *EventService) settledHead(ctx context.Context, accountID string, newest Cursor) (Cursor, error) {
	deadline := s.now().Add(SettleWait)
	for delay := settleFirstPoll; ; delay = min(2*delay, settleMaxPoll) {
		head, err := s.log.AccountHead(ctx, accountID)
		if err != nil || !head.Before(newest) {
			return head, err
		}
		left := deadline.Sub(s.now())
		if left <= 0 {
			s.warnUnsettled(ctx, accountID)
			return head, nil
		}
		if err := s.sleep(ctx, min(delay, left)); err != nil {
			return Cursor{}, err
		}
	}
}

// warnUnsettled tells, at most once a minute (otherwise at debug level),
// that a position from now was handed out before the account's newest
// event: a transaction held open for seconds delays every subscriber.
func (s *EventService) warnUnsettled(ctx context.Context, accountID string) {
	now, last := s.now().UnixNano(), s.lastUnsettledWarning.Load()
	level := slog.LevelDebug
	if now-last >= int64(time.Minute) && s.lastUnsettledWarning.CompareAndSwap(last, now) {
		level = slog.LevelWarn
	}
	s.logger.Log(ctx, level, "event log head did not settle in time: a cursor from now may repeat the account's latest events (a database transaction is held open)",
		"account", accountID, "wait", SettleWait)
}

// Head is where p's account stands in the event log: its newest settled
// event. A subscription that starts after it misses nothing of the
// account's committed from now on, however long it takes to attach (the
// console takes it before it reads what it shows). It is the account's
// own position, not the log's head, so that it never moves with (and so
// never tells of) other accounts' events. It lies after every event of
// the account committed before the call, waiting up to SettleWait for
// them to settle (settledHead).
func (s *EventService) Head(ctx context.Context, p Principal) (Cursor, error) {
	if err := p.Authorize(ActionSubscribe); err != nil {
		return Cursor{}, err
	}
	// The newest first: an event committed between the two reads only
	// makes the wait longer.
	newest, err := s.log.AccountNewest(ctx, p.AccountID)
	if err != nil {
		return Cursor{}, err
	}
	return s.settledHead(ctx, p.AccountID, newest)
}

// NoEventType is a type no event has: a list of it selects nothing (an
// empty list would select every type).
const NoEventType EventType = "NONE"

// Events reads the feed: up to r.Limit events after r.After that p may
// see, oldest first, waiting up to r.Wait for one when none follows.
func (s *EventService) Events(ctx context.Context, p Principal, r EventsRequest) (EventPage, error) {
	if err := p.Authorize(ActionSubscribe); err != nil {
		return EventPage{}, err
	}
	var v Validation
	limit := DefaultEventPage
	if r.Limit != nil {
		if limit = *r.Limit; limit < 1 || limit > MaxEventPage {
			v.Add("limit", "must be between 1 and 1000")
		}
	}
	if r.Wait < 0 || r.Wait > MaxEventWait {
		v.Add("wait", "must be a number of seconds from 0 to 30")
	}
	var types []EventType // without repeats: the list goes into the query
	for _, t := range r.Types {
		if !KnownEventType(t) {
			v.Add("types", "must name event types of the API")
			break
		}
		if !slices.Contains(types, t) {
			types = append(types, t)
		}
	}
	if r.MountUID != nil && !ValidMountUID(*r.MountUID) {
		v.Add("mountUid", "is not a mount uid")
	}
	tail := TailRule(&v, r.Tail, r.After != nil, r.Limit != nil, r.Wait != 0)
	if err := v.Err(); err != nil {
		return EventPage{}, err
	}
	if tail > 0 {
		limit = tail
	}
	var named []string
	if r.MountUID != nil {
		// Outside a restricted token's mount items is 404, as for every
		// request naming a mount. An owner's filter is its account's past
		// too: a mount it no longer holds still selects the events it had.
		if err := p.AuthorizeMount(ActionSubscribe, *r.MountUID); err != nil {
			return EventPage{}, err
		}
		named = []string{*r.MountUID}
	}
	q := EventQuery{AccountID: p.AccountID, After: r.After, Types: visibleTypes(p, types), MountUIDs: visibleMounts(p, named), Limit: limit,
		Tail: tail > 0}
	// next is the position of the last event returned, or after: never
	// the position the read reached, which moves with every account's
	// events. Without after and without events, it is where this
	// account's retained events begin.
	page := func(events []Event) (EventPage, error) {
		if len(events) > 0 {
			return EventPage{Events: events, Next: events[len(events)-1].ID}, nil
		}
		if r.After != nil {
			return EventPage{Events: []Event{}, Next: *r.After}, nil
		}
		start, err := s.log.AccountHorizon(ctx, p.AccountID)
		if err != nil {
			return EventPage{}, err
		}
		return EventPage{Events: []Event{}, Next: start}, nil
	}
	events, scanned, err := s.log.ReadEvents(ctx, q)
	if err != nil {
		return EventPage{}, err
	}
	if len(events) > 0 || r.Wait == 0 {
		return page(events)
	}
	if err := s.startWait(p); err != nil {
		return EventPage{}, err
	}
	defer s.endWait(p)
	waitCtx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	defer context.AfterFunc(s.stopping, cancel)()
	for {
		// The feed says when an event the query selects arrives; the page
		// is then read from the log, whole and in order. scanned, the
		// position the reads reached, stays here.
		if err := s.feed.await(waitCtx, scanned, q); err != nil {
			if ctx.Err() != nil {
				return EventPage{}, ctx.Err()
			}
			// The wait ended (or the server is stopping) with nothing.
			return page(nil)
		}
		q.After = &scanned
		if events, scanned, err = s.log.ReadEvents(ctx, q); err != nil {
			return EventPage{}, err
		}
		if len(events) > 0 {
			return page(events)
		}
	}
}

// waitToken names p's token for the bound per token: its digest, or
// without one its client (every token of that client shares the bound).
func waitToken(p Principal) string {
	if p.TokenID != "" {
		return p.AccountID + "\x00t:" + p.TokenID
	}
	return p.AccountID + "\x00c:" + p.ClientID
}

func (s *EventService) startWait(p Principal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	token, restricted := waitToken(p), p.Role != RoleOwner
	var message string
	switch {
	case s.waits[p.AccountID] >= MaxWaitsPerAccount:
		message = "too many long polls of the event feed for this account; retry shortly"
	case s.tokenWaits[token] >= MaxWaitsPerToken:
		message = "too many long polls of the event feed for this token; retry shortly"
	case restricted && s.restrictedWaits[p.AccountID] >= MaxRestrictedWaitsPerAccount:
		message = "too many long polls of the event feed for this account's restricted tokens; retry shortly"
	default:
		s.waits[p.AccountID]++
		s.tokenWaits[token]++
		if restricted {
			s.restrictedWaits[p.AccountID]++
		}
		return nil
	}
	return &Error{Code: CodeRateLimited, RetryAfter: time.Second, Message: message}
}

func (s *EventService) endWait(p Principal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	decrement(s.waits, p.AccountID)
	decrement(s.tokenWaits, waitToken(p))
	if p.Role != RoleOwner {
		decrement(s.restrictedWaits, p.AccountID)
	}
}

func decrement(m map[string]int, key string) {
	if m[key]--; m[key] <= 0 {
		delete(m, key)
	}
}

// pruneBatch bounds one delete of the retention worker.
const pruneBatch = 5000

// RunRetention deletes events older than retention every interval until
// ctx ends. Safe on every replica at once.
func (s *EventService) RunRetention(ctx context.Context, retention, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		for {
			n, err := s.log.PruneEvents(ctx, time.Now().Add(-retention), pruneBatch)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.WarnContext(ctx, "prune event log failed", "err", err)
				}
				break
			}
			if n < pruneBatch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// KnownEventType reports whether t is one of the API's event types.
func KnownEventType(t EventType) bool {
	return slices.Contains(EventTypes, t)
}
