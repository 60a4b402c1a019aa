package bunstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

// handoverKeyRow is one owner key a mount may hold (core.MountStore.HandoverKeys).
type handoverKeyRow struct {
	bun.BaseModel    `bun:"table:handover_keys"`
	Seq              int64         `bun:"seq,pk,autoincrement"`
	MountUID         string        `bun:"mount_uid"`
	KeyID            string        `bun:"key_id"`
	PublicKey        string        `bun:"public_key"`
	SealedPrivateKey string        `bun:"sealed_private_key"`
	AccountID        string        `bun:"account_id"`
	CreatedAt        int64         `bun:"created_at"`
	ConfirmedAt      sql.NullInt64 `bun:"confirmed_at"`
}

// pruneHandoverKeys keeps of a mount's unconfirmed keys the newest
// core.MaxHandoverKeys-1 (its one confirmed key stays). Its two arguments
// are the uid, twice.
const pruneHandoverKeys = `DELETE FROM handover_keys WHERE mount_uid = ? AND confirmed_at IS NULL
	AND seq NOT IN (SELECT seq FROM handover_keys WHERE mount_uid = ? AND confirmed_at IS NULL ORDER BY seq DESC LIMIT ?)`

// keepHandoverKey keeps a claim's key in its transaction.
func (s *Store) keepHandoverKey(ctx context.Context, tx bun.IDB, c core.Claim) error {
	row := &handoverKeyRow{MountUID: c.UID, KeyID: c.Key.ID, PublicKey: hex.EncodeToString(c.Key.PublicKey),
		SealedPrivateKey: c.Key.SealedPrivateKey, AccountID: c.AccountID, CreatedAt: millis(c.Now)}
	if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
		return err
	}
	_, err := tx.NewRaw(pruneHandoverKeys, c.UID, c.UID, core.MaxHandoverKeys-1).Exec(ctx)
	return err
}

// confirmHandoverKey makes keyID the mount's confirmed key, if a claim kept
// it, and drops the keys kept before it, in the confirmation's transaction.
func (s *Store) confirmHandoverKey(ctx context.Context, tx bun.IDB, uid, keyID string, now time.Time) error {
	if keyID == "" {
		return nil
	}
	var seq int64
	err := tx.NewRaw(`UPDATE handover_keys SET confirmed_at = ? WHERE mount_uid = ? AND key_id = ? RETURNING seq`,
		millis(now), uid, keyID).Scan(ctx, &seq)
	if err == sql.ErrNoRows {
		return nil // a key rotated since the claim was never delivered
	}
	if err != nil {
		return err
	}
	_, err = tx.NewRaw(`DELETE FROM handover_keys WHERE mount_uid = ? AND seq < ?`, uid, seq).Exec(ctx)
	return err
}

// HandoverKeys implements core.MountStore.
func (s *Store) HandoverKeys(ctx context.Context, uid string) ([]core.MountKey, error) {
	var rows []handoverKeyRow
	// Pruned at every claim and confirmation; a bound all the same.
	if err := s.db.NewSelect().Model(&rows).Where("mount_uid = ?", uid).Order("seq").
		Limit(4 * core.MaxHandoverKeys).Scan(ctx); err != nil {
		return nil, err
	}
	var out []core.MountKey
	if len(rows) > 0 && rows[0].ConfirmedAt.Valid {
		out = append(out, rows[0].toKey())
		rows = rows[1:]
	}
	if max := core.MaxHandoverKeys - len(out); len(rows) > max {
		rows = rows[len(rows)-max:]
	}
	for _, r := range rows {
		out = append(out, r.toKey())
	}
	return out, nil
}

func (r handoverKeyRow) toKey() core.MountKey {
	pub, _ := hex.DecodeString(r.PublicKey)
	return core.MountKey{ID: r.KeyID, PublicKey: pub, SealedPrivateKey: r.SealedPrivateKey}
}
