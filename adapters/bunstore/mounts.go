package bunstore

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"

	"github.com/mountd/mountd/core"
)

var (
	_ core.MountStore   = (*Store)(nil)
	_ core.StateStore   = (*Store)(nil)
	_ core.CommandStore = (*Store)(nil)
)

type mountRow struct {
	bun.BaseModel    `bun:"table:mounts"`
	UID              string         `bun:"uid,pk"`
	Name             string         `bun:"name"`
	SerialNumber     string         `bun:"serial_number"`
	MACAddress       string         `bun:"mac_address"`
	FirmwareRevision string         `bun:"firmware_revision"`
	SoftwareRevision string         `bun:"software_revision"`
	ModelNumber      string         `bun:"model_number"`
	State            string         `bun:"association_state"`
	OwnerID          sql.NullString `bun:"owner_account_id"`
	ExpiredOwnerID   sql.NullString `bun:"expired_owner_id"`
	IdleDeadline     sql.NullInt64  `bun:"idle_deadline"`
	AssociatedAt     sql.NullInt64  `bun:"associated_at"`
	KeyID            sql.NullString `bun:"key_id"`
	PublicKey        sql.NullString `bun:"public_key"`
	SealedPrivateKey sql.NullString `bun:"sealed_private_key"`
	CreatedAt        int64          `bun:"created_at"`
	UpdatedAt        int64          `bun:"updated_at"`
	DevicePublicKey  sql.NullString `bun:"device_public_key"`
	// LastSeenAt and OfflineAnnounced are presence (docs/api.md,
	// "Presence and alarms").
	LastSeenAt       sql.NullInt64 `bun:"last_seen_at"`
	OfflineAnnounced bool          `bun:"offline_announced"`
	// RevisionCounter and RevisionKey are the counter and device key of
	// the verified report that softwareRevision follows (docs/api.md,
	// "The truth from the mount").
	RevisionCounter sql.NullInt64  `bun:"revision_counter"`
	RevisionKey     sql.NullString `bun:"revision_key"`
	// AssociationStartedAt is NULL for associations begun before it.
	AssociationStartedAt sql.NullInt64 `bun:"association_started_at"`
	// Offline* are Mount.Offline; OfflineAt NULL: none told.
	OfflineRevocationVersion sql.NullInt64 `bun:"offline_revocation_version"`
	OfflineLogPending        sql.NullInt64 `bun:"offline_log_pending"`
	OfflineTimeTrusted       sql.NullBool  `bun:"offline_time_trusted"`
	OfflineAt                sql.NullInt64 `bun:"offline_at"`
	// The owner's latest values the fleet filter compares (latestColumns):
	// written by SQL alone, never read into a Mount.
	BatteryLevel   sql.NullFloat64 `bun:"battery_level"`
	CPUTemperature sql.NullFloat64 `bun:"cpu_temperature"`
	MountLocked    sql.NullFloat64 `bun:"mount_locked"`
	HelmetMounted  sql.NullFloat64 `bun:"helmet_mounted"`
}

func (r *mountRow) toMount() core.Mount {
	m := core.Mount{
		UID: r.UID, Name: r.Name, SerialNumber: r.SerialNumber, MACAddress: r.MACAddress,
		FirmwareRevision: r.FirmwareRevision, SoftwareRevision: r.SoftwareRevision, ModelNumber: r.ModelNumber,
		State: core.AssociationState(r.State), OwnerID: r.OwnerID.String, ExpiredOwnerID: r.ExpiredOwnerID.String,
		CreatedAt: fromMillis(r.CreatedAt), UpdatedAt: fromMillis(r.UpdatedAt), DevicePublicKey: r.DevicePublicKey.String,
	}
	if r.LastSeenAt.Valid {
		m.LastSeenAt = fromMillis(r.LastSeenAt.Int64)
	}
	if r.AssociationStartedAt.Valid {
		m.AssociationStartedAt = fromMillis(r.AssociationStartedAt.Int64)
	}
	m.Offline = r.offline()
	if r.IdleDeadline.Valid {
		m.IdleDeadline = fromMillis(r.IdleDeadline.Int64)
	}
	if r.AssociatedAt.Valid {
		m.AssociatedAt = fromMillis(r.AssociatedAt.Int64)
	}
	if r.KeyID.Valid {
		pub, _ := hex.DecodeString(r.PublicKey.String)
		m.Key = core.MountKey{ID: r.KeyID.String, PublicKey: pub, SealedPrivateKey: r.SealedPrivateKey.String}
	}
	return m
}

// offline is Mount.Offline from r's Offline* columns.
func (r *mountRow) offline() *core.MountOffline {
	if !r.OfflineAt.Valid {
		return nil
	}
	return &core.MountOffline{RevocationVersion: r.OfflineRevocationVersion.Int64, LogPending: int(r.OfflineLogPending.Int64),
		TimeTrusted: r.OfflineTimeTrusted.Bool, At: fromMillis(r.OfflineAt.Int64)}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ClaimMount implements core.MountStore: an insert for an unknown uid, else
// one conditional update that only an INACTIVE mount or the owner's passes;
// the event goes in the same transaction.
func (s *Store) ClaimMount(ctx context.Context, c core.Claim, e *core.Event) (core.Mount, error) {
	f := c.Fields
	var cmd *commandRow
	if c.Command != nil {
		var err error
		if cmd, err = toCommandRow(*c.Command); err != nil {
			return core.Mount{}, err
		}
	}
	for attempt := 0; attempt < 3; attempt++ {
		var (
			out     mountRow
			claimed bool
		)
		row := &mountRow{
			UID: c.UID, Name: deref(f.Name), SerialNumber: deref(f.SerialNumber), MACAddress: deref(f.MACAddress),
			FirmwareRevision: deref(f.FirmwareRevision), SoftwareRevision: deref(f.SoftwareRevision), ModelNumber: deref(f.ModelNumber),
			State:            string(core.StateIdle),
			OwnerID:          sql.NullString{String: c.AccountID, Valid: true},
			IdleDeadline:     sql.NullInt64{Int64: millis(c.Deadline), Valid: true},
			KeyID:            sql.NullString{String: c.Key.ID, Valid: true},
			PublicKey:        sql.NullString{String: hex.EncodeToString(c.Key.PublicKey), Valid: true},
			SealedPrivateKey: sql.NullString{String: c.Key.SealedPrivateKey, Valid: true},
			CreatedAt:        millis(c.Now), UpdatedAt: millis(c.Now),
			DevicePublicKey:      sql.NullString{String: deref(f.DevicePublicKey), Valid: f.DevicePublicKey != nil},
			AssociationStartedAt: sql.NullInt64{Int64: millis(c.Now), Valid: true},
		}
		pgInsert := s.postgres && e != nil
		if pgInsert {
			// The insert, its command and its event in one statement,
			// atomic as its own transaction (no BEGIN and COMMIT round
			// trips); the command and the event only if the uid was new.
			// A new row has no latest values: the foreign key took any of
			// an earlier mount of this uid.
			with := `INSERT INTO mounts (uid, name, serial_number,
					mac_address, firmware_revision, software_revision, model_number, association_state, owner_account_id,
					idle_deadline, key_id, public_key, sealed_private_key, created_at, updated_at, device_public_key,
					association_started_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (uid) DO NOTHING RETURNING uid`
			args := []any{row.UID, row.Name, row.SerialNumber, row.MACAddress, row.FirmwareRevision, row.SoftwareRevision,
				row.ModelNumber, row.State, row.OwnerID, row.IdleDeadline, row.KeyID, row.PublicKey, row.SealedPrivateKey,
				row.CreatedAt, row.UpdatedAt, row.DevicePublicKey, row.AssociationStartedAt}
			if cmd != nil {
				// After the mount's insert (closed by appendEventGuarded's
				// parenthesis), from its returned row.
				with += `), claim_command AS (INSERT INTO commands (id, mount_uid, account_id, code, payload,
						signed_token, data, generated_at, issued_by, status, status_at, expires_at, issued_by_name)
					SELECT ?, uid, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM before_event`
				args = append(args, cmd.ID, cmd.AccountID, cmd.Code, cmd.Payload, cmd.SignedToken, cmd.Data,
					cmd.GeneratedAt, cmd.IssuedBy, cmd.Status, cmd.StatusAt, cmd.ExpiresAt, cmd.IssuedByName)
			}
			// The claim's key among the uid's hand-over keys (a uid
			// deleted before has some), only if the uid was new. The
			// prune sees the keys before this one: it keeps one more.
			with += `), claim_key AS (INSERT INTO handover_keys (mount_uid, key_id, public_key, sealed_private_key, account_id, created_at)
					SELECT uid, ?, ?, ?, ?, ? FROM before_event
				), claim_key_prune AS (` + pruneHandoverKeys + ` AND EXISTS (SELECT 1 FROM before_event)`
			args = append(args, row.KeyID, row.PublicKey, row.SealedPrivateKey, c.AccountID, row.CreatedAt,
				c.UID, c.UID, core.MaxHandoverKeys-1)
			if a := core.AuditFrom(ctx); a != nil {
				// The claim's audit entry in the same statement, as its
				// command: only if the uid was new.
				exprs, values, err := auditValues(a)
				if err != nil {
					return core.Mount{}, err
				}
				with += `), claim_audit AS (INSERT INTO audit_log (` + auditColumns + `)
					SELECT ` + exprs + ` FROM before_event`
				args = append(args, values...)
			}
			inserted, err := s.appendEventGuarded(ctx, s.db, e, row, nil, with, args, true)
			if err != nil {
				return core.Mount{}, err
			}
			if inserted {
				return row.toMount(), nil
			}
		}
		err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
			if !pgInsert { // else the uid is taken: the conditional update below
				res, err := tx.NewInsert().Model(row).On("CONFLICT (uid) DO NOTHING").Exec(ctx)
				if err != nil {
					return err
				}
				if n, _ := res.RowsAffected(); n == 1 {
					out, claimed = *row, true
					if err := s.keepHandoverKey(ctx, tx, c); err != nil {
						return err
					}
					if err := s.insertClaimCommand(ctx, tx, cmd); err != nil {
						return err
					}
					if e != nil {
						// A new row has no latest values: the foreign key took any
						// of an earlier mount of this uid with it. No read for them.
						if err := s.appendEventWith(ctx, tx, e, &out, nil, "", nil); err != nil {
							return err
						}
					}
					return s.recordAudit(ctx, tx)
				}
			}
			// Taking an INACTIVE mount starts a new association, whose
			// latest values have no verified entry yet: those of the
			// account's former associations no longer outrank its
			// unverified ones (core.Newer; docs/api.md, "The truth from the
			// mount").
			if _, err := tx.NewRaw(`UPDATE mount_latest_states SET verified = FALSE
				WHERE mount_uid = ? AND account_id = ? AND verified
					AND EXISTS (SELECT 1 FROM mounts WHERE uid = ? AND association_state = 'INACTIVE')`,
				c.UID, c.AccountID, c.UID).Exec(ctx); err != nil {
				return err
			}
			// Taking an INACTIVE mount starts a new association: the former
			// owner's name goes, the device's own fields stay, but not its
			// device key: a key lives and dies with the association that
			// pinned it (docs/api.md, "The truth from the mount"), so the new
			// one starts with the key its claim brings, or none. The owner's
			// claim during its own association keeps it unless a new one
			// comes.
			latestSets, latestArgs := latestColumnsRead(s.postgres, core.StateCodes, "association_state = 'INACTIVE'", c.UID, c.AccountID)
			err := tx.NewRaw(`UPDATE mounts SET
					name = CASE WHEN association_state = 'INACTIVE' THEN COALESCE(?, '') ELSE COALESCE(?, name) END,
					last_seen_at = CASE WHEN association_state = 'INACTIVE' THEN NULL ELSE last_seen_at END,
					offline_at = CASE WHEN association_state = 'INACTIVE' THEN NULL ELSE offline_at END,
					offline_announced = CASE WHEN association_state = 'INACTIVE' THEN FALSE ELSE offline_announced END,
					serial_number = COALESCE(?, serial_number),
					mac_address = COALESCE(?, mac_address),
					firmware_revision = COALESCE(?, firmware_revision),
					software_revision = COALESCE(?, software_revision),
					model_number = COALESCE(?, model_number),
					device_public_key = CASE WHEN association_state = 'INACTIVE' THEN ? ELSE COALESCE(?, device_public_key) END,
					association_started_at = CASE WHEN association_state = 'INACTIVE' THEN ? ELSE association_started_at END,
					idle_deadline = CASE WHEN association_state = 'ASSOCIATED' THEN NULL ELSE ? END,
					associated_at = CASE WHEN association_state = 'ASSOCIATED' THEN associated_at ELSE NULL END,
					association_state = CASE WHEN association_state = 'ASSOCIATED' THEN 'ASSOCIATED' ELSE 'IDLE' END,
					owner_account_id = ?,
					expired_owner_id = NULL,
					key_id = ?, public_key = ?, sealed_private_key = ?,
					updated_at = ?,
					`+latestSets+`
				WHERE uid = ? AND (association_state = 'INACTIVE' OR owner_account_id = ?)
					AND NOT (association_state = 'IDLE' AND idle_deadline <= ?)
				RETURNING *`,
				slices.Concat([]any{f.Name, f.Name, f.SerialNumber, f.MACAddress, f.FirmwareRevision, f.SoftwareRevision, f.ModelNumber,
					f.DevicePublicKey, f.DevicePublicKey, millis(c.Now), millis(c.Deadline), c.AccountID, c.Key.ID, hex.EncodeToString(c.Key.PublicKey), c.Key.SealedPrivateKey,
					millis(c.Now)}, latestArgs, []any{c.UID, c.AccountID, millis(c.Now)})...).Scan(ctx, &out)
			if err == sql.ErrNoRows {
				return nil
			}
			if err != nil {
				return err
			}
			claimed = true
			// Links left by another account (none should survive its
			// abandon or expiry) are never signed into this owner's commands.
			if err := s.unlinkOtherAccounts(ctx, tx, c.UID, c.AccountID); err != nil {
				return err
			}
			if err := s.keepHandoverKey(ctx, tx, c); err != nil {
				return err
			}
			if err := s.insertClaimCommand(ctx, tx, cmd); err != nil {
				return err
			}
			if err := s.appendEvent(ctx, tx, e, &out); err != nil {
				return err
			}
			if err := s.leaveRollouts(ctx, tx, e, c.UID, c.AccountID, c.Now); err != nil {
				return err
			}
			return s.recordAudit(ctx, tx)
		})
		if err != nil {
			return core.Mount{}, err
		}
		if claimed {
			return out.toMount(), nil
		}
		exists, err := s.db.NewSelect().Model((*mountRow)(nil)).Where("uid = ?", c.UID).Exists(ctx)
		if err != nil {
			return core.Mount{}, err
		}
		if exists {
			return core.Mount{}, core.Errorf(core.CodeMountAlreadyOwned, "mount %q belongs to another account", c.UID)
		}
		// Deleted between the insert and the update: try again.
	}
	return core.Mount{}, core.Errorf(core.CodeConflict, "mount %q changed concurrently; retry", c.UID)
}

// insertClaimCommand stores a claim's command (if any) in its transaction.
func (s *Store) insertClaimCommand(ctx context.Context, tx bun.Tx, cmd *commandRow) error {
	if cmd == nil {
		return nil
	}
	// A copy: a retried claim inserts it afresh (the row's seq is set by the insert).
	row := *cmd
	_, err := tx.NewInsert().Model(&row).Exec(ctx)
	return err
}

// ConfirmAssociation implements core.MountStore.
func (s *Store) ConfirmAssociation(ctx context.Context, uid, accountID string, now time.Time, e *core.Event) (core.Mount, bool, error) {
	var out mountRow
	const confirm = `UPDATE mounts SET association_state = 'ASSOCIATED', associated_at = ?, idle_deadline = NULL, updated_at = ?
			WHERE uid = ? AND association_state = 'IDLE' AND owner_account_id = ? AND idle_deadline > ?
			RETURNING *`
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.postgres && e != nil {
			// The owner's latest values come with the updated row: one
			// round trip fewer than reading them for the event after it.
			var rows []mountLatestRow
			err := tx.NewRaw(`WITH u AS (`+confirm+`) SELECT `+s.columns(reflect.TypeFor[mountRow](), "u")+`,
					l.code AS latest_code, l.occurred_at AS latest_occurred_at, l.value AS latest_value, l.verified AS latest_verified
				FROM u LEFT JOIN mount_latest_states AS l ON l.mount_uid = u.uid AND l.account_id = u.owner_account_id`,
				millis(now), millis(now), uid, accountID, millis(now)).Scan(ctx, &rows)
			if err != nil {
				return err
			}
			if len(rows) == 0 {
				return sql.ErrNoRows
			}
			out = rows[0].mountRow
			if err := s.appendEventWith(ctx, tx, e, &out, latestOf(rows), "", nil); err != nil {
				return err
			}
			if err := s.confirmHandoverKey(ctx, tx, uid, out.KeyID.String, now); err != nil {
				return err
			}
			return s.recordAudit(ctx, tx)
		}
		err := tx.NewRaw(confirm, millis(now), millis(now), uid, accountID, millis(now)).Scan(ctx, &out)
		if err != nil {
			return err
		}
		if err := s.appendEvent(ctx, tx, e, &out); err != nil {
			return err
		}
		if err := s.confirmHandoverKey(ctx, tx, uid, out.KeyID.String, now); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err == nil {
		return out.toMount(), true, nil
	}
	if err != sql.ErrNoRows {
		return core.Mount{}, false, err
	}
	m, err := s.Mount(ctx, uid)
	return m, false, err
}

// ExpireAssociation implements core.MountStore. The lapsed association's
// tag links go with it, in the same transaction.
func (s *Store) ExpireAssociation(ctx context.Context, uid string, now time.Time, e *core.Event) (core.Mount, bool, error) {
	// Most calls find nothing to expire (every POST /mounts asks first):
	// one read answers that, where the update's transaction cost three
	// round trips and, on SQLite, the writer's turn. The update below
	// checks the same condition again.
	lapsed, err := s.db.NewSelect().Model((*mountRow)(nil)).
		Where("uid = ? AND association_state = 'IDLE' AND idle_deadline <= ?", uid, millis(now)).Exists(ctx)
	if err != nil || !lapsed {
		return core.Mount{}, false, err
	}
	var out mountRow
	expired := false
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(`UPDATE mounts SET association_state = 'INACTIVE', expired_owner_id = owner_account_id,
				owner_account_id = NULL, idle_deadline = NULL, key_id = NULL, public_key = NULL, sealed_private_key = NULL,
				last_seen_at = NULL, offline_announced = FALSE, offline_at = NULL, updated_at = ?
			WHERE uid = ? AND association_state = 'IDLE' AND idle_deadline <= ?
			RETURNING *`, millis(now), uid, millis(now)).Scan(ctx, &out)
		if err == sql.ErrNoRows {
			return nil
		}
		if err != nil {
			return err
		}
		expired = true
		if err := s.unlinkOtherAccounts(ctx, tx, uid, ""); err != nil {
			return err
		}
		if e != nil {
			e.AccountID = out.ExpiredOwnerID.String
		}
		if err := s.appendEvent(ctx, tx, e, &out); err != nil {
			return err
		}
		if err := s.endGrants(ctx, tx, uid, now); err != nil {
			return err
		}
		return s.leaveRollouts(ctx, tx, e, uid, "", now)
	})
	if err != nil || !expired {
		return core.Mount{}, false, err
	}
	return out.toMount(), true, nil
}

// AbandonMount implements core.MountStore. The association's tag links go
// with it, in the same transaction; its history stays, scoped to accountID.
func (s *Store) AbandonMount(ctx context.Context, uid, accountID string, now time.Time, e *core.Event) (core.Mount, error) {
	var out mountRow
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(`UPDATE mounts SET association_state = 'INACTIVE', expired_owner_id = NULL,
				owner_account_id = NULL, idle_deadline = NULL, associated_at = NULL, key_id = NULL, public_key = NULL, sealed_private_key = NULL,
				last_seen_at = NULL, offline_announced = FALSE, offline_at = NULL, updated_at = ?
			WHERE uid = ? AND owner_account_id = ? AND `+liveAssociation+`
			RETURNING *`, millis(now), uid, accountID, millis(now)).Scan(ctx, &out)
		if err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
		}
		if err := s.unlinkOtherAccounts(ctx, tx, uid, ""); err != nil {
			return err
		}
		if err := s.appendEvent(ctx, tx, e, &out); err != nil {
			return err
		}
		if err := s.endGrants(ctx, tx, uid, now); err != nil {
			return err
		}
		if err := s.leaveRollouts(ctx, tx, e, uid, "", now); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Mount{}, err
	}
	return out.toMount(), nil
}

// leaveRollouts fails the mount's rollout targets of the accounts it left
// (every account but keep) after its row was changed in tx, and hangs
// their events on e (when given) to be woken with it.
func (s *Store) leaveRollouts(ctx context.Context, tx bun.Tx, e *core.Event, uid, keep string, now time.Time) error {
	events, err := s.leaveRolloutTargets(ctx, tx, uid, keep, now)
	if err != nil {
		return err
	}
	if e != nil {
		e.Then = events
	}
	return nil
}

// liveAssociation is the condition on a mount row that an association is in
// force at the instant given as its one argument: ASSOCIATED, or IDLE
// inside its window. A lapsed IDLE row counts as INACTIVE whether or not
// the expiry worker has turned it yet.
const liveAssociation = `(association_state = 'ASSOCIATED' OR (association_state = 'IDLE' AND idle_deadline > ?))`

// unlinkOtherAccounts removes the mount's tag links of every account but
// keep ("" removes them all).
func (s *Store) unlinkOtherAccounts(ctx context.Context, db bun.IDB, uid, keep string) error {
	_, err := db.NewDelete().Model((*tagLinkRow)(nil)).Where("mount_uid = ? AND account_id <> ?", uid, keep).Exec(ctx)
	return err
}

// DeleteMount implements core.MountStore; the schema cascades to states,
// tag links and commands.
func (s *Store) DeleteMount(ctx context.Context, uid, accountID string, e *core.Event) (core.Mount, error) {
	var out mountRow
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(`DELETE FROM mounts WHERE uid = ? AND owner_account_id = ? RETURNING *`, uid, accountID).Scan(ctx, &out)
		if err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
		}
		if err := s.appendEvent(ctx, tx, e, &out); err != nil {
			return err
		}
		now := time.Now()
		if e != nil && !e.OccurredAt.IsZero() {
			now = e.OccurredAt
		}
		if err := s.endGrants(ctx, tx, uid, now); err != nil {
			return err
		}
		if err := s.leaveRollouts(ctx, tx, e, uid, "", now); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Mount{}, err
	}
	return out.toMount(), nil
}

// RekeyMount implements core.MountStore.
func (s *Store) RekeyMount(ctx context.Context, uid, accountID string, key core.MountKey, now time.Time) (core.Mount, error) {
	var out mountRow
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(`UPDATE mounts SET key_id = ?, public_key = ?, sealed_private_key = ?, updated_at = ?
			WHERE uid = ? AND owner_account_id = ? AND `+liveAssociation+`
			RETURNING *`, key.ID, hex.EncodeToString(key.PublicKey), key.SealedPrivateKey, millis(now), uid, accountID, millis(now)).Scan(ctx, &out)
	})
	if err != nil {
		return core.Mount{}, translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
	}
	return out.toMount(), nil
}

// UpdateMount implements core.MountStore.
func (s *Store) UpdateMount(ctx context.Context, uid, accountID string, u core.MountUpdate, now time.Time) (core.Mount, error) {
	var out mountRow
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		return db.NewRaw(`UPDATE mounts SET name = COALESCE(?, name), software_revision = COALESCE(?, software_revision),
				updated_at = CASE WHEN ? THEN ? ELSE updated_at END
			WHERE uid = ? AND owner_account_id = ? AND `+liveAssociation+`
			RETURNING *`, u.Name, u.SoftwareRevision, u.Name != nil || u.SoftwareRevision != nil, millis(now), uid, accountID, millis(now)).Scan(ctx, &out)
	})
	if err != nil {
		return core.Mount{}, translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
	}
	return out.toMount(), nil
}

// Mount implements core.MountStore.
func (s *Store) Mount(ctx context.Context, uid string) (core.Mount, error) {
	var row mountRow
	if err := s.db.NewSelect().Model(&row).Where("uid = ?", uid).Scan(ctx); err != nil {
		return core.Mount{}, translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
	}
	return row.toMount(), nil
}

// mountLatestRow is a mount row joined with one of its latest states; a
// mount without states comes as one row whose latest columns are NULL.
type mountLatestRow struct {
	mountRow
	LatestCode       sql.NullString `bun:"latest_code"`
	LatestOccurredAt sql.NullInt64  `bun:"latest_occurred_at"`
	LatestValue      sql.NullString `bun:"latest_value"`
	LatestVerified   sql.NullBool   `bun:"latest_verified"`
}

func (s *Store) mountWithLatestSQL(param string) string {
	return `SELECT ` + s.columns(reflect.TypeFor[mountRow](), "m") + `,
		l.code AS latest_code, l.occurred_at AS latest_occurred_at, l.value AS latest_value, l.verified AS latest_verified
		FROM mounts AS m LEFT JOIN mount_latest_states AS l ON l.mount_uid = m.uid AND l.account_id = m.owner_account_id
		WHERE m.uid = ` + param
}

// mountReadFields are the columns toMount reads, each with its field of r:
// the read's statement and its scan targets come from this one list. It
// names neither the fleet filter's copies of the latest values nor the
// report's revision counter.
func mountReadFields(r *mountRow) [mountReadColumns]struct {
	column string
	field  any
} {
	return [...]struct {
		column string
		field  any
	}{{"uid", &r.UID}, {"name", &r.Name}, {"serial_number", &r.SerialNumber}, {"mac_address", &r.MACAddress},
		{"firmware_revision", &r.FirmwareRevision}, {"software_revision", &r.SoftwareRevision}, {"model_number", &r.ModelNumber},
		{"association_state", &r.State}, {"owner_account_id", &r.OwnerID}, {"expired_owner_id", &r.ExpiredOwnerID},
		{"idle_deadline", &r.IdleDeadline}, {"associated_at", &r.AssociatedAt}, {"key_id", &r.KeyID}, {"public_key", &r.PublicKey},
		{"sealed_private_key", &r.SealedPrivateKey}, {"created_at", &r.CreatedAt}, {"updated_at", &r.UpdatedAt},
		{"device_public_key", &r.DevicePublicKey}, {"last_seen_at", &r.LastSeenAt}, {"association_started_at", &r.AssociationStartedAt},
		{"offline_revocation_version", &r.OfflineRevocationVersion}, {"offline_log_pending", &r.OfflineLogPending},
		{"offline_time_trusted", &r.OfflineTimeTrusted}, {"offline_at", &r.OfflineAt}}
}

// mountReadColumns is the number of mountReadFields.
const mountReadColumns = 24

// mountRead is one row of mountReadSQL, scanned by hand: bun's reflective
// scan into a slice of joined rows was 8 % of a GET's CPU and a fifth of
// its bytes (docs/performance.md, "GET /api/v1/mounts/{uid}: the most
// requests/s"). One allocation holds the row and its scan targets; each
// joined row scans the same mount columns again, over the same values.
type mountRead struct {
	mountRow
	code, value sql.NullString
	occurredAt  sql.NullInt64
	verified    sql.NullBool
	dest        [mountReadColumns + 4]any
}

func newMountRead() *mountRead {
	r := &mountRead{}
	fields := mountReadFields(&r.mountRow)
	for i, f := range fields {
		r.dest[i] = f.field
	}
	r.dest[mountReadColumns], r.dest[mountReadColumns+1], r.dest[mountReadColumns+2], r.dest[mountReadColumns+3] = &r.code, &r.occurredAt, &r.value, &r.verified
	return r
}

// mountReadSQL is MountWithLatest's statement: the columns toMount reads
// and the latest values, one row per latest code (one row when none).
func (s *Store) mountReadSQL() string {
	var b strings.Builder
	b.WriteString("SELECT ")
	for _, f := range mountReadFields(&mountRow{}) {
		b.WriteString("m." + f.column + ", ")
	}
	b.WriteString(`l.code, l.occurred_at, l.value, l.verified
		FROM mounts AS m LEFT JOIN mount_latest_states AS l ON l.mount_uid = m.uid AND l.account_id = m.owner_account_id
		WHERE m.uid = ` + s.param(1))
	return b.String()
}

// MountWithLatest implements core.MountStore in one prepared statement: a
// mount has one latest row per code, a handful, so the join repeats the
// mount's columns a few times rather than costing a second round trip.
func (s *Store) MountWithLatest(ctx context.Context, uid string) (core.Mount, error) {
	var (
		r      *mountRead
		found  bool
		latest []core.StateEntry // nil when there is none, as elsewhere
	)
	err := s.read(ctx, func(db *bun.DB) error {
		r, found, latest = newMountRead(), false, nil
		st, err := s.preparedIn(ctx, db, s.sql.mountRead)
		if err != nil {
			return err
		}
		s.queries.Add(1)
		rows, err := st.QueryContext(ctx, uid)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := rows.Scan(r.dest[:]...); err != nil {
				return err
			}
			found = true
			if r.code.Valid {
				if latest == nil {
					latest = make([]core.StateEntry, 0, len(core.StateCodes))
				}
				latest = append(latest, core.StateEntry{Code: core.StateCode(r.code.String), Value: r.value.String,
					OccurredAt: fromMillis(r.occurredAt.Int64), Verified: r.verified.Bool})
			}
		}
		return rows.Err()
	})
	if err != nil {
		return core.Mount{}, err
	}
	if !found {
		return core.Mount{}, core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
	}
	m := r.toMount()
	m.Latest = core.ComputeLatest(latest)
	return m, nil
}

// ListMounts implements core.MountStore. The page's latest states come in a
// second query, so a page costs two queries whatever its size.
func (s *Store) ListMounts(ctx context.Context, accountID string, f core.MountFilter, p core.Page, now time.Time) ([]core.Mount, int, error) {
	var (
		rows   []mountRow
		total  int
		latest map[string][]core.StateEntry
	)
	// The page and its latest values from one database, so that they agree.
	err := s.read(ctx, func(db *bun.DB) (err error) {
		rows, latest = nil, nil
		q := db.NewSelect().Model(&rows).
			Where("owner_account_id = ?", accountID).
			Where(liveAssociation, millis(now))
		if total, err = filterMounts(q, f).Order("uid").Limit(p.PageSize).Offset(p.Offset()).ScanAndCount(ctx); err != nil || len(rows) == 0 {
			return err
		}
		uids := make([]string, len(rows))
		for i := range rows {
			uids[i] = rows[i].UID
		}
		latest, err = s.latestFor(ctx, db, accountID, uids)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	mounts := make([]core.Mount, len(rows))
	for i := range rows {
		mounts[i] = rows[i].toMount()
		mounts[i].Latest = core.ComputeLatest(latest[mounts[i].UID])
	}
	return mounts, total, nil
}

// filterMounts narrows a select of the account's mounts by f, fleet filter
// included: every listing of mounts by a filter (ListMounts, EachMount, a
// job's targets) goes through it. Its column names are the mounts table's
// alone, unqualified, so it serves a select joined with the latest states
// (EachMount) under any alias of mounts; a select joining a table with a
// column of the same name cannot use it.
func filterMounts(q *bun.SelectQuery, f core.MountFilter) *bun.SelectQuery {
	if f.MACAddress != nil {
		q = q.Where("mac_address = ?", strings.ToUpper(*f.MACAddress))
	}
	if f.MountUID != nil {
		q = q.Where("uid = ?", *f.MountUID)
	}
	if f.SerialNumber != nil {
		q = q.Where("serial_number = ?", *f.SerialNumber)
	}
	if f.UIDs != nil {
		q = q.Where("uid IN (?)", bun.In(f.UIDs))
	}
	if f.Expr != nil {
		sql, args := translateFilter(f.Expr, f.OfflineCut, q.Dialect().Name() == dialect.PG)
		q = q.Where(sql, args...)
	}
	return q
}

// IdleDeadlines implements core.MountStore.
func (s *Store) IdleDeadlines(ctx context.Context) ([]core.Deadline, error) {
	var rows []mountRow
	if err := s.db.NewSelect().Model(&rows).Column("uid", "idle_deadline").
		Where("association_state = 'IDLE'").Where("idle_deadline IS NOT NULL").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]core.Deadline, len(rows))
	for i, r := range rows {
		out[i] = core.Deadline{UID: r.UID, At: fromMillis(r.IdleDeadline.Int64)}
	}
	return out, nil
}

// LapsedIdle implements core.MountStore.
func (s *Store) LapsedIdle(ctx context.Context, now time.Time, limit int) ([]string, error) {
	var uids []string
	err := s.db.NewSelect().Model((*mountRow)(nil)).Column("uid").
		Where("association_state = 'IDLE' AND idle_deadline <= ?", millis(now)).
		OrderExpr("idle_deadline").Limit(limit).Scan(ctx, &uids)
	return uids, err
}

// MountCounts counts the mounts by association state (the mountd_mounts
// metric).
func (s *Store) MountCounts(ctx context.Context) (map[string]int, error) {
	var rows []struct {
		State string `bun:"association_state"`
		N     int    `bun:"n"`
	}
	if err := s.db.NewRaw(`SELECT association_state, count(*) AS n FROM mounts GROUP BY association_state`).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	counts := make(map[string]int, len(rows))
	for _, r := range rows {
		counts[r.State] = r.N
	}
	return counts, nil
}
