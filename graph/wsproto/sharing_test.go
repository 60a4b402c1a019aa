package wsproto_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/coder/websocket"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// sharedFixture shares "ticks" subscriptions and refuses "forbidden" in the
// key function, as graph's does for a mount the caller may not see.
func sharedFixture(t *testing.T) (*fixture, *wsproto.Sharing) {
	share := wsproto.NewSharing(func(ctx context.Context, op *graphql.OperationContext) (string, error) {
		switch op.Operation.SelectionSet[0].(*ast.Field).Name {
		case "ticks":
			return "ticks", nil
		case "forbidden":
			return "", &gqlerror.Error{Message: "mount not found", Extensions: map[string]any{"code": "MOUNT_NOT_FOUND"}}
		}
		return "", nil
	})
	return newFixtureWith(t, share), share
}

// Equal subscriptions run once and every socket gets every event; the
// execution ends with its last subscriber.
func TestSharedSubscription(t *testing.T) {
	f, share := sharedFixture(t)
	a, b, c := f.ready(t), f.ready(t), f.ready(t)
	a.Subscribe("1", "subscription { ticks }", nil)
	b.Subscribe("x", "subscription { ticks }", nil)
	c.Subscribe("1", "subscription { finite(n: 1) }", nil) // not shared
	wantNext(t, c.Next(), "1", `{"finite":1}`)
	c.Expect("complete")
	waitFor(t, "one shared execution for both", func() bool {
		return f.active.Load() == 1 && share.Executions() == 1 && share.Subscribers() == 2
	})

	f.tick(t, 1)
	wantNext(t, a.Next(), "1", `{"ticks":1}`)
	wantNext(t, b.Next(), "x", `{"ticks":1}`)

	// A socket joining later gets the events from then on.
	c.Subscribe("late", "subscription { ticks }", nil)
	waitFor(t, "the join", func() bool { return share.Subscribers() == 3 })
	f.tick(t, 2)
	wantNext(t, a.Next(), "1", `{"ticks":2}`)
	wantNext(t, b.Next(), "x", `{"ticks":2}`)
	wantNext(t, c.Next(), "late", `{"ticks":2}`)
	if got := f.active.Load(); got != 1 {
		t.Fatalf("%d executions for three equal subscriptions", got)
	}

	a.Complete("1")
	c.Drop()
	waitFor(t, "two to leave", func() bool { return share.Subscribers() == 1 })
	f.tick(t, 3)
	wantNext(t, b.Next(), "x", `{"ticks":3}`)
	a.Quiet(100 * time.Millisecond)

	b.Complete("x")
	waitFor(t, "the execution to stop with its last subscriber", func() bool {
		return f.active.Load() == 0 && share.Executions() == 0
	})
	b.Quiet(100 * time.Millisecond)

	// A new subscriber starts a new execution.
	a.Subscribe("again", "subscription { ticks }", nil)
	waitFor(t, "a new execution", func() bool { return f.active.Load() == 1 })
	f.tick(t, 4)
	wantNext(t, a.Next(), "again", `{"ticks":4}`)
}

// The key function refuses as a resolver would: an error message, no
// execution, and the socket stays usable.
func TestSharedSubscriptionRefused(t *testing.T) {
	f, share := sharedFixture(t)
	c := f.ready(t)
	c.Subscribe("e", "subscription { forbidden }", nil)
	m := c.Expect("error")
	if errs := m.Errors(); m.ID != "e" || len(errs) == 0 || errs[0].Code() != "MOUNT_NOT_FOUND" {
		t.Fatalf("error %s; want MOUNT_NOT_FOUND", m)
	}
	if share.Executions() != 0 {
		t.Fatal("a refused subscription started an execution")
	}
	c.Subscribe("ok", "subscription { finite(n: 1) }", nil)
	wantNext(t, c.Next(), "ok", `{"finite":1}`)
}

// A socket's own execution keeps pace with a client that reads: a long
// stream of large results (a replay) arrives whole, where without pacing
// the queue would overflow and close the socket with 1013.
func TestOwnExecutionKeepsPace(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+f.url[len("http"):], &websocket.DialOptions{Subprotocols: []string{wsproto.TransportWS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	write := func(v any) {
		b, _ := json.Marshal(v)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]any{"type": "connection_init", "payload": map[string]any{"token": "good"}})
	if _, data, err := ws.Read(ctx); err != nil || !json.Valid(data) {
		t.Fatalf("ack: %v", err)
	}
	// 500 results of 64 KiB: four times the queue (MaxQueuedMessages), 32 MB.
	write(map[string]any{"type": "subscribe", "id": "big", "payload": map[string]any{"query": "subscription { big(n: 500) }"}})
	nexts := 0
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("after %d results: %v", nexts, err)
		}
		var m struct{ Type string }
		_ = json.Unmarshal(data, &m)
		if m.Type == "complete" {
			break
		}
		nexts++
	}
	if nexts != 500 {
		t.Fatalf("%d results, want 500", nexts)
	}
}

// A client that stops reading is closed with 1013 once MaxQueuedMessages
// wait for it; the server does not buffer without bound.
func TestSlowSubscriberClosed(t *testing.T) {
	f := newFixtureOpts(t, fixtureOptions{slowClientWait: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+f.url[len("http"):], &websocket.DialOptions{Subprotocols: []string{wsproto.TransportWS}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	write := func(v any) {
		b, _ := json.Marshal(v)
		if err := ws.Write(ctx, websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]any{"type": "connection_init", "payload": map[string]any{"token": "good"}})
	if _, data, err := ws.Read(ctx); err != nil || !json.Valid(data) {
		t.Fatalf("ack: %v", err)
	}
	// 64 KiB results, far more than the socket buffers and the queue hold.
	write(map[string]any{"type": "subscribe", "id": "big", "payload": map[string]any{"query": "subscription { big(n: 2000) }"}})
	// Not reading until the server has given up on the client (the
	// loopback buffers full and SlowClientWait passed): waiting for that,
	// not for a fixed time a loaded machine may need more than.
	waitFor(t, "the slow client's close", func() bool { return f.stats.SlowCloses() == 1 })

	nexts := 0
	for {
		_, _, err := ws.Read(ctx)
		if err != nil {
			if code := websocket.CloseStatus(err); code != wsproto.CloseTooSlow {
				t.Fatalf("after %d results: %v; want close %d", nexts, err, wsproto.CloseTooSlow)
			}
			break
		}
		nexts++
	}
	if nexts >= 2000 {
		t.Fatalf("all %d results arrived; the queue did not bound the slow client", nexts)
	}
	if got := f.stats.SlowCloses(); got != 1 {
		t.Fatalf("SlowCloses = %d, want 1", got)
	}
	waitFor(t, "the connection to be gone", func() bool { return f.stats.Connections() == 0 })
}

// Keep-alive: the server pings every PingPongInterval once the connection
// is acknowledged; a client that answers stays, one that leaves a ping
// unanswered for two intervals is closed (1001 Going Away).
func TestKeepAlivePings(t *testing.T) {
	const interval = 100 * time.Millisecond
	f := newFixtureOpts(t, fixtureOptions{pingInterval: interval})
	t.Run("answering client stays", func(t *testing.T) {
		c := wsprototest.MustDial(t, f.url, wsprototest.Options{})
		c.Init(map[string]any{"token": "good"})
		c.Quiet(6 * interval) // pings arrive and are answered (wsprototest pongs)
		c.Subscribe("ok", "subscription { finite(n: 1) }", nil)
		wantNext(t, c.Next(), "ok", `{"finite":1}`)
	})
	t.Run("silent client is closed", func(t *testing.T) {
		c := wsprototest.MustDial(t, f.url, wsprototest.Options{NoAutoPong: true})
		c.Init(map[string]any{"token": "good"})
		if m, err := c.ExpectRaw(5 * interval); err != nil || m.Type != "ping" {
			t.Fatalf("got %v %v; want a ping", m, err)
		}
		code, _, _ := c.WaitClose(10 * interval)
		if code != int(websocket.StatusGoingAway) {
			t.Fatalf("closed with %d; want %d", code, websocket.StatusGoingAway)
		}
	})
}

// A shared execution writes one message per operation id to all its
// sockets: sockets whose ids are equal get the same bytes, the others
// their own id, and one socket with two operations gets each once.
func TestSharedMessagesKeepTheirIDs(t *testing.T) {
	f, share := sharedFixture(t)
	a, b, c := f.ready(t), f.ready(t), f.ready(t)
	a.Subscribe("1", "subscription { ticks }", nil)
	b.Subscribe("1", "# b's own comment\nsubscription { ticks }", nil)
	c.Subscribe("x", "subscription { ticks }", nil)
	c.Subscribe("1", "subscription { ticks }", nil)
	waitFor(t, "one execution for four operations", func() bool {
		return share.Executions() == 1 && share.Subscribers() == 4
	})
	for v := 1; v <= 3; v++ {
		f.tick(t, v)
		want := fmt.Sprintf(`{"ticks":%d}`, v)
		wantNext(t, a.Next(), "1", want)
		wantNext(t, b.Next(), "1", want)
		got := map[string]bool{}
		for range 2 {
			m := c.Next()
			wantNext(t, m, m.ID, want)
			got[m.ID] = true
		}
		if !got["1"] || !got["x"] {
			t.Fatalf("socket with operations 1 and x got %v", got)
		}
	}
	a.Quiet(100 * time.Millisecond)
	c.Quiet(100 * time.Millisecond)
}
