package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestHomePage: a browser at / gets a page naming the service and linking
// GraphiQL, the OpenAPI description and the first steps; an API client
// keeps the JSON 404.
func TestHomePage(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	req, err := http.NewRequest(http.MethodGet, in.base+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")
	res, raw := in.do(req)
	page := string(raw)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("browser at /: %d %s", res.StatusCode, res.Header.Get("Content-Type"))
	}
	for _, want := range []string{"mountd", `href="/graphiql"`, `href="/api/v1/openapi.json"`, "First steps", "/oauth/v2/token", "Access-Key"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	res, raw = in.call(http.MethodGet, "/", "", nil)
	wantProblem(t, res, raw, 404, "NOT_FOUND")
}
