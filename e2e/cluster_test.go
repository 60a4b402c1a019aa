package e2e

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

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
