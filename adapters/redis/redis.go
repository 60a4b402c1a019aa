// Package redis holds mountd's Redis adapters: the connection, and (as the
// mount features grow) the cache, scheduler and event bus ports over Redis.
// Every adapter takes a goredis.UniversalClient, so that it runs alike on
// one Redis (Open) and on a Redis Cluster (OpenCluster).
package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// shortTimeouts is the policy of both Open and OpenCluster. Redis carries
// what can wait or be rebuilt (cache, wake-ups, limits, deadlines also kept
// in the database): when it is away, a request should lose little time on
// it. go-redis waits up to 5 s to dial and to read; unless the URL says
// otherwise, one second for each step.
type shortTimeouts struct {
	dial, pool, read, write *time.Duration
}

func (s shortTimeouts) apply(url string) {
	for param, d := range map[string]*time.Duration{
		"dial_timeout=": s.dial, "pool_timeout=": s.pool, "read_timeout=": s.read, "write_timeout=": s.write,
	} {
		if !strings.Contains(url, param) {
			*d = time.Second
		}
	}
}

// Open connects to a `redis://host:port/db` URL and checks that it answers.
func Open(ctx context.Context, url string) (goredis.UniversalClient, func(), error) {
	opts, err := goredis.ParseURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis url: %w", err)
	}
	// go-redis would retry three times with back-off: one retry.
	if !strings.Contains(url, "max_retries=") {
		opts.MaxRetries = 1
	}
	shortTimeouts{&opts.DialTimeout, &opts.PoolTimeout, &opts.ReadTimeout, &opts.WriteTimeout}.apply(url)
	return connect(ctx, goredis.NewClient(opts))
}

// OpenCluster connects to a Redis Cluster through go-redis's cluster URL,
// `redis://host1:7000?addr=host2:7001&addr=host3:7002` (seed nodes; the
// client learns the others), and checks that every master answers.
// Timeouts are Open's. Retries are the cluster client's own (MaxRedirects,
// 3 unless the URL says max_redirects): they follow a slot's MOVED to its
// new master after a failover as well as retry a failed node, so fewer
// would turn a failover into errors.
func OpenCluster(ctx context.Context, url string) (goredis.UniversalClient, func(), error) {
	opts, err := goredis.ParseClusterURL(url)
	if err != nil {
		return nil, nil, fmt.Errorf("redis cluster url: %w", err)
	}
	shortTimeouts{&opts.DialTimeout, &opts.PoolTimeout, &opts.ReadTimeout, &opts.WriteTimeout}.apply(url)
	// A master that died answers no MOVED: the client learns of the
	// replica that took its slots only when it reloads the slot map, which
	// go-redis does every minute by default. Every 2 s (while commands
	// flow) it costs a CLUSTER SLOTS and keeps the slots of a failed-over
	// master unreachable for about that long after the promotion.
	opts.ClusterStateReloadInterval = clusterStateReload
	return connect(ctx, goredis.NewClusterClient(opts))
}

// clusterStateReload is how old the cluster client's slot map may grow.
const clusterStateReload = 2 * time.Second

// startWait is how long connect tries before it gives up: a replica
// started while a master fails over (some 6 to 20 s) waits for the
// promotion instead of exiting.
const startWait = 30 * time.Second

func connect(ctx context.Context, client goredis.UniversalClient) (goredis.UniversalClient, func(), error) {
	err := retryStart(ctx, startWait, func(ctx context.Context) error { return Ping(ctx, client) })
	if err != nil {
		_ = client.Close()
		return nil, nil, fmt.Errorf("connect to redis: %w", err)
	}
	return client, func() { _ = client.Close() }, nil
}

// retryStart calls try (each call bounded to 5 s) every second until it
// succeeds or wait has passed, and returns its last error.
func retryStart(ctx context.Context, wait time.Duration, try func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	for {
		tryCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := try(tryCtx)
		cancel()
		if err == nil || time.Now().Add(time.Second).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// Ping checks that Redis serves: one Redis answers PING; a cluster says
// cluster_state:ok (every slot has a master that answers, as its nodes see
// it) and each master known to the client answers.
func Ping(ctx context.Context, client goredis.UniversalClient) error {
	cluster, ok := client.(*goredis.ClusterClient)
	if !ok {
		return client.Ping(ctx).Err()
	}
	info, err := cluster.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if !strings.Contains(info, "cluster_state:ok") {
		return errors.New("redis cluster: cluster_state is not ok")
	}
	return cluster.ForEachMaster(ctx, func(ctx context.Context, master *goredis.Client) error {
		return master.Ping(ctx).Err()
	})
}

// taggedKey is `<prefix><kind>{<subject>}`: the hash tag makes every key
// of one subject (the rate limit's and the failure limit's of one key, say)
// hash to one cluster slot, so that a script or transaction may touch them
// together; the prefix stays in front, outside the tag. On one Redis the
// braces are only characters.
func taggedKey(prefix, kind, subject string) string {
	return prefix + kind + "{" + subject + "}"
}
