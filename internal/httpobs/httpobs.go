// Package httpobs observes mountd's HTTP listener: one access-log line, a
// request counter and a latency histogram per request, and the Prometheus
// registry other adapters add their collectors to. Transports annotate the
// request they served (the account it acted for, the error code it got)
// through SetAccount and SetCode; the log line carries both.
package httpobs

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the Prometheus collectors of the HTTP listener.
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

// StatusClientClosedRequest is how a request is counted and logged when
// its client went away before the answer was complete (nginx's 499).
const StatusClientClosedRequest = 499

// KnownMethod reports whether m is one of HTTP's registered methods (RFC
// 9110 and PATCH): the only ones mountd serves, and the only ones that
// name a metric series, a span or a log field.
func KnownMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return true
	}
	return false
}

// MethodLabel is m as metrics, spans and logs show it: a method a client
// invented is OTHER, so that inventing many cannot grow them.
func MethodLabel(m string) string {
	if KnownMethod(m) {
		return m
	}
	return "OTHER"
}

// recorder remembers what a handler answered, for the access log and metrics.
type recorder struct {
	http.ResponseWriter
	status    int
	code      string
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

// find reaches the recorder through writers that wrap it.
func find(w http.ResponseWriter) *recorder {
	for w != nil {
		if rec, ok := w.(*recorder); ok {
			return rec
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// SetAccount names, in the request's log line, the account it acted for.
func SetAccount(w http.ResponseWriter, accountID string) {
	if rec := find(w); rec != nil {
		rec.accountID = accountID
	}
}

// SetCode names, in the request's log line, the error code it answered.
func SetCode(w http.ResponseWriter, code string) {
	if rec := find(w); rec != nil {
		rec.code = code
	}
}

// Observe logs each request once, counts it and times it. A panic in next
// is logged and answered by internalError (unless an answer has begun);
// http.ErrAbortHandler goes on up, as net/http expects.
func Observe(next http.Handler, logger *slog.Logger, m *Metrics, internalError http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				logger.ErrorContext(r.Context(), "panic in handler", "method", MethodLabel(r.Method), "path", r.URL.Path, "panic", v)
				if rec.status == 0 {
					internalError(rec, r)
				}
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			if r.Context().Err() != nil && rec.status != http.StatusSwitchingProtocols {
				// The client closed the connection before the answer was
				// complete (the server never cancels a request itself): not
				// a failure of the server, so not a 5xx either.
				rec.status = StatusClientClosedRequest
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			elapsed := time.Since(start)
			method := MethodLabel(r.Method)
			m.requests.WithLabelValues(route, method, strconv.Itoa(rec.status)).Inc()
			m.latency.WithLabelValues(route, method).Observe(elapsed.Seconds())
			// 503 and 429 are refusals with Retry-After, expected under load
			// or an outage (whose cause is logged where it is met): logging
			// each at ERROR would let a flood of them flood the log too.
			level := slog.LevelInfo
			if rec.status >= 500 && rec.status != http.StatusServiceUnavailable {
				level = slog.LevelError
			}
			if !logger.Enabled(r.Context(), level) {
				return // MOUNTD_LOG_LEVEL=warn: no line, so no attributes to box
			}
			attrs := []any{"method", method, "path", r.URL.Path, "route", route, "status", rec.status,
				"duration_ms", float64(elapsed.Microseconds()) / 1000}
			if rec.code != "" {
				attrs = append(attrs, "code", rec.code)
			}
			if rec.accountID != "" {
				attrs = append(attrs, "account", rec.accountID)
			}
			logger.Log(r.Context(), level, "request", attrs...)
		}()
		next.ServeHTTP(rec, r)
	})
}

// SourceAddress is the caller's address without its port: r.RemoteAddr,
// which internal/proxies' ClientAddress has made the client's when a
// trusted proxy forwarded the request. Every throttle per address and the
// audit log read it here, so they name the same caller.
func SourceAddress(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
