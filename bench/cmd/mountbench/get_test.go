package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// getConn speaks enough HTTP/1.1 for the GET phase: it sends the token,
// keeps its connection across answers, reconnects when the server closes
// it, and reports non-200 answers and dead servers as errors.
func TestGetConn(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Header.Get("Access-Key") != "tok":
			w.WriteHeader(http.StatusUnauthorized)
		case r.URL.Path == "/close":
			w.Header().Set("Connection", "close")
			w.Write([]byte(`{}`))
		case r.URL.Path == "/ok":
			w.Write([]byte(strings.Repeat("x", 5000))) // more than one buffer fill
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	c := &getConn{addr: host, timeout: 5 * time.Second}
	defer c.close()

	for _, tc := range []struct {
		path, token, status string
		conns               int32
	}{
		{"/ok", "tok", "", 1},
		{"/ok", "tok", "", 1}, // same connection
		{"/missing", "tok", "404", 1},
		{"/ok", "bad", "401", 1},
		{"/close", "tok", "", 1}, // the server closes after answering
		{"/ok", "tok", "", 2},    // so this one dials again
	} {
		status, err := c.get(tc.path, tc.token)
		if status != tc.status || (err != nil) != (tc.status != "") {
			t.Fatalf("GET %s: status %q, err %v; want %q", tc.path, status, err, tc.status)
		}
		if got := conns.Load(); got != tc.conns {
			t.Fatalf("after GET %s: %d connections, want %d", tc.path, got, tc.conns)
		}
	}
	srv.Close()
	if status, err := c.get("/ok", "tok"); status != "transport" || err == nil {
		t.Fatalf("GET on a stopped server: %q, %v; want a transport error", status, err)
	}
}
