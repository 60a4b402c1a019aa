package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

// ingestRow is the one row of the PostgreSQL report statement: the mount,
// its latest values before the report and the entries the report stored,
// each as parallel arrays.
type ingestRow struct {
	mountRow
	LatestCodes []string `bun:"latest_codes,array"`
	LatestAt    []int64  `bun:"latest_at,array"`
	LatestVals  []string `bun:"latest_values,array"`
	LatestVer   []bool   `bun:"latest_verified,array"`
	NewCodes    []string `bun:"new_codes,array"`
	NewAt       []int64  `bun:"new_at,array"`
	NewVals     []string `bun:"new_values,array"`
	// OpenAlarms are the mount's open episodes, as JSON arrays of
	// alarmColumns (ingestWatchedSQL only).
	OpenAlarms string `bun:"open_alarms"`
}

// ingestSQL is the report's first statement on PostgreSQL, prepared once
// per connection: it locks the mount's row for the report's update of it
// (FOR NO KEY UPDATE: the latest values' columns, lastSeenAt, a verified
// revision), before any latest row: every report locks the mount, then its
// latest rows, so that a signed report updating the revision first and a
// report moving a latest value first cannot deadlock. It stores the entries if the mount
// is the account's live association ($3 is the report's instant), and
// answers the mount, its latest values as they were and what was new, in
// one row. The entries come as three arrays: the statement's text is the
// same for every report, so the server parses and plans it once, where 50
// rows of VALUES cost a parse and plan of 300 literals each time, and the
// answer is three arrays rather than 50 rows for bun to map.
func (s *Store) ingestSQL() string {
	return `WITH m AS (
			SELECT ` + s.columns(reflect.TypeFor[mountRow](), "") + ` FROM mounts WHERE uid = $1 FOR NO KEY UPDATE
		), ins AS (
			INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at, verified)
			SELECT $1, $2, e.code, e.occurred_at, e.value, $3, $7
			FROM unnest($4::text[], $5::bigint[], $6::text[]) AS e (code, occurred_at, value)
			WHERE EXISTS (SELECT 1 FROM m WHERE owner_account_id = $2
				AND (association_state = 'ASSOCIATED' OR (association_state = 'IDLE' AND idle_deadline > $3)))
			ON CONFLICT DO NOTHING
			RETURNING code, occurred_at, value
		)
		SELECT m.*, l.latest_codes, l.latest_at, l.latest_values, l.latest_verified, i.new_codes, i.new_at, i.new_values
		FROM m
		CROSS JOIN LATERAL (SELECT array_agg(code ORDER BY code) AS latest_codes, array_agg(occurred_at ORDER BY code) AS latest_at,
				array_agg(value ORDER BY code) AS latest_values, array_agg(verified ORDER BY code) AS latest_verified
			FROM mount_latest_states WHERE mount_uid = m.uid AND account_id = m.owner_account_id) AS l
		CROSS JOIN (SELECT array_agg(code) AS new_codes, array_agg(occurred_at) AS new_at, array_agg(value) AS new_values FROM ins) AS i`
}

// ingestWatchedSQL is ingestSQL for a report whose alarm rules and presence
// are evaluated in its transaction, run once the transaction holds the
// mount's row FOR UPDATE (a statement of its own: a lock taken inside this
// one would leave its other reads on the snapshot from before the wait):
// the mount's open episodes come in the same row, so that the evaluation
// reads nothing more.
func (s *Store) ingestWatchedSQL() string {
	q := s.ingestSQL()
	cols := make([]string, len(alarmColumns))
	for i, c := range alarmColumns {
		cols[i] = "a." + c
	}
	return strings.Replace(q, "SELECT m.*, l.latest_codes,", `SELECT m.*, (SELECT coalesce(json_agg(json_build_array(`+strings.Join(cols, ", ")+`) ORDER BY a.id), '[]')
			FROM alarms AS a WHERE a.mount_uid = m.uid AND a.state IN ('PENDING', 'ACTIVE')) AS open_alarms, l.latest_codes,`, 1)
}

// alarmColumns are the alarm columns ingestWatchedSQL answers, in
// decodeOpenAlarms' order.
var alarmColumns = []string{"id", "account_id", "rule_id", "rule_name", "rule_revision", "mount_uid", "severity", "state",
	"since", "due_at", "raised_at", "cleared_at", "acknowledged_at", "acknowledged_by", "alarm_values", "acknowledged_by_name"}

// decodeOpenAlarms reads ingestWatchedSQL's open_alarms.
func decodeOpenAlarms(text string) ([]alarmRow, error) {
	var items []json.RawMessage
	if err := json.Unmarshal([]byte(text), &items); err != nil {
		return nil, err
	}
	out := make([]alarmRow, len(items))
	for i, it := range items {
		r := &out[i]
		var raised, cleared, acked *int64
		var ackedBy, values, ackedByName *string
		// One decode per episode, into its fields in alarmColumns' order.
		fields := []any{&r.ID, &r.AccountID, &r.RuleID, &r.RuleName, &r.RuleRevision, &r.MountUID, &r.Severity, &r.State,
			&r.Since, &r.DueAt, &raised, &cleared, &acked, &ackedBy, &values, &ackedByName}
		if err := json.Unmarshal(it, &fields); err != nil {
			return nil, fmt.Errorf("open alarm: %w", err)
		}
		if len(fields) != len(alarmColumns) {
			return nil, fmt.Errorf("open alarm with %d columns", len(fields))
		}
		for _, n := range []struct {
			v   *int64
			dst *sql.NullInt64
		}{{raised, &r.RaisedAt}, {cleared, &r.ClearedAt}, {acked, &r.AcknowledgedAt}} {
			if n.v != nil {
				*n.dst = sql.NullInt64{Int64: *n.v, Valid: true}
			}
		}
		if ackedBy != nil {
			r.AcknowledgedBy = sql.NullString{String: *ackedBy, Valid: true}
		}
		if values != nil {
			r.Values = sql.NullString{String: *values, Valid: true}
		}
		if ackedByName != nil {
			r.AcknowledgedByName = sql.NullString{String: *ackedByName, Valid: true}
		}
	}
	return out, nil
}

// insertStatesPG is InsertStates on PostgreSQL: the mount check, the
// latest values and the entries in one statement, the latest values'
// upsert and the event (if any) in a second, in one transaction.
//
// With watched, the statement is ingestWatchedSQL and watched gets what the
// evaluation reads: the mount as the report leaves it, its latest values
// after the report and its open episodes. With light, it is the report's
// light watch too (moveLastSeen), in the latest values' statement when
// there is one.
func (s *Store) insertStatesPG(ctx context.Context, tx bun.Tx, uid, accountID string, entries []core.StateEntry,
	r core.ReportCheck, e *core.Event, mount *mountRow, watched *core.MountWatch, light bool) ([]core.StateEntry, error) {
	receivedAt := millis(entries[0].ReceivedAt)
	codes, at, values := make([]byte, 0, 20*len(entries)), make([]byte, 0, 14*len(entries)), make([]byte, 0, 8*len(entries))
	for i, entry := range entries {
		codes = appendArrayText(codes, i, len(entries), string(entry.Code))
		at = appendArrayInt(at, i, len(entries), millis(entry.OccurredAt))
		values = appendArrayText(values, i, len(entries), entry.Value)
	}
	statement := s.sql.ingest
	if watched != nil {
		statement = s.sql.ingestWatched
	}
	st, err := s.prepared(ctx, statement)
	if err != nil {
		return nil, err
	}
	s.queries.Add(1)
	rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, uid, accountID, receivedAt,
		string(codes), string(at), string(values), entries[0].Verified)
	if err != nil {
		return nil, err
	}
	var out []ingestRow
	if err := s.db.ScanRows(ctx, rows, &out); err != nil {
		return nil, err
	}
	if len(out) == 0 || out[0].OwnerID.String != accountID || !out[0].live(fromMillis(receivedAt)) {
		return nil, core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
	}
	row := &out[0]
	*mount = row.mountRow
	// The check sees the row the statement read; its error rolls the
	// entries back with the transaction. A revision move waits for the
	// latest values' update of the row, when the report moves one.
	rev, err := checkReport(r, mount, fromMillis(receivedAt))
	if err != nil {
		return nil, err
	}
	before := make([]core.StateEntry, len(row.LatestCodes))
	for i := range row.LatestCodes {
		before[i] = core.StateEntry{Code: core.StateCode(row.LatestCodes[i]), Value: row.LatestVals[i], OccurredAt: fromMillis(row.LatestAt[i]),
			Verified: row.LatestVer[i]}
	}
	accepted := make([]core.StateEntry, len(row.NewCodes))
	for i := range row.NewCodes {
		accepted[i] = core.StateEntry{Code: core.StateCode(row.NewCodes[i]), Value: row.NewVals[i],
			OccurredAt: fromMillis(row.NewAt[i]), ReceivedAt: fromMillis(receivedAt), Verified: entries[0].Verified}
	}
	latest := core.LatestPerCode(accepted)
	if watched != nil {
		open, err := decodeOpenAlarms(row.OpenAlarms)
		if err != nil {
			return nil, err
		}
		*watched = core.MountWatch{Mount: mount.toMount(), OfflineAnnounced: mount.OfflineAnnounced, Latest: mergeLatest(before, latest)}
		for _, a := range open {
			watched.Tracks = append(watched.Tracks, a.toTrack())
		}
	}
	var seenAt int64
	if light {
		if seenAt, err = lightSeen(mount, r); err != nil {
			return nil, err
		}
	}
	if len(latest) == 0 {
		if rev != nil {
			if err := writeRevision(ctx, tx, uid, *rev); err != nil {
				return nil, err
			}
		}
		if light {
			return accepted, s.moveLastSeen(ctx, tx, mount, r)
		}
		return accepted, nil
	}
	query, args := upsertLatestPG(uid, accountID, latest, seenAt, rev)
	if e == nil {
		_, err := tx.NewRaw("WITH before_event AS ("+query+") SELECT 1", args...).Exec(ctx)
		return accepted, err
	}
	// The event's latest values are computed, not read back, so the
	// upsert and the event insert go as one statement.
	e.States = accepted
	return accepted, s.appendEventWith(ctx, tx, e, seenSnapshot(mount, r), mergeLatest(before, latest), query, args)
}

// appendArrayText appends element i of n to a PostgreSQL array literal,
// quoted, with its braces.
func appendArrayText(b []byte, i, n int, v string) []byte {
	b = arrayOpen(b, i)
	b = append(b, '"')
	for j := 0; j < len(v); j++ {
		if v[j] == '"' || v[j] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, v[j])
	}
	b = append(b, '"')
	return arrayClose(b, i, n)
}

// appendArrayInt is appendArrayText for an integer.
func appendArrayInt(b []byte, i, n int, v int64) []byte {
	return arrayClose(strconv.AppendInt(arrayOpen(b, i), v, 10), i, n)
}

func arrayOpen(b []byte, i int) []byte {
	if i == 0 {
		return append(b, '{')
	}
	return append(b, ',')
}

func arrayClose(b []byte, i, n int) []byte {
	if i == n-1 {
		return append(b, '}')
	}
	return b
}
