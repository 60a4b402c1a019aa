package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestNotFoundWording: another account's mount and a mount that does not
// exist are refused in the same words (but for the uid the caller sent),
// on every endpoint and through aliased GraphQL fields, so that errors
// cannot tell which uids exist.
func TestNotFoundWording(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			a.associate(t, "OWNED", nil)
			a.confirm(t, "OWNED")
			now := time.Now().UTC().Add(-time.Second)
			for _, ep := range []struct {
				method, path string
				body         any
			}{
				{http.MethodGet, "/api/v1/mounts/%s", nil},
				{http.MethodPatch, "/api/v1/mounts/%s", map[string]any{"name": "x"}},
				{http.MethodDelete, "/api/v1/mounts/%s", nil},
				{http.MethodDelete, "/api/v1/mounts/%s/abandon", nil},
				{http.MethodPost, "/api/v1/mounts/%s/confirm-association", nil},
				{http.MethodPost, "/api/v1/mounts/%s/states", map[string]any{"states": []any{entry("BATTERY_LEVEL", "5", now)}}},
				{http.MethodGet, "/api/v1/mounts/%s/states", nil},
				{http.MethodGet, "/api/v1/mounts/%s/commands", nil},
				{http.MethodGet, "/api/v1/mounts/%s/query?code=RELEASE_HELMET", nil},
			} {
				detail := func(uid string) string {
					res, raw := b.call(ep.method, strings.Replace(ep.path, "%s", uid, 1), ep.body)
					p := wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
					return strings.ReplaceAll(p.Detail, uid, "UID")
				}
				if owned, missing := detail("OWNED"), detail("MISSING"); owned != missing {
					t.Errorf("%s %s: another account's mount %q, a missing one %q", ep.method, ep.path, owned, missing)
				}
			}
			r := b.gql(t, `{ x: mount(uid: "OWNED") { uid } y: mount(uid: "MISSING") { uid } }`, nil)
			messages := map[string]string{} // by alias: the errors come in any order
			for _, e := range r.Errors {
				messages[fmt.Sprint(e.Path...)] = e.Message
			}
			if len(r.Errors) != 2 || strings.ReplaceAll(messages["x"], "OWNED", "UID") != strings.ReplaceAll(messages["y"], "MISSING", "UID") {
				t.Fatalf("aliased GraphQL errors %+v", r.Errors)
			}
			if a.get(t, "OWNED").Name != "" {
				t.Fatal("B's PATCH reached A's mount")
			}
		})
	}
}
