package bunstore

import (
	"fmt"
	"strings"

	"github.com/mountd/mountd/core"
)

// latestColumns are the mounts table's copies of the owner's latest value
// of each code the fleet filter compares (migration 20261129070000): a
// filter reads one row per mount, through an index of (owner, value),
// instead of joining a set of latest rows per comparison. The flags hold 1
// and 0, as their values do.
var latestColumns = map[core.StateCode]string{
	core.StateBatteryLevel: "battery_level", core.StateCPUTemperature: "cpu_temperature",
	core.StateMountLocked: "mount_locked", core.StateHelmetMounted: "helmet_mounted",
}

// floatType is the dialect's name for the columns' type.
func floatType(postgres bool) string {
	if postgres {
		return "DOUBLE PRECISION"
	}
	return "REAL"
}

// latestColumnsRead are SET assignments taking each column of codes from
// the latest row of uid and accountID, and their parameters; with when,
// only in the rows where it holds. Right where no other transaction can
// move those latest rows meanwhile: in SQLite's (one writer), or on
// PostgreSQL for an INACTIVE mount, whose reports are refused.
func latestColumnsRead(postgres bool, codes []core.StateCode, when, uid, accountID string) (string, []any) {
	var sets []string
	var args []any
	for _, code := range codes {
		column, ok := latestColumns[code]
		if !ok {
			continue
		}
		read := fmt.Sprintf("(SELECT CAST(value AS %s) FROM mount_latest_states WHERE mount_uid = ? AND account_id = ? AND code = '%s')",
			floatType(postgres), code)
		if when != "" {
			read = fmt.Sprintf("CASE WHEN %s THEN %s ELSE %s END", when, read, column)
		}
		sets = append(sets, column+" = "+read)
		args = append(args, uid, accountID)
	}
	return strings.Join(sets, ", "), args
}

// codesOf are the codes of entries.
func codesOf(entries []core.StateEntry) []core.StateCode {
	codes := make([]core.StateCode, len(entries))
	for i, e := range entries {
		codes[i] = e.Code
	}
	return codes
}

// upsertLatestPG is upsertLatestSQL on PostgreSQL, as the body of the CTE
// before_event, followed by a CTE that copies what it moved into the
// mount's columns: the upsert answers only the rows it wrote, and a column
// it did not write keeps the row's value, read after any concurrent report
// that held the row (a read of mount_latest_states here could see a
// snapshot from before that report's commit). With seenAt (a light watch's
// lastSeenAt, lightSeen), the same update moves lastSeenAt forward, and
// with rev the signed revision (revisionSet): one new version of the
// mount's row per report instead of two or three.
func upsertLatestPG(uid, accountID string, latest []core.StateEntry, seenAt int64, rev *revisionSet) (string, []any) {
	query, args := upsertLatestSQL(uid, accountID, latest)
	query += " RETURNING code, value"
	var sets []string
	for _, e := range latest {
		if column, ok := latestColumns[e.Code]; ok {
			sets = append(sets, fmt.Sprintf("%s = COALESCE((SELECT CAST(value AS DOUBLE PRECISION) FROM before_event WHERE code = '%s'), %s)",
				column, e.Code, column))
		}
	}
	changed := "EXISTS (SELECT 1 FROM before_event)"
	if seenAt > 0 {
		sets = append(sets, "last_seen_at = CASE WHEN last_seen_at IS NULL OR last_seen_at < ? THEN ? ELSE last_seen_at END")
		args = append(args, seenAt, seenAt)
		changed += " OR last_seen_at IS NULL OR last_seen_at < ?"
	}
	if rev != nil {
		sets = append(sets, revisionSQL)
		args = append(args, rev.args()...)
		changed = "TRUE"
	}
	if len(sets) == 0 {
		return query, args
	}
	query += `), latest_columns AS (UPDATE mounts SET ` + strings.Join(sets, ", ") + ` WHERE uid = ? AND (` + changed + `)`
	args = append(args, uid)
	if seenAt > 0 && rev == nil {
		args = append(args, seenAt)
	}
	return query, args
}
