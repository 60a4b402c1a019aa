package redis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/adapters/redis"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// failoverWait bounds each wait for the cluster and the clients to recover
// from a killed master: the nodes hold it failed after a second, its
// replica is elected within about another, and the clients reload the slot
// map every 2 s.
const failoverWait = 30 * time.Second

// TestMasterFailover kills (SIGKILL) the master that holds the wake-up
// channel's slot, the keys of a rate limit and a mount's cached state, on a
// cluster of the test's own. Once its replica has taken over, without a
// restart: the waker that was subscribed through it subscribes again and
// wakes its listeners with the newest cursor it knew (they read the event
// log for what they missed), wake-ups flow again, the limiter and the cache
// answer, and Ping (readiness) says the cluster serves.
func TestMasterFailover(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	ctx := context.Background()
	const prefix = "failover:"
	open := func() *goredis.ClusterClient {
		return redisCluster.client(t, cluster.URL).(*goredis.ClusterClient)
	}
	subscriberClient := open()
	subscriber := newWaker(t, subscriberClient, prefix)
	wakeups, err := subscriber.Wakeups(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	publisher := newWaker(t, open(), prefix)
	receive := func(what string) core.Cursor {
		t.Helper()
		select {
		case c := <-wakeups:
			return c
		case <-time.After(failoverWait):
			t.Fatalf("no wake-up within %v %s", failoverWait, what)
		}
		return core.Cursor{}
	}
	known := core.Cursor{Tx: 1, Seq: 1}
	_ = publisher.Wake(ctx, known)
	if got := receive("before the failover"); got != known {
		t.Fatalf("woken with %v, want %v", got, known)
	}

	// The master of the channel's slot; a rate limit key and a mount's
	// hash that it holds too.
	victim := masterOf(t, subscriberClient, prefix+"events")
	var subject, uid string
	for i := 0; subject == "" || uid == ""; i++ {
		s := "api:acc_" + strconv.Itoa(i)
		if subject == "" && masterOf(t, subscriberClient, s) == victim {
			subject = s
		}
		u := "acc/M" + strconv.Itoa(i)
		if uid == "" && masterOf(t, subscriberClient, prefix+"state:"+u) == victim {
			uid = u
		}
	}
	rates := redis.NewRateLimiter(open(), prefix)
	cache := redis.NewStateCache(open(), prefix, time.Minute)
	rate := core.Rate{Limit: 1000, Period: time.Minute}
	if _, err := rates.Allow(ctx, subject, rate); err != nil {
		t.Fatal(err)
	}
	entry := core.StateEntry{Code: core.StateBatteryLevel, Value: "42", OccurredAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := cache.Fill(ctx, uid, []core.StateEntry{entry}); err != nil {
		t.Fatal(err)
	}

	cluster.Kill(victim)
	t.Logf("killed master %s", victim)
	t.Cleanup(func() { // what the survivors saw, when the test failed
		if t.Failed() {
			for _, a := range cluster.Addrs {
				if a != victim {
					t.Logf("after, from %s:\n%s", a, goredis.NewClient(&goredis.Options{Addr: a}).ClusterNodes(ctx).Val())
					break
				}
			}
		}
	})

	killedAt := time.Now()
	if got := receive("after the subscription's master was killed"); got != known {
		t.Fatalf("woken after resubscribing with %v, want the newest known, %v", got, known)
	}
	testenv.WaitFor(t, failoverWait, "a wake-up published after the failover", func() bool {
		known.Seq++
		_ = publisher.Wake(ctx, known)
		select {
		case got := <-wakeups:
			return got == known
		case <-time.After(500 * time.Millisecond):
			return false
		}
	})
	testenv.WaitFor(t, failoverWait, "the rate limiter answering", func() bool {
		_, err := rates.Allow(ctx, subject, rate)
		return err == nil
	})
	testenv.WaitFor(t, failoverWait, "the state cache answering", func() bool {
		// The hash may have been lost with the master's last writes (it
		// is a cache): filling it again is what a replica would do.
		if err := cache.Fill(ctx, uid, []core.StateEntry{entry}); err != nil {
			return false
		}
		got, ok, err := cache.Latest(ctx, uid)
		return err == nil && ok && len(got) == 1 && got[0].Value == "42"
	})
	testenv.WaitFor(t, failoverWait, "Ping saying the cluster serves", func() bool {
		return redis.Ping(ctx, subscriberClient) == nil
	})
	t.Logf("recovered %v after the kill", time.Since(killedAt).Round(100*time.Millisecond))
}

// masterOf names the master that serves key's slot.
func masterOf(t *testing.T, client *goredis.ClusterClient, key string) string {
	t.Helper()
	master, err := client.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return master.Options().Addr
}
