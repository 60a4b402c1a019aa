package rest

import (
	"bytes"
	"log/slog"
	"net/http"

	"github.com/mountd/mountd/core"
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

// headerProbe captures what the mux's own error handler would answer.
type headerProbe struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (p *headerProbe) Header() http.Header         { return p.header }
func (p *headerProbe) WriteHeader(status int)      { p.status = status }
func (p *headerProbe) Write(b []byte) (int, error) { return p.body.Write(b) }
