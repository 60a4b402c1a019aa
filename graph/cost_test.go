package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/complexity"
	"github.com/vektah/gqlparser/v2"

	"github.com/mountd/mountd/core"
)

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// knownQueries gathers what real clients send: every query in the
// console's sources, the documented examples (```graphql blocks and
// "query" bodies in the README and docs/), mountctl watch's subscription
// and GraphiQL's introspection query.
func knownQueries(t *testing.T) map[string]string {
	t.Helper()
	read := func(path string) string {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	queries := map[string]string{}

	// The console's modules, and the string constants their queries
	// interpolate (MOUNT_FIELDS and the like).
	sources, _ := filepath.Glob("../console/static/*.js")
	var console strings.Builder
	for _, path := range sources {
		console.WriteString(read(path))
	}
	app := console.String()
	constants := map[string]string{}
	for _, m := range regexp.MustCompile(`const ([A-Z_]+) = "([^"]+)"`).FindAllStringSubmatch(app, -1) {
		constants[m[1]] = m[2]
	}
	if constants["MOUNT_FIELDS"] == "" {
		t.Fatal("no MOUNT_FIELDS in the console's modules")
	}
	for i, m := range regexp.MustCompile("(?s)`([^`]*)`").FindAllStringSubmatch(app, -1) {
		q := strings.TrimSpace(m[1])
		if !regexp.MustCompile(`^(query|mutation|subscription)\b|^\{`).MatchString(q) {
			continue // a template for text, not an operation
		}
		for name, value := range constants {
			q = strings.ReplaceAll(q, "${"+name+"}", value)
		}
		if strings.Contains(q, "${") {
			t.Fatalf("console query %d interpolates something unknown: %s", i, q)
		}
		queries["console: "+q] = q
	}
	if len(queries) < 15 {
		t.Fatalf("found %d console queries; the extraction lost some", len(queries))
	}

	docs, _ := filepath.Glob("../docs/*.md")
	for _, path := range append(docs, "../README.md") {
		text := read(path)
		for _, m := range regexp.MustCompile("(?s)```graphql\n(.*?)```").FindAllStringSubmatch(text, -1) {
			queries[filepath.Base(path)+": "+m[1]] = m[1]
		}
		for _, m := range regexp.MustCompile(`'(\{"query":.*?\})'`).FindAllStringSubmatch(text, -1) {
			var body struct{ Query string }
			if err := json.Unmarshal([]byte(m[1]), &body); err != nil {
				t.Fatalf("%s: a documented body is not JSON: %s", path, m[1])
			}
			queries[filepath.Base(path)+": "+body.Query] = body.Query
		}
	}

	watch := regexp.MustCompile("(?s)const watchQuery = `([^`]*)`").FindStringSubmatch(read("../cmd/mountctl/watch.go"))
	if watch == nil {
		t.Fatal("no watchQuery in mountctl")
	}
	queries["mountctl watch"] = watch[1]
	queries["GraphiQL's introspection"] = read("testdata/introspection-query.graphql")
	return queries
}

// cost is what the complexity limit counts for query.
func cost(t *testing.T, query string) int {
	t.Helper()
	es := newExecutableSchema(&Resolver{})
	doc, errs := gqlparser.LoadQuery(es.Schema(), query)
	if errs != nil {
		t.Fatalf("%v: %s", errs, query)
	}
	return complexity.Calculate(context.Background(), es, doc.Operations[0], map[string]any{})
}

// TestCostModel: every query real clients send costs less than the limit,
// and so do the largest pages with their nested fields; many of those in
// one operation do not. Lists cost their length (the page size asked for,
// or the default, or the most a list can hold) times their selection.
func TestCostModel(t *testing.T) {
	limit := DefaultOptions.ComplexityLimit
	for name, q := range knownQueries(t) {
		if c := cost(t, q); c > limit {
			t.Errorf("costs %d, more than the limit of %d: %s", c, limit, name)
		}
	}

	const mount = `uid name serialNumber macAddress firmwareRevision softwareRevision modelNumber associationState
		mountLocked helmetMounted batteryLevel cpuTemperature associatedAt lastReportAt associationDeadline`
	const event = `id type uid occurredAt states { code value occurredAt receivedAt } mount { ` + mount + ` nfcTags { uid name } }`
	largest := `{ events(limit: 1000) { events { ` + event + ` } next } }`
	statesOnly := `events(limit: 1000) { events { states { code value occurredAt } } }`
	aliased := func(n int, field string) string {
		var b strings.Builder
		b.WriteString("{ ")
		for i := range n {
			b.WriteString("a")
			b.WriteString(strings.Repeat("x", i))
			b.WriteString(": ")
			b.WriteString(field)
			b.WriteString(" ")
		}
		return b.String() + "}"
	}
	// 50 comparisons in 99 nodes, under the filter's bound of 100.
	var terms []string
	for i := range 50 {
		field := "batteryLevel"
		if i%2 == 1 {
			field = "cpuTemperature"
		}
		terms = append(terms, fmt.Sprintf("NOT %s >= -%d", field, i+1))
	}
	fiftyComparisons := strings.Join(terms, " OR ")
	if n := core.FilterComparisons(fiftyComparisons); n != 50 {
		t.Fatalf("FilterComparisons counts %d", n)
	}
	for _, tc := range []struct {
		name  string
		query string
		pass  bool
	}{
		{"a page of 1,000 events with every field", largest, true},
		{"a page of 100 mounts with their tags", `{ mounts(pageSize: 100) { mounts { ` + mount + ` nfcTags { uid name color iconName mountUids createdAt updatedAt } } pagination { totalItems } } }`, true},
		{"100 mounts, 100 states, 100 commands, 100 tags, 100 webhooks", `{ mounts(pageSize: 100) { mounts { ` + mount + ` } }
			mountStates(uid: "M", pageSize: 100) { states { code value occurredAt receivedAt } }
			mountCommands(uid: "M", pageSize: 100) { commands { code data generatedAt payload signedToken issuedBy } }
			nfcTags(pageSize: 100) { tags { uid name color iconName mountUids createdAt updatedAt } }
			webhooks(pageSize: 100) { webhooks { id url eventTypes mountUids description enabled createdAt updatedAt } } }`, true},
		{"20 pages of 1,000 events' states", aliased(20, statesOnly), false},
		{"2 pages of 1,000 events with every field", aliased(2, `events(limit: 1000) { events { `+event+` } }`), false},
		{"200 pages of 1,000 events' cursors", aliased(200, `events(limit: 1000) { next }`), false},
		{"10 pages of 1,000 events' ids (the states are read whether asked or not)", aliased(10, `events(limit: 1000) { events { id } }`), false},
		{"20 pages of 100 mounts' tags", aliased(20, `mounts(pageSize: 100) { mounts { nfcTags { uid name mountUids } } }`), false},
		{"100 aliases of a page of one mount under a filter of 50 comparisons", aliased(100, `mounts(pageSize: 1, filter: {expression: `+strconvQuote(fiftyComparisons)+`}) { mounts { uid } }`), false},
		{"a page of mounts under a filter of 50 comparisons", `{ mounts(pageSize: 100, filter: {expression: ` + strconvQuote(fiftyComparisons) + `}) { mounts { ` + mount + ` } } }`, true},
		{"a page of 100 of a rollout's mounts with the rollout", `{ rollout(id: "R") { id modelNumber softwareRevision filter phases failureThreshold minSample healthWindow requireIdle state pausedReason openPhase targets
			counts { pending eligible installing healthy failed } createdAt endedAt }
			rolloutMounts(id: "R", pageSize: 100) { mounts { uid state phase commandId installingSince reason } pagination { currentPage totalPages totalItems } } }`, true},
		{"a page of 100 rollouts and 100 of a rollout's mounts", `{ rollouts(pageSize: 100) { rollouts { id phases counts { pending eligible installing healthy failed } } }
			rolloutMounts(id: "R", pageSize: 100) { mounts { uid state phase commandId installingSince reason } } }`, true},
	} {
		c := cost(t, tc.query)
		if (c <= limit) != tc.pass {
			t.Errorf("%s: costs %d against the limit of %d; want it to pass: %v", tc.name, c, limit, tc.pass)
		}
	}
	// A page size past the maximum is refused by the resolver; its cost
	// does not overflow into a pass.
	if c := cost(t, `{ a: events(limit: 2147483647) { events { mount { nfcTags { mountUids } } states { code } } } }`); c <= limit {
		t.Errorf("an enormous limit costs %d", c)
	}
}
