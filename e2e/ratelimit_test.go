package e2e

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// TestAPIRateLimit sets MOUNTD_RATE_LIMIT=5/m: an account's requests,
// REST and GraphQL alike and on either replica, count against one limit
// with X-RateLimit-* headers; past it 429 RATE_LIMITED with Retry-After;
// another account is not affected.
func TestAPIRateLimit(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.RateLimit = "5/m"
			replicas := []*instance{start(t, cfg)}
			if cfg.RedisURL != "" {
				// Two replicas of one deployment (one issuer): the limit is shared through Redis.
				cfg.PublicURL = "http://mountd.test"
				replicas = []*instance{start(t, cfg), start(t, cfg)}
			}
			a, b := newFleet(replicas[0], "Busy"), newFleet(replicas[0], "Quiet")
			for i := range 5 {
				in := replicas[i%len(replicas)]
				res, body := in.call(http.MethodGet, "/api/v1/accounts/me", a.token, nil)
				if res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Limit") != "5" ||
					res.Header.Get("X-RateLimit-Remaining") != strconv.Itoa(4-i) || res.Header.Get("X-RateLimit-Reset") == "" {
					t.Fatalf("request %d: %d %v %s", i+1, res.StatusCode, res.Header, body)
				}
			}
			last := replicas[len(replicas)-1]
			res, body := last.call(http.MethodGet, "/api/v1/mounts", a.token, nil)
			wantProblem(t, res, body, http.StatusTooManyRequests, "RATE_LIMITED")
			if wait, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || wait < 1 || wait > 12 {
				t.Fatalf("Retry-After %q, want 1 to 12 s (one request every 12 s)", res.Header.Get("Retry-After"))
			}
			// GraphQL over HTTP counts too.
			req, _ := http.NewRequest(http.MethodPost, last.base+"/graphql", strings.NewReader(`{"query":"{ me { accountId } }"}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Access-Key", a.token)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" {
				t.Fatalf("GraphQL past the limit: %d %v", res.StatusCode, res.Header)
			}
			if res, body := last.call(http.MethodGet, "/api/v1/accounts/me", b.token, nil); res.StatusCode != http.StatusOK || res.Header.Get("X-RateLimit-Remaining") != "4" {
				t.Fatalf("another account: %d %v %s", res.StatusCode, res.Header, body)
			}
			// A new WebSocket counts as a request: past the limit its
			// connection_init closes with 4429; another account's opens.
			c := last.dialWS(t, wsprototest.Options{})
			c.Send(wsprototest.Message{Type: "connection_init", Payload: json.RawMessage(`{"Access-Key":"` + a.token + `"}`)})
			if code, reason, _ := c.WaitClose(5 * time.Second); code != wsproto.CloseTooManyInitRequests || !strings.Contains(reason, "rate limit") {
				t.Fatalf("a socket past the limit closed with %d %q, want 4429 naming the rate limit", code, reason)
			}
			last.wsReady(t, b.token).Close()
		})
	}
}

// TestWebSocketOperationRateLimit sets MOUNTD_RATE_LIMIT=5/h: every
// operation started on a socket counts as a request of the socket's
// account, on either protocol and against the limit its HTTP requests share
// on every replica. Past it the operation is answered with RATE_LIMITED and
// a retryAfter; the socket stays open.
func TestWebSocketOperationRateLimit(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.RateLimit = "5/h"
			replicas := []*instance{start(t, cfg)}
			if cfg.RedisURL != "" {
				cfg.PublicURL = "http://mountd.test"
				replicas = []*instance{start(t, cfg), start(t, cfg)}
			}
			first, last := replicas[0], replicas[len(replicas)-1]
			a, b := newFleet(first, "Busy"), newFleet(first, "Quiet")
			const query = `{ me { accountId } }`
			limited := func(errs []wsprototest.GraphQLError) bool {
				if len(errs) != 1 || errs[0].Code() != "RATE_LIMITED" {
					return false
				}
				wait, _ := errs[0].Extensions["retryAfter"].(float64)
				return wait >= 1 && wait <= 720 && strings.Contains(errs[0].Message, "rate limit")
			}

			// graphql-transport-ws: connection_init is the first request,
			// four operations the next ones; the sixth request is refused.
			c := first.wsReady(t, a.token)
			for i := 1; i <= 4; i++ {
				id := strconv.Itoa(i)
				c.Subscribe(id, query, nil)
				if m := c.Next(); m.Type != "next" || m.ID != id || len(m.Errors()) > 0 {
					t.Fatalf("operation %d: %s", i, m)
				}
				if m := c.Next(); m.Type != "complete" || m.ID != id {
					t.Fatalf("operation %d: %s", i, m)
				}
			}
			c.Subscribe("5", `mutation { deleteMount(uid: "NONE") }`, nil)
			if m := c.Next(); m.Type != "error" || m.ID != "5" || !limited(m.Errors()) {
				t.Fatalf("an operation past the limit: %s", m)
			}
			c.Send(wsprototest.Message{Type: "ping"})
			c.Expect("pong")
			// The operations counted against the account's limit on every replica.
			res, body := last.call(http.MethodGet, "/api/v1/accounts/me", a.token, nil)
			wantProblem(t, res, body, http.StatusTooManyRequests, "RATE_LIMITED")

			// Legacy graphql-ws: the refused operation's data carries the error.
			l := last.dialWS(t, wsprototest.Options{Subprotocol: wsproto.LegacyWS})
			l.Init(map[string]any{"Access-Key": b.token})
			for i := 1; i <= 5; i++ {
				id := strconv.Itoa(i)
				l.Subscribe(id, query, nil)
				m := l.Next()
				if m.Type != "data" || m.ID != id {
					t.Fatalf("legacy operation %d: %s", i, m)
				}
				if over := i == 5; over != limited(m.Errors()) {
					t.Fatalf("legacy operation %d: %s", i, m)
				}
				if m := l.Next(); m.Type != "complete" || m.ID != id {
					t.Fatalf("legacy operation %d: %s", i, m)
				}
			}
			c.Close()
			l.Close()
		})
	}
}
