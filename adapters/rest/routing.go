package rest

import (
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/httpobs"
)

// Fallback registers at pattern, the prefix of every path mux serves ("/"
// or "/api/v1/"), the answer to requests no other pattern routes, instead
// of the mux's plain text: 405 with Allow when the path takes another
// method, else 404, both problem+json. Being a route itself, it lets mux
// find each request's route once (asking mux first whether it has a route,
// and then letting it route, cost two look-ups at each of the three nested
// muxes, 7 % of a GET's CPU).
func Fallback(mux *http.ServeMux, pattern string, logger *slog.Logger) {
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if pattern == "/" {
			r.Pattern = "" // no route: the access log and metrics say "unmatched"
		}
		var allow []string
		probe := *r
		for _, m := range probeMethods {
			probe.Method = m
			if _, p := mux.Handler(&probe); p != "" && p != pattern {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			slices.Sort(allow) // the order net/http's own 405 lists them in
			w.Header().Set("Allow", strings.Join(allow, ", "))
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
			if _, pattern := mux.Handler(&probe); pattern != "" && pattern != "/" { // "/": the Fallback
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
		}
		writeError(w, r, logger, core.Errorf(core.CodeMethodNotAllowed, "this method is not one HTTP defines"))
	})
}
