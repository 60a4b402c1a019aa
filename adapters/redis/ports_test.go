package redis_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/adapters/redis"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/dbread"
)

// Every factory call opens its own client, as a replica would. Within one
// subtest the calls share a key prefix (base + subtest name), so the suites'
// Shared cases see two replicas of one deployment.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// backend is a Redis the adapters run on.
type backend struct {
	name string
	// url returns the server's URL and a key prefix of the test's own.
	url  func(testing.TB) (url, prefix string)
	open func(ctx context.Context, url string) (goredis.UniversalClient, func(), error)
}

var (
	singleRedis  = backend{"single", testenv.RedisURL, redis.Open}
	redisCluster = backend{"cluster", testenv.RedisClusterURL, redis.OpenCluster} // 3 masters, 3 replicas
	backends     = []backend{singleRedis, redisCluster}
)

// forEachBackend runs test on every backend, with its URL and a key prefix
// whose keys are deleted when the subtest ends.
func forEachBackend(t *testing.T, test func(t *testing.T, b backend, url, base string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			url, base := b.url(t)
			t.Cleanup(func() {
				client, closeClient, err := b.open(context.Background(), url)
				if err != nil {
					return
				}
				defer closeClient()
				deleteKeys(context.Background(), client, base+"*")
			})
			test(t, b, url, base)
		})
	}
}

// deleteKeys deletes the keys matching pattern, on every master of a
// cluster: SCAN reads one node.
func deleteKeys(ctx context.Context, client goredis.UniversalClient, pattern string) {
	del := func(ctx context.Context, node *goredis.Client) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			node.Del(ctx, iter.Val())
		}
		return iter.Err()
	}
	switch c := client.(type) {
	case *goredis.ClusterClient:
		_ = c.ForEachMaster(ctx, del)
	case *goredis.Client:
		_ = del(ctx, c)
	}
}

func (b backend) client(t *testing.T, url string) goredis.UniversalClient {
	t.Helper()
	client, closeClient, err := b.open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	return client
}

func TestStateCache(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunStateCache(t, func(t *testing.T) core.StateCache {
			return redis.NewStateCache(b.client(t, url), base+t.Name()+":", time.Minute)
		}, porttest.Options{Shared: true})
	})
}

func TestEventWaker(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunEventWaker(t, func(t *testing.T) core.EventWaker {
			return newWaker(t, b.client(t, url), base+t.Name()+":")
		}, porttest.Options{Shared: true})
	})
}

func newWaker(t *testing.T, client goredis.UniversalClient, prefix string) *redis.Waker {
	t.Helper()
	w, stop, err := redis.NewWaker(client, prefix, quiet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w
}

func TestExpiryScheduler(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunExpiryScheduler(t, func(t *testing.T) core.ExpiryScheduler {
			return redis.NewExpiryScheduler(b.client(t, url), base+t.Name()+":", 50*time.Millisecond)
		}, porttest.Options{Shared: true})
	})
}

func TestFailureLimiter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunFailureLimiter(t, func(t *testing.T, now func() time.Time) core.FailureLimiter {
			l := redis.NewFailureLimiter(b.client(t, url), base+t.Name()+":")
			redis.SetFailureClock(l, now)
			return l
		}, porttest.Options{Shared: true})
	})
}

func TestRateLimiter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunRateLimiter(t, func(t *testing.T, now func() time.Time) core.RateLimiter {
			l := redis.NewRateLimiter(b.client(t, url), base+t.Name()+":")
			redis.SetRateClock(l, now)
			return l
		}, porttest.Options{Shared: true})
	})
}

func TestStateCacheLayoutAndTTL(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		client := b.client(t, url)
		ctx := context.Background()
		at := time.Date(2025, 6, 1, 12, 0, 0, 123_000_000, time.UTC)

		c := redis.NewStateCache(client, base, time.Minute)
		if _, _, err := c.Offer(ctx, "m1", []core.StateEntry{{Code: core.StateBatteryLevel, Value: "80", OccurredAt: at}}); err != nil {
			t.Fatal(err)
		}
		key := base + "state:m1"
		if got := client.HGet(ctx, key, "BATTERY_LEVEL").Val(); got != strconv.FormatInt(at.UnixMilli(), 10)+"|80" {
			t.Fatalf("field = %q", got)
		}
		if ttl := client.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("TTL after Offer = %v, want (0, 1m]", ttl)
		}
		client.PExpire(ctx, key, time.Second)
		if err := c.Fill(ctx, "m1", nil); err != nil {
			t.Fatal(err)
		}
		if ttl := client.PTTL(ctx, key).Val(); ttl <= time.Second {
			t.Fatalf("TTL after Fill = %v, want refreshed to about 1m", ttl)
		}

		forever := redis.NewStateCache(client, base+"forever:", 0)
		if err := forever.Fill(ctx, "m1", nil); err != nil {
			t.Fatal(err)
		}
		if ttl := client.PTTL(ctx, base+"forever:state:m1").Val(); ttl != -1 {
			t.Fatalf("TTL with ttl 0 = %v, want none (-1)", ttl)
		}

		// An expired hash takes its marker along: back to a miss.
		client.Del(ctx, key)
		if _, ok, err := c.Latest(ctx, "m1"); err != nil || ok {
			t.Fatalf("Latest after expiry = %v, %v; want a miss", ok, err)
		}
	})
}

func TestExpirySchedulerLayout(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		client := b.client(t, url)
		ctx := context.Background()
		s := redis.NewExpiryScheduler(client, base, 0)
		at := time.Date(2030, 1, 1, 0, 0, 0, 1_500_000, time.UTC) // 1.5ms: rounds up
		if err := s.Schedule(ctx, "m1", at); err != nil {
			t.Fatal(err)
		}
		if got, want := client.ZScore(ctx, base+"deadlines", "m1").Val(), float64(at.UnixMilli()+1); got != want {
			t.Fatalf("score = %v, want %v", got, want)
		}
		if err := s.Cancel(ctx, "m1"); err != nil {
			t.Fatal(err)
		}
		if n := client.ZCard(ctx, base+"deadlines").Val(); n != 0 {
			t.Fatalf("%d deadlines after Cancel", n)
		}
	})
}

// TestLimiterKeysOfOneSubjectShareASlot: the rate limiter's and the failure
// limiter's keys of one subject carry it as their hash tag, after the
// prefix, so that a cluster keeps them in one slot.
func TestLimiterKeysOfOneSubjectShareASlot(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		client := b.client(t, url)
		ctx := context.Background()
		subjects := []string{"api:acc_1", "signin:addr:192.0.2.7", "webhook-test:wh_2"}
		for _, subject := range subjects {
			if _, err := redis.NewRateLimiter(client, base).Allow(ctx, subject, core.Rate{Limit: 5, Period: time.Minute}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := redis.NewFailureLimiter(client, base).Reserve(ctx, subject, core.Rate{Limit: 5, Period: time.Minute}); err != nil {
				t.Fatal(err)
			}
			keys := []string{base + "rate:{" + subject + "}", base + "failures:{" + subject + "}"}
			for _, key := range keys {
				if n := client.Exists(ctx, key).Val(); n != 1 {
					t.Fatalf("%s: no key %q", subject, key)
				}
			}
			if b.name != redisCluster.name {
				continue // CLUSTER KEYSLOT needs cluster mode
			}
			want := client.ClusterKeySlot(ctx, subject).Val()
			for _, key := range keys {
				if got, err := client.ClusterKeySlot(ctx, key).Result(); err != nil || got != want {
					t.Fatalf("slot of %q = %d, %v; want %d, the slot of %q", key, got, err, want, subject)
				}
			}
		}
	})
}

// TestWakeUpCrossesClusterNodes: a wake-up published through one master
// reaches a subscriber connected to another (classic pub/sub is forwarded
// across the cluster's bus).
func TestWakeUpCrossesClusterNodes(t *testing.T) {
	url, base := testenv.RedisClusterURL(t)
	cluster := redisCluster.client(t, url).(*goredis.ClusterClient)
	var (
		mu      sync.Mutex
		masters []string
	)
	if err := cluster.ForEachMaster(context.Background(), func(_ context.Context, node *goredis.Client) error {
		mu.Lock()
		masters = append(masters, node.Options().Addr)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(masters) < 2 {
		t.Fatalf("masters %v: want at least 2", masters)
	}
	node := func(addr string) goredis.UniversalClient {
		c := goredis.NewClient(&goredis.Options{Addr: addr, MaxRetries: 1, DialTimeout: time.Second})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	publisher := newWaker(t, node(masters[0]), base)
	subscriber := newWaker(t, node(masters[1]), base)
	ch, err := subscriber.Wakeups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := core.Cursor{Tx: 11, Seq: 5}
	if err := publisher.Wake(t.Context(), want); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("woken through %s with %v, want %v", masters[1], got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("a wake-up published through %s did not reach %s within 5s", masters[0], masters[1])
	}
}

// TestWakerResubscribes: when the subscription's connection breaks, the
// waker subscribes again and wakes its listeners at once with the newest
// cursor it knows, so that they read the event log for the wake-ups lost
// meanwhile.
func TestWakerResubscribes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		name := "waker-" + strings.ReplaceAll(base, ":", "-")
		client := b.client(t, url+clientNameParam(url, name))
		w := newWaker(t, client, base)
		ch, err := w.Wakeups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		receive := func(what string) core.Cursor {
			t.Helper()
			select {
			case c := <-ch:
				return c
			case <-time.After(5 * time.Second):
				t.Fatalf("no wake-up within 5s %s", what)
			}
			return core.Cursor{}
		}
		newest := core.Cursor{Tx: 4, Seq: 2}
		_ = w.Wake(t.Context(), newest)
		if got := receive("after Wake"); got != newest {
			t.Fatalf("woken with %v, want %v", got, newest)
		}
		if n := killSubscriptions(t, client, name); n != 1 {
			t.Fatalf("killed %d subscribed connections named %s, want 1", n, name)
		}
		if got := receive("after the subscription's connection was killed"); got != newest {
			t.Fatalf("woken after resubscribing with %v, want the newest known, %v", got, newest)
		}
	})
}

// clientNameParam is the URL parameter that names url's connections.
func clientNameParam(url, name string) string {
	if strings.Contains(url, "?") {
		return "&client_name=" + name
	}
	return "?client_name=" + name
}

// killSubscriptions kills the subscribed connections named name on every
// node and returns how many there were.
func killSubscriptions(t *testing.T, client goredis.UniversalClient, name string) int {
	t.Helper()
	var (
		mu     sync.Mutex
		killed int
	)
	kill := func(ctx context.Context, node *goredis.Client) error {
		list, err := node.ClientList(ctx).Result()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(list, "\n") {
			fields := strings.Fields(line)
			if !hasField(fields, "name="+name) || hasField(fields, "sub=0") {
				continue
			}
			for _, f := range fields {
				if id, ok := strings.CutPrefix(f, "id="); ok {
					if err := node.ClientKillByFilter(ctx, "ID", id).Err(); err != nil {
						return err
					}
					mu.Lock()
					killed++
					mu.Unlock()
				}
			}
		}
		return nil
	}
	var err error
	switch c := client.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachShard(context.Background(), kill)
	case *goredis.Client:
		err = kill(context.Background(), c)
	}
	if err != nil {
		t.Fatal(err)
	}
	return killed
}

func hasField(fields []string, f string) bool {
	for _, g := range fields {
		if g == f {
			return true
		}
	}
	return false
}

func TestNewWakerWithoutRedis(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	if _, _, err := redis.NewWaker(client, "x:", quiet); err == nil {
		t.Fatal("NewWaker succeeded without a server")
	}
}

// TestPingAnswersWhetherRedisServes: Ping succeeds on a serving Redis or
// cluster and fails when no node answers (readiness shows it degraded).
func TestPingAnswersWhetherRedisServes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, _ string) {
		if err := redis.Ping(t.Context(), b.client(t, url)); err != nil {
			t.Fatalf("Ping of a serving %s Redis: %v", b.name, err)
		}
	})
	for name, down := range map[string]goredis.UniversalClient{
		"single":  goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second}),
		"cluster": goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, MaxRedirects: -1, DialTimeout: time.Second}),
	} {
		if err := redis.Ping(t.Context(), down); err == nil {
			t.Errorf("Ping of a %s Redis that is down succeeded", name)
		}
		_ = down.Close()
	}
}

func TestReadPins(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, url, base string) {
		porttest.RunReadPins(t, func(t *testing.T) dbread.Pins {
			return redis.NewReadPins(b.client(t, url), base+t.Name()+":")
		}, porttest.Options{Shared: true})
	})
}

// TestRetryStart: a dependency that answers on the third try is waited
// for; one that never answers gives up with its last error.
func TestRetryStart(t *testing.T) {
	ctx := context.Background()
	tries := 0
	if err := redis.RetryStart(ctx, 10*time.Second, func(context.Context) error {
		if tries++; tries < 3 {
			return errors.New("LOADING")
		}
		return nil
	}); err != nil || tries != 3 {
		t.Fatalf("retryStart: %v after %d tries; want success on the third", err, tries)
	}
	down := errors.New("connection refused")
	if err := redis.RetryStart(ctx, 1500*time.Millisecond, func(context.Context) error { return down }); !errors.Is(err, down) {
		t.Fatalf("retryStart of a dependency that stays down: %v", err)
	}
}
