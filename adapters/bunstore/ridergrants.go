package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.GrantStore = (*Store)(nil)

type riderGrantRow struct {
	bun.BaseModel `bun:"table:rider_grants"`
	ID            string        `bun:"id,pk"`
	UID           string        `bun:"mount_uid"`
	AccountID     string        `bun:"account_id"`
	RiderKey      string        `bun:"rider_key"`
	Rights        string        `bun:"rights"` // joined by +
	NotBefore     int64         `bun:"not_before"`
	NotAfter      int64         `bun:"not_after"`
	Epoch         int64         `bun:"epoch"`
	Label         string        `bun:"label"`
	CreatedAt     int64         `bun:"created_at"`
	CreatedBy     string        `bun:"created_by"`
	TokenID       string        `bun:"token_id"`
	KeyID         string        `bun:"key_id"`
	Text          string        `bun:"text"`
	Signature     string        `bun:"signature"`
	RevokedAt     sql.NullInt64 `bun:"revoked_at"`
	RevokedEpoch  sql.NullInt64 `bun:"revoked_epoch"`
	Uses          int           `bun:"uses"`
	LastUsedAt    sql.NullInt64 `bun:"last_used_at"`
}

func (r riderGrantRow) toGrant() core.RiderGrant {
	return core.RiderGrant{ID: r.ID, UID: r.UID, AccountID: r.AccountID, RiderKey: r.RiderKey,
		Rights: strings.Split(r.Rights, "+"), NotBefore: fromMillis(r.NotBefore), NotAfter: fromMillis(r.NotAfter),
		Epoch: r.Epoch, Label: r.Label, CreatedAt: fromMillis(r.CreatedAt), CreatedBy: r.CreatedBy, TokenID: r.TokenID,
		KeyID: r.KeyID, Text: r.Text, Signature: r.Signature, RevokedAt: fromNullMillis(r.RevokedAt),
		Uses: r.Uses, LastUsedAt: fromNullMillis(r.LastUsedAt)}
}

func grantRow(g core.RiderGrant) riderGrantRow {
	return riderGrantRow{ID: g.ID, UID: g.UID, AccountID: g.AccountID, RiderKey: g.RiderKey,
		Rights: strings.Join(g.Rights, "+"), NotBefore: millis(g.NotBefore), NotAfter: millis(g.NotAfter),
		Epoch: g.Epoch, Label: g.Label, CreatedAt: millis(g.CreatedAt), CreatedBy: g.CreatedBy, TokenID: g.TokenID,
		KeyID: g.KeyID, Text: g.Text, Signature: g.Signature}
}

// revocationRow is a mount's revocation version and epoch; a mount without
// one is at version 1, epoch 1.
type revocationRow struct {
	bun.BaseModel `bun:"table:mount_revocations"`
	UID           string `bun:"uid,pk"`
	Version       int64  `bun:"version"`
	Epoch         int64  `bun:"epoch"`
	// RevokedAt is the last revocation's time (ms), 0 for none.
	RevokedAt int64 `bun:"revoked_at"`
}

// liveGrant is the condition of a grant neither revoked nor expired at ?.
const liveGrant = `revoked_at IS NULL AND not_after > ?`

// lockedMount reads uid's row, locked for the transaction on PostgreSQL
// (SQLite's transactions here hold the write lock already).
func (s *Store) lockedMount(ctx context.Context, tx bun.Tx, uid string) (*mountRow, error) {
	row := new(mountRow)
	q := tx.NewSelect().Model(row).Where("uid = ?", uid)
	if s.postgres {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	return row, nil
}

// lockedRevocations reads uid's revocation row, created at 1/1 when the
// mount has none, locked for the transaction.
func (s *Store) lockedRevocations(ctx context.Context, tx bun.Tx, uid string) (*revocationRow, error) {
	if _, err := tx.NewInsert().Model(&revocationRow{UID: uid, Version: 1, Epoch: 1}).On("CONFLICT (uid) DO NOTHING").Exec(ctx); err != nil {
		return nil, err
	}
	row := new(revocationRow)
	q := tx.NewSelect().Model(row).Where("uid = ?", uid)
	if s.postgres {
		q = q.For("UPDATE")
	}
	return row, q.Scan(ctx)
}

// rise is a version's or epoch's next value: past the previous one and at
// least the time, so that a restored database never repeats one.
func rise(prev int64, now time.Time) int64 { return max(prev+1, millis(now)) }

// CreateGrant implements core.GrantStore.
func (s *Store) CreateGrant(ctx context.Context, g core.RiderGrant, lim core.GrantLimits, now time.Time, sign core.GrantSigner) (created core.RiderGrant, replaced []*core.Event, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		created, replaced = core.RiderGrant{}, nil
		m, err := s.lockedMount(ctx, tx, g.UID)
		if err != nil {
			return err
		}
		if m == nil || !m.OwnerID.Valid || m.OwnerID.String != g.AccountID {
			return core.Errorf(core.CodeMountNotFound, "mount %q not found", g.UID)
		}
		if m.State != string(core.StateAssociated) {
			return core.Errorf(core.CodeMountNotAssociated, "mount %q is not associated", g.UID)
		}
		if m.DevicePublicKey.String == "" {
			return core.Errorf(core.CodeDeviceKeyRequired, "mount %q has no device key: it cannot sign the receipts of offline uses", g.UID)
		}
		rev, err := s.lockedRevocations(ctx, tx, g.UID)
		if err != nil {
			return err
		}
		mount := m.toMount()
		// The same rider's live grant gives its place to the new one.
		var same []riderGrantRow
		if err := tx.NewSelect().Model(&same).Where("mount_uid = ? AND account_id = ? AND rider_key = ?", g.UID, g.AccountID, g.RiderKey).
			Where(liveGrant, millis(now)).Scan(ctx); err != nil {
			return err
		}
		if len(same) > 0 {
			if replaced, err = s.revokeOnMount(ctx, tx, m, rev, same, now, sign); err != nil {
				return err
			}
		}
		live, err := tx.NewSelect().Model((*riderGrantRow)(nil)).Where("mount_uid = ?", g.UID).Where(liveGrant, millis(now)).Count(ctx)
		if err != nil {
			return err
		}
		if live >= lim.PerMount {
			return core.Errorf(core.CodeConflict, "mount %q has %d live grants, the most it may have", g.UID, live)
		}
		if lim.PerToken > 0 {
			n, err := tx.NewSelect().Model((*riderGrantRow)(nil)).Where("account_id = ? AND token_id = ?", g.AccountID, g.TokenID).
				Where(liveGrant, millis(now)).Count(ctx)
			if err != nil {
				return err
			}
			if n >= lim.PerToken {
				return core.Errorf(core.CodeConflict, "this token has %d live grants, the most it may have", n)
			}
		}
		g.Epoch = rev.Epoch
		if g, err = sign(ctx, mount, g); err != nil {
			return err
		}
		row := grantRow(g)
		if _, err := tx.NewInsert().Model(&row).Exec(ctx); err != nil {
			return err
		}
		created = row.toGrant()
		return s.recordAudit(ctx, tx)
	})
	return created, replaced, err
}

// revokeOnMount revokes grants of one mount at now (row is the mount's,
// rev its locked revocation row) and appends a GRANT_REVOKED event for
// each: the version rises; a list that would pass core.MaxRevocations
// starts a new epoch, whose list holds only these, and the mount's live
// grants are signed again at it.
func (s *Store) revokeOnMount(ctx context.Context, tx bun.Tx, row *mountRow, rev *revocationRow, grants []riderGrantRow, now time.Time, sign core.GrantSigner) ([]*core.Event, error) {
	m := row.toMount()
	listed, err := tx.NewSelect().Model((*riderGrantRow)(nil)).Where("mount_uid = ? AND revoked_epoch = ? AND not_after > ?", m.UID, rev.Epoch, millis(now)).Count(ctx)
	if err != nil {
		return nil, err
	}
	rev.Version, rev.RevokedAt = rise(rev.Version, now), millis(now)
	ids := make([]string, len(grants))
	for i, g := range grants {
		ids[i] = g.ID
	}
	if listed+len(grants) > core.MaxRevocations {
		rev.Epoch = rise(rev.Epoch, now)
		n, err := s.resignLive(ctx, tx, &m, rev.Epoch, ids, now, sign)
		if err != nil {
			return nil, err
		}
		if err := s.recordAudit(core.AuditEach(ctx, core.AuditGrantResign, core.AuditTarget("mount", m.UID),
			map[string]any{"epoch": rev.Epoch, "grants": n}), tx); err != nil {
			return nil, err
		}
	}
	if _, err := tx.NewUpdate().Model((*riderGrantRow)(nil)).Set("revoked_at = ?, revoked_epoch = ?", millis(now), rev.Epoch).
		Where("id IN (?)", bun.In(ids)).Exec(ctx); err != nil {
		return nil, err
	}
	if _, err := tx.NewUpdate().Model(rev).Column("version", "epoch", "revoked_at").WherePK().Exec(ctx); err != nil {
		return nil, err
	}
	out := make([]*core.Event, len(grants))
	for i, g := range grants {
		g.RevokedAt, g.RevokedEpoch = sql.NullInt64{Int64: millis(now), Valid: true}, sql.NullInt64{Int64: rev.Epoch, Valid: true}
		revoked := g.toGrant()
		out[i] = &core.Event{Type: core.EventGrantRevoked, UID: g.UID, AccountID: g.AccountID, OccurredAt: now, Grant: &revoked}
		if err := s.appendEvent(ctx, tx, out[i], row); err != nil {
			return nil, err
		}
		if err := s.recordAudit(core.AuditEach(ctx, core.AuditGrantRevoke, core.AuditTarget("grant", g.ID),
			map[string]any{"uid": g.UID, "riderKey": g.RiderKey}), tx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// resignLive signs the mount's live grants (but those of except) again at
// epoch with the mount's key; the grants of an association that ended have
// nothing to sign with and stay as they are.
func (s *Store) resignLive(ctx context.Context, tx bun.Tx, m *core.Mount, epoch int64, except []string, now time.Time, sign core.GrantSigner) (int, error) {
	if m.State != core.StateAssociated {
		return 0, nil
	}
	var live []riderGrantRow
	if err := tx.NewSelect().Model(&live).Where("mount_uid = ? AND account_id = ? AND id NOT IN (?)", m.UID, m.OwnerID, bun.In(except)).
		Where(liveGrant, millis(now)).Scan(ctx); err != nil {
		return 0, err
	}
	return len(live), s.signAgain(ctx, tx, *m, live, epoch, sign)
}

// signAgain signs rows with m's key at epoch and stores the new text,
// signature and key: an epoch rise and a new owner key both come here.
func (s *Store) signAgain(ctx context.Context, tx bun.Tx, m core.Mount, rows []riderGrantRow, epoch int64, sign core.GrantSigner) error {
	for _, r := range rows {
		g := r.toGrant()
		g.Epoch = epoch
		g, err := sign(ctx, m, g)
		if err != nil {
			return err
		}
		if _, err := tx.NewUpdate().Model((*riderGrantRow)(nil)).Set("epoch = ?, text = ?, signature = ?, key_id = ?", g.Epoch, g.Text, g.Signature, g.KeyID).
			Where("id = ?", g.ID).Exec(ctx); err != nil {
			return err
		}
	}
	return nil
}

// RiderGrant implements core.GrantStore.
func (s *Store) RiderGrant(ctx context.Context, accountID, id string) (core.RiderGrant, error) {
	var row riderGrantRow
	err := s.read(ctx, func(db *bun.DB) error {
		return db.NewSelect().Model(&row).Where("id = ? AND account_id = ?", id, accountID).Scan(ctx)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return core.RiderGrant{}, core.Errorf(core.CodeGrantNotFound, "grant %q not found", id)
	}
	if err != nil {
		return core.RiderGrant{}, err
	}
	return row.toGrant(), nil
}

// ListRiderGrants implements core.GrantStore.
func (s *Store) ListRiderGrants(ctx context.Context, accountID, uid string, f core.GrantFilter, now time.Time, p core.Page) ([]core.RiderGrant, int, error) {
	var rows []riderGrantRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		q := db.NewSelect().Model(&rows).Where("account_id = ?", accountID)
		if uid != "" {
			q = q.Where("mount_uid = ?", uid)
		}
		if f.RiderKey != nil {
			q = q.Where("rider_key = ?", *f.RiderKey)
		}
		if f.State != nil {
			switch *f.State {
			case core.GrantActive:
				q = q.Where(liveGrant, millis(now))
			case core.GrantRevoked:
				q = q.Where("revoked_at IS NOT NULL")
			case core.GrantExpired:
				q = q.Where("revoked_at IS NULL AND not_after <= ?", millis(now))
			}
		}
		return q.OrderExpr("created_at DESC, id DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.RiderGrant, len(rows))
	for i := range rows {
		out[i] = rows[i].toGrant()
	}
	return out, total, nil
}

// RevokeGrants implements core.GrantStore.
func (s *Store) RevokeGrants(ctx context.Context, accountID string, ids []string, riderKey string, now time.Time, sign core.GrantSigner) (revoked []*core.Event, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		revoked = nil
		var rows []riderGrantRow
		q := tx.NewSelect().Model(&rows).Where("account_id = ?", accountID)
		if riderKey != "" {
			q = q.Where("rider_key = ?", riderKey)
		} else {
			q = q.Where("id IN (?)", bun.In(ids))
		}
		if err := q.OrderExpr("mount_uid, id").Scan(ctx); err != nil {
			return err
		}
		if riderKey == "" && len(rows) == 0 && len(ids) == 1 {
			return core.Errorf(core.CodeGrantNotFound, "grant %q not found", ids[0])
		}
		byMount := map[string][]riderGrantRow{}
		var mounts []string
		for _, r := range rows {
			if r.RevokedAt.Valid || r.NotAfter <= millis(now) {
				continue // revoked or expired already: unchanged
			}
			if byMount[r.UID] == nil {
				mounts = append(mounts, r.UID)
			}
			byMount[r.UID] = append(byMount[r.UID], r)
		}
		for _, uid := range mounts {
			m, err := s.lockedMount(ctx, tx, uid)
			if err != nil {
				return err
			}
			if m == nil {
				// A deleted mount's grants ended with it: none is live.
				continue
			}
			rev, err := s.lockedRevocations(ctx, tx, uid)
			if err != nil {
				return err
			}
			done, err := s.revokeOnMount(ctx, tx, m, rev, byMount[uid], now, sign)
			if err != nil {
				return err
			}
			revoked = append(revoked, done...)
		}
		return nil
	})
	return revoked, err
}

// Revocations implements core.GrantStore.
func (s *Store) Revocations(ctx context.Context, uid string, now time.Time) (core.Revocations, error) {
	r := core.Revocations{UID: uid, Version: 1, Epoch: 1, GrantIDs: []string{}}
	var row revocationRow
	err := s.db.NewSelect().Model(&row).Where("uid = ?", uid).Scan(ctx)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return r, nil
	case err != nil:
		return core.Revocations{}, err
	}
	r.Version, r.Epoch = row.Version, row.Epoch
	err = s.db.NewSelect().Model((*riderGrantRow)(nil)).Column("id").
		Where("mount_uid = ? AND revoked_epoch = ? AND not_after > ?", uid, row.Epoch, millis(now)).
		Order("id").Scan(ctx, &r.GrantIDs)
	return r, err
}

// DatabaseTime implements core.GrantStore: the database's clock now, not
// its transaction's start.
func (s *Store) DatabaseTime(ctx context.Context) (time.Time, error) {
	query := `SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
	if s.postgres {
		query = `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	}
	var ms int64
	if err := s.db.QueryRowContext(ctx, query).Scan(&ms); err != nil {
		return time.Time{}, err
	}
	return fromMillis(ms), nil
}

// RecordOfflineUses implements core.GrantStore.
func (s *Store) RecordOfflineUses(ctx context.Context, uid string, uses []core.Command, event core.OfflineUseEvent) (stored []core.StoredUse, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		stored = make([]core.StoredUse, len(uses))
		m, err := s.lockedMount(ctx, tx, uid)
		if err != nil {
			return err
		}
		if m == nil {
			return core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
		}
		for i, c := range uses {
			row, err := toCommandRow(c)
			if err != nil {
				return err
			}
			res, err := tx.NewInsert().Model(row).On("CONFLICT (id) DO NOTHING").Exec(ctx)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil || n == 0 {
				continue // a duplicate: stored by an earlier upload
			}
			if c.Status == core.CommandExecuted {
				if _, err := tx.NewUpdate().Model((*riderGrantRow)(nil)).
					Set("uses = uses + 1").
					Set("last_used_at = CASE WHEN last_used_at IS NULL OR last_used_at < ? THEN ? ELSE last_used_at END", millis(c.GeneratedAt), millis(c.GeneratedAt)).
					Where("id = ?", c.GrantID).Exec(ctx); err != nil {
					return err
				}
			}
			e := event(c)
			e.Command = &c
			if err := s.appendEvent(ctx, tx, e, m); err != nil {
				return err
			}
			stored[i].Event = e
		}
		return nil
	})
	return stored, err
}

// endGrants ends the live grants of mount uid at now with its association
// (abandoned, expired, deleted): they are listed REVOKED, and not in the
// revocation list (the mount learns of a new owner through its next
// ASSOCIATE_OWNER, which replaces the key that signed them).
func (s *Store) endGrants(ctx context.Context, tx bun.Tx, uid string, now time.Time) error {
	_, err := tx.NewUpdate().Model((*riderGrantRow)(nil)).Set("revoked_at = ?", millis(now)).
		Where("mount_uid = ?", uid).Where(liveGrant, millis(now)).Exec(ctx)
	return err
}

// ResignGrants implements core.GrantStore.
func (s *Store) ResignGrants(ctx context.Context, uid string, now time.Time, sign core.GrantSigner) (n int, err error) {
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		n = 0
		m, err := s.lockedMount(ctx, tx, uid)
		if err != nil || m == nil || m.State != string(core.StateAssociated) {
			return err
		}
		mount := m.toMount()
		var stale []riderGrantRow
		if err := tx.NewSelect().Model(&stale).Where("mount_uid = ? AND account_id = ? AND key_id <> ?", uid, mount.OwnerID, mount.Key.ID).
			Where(liveGrant, millis(now)).Scan(ctx); err != nil {
			return err
		}
		if n = len(stale); n == 0 {
			return nil
		}
		// The same epoch, a new key.
		for _, r := range stale {
			if err := s.signAgain(ctx, tx, mount, []riderGrantRow{r}, r.Epoch, sign); err != nil {
				return err
			}
		}
		if e := core.AuditFrom(ctx); e != nil {
			e.Details = map[string]any{"grants": n}
		}
		return s.recordAudit(ctx, tx)
	})
	return n, err
}

// LastRevocation implements core.GrantStore.
func (s *Store) LastRevocation(ctx context.Context, uid string) (time.Time, error) {
	var ms int64
	err := s.db.NewSelect().Model((*revocationRow)(nil)).Column("revoked_at").Where("uid = ?", uid).Scan(ctx, &ms)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, err
	}
	if ms == 0 {
		return time.Time{}, nil
	}
	return fromMillis(ms), nil
}

// SetMountOffline implements core.GrantStore: one conditional update.
func (s *Store) SetMountOffline(ctx context.Context, accountID, uid string, o core.MountOffline) error {
	at := millis(o.At)
	_, err := s.db.NewRaw(`UPDATE mounts SET offline_revocation_version = ?, offline_log_pending = ?, offline_time_trusted = ?, offline_at = ?
		WHERE uid = ? AND owner_account_id = ? AND `+liveAssociation,
		o.RevocationVersion, o.LogPending, o.TimeTrusted, at, uid, accountID, at).Exec(ctx)
	return err
}

// MountsBehindRevocations implements core.GrantStore. It reads the mounts
// with a revocation row only: those a revocation was ever made on.
func (s *Store) MountsBehindRevocations(ctx context.Context) (int, error) {
	var n int
	err := s.db.NewRaw(`SELECT COUNT(*) FROM mount_revocations AS r JOIN mounts AS m ON m.uid = r.uid
		WHERE m.association_state = 'ASSOCIATED' AND (m.offline_at IS NULL OR m.offline_revocation_version < r.version)`).Scan(ctx, &n)
	return n, err
}
