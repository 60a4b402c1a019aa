package bunstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.ExportStore = (*Store)(nil)

// EachMount implements core.ExportStore: one statement, each mount joined
// with its latest entry of each code (a primary-key lookup per code), so a
// mount is one row, scanned from the driver's cursor as it comes.
func (s *Store) EachMount(ctx context.Context, accountID string, f core.MountFilter, now time.Time, yield func(core.Mount) error) (err error) {
	q := s.streamDB(ctx).NewSelect().TableExpr("mounts AS m").
		ColumnExpr("m.uid, m.name, m.serial_number, m.mac_address, m.firmware_revision, m.software_revision, m.model_number").
		ColumnExpr("m.association_state, m.associated_at, m.device_public_key, m.last_seen_at").
		ColumnExpr("m.offline_revocation_version, m.offline_log_pending, m.offline_time_trusted, m.offline_at")
	for i, code := range core.StateCodes {
		q = q.ColumnExpr(fmt.Sprintf("l%d.value, l%d.occurred_at, l%d.verified", i, i, i)).
			Join(fmt.Sprintf("LEFT JOIN mount_latest_states AS l%d ON l%d.mount_uid = m.uid AND l%d.account_id = m.owner_account_id AND l%d.code = ?", i, i, i, i), string(code))
	}
	q = q.Where("owner_account_id = ?", accountID).Where(liveAssociation, millis(now))
	rows, err := filterMounts(q, f).OrderExpr("m.uid").Rows(ctx)
	if err != nil {
		return err
	}
	defer closeRows(rows, &err)
	var (
		m            core.Mount
		state        string
		associatedAt sql.NullInt64
		deviceKey    sql.NullString
		lastSeen     sql.NullInt64
		off          mountRow // its Offline* fields
		values       = make([]sql.NullString, len(core.StateCodes))
		occurred     = make([]sql.NullInt64, len(core.StateCodes))
		verified     = make([]sql.NullBool, len(core.StateCodes))
		latest       = make([]core.StateEntry, 0, len(core.StateCodes))
	)
	dest := []any{&m.UID, &m.Name, &m.SerialNumber, &m.MACAddress, &m.FirmwareRevision, &m.SoftwareRevision,
		&m.ModelNumber, &state, &associatedAt, &deviceKey, &lastSeen,
		&off.OfflineRevocationVersion, &off.OfflineLogPending, &off.OfflineTimeTrusted, &off.OfflineAt}
	for i := range core.StateCodes {
		dest = append(dest, &values[i], &occurred[i], &verified[i])
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		m.State, m.OwnerID, m.AssociatedAt = core.AssociationState(state), accountID, time.Time{}
		m.DevicePublicKey, m.LastSeenAt = deviceKey.String, time.Time{}
		if lastSeen.Valid {
			m.LastSeenAt = fromMillis(lastSeen.Int64)
		}
		if associatedAt.Valid {
			m.AssociatedAt = fromMillis(associatedAt.Int64)
		}
		m.Offline = off.offline()
		latest = latest[:0]
		for i, code := range core.StateCodes {
			if values[i].Valid {
				latest = append(latest, core.StateEntry{Code: code, Value: values[i].String, OccurredAt: fromMillis(occurred[i].Int64),
					Verified: verified[i].Bool})
			}
		}
		m.Latest = core.ComputeLatest(latest)
		if err := yield(m); err != nil {
			return err
		}
	}
	return rows.Err()
}

// EachState implements core.ExportStore: the history index read in
// order, scanned row by row from the driver's cursor.
func (s *Store) EachState(ctx context.Context, uid, accountID string, f core.StateFilter, yield func(core.StateEntry) error) (err error) {
	q := s.streamDB(ctx).NewSelect().TableExpr("mount_states").ColumnExpr("code, value, occurred_at, received_at, verified").
		Where("mount_uid = ? AND account_id = ?", uid, accountID)
	rows, err := filterStates(q, f).OrderExpr("occurred_at, code, value").Rows(ctx)
	if err != nil {
		return err
	}
	defer closeRows(rows, &err)
	for rows.Next() {
		var (
			code               sql.RawBytes
			e                  core.StateEntry
			occurred, received int64
		)
		if err := rows.Scan(&code, &e.Value, &occurred, &received, &e.Verified); err != nil {
			return err
		}
		e.Code = internCode(code)
		e.OccurredAt, e.ReceivedAt = fromMillis(occurred), fromMillis(received)
		if err := yield(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// internCode spares a string per row for the handful of known codes.
func internCode(b []byte) core.StateCode {
	for _, c := range core.StateCodes {
		if string(c) == string(b) {
			return c
		}
	}
	return core.StateCode(b)
}

// closeRows closes rows, keeping the first error.
func closeRows(rows *sql.Rows, err *error) {
	if cerr := rows.Close(); *err == nil {
		*err = cerr
	}
}
