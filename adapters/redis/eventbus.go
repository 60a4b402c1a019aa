package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

var _ core.EventBus = (*EventBus)(nil)

// EventBus is core.EventBus across replicas: events go as JSON over one
// Redis channel, `<prefix>events`, and each instance holds a single
// subscription to it that feeds an in-process memory.EventBus, which fans
// them out to local subscribers. Redis delivers one channel's messages in
// publish order, so order per mount holds across replicas.
type EventBus struct {
	client  *goredis.Client
	channel string
	logger  *slog.Logger
	local   *memory.EventBus
}

// NewEventBus subscribes to the channel and returns once Redis has
// confirmed it, so that any event published after Subscribe returns
// arrives. The returned func ends the subscription and its goroutine and
// closes every local subscriber's channel.
func NewEventBus(client *goredis.Client, prefix string, logger *slog.Logger) (*EventBus, func(), error) {
	if logger == nil {
		logger = slog.Default()
	}
	b := &EventBus{client: client, channel: prefix + "events", logger: logger,
		local: memory.NewEventBus(logger)}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ps := client.Subscribe(ctx, b.channel)
	msg, err := ps.ReceiveTimeout(ctx, 5*time.Second)
	if err == nil {
		if _, ok := msg.(*goredis.Subscription); !ok {
			err = fmt.Errorf("unexpected %T instead of the subscription confirmation", msg)
		}
	}
	if err != nil {
		_ = ps.Close()
		return nil, nil, fmt.Errorf("subscribe to %s: %w", b.channel, err)
	}

	// go-redis reconnects and resubscribes on its own; events published
	// while it does are lost, as the bus promises no more than that.
	msgs := ps.Channel(goredis.WithChannelSize(1024))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			b.deliver(m.Payload)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = ps.Close()
			<-done
			b.local.Close()
		})
	}
	return b, stop, nil
}

// Publish sends e to every replica's subscribers of e.AccountID, this one's
// included. It waits for Redis only, never for a subscriber.
func (b *EventBus) Publish(ctx context.Context, e core.Event) error {
	data, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	if err := b.client.Publish(ctx, b.channel, data).Err(); err != nil {
		return fmt.Errorf("publish event: %w", err)
	}
	return nil
}

// Subscribe registers a local subscriber; it needs no Redis round trip, the
// instance's subscription being active since NewEventBus. After the stop
// func it fails with memory.ErrClosed.
func (b *EventBus) Subscribe(ctx context.Context, accountID string) (<-chan core.Event, error) {
	return b.local.Subscribe(ctx, accountID)
}

func (b *EventBus) deliver(payload string) {
	var e core.Event
	if err := json.Unmarshal([]byte(payload), &e); err != nil {
		b.logger.Warn("dropping undecodable event", "channel", b.channel, "error", err)
		return
	}
	_ = b.local.Publish(context.Background(), e)
}
