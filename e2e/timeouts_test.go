package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/app"
)

// TestBodyTimeout: a body trickled slower than the body timeout is cut
// with 408; a connection that sent its body in time stays usable after
// the timeout, and a WebSocket (no body) outlives it.
func TestBodyTimeout(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.BodyTimeout = 500 * time.Millisecond
	in := start(t, cfg)
	a := newFleet(in, "A")
	host := strings.TrimPrefix(in.base, "http://")

	post := func(conn net.Conn, body string, trickle time.Duration) {
		t.Helper()
		fmt.Fprintf(conn, "POST /api/v1/mounts HTTP/1.1\r\nHost: %s\r\nAccess-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", host, a.token, len(body))
		for i := 0; i < len(body); i++ {
			if _, err := conn.Write([]byte{body[i]}); err != nil {
				return // the server gave up on us
			}
			time.Sleep(trickle)
		}
	}
	read := func(br *bufio.Reader) *http.Response {
		t.Helper()
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read response: %v", err)
		}
		res.Body.Close()
		return res
	}

	slow, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	go post(slow, `{"uid":"TRICKLE1"}`, 100*time.Millisecond) // 1.8 s for the body
	if res := read(bufio.NewReader(slow)); res.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("trickled body: %d, want 408", res.StatusCode)
	}

	ws := in.wsReady(t, a.token)
	conn, err := net.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	br := bufio.NewReader(conn)
	post(conn, `{"uid":"QUICK1"}`, 0)
	if res := read(br); res.StatusCode != http.StatusOK {
		t.Fatalf("quick body: %d", res.StatusCode)
	}
	time.Sleep(3 * cfg.BodyTimeout)
	post(conn, `{"uid":"QUICK2"}`, 0)
	if res := read(br); res.StatusCode != http.StatusOK {
		t.Fatalf("second request on the kept-alive connection: %d", res.StatusCode)
	}
	if ws.Closed() {
		t.Fatal("the WebSocket was closed by the body timeout")
	}
}

// TestHeaderLimit: header lines past MaxHeaderBytes are refused with 431
// before any handler runs; ordinary headers pass.
func TestHeaderLimit(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	for _, tt := range []struct {
		size int
		want int
	}{{4 << 10, http.StatusOK}, {2 * app.MaxHeaderBytes, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest(http.MethodGet, in.base+"/healthz", nil)
		req.Header.Set("X-Padding", strings.Repeat("a", tt.size))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tt.want {
			t.Fatalf("a %d-byte header: %d, want %d", tt.size, res.StatusCode, tt.want)
		}
	}
}
