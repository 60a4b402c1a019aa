package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

type commandRow struct {
	bun.BaseModel `bun:"table:commands"`
	// Seq is assigned by the database at insert; it orders the commands of
	// one millisecond as they were issued.
	Seq         int64          `bun:"seq,pk,autoincrement"`
	ID          string         `bun:"id"`
	MountUID    string         `bun:"mount_uid"`
	AccountID   string         `bun:"account_id"`
	Code        string         `bun:"code"`
	Payload     string         `bun:"payload"`
	SignedToken sql.NullString `bun:"signed_token"`
	Data        string         `bun:"data"`
	GeneratedAt int64          `bun:"generated_at"`
	IssuedBy    string         `bun:"issued_by"`
	Status      string         `bun:"status"`
	StatusAt    int64          `bun:"status_at"`
	Reason      string         `bun:"reason"`
	Verified    bool           `bun:"verified"`
	ExpiresAt   int64          `bun:"expires_at"`
	// ReceiptCounter is the deciding receipt's counter, NULL without one.
	ReceiptCounter sql.NullInt64 `bun:"receipt_counter"`
	// JobID is the job the command was signed for, NULL for none.
	JobID sql.NullString `bun:"job_id"`
	// RolloutID is the rollout an INSTALL_FIRMWARE was signed for, NULL
	// for none.
	RolloutID sql.NullString `bun:"rollout_id"`
	// IssuedByName is the issuer's name at issue ('' before names).
	IssuedByName string `bun:"issued_by_name"`
	// GrantID is an offline use's grant, NULL for a signed command.
	GrantID sql.NullString `bun:"grant_id"`
}

func toCommandRow(c core.Command) (*commandRow, error) {
	data, err := json.Marshal(c.Data)
	if err != nil {
		return nil, err
	}
	status := c.Status
	if status == "" {
		status = core.CommandIssued
	}
	return &commandRow{ID: c.ID, MountUID: c.MountUID, AccountID: c.AccountID, Code: string(c.Code), Payload: c.Payload,
		SignedToken: sql.NullString{String: c.SignedToken, Valid: c.SignedToken != ""},
		Data:        string(data), GeneratedAt: millis(c.GeneratedAt), IssuedBy: c.IssuedBy, IssuedByName: c.IssuedByName,
		Status: string(status), StatusAt: optMillis(c.StatusAt), Reason: c.Reason, Verified: c.Verified,
		ExpiresAt: optMillis(c.ExpiresAt), JobID: sql.NullString{String: c.JobID, Valid: c.JobID != ""},
		RolloutID: sql.NullString{String: c.RolloutID, Valid: c.RolloutID != ""},
		GrantID:   sql.NullString{String: c.GrantID, Valid: c.GrantID != ""}}, nil
}

func (r *commandRow) toCommand() (core.Command, error) {
	var data map[string]any
	if err := json.Unmarshal([]byte(r.Data), &data); err != nil {
		return core.Command{}, fmt.Errorf("command %s: data: %w", r.ID, err)
	}
	return core.Command{ID: r.ID, MountUID: r.MountUID, AccountID: r.AccountID, Code: core.CommandCode(r.Code),
		Data: data, GeneratedAt: fromMillis(r.GeneratedAt), Payload: r.Payload, SignedToken: r.SignedToken.String,
		IssuedBy: r.IssuedBy, IssuedByName: r.IssuedByName, ExpiresAt: fromMillis(r.ExpiresAt), Status: core.CommandStatus(r.Status),
		StatusAt: fromMillis(r.StatusAt), Reason: r.Reason, Verified: r.Verified, JobID: r.JobID.String,
		RolloutID: r.RolloutID.String, GrantID: r.GrantID.String}, nil
}

// InsertCommand implements core.CommandStore.
func (s *Store) InsertCommand(ctx context.Context, c core.Command, e *core.Event) error {
	row, err := toCommandRow(c)
	if err != nil {
		return err
	}
	if e == nil && c.JobID == "" && c.RolloutID == "" {
		err = s.write(ctx, func() error {
			_, err := s.db.NewInsert().Model(row).Exec(ctx)
			return err
		})
		return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", c.MountUID))
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if c.JobID != "" {
			if err := s.checkJobCommand(ctx, tx, c); err != nil {
				return err
			}
		}
		var (
			rollout *core.Rollout
			target  *core.RolloutTarget
		)
		if c.RolloutID != "" {
			var err error
			if rollout, target, err = s.checkRolloutCommand(ctx, tx, c); err != nil {
				return err
			}
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", c.MountUID))
		}
		if rollout != nil {
			if err := s.installRolloutTarget(ctx, tx, rollout, *target, c); err != nil {
				return err
			}
		}
		if c.JobID != "" {
			// An issued command never completes its job: no event.
			if _, err := s.moveJobTarget(ctx, tx, c, c.GeneratedAt); err != nil {
				return err
			}
		}
		if e == nil {
			return nil
		}
		var m mountRow
		if err := tx.NewSelect().Model(&m).Where("uid = ?", c.MountUID).Scan(ctx); err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", c.MountUID))
		}
		return s.appendEvent(ctx, tx, e, &m)
	})
}

// ListCommands implements core.CommandStore.
func (s *Store) ListCommands(ctx context.Context, uid, accountID string, p core.Page) ([]core.Command, int, error) {
	var rows []commandRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("mount_uid = ? AND account_id = ?", uid, accountID).
			OrderExpr("generated_at DESC, seq DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.Command, len(rows))
	for i := range rows {
		if out[i], err = rows[i].toCommand(); err != nil {
			return nil, 0, err
		}
	}
	return out, total, nil
}

// CommandsByID implements core.CommandStore: a lookup by the unique id.
func (s *Store) CommandsByID(ctx context.Context, uid, accountID string, ids []string) ([]core.Command, error) {
	if len(ids) == 0 {
		return []core.Command{}, nil
	}
	var rows []commandRow
	if err := s.db.NewSelect().Model(&rows).Where("id IN (?) AND mount_uid = ? AND account_id = ?", bun.In(ids), uid, accountID).
		Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]core.Command, len(rows))
	for i := range rows {
		var err error
		if out[i], err = rows[i].toCommand(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DecideCommand implements core.CommandStore: one conditional UPDATE …
// RETURNING, whose condition is the deciding rule, so replicas receiving
// receipts of one command at once agree on its outcome; the event goes in
// the same transaction, only when the row moved.
func (s *Store) DecideCommand(ctx context.Context, d core.CommandDecision, e *core.Event) (core.Command, bool, error) {
	var (
		out     commandRow
		changed bool
	)
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(`UPDATE commands SET
				status_at = CASE WHEN status = ? THEN status_at ELSE ? END,
				status = ?, reason = ?, verified = ?, receipt_counter = ?
			WHERE id = ? AND mount_uid = ? AND account_id = ? AND (
				(? = 'EXECUTED' AND status <> 'EXECUTED') OR
				(? = 'REFUSED' AND (status IN ('ISSUED', 'UNCONFIRMED') OR (status = 'REFUSED' AND receipt_counter > ?))))
			RETURNING *`,
			string(d.Status), millis(d.At), string(d.Status), d.Reason, d.Verified, int64(d.Counter),
			d.ID, d.UID, d.AccountID, string(d.Status), string(d.Status), int64(d.Counter)).Scan(ctx, &out)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		changed = true
		c, err := out.toCommand()
		if err != nil {
			return err
		}
		if c.JobID != "" {
			je, err := s.moveJobTarget(ctx, tx, c, d.At)
			if err != nil {
				return err
			}
			if je != nil && d.AccountEvents != nil {
				*d.AccountEvents = append(*d.AccountEvents, je)
			}
		}
		if c.RolloutID != "" {
			re, err := s.decideRolloutTarget(ctx, tx, c, d.At)
			if err != nil {
				return err
			}
			if d.AccountEvents != nil {
				*d.AccountEvents = append(*d.AccountEvents, re...)
			}
		}
		if e == nil {
			return nil
		}
		e.Command = &c
		var m mountRow
		if err := tx.NewSelect().Model(&m).Where("uid = ?", d.UID).Scan(ctx); err != nil {
			return err
		}
		return s.appendEvent(ctx, tx, e, &m)
	})
	if err != nil {
		return core.Command{}, false, err
	}
	if !changed {
		// A duplicate, or no such command: the read tells them apart.
		cmds, err := s.CommandsByID(ctx, d.UID, d.AccountID, []string{d.ID})
		if err != nil {
			return core.Command{}, false, err
		}
		if len(cmds) == 0 {
			return core.Command{}, false, core.Errorf(core.CodeCommandNotFound, "command %q not found", d.ID)
		}
		return cmds[0], false, nil
	}
	c, err := out.toCommand()
	return c, true, err
}

// UnconfirmCommands implements core.CommandStore: one UPDATE … RETURNING
// over the ISSUED commands due (the partial index on expires_at), which
// re-checks status = 'ISSUED' on every row it changes: of two sweepers at
// once, the second finds the rows moved (PostgreSQL re-reads a row another
// transaction changed; SQLite has one writer) and turns none of them. The
// events go in the same transaction.
func (s *Store) UnconfirmCommands(ctx context.Context, now time.Time, limit int, event func(core.Command) *core.Event) ([]*core.Event, error) {
	// Most sweeps find nothing: one read answers that without a write
	// transaction (on SQLite, the writer's turn).
	due, err := s.db.NewSelect().Model((*commandRow)(nil)).
		Where("status = 'ISSUED' AND expires_at <= ?", millis(now)).Exists(ctx)
	if err != nil || !due {
		return nil, err
	}
	var events []*core.Event
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		events = events[:0]
		var rows []commandRow
		if err := tx.NewRaw(`UPDATE commands SET status = 'UNCONFIRMED', status_at = ?
			WHERE seq IN (SELECT seq FROM commands WHERE status = 'ISSUED' AND expires_at <= ? ORDER BY expires_at LIMIT ?)
				AND status = 'ISSUED'
			RETURNING *`, millis(now), millis(now), limit).Scan(ctx, &rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		uids := make([]string, 0, len(rows))
		for _, r := range rows {
			uids = append(uids, r.MountUID)
		}
		var mounts []mountRow
		if err := tx.NewSelect().Model(&mounts).Where("uid IN (?)", bun.In(uids)).Scan(ctx); err != nil {
			return err
		}
		byUID := make(map[string]*mountRow, len(mounts))
		for i := range mounts {
			byUID[mounts[i].UID] = &mounts[i]
		}
		for i := range rows {
			c, err := rows[i].toCommand()
			if err != nil {
				return err
			}
			e := event(c)
			e.Command = &c
			if m, ok := byUID[c.MountUID]; ok && (!m.OwnerID.Valid || m.OwnerID.String == c.AccountID) {
				if err := s.appendEvent(ctx, tx, e, m); err != nil {
					return err
				}
			}
			events = append(events, e)
		}
		// The jobs' targets, in job id order (each move locks its job), so
		// that two transactions never wait on each other's jobs.
		var jobCmds []*core.Command
		for _, e := range events {
			if e.Command.JobID != "" {
				jobCmds = append(jobCmds, e.Command)
			}
		}
		slices.SortFunc(jobCmds, func(a, b *core.Command) int { return strings.Compare(a.JobID, b.JobID) })
		for _, c := range jobCmds {
			if _, err := s.moveJobTarget(ctx, tx, *c, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}
