package e2e

import (
	"net/http"
	"strings"
	"testing"
)

// TestHomePage: / sends browsers and everyone else to the console (302),
// which is served from the binary with a strict Content-Security-Policy;
// its settings name the sign-in issuer and client.
func TestHomePage(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.Get(in.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusFound || res.Header.Get("Location") != "/console/" {
		t.Fatalf("GET /: %d to %q, want 302 to /console/", res.StatusCode, res.Header.Get("Location"))
	}
	for _, tt := range []struct{ path, contentType, body string }{
		{"/console/", "text/html", `src="/console/app.js"`},
		{"/console/mounts/anything", "text/html", `src="/console/app.js"`},
		{"/console/index.html", "text/html", `src="/console/app.js"`},
		{"/console/app.js", "text/javascript", "fleetView"},
		{"/console/vendor/LICENSES.txt", "text/plain", "MIT"},
		{"/console/config.json", "application/json", `"clientId":"mountd-console"`},
	} {
		res, raw := in.call(http.MethodGet, tt.path, "", nil)
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), tt.contentType) || !strings.Contains(string(raw), tt.body) {
			t.Errorf("GET %s: %d %s, body lacks %q", tt.path, res.StatusCode, res.Header.Get("Content-Type"), tt.body)
		}
		if !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'self'") || res.Header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: no Content-Security-Policy or X-Frame-Options", tt.path)
		}
	}
}
