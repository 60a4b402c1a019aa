package main

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
)

// TestGraphQLDocumentLimits: what would make validation expensive is
// refused before it, with a code; the standard introspection query is
// answered (depth and complexity do not count introspection fields).
func TestGraphQLDocumentLimits(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	rider := in.token(a.creds, "openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud", "role:restricted", "mount:R1")

	introspection, err := os.ReadFile("../../graph/testdata/introspection-query.graphql")
	if err != nil {
		t.Fatal(err)
	}
	repeat := func(n int, field string) string { return "{ me { " + strings.Repeat(field+" ", n) + "} }" }
	spreads := "query { me { " + strings.Repeat("...F ", 200) + "} } fragment F on Me { " + strings.Repeat("name ", 200) + "}"

	for _, tc := range []struct {
		name     string
		token    string
		query    string
		wantCode string
	}{
		{"the standard introspection query", a.token, string(introspection), ""},
		{"a field repeated 500 times", a.token, repeat(500, "name"), ""},
		{"a field repeated 10,000 times", a.token, repeat(10_000, "name"), "QUERY_LIMIT_EXCEEDED"},
		{"a field repeated 10,000 times, rider's token", rider, repeat(10_000, "name"), "QUERY_LIMIT_EXCEEDED"},
		{"200 spreads of a 200-field fragment", a.token, spreads, "QUERY_LIMIT_EXCEEDED"},
		{"4,000 arguments", a.token, "{ me { name(" + strings.Repeat("a: 1 ", 4000) + ") } }", "QUERY_LIMIT_EXCEEDED"},
		{"more tokens than the parser allows", a.token, "{ me { name(a: [" + strings.Repeat("1,", 16_000) + "]) } }", "QUERY_LIMIT_EXCEEDED"},
		{"a query over 64 KiB", a.token, "{ me { name } }" + strings.Repeat(" ", 65<<10), "PAYLOAD_TOO_LARGE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := in.gql(t, tc.token, tc.query, nil)
			if r.code() != tc.wantCode {
				t.Fatalf("code %q, want %q: %+v", r.code(), tc.wantCode, r.Errors)
			}
			if tc.wantCode == "" && len(r.Data) < 10 {
				t.Fatalf("no data: %s", r.Data)
			}
		})
	}
	var schema struct {
		Schema struct {
			Types []struct{ Name string } `json:"types"`
		} `json:"__schema"`
	}
	r := a.gql(t, string(introspection), nil)
	if err := json.Unmarshal(r.Data, &schema); err != nil || len(schema.Schema.Types) < 20 {
		t.Fatalf("introspection answered %d types: %v", len(schema.Schema.Types), err)
	}
}

// TestGraphQLMalformedBodies: bodies that are not a GraphQL request are a
// 400 coded BAD_REQUEST, never INTERNAL.
func TestGraphQLMalformedBodies(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	for _, body := range []string{
		`not json {"variables":{"secret":"s3cr3t"}}`,
		`[{"query":"{ me { name } }","variables":{"secret":"s3cr3t"}}]`,
		`{"query": 5}`,
	} {
		req, err := http.NewRequest(http.MethodPost, in.base+"/graphql", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Access-Key", a.token)
		res, raw := in.do(req)
		r := decode[gqlResponse](t, raw)
		if res.StatusCode != http.StatusBadRequest || r.code() != "BAD_REQUEST" || strings.Contains(string(raw), "s3cr3t") {
			t.Fatalf("%s: %d %s", body, res.StatusCode, raw)
		}
	}
}
