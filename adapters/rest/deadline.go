package rest

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

// riderRevokeTimeout is the deadline of POST /grants/revoke: revoking a
// rider who holds grants on 100,000 mounts takes about 10 s of database
// writes (docs/performance.md); it stops short of the shipped proxy's 60 s.
const riderRevokeTimeout = 50 * time.Second

// WithRequestDeadline bounds each request's work to timeout (zero:
// core.DefaultRequestTimeout): past it the request answers 503 UNAVAILABLE
// with Retry-After, and the store cancels its statement, since every store
// call is made with the request's context. Streams are left to their own
// bounds: WebSocket upgrades, the exports (core.MaxExportDuration and a
// write deadline) and firmware files; a long poll of the event feed gets
// its wait on top; revoking a rider gets at least riderRevokeTimeout.
func WithRequestDeadline(next http.Handler, timeout time.Duration) http.Handler {
	if timeout <= 0 {
		timeout = core.DefaultRequestTimeout
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := timeout
		switch {
		case strings.EqualFold(r.Header.Get("Upgrade"), "websocket"),
			strings.HasPrefix(r.URL.Path, "/api/v1/exports/"),
			strings.HasPrefix(r.URL.Path, "/api/v1/firmware/blobs/"):
			next.ServeHTTP(w, r)
			return
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/grants/revoke":
			d = max(d, riderRevokeTimeout)
		case r.URL.Path == "/api/v1/events":
			if wait, err := strconv.Atoi(r.URL.Query().Get("wait")); err == nil && wait > 0 && time.Duration(wait)*time.Second <= core.MaxEventWait {
				d += time.Duration(wait) * time.Second
			}
		}
		ctx, cancel := core.WithRequestDeadline(r.Context(), d)
		defer cancel()
		inner := r.WithContext(ctx)
		next.ServeHTTP(w, inner)
		// The mux below names the route on the request it was given; the
		// access log and metrics above read it from theirs.
		r.Pattern = inner.Pattern
	})
}
