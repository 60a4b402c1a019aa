package app

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/internal/httpobs"
)

// fakeIDP stands for the embedded identity provider.
type fakeIDP struct{}

func (fakeIDP) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "idp") })
}
func (fakeIDP) Paths() []string { return []string{"GET /.well-known/openid-configuration"} }

// TestListenerRoutes checks what the listener puts where: each transport at
// its paths, problem+json for what none of them serves, the route of the
// transport's own mux in the metrics, and a panic answered as a 500 problem.
func TestListenerRoutes(t *testing.T) {
	metrics := httpobs.NewMetrics()
	api := rest.NewServer(rest.Deps{Logger: slog.New(slog.DiscardHandler)})
	srv := newListener(ListenerDeps{
		Logger:           slog.New(slog.DiscardHandler),
		API:              api,
		GraphQL:          http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "graphql") }),
		GraphiQL:         http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "graphiql") }),
		IdentityProvider: fakeIDP{},
		Metrics:          metrics,
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	for _, c := range []struct {
		method, path, token string
		status              int
		code, body          string
	}{
		{"GET", "/healthz", "", 200, "", `"ok"`},
		{"GET", "/.well-known/openid-configuration", "", 200, "", "idp"},
		{"GET", "/graphiql", "", 200, "", "graphiql"},
		{"PUT", "/graphiql", "", 405, "METHOD_NOT_ALLOWED", ""},
		{"GET", "/nowhere", "", 404, "NOT_FOUND", ""},
		{"GET", "/api/v1/nowhere", "", 404, "NOT_FOUND", ""},
		{"POST", "/graphql", "", 401, "UNAUTHENTICATED", ""},
		{"GET", "/api/v1/mounts", "", 401, "UNAUTHENTICATED", ""},
		{"GET", "/metrics", "", 200, "", "mountd_http_requests_total"},
	} {
		req, _ := http.NewRequest(c.method, ts.URL+c.path, nil)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != c.status {
			t.Errorf("%s %s: status %d, want %d: %s", c.method, c.path, res.StatusCode, c.status, body)
		}
		if c.code != "" {
			var p struct{ Code string }
			if err := json.Unmarshal(body, &p); err != nil || p.Code != c.code {
				t.Errorf("%s %s: code %q, want %q (%s)", c.method, c.path, p.Code, c.code, body)
			}
		}
		if !strings.Contains(string(body), c.body) {
			t.Errorf("%s %s: body %q lacks %q", c.method, c.path, body, c.body)
		}
		if c.path == "/metrics" {
			// The API's inner mux names the route, not the listener's prefix.
			if want := `route="GET /api/v1/mounts"`; !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s: the API's routes must be labelled by its own mux", want)
			}
			if want := `route="GET /healthz"`; !strings.Contains(string(body), want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	}
}

// TestListenerRecoversPanics: a handler's panic is a 500 problem without
// internals, and the listener keeps serving.
func TestListenerRecoversPanics(t *testing.T) {
	srv := newListener(ListenerDeps{
		Logger:  slog.New(slog.DiscardHandler),
		API:     rest.NewServer(rest.Deps{Logger: slog.New(slog.DiscardHandler)}),
		GraphQL: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("resolver bug") }),
		Metrics: httpobs.NewMetrics(),
	})
	// A WebSocket upgrade reaches the GraphQL handler before any token
	// check (it authenticates in connection_init).
	req := httptest.NewRequest("GET", "/graphql", nil)
	req.Header.Set("Upgrade", "websocket")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", rec.Code)
	}
	if body := rec.Body.String(); !strings.Contains(body, `"INTERNAL"`) || strings.Contains(body, "resolver bug") {
		t.Errorf("body %q: want an INTERNAL problem without the panic's text", body)
	}
}
