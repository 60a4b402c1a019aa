package proxies_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/mountd/mountd/internal/proxies"
)

func TestClientAddress(t *testing.T) {
	trusted, err := proxies.Parse("127.0.0.1, 10.0.0.0/8,::1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, peer, forwarded, want string
	}{
		{"direct client", "203.0.113.7:5555", "", "203.0.113.7:5555"},
		{"a client that forges the header itself", "203.0.113.7:5555", "198.51.100.1", "203.0.113.7:5555"},
		{"through the proxy", "127.0.0.1:4000", "203.0.113.7", "203.0.113.7:0"},
		{"through two proxies", "127.0.0.1:4000", "203.0.113.7, 10.1.2.3", "203.0.113.7:0"},
		{"a forged entry left of the real client", "127.0.0.1:4000", "198.51.100.1, 203.0.113.7", "203.0.113.7:0"},
		{"only proxies", "10.0.0.1:4000", "10.0.0.2, 10.0.0.3", "10.0.0.2:0"},
		{"garbage", "127.0.0.1:4000", "not-an-address", "127.0.0.1:4000"},
		{"proxy without the header", "[::1]:4000", "", "[::1]:4000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got string
			h := proxies.ClientAddress(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got = r.RemoteAddr }), trusted)
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = tt.peer
			if tt.forwarded != "" {
				r.Header.Set("X-Forwarded-For", tt.forwarded)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tt.want {
				t.Fatalf("RemoteAddr = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := proxies.Parse("10.0.0.0/8, proxy.local"); err == nil {
		t.Fatal("a host name was accepted")
	}
}
