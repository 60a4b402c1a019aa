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
// Wake does not wait for Redis: it leaves the newest cursor for one
// publishing goroutine, which sends it after the PUBLISH in flight, if any.
// Under load many commits then cost one PUBLISH (a listener keeps only the
// newest position it was told of anyway, and reads the log up to it), and a
// report is answered without a round trip to Redis.
type Waker struct {
	client  *goredis.Client
	channel string
	logger  *slog.Logger
	local   *memory.Waker

	mu      sync.Mutex
	pending *core.Cursor  // the newest cursor not yet published
	kick    chan struct{} // one slot: a cursor is pending
}

// NewWaker subscribes to the channel and returns once Redis has confirmed
// it. The returned func ends the subscription and its goroutine.
func NewWaker(client *goredis.Client, prefix string, logger *slog.Logger) (*Waker, func(), error) {
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
	// go-redis reconnects and resubscribes on its own.
	msgs := ps.Channel(goredis.WithChannelSize(1024))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			c, err := core.ParseInternalCursor(m.Payload)
			if err != nil {
				w.logger.Warn("dropping an undecodable wake-up", "channel", w.channel)
				continue
			}
			_ = w.local.Wake(context.Background(), c)
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
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default: // a kick is pending already and will take c
	}
	return nil
}

// Wakeups registers a local listener; it needs no Redis round trip.
func (w *Waker) Wakeups(ctx context.Context) (<-chan core.Cursor, error) {
	return w.local.Wakeups(ctx)
}
