package rest

import (
	"bytes"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mountd/mountd/core"
)

// Metrics holds the Prometheus collectors of the HTTP transport.
type Metrics struct {
	registry *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// NewMetrics registers mountd's HTTP metrics and the Go runtime's on a fresh
// registry, so that tests can build several servers in one process.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mountd_http_requests_total",
			Help: "HTTP requests by route pattern, method and status.",
		}, []string{"route", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mountd_http_request_duration_seconds",
			Help:    "HTTP request latency by route pattern and method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"route", "method"}),
	}
	m.registry.MustRegister(m.requests, m.latency,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry lets other adapters register their collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the metrics in Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// recorder remembers what a handler answered, for the access log and metrics.
type recorder struct {
	http.ResponseWriter
	status    int
	code      core.Code
	accountID string
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (WebSockets, flush).
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// observe logs each request once, counts it, times it, and turns a panic
// into a 500 problem without internals.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.Logger.ErrorContext(r.Context(), "panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v)
				if rec.status == 0 {
					writeError(rec, r, s.Logger, core.Errorf(core.CodeInternal, "internal error"))
				}
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			elapsed := time.Since(start)
			s.Metrics.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.status)).Inc()
			s.Metrics.latency.WithLabelValues(route, r.Method).Observe(elapsed.Seconds())
			// 503 and 429 are refusals with Retry-After, expected under load
			// or an outage (whose cause is logged where it is met): logging
			// each at ERROR would let a flood of them flood the log too.
			level := slog.LevelInfo
			if rec.status >= 500 && rec.status != http.StatusServiceUnavailable {
				level = slog.LevelError
			}
			attrs := []any{"method", r.Method, "path", r.URL.Path, "route", route, "status", rec.status,
				"duration_ms", float64(elapsed.Microseconds()) / 1000}
			if rec.code != "" {
				attrs = append(attrs, "code", rec.code)
			}
			if rec.accountID != "" {
				attrs = append(attrs, "account", rec.accountID)
			}
			s.Logger.Log(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// routeProblems answers requests the mux cannot route (unknown path, wrong
// method) with problem+json instead of the mux's plain text.
func routeProblems(mux *http.ServeMux, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		probe := &headerProbe{header: http.Header{}}
		h.ServeHTTP(probe, r)
		if probe.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", probe.header.Get("Allow"))
			writeError(w, r, logger, core.Errorf(core.CodeMethodNotAllowed, "method %s is not allowed here", r.Method))
			return
		}
		writeError(w, r, logger, core.Errorf(core.CodeNotFound, "no such resource: %s", r.URL.Path))
	})
}

// headerProbe captures what the mux's own error handler would answer.
type headerProbe struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) WriteHeader(status int)      { p.status = status }
func (p *headerProbe) Write(b []byte) (int, error) { return p.body.Write(b) }
