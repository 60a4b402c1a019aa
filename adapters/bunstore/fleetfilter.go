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
	accountID  string
	offlineCut int64
	// bytes orders text by bytes in the dialect.
	bytes string
	// float is the dialect's name for a double: the latest values' index
	// is on CAST(value AS float), and the query must say it the same way.
	float string
}

// translateFilter turns e into a condition that is never NULL, so that NOT
// of a comparison on a missing value matches, as core's evaluator says.
// Comparisons on latest values are uncorrelated IN subqueries on the
// account's rows of one code: PostgreSQL joins them as hashed semi-joins
// (hashed subplans under OR and NOT), on the index of migration
// 20261128000017.
func translateFilter(e *core.FilterExpr, accountID string, offlineCut time.Time, postgres bool) (string, []any) {
	t := filterSQL{accountID: accountID, offlineCut: millis(offlineCut), bytes: "BINARY", float: "REAL"}
	if postgres {
		t.bytes, t.float = `"C"`, "DOUBLE PRECISION"
	}
	t.node(e)
	return t.sql.String(), t.args
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
	code, ok := core.FilterStateCodes[e.Field]
	if !ok {
		t.write("(1 = 0)")
		return
	}
	t.write("(uid IN (SELECT mount_uid FROM mount_latest_states WHERE account_id = ? AND code = ? AND ", t.accountID, string(code))
	if core.FilterFields[e.Field] == core.FilterBool {
		value := "0"
		if e.Bool {
			value = "1"
		}
		t.write(fmt.Sprintf("value %s ?))", op), value)
		return
	}
	t.write(fmt.Sprintf("CAST(value AS %s) %s ?))", t.float, op), e.Number)
}

var sqlOps = map[core.FilterOp]string{
	core.FilterEq: "=", core.FilterNe: "<>", core.FilterLt: "<", core.FilterLe: "<=", core.FilterGt: ">", core.FilterGe: ">=",
}
