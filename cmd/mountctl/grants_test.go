package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

const fakeKey = "04" + "a1b2c3d4e5f60718" + "0000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000" + "9f8e7d6c"

func fakeGrant(revokedAt string) string {
	revoked := "null"
	if revokedAt != "" {
		revoked = `"` + revokedAt + `"`
	}
	return `{"id":"gr_0123456789abcdef01234567","uid":"MNT-1","riderKey":"` + fakeKey + `","rights":["RELEASE_HELMET"],` +
		`"notBefore":"2026-11-29T08:00:00Z","notAfter":"2026-11-29T20:00:00Z","epoch":1,"label":"Anna","createdAt":"2026-11-29T08:00:00Z",` +
		`"revokedAt":` + revoked + `,"text":"grant;…","signature":"ab","uses":2,"lastUsedAt":"2026-11-29T09:30:00Z"}`
}

// grantServer is a fake API that answers the grant routes and records
// each request with its body.
type grantServer struct{ recorder }

func (f *grantServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body := f.record(r, r.Method+" "+r.URL.RequestURI())
	w.Header().Set("Content-Type", "application/json")
	problem := func(status int, doc string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, doc)
	}
	page := `,"pagination":{"currentPage":1,"pageSize":20,"totalItems":1,"totalPages":1}}`
	switch r.Method + " " + r.URL.Path {
	case "GET /api/v1/mounts/MNT-1/grants", "GET /api/v1/grants":
		_, _ = io.WriteString(w, `{"grants":[`+fakeGrant("")+`]`+page)
	case "POST /api/v1/mounts/MNT-1/grants":
		if body["riderKey"] == "04" {
			problem(http.StatusBadRequest, `{"type":"about:blank","title":"Bad Request","status":400,"code":"VALIDATION_FAILED",`+
				`"detail":"the request is invalid","errors":[{"field":"riderKey","message":"must be an uncompressed P-256 point in hex"}]}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, fakeGrant(""))
	case "POST /api/v1/grants/gr_0123456789abcdef01234567/revoke":
		_, _ = io.WriteString(w, fakeGrant("2026-11-29T10:00:00Z"))
	case "POST /api/v1/grants/revoke":
		_, _ = io.WriteString(w, `{"grants":[`+fakeGrant("2026-11-29T10:00:00Z")+`]}`)
	default:
		problem(http.StatusNotFound, `{"type":"about:blank","title":"Not Found","status":404,"code":"GRANT_NOT_FOUND","detail":"no such grant"}`)
	}
}

// TestGrantsCommand runs `mountctl grants` against a fake API: list asks
// a mount's grants or a rider's, create sends the window the flags give,
// revoke posts by id or by rider key, and bad flags or the API's refusals
// are errors.
func TestGrantsCommand(t *testing.T) {
	fake := &grantServer{}
	srv := httptest.NewServer(fake)
	defer srv.Close()
	run := func(args ...string) (string, error) {
		t.Helper()
		var out bytes.Buffer
		err := newCommand(&out, io.Discard).Run(context.Background(), append([]string{"mountctl", "--api", srv.URL, "--token", "tok"}, args...))
		return out.String(), err
	}
	last := fake.last

	for _, c := range []struct {
		name    string
		args    []string
		request string
		body    map[string]any
		printed []string
	}{
		{"a mount's grants", []string{"grants", "list", "--uid", "MNT-1", "--state", "active"},
			"GET /api/v1/mounts/MNT-1/grants?currentPage=1&pageSize=20&state=ACTIVE", nil,
			[]string{"gr_0123456789abcdef01234567  ", "MNT-1  rider 04a1b2c3…9f8e7d6c  uses 2 (last used 2026-11-29T09:30:00Z)", `"Anna"`, "page 1 of 1, 1 grants"}},
		{"a rider's grants", []string{"grants", "list", "--rider-key", fakeKey, "--page-size", "5"},
			"GET /api/v1/grants?currentPage=1&pageSize=5&riderKey=" + fakeKey, nil, []string{"page 1 of 1, 1 grants"}},
		{"create until", []string{"grants", "create", "--uid", "MNT-1", "--rider-key", fakeKey, "--not-after", "2026-11-29T21:00:00+01:00", "--label", "Anna"},
			"POST /api/v1/mounts/MNT-1/grants", map[string]any{"riderKey": fakeKey, "notAfter": "2026-11-29T20:00:00Z", "label": "Anna"},
			[]string{"gr_0123456789abcdef01234567"}},
		{"create for a ttl from notBefore", []string{"grants", "create", "--uid", "MNT-1", "--rider-key", fakeKey, "--not-before", "2026-11-29T08:00:00Z", "--ttl", "12h"},
			"POST /api/v1/mounts/MNT-1/grants", map[string]any{"riderKey": fakeKey, "notBefore": "2026-11-29T08:00:00Z", "notAfter": "2026-11-29T20:00:00Z"},
			[]string{"gr_0123456789abcdef01234567"}},
		{"revoke one", []string{"grants", "revoke", "gr_0123456789abcdef01234567"},
			"POST /api/v1/grants/gr_0123456789abcdef01234567/revoke", nil, []string{"REVOKED", "revoked 2026-11-29T10:00:00Z"}},
		{"revoke a rider's", []string{"grants", "revoke", "--rider-key", fakeKey},
			"POST /api/v1/grants/revoke", map[string]any{"riderKey": fakeKey}, []string{"REVOKED", "1 grants revoked"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := run(c.args...)
			if err != nil {
				t.Fatal(err)
			}
			if req, body := last(); req != c.request || !reflect.DeepEqual(body, c.body) {
				t.Errorf("sent %s %v, want %s %v", req, body, c.request, c.body)
			}
			for _, want := range c.printed {
				if !strings.Contains(out, want) {
					t.Errorf("printed %q, want it to hold %q", out, want)
				}
			}
		})
	}

	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"list without a mount or a rider", []string{"grants", "list"}, "give --uid"},
		{"list in a state unknown", []string{"grants", "list", "--uid", "MNT-1", "--state", "LIVE"}, "--state"},
		{"a rider's grants in a state", []string{"grants", "list", "--rider-key", fakeKey, "--state", "ACTIVE"}, "--state needs --uid"},
		{"create without an end", []string{"grants", "create", "--uid", "MNT-1", "--rider-key", fakeKey}, "--not-after or --ttl"},
		{"create with two ends", []string{"grants", "create", "--uid", "MNT-1", "--rider-key", fakeKey, "--ttl", "1h", "--not-after", "2026-11-29T20:00:00Z"}, "--not-after or --ttl"},
		{"create refused", []string{"grants", "create", "--uid", "MNT-1", "--rider-key", "04", "--ttl", "1h"}, "riderKey"},
		{"revoke with both", []string{"grants", "revoke", "gr_1", "--rider-key", fakeKey}, "one of them"},
		{"revoke with neither", []string{"grants", "revoke"}, "one of them"},
		{"revoke another account's", []string{"grants", "revoke", "gr_9"}, "GRANT_NOT_FOUND"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := run(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v: %v, want an error with %q", c.args, err, c.want)
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		out, err := run("--json", "grants", "list", "--uid", "MNT-1")
		var doc struct {
			Grants []grantView `json:"grants"`
		}
		if err != nil || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Grants) != 1 || doc.Grants[0].RiderKey != fakeKey {
			t.Errorf("list --json: %v %s", err, out)
		}
	})
}

// TestGrantState: a grant's state at a time, from revokedAt and notAfter.
func TestGrantState(t *testing.T) {
	revoked := "2026-11-29T10:00:00Z"
	g := grantView{NotBefore: "2026-11-29T08:00:00Z", NotAfter: "2026-11-29T20:00:00Z"}
	for _, c := range []struct {
		name    string
		revoked *string
		at      string
		want    string
	}{
		{"before notBefore", nil, "2026-11-29T07:00:00Z", "ACTIVE"},
		{"within", nil, "2026-11-29T12:00:00Z", "ACTIVE"},
		{"at notAfter", nil, "2026-11-29T20:00:00Z", "EXPIRED"},
		{"revoked", &revoked, "2026-11-29T12:00:00Z", "REVOKED"},
		{"revoked, then past notAfter", &revoked, "2026-11-30T12:00:00Z", "REVOKED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g.RevokedAt = c.revoked
			at, _ := time.Parse(time.RFC3339, c.at)
			if got := g.state(at); got != c.want {
				t.Errorf("state at %s = %s, want %s", c.at, got, c.want)
			}
		})
	}
}

// TestGrantWindow: --ttl counts from now without --not-before.
func TestGrantWindow(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	got, err := grantWindow("", "", 90*time.Minute, now)
	if err != nil || !reflect.DeepEqual(got, map[string]any{"notAfter": "2026-11-29T09:30:00Z"}) {
		t.Errorf("grantWindow(ttl 90m) = %v, %v", got, err)
	}
	for _, bad := range []struct{ nb, na string }{{"tomorrow", "2026-11-29T20:00:00Z"}, {"", "tonight"}} {
		if _, err := grantWindow(bad.nb, bad.na, 0, now); err == nil {
			t.Errorf("grantWindow(%q, %q) accepted", bad.nb, bad.na)
		}
	}
	if _, err := grantWindow("", "", -time.Hour, now); err == nil {
		t.Error("a negative --ttl was accepted")
	}
}
