// Package redis holds mountd's Redis adapters: the connection, and (as the
// mount features grow) the cache, scheduler and event bus ports over Redis.
package redis

import (
	"context"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Open connects to a `redis://host:port/db` URL and checks that it answers.
func Open(ctx context.Context, url string) (*goredis.Client, func(), error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	// Redis carries what can wait or be rebuilt (cache, wake-ups, limits,
	// deadlines also kept in the database): when it is away, a request
	// should lose little time on it. go-redis would retry three times with
	// back-off and wait up to 5 s to dial; unless the URL says otherwise,
	// one retry and one second for each step.
	if !strings.Contains(url, "max_retries=") {
		opts.MaxRetries = 1
	}
	if !strings.Contains(url, "dial_timeout=") {
		opts.DialTimeout = time.Second
	}
	if !strings.Contains(url, "pool_timeout=") {
		opts.PoolTimeout = time.Second
	}
	if !strings.Contains(url, "read_timeout=") {
		opts.ReadTimeout = time.Second
	}
	if !strings.Contains(url, "write_timeout=") {
		opts.WriteTimeout = time.Second
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
