package rest

import (
	"context"
	"net/http"

	"github.com/mountd/mountd/core"
)

// The handlers of an owner's resource that reads and changes by id (jobs,
// rollouts) share one shape: the action's right first, the query checked,
// then the service, its answer rendered. They take the service as a
// method expression and read it from the server when a request comes, so
// a server built without that service still builds.

// handlerFunc is what s.authed wraps.
type handlerFunc = func(http.ResponseWriter, *http.Request, core.Principal)

// byID answers 200 with what call returns for the path's {id}.
func byID[S, T, J any](s *Server, a core.Action, svc func() S,
	call func(S, context.Context, core.Principal, string) (T, error), render func(T) J) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p core.Principal) {
		if !s.allowed(w, r, p, a) {
			return
		}
		if err := newQuery(r).err(); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		v, err := call(svc(), r.Context(), p, r.PathValue("id"))
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		writeJSON(w, http.StatusOK, render(v))
	}
}

// paged answers 200 with {key: [...], "pagination"} of what list returns
// for the path's {id} ("" on a path without one) and the page asked for.
func paged[S, T, J any](s *Server, a core.Action, svc func() S, key string,
	list func(S, context.Context, core.Principal, string, core.Page) ([]T, core.Pagination, error), render func(T) J) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p core.Principal) {
		if !s.allowed(w, r, p, a) {
			return
		}
		q := newQuery(r, "currentPage", "pageSize")
		page := q.page(20)
		if err := q.err(); err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		items, pagination, err := list(svc(), r.Context(), p, r.PathValue("id"), page)
		if err != nil {
			writeError(w, r, s.Logger, err)
			return
		}
		out := make([]J, len(items))
		for i, it := range items {
			out[i] = render(it)
		}
		writeJSON(w, http.StatusOK, map[string]any{key: out, "pagination": pagination})
	}
}

// withoutID adapts a list that takes no id to paged.
func withoutID[S, T any](list func(S, context.Context, core.Principal, core.Page) ([]T, core.Pagination, error)) func(S, context.Context, core.Principal, string, core.Page) ([]T, core.Pagination, error) {
	return func(svc S, ctx context.Context, p core.Principal, _ string, page core.Page) ([]T, core.Pagination, error) {
		return list(svc, ctx, p, page)
	}
}
