package graph

import (
	"context"
	"fmt"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"github.com/vektah/gqlparser/v2/parser"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/generated"
	"github.com/mountd/mountd/graph/model"
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

// The cost model of the complexity limit. gqlgen's default counts every
// field as 1, so a list of 1,000 events costs what a scalar does, and a
// rider's token could ask for 20 pages of 1,000 events with 500 states each
// (hundreds of MB built for one request). Here a list costs its length
// times its selection: the page size asked for (or the default), or the
// most such a list holds. Scalar lists count one per item.
const (
	// eventReadCost is what reading one event costs whatever its
	// selection: the log reads each event's states whether they are
	// asked for or not.
	eventReadCost = core.MaxStatesPerReport
	// openListLength stands for lists nothing bounds by itself (the
	// mounts of a tag, of a token): they are short in practice, and the
	// answer's size limit covers the rest.
	openListLength = core.MaxPageSize
	// webhookFilterLength is the most mounts a webhook's filter names.
	webhookFilterLength = 100
	// suggestedRulesLength stands for the few starting rules offered.
	suggestedRulesLength = 10
	// maxCost saturates the products, so that nesting cannot overflow an
	// int into a small or negative cost.
	maxCost = 1 << 40
)

// filterComparisonCost is what one comparison of a fleet filter costs: 10
// for each mount of the largest page, since a filter reads the whole fleet
// of the account whatever the page asked for. 100 aliases of a filter of 50
// comparisons (the most its 100 nodes hold) cost 5,000,000, past the limit.
const filterComparisonCost = 10 * core.MaxPageSize

// filterCost is what a mounts filter's expression costs.
func filterCost(f *model.MountFilter) int {
	if f == nil || f.Expression == nil {
		return 0
	}
	// The text is bounded (the resolver refuses more), the count with it.
	text := *f.Expression
	if len(text) > core.MaxFilterLength {
		return maxCost
	}
	return core.FilterComparisons(text) * filterComparisonCost
}

func saturatingAdd(a, b int) int {
	if a > maxCost-b {
		return maxCost
	}
	return a + b
}

// listCost is the cost of a list of n items whose selection costs child.
func listCost(n, child int) int {
	n = max(n, 1)
	child = max(child, 1) // a scalar item
	if child > maxCost/n {
		return maxCost
	}
	return 1 + n*child
}

// pageLength is the page a paginated field answers: pageSize, or def when
// absent, within what the resolver accepts (it refuses the rest).
func pageLength(pageSize *int, def int) int {
	if pageSize == nil {
		return def
	}
	return min(max(*pageSize, 1), core.MaxPageSize)
}

// complexityRoot is the cost model, field by field. A paginated query field
// multiplies its whole selection (pagination included) by its page size.
func complexityRoot() generated.ComplexityRoot {
	var c generated.ComplexityRoot
	c.Query.Events = func(child int, _ *string, limit *int, _ []model.MountEventType, _ *string) int {
		n := core.DefaultEventPage
		if limit != nil {
			n = min(max(*limit, 1), core.MaxEventPage)
		}
		return listCost(n, child+eventReadCost)
	}
	c.Query.Audit = func(child int, _ *string, limit *int, _, _, _ *string) int {
		n := core.DefaultEventPage
		if limit != nil {
			n = min(max(*limit, 1), core.MaxEventPage)
		}
		return listCost(n, child)
	}
	c.Query.Mounts = func(child int, _ *int, pageSize *int, filter *model.MountFilter) int {
		return saturatingAdd(listCost(pageLength(pageSize, 20), child), filterCost(filter))
	}
	c.Query.MountStates = func(child int, _ string, _ *string, _, _ *model.DateTime, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.MountCommands = func(child int, _ string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.NfcTags = func(child int, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.FirmwareVersions = func(child int, _ *int, pageSize *int, _ *string) int {
		return listCost(pageLength(pageSize, 10), child)
	}
	c.Query.Webhooks = func(child int, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.WebhookDeliveries = func(child int, _ string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.AlarmRules = func(child int, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.Alarms = func(child int, _ *model.AlarmState, _ *model.AlarmSeverity, _, _ *string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.Jobs = func(child int, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.JobMounts = func(child int, _ string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.Grants = func(child int, _ string, _ *model.GrantState, _ *string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.Rollouts = func(child int, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.RolloutMounts = func(child int, _ string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Query.MountRollouts = func(child int, _ string, _ *int, pageSize *int) int {
		return listCost(pageLength(pageSize, 20), child)
	}
	c.Rollout.Phases = func(child int) int { return listCost(core.MaxRolloutPhases, child) }
	c.Query.SuggestedAlarmRules = func(child int) int { return listCost(suggestedRulesLength, child) }
	conditions := func(child int) int { return listCost(core.MaxAlarmConditions, child) }
	c.AlarmRule.Conditions = conditions
	c.SuggestedAlarmRule.Conditions = conditions
	c.AlarmRule.MountUids = func(child int) int { return listCost(core.MaxAlarmRuleMounts, child) }
	states := func(child int) int { return listCost(core.MaxStatesPerReport, child) }
	c.MountEvent.States = states
	c.MountStateEvent.States = states
	// A synchronisation sets a mount's whole set of tags.
	c.Mount.NfcTags = func(child int) int { return listCost(core.MaxTagsPerSync, child) }
	open := func(child int) int { return listCost(openListLength, child) }
	c.NfcTag.MountUids = open
	c.Me.MountUids = open
	c.Me.Scopes = open
	c.Webhook.MountUids = func(child int) int { return listCost(webhookFilterLength, child) }
	c.Webhook.EventTypes = func(child int) int { return listCost(len(core.EventTypes), child) }
	return c
}
