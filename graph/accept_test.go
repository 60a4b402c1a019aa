package graph

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/coder/websocket"
)

// TestWebSocketOrigin: a browser's WebSocket is accepted from the
// request's own host, or from the origin of the public URL whatever Host
// a proxy passed on; any other Origin is refused with 403. A client
// without Origin (not a browser: mountctl, the SDK) is accepted.
func TestWebSocketOrigin(t *testing.T) {
	for _, tc := range []struct {
		name, publicURL, host, origin string
		ok                            bool
	}{
		{"no origin", "https://mounts.example.com", "mountd", "", true},
		{"same origin", "", "10.0.0.5:8081", "http://10.0.0.5:8081", true},
		{"same origin, another case", "", "Mounts.Example.com", "https://mounts.example.com", true},
		{"public origin behind a proxy", "https://mounts.example.com", "mountd", "https://mounts.example.com", true},
		{"public origin, the host's case differs", "https://Mounts.Example.com", "mountd", "https://mounts.example.com", true},
		{"public URL with its default port", "https://mounts.example.com:443", "mountd", "https://mounts.example.com", true},
		{"public URL with a path", "https://mounts.example.com/", "mountd", "https://mounts.example.com", true},
		{"public URL on another port", "https://127.0.0.1:8443", "127.0.0.1", "https://127.0.0.1:8443", true},
		{"public URL of IPv6", "http://[::1]:8080", "mountd", "http://[::1]:8080", true},
		{"foreign origin", "https://mounts.example.com", "mountd", "https://evil.example", false},
		{"foreign origin, no public URL", "", "mountd", "https://mounts.example.com", false},
		{"public host, other scheme", "https://mounts.example.com", "mountd", "http://mounts.example.com", false},
		{"public host, other port", "https://mounts.example.com", "mountd", "https://mounts.example.com:8443", false},
		{"public host as a prefix", "https://mounts.example.com", "mountd", "https://mounts.example.com.evil.example", false},
		{"public host as a suffix", "https://mounts.example.com", "mountd", "https://evilmounts.example.com", false},
		{"IPv6 brackets are no pattern", "http://[::1]:8080", "mountd", "http://::8080", false},
		{"host of a default public URL", "http://[::]:8080", "mountd", "http://evil.example", false},
		{"null origin", "https://mounts.example.com", "mountd", "null", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := acceptOptions(tc.publicURL, nil)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c, err := websocket.Accept(w, r, &opts)
				if err == nil {
					c.CloseNow()
				}
			}))
			defer srv.Close()
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/graphql", nil)
			req.Host = tc.host
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			req.Header.Set("Sec-WebSocket-Protocol", "graphql-transport-ws")
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			res, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			want := http.StatusForbidden
			if tc.ok {
				want = http.StatusSwitchingProtocols
			}
			if res.StatusCode != want {
				t.Fatalf("public URL %q, Host %q, Origin %q: %d; want %d", tc.publicURL, tc.host, tc.origin, res.StatusCode, want)
			}
		})
	}
}
