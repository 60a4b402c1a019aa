package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

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
}

func toCommandRow(c core.Command) (*commandRow, error) {
	data, err := json.Marshal(c.Data)
	if err != nil {
		return nil, err
	}
	return &commandRow{ID: c.ID, MountUID: c.MountUID, AccountID: c.AccountID, Code: string(c.Code), Payload: c.Payload,
		SignedToken: sql.NullString{String: c.SignedToken, Valid: c.SignedToken != ""},
		Data:        string(data), GeneratedAt: millis(c.GeneratedAt), IssuedBy: c.IssuedBy}, nil
}

// InsertCommand implements core.CommandStore.
func (s *Store) InsertCommand(ctx context.Context, c core.Command, e *core.Event) error {
	row, err := toCommandRow(c)
	if err != nil {
		return err
	}
	if e == nil {
		err = s.write(ctx, func() error {
			_, err := s.db.NewInsert().Model(row).Exec(ctx)
			return err
		})
		return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", c.MountUID))
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", c.MountUID))
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
	total, err := s.db.NewSelect().Model(&rows).Where("mount_uid = ? AND account_id = ?", uid, accountID).
		OrderExpr("generated_at DESC, seq DESC").Limit(p.PageSize).Offset(p.Offset()).ScanAndCount(ctx)
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.Command, len(rows))
	for i, r := range rows {
		var data map[string]any
		if err := json.Unmarshal([]byte(r.Data), &data); err != nil {
			return nil, 0, err
		}
		out[i] = core.Command{ID: r.ID, MountUID: r.MountUID, AccountID: r.AccountID, Code: core.CommandCode(r.Code),
			Data: data, GeneratedAt: fromMillis(r.GeneratedAt), Payload: r.Payload, SignedToken: r.SignedToken.String, IssuedBy: r.IssuedBy}
	}
	return out, total, nil
}
