package core

import "time"

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
