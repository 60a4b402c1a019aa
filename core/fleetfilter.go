package core

import (
	"cmp"
	"strconv"
	"strings"
	"time"
)

// The fleet filter (docs/api.md, "Fleet filter"): an AIP-160 expression
// over a mount's fields and latest values. An adapter parses and
// type-checks the text (FilterParser) and hands core this small tree of its
// own; each store translates the tree (SQL with parameters for the
// database, an evaluator in memory). A filter is attacker-controlled input:
// it never reaches a store as text.

// FilterField names what a comparison looks at: the REST Mount's field
// names plus presence and lastSeenAt.
type FilterField string

// The filter fields.
const (
	FilterUID              FilterField = "uid"
	FilterName             FilterField = "name"
	FilterModelNumber      FilterField = "modelNumber"
	FilterFirmwareRevision FilterField = "firmwareRevision"
	FilterSoftwareRevision FilterField = "softwareRevision"
	FilterAssociationState FilterField = "associationState"
	FilterPresence         FilterField = "presence"
	FilterLastSeenAt       FilterField = "lastSeenAt"
	FilterBatteryLevel     FilterField = "batteryLevel"
	FilterCPUTemperature   FilterField = "cpuTemperature"
	FilterMountLocked      FilterField = "mountLocked"
	FilterHelmetMounted    FilterField = "helmetMounted"
)

// FilterKind is the type of a field's values.
type FilterKind int

// The kinds of filter values.
const (
	// FilterString: text fields and enumerations (associationState,
	// presence), compared by bytes.
	FilterString FilterKind = iota
	// FilterNumber: batteryLevel, cpuTemperature (the value as reported).
	FilterNumber
	// FilterBool: mountLocked, helmetMounted.
	FilterBool
	// FilterTime: lastSeenAt.
	FilterTime
)

// FilterFields lists every field with the kind of its values.
var FilterFields = map[FilterField]FilterKind{
	FilterUID: FilterString, FilterName: FilterString, FilterModelNumber: FilterString,
	FilterFirmwareRevision: FilterString, FilterSoftwareRevision: FilterString,
	FilterAssociationState: FilterString, FilterPresence: FilterString,
	FilterLastSeenAt: FilterTime, FilterBatteryLevel: FilterNumber, FilterCPUTemperature: FilterNumber,
	FilterMountLocked: FilterBool, FilterHelmetMounted: FilterBool,
}

// FilterStateCodes maps the fields read from a mount's latest values to
// their state codes.
var FilterStateCodes = map[FilterField]StateCode{
	FilterBatteryLevel: StateBatteryLevel, FilterCPUTemperature: StateCPUTemperature,
	FilterMountLocked: StateMountLocked, FilterHelmetMounted: StateHelmetMounted,
}

// FilterOp is a node's operation.
type FilterOp string

// The operations: three that combine nodes, six that compare a field with
// a value.
const (
	FilterAnd FilterOp = "AND"
	FilterOr  FilterOp = "OR"
	FilterNot FilterOp = "NOT"
	FilterEq  FilterOp = "="
	FilterNe  FilterOp = "!="
	FilterLt  FilterOp = "<"
	FilterLe  FilterOp = "<="
	FilterGt  FilterOp = ">"
	FilterGe  FilterOp = ">="
)

// FilterExpr is one node of a parsed filter. AND and OR have two or more
// Args, NOT one; a comparison has Field and the value of the field's kind
// (String, Number, Bool or Time). A mount with no value for a field (no
// latest entry of its code, lastSeenAt never set) matches no comparison
// on it; NOT of such a comparison matches.
type FilterExpr struct {
	Op     FilterOp
	Args   []*FilterExpr
	Field  FilterField
	String string
	Number float64
	Bool   bool
	Time   time.Time
}

// MaxFilterLength bounds a filter's text, and MaxFilterNodes the nodes of
// its tree: a filter becomes one SQL statement with a parameter per
// comparison.
const (
	MaxFilterLength = 2000
	MaxFilterNodes  = 100
)

// FilterParser parses and type-checks a filter's text. A malformed filter,
// an unknown field, a value of the wrong type, or one past MaxFilterLength
// or MaxFilterNodes is VALIDATION_FAILED on the field "filter", with a
// message that says what is wrong and where.
type FilterParser interface {
	ParseFilter(text string) (*FilterExpr, error)
}

// ParseMountFilter parses f.Expression into f.Expr, with the offline cut
// of now, so that presence in a filter flips at the instant the fleet shows
// it flip. An empty expression leaves f as it is; without a parser any
// expression is refused rather than ignored (an ignored filter selects more
// than was asked for).
func ParseMountFilter(parser FilterParser, f *MountFilter, offlineAfter time.Duration, now time.Time) error {
	if f.Expression == "" {
		return nil
	}
	if parser == nil {
		var v Validation
		v.Add("filter", "fleet filters are not available on this server")
		return v.Err()
	}
	expr, err := parser.ParseFilter(f.Expression)
	if err != nil {
		return err
	}
	f.Expr, f.OfflineCut = expr, now.Add(-offlineAfter)
	return nil
}

// Matches reports whether m, whose latest values by code are latest (the
// stored canonical text), passes e. offlineCut is the lastSeenAt at or
// before which m is OFFLINE (core.PresenceAt's rule). The memory store
// filters with it, and the SQL stores' tests check their translation
// against it.
func (e *FilterExpr) Matches(m Mount, latest map[StateCode]string, offlineCut time.Time) bool {
	switch e.Op {
	case FilterAnd:
		for _, a := range e.Args {
			if !a.Matches(m, latest, offlineCut) {
				return false
			}
		}
		return true
	case FilterOr:
		for _, a := range e.Args {
			if a.Matches(m, latest, offlineCut) {
				return true
			}
		}
		return false
	case FilterNot:
		return len(e.Args) == 1 && !e.Args[0].Matches(m, latest, offlineCut)
	}
	c, ok := e.compareWith(m, latest, offlineCut)
	return ok && e.Op.holds(c)
}

// compareWith compares m's value of e.Field with e's value (-1, 0, 1); ok
// is false when m has no value for the field, which matches no comparison.
func (e *FilterExpr) compareWith(m Mount, latest map[StateCode]string, offlineCut time.Time) (int, bool) {
	switch e.Field {
	case FilterUID:
		return strings.Compare(m.UID, e.String), true
	case FilterName:
		return strings.Compare(m.Name, e.String), true
	case FilterModelNumber:
		return strings.Compare(m.ModelNumber, e.String), true
	case FilterFirmwareRevision:
		return strings.Compare(m.FirmwareRevision, e.String), true
	case FilterSoftwareRevision:
		return strings.Compare(m.SoftwareRevision, e.String), true
	case FilterAssociationState:
		return strings.Compare(string(m.State), e.String), true
	case FilterPresence:
		return strings.Compare(string(PresenceOf(m.LastSeenAt, offlineCut)), e.String), true
	case FilterLastSeenAt:
		if m.LastSeenAt.IsZero() {
			return 0, false
		}
		// Stores keep milliseconds: both sides compare at that precision.
		return cmp.Compare(m.LastSeenAt.UnixMilli(), e.Time.UnixMilli()), true
	}
	code, ok := FilterStateCodes[e.Field]
	if !ok {
		return 0, false
	}
	value, ok := latest[code]
	if !ok {
		return 0, false
	}
	switch FilterFields[e.Field] {
	case FilterNumber:
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, false
		}
		return cmp.Compare(f, e.Number), true
	case FilterBool:
		if value != "1" && value != "0" {
			return 0, false
		}
		if (value == "1") == e.Bool {
			return 0, true
		}
		return 1, true
	}
	return 0, false
}

// holds says whether a comparison's result c satisfies op.
func (op FilterOp) holds(c int) bool {
	switch op {
	case FilterEq:
		return c == 0
	case FilterNe:
		return c != 0
	case FilterLt:
		return c < 0
	case FilterLe:
		return c <= 0
	case FilterGt:
		return c > 0
	case FilterGe:
		return c >= 0
	}
	return false
}

// PresenceOf is the presence of a mount last seen at lastSeenAt, given the
// offline cut (now minus the offline threshold): PresenceAt's rule, which
// the fleet filter and the SQL stores share.
func PresenceOf(lastSeenAt, offlineCut time.Time) Presence {
	return PresenceAt(lastSeenAt, 0, offlineCut)
}

// Nodes counts the nodes of e's tree.
func (e *FilterExpr) Nodes() int {
	n := 1
	for _, a := range e.Args {
		n += a.Nodes()
	}
	return n
}

// FilterComparisons counts the comparisons (=, !=, <, <=, >, >=, :) of a
// filter's text, outside its quoted strings, without parsing it: what a
// filter costs the database grows with them (each reads the account's
// latest values of one code), so the GraphQL cost model charges for each.
// For a valid filter it is exactly its number of comparisons; for any text
// it is at most its length.
func FilterComparisons(text string) int {
	n := 0
	for i := 0; i < len(text); i++ {
		switch c := text[i]; c {
		case '"', '\'':
			for i++; i < len(text) && text[i] != c; i++ {
				if text[i] == '\\' {
					i++
				}
			}
		case '<', '>', '!':
			n++
			if i+1 < len(text) && text[i+1] == '=' {
				i++
			}
		case '=', ':':
			n++
		}
	}
	return n
}
