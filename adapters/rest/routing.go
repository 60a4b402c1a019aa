package rest

import (
	"bytes"
	"log/slog"
	"net/http"
	"strings"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/httpobs"
)

// RouteProblems answers requests the mux cannot route (unknown path, wrong
// method) with problem+json instead of the mux's plain text.
func RouteProblems(mux *http.ServeMux, logger *slog.Logger) http.Handler {
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

// probeMethods are the methods an Allow header may list.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
	http.MethodDelete, http.MethodOptions}

// RejectUnknownMethods answers a method HTTP does not define with 405
// before anything else looks at the request, listing in Allow what the
// path accepts (found by asking mux, without running a handler). The
// method is not repeated in the answer: a client may invent any token.
func RejectUnknownMethods(mux *http.ServeMux, logger *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if httpobs.KnownMethod(r.Method) {
			next.ServeHTTP(w, r)
			return
		}
		var allow []string
		probe := *r
		for _, m := range probeMethods {
			probe.Method = m
			if _, pattern := mux.Handler(&probe); pattern != "" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
		}
		writeError(w, r, logger, core.Errorf(core.CodeMethodNotAllowed, "this method is not one HTTP defines"))
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
