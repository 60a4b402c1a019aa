package main

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
