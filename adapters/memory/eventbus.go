package memory

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/mountd/mountd/core"
)

var _ core.EventBus = (*EventBus)(nil)

// SubscriberBuffer is how many events a subscriber may lag behind before it
// is dropped; it lets a reader absorb a burst without slowing the publisher.
const SubscriberBuffer = 256

// ErrClosed is returned by a closed EventBus.
var ErrClosed = errors.New("event bus closed")

// EventBus is core.EventBus within one process. It is also the fan-out that
// the Redis event bus feeds from its single subscription.
type EventBus struct {
	logger *slog.Logger

	mu     sync.Mutex
	closed bool
	subs   map[string]map[*subscriber]struct{} // by account
}

type subscriber struct {
	accountID string
	ch        chan core.Event
	stop      func() bool // unregisters the ctx callback
}

// NewEventBus returns a bus without subscribers; logger (default
// slog.Default) reports dropped subscribers.
func NewEventBus(logger *slog.Logger) *EventBus {
	if logger == nil {
		logger = slog.Default()
	}
	return &EventBus{logger: logger, subs: map[string]map[*subscriber]struct{}{}}
}

// Publish hands e to every subscriber of e.AccountID without waiting: a
// subscriber whose buffer is full is dropped. Delivery happens under the
// lock, so all subscribers see events in publish order.
func (b *EventBus) Publish(ctx context.Context, e core.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	for s := range b.subs[e.AccountID] {
		select {
		case s.ch <- e:
		default:
			b.logger.Warn("event subscriber too slow, dropping it",
				"account_id", e.AccountID, "buffer", SubscriberBuffer)
			s.stop()
			b.removeLocked(s)
		}
	}
	return nil
}

// Subscribe registers a subscriber until ctx ends. It starts no goroutine:
// a context.AfterFunc closes the channel when ctx ends.
func (b *EventBus) Subscribe(ctx context.Context, accountID string) (<-chan core.Event, error) {
	s := &subscriber{accountID: accountID, ch: make(chan core.Event, SubscriberBuffer)}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	set, ok := b.subs[accountID]
	if !ok {
		set = map[*subscriber]struct{}{}
		b.subs[accountID] = set
	}
	set[s] = struct{}{}
	s.stop = context.AfterFunc(ctx, func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.removeLocked(s)
	})
	return s.ch, nil
}

// Close closes every subscriber's channel; later calls fail with ErrClosed.
func (b *EventBus) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, set := range b.subs {
		for s := range set {
			s.stop()
			b.removeLocked(s)
		}
	}
}

// removeLocked unregisters s and closes its channel, once.
func (b *EventBus) removeLocked(s *subscriber) {
	set := b.subs[s.accountID]
	if _, ok := set[s]; !ok {
		return
	}
	delete(set, s)
	if len(set) == 0 {
		delete(b.subs, s.accountID)
	}
	close(s.ch)
}
