package app

// The listener puts mountd's transports on one socket: the REST API and its
// health endpoints, GraphQL and its browser page, the embedded identity
// provider, the console and the metrics. Around them it logs and counts
// every request and bounds how long a request body may take to arrive. It
// holds no rule of its own.

import (
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/internal/httpobs"
	"github.com/mountd/mountd/internal/telemetry"
)

// Mountable is a handler served at fixed paths of the listener.
type Mountable interface {
	Handler() http.Handler
	Paths() []string
}

// GraphQLHandler serves /graphql; GraphiQLHandler its browser page. Named
// types so that wire can tell them apart.
type (
	GraphQLHandler  http.Handler
	GraphiQLHandler http.Handler
	// ConsoleHandler serves the web console under /console/.
	ConsoleHandler http.Handler
)

// BodyTimeout is how long a request body may take to arrive once its
// headers are in; zero: DefaultBodyTimeout. The server's ReadTimeout would
// also cut WebSockets and long polls, so the deadline is set here, only
// while a body is read.
type BodyTimeout time.Duration

// DefaultBodyTimeout lets the largest body (1 MiB) arrive at 35 KB/s.
const DefaultBodyTimeout = 30 * time.Second

// RequestTimeout bounds each request's work (MOUNTD_REQUEST_TIMEOUT; zero:
// core.DefaultRequestTimeout), see rest.WithRequestDeadline.
type RequestTimeout time.Duration

// ListenerDeps is what the listener serves.
type ListenerDeps struct {
	Logger *slog.Logger
	API    *rest.Server
	// GraphQL is the /graphql endpoint and GraphiQL its browser page.
	GraphQL  GraphQLHandler
	GraphiQL GraphiQLHandler
	// IdentityProvider is nil when an external issuer is configured.
	IdentityProvider Mountable
	// Console is the web console; GET / sends browsers there.
	Console ConsoleHandler
	Metrics *httpobs.Metrics
	// Collectors are further metrics to serve (database, cache).
	Collectors     []prometheus.Collector
	BodyTimeout    BodyTimeout
	RequestTimeout RequestTimeout
}

// listener is the handler tree on the listening socket.
type listener struct {
	handler http.Handler
}

// newListener builds the handler tree.
func newListener(d ListenerDeps) *listener {
	for _, c := range d.Collectors {
		d.Metrics.Registry().MustRegister(c)
	}
	mux := http.NewServeMux()
	mount(mux, d.API)
	mux.Handle("GET /metrics", d.Metrics.Handler())
	if d.IdentityProvider != nil {
		mount(mux, d.IdentityProvider)
	}
	if d.GraphQL != nil {
		mux.Handle(rest.GraphQLPattern, rest.LimitBody(d.API.RequireToken(d.GraphQL)))
	}
	if d.Console != nil {
		mux.Handle("GET /console/", d.Console)
		mux.Handle("GET /{$}", http.RedirectHandler("/console/", http.StatusFound))
	}
	if d.GraphiQL != nil {
		mux.Handle("GET /graphiql", d.GraphiQL)
		mux.Handle("GET /graphiql/", d.GraphiQL) // its embedded assets
	}
	rest.Fallback(mux, "/", d.Logger)
	timeout := time.Duration(d.BodyTimeout)
	if timeout <= 0 {
		timeout = DefaultBodyTimeout
	}
	h := httpobs.Observe(rest.RejectUnknownMethods(mux, d.Logger,
		withBodyDeadline(rest.WithRequestDeadline(mux, time.Duration(d.RequestTimeout)), timeout)), d.Logger, d.Metrics, d.API.InternalError)
	if telemetry.Enabled() {
		// A span per request, continuing the caller's trace (traceparent),
		// named by its route once the mux has found it ("GET /api/v1/mounts/{uid}").
		// A method a client invented gets no span: it is refused at once,
		// and its name must not become a span's.
		observed := h
		traced := otelhttp.NewHandler(h, "http.server", otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			if r.Pattern != "" {
				return r.Pattern
			}
			return r.Method
		}))
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !httpobs.KnownMethod(r.Method) {
				observed.ServeHTTP(w, r)
				return
			}
			traced.ServeHTTP(w, r)
		})
	}
	return &listener{handler: h}
}

func mount(mux *http.ServeMux, m Mountable) {
	h := m.Handler()
	for _, p := range m.Paths() {
		mux.Handle(p, h)
	}
}

// ServeHTTP implements http.Handler.
func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.handler.ServeHTTP(w, r) }

// withBodyDeadline sets a read deadline for the request body and lifts it
// once the body is read, so that a client trickling a body cannot hold a
// connection and a goroutine for long; requests without a body (WebSocket
// upgrades, long polls) get none.
func withBodyDeadline(next http.Handler, timeout time.Duration) http.Handler {
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
