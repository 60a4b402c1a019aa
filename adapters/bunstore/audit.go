package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.AuditLog = (*Store)(nil)

// auditRow is a row of the audit log; Tx is read as text, as the event
// log's is.
type auditRow struct {
	ID            int64          `bun:"id"`
	Tx            string         `bun:"tx_text"`
	AccountID     sql.NullString `bun:"account_id"`
	At            int64          `bun:"at"`
	ActorType     string         `bun:"actor_type"`
	ActorID       string         `bun:"actor_id"`
	ActorName     string         `bun:"actor_name"`
	Action        string         `bun:"action"`
	Target        string         `bun:"target"`
	SourceAddress string         `bun:"source_address"`
	Details       string         `bun:"details"`
}

// auditColumns are the columns of an audit entry as written; auditValues
// gives e's values in their order, as SQL expressions (the actor's name
// is read by the statement: actorNameSQL) and their arguments.
const auditColumns = `account_id, at, actor_type, actor_id, actor_name, action, target, source_address, details`

func auditValues(e *core.AuditEntry) (string, []any, error) {
	details := e.Details
	if details == nil {
		details = map[string]any{}
	}
	body, err := json.Marshal(details)
	if err != nil {
		return "", nil, fmt.Errorf("audit details: %w", err)
	}
	name, nameArgs := actorNameSQL(e.Actor)
	args := []any{sql.NullString{String: e.AccountID, Valid: e.AccountID != ""}, millis(e.At), string(e.Actor.Type), e.Actor.ID}
	args = append(append(args, nameArgs...), string(e.Action), e.Target, e.SourceAddress, string(body))
	return "?, ?, ?, ?, " + name + ", ?, ?, ?, ?", args, nil
}

// recordAudit stores the audit entry ctx carries (core.AuditFrom) in tx,
// the transaction of the change; without one it does nothing. Every store
// method that makes an audited change calls it once the change is made.
// The entry gets its position and the name its actor was recorded under.
func (s *Store) recordAudit(ctx context.Context, tx bun.IDB) error {
	e := core.AuditFrom(ctx)
	if e == nil {
		return nil
	}
	exprs, values, err := auditValues(e)
	if err != nil {
		return err
	}
	var pos struct {
		ID        int64  `bun:"id"`
		Tx        string `bun:"tx_text"`
		ActorName string `bun:"actor_name"`
	}
	if err := tx.NewRaw(`INSERT INTO audit_log (`+auditColumns+`)
		VALUES (`+exprs+`) RETURNING id, CAST(tx AS TEXT) AS tx_text, actor_name`, values...).Scan(ctx, &pos); err != nil {
		return err
	}
	txid, err := strconv.ParseUint(pos.Tx, 10, 64)
	if err != nil {
		return fmt.Errorf("audit position: %w", err)
	}
	e.Position, e.Actor.Name = core.Cursor{Tx: txid, Seq: pos.ID}, pos.ActorName
	return nil
}

// recordAuditEach stores, in tx and in one statement, one entry per
// change: the entry ctx carries with action and target[i], details[i] in
// place of its own (core.AuditEach). Without one it does nothing.
func (s *Store) recordAuditEach(ctx context.Context, tx bun.IDB, action core.AuditAction, targets []string, details []map[string]any) error {
	e := core.AuditFrom(ctx)
	if e == nil || len(targets) == 0 {
		return nil
	}
	var (
		rows strings.Builder
		args []any
	)
	for i, target := range targets {
		each := *e
		each.Action, each.Target, each.Details = action, target, details[i]
		exprs, values, err := auditValues(&each)
		if err != nil {
			return err
		}
		if i > 0 {
			rows.WriteString(", ")
		}
		rows.WriteString("(" + exprs + ")")
		args = append(args, values...)
	}
	_, err := tx.NewRaw(`INSERT INTO audit_log (`+auditColumns+`) VALUES `+rows.String(), args...).Exec(ctx)
	return err
}

// writeAudited runs fn, a change of one statement, as write does; when ctx
// carries an audit entry, in a transaction that records it after fn.
func (s *Store) writeAudited(ctx context.Context, fn func(ctx context.Context, db bun.IDB) error) error {
	if core.AuditFrom(ctx) == nil {
		return s.write(ctx, func() error { return fn(ctx, s.db) })
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if err := fn(ctx, tx); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
}

// ReadAudit implements core.AuditLog.
func (s *Store) ReadAudit(ctx context.Context, q core.AuditQuery) ([]core.AuditEntry, error) {
	var sb strings.Builder
	args := []any{}
	sb.WriteString(`SELECT id, CAST(tx AS TEXT) AS tx_text, account_id, at, actor_type, actor_id, actor_name, action, target,
		source_address, details FROM audit_log WHERE `)
	if q.AccountID == "" {
		sb.WriteString(`account_id IS NULL`)
	} else {
		sb.WriteString(`account_id = ?`)
		args = append(args, q.AccountID)
	}
	if s.postgres {
		// Settled rows only: a transaction still in flight may yet commit
		// a row before the last one read.
		sb.WriteString(` AND tx < pg_snapshot_xmin(pg_current_snapshot())`)
	}
	if q.After != nil {
		fmt.Fprintf(&sb, ` AND (tx, id) > (CAST(? AS %s), ?)`, s.txType())
		args = append(args, strconv.FormatUint(q.After.Tx, 10), q.After.Seq)
	}
	for _, f := range []struct{ column, value string }{{"actor_id", q.Actor}, {"action", q.Action}, {"target", q.Target}} {
		if f.value != "" {
			sb.WriteString(` AND ` + f.column + ` = ?`)
			args = append(args, f.value)
		}
	}
	sb.WriteString(logOrder(q.Tail))
	args = append(args, q.Limit)
	var rows []auditRow
	if err := s.db.NewRaw(sb.String(), args...).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	if q.Tail {
		slices.Reverse(rows)
	}
	out := make([]core.AuditEntry, len(rows))
	for i, r := range rows {
		txid, err := strconv.ParseUint(r.Tx, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("audit entry %d: position: %w", r.ID, err)
		}
		var details map[string]any
		if err := json.Unmarshal([]byte(r.Details), &details); err != nil {
			return nil, fmt.Errorf("audit entry %d: details: %w", r.ID, err)
		}
		out[i] = core.AuditEntry{Position: core.Cursor{Tx: txid, Seq: r.ID}, At: fromMillis(r.At), AccountID: r.AccountID.String,
			Actor:  core.Actor{Type: core.ActorType(r.ActorType), ID: r.ActorID, Name: r.ActorName},
			Action: core.AuditAction(r.Action), Target: r.Target, SourceAddress: r.SourceAddress, Details: details}
	}
	return out, nil
}

// PruneAudit implements core.Housekeeping: the oldest entries first.
func (s *Store) PruneAudit(ctx context.Context, before time.Time, limit int) (int, error) {
	return s.pruneRows(ctx, `DELETE FROM audit_log WHERE id IN (SELECT id FROM audit_log WHERE at < ? ORDER BY at LIMIT ?)`,
		millis(before), limit)
}
