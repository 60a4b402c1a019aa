package bunstore

import (
	"context"
	"database/sql"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.ExportStore = (*Store)(nil)

// EachMount implements core.ExportStore: one statement, the mounts joined
// with their latest states (a mount comes as one row per code it has,
// adjacent because of the order by uid), scanned row by row from the
// driver's cursor.
func (s *Store) EachMount(ctx context.Context, accountID string, f core.MountFilter, now time.Time, yield func(core.Mount) error) (err error) {
	q := s.db.NewSelect().TableExpr("mounts AS m").
		ColumnExpr("m.uid, m.name, m.serial_number, m.mac_address, m.firmware_revision, m.software_revision, m.model_number").
		ColumnExpr("m.association_state, m.associated_at, l.code, l.occurred_at, l.value").
		Join("LEFT JOIN mount_latest_states AS l ON l.mount_uid = m.uid AND l.account_id = m.owner_account_id").
		Where("owner_account_id = ?", accountID).
		Where(liveAssociation, millis(now))
	rows, err := filterMounts(q, f).OrderExpr("m.uid").Rows(ctx)
	if err != nil {
		return err
	}
	defer closeRows(rows, &err)
	var (
		cur     core.Mount
		latest  []core.StateEntry
		pending bool
	)
	emit := func() error {
		cur.Latest = core.ComputeLatest(latest)
		return yield(cur)
	}
	// A mount's columns repeat on each of its latest rows: they are read
	// as raw bytes and made strings once per mount.
	var (
		text         [8]sql.RawBytes
		associatedAt sql.NullInt64
		code         sql.RawBytes
		value        sql.NullString
		occurredAt   sql.NullInt64
	)
	for rows.Next() {
		if err := rows.Scan(&text[0], &text[1], &text[2], &text[3], &text[4], &text[5], &text[6], &text[7],
			&associatedAt, &code, &occurredAt, &value); err != nil {
			return err
		}
		if !pending || string(text[0]) != cur.UID {
			if pending {
				if err := emit(); err != nil {
					return err
				}
			}
			cur = core.Mount{UID: string(text[0]), Name: string(text[1]), SerialNumber: string(text[2]), MACAddress: string(text[3]),
				FirmwareRevision: string(text[4]), SoftwareRevision: string(text[5]), ModelNumber: string(text[6]),
				State: core.AssociationState(text[7]), OwnerID: accountID}
			if associatedAt.Valid {
				cur.AssociatedAt = fromMillis(associatedAt.Int64)
			}
			latest, pending = latest[:0], true
		}
		if code != nil {
			latest = append(latest, core.StateEntry{Code: internCode(code), Value: value.String,
				OccurredAt: fromMillis(occurredAt.Int64)})
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if pending {
		return emit()
	}
	return nil
}

// EachState implements core.ExportStore: the history index read in
// order, scanned row by row from the driver's cursor.
func (s *Store) EachState(ctx context.Context, uid, accountID string, f core.StateFilter, yield func(core.StateEntry) error) (err error) {
	q := s.db.NewSelect().TableExpr("mount_states").ColumnExpr("code, value, occurred_at, received_at").
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
		if err := rows.Scan(&code, &e.Value, &occurred, &received); err != nil {
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
