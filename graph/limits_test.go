package graph

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/generated"
)

// TestRequestErrorsAreBounded: a body gqlgen cannot decode is BAD_REQUEST,
// and neither the answer nor the log quotes the body (a secret in the
// variables would land in both).
func TestRequestErrorsAreBounded(t *testing.T) {
	var logged bytes.Buffer
	present := errorPresenter(slog.New(slog.NewTextHandler(&logged, nil)))
	for _, tc := range []struct{ name, message string }{
		{"not JSON", `json request body could not be decoded: invalid character 'x' looking for beginning of value body:x{"variables":{"secret":"s3cr3t"}}`},
		{"a JSON array", `json request body could not be decoded: json: cannot unmarshal array into Go value of type graphql.RawParams body:[{"query":"{me{name}}","variables":{"secret":"s3cr3t"}}]`},
		{"a long reason", strings.Repeat("x", 5000) + "s3cr3t"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logged.Reset()
			got := present(context.Background(), gqlerror.Errorf("%s", tc.message))
			if got.Extensions["code"] != "BAD_REQUEST" || strings.Contains(got.Message, "s3cr3t") || len(got.Message) > 210 {
				t.Fatalf("presented %q %v", got.Message, got.Extensions)
			}
			if strings.Contains(logged.String(), "s3cr3t") || strings.Contains(logged.String(), "level=ERROR") || logged.Len() > 400 {
				t.Fatalf("logged %q", logged.String())
			}
		})
	}
}

// TestSelectionDepth: fields count, fragments do not add a level, and
// introspection fields count toward nothing.
func TestSelectionDepth(t *testing.T) {
	for _, tc := range []struct {
		query string
		want  int
	}{
		{`{ me { name } }`, 2},
		{`{ a { b { c { d { e { f { g { h { i { j { k { l } } } } } } } } } } } }`, 12},
		{`{ a { ... on A { b { ...F } } } } fragment F on B { c { d } }`, 4},
		{`{ __schema { types { fields { type { ofType { ofType { ofType { ofType { ofType { ofType { name } } } } } } } } } } }`, 0},
		{`{ me { name __typename } __type(name: "Me") { fields { name } } }`, 2},
	} {
		doc, err := parser.ParseQuery(&ast.Source{Input: tc.query})
		if err != nil {
			t.Fatal(err)
		}
		// Resolve fragment spreads as validation would.
		for _, op := range doc.Operations {
			linkFragments(op.SelectionSet, doc)
		}
		if got := selectionDepth(doc.Operations[0].SelectionSet, map[string]bool{}); got != tc.want {
			t.Errorf("depth of %s = %d, want %d", tc.query, got, tc.want)
		}
	}
}

func linkFragments(set ast.SelectionSet, doc *ast.QueryDocument) {
	for _, sel := range set {
		switch s := sel.(type) {
		case *ast.Field:
			linkFragments(s.SelectionSet, doc)
		case *ast.InlineFragment:
			linkFragments(s.SelectionSet, doc)
		case *ast.FragmentSpread:
			s.Definition = doc.Fragments.ForName(s.Name)
			if s.Definition != nil {
				linkFragments(s.Definition.SelectionSet, doc)
			}
		}
	}
}

// TestCommandParamsInputMatchesCore: the GraphQL input for command
// parameters names exactly the parameters a query may carry: every one
// core knows but INSTALL_FIRMWARE's sha256 and size. A query for it names
// the revision only, as GET /mounts/{uid}/query does; the server signs the
// image's hash and size from the catalogue, so that no caller can have an
// image signed that was never published.
func TestCommandParamsInputMatchesCore(t *testing.T) {
	def := generated.NewExecutableSchema(generated.Config{}).Schema().Types["CommandParamsInput"]
	if def == nil {
		t.Fatal("no CommandParamsInput in the schema")
	}
	var got []string
	for _, f := range def.Fields {
		got = append(got, f.Name)
	}
	fromCatalogue := []string{"sha256", "size"}
	var want []string
	for _, name := range core.CommandParamNames {
		if !slices.Contains(fromCatalogue, name) {
			want = append(want, name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("CommandParamsInput has %v, core knows %v", got, want)
	}
}
