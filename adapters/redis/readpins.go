package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/internal/dbread"
)

var _ dbread.Pins = (*ReadPins)(nil)

// ReadPins are read-your-writes pins shared by every replica of mountd: a
// key per client that lives as long as the pin (one key, so one slot on a
// Redis Cluster).
type ReadPins struct {
	client goredis.UniversalClient
	prefix string
}

// NewReadPins keeps pins under prefix.
func NewReadPins(client goredis.UniversalClient, prefix string) *ReadPins {
	return &ReadPins{client: client, prefix: prefix}
}

func (p *ReadPins) key(client string) string { return taggedKey(p.prefix, "readpin:", client) }

// Pin implements dbread.Pins. Every pin of mountd has the same length, so
// the newest one always lasts longest and may replace the one before.
func (p *ReadPins) Pin(ctx context.Context, client string, d time.Duration) error {
	if err := p.client.Set(ctx, p.key(client), "1", d).Err(); err != nil {
		return fmt.Errorf("read pin: %w", err)
	}
	return nil
}

// Pinned implements dbread.Pins.
func (p *ReadPins) Pinned(ctx context.Context, client string) (bool, error) {
	n, err := p.client.Exists(ctx, p.key(client)).Result()
	if err != nil {
		return false, fmt.Errorf("read pin: %w", err)
	}
	return n > 0, nil
}
