package main

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"github.com/mountd/mountd/adapters/testenv"
)

// cuttableProxy forwards TCP connections to target until cut, after which
// it refuses new ones and drops the open ones: a database that goes away.
type cuttableProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cuttableProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestDatabaseDown: when PostgreSQL cannot be reached, REST answers 503
// UNAVAILABLE with Retry-After, GraphQL codes the error UNAVAILABLE, and
// the token endpoint answers 503 temporarily_unavailable, never a 500.
func TestDatabaseDown(t *testing.T) {
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCuttableProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	in := start(t, testConfig(t.TempDir(), u.String()))
	a := newFleet(in, "A")
	a.associate(t, "DOWN1", nil)

	proxy.cut()

	res, raw := a.call(http.MethodGet, "/api/v1/mounts/DOWN1", nil)
	wantProblem(t, res, raw, 503, "UNAVAILABLE")
	if res.Header.Get("Retry-After") == "" {
		t.Fatalf("503 without Retry-After")
	}
	res, raw = a.call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "DOWN2"})
	wantProblem(t, res, raw, 503, "UNAVAILABLE")
	if r := a.gql(t, `{ mounts { mounts { uid } } }`, nil); r.code() != "UNAVAILABLE" {
		t.Fatalf("GraphQL with the database down: %+v", r.Errors)
	}
	res, body := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "client_id": {a.creds.ClientID},
		"client_secret": {a.creds.ClientSecret}, "scope": {"openid"}}, nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("token endpoint with the database down: %d %s", res.StatusCode, body)
	}
}
