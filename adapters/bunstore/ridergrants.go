package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"slices"
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
// (SQLite's transactions here hold the write lock already); nil when
// there is none.
func (s *Store) lockedMount(ctx context.Context, tx bun.Tx, uid string) (*mountRow, error) {
	rows, err := s.lockedMounts(ctx, tx, []string{uid})
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &rows[0], nil
}

// lockedMounts is lockedMount for each of uids that has a row, locked in
// uid order (as every caller locking several does, against deadlocks).
func (s *Store) lockedMounts(ctx context.Context, tx bun.Tx, uids []string) ([]mountRow, error) {
	var rows []mountRow
	q := tx.NewSelect().Model(&rows).Where("uid IN (?)", bun.In(uids)).Order("uid")
	if s.postgres {
		q = q.For("UPDATE")
	}
	return rows, q.Scan(ctx)
}

// lockedRevocations reads uid's revocation row, created at 1/1 when the
// mount has none, locked for the transaction.
func (s *Store) lockedRevocations(ctx context.Context, tx bun.Tx, uid string) (*revocationRow, error) {
	revs, err := s.lockedRevocationsOf(ctx, tx, []string{uid})
	if err != nil {
		return nil, err
	}
	return revs[uid], nil
}

// lockedRevocationsOf is lockedRevocations for each of uids, in two
// statements whatever their number.
func (s *Store) lockedRevocationsOf(ctx context.Context, tx bun.Tx, uids []string) (map[string]*revocationRow, error) {
	fresh := make([]revocationRow, len(uids))
	for i, uid := range uids {
		fresh[i] = revocationRow{UID: uid, Version: 1, Epoch: 1}
	}
	if _, err := tx.NewInsert().Model(&fresh).On("CONFLICT (uid) DO NOTHING").Exec(ctx); err != nil {
		return nil, err
	}
	var rows []revocationRow
	q := tx.NewSelect().Model(&rows).Where("uid IN (?)", bun.In(uids)).Order("uid")
	if s.postgres {
		q = q.For("UPDATE")
	}
	if err := q.Scan(ctx); err != nil {
		return nil, err
	}
	out := make(map[string]*revocationRow, len(rows))
	for i := range rows {
		out[rows[i].UID] = &rows[i]
	}
	return out, nil
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
			if replaced, err = s.revokeOnMounts(ctx, tx, []mountRevocation{{row: m, rev: rev, grants: same}}, now, sign); err != nil {
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

// mountRevocation is one mount's part of a revocation: its row and its
// revocation row, both locked, and the live grants revoked on it.
type mountRevocation struct {
	row    *mountRow
	rev    *revocationRow
	grants []riderGrantRow
}

// revokeOnMounts revokes each part's grants at now and appends a
// GRANT_REVOKED event and an audit entry for each: each mount's version
// rises; a list that would pass core.MaxRevocations starts a new epoch,
// whose list holds only these, and the mount's live grants are signed
// again at it. A few statements whatever the number of mounts (an epoch
// rise, rare, costs its mount more): a rider's grants on thousands of
// mounts are revoked within a request's time.
func (s *Store) revokeOnMounts(ctx context.Context, tx bun.Tx, parts []mountRevocation, now time.Time, sign core.GrantSigner) ([]*core.Event, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	uids := make([]string, len(parts))
	for i, p := range parts {
		uids[i] = p.row.UID
	}
	var listed []struct {
		UID string `bun:"mount_uid"`
		N   int    `bun:"n"`
	}
	if err := tx.NewRaw(`SELECT g.mount_uid, COUNT(*) AS n FROM rider_grants AS g JOIN mount_revocations AS r ON r.uid = g.mount_uid
		WHERE g.mount_uid IN (?) AND g.revoked_epoch = r.epoch AND g.not_after > ? GROUP BY g.mount_uid`,
		bun.In(uids), millis(now)).Scan(ctx, &listed); err != nil {
		return nil, err
	}
	listedOn := make(map[string]int, len(listed))
	for _, l := range listed {
		listedOn[l.UID] = l.N
	}
	// Every version rises as rise does, computed by the statement from the
	// rows locked above; an epoch rise is written per mount.
	if _, err := tx.NewRaw(`UPDATE mount_revocations SET version = CASE WHEN version + 1 > ? THEN version + 1 ELSE ? END, revoked_at = ?
		WHERE uid IN (?)`, millis(now), millis(now), millis(now), bun.In(uids)).Exec(ctx); err != nil {
		return nil, err
	}
	var ids []string
	rows := make(map[string]*mountRow, len(parts))
	for _, p := range parts {
		m := p.row.toMount()
		rows[m.UID] = p.row
		p.rev.Version, p.rev.RevokedAt = rise(p.rev.Version, now), millis(now)
		revokedHere := make([]string, len(p.grants))
		for i, g := range p.grants {
			revokedHere[i] = g.ID
		}
		ids = append(ids, revokedHere...)
		if listedOn[m.UID]+len(p.grants) <= core.MaxRevocations {
			continue
		}
		p.rev.Epoch = rise(p.rev.Epoch, now)
		if _, err := tx.NewUpdate().Model(p.rev).Column("epoch").WherePK().Exec(ctx); err != nil {
			return nil, err
		}
		n, err := s.resignLive(ctx, tx, &m, p.rev.Epoch, revokedHere, now, sign)
		if err != nil {
			return nil, err
		}
		if err := s.recordAudit(core.AuditEach(ctx, core.AuditGrantResign, core.AuditTarget("mount", m.UID),
			map[string]any{"epoch": p.rev.Epoch, "grants": n}), tx); err != nil {
			return nil, err
		}
	}
	// Each grant takes its mount's epoch as it now is.
	if _, err := tx.NewRaw(`UPDATE rider_grants SET revoked_at = ?,
		revoked_epoch = (SELECT r.epoch FROM mount_revocations AS r WHERE r.uid = rider_grants.mount_uid) WHERE id IN (?)`,
		millis(now), bun.In(ids)).Exec(ctx); err != nil {
		return nil, err
	}
	var (
		events  []*core.Event
		targets []string
		details []map[string]any
		latest  = map[string][]core.StateEntry{}
	)
	for _, p := range parts {
		for _, g := range p.grants {
			g.RevokedAt, g.RevokedEpoch = sql.NullInt64{Int64: millis(now), Valid: true}, sql.NullInt64{Int64: p.rev.Epoch, Valid: true}
			revoked := g.toGrant()
			events = append(events, &core.Event{Type: core.EventGrantRevoked, UID: g.UID, AccountID: g.AccountID, OccurredAt: now, Grant: &revoked})
			targets = append(targets, core.AuditTarget("grant", g.ID))
			details = append(details, map[string]any{"uid": g.UID, "riderKey": g.RiderKey})
		}
	}
	// The mounts' latest values, read per account (one for every caller).
	byAccount := map[string][]string{}
	for _, e := range events {
		byAccount[e.AccountID] = append(byAccount[e.AccountID], e.UID)
	}
	for account, of := range byAccount {
		l, err := s.latestFor(ctx, tx, account, of)
		if err != nil {
			return nil, err
		}
		maps.Copy(latest, l)
	}
	if err := s.appendEvents(ctx, tx, events, rows, latest); err != nil {
		return nil, err
	}
	return events, s.recordAuditEach(ctx, tx, core.AuditGrantRevoke, targets, details)
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

// revokeChunk is how many mounts one transaction of RevokeGrants revokes
// on: a rider with grants on thousands of mounts is revoked in
// transactions that each lock and write a bounded number of rows.
var revokeChunk = 200

// RevokeGrants implements core.GrantStore. A rider's grants on more than
// revokeChunk mounts are revoked in several transactions, in uid order:
// when one fails, the mounts before it stay revoked (their events are
// returned with the error) and a retry revokes the rest.
func (s *Store) RevokeGrants(ctx context.Context, accountID string, ids []string, riderKey string, now time.Time, sign core.GrantSigner) (revoked []*core.Event, err error) {
	// The candidates, read on the primary: a grant just created is one.
	var found []struct {
		ID  string `bun:"id"`
		UID string `bun:"mount_uid"`
	}
	q := s.db.NewSelect().Model((*riderGrantRow)(nil)).Column("id", "mount_uid").Where("account_id = ?", accountID)
	if riderKey != "" {
		q = q.Where("rider_key = ?", riderKey).Where(liveGrant, millis(now))
	} else {
		q = q.Where("id IN (?)", bun.In(ids))
	}
	if err := q.OrderExpr("mount_uid, id").Scan(ctx, &found); err != nil {
		return nil, err
	}
	if riderKey == "" && len(found) == 0 && len(ids) == 1 {
		return nil, core.Errorf(core.CodeGrantNotFound, "grant %q not found", ids[0])
	}
	var uids []string
	byMount := map[string][]string{}
	for _, f := range found {
		if byMount[f.UID] == nil {
			uids = append(uids, f.UID)
		}
		byMount[f.UID] = append(byMount[f.UID], f.ID)
	}
	for chunk := range slices.Chunk(uids, revokeChunk) {
		done, err := s.revokeOn(ctx, chunk, byMount, now, sign)
		revoked = append(revoked, done...)
		if err != nil {
			return revoked, err
		}
	}
	return revoked, nil
}

// revokeOn revokes, in one transaction, the grants byMount names on uids
// that are still live once their mounts are locked (revoked or expired
// ones stay unchanged).
func (s *Store) revokeOn(ctx context.Context, uids []string, byMount map[string][]string, now time.Time, sign core.GrantSigner) (revoked []*core.Event, err error) {
	var ids []string
	for _, uid := range uids {
		ids = append(ids, byMount[uid]...)
	}
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		revoked = nil
		mounts, err := s.lockedMounts(ctx, tx, uids)
		if err != nil {
			return err
		}
		if len(mounts) == 0 {
			// Deleted mounts' grants ended with them: none is live.
			return nil
		}
		present := make([]string, len(mounts))
		for i, m := range mounts {
			present[i] = m.UID
		}
		revs, err := s.lockedRevocationsOf(ctx, tx, present)
		if err != nil {
			return err
		}
		var live []riderGrantRow
		if err := tx.NewSelect().Model(&live).Where("id IN (?)", bun.In(ids)).Where(liveGrant, millis(now)).
			OrderExpr("mount_uid, id").Scan(ctx); err != nil {
			return err
		}
		grantsOn := map[string][]riderGrantRow{}
		for _, g := range live {
			grantsOn[g.UID] = append(grantsOn[g.UID], g)
		}
		var parts []mountRevocation
		for i := range mounts {
			if g := grantsOn[mounts[i].UID]; len(g) > 0 {
				parts = append(parts, mountRevocation{row: &mounts[i], rev: revs[mounts[i].UID], grants: g})
			}
		}
		revoked, err = s.revokeOnMounts(ctx, tx, parts, now, sign)
		return err
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

// PastDeviceKeys implements core.GrantStore: newest first.
func (s *Store) PastDeviceKeys(ctx context.Context, uid string) ([]string, error) {
	var keys []string
	err := s.db.NewRaw(`SELECT device_key FROM mount_device_keys WHERE mount_uid = ? ORDER BY kept_at DESC, device_key LIMIT ?`,
		uid, core.MaxPastDeviceKeys).Scan(ctx, &keys)
	return keys, err
}
