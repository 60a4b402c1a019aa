package e2e

import (
	"testing"
	"time"

	"github.com/mountd/mountd/graph"
	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// TestWebSocketLimits: one token holds at most graph.MaxSocketsPerToken
// sockets (the next closes with 4429, a closed one frees its place), and
// shutting the server down closes subscribers with 1001 and no complete,
// so that they reconnect.
func TestWebSocketLimits(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")

	var sockets []*wsprototest.Client
	for range graph.MaxSocketsPerToken {
		sockets = append(sockets, in.wsReady(t, a.token))
	}
	extra := in.dialWS(t, wsprototest.Options{})
	extra.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"Access-Key": a.token}})
	extra.ExpectClose(5*time.Second, wsproto.CloseTooManyInitRequests, "")
	// Another token is not affected, and a closed socket frees a place.
	other := in.wsReady(t, b.token)
	sockets[0].Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := in.dialWS(t, wsprototest.Options{})
		c.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"Access-Key": a.token}})
		m, err := c.ExpectRaw(2 * time.Second)
		if err == nil && m.Type == "connection_ack" {
			sockets[0] = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place freed by a closed socket: %v %v", m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	uid := uniqueUID("WSL")
	a.associate(t, uid, nil)
	a.confirm(t, uid)
	other.Subscribe("s", `subscription { mountEvents { type uid } }`, nil)
	sockets[1].Subscribe("s", stateSubscription, map[string]any{"uid": uid})
	prime(t, a, uid, sub{sockets[1], "s", "mountStateChanged"})

	in.stop()
	for _, c := range []*wsprototest.Client{sockets[1], other} {
		for _, m := range c.ExpectClose(10*time.Second, 1001, "") {
			if m.Type == "complete" {
				t.Fatalf("complete sent at shutdown: %s", m)
			}
		}
	}
}
