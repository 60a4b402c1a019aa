package graph

import (
	"context"
	"fmt"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"
)

// depthLimiter refuses operations nested deeper than its limit, before any
// resolver runs. Introspection fields do not count (docs/api.md): the
// standard introspection query nests its type references ten levels deep.
type depthLimiter struct{ limit int }

func depthLimit(limit int) graphql.HandlerExtension { return depthLimiter{limit: limit} }

func (d depthLimiter) ExtensionName() string { return "DepthLimit" }

func (d depthLimiter) Validate(graphql.ExecutableSchema) error { return nil }

func (d depthLimiter) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	if depth := selectionDepth(oc.Operation.SelectionSet, map[string]bool{}); depth > d.limit {
		err := gqlerror.Errorf("operation is nested %d levels deep, more than the limit of %d", depth, d.limit)
		err.Extensions = map[string]any{"code": "DEPTH_LIMIT_EXCEEDED"}
		return err
	}
	return nil
}

func selectionDepth(set ast.SelectionSet, seenFragments map[string]bool) int {
	max := 0
	for _, sel := range set {
		var d int
		switch s := sel.(type) {
		case *ast.Field:
			if strings.HasPrefix(s.Name, "__") {
				continue // __schema, __type, __typename
			}
			if len(s.SelectionSet) > 0 {
				d = 1 + selectionDepth(s.SelectionSet, seenFragments)
			} else {
				d = 1
			}
		case *ast.InlineFragment:
			d = selectionDepth(s.SelectionSet, seenFragments)
		case *ast.FragmentSpread:
			if s.Definition == nil || seenFragments[s.Name] {
				continue
			}
			seenFragments[s.Name] = true
			d = selectionDepth(s.Definition.SelectionSet, seenFragments)
			delete(seenFragments, s.Name)
		default:
			panic(fmt.Sprintf("unknown selection %T", sel))
		}
		if d > max {
			max = d
		}
	}
	return max
}

var _ graphql.OperationContextMutator = depthLimiter{}

// Limits on an operation's text, checked before gqlgen validates it: some
// validation rules (overlapping fields) are quadratic in the number of
// selections, so a 50 KB query of one field repeated would cost seconds of
// CPU to any token holder, a rider's included.
const (
	// MaxQueryBytes bounds the query text.
	MaxQueryBytes = 64 << 10
	// MaxQueryTokens is the parser's token limit.
	MaxQueryTokens = 15_000
	// MaxSelections bounds the selections and arguments of an operation,
	// fragment spreads expanded (the standard introspection query has 230):
	// validation costs, and its error list grows, with both.
	MaxSelections = 1_500
)

// documentLimiter enforces the limits above before the query is parsed by
// gqlgen, so that nothing they forbid reaches validation. A query in
// gqlgen's cache of parsed and validated documents passed them already
// (nothing they refuse gets there) and is not parsed again.
type documentLimiter struct {
	parsed graphql.Cache[*ast.QueryDocument]
}

func (documentLimiter) ExtensionName() string                   { return "DocumentLimits" }
func (documentLimiter) Validate(graphql.ExecutableSchema) error { return nil }

func (l documentLimiter) MutateOperationParameters(ctx context.Context, params *graphql.RawParams) *gqlerror.Error {
	if l.parsed != nil {
		if _, ok := l.parsed.Get(ctx, params.Query); ok {
			return nil
		}
	}
	if len(params.Query) > MaxQueryBytes {
		return limitError("PAYLOAD_TOO_LARGE", "the query is %d bytes, more than the limit of %d", len(params.Query), MaxQueryBytes)
	}
	doc, err := parser.ParseQueryWithTokenLimit(&ast.Source{Input: params.Query}, MaxQueryTokens)
	if err != nil {
		if strings.Contains(err.Error(), "exceeded token limit") {
			return limitError("QUERY_LIMIT_EXCEEDED", "the query has more than %d tokens", MaxQueryTokens)
		}
		return nil // gqlgen reports the syntax error itself
	}
	fragments := make(map[string]*ast.FragmentDefinition, len(doc.Fragments))
	for _, f := range doc.Fragments {
		fragments[f.Name] = f
	}
	for _, op := range doc.Operations {
		budget := MaxSelections
		if !countSelections(op.SelectionSet, fragments, map[string]bool{}, &budget) {
			return limitError("QUERY_LIMIT_EXCEEDED", "the operation has more than %d selections and arguments (fragments expanded)", MaxSelections)
		}
	}
	return nil
}

// countSelections spends budget on every selection, expanding fragment
// spreads, and reports false as soon as it runs out, so its own cost is
// bounded by the budget.
func countSelections(set ast.SelectionSet, fragments map[string]*ast.FragmentDefinition, visiting map[string]bool, budget *int) bool {
	for _, sel := range set {
		*budget--
		if *budget < 0 {
			return false
		}
		switch s := sel.(type) {
		case *ast.Field:
			*budget -= len(s.Arguments) + len(s.Directives)
			if *budget < 0 || !countSelections(s.SelectionSet, fragments, visiting, budget) {
				return false
			}
		case *ast.InlineFragment:
			if !countSelections(s.SelectionSet, fragments, visiting, budget) {
				return false
			}
		case *ast.FragmentSpread:
			f := fragments[s.Name]
			if f == nil || visiting[s.Name] {
				continue // validation reports unknown and cyclic fragments
			}
			visiting[s.Name] = true
			ok := countSelections(f.SelectionSet, fragments, visiting, budget)
			delete(visiting, s.Name)
			if !ok {
				return false
			}
		}
	}
	return true
}

func limitError(code, format string, args ...any) *gqlerror.Error {
	err := gqlerror.Errorf(format, args...)
	err.Extensions = map[string]any{"code": code}
	return err
}

var _ graphql.OperationParameterMutator = documentLimiter{}
