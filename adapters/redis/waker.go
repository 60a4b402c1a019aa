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
type Waker struct {
	client  *goredis.Client
	channel string
	logger  *slog.Logger
	local   *memory.Waker
}

// NewWaker subscribes to the channel and returns once Redis has confirmed
// it. The returned func ends the subscription and its goroutine.
func NewWaker(client *goredis.Client, prefix string, logger *slog.Logger) (*Waker, func(), error) {
	if logger == nil {
		logger = slog.Default()
	}
	w := &Waker{client: client, channel: prefix + "events", logger: logger, local: memory.NewWaker()}

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
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = ps.Close()
			<-done
		})
	}
	return w, stop, nil
}

// Wake publishes c to every replica, this one's included.
func (w *Waker) Wake(ctx context.Context, c core.Cursor) error {
	if err := w.client.Publish(ctx, w.channel, c.Internal()).Err(); err != nil {
		return fmt.Errorf("publish wake-up: %w", err)
	}
	return nil
}

// Wakeups registers a local listener; it needs no Redis round trip.
func (w *Waker) Wakeups(ctx context.Context) (<-chan core.Cursor, error) {
	return w.local.Wakeups(ctx)
}
