package graph

import (
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// depthLimiter refuses operations nested deeper than its limit, before any
// resolver runs.
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
