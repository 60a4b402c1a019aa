package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestNfcTags covers docs/api.md, "NFC tags" on both backends.
func TestNfcTags(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			a.associate(t, "N1", nil)

			// not yet associated → 409, nothing stored
			res, raw := a.call(http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": "N1", "tagUids": []string{"04A2B3C4"}})
			wantProblem(t, res, raw, 409, "MOUNT_NOT_ASSOCIATED")
			a.confirm(t, "N1")
			a.associate(t, "N2", nil)
			a.confirm(t, "N2")

			sync := func(f fleet, mount string, tags ...string) map[string]any {
				t.Helper()
				if tags == nil {
					tags = []string{}
				}
				return decode[map[string]any](t, f.ok(t, http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": mount, "tagUids": tags}))
			}
			got := sync(a, "N1", "04:a2:b3:c4", "04A2B3C4D5E6F7", "04a2b3c4")
			if got["message"] != "NFC tags synchronised" || got["mountUid"] != "N1" || got["added"] != 2.0 || got["removed"] != 0.0 {
				t.Fatalf("first sync %v", got)
			}
			sync(a, "N2", "04A2B3C4")
			got = sync(a, "N1", "04A2B3C4D5E6F7", "0102030405060708090A")
			if got["added"] != 1.0 || got["removed"] != 1.0 {
				t.Fatalf("second sync %v", got)
			}

			l := decode[tagList](t, a.ok(t, http.MethodGet, "/api/v1/nfc-tags", nil))
			if l.Pagination["totalItems"] != 3 || l.Pagination["pageSize"] != 20 {
				t.Fatalf("tags %+v", l)
			}
			byUID := map[string]tagView{}
			for _, tag := range l.Tags {
				byUID[tag.UID] = tag
			}
			if strings.Join(byUID["04A2B3C4"].MountUIDs, ",") != "N2" || strings.Join(byUID["04A2B3C4D5E6F7"].MountUIDs, ",") != "N1" {
				t.Fatalf("links %+v", byUID)
			}

			// SYNC_NFC_TAGS carries the mount's whole list, sorted
			cmd := decode[[]commandView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/N1/query?code=SYNC_NFC_TAGS", nil))[0]
			if !strings.Contains(cmd.Payload, ";tagUids=0102030405060708090A+04A2B3C4D5E6F7;") || fmt.Sprint(cmd.Data["tagUids"]) != "[0102030405060708090A 04A2B3C4D5E6F7]" {
				t.Fatalf("SYNC_NFC_TAGS %+v", cmd)
			}

			// empty list clears; the tags stay in the account, unlinked
			got = sync(a, "N1")
			if got["removed"] != 2.0 {
				t.Fatalf("clear %v", got)
			}
			l = decode[tagList](t, a.ok(t, http.MethodGet, "/api/v1/nfc-tags?pageSize=1&currentPage=3", nil))
			if l.Pagination["totalItems"] != 3 || l.Pagination["totalPages"] != 3 || len(l.Tags) != 1 || len(l.Tags[0].MountUIDs) != 0 {
				t.Fatalf("after clear %+v", l)
			}

			// PATCH
			raw = a.ok(t, http.MethodPatch, "/api/v1/nfc-tags/04:a2:b3:c4", map[string]any{"name": "Blue card", "color": "#00aaff", "iconName": "card_blue"})
			upd := decode[struct {
				Message string  `json:"message"`
				Tag     tagView `json:"tag"`
			}](t, raw)
			if upd.Message != "NFC tag updated" || upd.Tag.Name != "Blue card" || upd.Tag.Color != "#00AAFF" || upd.Tag.IconName != "card_blue" || upd.Tag.UID != "04A2B3C4" {
				t.Fatalf("patch %s", raw)
			}

			// another account sees none of it
			l = decode[tagList](t, b.ok(t, http.MethodGet, "/api/v1/nfc-tags", nil))
			if l.Pagination["totalItems"] != 0 {
				t.Fatalf("B sees A's tags: %+v", l)
			}
			res, raw = b.call(http.MethodPatch, "/api/v1/nfc-tags/04A2B3C4", map[string]any{"name": "x"})
			wantProblem(t, res, raw, 404, "NFC_TAG_NOT_FOUND")
			res, raw = b.call(http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": "N1", "tagUids": []string{}})
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// a rider reads only the tags of its mount, and of their links
			// only its mount; it writes none
			sync(a, "N1", "04A2B3C4")
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:N2")
			res, raw = in.call(http.MethodGet, "/api/v1/nfc-tags", rider, nil)
			if l := decode[tagList](t, raw); res.StatusCode != 200 || l.Pagination["totalItems"] != 1 || l.Tags[0].UID != "04A2B3C4" ||
				strings.Join(l.Tags[0].MountUIDs, ",") != "N2" {
				t.Fatalf("rider tags %d %s", res.StatusCode, raw)
			}
			r := in.gql(t, rider, `{ nfcTags { tags { uid mountUids } } mount(uid: "N2") { nfcTags { uid mountUids } } }`, nil)
			if r.code() != "" || strings.Contains(string(r.Data), "N1") || !strings.Contains(string(r.Data), `"mountUids":["N2"]`) {
				t.Fatalf("rider tags through GraphQL %s %+v", r.Data, r.Errors)
			}
			res, raw = in.call(http.MethodPost, "/api/v1/nfc-tags", rider, map[string]any{"mountUid": "N2", "tagUids": []string{}})
			wantProblem(t, res, raw, 403, "FORBIDDEN")
			// a mount outside its items is not found, before its role counts
			res, raw = in.call(http.MethodPost, "/api/v1/nfc-tags", rider, map[string]any{"mountUid": "N1", "tagUids": []string{}})
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			if r := in.gql(t, rider, `mutation { syncNfcTags(mountUid: "N1", tagUids: []) { added } }`, nil); r.code() != "MOUNT_NOT_FOUND" {
				t.Fatalf("rider's GraphQL sync on another mount: %+v", r.Errors)
			}
		})
	}
}

func TestNfcTagValidation(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			a.associate(t, "T1", nil)
			a.confirm(t, "T1")
			a.ok(t, http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": "T1", "tagUids": []string{"04A2B3C4"}})
			tooMany := make([]string, 201)
			for i := range tooMany {
				tooMany[i] = "zz"
			}
			cases := []struct {
				name, method, path string
				body               any
				status             int
				code, field        string
			}{
				{"bad tag uid", "POST", "/api/v1/nfc-tags", map[string]any{"mountUid": "T1", "tagUids": []string{"04A2B3C4", "XYZ"}}, 400, "VALIDATION_FAILED", "tagUids[1]"},
				{"5-byte tag", "POST", "/api/v1/nfc-tags", map[string]any{"mountUid": "T1", "tagUids": []string{"0102030405"}}, 400, "VALIDATION_FAILED", "tagUids[0]"},
				{"missing mountUid", "POST", "/api/v1/nfc-tags", map[string]any{"tagUids": []string{}}, 400, "VALIDATION_FAILED", "mountUid"},
				{"missing tagUids", "POST", "/api/v1/nfc-tags", map[string]any{"mountUid": "T1"}, 400, "VALIDATION_FAILED", "tagUids"},
				{"tagUids not a list", "POST", "/api/v1/nfc-tags", `{"mountUid":"T1","tagUids":"04A2B3C4"}`, 400, "VALIDATION_FAILED", "tagUids"},
				{"more than 200 tags", "POST", "/api/v1/nfc-tags", map[string]any{"mountUid": "T1", "tagUids": tooMany}, 413, "PAYLOAD_TOO_LARGE", ""},
				{"unknown mount", "POST", "/api/v1/nfc-tags", map[string]any{"mountUid": "T9", "tagUids": []string{}}, 404, "MOUNT_NOT_FOUND", ""},
				{"bad color", "PATCH", "/api/v1/nfc-tags/04A2B3C4", map[string]any{"color": "blue"}, 400, "VALIDATION_FAILED", "color"},
				{"bad icon", "PATCH", "/api/v1/nfc-tags/04A2B3C4", map[string]any{"iconName": "Big Icon"}, 400, "VALIDATION_FAILED", "iconName"},
				{"long name", "PATCH", "/api/v1/nfc-tags/04A2B3C4", map[string]any{"name": strings.Repeat("n", 101)}, 400, "VALIDATION_FAILED", "name"},
				{"unknown tag", "PATCH", "/api/v1/nfc-tags/0A0B0C0D", map[string]any{"name": "x"}, 404, "NFC_TAG_NOT_FOUND", ""},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					res, raw := a.call(c.method, c.path, c.body)
					p := wantProblem(t, res, raw, c.status, c.code)
					if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
						t.Fatalf("errors %s; want field %s", raw, c.field)
					}
				})
			}
			// nothing partial was stored
			l := decode[tagList](t, a.ok(t, http.MethodGet, "/api/v1/nfc-tags", nil))
			if l.Pagination["totalItems"] != 1 || l.Tags[0].Name != "" || strings.Join(l.Tags[0].MountUIDs, ",") != "T1" {
				t.Fatalf("after refused requests %+v", l)
			}
		})
	}
}
