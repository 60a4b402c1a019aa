package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/graph"
	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// TestGraphQLDocumentLimits: what would make validation expensive is
// refused before it, with a code; the standard introspection query is
// answered (depth and complexity do not count introspection fields).
func TestGraphQLDocumentLimits(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	rider := in.token(a.creds, "openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud", "role:restricted", "mount:R1")

	introspection, err := os.ReadFile("../graph/testdata/introspection-query.graphql")
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

// TestGraphQLCostLimit: with a rider's token, 20 pages of 1,000 events
// with their states in one operation are refused before anything is read,
// with COMPLEXITY_LIMIT_EXCEEDED; one such page is answered whole.
func TestGraphQLCostLimit(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			a.associate(t, "R1", nil)
			a.confirm(t, "R1")
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:R1")
			const reports, perReport = 6, 500
			base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
			for r := range reports {
				states := make([]map[string]any, perReport)
				for i := range states {
					states[i] = entry("BATTERY_LEVEL", strconv.Itoa(i%101), base.Add(time.Duration(r*perReport+i)*time.Millisecond))
				}
				if got := a.report(t, "R1", states...); got["accepted"] != perReport {
					t.Fatalf("report %d: %v", r, got)
				}
			}

			page := `events(limit: 1000) { events { id type uid occurredAt states { code value occurredAt } mount { uid batteryLevel } } next }`
			var aliased strings.Builder
			aliased.WriteString("{ ")
			for i := range 20 {
				fmt.Fprintf(&aliased, "p%d: %s ", i, page)
			}
			aliased.WriteString("}")
			r := in.gql(t, rider, aliased.String(), nil)
			if r.code() != "COMPLEXITY_LIMIT_EXCEEDED" || len(r.Data) > 0 && string(r.Data) != "null" {
				t.Fatalf("20 pages: %.500s %+v", r.Data, r.Errors)
			}
			if !strings.Contains(r.Errors[0].Message, "exceeds the limit of 3000000") {
				t.Fatalf("the refusal does not name the limit: %s", r.Errors[0].Message)
			}

			// The feed serves settled events: on PostgreSQL the last
			// report's may wait for other tests' transactions to end.
			var n, events int
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				r = in.gql(t, rider, "{ "+page+" }", nil)
				if len(r.Errors) > 0 {
					t.Fatalf("one page: %+v", r.Errors)
				}
				var got struct {
					Events struct {
						Events []struct {
							Type   string
							States []struct{ Code, Value string }
						}
					}
				}
				if err := json.Unmarshal(r.Data, &got); err != nil {
					t.Fatal(err)
				}
				n, events = 0, len(got.Events.Events)
				for _, e := range got.Events.Events {
					n += len(e.States)
				}
				if n >= reports*perReport || time.Now().After(deadline) {
					break
				}
			}
			if n != reports*perReport {
				t.Fatalf("one page holds %d states in %d events, want %d", n, events, reports*perReport)
			}
		})
	}
}

// TestWebSocketLimits: one token holds at most graph.MaxSocketsPerToken
// sockets (the next closes with 4429, a closed one frees its place), and
// shutting the server down closes subscribers with 1001 and no complete,
// so that they reconnect.
func TestWebSocketLimits(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")

	var sockets []*wsprototest.Client
	for range graph.MaxSocketsPerToken {
		sockets = append(sockets, in.wsReady(t, a.token))
	}
	extra := in.dialWS(t, wsprototest.Options{})
	extra.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"Access-Key": a.token}})
	extra.ExpectClose(5*time.Second, wsproto.CloseTooManyInitRequests, "")
	// Another token is not affected, and a closed socket frees a place.
	other := in.wsReady(t, b.token)
	sockets[0].Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c := in.dialWS(t, wsprototest.Options{})
		c.Send(map[string]any{"type": "connection_init", "payload": map[string]any{"Access-Key": a.token}})
		m, err := c.ExpectRaw(2 * time.Second)
		if err == nil && m.Type == "connection_ack" {
			sockets[0] = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no place freed by a closed socket: %v %v", m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	uid := uniqueUID("WSL")
	a.associate(t, uid, nil)
	a.confirm(t, uid)
	other.Subscribe("s", `subscription { mountEvents { type uid } }`, nil)
	sockets[1].Subscribe("s", stateSubscription, map[string]any{"uid": uid})
	prime(t, a, uid, sub{sockets[1], "s", "mountStateChanged"})

	in.stop()
	for _, c := range []*wsprototest.Client{sockets[1], other} {
		for _, m := range c.ExpectClose(10*time.Second, 1001, "") {
			if m.Type == "complete" {
				t.Fatalf("complete sent at shutdown: %s", m)
			}
		}
	}
}
