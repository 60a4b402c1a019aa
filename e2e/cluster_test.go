package e2e

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	redisadapter "github.com/mountd/mountd/adapters/redis"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
)

// TestRedisCluster runs mountd replicas on one PostgreSQL database and a
// Redis Cluster (MOUNTD_REDIS_CLUSTER_URL) instead of one Redis: /readyz
// checks the cluster, a report posted to one replica reaches a subscriber
// on the other through the cluster's wake-ups, and the API rate limit,
// counted on the cluster, answers 429 past it on either replica.
func TestRedisCluster(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	clusterURL, prefix := testenv.RedisClusterURL(t)
	replica := func(rateLimit string) app.Config {
		cfg := testConfig(t.TempDir(), dbURL)
		cfg.RedisClusterURL, cfg.RedisPrefix = clusterURL, prefix
		cfg.PublicURL = "http://mountd.test"
		cfg.RateLimit = rateLimit
		return cfg
	}
	a, b := start(t, replica("")), start(t, replica(""))
	owner := newFleet(a, "Cluster")
	onA := owner
	onB := fleet{in: b, creds: owner.creds, token: owner.token}

	t.Run("readyz checks the cluster", func(t *testing.T) {
		for _, in := range []*instance{a, b} {
			res, body := in.call(http.MethodGet, "/readyz", "", nil)
			if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `"redis":"ok"`) {
				t.Fatalf("readyz: %d %s; want 200 with redis ok", res.StatusCode, body)
			}
		}
	})

	t.Run("a subscriber on A receives a report posted to B", func(t *testing.T) {
		uid := uniqueUID("C")
		onA.associated(t, uid)
		c := a.wsReady(t, owner.token)
		c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
		prime(t, onB, uid, sub{c, "s", "mountStateChanged"})
		at := time.Now().UTC().Truncate(time.Millisecond)
		onB.report(t, uid, entry("CPU_TEMPERATURE", "41.5", at), entry("MOUNT_LOCKED", "1", at))
		e := nextData[stateEvent](t, c, "s", "mountStateChanged")
		if e.UID != uid || len(e.States) != 2 || e.Mount.CPUTemperature == nil || *e.Mount.CPUTemperature != 41.5 ||
			e.Mount.MountLocked == nil || !*e.Mount.MountLocked {
			t.Fatalf("event on A for B's report: %+v", e)
		}
		if m := onA.get(t, uid); m.CPUTemperature == nil || *m.CPUTemperature != 41.5 {
			t.Fatalf("mount on A after B's report: %+v", m)
		}
	})

	t.Run("the rate limit is counted on the cluster", func(t *testing.T) {
		limited := []*instance{start(t, replica("5/m")), start(t, replica("5/m"))}
		busy := newFleet(limited[0], "Busy")
		for i := range 5 {
			in := limited[i%len(limited)]
			res, body := in.call(http.MethodGet, "/api/v1/accounts/me", busy.token, nil)
			if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) {
				t.Fatalf("request %d on replica %d: %d %v %s", i+1, i%len(limited), res.StatusCode, res.Header, body)
			}
		}
		for _, in := range limited {
			res, body := in.call(http.MethodGet, "/api/v1/mounts", busy.token, nil)
			wantProblem(t, res, body, http.StatusTooManyRequests, "RATE_LIMITED")
			if wait, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || wait < 1 || wait > 12 {
				t.Fatalf("Retry-After %q, want 1 to 12 s (one request every 12 s)", res.Header.Get("Retry-After"))
			}
		}
		// The count lives on the cluster, under the prefix, tagged by the
		// account's key.
		client, closeClient, err := redisadapter.OpenCluster(context.Background(), clusterURL)
		if err != nil {
			t.Fatal(err)
		}
		defer closeClient()
		key := prefix + "rate:{api:" + busy.creds.AccountID + "}"
		if n, err := client.Exists(context.Background(), key).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s on the cluster: %d, %v", key, n, err)
		}
	})
}

// TestRedisClusterFailover kills (SIGKILL) the Redis Cluster master that
// holds the wake-up channel, under two mountd replicas, while reports flow
// through one of them to a subscriber on the other. No report is refused
// with a 500, /readyz stays 200 (the database answers), the subscriber
// gets every acknowledged report in order (it reads the event log for the
// wake-ups lost meanwhile), and once a replica took over, the API rate
// limit counts again on the cluster, without a restart.
func TestRedisClusterFailover(t *testing.T) {
	cluster := testenv.StartRedisCluster(t)
	dbURL := testenv.PostgresURL(t)
	const prefix = "mountd:"
	replica := func(rateLimit string) app.Config {
		cfg := testConfig(t.TempDir(), dbURL)
		cfg.RedisClusterURL, cfg.RedisPrefix = cluster.URL, prefix
		cfg.PublicURL = "http://mountd.test"
		cfg.RateLimit = rateLimit
		return cfg
	}
	a, b := start(t, replica("")), start(t, replica(""))
	limited := []*instance{start(t, replica("5/m")), start(t, replica("5/m"))}
	owner := newFleet(a, "Failover")
	onB := fleet{in: b, creds: owner.creds, token: owner.token}
	uid := uniqueUID("F")
	owner.associated(t, uid)
	c := a.wsReady(t, owner.token)
	c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
	prime(t, onB, uid, sub{c, "s", "mountStateChanged"})

	client, closeClient, err := redisadapter.OpenCluster(context.Background(), cluster.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	master, err := client.(*goredis.ClusterClient).MasterForKey(context.Background(), prefix+"events")
	if err != nil {
		t.Fatal(err)
	}
	victim := master.Options().Addr
	cluster.Kill(victim)
	t.Logf("killed master %s", victim)

	if res, body := a.call(http.MethodGet, "/readyz", "", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("readyz during the failover: %d %s; want 200 (the database answers)", res.StatusCode, body)
	}
	const reports = 40
	base := time.Now().UTC().Truncate(time.Millisecond)
	var (
		acked   []string
		slowest time.Duration
	)
	for i := range reports {
		value := strconv.Itoa(i)
		began := time.Now()
		res, body := onB.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states",
			map[string]any{"states": []map[string]any{entry("BATTERY_LEVEL", value, base.Add(time.Duration(i)*time.Millisecond))}})
		slowest = max(slowest, time.Since(began))
		switch {
		case res.StatusCode == http.StatusOK:
			acked = append(acked, value)
		case res.StatusCode == http.StatusServiceUnavailable && res.Header.Get("Retry-After") != "":
		default:
			t.Fatalf("report %d during the failover: %d %s; want 200, or 503 with Retry-After", i, res.StatusCode, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d of %d reports acknowledged; the slowest took %v", len(acked), reports, slowest)
	if len(acked) == 0 {
		t.Fatal("no report acknowledged during the failover")
	}
	// Every acknowledged report reaches the subscriber, in order (one
	// answered 503 may have been stored too).
	var got []string
	for want := acked; len(want) > 0; {
		e := nextData[stateEvent](t, c, "s", "mountStateChanged")
		if len(e.States) != 1 {
			t.Fatalf("event %+v", e)
		}
		v := e.States[0].Value
		if len(got) > 0 && atoi(t, v) <= atoi(t, got[len(got)-1]) {
			t.Fatalf("the subscriber got %s after %v", v, got)
		}
		got = append(got, v)
		if v == want[0] {
			want = want[1:]
		} else if slices.Contains(want, v) {
			t.Fatalf("the subscriber got %v, missing acknowledged reports before %s (acknowledged: %v)", got, v, acked)
		}
	}

	testenv.WaitFor(t, 30*time.Second, "the cluster serving again", func() bool {
		return redisadapter.Ping(context.Background(), client) == nil
	})
	busy := newFleet(limited[0], "Busy after the failover")
	testenv.WaitFor(t, 30*time.Second, "429 past the rate limit after the failover", func() bool {
		res, body := limited[1].call(http.MethodGet, "/api/v1/accounts/me", busy.token, nil)
		switch res.StatusCode {
		case http.StatusOK:
			return false
		case http.StatusTooManyRequests:
			return true
		}
		t.Fatalf("a request after the failover: %d %s", res.StatusCode, body)
		return false
	})
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}
