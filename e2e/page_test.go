package e2e

import (
	"fmt"
	"net/http"
	"testing"
)

// TestFarPages: a page past the end is an empty list with 200, however far
// (docs/api.md, "Conventions"), on every list and through GraphQL; a page number that is
// not an integer is 400.
func TestFarPages(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			a.associate(t, "P1", nil)
			a.ok(t, http.MethodPost, "/api/v1/mounts/P1/confirm-association", nil)
			a.ok(t, http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": "P1", "tagUids": []string{"04A2B3C4"}})
			for _, page := range []string{"2", "2147483647", "2147483648", "9223372036854775807"} {
				for _, list := range []struct{ path, key string }{
					{"/api/v1/mounts", "mounts"},
					{"/api/v1/nfc-tags", "tags"},
					{"/api/v1/mounts/P1/commands", "commands"},
					{"/api/v1/mounts/P1/states", "states"},
					{"/api/v1/firmware/versions", "versions"},
				} {
					res, raw := a.call(http.MethodGet, fmt.Sprintf("%s?currentPage=%s&pageSize=100", list.path, page), nil)
					if res.StatusCode == http.StatusBadRequest {
						continue // a page number beyond what the server takes is refused, never wrapped
					}
					body := decode[map[string]any](t, raw)
					if res.StatusCode != 200 || len(body[list.key].([]any)) != 0 {
						t.Fatalf("%s page %s: %d %s", list.path, page, res.StatusCode, raw)
					}
				}
			}
			r := a.gql(t, `{ mounts(currentPage: 2147483647, pageSize: 100) { mounts { uid } } nfcTags(currentPage: 2147483647, pageSize: 100) { tags { uid } } }`, nil)
			if r.code() != "" || string(r.Data) != `{"mounts":{"mounts":[]},"nfcTags":{"tags":[]}}` {
				t.Fatalf("GraphQL far page %s %+v", r.Data, r.Errors)
			}
		})
	}
}
