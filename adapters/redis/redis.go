// Package redis holds mountd's Redis adapters: the connection, and (as the
// mount features grow) the cache, scheduler and event bus ports over Redis.
package redis

import (
	"context"
	"fmt"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Open connects to a `redis://host:port/db` URL and checks that it answers.
func Open(ctx context.Context, url string) (*goredis.Client, func(), error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	client := goredis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("connect to redis: %w", err)
	}
	return client, func() { _ = client.Close() }, nil
}
