package rest

import (
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/mountd/mountd/core"
)

// query reads and checks query parameters: names outside allowed are
// refused, so that a typo never silently widens a listing, and so is a
// parameter given more than once: every parameter of the API is single
// valued (a list is one comma-separated value), and of two values one
// would be dropped unseen (an export of one mount named twice).
type query struct {
	values url.Values
	v      core.Validation
}

func newQuery(r *http.Request, allowed ...string) *query {
	q := &query{values: r.URL.Query()}
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	names := slices.Sorted(maps.Keys(q.values)) // errors in a stable order
	for _, name := range names {
		switch {
		case !ok[name]:
			q.v.Add(name, "is not a known parameter")
		case len(q.values[name]) > 1:
			q.v.Add(name, "must be given once")
		}
	}
	return q
}

// str returns an optional text parameter.
func (q *query) str(name string) *string {
	if _, ok := q.values[name]; !ok {
		return nil
	}
	s := q.values.Get(name)
	return &s
}

// page reads currentPage and pageSize (docs/api.md, "Conventions").
func (q *query) page(defaultSize int) core.Page {
	return core.NewPage(q.integer("currentPage"), q.integer("pageSize"), defaultSize, &q.v)
}

// integer reads an optional integer parameter; text that is not one reads
// as 0, which every rule refuses with its own message.
func (q *query) integer(name string) *int {
	s := q.str(name)
	if s == nil {
		return nil
	}
	n, err := strconv.Atoi(*s)
	if err != nil {
		n = 0
	}
	return &n
}

// time reads an optional RFC 3339 parameter.
func (q *query) time(name string) *time.Time {
	s := q.str(name)
	if s == nil {
		return nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		q.v.Add(name, "must be an RFC 3339 date-time")
		return nil
	}
	return &t
}

func (q *query) err() error { return q.v.Err() }
