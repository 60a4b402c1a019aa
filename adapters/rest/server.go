// Package rest is the HTTP transport of mountd: the REST API of the
// specification, health and metrics endpoints, and the composition of every
// HTTP handler (identity provider, GraphQL) on one listener. It holds no
// business rule: handlers decode, call core, and encode.
package rest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mountd/mountd/core"
)

// Checker is a dependency that readiness depends on.
type Checker struct {
	Name  string
	Check func(ctx context.Context) error
}

// Mountable is a handler served on the listener at fixed paths, such as the
// embedded identity provider.
type Mountable interface {
	Handler() http.Handler
	Paths() []string
}

// Deps is what the HTTP transport needs.
type Deps struct {
	Logger   *slog.Logger
	Verifier core.TokenVerifier
	Accounts Accounts
	Mounts   Mounts
	Nfc      NfcTags
	Firmware Firmware
	// Blobs serves local firmware files; nil with S3 storage.
	Blobs   BlobOpener
	Checks  []Checker
	Metrics *Metrics
	// Collectors are further metrics to serve (database, cache).
	Collectors []prometheus.Collector
	// IdentityProvider is nil when an external issuer is configured.
	IdentityProvider Mountable
	// GraphQL is the /graphql endpoint and GraphiQL its browser page.
	GraphQL  GraphQLHandler
	GraphiQL GraphiQLHandler
	// BodyTimeout bounds how long a request body may take to arrive.
	BodyTimeout BodyTimeout
}

// BodyTimeout is how long a request body may take to arrive once its
// headers are in; zero: DefaultBodyTimeout. The server's ReadTimeout would
// also cut WebSockets and long polls, so the deadline is set here, only
// while a body is read.
type BodyTimeout time.Duration

// DefaultBodyTimeout lets the largest body (1 MiB) arrive at 35 KB/s.
const DefaultBodyTimeout = 30 * time.Second

// Server is the HTTP handler tree of mountd.
type Server struct {
	Deps
	handler http.Handler
}

// NewServer builds the handler tree.
func NewServer(d Deps) *Server {
	s := &Server{Deps: d}
	for _, c := range d.Collectors {
		d.Metrics.registry.MustRegister(c)
	}
	mux := http.NewServeMux()

	mux.HandleFunc("GET /{$}", s.home)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", d.Metrics.Handler())
	if d.IdentityProvider != nil {
		h := d.IdentityProvider.Handler()
		for _, p := range d.IdentityProvider.Paths() {
			mux.Handle(p, h)
		}
	}

	api := http.NewServeMux()
	api.Handle("GET /api/v1/accounts/me", s.authed(s.me))
	api.Handle("GET /api/v1/openapi.json", http.HandlerFunc(s.openAPI))
	api.Handle("GET /api/v1/mounts", s.authed(s.listMounts))
	api.Handle("POST /api/v1/mounts", s.authed(s.requestAssociation))
	api.Handle("POST /api/v1/mounts/{uid}/confirm-association", s.authed(s.confirmAssociation))
	api.Handle("GET /api/v1/mounts/{uid}", s.authed(s.getMount))
	api.Handle("PATCH /api/v1/mounts/{uid}", s.authed(s.updateMount))
	api.Handle("DELETE /api/v1/mounts/{uid}", s.authed(s.deleteMount))
	api.Handle("POST /api/v1/mounts/{uid}/states", s.authed(s.reportStates))
	api.Handle("GET /api/v1/mounts/{uid}/states", s.authed(s.stateHistory))
	api.Handle("GET /api/v1/mounts/{uid}/query", s.authed(s.queryCommand))
	api.Handle("GET /api/v1/mounts/{uid}/commands", s.authed(s.commandAudit))
	api.Handle("DELETE /api/v1/mounts/{uid}/abandon", s.authed(s.abandonMount))
	api.Handle("GET /api/v1/nfc-tags", s.authed(s.listTags))
	api.Handle("POST /api/v1/nfc-tags", s.authed(s.syncTags))
	api.Handle("PATCH /api/v1/nfc-tags/{uid}", s.authed(s.updateTag))
	api.Handle("GET /api/v1/firmware/versions", s.authed(s.listFirmware))
	api.Handle("GET /api/v1/firmware/check-update", s.authed(s.checkUpdate))
	api.Handle("GET /api/v1/firmware/download", s.authed(s.downloadFirmware))
	api.Handle("GET /api/v1/firmware/blobs/{key...}", http.HandlerFunc(s.serveBlob))
	mux.Handle("/api/v1/", s.withBodyLimit(routeProblems(api, d.Logger)))
	if d.GraphQL != nil {
		mux.Handle("/graphql", s.withBodyLimit(s.graphqlAuth(d.GraphQL)))
	}
	if d.GraphiQL != nil {
		mux.Handle("GET /graphiql", d.GraphiQL)
		mux.Handle("GET /graphiql/", d.GraphiQL) // its embedded assets
	}

	s.handler = s.observe(s.withBodyDeadline(routeProblems(mux, s.Logger)))
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ready := true
	for _, c := range s.Checks {
		if err := c.Check(ctx); err != nil {
			s.Logger.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
			checks[c.Name] = "unavailable"
			ready = false
			continue
		}
		checks[c.Name] = "ok"
	}
	if !ready {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unavailable", "checks": checks})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "checks": checks})
}

// withBodyDeadline sets a read deadline for the request body and lifts it
// once the body is read, so that a client trickling a body cannot hold a
// connection and a goroutine for long; requests without a body (WebSocket
// upgrades, long polls) get none.
func (s *Server) withBodyDeadline(next http.Handler) http.Handler {
	timeout := time.Duration(s.BodyTimeout)
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || r.Header.Get("Upgrade") != "" {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(timeout)); err == nil {
			r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody lifts the read deadline when the body has been read whole.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	once sync.Once
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.lift)
	}
	return n, err
}

// withBodyLimit caps request bodies at the API's 1 MiB. A declared
// length over the limit is refused before anything is read.
func (s *Server) withBodyLimit(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		next.ServeHTTP(w, r)
	})
}

// authed verifies the access token before h runs. Authentication comes
// before any look at the body (docs/api.md), and a token lacking mandatory
// scope items is refused here for every API call.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, core.Principal)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := bearerToken(r)
		if raw == "" {
			writeError(w, r, s.Logger, core.Errorf(core.CodeUnauthenticated, "an access token is required in the Access-Key header"))
			return
		}
		p, err := s.Verifier.Verify(r.Context(), raw)
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		if !p.Complete {
			writeError(w, r, s.Logger, p.Authorize(core.ActionReadAccount))
			return
		}
		if rec, ok := w.(*recorder); ok {
			rec.accountID = p.AccountID
		}
		h(w, r.WithContext(core.WithPrincipal(r.Context(), p)), p)
	})
}

// GraphQLHandler serves /graphql; GraphiQLHandler its browser page. Named
// types so that wire can tell them apart.
type (
	GraphQLHandler  http.Handler
	GraphiQLHandler http.Handler
)

// graphqlAuth authenticates GraphQL over HTTP like REST (401/403 as
// problem+json); a WebSocket upgrade authenticates in connection_init.
func (s *Server) graphqlAuth(next http.Handler) http.Handler {
	authed := s.authed(func(w http.ResponseWriter, r *http.Request, _ core.Principal) { next.ServeHTTP(w, r) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			next.ServeHTTP(w, r)
			return
		}
		authed.ServeHTTP(w, r)
	})
}

// bearerToken reads the Access-Key header, or an Authorization Bearer token.
func bearerToken(r *http.Request) string {
	if v := strings.TrimSpace(r.Header.Get("Access-Key")); v != "" {
		return v
	}
	auth := r.Header.Get("Authorization")
	if len(auth) > 7 && strings.EqualFold(auth[:7], "bearer ") {
		return strings.TrimSpace(auth[7:])
	}
	return ""
}

// MeResponse is the body of GET /api/v1/accounts/me.
type MeResponse struct {
	AccountID string   `json:"accountId"`
	Name      string   `json:"name"`
	Role      string   `json:"role"`
	MountUIDs []string `json:"mountUids"`
	Scopes    []string `json:"scopes"`
	ExpiresAt Time     `json:"expiresAt"`
}

func (s *Server) me(w http.ResponseWriter, r *http.Request, p core.Principal) {
	me, err := s.Accounts.Me(r.Context(), p)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, MeResponse{AccountID: me.AccountID, Name: me.Name, Role: string(me.Role),
		MountUIDs: me.MountUIDs, Scopes: me.Scopes, ExpiresAt: Time(me.ExpiresAt)})
}
