package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// These tests speak graphql-transport-ws (and legacy graphql-ws) over a real
// TCP socket to the server running in-process, with a small client that
// writes the protocol messages itself (graph/wsproto/wsprototest).

// --- one test per protocol rule, against the real server ---

// Rule: no connection_init within 3s → 4408.
func TestGraphQLWSInitTimeout(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	for _, tc := range []struct {
		name  string
		proto string
		ping  bool
	}{
		{"silent", "", false},
		{"pings do not count", "", true},
		{"legacy graphql-ws", wsproto.LegacyWS, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := in.dialWS(t, wsprototest.Options{Subprotocol: tc.proto})
			start := time.Now()
			if tc.ping {
				c.Send(map[string]any{"type": "ping"})
				c.Expect("pong")
			}
			c.ExpectClose(6*time.Second, wsproto.CloseInitTimeout, "Connection initialisation timeout")
			if waited := time.Since(start); waited < 2900*time.Millisecond {
				t.Fatalf("closed after %s; want about 3s", waited)
			}
		})
	}
}

// Rule: an invalid message → 4400.
func TestGraphQLWSInvalidMessage(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	for _, tc := range []struct {
		name  string
		acked bool
		raw   string
	}{
		{"not JSON", false, `connection_init`},
		{"no type", false, `{"payload":{}}`},
		{"unknown type", false, `{"type":"hello"}`},
		{"init payload not an object", false, `{"type":"connection_init","payload":"token"}`},
		{"not JSON after ack", true, `{`},
		{"legacy start on graphql-transport-ws", true, `{"type":"start","id":"1","payload":{"query":"{ me { role } }"}}`},
		{"server message from the client", true, `{"type":"next","id":"1","payload":{}}`},
		{"subscribe without id", true, `{"type":"subscribe","payload":{"query":"{ me { role } }"}}`},
		{"subscribe with empty id", true, `{"type":"subscribe","id":"","payload":{"query":"{ me { role } }"}}`},
		{"subscribe without query", true, `{"type":"subscribe","id":"1","payload":{"variables":{}}}`},
		{"subscribe variables not an object", true, `{"type":"subscribe","id":"1","payload":{"query":"{ me { role } }","variables":"x"}}`},
		{"complete without id", true, `{"type":"complete"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.dialWS(t, wsprototest.Options{})
			if tc.acked {
				c.Init(map[string]any{"Access-Key": a.token})
			}
			c.SendRaw(tc.raw)
			code, reason, msgs := c.WaitClose(5 * time.Second)
			if code != wsproto.CloseBadRequest || !strings.HasPrefix(reason, "Invalid message received") {
				t.Fatalf("closed with %d %q; want 4400 (messages %v)", code, reason, msgs)
			}
		})
	}
}

// Rule: subscribe before connection_ack → 4401.
func TestGraphQLWSSubscribeBeforeAck(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	for _, tc := range []struct {
		name   string
		before []string
	}{
		{"first message", nil},
		{"after a ping", []string{`{"type":"ping"}`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.dialWS(t, wsprototest.Options{})
			for _, raw := range tc.before {
				c.SendRaw(raw)
			}
			c.Subscribe("1", eventsSubscription, nil)
			for _, m := range c.ExpectClose(5*time.Second, wsproto.CloseUnauthorized, "Unauthorized") {
				if m.Type != "pong" {
					t.Fatalf("unexpected %s before the close", m)
				}
			}
		})
	}
}

// Rule: a rejected connection_init → 4403 Forbidden; an accepted one is
// acknowledged without echoing the token.
func TestGraphQLWSRejectedInit(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	noOpenID := in.token(a.creds, "sub", audItem)
	noAudience := in.token(a.creds, "openid", "sub")
	rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:M1")
	for _, tc := range []struct {
		name    string
		proto   string
		payload map[string]any // nil: no payload
		ok      bool
	}{
		{"no payload", "", nil, false},
		{"empty payload", "", map[string]any{}, false},
		{"garbage token", "", map[string]any{"Access-Key": "not-a-token"}, false},
		{"tampered token", "", map[string]any{"Access-Key": a.token[:len(a.token)-4] + "AAAA"}, false},
		{"bearer without token", "", map[string]any{"Authorization": "Bearer "}, false},
		{"token as Basic", "", map[string]any{"Authorization": "Basic " + a.token}, false},
		{"token lacking openid", "", map[string]any{"Access-Key": noOpenID}, false},
		{"token lacking the audience item", "", map[string]any{"Access-Key": noAudience}, false},
		{"legacy garbage token", wsproto.LegacyWS, map[string]any{"Access-Key": "not-a-token"}, false},
		{"Access-Key", "", map[string]any{"Access-Key": a.token}, true},
		{"access-key", "", map[string]any{"access-key": a.token}, true},
		{"Authorization Bearer", "", map[string]any{"Authorization": "Bearer " + a.token}, true},
		{"restricted token", "", map[string]any{"Authorization": "bearer " + rider}, true},
		{"legacy Access-Key", wsproto.LegacyWS, map[string]any{"Access-Key": a.token}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.dialWS(t, wsprototest.Options{Subprotocol: tc.proto})
			m := map[string]any{"type": "connection_init"}
			if tc.payload != nil {
				m["payload"] = tc.payload
			}
			c.Send(m)
			if !tc.ok {
				for _, m := range c.ExpectClose(5*time.Second, wsproto.CloseForbidden, "Forbidden") {
					if m.Type == "connection_ack" {
						t.Fatalf("a rejected init was acknowledged")
					}
				}
				return
			}
			ack := c.Expect("connection_ack")
			if ack.Payload != nil || strings.Contains(ack.String(), a.token) || strings.Contains(ack.String(), rider) {
				t.Fatalf("connection_ack %s carries a payload", ack)
			}
			c.Subscribe("me", `{ me { accountId role } }`, nil)
			var me struct {
				AccountID string `json:"accountId"`
			}
			if tc.proto == "" {
				me = nextData[struct {
					AccountID string `json:"accountId"`
				}](t, c, "me", "me")
			} else {
				var res struct {
					Data struct {
						Me struct {
							AccountID string `json:"accountId"`
						} `json:"me"`
					} `json:"data"`
				}
				_ = json.Unmarshal(c.Expect("data").Payload, &res)
				me.AccountID = res.Data.Me.AccountID
			}
			if me.AccountID != a.creds.AccountID {
				t.Fatalf("me over the socket: %+v", me)
			}
		})
	}
}

// Rule: subscribe with an id that is already active → 4409.
func TestGraphQLWSDuplicateSubscriber(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	uid := uniqueUID("D")
	a.associated(t, uid)
	for _, tc := range []struct {
		name   string
		second string
	}{
		{"same subscription", stateSubscription},
		{"another operation", `{ me { role } }`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.wsReady(t, a.token)
			c.Subscribe("x", stateSubscription, map[string]any{"uid": uid})
			prime(t, a, uid, sub{c, "x", "mountStateChanged"})
			c.Subscribe("x", tc.second, nil)
			c.ExpectClose(5*time.Second, wsproto.CloseSubscriberAlreadyExists, "Subscriber for x already exists")
		})
	}
	t.Run("a completed id may be reused", func(t *testing.T) {
		c := in.wsReady(t, a.token)
		c.Subscribe("x", `{ me { role } }`, nil) // a query: next, then complete
		c.Expect("next")
		c.Expect("complete")
		c.Subscribe("x", stateSubscription, map[string]any{"uid": uid})
		prime(t, a, uid, sub{c, "x", "mountStateChanged"})
		c.Complete("x")
		c.Subscribe("x", stateSubscription, map[string]any{"uid": uid})
		prime(t, a, uid, sub{c, "x", "mountStateChanged"})
	})
}

// Rule: a second connection_init → 4429.
func TestGraphQLWSSecondInit(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	for _, tc := range []struct {
		name    string
		payload map[string]any
	}{
		{"same token", map[string]any{"Access-Key": a.token}},
		{"no token", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.wsReady(t, a.token)
			c.Send(map[string]any{"type": "connection_init", "payload": tc.payload})
			c.ExpectClose(5*time.Second, wsproto.CloseTooManyInitRequests, "Too many initialisation requests")
		})
	}
}

// Rule: ping → pong with its payload; a client pong is accepted silently.
func TestGraphQLWSPingPong(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	for _, tc := range []struct {
		name  string
		acked bool
		send  string
		want  string
	}{
		{"ping before init", false, `{"type":"ping"}`, `{"type":"pong"}`},
		{"ping with payload before init", false, `{"type":"ping","payload":{"t":1}}`, `{"type":"pong","payload":{"t":1}}`},
		{"ping after ack", true, `{"type":"ping"}`, `{"type":"pong"}`},
		{"ping with payload after ack", true, `{"type":"ping","payload":{"latency":"probe","n":[1,2]}}`, `{"type":"pong","payload":{"latency":"probe","n":[1,2]}}`},
		{"pong before init", false, `{"type":"pong"}`, ""},
		{"pong after ack", true, `{"type":"pong","payload":{"heartbeat":true}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := in.dialWS(t, wsprototest.Options{})
			if tc.acked {
				c.Init(map[string]any{"Access-Key": a.token})
			}
			c.SendRaw(tc.send)
			if tc.want == "" {
				if m, err := c.ExpectRaw(300 * time.Millisecond); err == nil || c.Closed() {
					t.Fatalf("a pong was answered: %v %v", m, err)
				}
			} else if m, err := c.ExpectRaw(5 * time.Second); err != nil || m.String() != tc.want {
				t.Fatalf("got %v %v; want %s", m, err, tc.want)
			}
			if !tc.acked {
				c.Init(map[string]any{"Access-Key": a.token})
			}
		})
	}
}

// Rule: complete both ways.
func TestGraphQLWSComplete(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	uid := uniqueUID("C")
	a.associated(t, uid)
	t.Run("server completes an operation whose stream ended", func(t *testing.T) {
		c := in.wsReady(t, a.token)
		c.Subscribe("q", `{ me { role } }`, nil)
		if me := nextData[map[string]string](t, c, "q", "me"); me["role"] != "owner" {
			t.Fatalf("me %v", me)
		}
		if m := c.Expect("complete"); m.ID != "q" {
			t.Fatalf("complete %s", m)
		}
	})
	t.Run("client complete stops the subscription and its goroutines", func(t *testing.T) {
		c := in.wsReady(t, a.token)
		c.Subscribe("k", `{ me { role } }`, nil) // a quiet second operation on the socket
		c.Expect("next")
		c.Expect("complete")
		base := settledGoroutines()
		c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
		c.Subscribe("e", eventsSubscription, nil)
		prime(t, a, uid, sub{c, "s", "mountStateChanged"}, sub{c, "e", "mountEvents"})
		c.Complete("s")
		c.Complete("e")
		waitGoroutines(t, base)
		a.report(t, uid, entry("BATTERY_LEVEL", "50", time.Now()))
		c.Quiet(300 * time.Millisecond) // nothing for them, not even a complete
	})
}

// Rule: the socket closes with 4403 when the token expires; an expired
// token is refused at init with 4403.
func TestGraphQLWSTokenExpiry(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.TokenTTL = 2 * time.Second
	in := start(t, cfg)
	a := newFleet(in, "A")
	uid := uniqueUID("T")
	a.associated(t, uid)
	for _, tc := range []struct {
		name  string
		proto string
	}{
		{"graphql-transport-ws", ""},
		{"legacy graphql-ws", wsproto.LegacyWS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			token := in.ownerToken(a.creds)
			issued := time.Now()
			c := in.dialWS(t, wsprototest.Options{Subprotocol: tc.proto})
			c.Init(map[string]any{"Access-Key": token})
			c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
			if tc.proto == "" {
				prime(t, fleet{in: in, creds: a.creds, token: in.ownerToken(a.creds)}, uid, sub{c, "s", "mountStateChanged"})
			}
			// Generous bounds: a socket that ignored its token's expiry would
			// stay open for good.
			msgs := c.ExpectClose(30*time.Second, wsproto.CloseForbidden, "Forbidden: the access token expired")
			if lived := time.Since(issued); lived > 30*time.Second {
				t.Fatalf("the socket outlived its 2s token by far: %s", lived)
			}
			for _, m := range msgs {
				if m.Type == "complete" && tc.proto == "" {
					t.Fatalf("the subscription must not look completed (the client resubscribes after reconnecting): %v", msgs)
				}
			}
			// the same token is refused at init now
			c = in.dialWS(t, wsprototest.Options{Subprotocol: tc.proto})
			c.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"Access-Key": token}})
			c.ExpectClose(5*time.Second, wsproto.CloseForbidden, "Forbidden")
		})
	}
}

// Rule: a subscription the token may not see gets an error message with
// extensions.code, and the socket stays open.
func TestGraphQLWSRestrictedSubscription(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")
	m1, m2, other := uniqueUID("M1"), uniqueUID("M2"), uniqueUID("X")
	a.associated(t, m1)
	a.associated(t, m2)
	b.associated(t, other)
	rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+m1)}

	c := in.wsReady(t, rider.token)
	for _, tc := range []struct {
		name      string
		query     string
		variables map[string]any
	}{
		{"mountStateChanged of a mount outside its items", stateSubscription, map[string]any{"uid": m2}},
		{"mountEvents naming a mount outside its items", eventsSubscription, map[string]any{"uids": []string{m1, m2}}},
		{"mountStateChanged of another account's mount", stateSubscription, map[string]any{"uid": other}},
		{"mountStateChanged of an unknown mount", stateSubscription, map[string]any{"uid": "nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c.Subscribe("denied", tc.query, tc.variables)
			m := c.Expect("error")
			errs := m.Errors()
			if m.ID != "denied" || len(errs) != 1 || errs[0].Code() != "MOUNT_NOT_FOUND" {
				t.Fatalf("got %s; want an error message with MOUNT_NOT_FOUND", m)
			}
			c.Quiet(200 * time.Millisecond) // no complete after an error; the socket is open
		})
	}
	t.Run("the socket still serves its own mount", func(t *testing.T) {
		c.Subscribe("mine", stateSubscription, map[string]any{"uid": m1})
		c.Subscribe("all", eventsSubscription, nil)
		prime(t, rider, m1, sub{c, "mine", "mountStateChanged"}, sub{c, "all", "mountEvents"})
		a.report(t, m2, entry("BATTERY_LEVEL", "12", time.Now())) // not its mount
		a.report(t, m1, entry("BATTERY_LEVEL", "77", time.Now()))
		got := map[string]mountEvent{}
		for range 2 { // one each, in either order
			m := c.Next()
			field := map[string]string{"mine": "mountStateChanged", "all": "mountEvents"}[m.ID]
			got[m.ID] = data[mountEvent](t, m, m.ID, field)
		}
		for _, id := range []string{"mine", "all"} {
			if e := got[id]; e.UID != m1 || e.Mount.BatteryLevel == nil || *e.Mount.BatteryLevel != 77 {
				t.Fatalf("%s: event %+v", id, e)
			}
		}
		c.Quiet(300 * time.Millisecond)
	})
}

// The legacy graphql-ws subprotocol keeps working.
func TestGraphQLWSLegacyProtocol(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	uid := uniqueUID("L")
	a.associated(t, uid)
	c := in.dialWS(t, wsprototest.Options{Subprotocol: wsproto.LegacyWS})
	c.Init(map[string]any{"Authorization": "Bearer " + a.token})
	c.Subscribe("1", stateSubscription, map[string]any{"uid": uid}) // start
	var got *stateEvent
	for k := 1; got == nil; k++ { // the subscription starts asynchronously
		if k > 40 {
			t.Fatal("no data")
		}
		a.report(t, uid, entry("HELMET_MOUNTED", strconv.Itoa(k%2), time.Now()))
		m, err := c.NextWithin(250 * time.Millisecond)
		if err != nil {
			continue
		}
		var p struct {
			Data struct {
				MountStateChanged stateEvent `json:"mountStateChanged"`
			} `json:"data"`
		}
		if m.Type != "data" || m.ID != "1" || json.Unmarshal(m.Payload, &p) != nil || p.Data.MountStateChanged.UID != uid {
			t.Fatalf("got %s; want data", m)
		}
		got = &p.Data.MountStateChanged
	}
	if got.Mount.HelmetMounted == nil || len(got.States) != 1 {
		t.Fatalf("data %+v", got)
	}
	c.Complete("1") // stop
	for {
		m := c.Next()
		if m.Type == "complete" && m.ID == "1" {
			break
		}
		if m.Type != "data" {
			t.Fatalf("got %s; want complete", m)
		}
	}
	c.Send(map[string]any{"type": "connection_terminate"})
	c.WaitClose(5 * time.Second)
}

// Cross-origin browser upgrades are refused unless allowed.
func TestGraphQLWSOrigin(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	host := strings.TrimPrefix(in.base, "http://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true}, // not a browser
		{"http://" + host, true},
		{"http://evil.example", false},
		{"http://" + host + ".evil.example", false},
	} {
		t.Run("origin "+tc.origin, func(t *testing.T) {
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			_, err := wsprototest.Dial(t, in.base+"/graphql", wsprototest.Options{Header: h})
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok && (err == nil || !strings.Contains(err.Error(), "HTTP 403")) {
				t.Fatalf("cross-origin upgrade: %v; want HTTP 403", err)
			}
		})
	}
}

// --- the subscriptions ---

// mountStateChanged: one event per accepted report, with that report's new
// entries and the mount's computed fields; an all-duplicates report emits
// nothing.
func TestMountStateChangedSubscription(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			uid, other := uniqueUID("S"), uniqueUID("O")
			a.associated(t, uid)
			a.associated(t, other)
			c := in.wsReady(t, a.token)
			c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
			prime(t, a, uid, sub{c, "s", "mountStateChanged"})

			at := time.Now().UTC().Truncate(time.Millisecond)
			report := []map[string]any{
				entry("BATTERY_LEVEL", "87.5", at),
				entry("CPU_TEMPERATURE", "41.26", at),
				entry("MOUNT_LOCKED", "1", at),
				entry("HELMET_MOUNTED", "0", at),
			}
			if res := a.report(t, uid, report...); res["accepted"] != 4 {
				t.Fatalf("report %v", res)
			}
			e := nextData[stateEvent](t, c, "s", "mountStateChanged")
			if e.UID != uid || len(e.States) != 4 || e.Mount.UID != uid || e.Mount.AssociationState != "ASSOCIATED" {
				t.Fatalf("event %+v", e)
			}
			got := map[string]string{}
			for _, s := range e.States {
				if s.OccurredAt != at.Format("2006-01-02T15:04:05.000Z") || s.ReceivedAt == nil {
					t.Fatalf("state %+v; want occurredAt %s", s, at)
				}
				got[s.Code] = s.Value
			}
			if got["BATTERY_LEVEL"] != "87.5" || got["CPU_TEMPERATURE"] != "41.26" || got["MOUNT_LOCKED"] != "1" || got["HELMET_MOUNTED"] != "0" {
				t.Fatalf("states %v", got)
			}
			m := e.Mount
			if m.BatteryLevel == nil || *m.BatteryLevel != 88 || m.CPUTemperature == nil || *m.CPUTemperature != 41.3 ||
				m.MountLocked == nil || !*m.MountLocked || m.HelmetMounted == nil || *m.HelmetMounted {
				t.Fatalf("computed fields %+v", m)
			}
			if _, err := time.Parse(time.RFC3339, e.OccurredAt); err != nil {
				t.Fatalf("occurredAt %q", e.OccurredAt)
			}

			// all duplicates: nothing; a partly new report: its new entries only
			if res := a.report(t, uid, report...); res["accepted"] != 0 || res["duplicates"] != 4 {
				t.Fatalf("duplicate report %v", res)
			}
			later := at.Add(time.Second)
			a.report(t, uid, append(report[:1:1], entry("MOUNT_LOCKED", "0", later))...)
			e = nextData[stateEvent](t, c, "s", "mountStateChanged")
			if len(e.States) != 1 || e.States[0].Code != "MOUNT_LOCKED" || e.States[0].Value != "0" || *e.Mount.MountLocked {
				t.Fatalf("event after a partly duplicate report %+v", e)
			}
			// an older entry arriving late is an event, and changes no computed field
			a.report(t, uid, entry("BATTERY_LEVEL", "10", at.Add(-time.Minute)))
			e = nextData[stateEvent](t, c, "s", "mountStateChanged")
			if len(e.States) != 1 || e.States[0].Value != "10" || *e.Mount.BatteryLevel != 88 {
				t.Fatalf("late entry %+v", e)
			}
			if in.cfg.RedisURL != "" {
				// The event's computed fields come from the cache's merge (keyed
				// by account and mount); with the mount's hash gone (TTL,
				// eviction) they come from the database, and the same.
				opt, err := goredis.ParseURL(in.cfg.RedisURL)
				if err != nil {
					t.Fatal(err)
				}
				rc := goredis.NewClient(opt)
				defer rc.Close()
				if n, err := rc.Del(context.Background(), in.cfg.RedisPrefix+"state:"+a.creds.AccountID+"/"+uid).Result(); err != nil || n != 1 {
					t.Fatalf("delete the cached hash: %d, %v", n, err)
				}
				a.report(t, uid, entry("HELMET_MOUNTED", "1", later))
				e = nextData[stateEvent](t, c, "s", "mountStateChanged")
				if m := e.Mount; *m.BatteryLevel != 88 || *m.MountLocked || !*m.HelmetMounted || *m.CPUTemperature != 41.3 {
					t.Fatalf("event after a cache miss %+v", m)
				}
			}
			// one event per report, in order; another mount's reports are not its
			for i := 0; i < 5; i++ {
				a.report(t, other, entry("BATTERY_LEVEL", "5", time.Now()))
				a.report(t, uid, entry("BATTERY_LEVEL", strconv.Itoa(60+i), time.Now()))
			}
			for i := 0; i < 5; i++ {
				e := nextData[stateEvent](t, c, "s", "mountStateChanged")
				if e.UID != uid || len(e.States) != 1 || e.States[0].Value != strconv.Itoa(60+i) || *e.Mount.BatteryLevel != 60+i {
					t.Fatalf("event %d: %+v", i, e)
				}
			}
			c.Quiet(300 * time.Millisecond)
		})
	}
}

// mountEvents without uids: every event of the account's mounts, nothing
// of another account's.
func TestMountEventsSubscription(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			primerA, primerB, m1, m2, x := uniqueUID("PA"), uniqueUID("PB"), uniqueUID("E1"), uniqueUID("E2"), uniqueUID("X")
			a.associated(t, primerA)
			b.associated(t, primerB)
			ca, cb := in.wsReady(t, a.token), in.wsReady(t, b.token)
			ca.Subscribe("a", eventsSubscription, nil)
			cb.Subscribe("b", eventsSubscription, nil)
			prime(t, a, primerA, sub{ca, "a", "mountEvents"})
			prime(t, b, primerB, sub{cb, "b", "mountEvents"})

			lifecycle := func(f fleet, uid, gone string) {
				f.associate(t, uid, nil)
				f.confirm(t, uid)
				f.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/query?code=RELEASE_HELMET", nil)
				f.ok(t, http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": uid, "tagUids": []string{"04A2B3C4"}})
				f.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)
				f.associate(t, gone, nil)
				f.noContent(t, http.MethodDelete, "/api/v1/mounts/"+gone, nil)
			}
			lifecycle(b, x, x+"-gone")
			lifecycle(a, m1, m2)
			want := []struct{ typ, uid, state string }{
				{"ASSOCIATION_REQUESTED", m1, "IDLE"},
				{"ASSOCIATION_CONFIRMED", m1, "ASSOCIATED"},
				{"COMMAND_ISSUED", m1, "ASSOCIATED"},
				{"NFC_TAGS_SYNCED", m1, "ASSOCIATED"},
				{"ABANDONED", m1, "INACTIVE"},
				{"ASSOCIATION_REQUESTED", m2, "IDLE"},
				{"DELETED", m2, ""},
			}
			check := func(c *wsprototest.Client, id, uid1, uid2 string) {
				t.Helper()
				for _, w := range want {
					e := nextData[mountEvent](t, c, id, "mountEvents")
					uid := map[string]string{m1: uid1, m2: uid2}[w.uid]
					if e.Type != w.typ || e.UID != uid || e.Mount.UID != uid || (w.state != "" && e.Mount.AssociationState != w.state) {
						t.Fatalf("got %+v; want %s %s %s", e, w.typ, uid, w.state)
					}
					if _, err := time.Parse(time.RFC3339, e.OccurredAt); err != nil {
						t.Fatalf("occurredAt %q", e.OccurredAt)
					}
				}
				c.Quiet(300 * time.Millisecond)
			}
			check(ca, "a", m1, m2)       // nothing of B's
			check(cb, "b", x, x+"-gone") // B saw its own, so A's silence means something
		})
	}
}

// The former owner's mountEvents subscriber receives ASSOCIATION_EXPIRED.
func TestAssociationExpiredEvent(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.AssociationWindow = 700 * time.Millisecond
			in := start(t, cfg)
			a := newFleet(in, "A")
			primer, w := uniqueUID("P"), uniqueUID("W")
			a.associated(t, primer)
			c := in.wsReady(t, a.token)
			c.Subscribe("a", eventsSubscription, nil)
			c.Subscribe("w", eventsSubscription, map[string]any{"uids": []string{primer}})
			prime(t, a, primer, sub{c, "a", "mountEvents"}, sub{c, "w", "mountEvents"})

			a.associate(t, w, nil)
			requested := time.Now()
			if e := nextData[mountEvent](t, c, "a", "mountEvents"); e.Type != "ASSOCIATION_REQUESTED" || e.UID != w {
				t.Fatalf("event %+v", e)
			}
			e := nextData[mountEvent](t, c, "a", "mountEvents")
			if e.Type != "ASSOCIATION_EXPIRED" || e.UID != w || e.Mount.AssociationState != "INACTIVE" {
				t.Fatalf("event %+v; want ASSOCIATION_EXPIRED of %s", e, w)
			}
			if waited := time.Since(requested); waited < 600*time.Millisecond {
				t.Fatalf("expired after %s, before the window", waited)
			}
			c.Quiet(700 * time.Millisecond) // once, and nothing for the other subscription
		})
	}
}

// A subscriber that vanishes mid-stream leaves no goroutine behind.
func TestSubscriberDisconnectNoLeak(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	uid := uniqueUID("G")
	a.associated(t, uid)
	warm := in.wsReady(t, a.token) // start whatever starts lazily
	warm.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
	prime(t, a, uid, sub{warm, "s", "mountStateChanged"})
	warm.Close()
	base := settledGoroutines()
	for range 3 { // the closed socket winds down
		base = min(base, settledGoroutines())
	}

	for round := 0; round < 2; round++ {
		var clients []*wsprototest.Client
		for i := 0; i < 4; i++ {
			c := in.wsReady(t, a.token)
			c.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
			c.Subscribe("e", eventsSubscription, nil)
			prime(t, a, uid, sub{c, "s", "mountStateChanged"}, sub{c, "e", "mountEvents"})
			clients = append(clients, c)
		}
		// events in flight, unread, when the clients vanish
		for i := 0; i < 10; i++ {
			a.report(t, uid, entry("CPU_TEMPERATURE", fmt.Sprint(20+i), time.Now()))
		}
		for _, c := range clients {
			c.Drop()
		}
	}
	waitGoroutines(t, base)
}

// Equal subscriptions share one execution only when their rights are equal:
// two owner tokens of one account share, a restricted token of the same
// account with the same query does not, and it still sees only its mounts.
func TestSharedSubscriptionsKeepRights(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	m1, m2 := uniqueUID("M1"), uniqueUID("M2")
	a.associated(t, m1)
	a.associated(t, m2)
	secondOwner := in.token(a.creds, "openid", "sub", audItem)
	rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+m1)}

	owner1, owner2, restricted := in.wsReady(t, a.token), in.wsReady(t, secondOwner), in.wsReady(t, rider.token)
	for _, c := range []*wsprototest.Client{owner1, owner2, restricted} {
		c.Subscribe("all", eventsSubscription, nil)
	}
	prime(t, rider, m1, sub{owner1, "all", "mountEvents"}, sub{owner2, "all", "mountEvents"}, sub{restricted, "all", "mountEvents"})
	// The two owners share one execution, the restricted token has its own.
	wantMetrics(t, in, map[string]float64{
		"mountd_graphql_ws_connections":        3,
		"mountd_graphql_ws_shared_executions":  2,
		"mountd_graphql_ws_shared_subscribers": 3,
		"mountd_graphql_ws_slow_closes_total":  0,
	})

	a.report(t, m2, entry("BATTERY_LEVEL", "12", time.Now()))
	a.report(t, m1, entry("BATTERY_LEVEL", "77", time.Now()))
	for _, c := range []*wsprototest.Client{owner1, owner2} {
		if e := data[mountEvent](t, c.Next(), "all", "mountEvents"); e.UID != m2 {
			t.Fatalf("owner's first event %+v; want %s", e, m2)
		}
		if e := data[mountEvent](t, c.Next(), "all", "mountEvents"); e.UID != m1 {
			t.Fatalf("owner's second event %+v; want %s", e, m1)
		}
	}
	if e := data[mountEvent](t, restricted.Next(), "all", "mountEvents"); e.UID != m1 || e.Mount.BatteryLevel == nil || *e.Mount.BatteryLevel != 77 {
		t.Fatalf("restricted token's event %+v; want only %s", e, m1)
	}
	restricted.Quiet(300 * time.Millisecond)
}

// wantMetrics checks gauges of the instance's /metrics.
func wantMetrics(t *testing.T, in *instance, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		if got := in.metric(t, name); got != w {
			t.Errorf("%s = %v, want %v", name, got, w)
		}
	}
}

// Subscriptions share one execution per selection, not per text: two
// dashboards of one account whose texts differ only in a comment share it
// (and the same bytes), the same text from another account never does,
// and neither account sees the other's events.
func TestSharedSubscriptionsPerSelection(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")
	ma, mb := uniqueUID("SA"), uniqueUID("SB")
	a.associated(t, ma)
	b.associated(t, mb)
	a1, a2, b1 := in.wsReady(t, a.token), in.wsReady(t, a.token), in.wsReady(t, b.token)
	a1.Subscribe("1", stateSubscription, map[string]any{"uid": ma})
	a2.Subscribe("1", "# the second dashboard\n"+stateSubscription, map[string]any{"uid": ma})
	b1.Subscribe("1", "# the second dashboard\n"+stateSubscription, map[string]any{"uid": mb})
	prime(t, a, ma, sub{a1, "1", "mountStateChanged"}, sub{a2, "1", "mountStateChanged"})
	prime(t, b, mb, sub{b1, "1", "mountStateChanged"})
	wantMetrics(t, in, map[string]float64{
		"mountd_graphql_ws_shared_executions":  2,
		"mountd_graphql_ws_shared_subscribers": 3,
	})

	a.report(t, ma, entry("BATTERY_LEVEL", "12", time.Now()))
	b.report(t, mb, entry("BATTERY_LEVEL", "77", time.Now()))
	for _, c := range []*wsprototest.Client{a1, a2} {
		if e := nextData[stateEvent](t, c, "1", "mountStateChanged"); e.UID != ma {
			t.Fatalf("A's dashboard got %+v; want %s", e, ma)
		}
	}
	if e := nextData[stateEvent](t, b1, "1", "mountStateChanged"); e.UID != mb {
		t.Fatalf("B's dashboard got %+v; want %s", e, mb)
	}
	for _, c := range []*wsprototest.Client{a1, a2, b1} {
		c.Quiet(300 * time.Millisecond)
	}
}

// An idle subscription of its own (no shared execution) holds one goroutine
// on the server, the event log's stream, which also produces its results:
// none waits in the operation (wsproto.Pull), so that 1,000 distinct
// dashboards do not hold 1,000 deep gqlgen stacks.
func TestSubscriberIdleGoroutines(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	uid := uniqueUID("I")
	a.associated(t, uid)
	c := in.wsReady(t, a.token)
	c.Subscribe("s0", stateSubscription, map[string]any{"uid": uid})
	prime(t, a, uid, sub{c, "s0", "mountStateChanged"})
	settled := func() int {
		n := settledGoroutines()
		for range 2 {
			n = min(n, settledGoroutines())
		}
		return n
	}
	before := settled()
	const more = 4
	subs := []sub{{c, "s0", "mountStateChanged"}}
	for i := range more {
		id := fmt.Sprintf("s%d", i+1)
		// A field of its own: equal selections would share an execution.
		own := strings.Replace(stateSubscription, "uid occurredAt", id+": __typename uid occurredAt", 1)
		c.Subscribe(id, own, map[string]any{"uid": uid})
		subs = append(subs, sub{c, id, "mountStateChanged"})
	}
	prime(t, a, uid, subs...)
	if got := settled() - before; got > more {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines for %d idle subscriptions; want at most one each:\n%s", got, more, buf[:runtime.Stack(buf, true)])
	}
}

// eventCursor is the log's head: a subscription given it misses nothing
// that happened after it was read, even before the subscription started
// (what the console relies on when it shows "live").
func TestEventCursorStartsASubscription(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			uid := uniqueUID("C")
			a.associated(t, uid)
			r := a.gql(t, `{ eventCursor }`, nil)
			var d struct{ EventCursor string }
			if err := json.Unmarshal(r.Data, &d); err != nil || len(r.Errors) > 0 || d.EventCursor == "" {
				t.Fatalf("eventCursor: %s %+v", r.Data, r.Errors)
			}
			cursor := d.EventCursor
			a.report(t, uid, entry("BATTERY_LEVEL", "42", time.Now()))
			c := in.wsReady(t, a.token)
			c.Subscribe("s", `subscription($after: ID) { mountEvents(after: $after) { type uid mount { uid associationState batteryLevel } } }`,
				map[string]any{"after": cursor})
			e := nextData[mountEvent](t, c, "s", "mountEvents")
			if e.Type != "STATES_REPORTED" || e.UID != uid {
				t.Fatalf("first event after the cursor: %+v; want the report of %s", e, uid)
			}
			c.Quiet(200 * time.Millisecond)
		})
	}
}
