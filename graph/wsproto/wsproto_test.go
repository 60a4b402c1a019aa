package wsproto_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

const initTimeout = 300 * time.Millisecond

// fixture is a gqlgen server without generated code behind wsproto:
//
//	ticks: one next per value sent on ticks, until the client stops it
//	finite(n): n results, then the stream ends
//	forbidden: the resolver refuses (MOUNT_NOT_FOUND)
type fixture struct {
	url    string
	stats  *wsproto.Stats
	ticks  chan int
	active atomic.Int32 // running subscriptions
}

func newFixture(t *testing.T) *fixture { return newFixtureWith(t, nil) }

func newFixtureWith(t *testing.T, share *wsproto.Sharing) *fixture {
	return newFixtureOpts(t, fixtureOptions{share: share})
}

type fixtureOptions struct {
	share          *wsproto.Sharing
	pingInterval   time.Duration
	slowClientWait time.Duration
}

func newFixtureOpts(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{ticks: make(chan int), stats: &wsproto.Stats{}}
	schema := gqlparser.MustLoadSchema(&ast.Source{Input: `
		type Query { hello: String! }
		type Subscription { ticks: Int!  finite(n: Int!): Int!  forbidden: Int!  big(n: Int!): String! }
	`})
	srv := handler.New(&graphql.ExecutableSchemaMock{
		SchemaFunc: func() *ast.Schema { return schema },
		ComplexityFunc: func(context.Context, string, string, int, map[string]any) (int, bool) {
			return 1, true
		},
		ExecFunc: f.exec,
	})
	srv.AddTransport(wsproto.Transport{Share: o.share, Stats: f.stats, SlowClientWait: o.slowClientWait, Websocket: transport.Websocket{
		InitFunc:         initFunc,
		InitTimeout:      initTimeout,
		PingPongInterval: o.pingInterval,
	}})
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	f.url = ts.URL
	return f
}

// initFunc accepts {"token":"good"}, and {"token":"short"} for 300ms.
func initFunc(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
	switch p.GetString("token") {
	case "good":
		return ctx, nil, nil
	case "short":
		ctx, cancel := wsproto.WithExpiry(ctx, time.Now().Add(300*time.Millisecond))
		context.AfterFunc(ctx, cancel)
		return ctx, nil, nil
	case "busy":
		return ctx, nil, &wsproto.CloseError{Code: wsproto.CloseTooManyInitRequests, Reason: "Too many connections"}
	}
	return wsproto.Reject(ctx), nil, errors.New("bad token")
}

func (f *fixture) exec(ctx context.Context) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	field := oc.Operation.SelectionSet[0].(*ast.Field)
	if oc.Operation.Operation == ast.Query {
		return graphql.OneShot(&graphql.Response{Data: []byte(`{"hello":"world"}`)})
	}
	switch field.Name {
	case "forbidden":
		graphql.AddError(ctx, &gqlerror.Error{Message: "mount not found", Extensions: map[string]any{"code": "MOUNT_NOT_FOUND"}})
		return nil
	case "big":
		n, _ := field.ArgumentMap(oc.Variables)["n"].(int64)
		data := []byte(`{"big":"` + strings.Repeat("x", 64<<10) + `"}`)
		i := int64(0)
		return func(context.Context) *graphql.Response {
			if i == n {
				return nil
			}
			i++
			return &graphql.Response{Data: data}
		}
	case "finite":
		n, _ := field.ArgumentMap(oc.Variables)["n"].(int64)
		i := int64(0)
		return func(context.Context) *graphql.Response {
			if i == n {
				return nil
			}
			i++
			return &graphql.Response{Data: []byte(fmt.Sprintf(`{"finite":%d}`, i))}
		}
	}
	f.active.Add(1)
	context.AfterFunc(ctx, func() { f.active.Add(-1) })
	return func(ctx context.Context) *graphql.Response {
		select {
		case v := <-f.ticks:
			return &graphql.Response{Data: []byte(fmt.Sprintf(`{"ticks":%d}`, v))}
		case <-ctx.Done():
			return nil
		}
	}
}

func (f *fixture) dial(t *testing.T, proto string) *wsprototest.Client {
	t.Helper()
	return wsprototest.MustDial(t, f.url, wsprototest.Options{Subprotocol: proto})
}

// ready dials and completes the handshake with a good token.
func (f *fixture) ready(t *testing.T) *wsprototest.Client {
	t.Helper()
	c := f.dial(t, "")
	c.Init(map[string]any{"token": "good"})
	return c
}

func (f *fixture) tick(t *testing.T, v int) {
	t.Helper()
	select {
	case f.ticks <- v:
	case <-time.After(30 * time.Second):
		t.Fatal("no subscription took the tick")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // generous: it returns as soon as cond holds
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func wantNext(t *testing.T, m wsprototest.Message, id, data string) {
	t.Helper()
	var p struct {
		Data   json.RawMessage `json:"data"`
		Errors any             `json:"errors"`
	}
	_ = json.Unmarshal(m.Payload, &p)
	if m.Type != "next" || m.ID != id || string(p.Data) != data || p.Errors != nil {
		t.Fatalf("got %s; want next %s %s", m, id, data)
	}
}

// Rule: no connection_init within the wait → 4408.
func TestInitTimeout(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name   string
		proto  string
		before func(c *wsprototest.Client)
	}{
		{"silent client", "", func(*wsprototest.Client) {}},
		{"pings do not count", "", func(c *wsprototest.Client) {
			c.Send(map[string]any{"type": "ping"})
			c.Expect("pong")
		}},
		{"legacy graphql-ws", wsproto.LegacyWS, func(*wsprototest.Client) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, tc.proto)
			start := time.Now()
			tc.before(c)
			c.ExpectClose(5*time.Second, wsproto.CloseInitTimeout, "Connection initialisation timeout")
			if waited := time.Since(start); waited < initTimeout-50*time.Millisecond {
				t.Fatalf("closed after %s, before the %s wait", waited, initTimeout)
			}
		})
	}
	t.Run("init in time keeps the socket", func(t *testing.T) {
		c := f.ready(t)
		c.Quiet(2 * initTimeout)
	})
}

// Rule: an invalid message → 4400, before and after the ack.
func TestInvalidMessage(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name  string
		acked bool
		raw   string
	}{
		{"not JSON", false, `{"type":`},
		{"not an object", false, `["connection_init"]`},
		{"no type", false, `{"payload":{}}`},
		{"type not a string", false, `{"type":1}`},
		{"unknown type", false, `{"type":"hello"}`},
		{"init payload not an object", false, `{"type":"connection_init","payload":"token"}`},
		{"ping payload not an object", false, `{"type":"ping","payload":[1]}`},
		{"not JSON after ack", true, `nonsense`},
		{"unknown type after ack", true, `{"type":"start","id":"1","payload":{"query":"subscription{ticks}"}}`},
		{"server message from the client", true, `{"type":"next","id":"1","payload":{}}`},
		{"connection_ack from the client", true, `{"type":"connection_ack"}`},
		{"subscribe without id", true, `{"type":"subscribe","payload":{"query":"subscription{ticks}"}}`},
		{"subscribe with empty id", true, `{"type":"subscribe","id":"","payload":{"query":"subscription{ticks}"}}`},
		{"subscribe with numeric id", true, `{"type":"subscribe","id":1,"payload":{"query":"subscription{ticks}"}}`},
		{"subscribe without payload", true, `{"type":"subscribe","id":"1"}`},
		{"subscribe without query", true, `{"type":"subscribe","id":"1","payload":{}}`},
		{"subscribe query not a string", true, `{"type":"subscribe","id":"1","payload":{"query":{}}}`},
		{"subscribe variables not an object", true, `{"type":"subscribe","id":"1","payload":{"query":"subscription{ticks}","variables":[]}}`},
		{"subscribe operationName not a string", true, `{"type":"subscribe","id":"1","payload":{"query":"subscription{ticks}","operationName":1}}`},
		{"complete without id", true, `{"type":"complete"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, "")
			if tc.acked {
				c.Init(map[string]any{"token": "good"})
			}
			c.SendRaw(tc.raw)
			_, reason, msgs := c.WaitClose(5 * time.Second)
			code, _ := c.CloseStatus()
			if code != wsproto.CloseBadRequest || !strings.HasPrefix(reason, "Invalid message received") {
				t.Fatalf("closed with %d %q; want 4400 (messages %v)", code, reason, msgs)
			}
		})
	}
}

// Rule: subscribe before connection_ack → 4401.
func TestSubscribeBeforeAck(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name   string
		before func(c *wsprototest.Client)
	}{
		{"first message", func(*wsprototest.Client) {}},
		{"after a ping", func(c *wsprototest.Client) {
			c.Send(map[string]any{"type": "ping"})
			c.Expect("pong")
		}},
		{"after a complete", func(c *wsprototest.Client) { c.Complete("1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, "")
			tc.before(c)
			c.Subscribe("1", "subscription { ticks }", nil)
			if msgs := c.ExpectClose(5*time.Second, wsproto.CloseUnauthorized, "Unauthorized"); len(msgs) != 0 {
				t.Fatalf("messages before the close: %v", msgs)
			}
		})
	}
}

// Rule: a rejected connection_init → 4403 Forbidden, and no ack.
func TestRejectedInit(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		proto   string
		payload any
	}{
		{"no payload", "", nil},
		{"bad token", "", map[string]any{"token": "bad"}},
		{"legacy bad token", wsproto.LegacyWS, map[string]any{"token": "bad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, tc.proto)
			m := map[string]any{"type": "connection_init"}
			if tc.payload != nil {
				m["payload"] = tc.payload
			}
			c.Send(m)
			msgs := c.ExpectClose(5*time.Second, wsproto.CloseForbidden, "Forbidden")
			for _, m := range msgs {
				if m.Type == "connection_ack" {
					t.Fatalf("a rejected init was acknowledged: %v", msgs)
				}
			}
		})
	}
}

// Rule: subscribe with an id that is active → 4409; a finished id may be reused.
func TestDuplicateSubscriber(t *testing.T) {
	f := newFixture(t)
	t.Run("active id", func(t *testing.T) {
		c := f.ready(t)
		c.Subscribe("a", "subscription { ticks }", nil)
		waitFor(t, "the subscription", func() bool { return f.active.Load() == 1 })
		c.Subscribe("a", "subscription { ticks }", nil)
		c.ExpectClose(5*time.Second, wsproto.CloseSubscriberAlreadyExists, "Subscriber for a already exists")
		waitFor(t, "the subscription to stop with the socket", func() bool { return f.active.Load() == 0 })
	})
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, c *wsprototest.Client)
	}{
		{"after the server completed it", func(t *testing.T, c *wsprototest.Client) {
			c.Subscribe("a", "subscription { finite(n: 1) }", nil)
			wantNext(t, c.Next(), "a", `{"finite":1}`)
			c.Expect("complete")
		}},
		{"after an error", func(t *testing.T, c *wsprototest.Client) {
			c.Subscribe("a", "subscription { forbidden }", nil)
			c.Expect("error")
		}},
		{"after the client completed it", func(t *testing.T, c *wsprototest.Client) {
			c.Subscribe("a", "subscription { ticks }", nil)
			waitFor(t, "the subscription", func() bool { return f.active.Load() == 1 })
			c.Complete("a")
		}},
	} {
		t.Run("reuse "+tc.name, func(t *testing.T) {
			c := f.ready(t)
			tc.end(t, c)
			c.Subscribe("a", "subscription { finite(n: 2) }", nil)
			wantNext(t, c.Next(), "a", `{"finite":1}`)
			wantNext(t, c.Next(), "a", `{"finite":2}`)
			if m := c.Expect("complete"); m.ID != "a" {
				t.Fatalf("complete %s", m)
			}
			c.Quiet(200 * time.Millisecond)
			waitFor(t, "the subscriptions to stop", func() bool { return f.active.Load() == 0 })
		})
	}
}

// Rule: a second connection_init → 4429.
func TestSecondInit(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		payload any
	}{
		{"same token", map[string]any{"token": "good"}},
		{"other token", map[string]any{"token": "bad"}},
		{"no payload", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.ready(t)
			m := map[string]any{"type": "connection_init"}
			if tc.payload != nil {
				m["payload"] = tc.payload
			}
			c.Send(m)
			c.ExpectClose(5*time.Second, wsproto.CloseTooManyInitRequests, "Too many initialisation requests")
		})
	}
}

// Rule: ping → pong with the payload echoed, at any time; a pong is accepted silently.
func TestPingPong(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name    string
		acked   bool
		message string
		want    string // "" for no answer
	}{
		{"ping before init", false, `{"type":"ping"}`, `{"type":"pong"}`},
		{"ping with payload before init", false, `{"type":"ping","payload":{"n":1}}`, `{"type":"pong","payload":{"n":1}}`},
		{"ping after ack", true, `{"type":"ping"}`, `{"type":"pong"}`},
		{"ping with payload after ack", true, `{"type":"ping","payload":{"at":"x","n":[1,2]}}`, `{"type":"pong","payload":{"at":"x","n":[1,2]}}`},
		{"pong before init", false, `{"type":"pong"}`, ""},
		{"pong after ack", true, `{"type":"pong","payload":{"n":1}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, "")
			if tc.acked {
				c.Init(map[string]any{"token": "good"})
			}
			c.SendRaw(tc.message)
			if tc.want == "" {
				if m, err := c.ExpectRaw(200 * time.Millisecond); err == nil || c.Closed() {
					t.Fatalf("a pong was answered with %v / %v", m, err)
				}
				return
			}
			m, err := c.ExpectRaw(2 * time.Second)
			if err != nil || m.String() != tc.want {
				t.Fatalf("got %v %v; want %s", m, err, tc.want)
			}
			if !tc.acked { // and the handshake still works
				c.Init(map[string]any{"token": "good"})
			}
		})
	}
}

// Rule: complete both ways.
func TestComplete(t *testing.T) {
	f := newFixture(t)
	t.Run("server completes a finished stream", func(t *testing.T) {
		c := f.ready(t)
		c.Subscribe("s", "subscription { finite(n: 3) }", nil)
		for i := 1; i <= 3; i++ {
			wantNext(t, c.Next(), "s", fmt.Sprintf(`{"finite":%d}`, i))
		}
		if m := c.Expect("complete"); m.ID != "s" || m.Payload != nil {
			t.Fatalf("complete %s", m)
		}
	})
	t.Run("server completes a query", func(t *testing.T) {
		c := f.ready(t)
		c.Subscribe("q", "{ hello }", nil)
		wantNext(t, c.Next(), "q", `{"hello":"world"}`)
		c.Expect("complete")
	})
	t.Run("client complete stops the subscription", func(t *testing.T) {
		c := f.ready(t)
		c.Subscribe("s", "subscription { ticks }", nil)
		f.tick(t, 1)
		wantNext(t, c.Next(), "s", `{"ticks":1}`)
		c.Complete("s")
		waitFor(t, "the subscription to stop", func() bool { return f.active.Load() == 0 })
		// nothing more for it, not even a complete
		c.Quiet(200 * time.Millisecond)
		// an unknown or finished id is ignored
		c.Complete("s")
		c.Complete("never")
		c.Quiet(100 * time.Millisecond)
	})
}

// Rule: the connection context ending with a CloseError closes with its code.
func TestConnectionExpiry(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name      string
		proto     string
		subscribe bool
	}{
		{"idle", "", false},
		{"with a subscription", "", true},
		{"legacy", wsproto.LegacyWS, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.dial(t, tc.proto)
			c.Init(map[string]any{"token": "short"})
			if tc.subscribe {
				c.Subscribe("s", "subscription { ticks }", nil)
			}
			msgs := c.ExpectClose(3*time.Second, wsproto.CloseForbidden, "Forbidden: the access token expired")
			for _, m := range msgs {
				if m.Type == "complete" && tc.proto == "" {
					t.Fatalf("subscriptions must not look completed when the socket ends: %v", msgs)
				}
			}
			waitFor(t, "subscriptions to stop", func() bool { return f.active.Load() == 0 })
		})
	}
}

// Rule: an operation that fails before any result gets an error message
// (GraphQL errors with extensions), no complete, and the socket stays open.
func TestOperationError(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name  string
		query string
		code  string
	}{
		{"resolver refuses", "subscription { forbidden }", "MOUNT_NOT_FOUND"},
		{"validation", "subscription { nope }", "GRAPHQL_VALIDATION_FAILED"},
		{"parse", "subscription {", "GRAPHQL_PARSE_FAILED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := f.ready(t)
			c.Subscribe("e", tc.query, nil)
			m := c.Expect("error")
			errs := m.Errors()
			if m.ID != "e" || len(errs) == 0 || errs[0].Code() != tc.code {
				t.Fatalf("error %s; want extensions.code %s", m, tc.code)
			}
			c.Quiet(200 * time.Millisecond) // no complete after an error, socket open
			c.Subscribe("ok", "subscription { finite(n: 1) }", nil)
			wantNext(t, c.Next(), "ok", `{"finite":1}`)
		})
	}
}

// Rule: the legacy graphql-ws subprotocol keeps working.
func TestLegacyProtocol(t *testing.T) {
	f := newFixture(t)
	for _, proto := range []string{wsproto.LegacyWS, "-"} {
		t.Run("subprotocol "+proto, func(t *testing.T) {
			c := f.dial(t, proto)
			c.Init(map[string]any{"token": "good"})
			c.Subscribe("1", "subscription { ticks }", nil)
			f.tick(t, 7)
			m := c.Expect("data")
			if m.ID != "1" || string(m.Payload) != `{"data":{"ticks":7}}` {
				t.Fatalf("data %s", m)
			}
			c.Complete("1") // stop
			if m := c.Expect("complete"); m.ID != "1" {
				t.Fatalf("complete %s", m)
			}
			waitFor(t, "the subscription to stop", func() bool { return f.active.Load() == 0 })
			c.Send(map[string]any{"type": "connection_terminate"})
			c.WaitClose(5 * time.Second)
		})
	}
}

// A client that vanishes mid-stream leaves no goroutine behind.
func TestNoGoroutineLeak(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share *wsproto.Sharing
	}{
		{"own executions", nil},
		{"shared execution", wsproto.NewSharing(func(context.Context, *graphql.OperationContext) (string, error) { return "all", nil })},
	} {
		t.Run(tc.name, func(t *testing.T) { testNoGoroutineLeak(t, newFixtureWith(t, tc.share), tc.share != nil) })
	}
}

func testNoGoroutineLeak(t *testing.T, f *fixture, shared bool) {
	warm := f.ready(t) // let the server's lazily started goroutines start
	warm.Close()
	settle := func() int {
		runtime.GC()
		time.Sleep(50 * time.Millisecond)
		return runtime.NumGoroutine()
	}
	base := settle()
	for round := 0; round < 3; round++ {
		var clients []*wsprototest.Client
		for i := 0; i < 5; i++ {
			c := f.ready(t)
			c.Subscribe("s", "subscription { ticks }", nil)
			clients = append(clients, c)
		}
		want := int32(5)
		if shared {
			want = 1
		}
		waitFor(t, "the subscriptions", func() bool { return f.active.Load() == want })
		for _, c := range clients {
			c.Drop()
		}
		waitFor(t, "the subscriptions to stop", func() bool { return f.active.Load() == 0 })
	}
	deadline := time.Now().Add(30 * time.Second)
	for n := settle(); n > base; n = settle() {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	}
}

// Rule: at most MaxOperations active operations per socket; the one beyond
// gets an error message and the socket and its other operations go on.
func TestOperationLimit(t *testing.T) {
	f := newFixture(t)
	c := f.ready(t)
	for i := range wsproto.DefaultMaxOperations {
		c.Subscribe(fmt.Sprint("op", i), "subscription { ticks }", nil)
	}
	waitFor(t, "every subscription", func() bool { return f.active.Load() == wsproto.DefaultMaxOperations })
	c.Subscribe("one-too-many", "subscription { ticks }", nil)
	m := c.Expect("error")
	if m.ID != "one-too-many" || len(m.Errors()) != 1 || m.Errors()[0].Code() != "TOO_MANY_OPERATIONS" {
		t.Fatalf("refusal %s", m)
	}
	c.Complete("op0")
	waitFor(t, "a freed operation", func() bool { return f.active.Load() == wsproto.DefaultMaxOperations-1 })
	c.Subscribe("after-a-complete", "subscription { finite(n: 1) }", nil)
	wantNext(t, c.Next(), "after-a-complete", `{"finite":1}`)
	if c.Closed() {
		t.Fatal("the socket closed")
	}
}

// Rule: the legacy graphql-ws protocol has the same bound; its start
// beyond it closes the socket with 4430 (that protocol has no refusal).
// Operations that ended (stopped by the client, or completed) do not count.
func TestLegacyOperationLimit(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t, wsproto.LegacyWS)
	c.Init(map[string]any{"token": "good"})
	c.Subscribe("stopped", "subscription { ticks }", nil)
	c.Complete("stopped") // stop
	if m := c.Expect("complete"); m.ID != "stopped" {
		t.Fatalf("complete %s", m)
	}
	c.Subscribe("finished", "subscription { finite(n: 1) }", nil)
	if m := c.Expect("data"); m.ID != "finished" {
		t.Fatalf("data %s", m)
	}
	if m := c.Expect("complete"); m.ID != "finished" {
		t.Fatalf("complete %s", m)
	}
	for i := range wsproto.DefaultMaxOperations {
		c.Subscribe(fmt.Sprint("op", i), "subscription { ticks }", nil)
	}
	waitFor(t, "every subscription", func() bool { return f.active.Load() == wsproto.DefaultMaxOperations })
	c.Subscribe("one-too-many", "subscription { ticks }", nil)
	c.ExpectClose(5*time.Second, wsproto.CloseTooManyOperations, "Too many operations")
	waitFor(t, "the operations to stop", func() bool { return f.active.Load() == 0 })
}

// Rule: InitFunc may refuse with its own close code (a CloseError).
func TestInitCloseError(t *testing.T) {
	f := newFixture(t)
	c := f.dial(t, "")
	c.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"token": "busy"}})
	c.ExpectClose(5*time.Second, wsproto.CloseTooManyInitRequests, "Too many connections")
}

// Rule: a server going away closes every socket with 1001 and sends no
// complete, so that graphql-ws clients reconnect and resubscribe.
func TestGoingAway(t *testing.T) {
	f := newFixture(t)
	clients := []*wsprototest.Client{f.ready(t), f.ready(t)}
	for _, c := range clients {
		c.Subscribe("a", "subscription { ticks }", nil)
	}
	waitFor(t, "the subscriptions", func() bool { return f.active.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f.stats.GoingAway(ctx)
	if ctx.Err() != nil {
		t.Fatal("GoingAway waited until its deadline")
	}
	for _, c := range clients {
		for _, m := range c.ExpectClose(5*time.Second, 1001, "server shutting down") {
			if m.Type == "complete" {
				t.Fatalf("complete sent before going away: %s", m)
			}
		}
	}
	if n := f.stats.Connections(); n != 0 {
		t.Fatalf("%d connections after GoingAway", n)
	}
}
