package rest

import (
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/mountd/mountd/core"
)

// TestQueryParameters: every parameter is single valued: one given twice
// is refused by name, as an unknown one is; the others read as given.
func TestQueryParameters(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		fields      []string // refused, in order; none: accepted
	}{
		{"none", "", nil},
		{"once each", "mountUid=E1&format=csv&from=2026-11-22T01:40:13Z", nil},
		{"empty once", "mountUid=", nil},
		{"twice", "mountUid=E1&mountUid=E2", []string{"mountUid"}},
		{"twice the same", "mountUid=E1&mountUid=E1", []string{"mountUid"}},
		{"twice, one empty", "format=csv&format=", []string{"format"}},
		{"twice, beside others", "from=2026-11-22T01:40:13Z&mountUid=E1&to=x&to=y", []string{"to"}},
		{"two twice", "to=a&mountUid=E1&to=b&mountUid=E2", []string{"mountUid", "to"}},
		{"unknown", "pageSize=10", []string{"pageSize"}},
		{"unknown twice", "pageSize=10&pageSize=20", []string{"pageSize"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newQuery(httptest.NewRequest("GET", "/api/v1/exports/states?"+tc.query, nil), "mountUid", "format", "from", "to")
			var fields []string
			if ce, ok := q.err().(*core.Error); ok {
				for _, f := range ce.Fields {
					fields = append(fields, f.Field)
				}
			}
			if !slices.Equal(fields, tc.fields) {
				t.Fatalf("refused %v, want %v", fields, tc.fields)
			}
		})
	}
}
