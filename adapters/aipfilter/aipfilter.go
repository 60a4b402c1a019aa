// Package aipfilter parses fleet filters (docs/api.md, "Fleet filter") with
// go.einride.tech/aip's AIP-160 parser and type checker, and hands core its
// own expression tree: the library's protobuf types stay in this package.
package aipfilter

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"go.einride.tech/aip/filtering"
	expr "google.golang.org/genproto/googleapis/api/expr/v1alpha1"

	"github.com/mountd/mountd/core"
)

// Parser is core.FilterParser over the AIP-160 library.
type Parser struct {
	declarations *filtering.Declarations
}

var _ core.FilterParser = (*Parser)(nil)

// enumerations lists the values a string field may be compared with, when
// it has a closed set: anything else is a typo that would select nothing.
// INACTIVE is never listed, so it is no value to filter on.
var enumerations = map[core.FilterField][]string{
	core.FilterAssociationState: {string(core.StateIdle), string(core.StateAssociated)},
	core.FilterPresence:         {string(core.PresenceOnline), string(core.PresenceOffline), string(core.PresenceUnknown)},
}

// New returns a Parser.
func New() *Parser {
	opts := []filtering.DeclarationOption{filtering.DeclareStandardFunctions()}
	for field, kind := range core.FilterFields {
		opts = append(opts, filtering.DeclareIdent(string(field), libraryType(kind)))
	}
	// AIP-160 has no boolean literals: true and false parse as names.
	opts = append(opts, filtering.DeclareIdent("true", filtering.TypeBool), filtering.DeclareIdent("false", filtering.TypeBool))
	declarations, err := filtering.NewDeclarations(opts...)
	if err != nil {
		// The declarations are constants of this package.
		panic(fmt.Sprintf("aipfilter: declarations: %v", err))
	}
	return &Parser{declarations: declarations}
}

// libraryType is the checker's type for a kind of field. Numbers are
// floats, which the checker compares with integer and decimal literals
// alike; timestamps compare with RFC 3339 string literals.
func libraryType(kind core.FilterKind) *expr.Type {
	switch kind {
	case core.FilterNumber:
		return filtering.TypeFloat
	case core.FilterBool:
		return filtering.TypeBool
	case core.FilterTime:
		return filtering.TypeTimestamp
	}
	return filtering.TypeString
}

// ParseFilter implements core.FilterParser.
func (p *Parser) ParseFilter(text string) (*core.FilterExpr, error) {
	if len(text) > core.MaxFilterLength {
		return nil, invalid("must be at most %d characters", core.MaxFilterLength)
	}
	// The library trims the text and counts positions in what is left.
	trimmed := strings.TrimSpace(text)
	if trimmed == "" {
		return nil, invalid("must not be blank")
	}
	var parser filtering.Parser
	parser.Init(trimmed)
	parsed, err := parser.Parse()
	if err != nil {
		return nil, syntaxError(err)
	}
	w := walker{text: trimmed, positions: parsed.GetSourceInfo().GetPositions()}
	out, err := w.walk(parsed.GetExpr(), 0)
	if err != nil {
		return nil, err
	}
	if n := out.Nodes(); n > core.MaxFilterNodes {
		return nil, invalid("has %d terms; at most %d are allowed", n, core.MaxFilterNodes)
	}
	// The walk has checked every type already; the library's checker is a
	// second opinion that must agree.
	var checker filtering.Checker
	checker.Init(parsed.GetExpr(), parsed.GetSourceInfo(), p.declarations)
	if _, err := checker.Check(); err != nil {
		return nil, invalid("%v", err)
	}
	return out, nil
}

func invalid(format string, args ...any) error {
	var v core.Validation
	v.Add("filter", format, args...)
	return v.Err()
}

// positioned is the library's parse and lex errors: the innermost says
// most precisely what is wrong.
type positioned interface {
	Position() filtering.Position
	Message() string
}

func syntaxError(err error) error {
	var innermost positioned
	for e := err; e != nil; e = errors.Unwrap(e) {
		if p, ok := e.(positioned); ok {
			innermost = p
		}
	}
	if innermost == nil {
		return invalid("is not a valid filter: %v", err)
	}
	pos := innermost.Position()
	return invalid("is not a valid filter: %s at line %d, column %d", innermost.Message(), pos.Line, pos.Column)
}

// maxDepth bounds the walk's recursion before the node count does: a
// filter of MaxFilterLength characters nests at most that deep anyway.
const maxDepth = core.MaxFilterNodes

type walker struct {
	text      string
	positions map[int64]int32
}

// at says where e starts, as a human counts.
func (w walker) at(e *expr.Expr) string {
	offset, ok := w.positions[e.GetId()]
	if !ok || offset < 0 || int(offset) > len(w.text) {
		return ""
	}
	before := w.text[:offset]
	line := strings.Count(before, "\n") + 1
	column := int(offset) - strings.LastIndexByte(before, '\n')
	return fmt.Sprintf(" at line %d, column %d", line, column)
}

func (w walker) fail(e *expr.Expr, format string, args ...any) error {
	return invalid(format+"%s", append(args, w.at(e))...)
}

var comparisons = map[string]core.FilterOp{
	filtering.FunctionEquals: core.FilterEq, filtering.FunctionNotEquals: core.FilterNe,
	filtering.FunctionLessThan: core.FilterLt, filtering.FunctionLessEquals: core.FilterLe,
	filtering.FunctionGreaterThan: core.FilterGt, filtering.FunctionGreaterEquals: core.FilterGe,
}

func (w walker) walk(e *expr.Expr, depth int) (*core.FilterExpr, error) {
	if depth > maxDepth {
		return nil, w.fail(e, "nests deeper than %d levels", maxDepth)
	}
	call := e.GetCallExpr()
	if call == nil {
		switch {
		case e.GetIdentExpr() != nil || e.GetSelectExpr() != nil:
			return nil, w.fail(e, "%s alone is not a condition: compare a field with a value, as in batteryLevel < 20", w.name(e))
		default:
			return nil, w.fail(e, "a bare value is not a condition: compare a field with a value, as in name = \"Garage\"")
		}
	}
	if call.GetTarget() != nil {
		return nil, w.fail(e, "functions are not supported")
	}
	switch fn := call.GetFunction(); fn {
	case filtering.FunctionAnd, filtering.FunctionOr:
		op := core.FilterAnd
		if fn == filtering.FunctionOr {
			op = core.FilterOr
		}
		out := &core.FilterExpr{Op: op}
		for _, a := range call.GetArgs() {
			sub, err := w.walk(a, depth+1)
			if err != nil {
				return nil, err
			}
			// a AND b AND c parses as (a AND b) AND c: one node of three.
			if sub.Op == op {
				out.Args = append(out.Args, sub.Args...)
			} else {
				out.Args = append(out.Args, sub)
			}
		}
		return out, nil
	case filtering.FunctionNot:
		if len(call.GetArgs()) != 1 {
			return nil, w.fail(e, "NOT takes one condition")
		}
		sub, err := w.walk(call.GetArgs()[0], depth+1)
		if err != nil {
			return nil, err
		}
		return &core.FilterExpr{Op: core.FilterNot, Args: []*core.FilterExpr{sub}}, nil
	case filtering.FunctionFuzzyAnd:
		return nil, w.fail(e, "conditions must be joined with AND or OR")
	case filtering.FunctionHas:
		return nil, w.fail(e, "the has operator ':' is not supported: use = or !=")
	default:
		op, ok := comparisons[fn]
		if !ok {
			return nil, w.fail(e, "function %q is not supported", fn)
		}
		return w.comparison(e, op)
	}
}

// name is a field's name as written, for messages.
func (w walker) name(e *expr.Expr) string {
	var parts []string
	for e.GetSelectExpr() != nil {
		parts = append(parts, e.GetSelectExpr().GetField())
		e = e.GetSelectExpr().GetOperand()
	}
	if e.GetIdentExpr() == nil {
		return "a value"
	}
	parts = append(parts, e.GetIdentExpr().GetName())
	slices.Reverse(parts)
	return strings.Join(parts, ".")
}

func (w walker) comparison(e *expr.Expr, op core.FilterOp) (*core.FilterExpr, error) {
	args := e.GetCallExpr().GetArgs()
	if len(args) != 2 {
		return nil, w.fail(e, "%s compares a field with a value", op)
	}
	left, right := args[0], args[1]
	if left.GetCallExpr() != nil {
		return nil, w.fail(left, "functions are not supported")
	}
	if left.GetIdentExpr() == nil && left.GetSelectExpr() == nil {
		return nil, w.fail(left, "a comparison starts with a field name, as in batteryLevel < 20")
	}
	field := core.FilterField(w.name(left))
	kind, ok := core.FilterFields[field]
	if !ok {
		return nil, w.fail(left, "unknown field %q (fields: %s)", field, fieldNames())
	}
	value := right.GetConstExpr()
	if name := right.GetIdentExpr().GetName(); kind == core.FilterBool && (name == "true" || name == "false") {
		value = &expr.Constant{ConstantKind: &expr.Constant_BoolValue{BoolValue: name == "true"}}
	}
	if value == nil {
		if right.GetIdentExpr() != nil || right.GetSelectExpr() != nil {
			return nil, w.fail(right, "%s must be compared with a literal value, not with %s (quote text values)", field, w.name(right))
		}
		return nil, w.fail(right, "%s must be compared with a literal value, not a function or expression", field)
	}
	out := &core.FilterExpr{Op: op, Field: field}
	switch kind {
	case core.FilterNumber:
		switch v := value.GetConstantKind().(type) {
		case *expr.Constant_Int64Value:
			out.Number = float64(v.Int64Value)
		case *expr.Constant_DoubleValue:
			out.Number = v.DoubleValue
		default:
			return nil, w.fail(right, "%s is a number: compare it with a number, as in %s < 20", field, field)
		}
		if math.IsNaN(out.Number) || math.IsInf(out.Number, 0) {
			return nil, w.fail(right, "%s must be compared with a finite number", field)
		}
	case core.FilterBool:
		v, ok := value.GetConstantKind().(*expr.Constant_BoolValue)
		if !ok {
			return nil, w.fail(right, "%s is true or false: compare it with true or false", field)
		}
		if op != core.FilterEq && op != core.FilterNe {
			return nil, w.fail(e, "%s is true or false: only = and != apply", field)
		}
		out.Bool = v.BoolValue
	case core.FilterTime:
		v, ok := value.GetConstantKind().(*expr.Constant_StringValue)
		if !ok {
			return nil, w.fail(right, "%s is a timestamp: compare it with an RFC 3339 string, as in %s < \"2026-11-26T10:00:00Z\"", field, field)
		}
		t, err := time.Parse(time.RFC3339, v.StringValue)
		if err != nil {
			return nil, w.fail(right, "%s must be compared with an RFC 3339 timestamp such as \"2026-11-26T10:00:00Z\", not %q", field, v.StringValue)
		}
		out.Time = t.UTC()
	default:
		v, ok := value.GetConstantKind().(*expr.Constant_StringValue)
		if !ok {
			return nil, w.fail(right, "%s is text: compare it with a quoted string", field)
		}
		if strings.Contains(v.StringValue, "*") {
			return nil, w.fail(right, "wildcards (*) are not supported")
		}
		if values, closed := enumerations[field]; closed {
			if !slices.Contains(values, v.StringValue) {
				return nil, w.fail(right, "%s is one of %s, not %q", field, strings.Join(values, ", "), v.StringValue)
			}
			if op != core.FilterEq && op != core.FilterNe {
				return nil, w.fail(e, "%s is one of %s: only = and != apply", field, strings.Join(values, ", "))
			}
		}
		out.String = v.StringValue
	}
	return out, nil
}

func fieldNames() string {
	names := make([]string, 0, len(core.FilterFields))
	for f := range core.FilterFields {
		names = append(names, string(f))
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
