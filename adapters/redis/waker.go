package redis

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

var _ core.EventWaker = (*Waker)(nil)

// Waker is core.EventWaker across replicas: a wake-up is the event's
// cursor published on one Redis channel, `<prefix>events`; each instance
// holds a single subscription to it and hands what arrives to its local
// listeners. Redis only wakes: the event log is the truth, and a wake-up
// lost while Redis is away delays events until the feeds poll.
//
// On a Redis Cluster the channel is classic pub/sub, which every node
// forwards to every other: a publisher and a subscriber connected to
// different nodes meet. (Sharded pub/sub would keep the traffic within a
// shard, but go-redis loses its messages after reconnects.) When the
// subscription comes back after its connection broke (a master failed
// over, say), the wake-ups sent meanwhile are lost: the local listeners are
// woken at once with the newest cursor this instance knows, so that the
// feeds read the log for what they missed rather than wait for their poll.
//
// Wake does not wait for Redis: it leaves the newest cursor for one
// publishing goroutine, which sends it after the PUBLISH in flight, if any.
// Under load many commits then cost one PUBLISH (a listener keeps only the
// newest position it was told of anyway, and reads the log up to it), and a
// report is answered without a round trip to Redis.
type Waker struct {
	client  goredis.UniversalClient
	channel string
	logger  *slog.Logger
	local   *memory.Waker

	mu      sync.Mutex
	pending *core.Cursor  // the newest cursor not yet published
	kick    chan struct{} // one slot: a cursor is pending
	newest  core.Cursor   // the newest cursor woken with or received
}

// NewWaker subscribes to the channel and returns once Redis has confirmed
// it. The returned func ends the subscription and its goroutine.
func NewWaker(client goredis.UniversalClient, prefix string, logger *slog.Logger) (*Waker, func(), error) {
	if logger == nil {
		logger = slog.Default()
	}
	w := &Waker{client: client, channel: prefix + "events", logger: logger, local: memory.NewWaker(), kick: make(chan struct{}, 1)}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := client.Subscribe(ctx, w.channel)
	msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
	if err == nil {
		if _, ok := msg.(*goredis.Subscription); !ok {
			err = fmt.Errorf("unexpected %T instead of the subscription confirmation", msg)
		}
	}
	if err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("subscribe to %s: %w", w.channel, err)
	}
	// go-redis reconnects and resubscribes on its own; each confirmation
	// after the first (read above) tells of a resubscription.
	msgs := ps.ChannelWithSubscriptions(goredis.WithChannelSize(1024))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			switch m := m.(type) {
			case *goredis.Subscription:
				if m.Kind == "subscribe" {
					w.resubscribed()
				}
			case *goredis.Message:
				c, err := core.ParseInternalCursor(m.Payload)
				if err != nil {
					w.logger.Warn("dropping an undecodable wake-up", "channel", w.channel)
					continue
				}
				w.remember(c)
				_ = w.local.Wake(context.Background(), c)
			}
		}
	}()
	quit, published := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(published)
		w.publish(quit)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			close(quit)
			<-published
			_ = ps.Close()
			<-done
		})
	}
	return w, stop, nil
}

// publishTimeout bounds one PUBLISH; a wake-up that does not get through
// only delays events until the feeds poll.
const publishTimeout = 5 * time.Second

// publish sends the pending cursor until quit closes.
func (w *Waker) publish(quit <-chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-w.kick:
		}
		w.mu.Lock()
		c := w.pending
		w.pending = nil
		w.mu.Unlock()
		if c == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), publishTimeout)
		err := w.client.Publish(ctx, w.channel, c.Internal()).Err()
		cancel()
		if err != nil {
			w.logger.Warn("publish wake-up failed; feeds catch up when they poll", "channel", w.channel, "err", err)
		}
	}
}

// Wake publishes c, or a newer cursor, to every replica, this one's
// included, without waiting (see Waker).
func (w *Waker) Wake(_ context.Context, c core.Cursor) error {
	w.mu.Lock()
	if w.pending == nil || w.pending.Before(c) {
		w.pending = &c
	}
	if w.newest.Before(c) {
		w.newest = c
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default: // a kick is pending already and will take c
	}
	return nil
}

// remember keeps c if it is the newest cursor known.
func (w *Waker) remember(c core.Cursor) {
	w.mu.Lock()
	if w.newest.Before(c) {
		w.newest = c
	}
	w.mu.Unlock()
}

// resubscribed wakes the local listeners after the subscription came back:
// what was published while it was away is lost, and they read the log now.
func (w *Waker) resubscribed() {
	w.mu.Lock()
	c := w.newest
	w.mu.Unlock()
	w.logger.Info("wake-ups resubscribed; listeners read the event log for what they missed", "channel", w.channel)
	_ = w.local.Wake(context.Background(), c)
}

// Wakeups registers a local listener; it needs no Redis round trip.
func (w *Waker) Wakeups(ctx context.Context) (<-chan core.Cursor, error) {
	return w.local.Wakeups(ctx)
}
