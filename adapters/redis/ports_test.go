package redis_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/adapters/porttest"
	"github.com/mountd/mountd/adapters/redis"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// Every factory call opens its own client, as a replica would. Within one
// subtest the calls share a key prefix (base + subtest name), so the suites'
// Shared cases see two replicas of one deployment.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup returns the test Redis URL and a key prefix whose keys are deleted
// when t ends.
func setup(t *testing.T) (url, base string) {
	t.Helper()
	url, base = testenv.RedisURL(t)
	t.Cleanup(func() {
		ctx := context.Background()
		client, closeClient, err := redis.Open(ctx, url)
		if err != nil {
			return
		}
		defer closeClient()
		iter := client.Scan(ctx, 0, base+"*", 1000).Iterator()
		for iter.Next(ctx) {
			client.Del(ctx, iter.Val())
		}
	})
	return url, base
}

func newClient(t *testing.T, url string) *goredis.Client {
	t.Helper()
	client, closeClient, err := redis.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	return client
}

func TestStateCache(t *testing.T) {
	url, base := setup(t)
	porttest.RunStateCache(t, func(t *testing.T) core.StateCache {
		return redis.NewStateCache(newClient(t, url), base+t.Name()+":", time.Minute)
	}, porttest.Options{Shared: true})
}

func TestEventWaker(t *testing.T) {
	url, base := setup(t)
	porttest.RunEventWaker(t, func(t *testing.T) core.EventWaker {
		w, stop, err := redis.NewWaker(newClient(t, url), base+t.Name()+":", quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		return w
	}, porttest.Options{Shared: true})
}

func TestExpiryScheduler(t *testing.T) {
	url, base := setup(t)
	porttest.RunExpiryScheduler(t, func(t *testing.T) core.ExpiryScheduler {
		return redis.NewExpiryScheduler(newClient(t, url), base+t.Name()+":", 50*time.Millisecond)
	}, porttest.Options{Shared: true})
}

func TestFailureLimiter(t *testing.T) {
	url, base := setup(t)
	porttest.RunFailureLimiter(t, func(t *testing.T, now func() time.Time) core.FailureLimiter {
		l := redis.NewFailureLimiter(newClient(t, url), base+t.Name()+":")
		redis.SetFailureClock(l, now)
		return l
	}, porttest.Options{Shared: true})
}

func TestRateLimiter(t *testing.T) {
	url, base := setup(t)
	porttest.RunRateLimiter(t, func(t *testing.T, now func() time.Time) core.RateLimiter {
		l := redis.NewRateLimiter(newClient(t, url), base+t.Name()+":")
		redis.SetRateClock(l, now)
		return l
	}, porttest.Options{Shared: true})
}

func TestStateCacheLayoutAndTTL(t *testing.T) {
	url, base := setup(t)
	client := newClient(t, url)
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
}

func TestExpirySchedulerLayout(t *testing.T) {
	url, base := setup(t)
	client := newClient(t, url)
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
}

func TestNewWakerWithoutRedis(t *testing.T) {
	client := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	if _, _, err := redis.NewWaker(client, "x:", quiet); err == nil {
		t.Fatal("NewWaker succeeded without a server")
	}
}
