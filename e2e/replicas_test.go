package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// TestReplicas runs two mountd instances on one PostgreSQL database and one
// Redis, as two replicas behind a load balancer: same database, Redis,
// master key and public URL (so the issuer, and the identity key kept in the
// database, are the same and a token from one is valid on the other).
func TestReplicas(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisURL, redisPrefix := testenv.RedisURL(t)
	replica := func(window time.Duration) app.Config {
		cfg := testConfig(t.TempDir(), dbURL)
		cfg.RedisURL, cfg.RedisPrefix = redisURL, redisPrefix
		cfg.PublicURL = "http://mountd.test"
		cfg.AssociationWindow = window
		return cfg
	}
	const window = time.Second
	a := start(t, replica(window))
	b := start(t, replica(window))

	owner := newFleet(a, "Fleet")
	onA := owner
	onB := fleet{in: b, creds: owner.creds, token: owner.token} // the token from A, used on B

	t.Run("a token from one replica is valid on the other", func(t *testing.T) {
		uid := uniqueUID("R")
		onB.associated(t, uid)
		if m := onA.get(t, uid); m.AssociationState != "ASSOCIATED" {
			t.Fatalf("on A: %+v", m)
		}
	})

	t.Run("a subscriber on A receives a report posted to B", func(t *testing.T) {
		uid := uniqueUID("R")
		onA.associated(t, uid)
		c := a.wsReady(t, owner.token)
		c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
		prime(t, onB, uid, sub{c, "s", "mountStateChanged"}) // primed through B already
		at := time.Now().UTC().Truncate(time.Millisecond)
		onB.report(t, uid, entry("CPU_TEMPERATURE", "55.55", at), entry("MOUNT_LOCKED", "0", at))
		e := nextData[stateEvent](t, c, "s", "mountStateChanged")
		if e.UID != uid || len(e.States) != 2 || e.Mount.CPUTemperature == nil || *e.Mount.CPUTemperature != 55.6 ||
			e.Mount.MountLocked == nil || *e.Mount.MountLocked {
			t.Fatalf("event on A for B's report: %+v", e)
		}
		c.Quiet(300 * time.Millisecond)
	})

	t.Run("an expiry fires once and reaches subscribers on both replicas", func(t *testing.T) {
		primer, w := uniqueUID("P"), uniqueUID("W")
		onA.associated(t, primer)
		ca, cb := a.wsReady(t, owner.token), b.wsReady(t, owner.token)
		ca.Subscribe("a", eventsSubscription, nil)
		cb.Subscribe("b", eventsSubscription, nil)
		prime(t, onA, primer, sub{ca, "a", "mountEvents"}, sub{cb, "b", "mountEvents"})

		onB.associate(t, w, nil)
		for _, c := range []struct {
			c  *wsprototest.Client
			id string
		}{{ca, "a"}, {cb, "b"}} {
			for _, want := range []string{"ASSOCIATION_REQUESTED", "ASSOCIATION_EXPIRED"} {
				e := nextData[mountEvent](t, c.c, c.id, "mountEvents")
				if e.Type != want || e.UID != w {
					t.Fatalf("subscriber %s: got %+v; want %s of %s", c.id, e, want, w)
				}
			}
		}
		// both schedulers poll every 250ms: a second firing would show by now
		ca.Quiet(time.Second)
		cb.Quiet(100 * time.Millisecond)
		// the mount is INACTIVE: gone for its former owner on either replica
		res, raw := onA.call("GET", "/api/v1/mounts/"+w, nil)
		wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
	})

	t.Run("per-mount order holds for reports posted alternately to A and B", func(t *testing.T) {
		uid := uniqueUID("O")
		onA.associated(t, uid)
		ca, cb := a.wsReady(t, owner.token), b.wsReady(t, owner.token)
		ca.Subscribe("a", stateSubscription, map[string]any{"uid": uid})
		cb.Subscribe("b", stateSubscription, map[string]any{"uid": uid})
		prime(t, onA, uid, sub{ca, "a", "mountStateChanged"}, sub{cb, "b", "mountStateChanged"})

		const n = 50
		base := time.Now().UTC().Truncate(time.Millisecond)
		for i := 0; i < n; i++ {
			via := onA
			if i%2 == 1 {
				via = onB
			}
			via.report(t, uid, entry("BATTERY_LEVEL", strconv.Itoa(i), base.Add(time.Duration(i)*time.Millisecond)))
		}
		for _, c := range []struct {
			c  *wsprototest.Client
			id string
		}{{ca, "a"}, {cb, "b"}} {
			for i := 0; i < n; i++ {
				e := nextData[stateEvent](t, c.c, c.id, "mountStateChanged")
				if len(e.States) != 1 || e.States[0].Value != strconv.Itoa(i) || *e.Mount.BatteryLevel != i {
					t.Fatalf("subscriber %s, event %d: %+v", c.id, i, e)
				}
			}
			c.c.Quiet(200 * time.Millisecond)
		}
	})
}
