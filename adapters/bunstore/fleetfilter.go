package bunstore

import (
	"fmt"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

// filterColumns maps the fields read from the mounts table to its columns.
// Column names come from here alone; every value is a bun parameter.
var filterColumns = map[core.FilterField]string{
	core.FilterUID: "uid", core.FilterName: "name", core.FilterModelNumber: "model_number",
	core.FilterFirmwareRevision: "firmware_revision", core.FilterSoftwareRevision: "software_revision",
	core.FilterAssociationState: "association_state",
}

// filterSQL is a fleet filter's translation: a condition on the mounts
// table (its columns unqualified) and its parameters.
type filterSQL struct {
	sql        strings.Builder
	args       []any
	offlineCut int64
	// bytes orders text by bytes in the dialect.
	bytes string
}

// translateFilter turns e into a condition on the mounts table that is
// never NULL, so that NOT of a comparison on a missing value matches, as
// core's evaluator says. Every field is a column of the mount's row (the
// latest values too: latestColumns), so a filter's cost is that of the
// indexes of (owner, field) it can use, and a count reads each of the
// account's mounts at most once.
func translateFilter(e *core.FilterExpr, offlineCut time.Time, postgres bool) (string, []any) {
	t := filterSQL{offlineCut: millis(offlineCut), bytes: "BINARY"}
	if postgres {
		t.bytes = `"C"`
	}
	t.node(e)
	return t.sql.String(), t.args
}

// latestValue is the number a comparison on a latest value compares with.
func latestValue(e *core.FilterExpr) float64 {
	if core.FilterFields[e.Field] == core.FilterBool {
		// The flags are stored 1 and 0.
		if e.Bool {
			return 1
		}
		return 0
	}
	return e.Number
}

func (t *filterSQL) write(sql string, args ...any) {
	t.sql.WriteString(sql)
	t.args = append(t.args, args...)
}

func (t *filterSQL) node(e *core.FilterExpr) {
	switch e.Op {
	case core.FilterAnd, core.FilterOr:
		t.write("(")
		for i, a := range e.Args {
			if i > 0 {
				t.write(" " + string(e.Op) + " ")
			}
			t.node(a)
		}
		t.write(")")
		return
	case core.FilterNot:
		t.write("NOT ")
		if len(e.Args) == 1 {
			t.node(e.Args[0])
		} else {
			t.write("(1 = 1)")
		}
		return
	}
	op, ok := sqlOps[e.Op]
	if !ok {
		// Parsers build comparisons of these six operators only.
		t.write("(1 = 0)")
		return
	}
	if column, ok := filterColumns[e.Field]; ok {
		if e.Op != core.FilterEq && e.Op != core.FilterNe {
			// Text orders by bytes, whatever the database's collation.
			column += " COLLATE " + t.bytes
		}
		t.write(fmt.Sprintf("(%s %s ?)", column, op), e.String)
		return
	}
	switch e.Field {
	case core.FilterLastSeenAt:
		t.write(fmt.Sprintf("(last_seen_at IS NOT NULL AND last_seen_at %s ?)", op), millis(e.Time))
		return
	case core.FilterPresence:
		// presence != X is NOT (presence = X): every mount has a presence.
		if e.Op == core.FilterNe {
			t.write("NOT ")
		}
		switch core.Presence(e.String) {
		case core.PresenceUnknown:
			t.write("(last_seen_at IS NULL)")
		case core.PresenceOffline:
			t.write("(last_seen_at IS NOT NULL AND last_seen_at <= ?)", t.offlineCut)
		default:
			t.write("(last_seen_at IS NOT NULL AND last_seen_at > ?)", t.offlineCut)
		}
		return
	}
	column, ok := latestColumns[core.FilterStateCodes[e.Field]]
	if !ok {
		t.write("(1 = 0)")
		return
	}
	t.write(fmt.Sprintf("(%s IS NOT NULL AND %s %s ?)", column, column, op), latestValue(e))
}

var sqlOps = map[core.FilterOp]string{
	core.FilterEq: "=", core.FilterNe: "<>", core.FilterLt: "<", core.FilterLe: "<=", core.FilterGt: ">", core.FilterGe: ">=",
}
