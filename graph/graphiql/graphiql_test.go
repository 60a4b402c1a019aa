package graphiql

import (
	"crypto/sha256"
	"encoding/base64"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestAssets: every vendored file matches the hash the page's integrity
// attribute carries, its licence is beside it, and the page loads nothing
// from another origin.
func TestAssets(t *testing.T) {
	h := Handler()
	get := func(path string) (*http.Response, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		body, _ := io.ReadAll(rec.Result().Body)
		return rec.Result(), string(body)
	}
	res, page := get("/graphiql")
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(res.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("page: %d %v", res.StatusCode, res.Header)
	}
	// What the page loads (scripts, styles, icon), not where its links lead.
	refs := regexp.MustCompile(`(?:<script[^>]*\ssrc|<link[^>]*\shref)="([^"]+)"(?: integrity="([^"]*)")?`).FindAllStringSubmatch(page, -1)
	if len(refs) < 5 {
		t.Fatalf("the page references %d files", len(refs))
	}
	for _, ref := range refs {
		path, integrity := ref[1], html.UnescapeString(ref[2])
		if path == "data:," {
			continue
		}
		if !strings.HasPrefix(path, "/graphiql/assets/") {
			t.Errorf("the page loads %s from outside its assets", path)
			continue
		}
		res, body := get(path)
		if res.StatusCode != 200 || len(body) == 0 {
			t.Errorf("%s: %d", path, res.StatusCode)
			continue
		}
		if path == "/graphiql/assets/mountd-graphiql.js" {
			continue // ours, not vendored
		}
		sum := sha256.Sum256([]byte(body))
		if want := "sha256-" + base64.StdEncoding.EncodeToString(sum[:]); integrity != want {
			t.Errorf("%s: integrity %q, file hashes to %q", path, integrity, want)
		}
	}
	_, versions := get("/graphiql/assets/VERSIONS")
	for _, pkg := range strings.Fields(versions) {
		name := pkg[:strings.LastIndex(pkg, "@")]
		if res, licence := get("/graphiql/assets/LICENSE-" + name); res.StatusCode != 200 || !strings.Contains(licence, "MIT") {
			t.Errorf("no licence beside %s", pkg)
		}
	}
	if res, _ := get("/graphiql/assets/"); res.StatusCode != 404 {
		t.Errorf("the assets folder is listed: %d", res.StatusCode)
	}
}
