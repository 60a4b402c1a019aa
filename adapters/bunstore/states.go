package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

type stateRow struct {
	bun.BaseModel `bun:"table:mount_states"`
	MountUID      string `bun:"mount_uid,pk"`
	AccountID     string `bun:"account_id,pk"`
	Code          string `bun:"code,pk"`
	OccurredAt    int64  `bun:"occurred_at,pk"`
	Value         string `bun:"value,pk"`
	ReceivedAt    int64  `bun:"received_at"`
	Verified      bool   `bun:"verified"`
}

type latestRow struct {
	bun.BaseModel `bun:"table:mount_latest_states"`
	MountUID      string `bun:"mount_uid,pk"`
	AccountID     string `bun:"account_id,pk"`
	Code          string `bun:"code,pk"`
	OccurredAt    int64  `bun:"occurred_at"`
	Value         string `bun:"value"`
	Verified      bool   `bun:"verified"`
}

func (r stateRow) toEntry() core.StateEntry {
	return core.StateEntry{Code: core.StateCode(r.Code), Value: r.Value, OccurredAt: fromMillis(r.OccurredAt),
		ReceivedAt: fromMillis(r.ReceivedAt), Verified: r.Verified}
}

// InsertStates implements core.StateStore: one multi-row insert that skips
// duplicates and returns what it stored, then one upsert that moves the
// latest value per code forward only, and the event, all in one
// transaction (insertStatesPG on PostgreSQL).
func (s *Store) InsertStates(ctx context.Context, uid, accountID string, entries []core.StateEntry, e *core.Event) (core.Mount, []core.StateEntry, error) {
	return s.InsertReport(ctx, uid, accountID, entries, core.ReportCheck{}, e)
}

// InsertReport implements core.StateStore: InsertStates, with the check
// on the mount row the report's first statement reads (an error rolls the
// transaction back) and, when the signed revision differs, one update of
// the mount. A report's entries share one Verified.
func (s *Store) InsertReport(ctx context.Context, uid, accountID string, entries []core.StateEntry, r core.ReportCheck, e *core.Event) (core.Mount, []core.StateEntry, error) {
	if len(entries) == 0 {
		return core.Mount{}, nil, core.Errorf(core.CodeValidation, "a report holds at least one entry")
	}
	var (
		mount      mountRow
		watch      core.MountWatch // what ingestWatchedSQL read for the watch
		accepted   []core.StateEntry
		receivedAt = entries[0].ReceivedAt
	)
	// light: no rule applies to the mount (ReportCheck.LightCut).
	light := r.Watch != nil && !r.LightCut.IsZero()
	store := func(ctx context.Context, tx bun.Tx) error {
		if s.postgres {
			var err error
			var watched *core.MountWatch
			if r.Watch != nil && !light {
				watched = &watch
			}
			accepted, err = s.insertStatesPG(ctx, tx, uid, accountID, entries, r, e, &mount, watched, light)
			return err
		}
		// SQLite. With an event to append, the mount's latest values come
		// with the row in one statement, and the event's are those merged
		// with the report: no further read. The entries' ReceivedAt is the
		// instant of the report.
		accepted = accepted[:0]
		var before []core.StateEntry
		if e != nil {
			var rows []mountLatestRow
			if err := tx.NewRaw(s.sql.mountWithLatestTx, uid).Scan(ctx, &rows); err != nil {
				return err
			}
			if len(rows) == 0 || rows[0].OwnerID.String != accountID || !rows[0].live(receivedAt) {
				return core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
			}
			mount, before = rows[0].mountRow, latestOf(rows)
		} else {
			err := tx.NewSelect().Model(&mount).
				Where("uid = ? AND owner_account_id = ?", uid, accountID).
				Where(liveAssociation, millis(receivedAt)).
				Scan(ctx)
			if errors.Is(err, sql.ErrNoRows) {
				return core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
			}
			if err != nil {
				return err
			}
		}
		rev, err := checkReport(r, &mount, receivedAt)
		if err != nil {
			return err
		}
		if rev != nil {
			if err := writeRevision(ctx, tx, uid, *rev); err != nil {
				return err
			}
		}
		var sb strings.Builder
		args := make([]any, 0, len(entries)*7)
		sb.WriteString("INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at, verified) VALUES ")
		for i, entry := range entries {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			args = append(args, uid, accountID, string(entry.Code), millis(entry.OccurredAt), entry.Value, millis(entry.ReceivedAt), entry.Verified)
		}
		sb.WriteString(" ON CONFLICT DO NOTHING RETURNING mount_uid, account_id, code, occurred_at, value, received_at, verified")
		var rows []stateRow
		if err := tx.NewRaw(sb.String(), args...).Scan(ctx, &rows); err != nil {
			return translate(err, core.CodeMountNotFound, fmt.Sprintf("mount %q", uid))
		}
		for _, r := range rows {
			accepted = append(accepted, r.toEntry())
		}
		latest := core.LatestPerCode(accepted)
		if len(latest) == 0 {
			return nil
		}
		query, args := upsertLatestSQL(uid, accountID, latest)
		if _, err := tx.NewRaw(query, args...).Exec(ctx); err != nil {
			return err
		}
		// The mount's copies of its latest values, read back: the
		// transaction is SQLite's one writer.
		sets, setArgs := latestColumnsRead(false, codesOf(latest), "", uid, accountID)
		if _, err := tx.NewRaw("UPDATE mounts SET "+sets+" WHERE uid = ?", append(setArgs, uid)...).Exec(ctx); err != nil {
			return err
		}
		if e == nil {
			return nil
		}
		e.States = accepted
		return s.appendEventWith(ctx, tx, e, seenSnapshot(&mount, r), mergeLatest(before, latest), "", nil)
	}
	insert := func(ctx context.Context, tx bun.Tx) error {
		// The watch locks the mount row first, in a statement of its own:
		// it serialises the mount's reports rather than letting two
		// upgrade their key share locks into a deadlock, and the report's
		// statement, which starts after it, reads what the watch decides
		// on as the last holder of the lock left it (ingestWatchedSQL).
		// SQLite's transaction holds the write lock.
		if r.Watch != nil && !light && s.postgres {
			// Prepared: every watched report sends it, and its parse and
			// plan cost PostgreSQL more than the lock.
			st, err := s.prepared(ctx, lockMountSQL)
			if err != nil {
				return err
			}
			s.queries.Add(1)
			if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, uid); err != nil {
				return err
			}
		}
		if err := store(ctx, tx); err != nil {
			return err
		}
		if r.Counter != nil && r.SoftwareRevision != "" {
			// A verified report decides the mount's rollout target, under
			// the rollout's lock, after the mount's.
			events, err := s.observeRolloutReport(ctx, tx, uid, accountID, r.SoftwareRevision, *r.Counter, receivedAt)
			if err != nil {
				return err
			}
			if r.RolloutEvents != nil {
				*r.RolloutEvents = events
			}
		}
		if r.Watch == nil {
			return nil
		}
		if light {
			if s.postgres {
				return nil // insertStatesPG moved lastSeenAt
			}
			return s.moveLastSeen(ctx, tx, &mount, r)
		}
		var events []*core.Event
		var err error
		if s.postgres {
			row := mount
			events, err = s.applyWatch(ctx, tx, uid, watch, &row, r.Watch)
		} else {
			events, err = s.watchTx(ctx, tx, uid, r.Watch)
		}
		if err != nil {
			return err
		}
		if r.WatchEvents != nil {
			*r.WatchEvents = events
		}
		return nil
	}
	err := s.inTx(ctx, insert)
	if s.postgres && isNoPartition(err) {
		// An entry past the partitions made ahead (the retention worker has
		// not run yet), or an old one on a day whose partition was dropped:
		// make them and try once more.
		until, at := int64(0), make([]int64, len(entries))
		for i, entry := range entries {
			at[i] = millis(entry.OccurredAt)
			until = max(until, at[i])
		}
		if err := s.withMaintenance(ctx, func(conn bun.Conn) error { return ensurePartitions(ctx, conn, until, at...) }); err != nil {
			return core.Mount{}, nil, err
		}
		err = s.inTx(ctx, insert)
	}
	if err != nil {
		return core.Mount{}, nil, err
	}
	return mount.toMount(), accepted, nil
}

// upsertLatestSQL moves the latest value per code forward only, by
// core.Newer; latest holds at most one entry per code.
func upsertLatestSQL(uid, accountID string, latest []core.StateEntry) (string, []any) {
	var sb strings.Builder
	args := make([]any, 0, len(latest)*6)
	sb.WriteString("INSERT INTO mount_latest_states (mount_uid, account_id, code, occurred_at, value, verified) VALUES ")
	for i, entry := range latest {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?)")
		args = append(args, uid, accountID, string(entry.Code), millis(entry.OccurredAt), entry.Value, entry.Verified)
	}
	// core.Newer: a verified entry outranks an unverified one; between two
	// of a kind the later wins, ties on the instant going to the greater
	// value in byte order (the value columns compare bytes on both
	// databases).
	sb.WriteString(` ON CONFLICT (mount_uid, account_id, code) DO UPDATE SET occurred_at = excluded.occurred_at, value = excluded.value, verified = excluded.verified
			WHERE (excluded.verified AND NOT mount_latest_states.verified)
			   OR (excluded.verified = mount_latest_states.verified
				AND (excluded.occurred_at > mount_latest_states.occurred_at
				   OR (excluded.occurred_at = mount_latest_states.occurred_at AND excluded.value > mount_latest_states.value)))`)
	return sb.String(), args
}

// LatestStates implements core.StateStore.
func (s *Store) LatestStates(ctx context.Context, uid, accountID string) ([]core.StateEntry, error) {
	latest, err := s.latestFor(ctx, s.db, accountID, []string{uid})
	if err != nil {
		return nil, err
	}
	return latest[uid], nil
}

// latestFor reads the latest entries accountID's associations produced on
// each of uids.
func (s *Store) latestFor(ctx context.Context, db bun.IDB, accountID string, uids []string) (map[string][]core.StateEntry, error) {
	var rows []latestRow
	if err := db.NewSelect().Model(&rows).Where("account_id = ? AND mount_uid IN (?)", accountID, bun.In(uids)).Scan(ctx); err != nil {
		return nil, err
	}
	out := make(map[string][]core.StateEntry, len(uids))
	for _, r := range rows {
		out[r.MountUID] = append(out[r.MountUID], core.StateEntry{Code: core.StateCode(r.Code), Value: r.Value,
			OccurredAt: fromMillis(r.OccurredAt), Verified: r.Verified})
	}
	return out, nil
}

// ListStates implements core.StateStore.
func (s *Store) ListStates(ctx context.Context, uid, accountID string, f core.StateFilter, p core.Page) ([]core.StateEntry, int, error) {
	var rows []stateRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		q := db.NewSelect().Model(&rows).Where("mount_uid = ? AND account_id = ?", uid, accountID)
		return filterStates(q, f).OrderExpr("occurred_at DESC, code, value").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.StateEntry, len(rows))
	for i, r := range rows {
		out[i] = r.toEntry()
	}
	return out, total, nil
}

// filterStates narrows a select of history entries by f.
func filterStates(q *bun.SelectQuery, f core.StateFilter) *bun.SelectQuery {
	if f.Code != nil {
		q = q.Where("code = ?", string(*f.Code))
	}
	if f.From != nil {
		q = q.Where("occurred_at >= ?", millis(*f.From))
	}
	if f.To != nil {
		q = q.Where("occurred_at < ?", millis(*f.To))
	}
	return q
}

// live is the row's liveAssociation at now.
func (r *mountRow) live(now time.Time) bool {
	return r.State == string(core.StateAssociated) ||
		r.State == string(core.StateIdle) && r.IdleDeadline.Valid && r.IdleDeadline.Int64 > millis(now)
}

// latestOf gathers the latest entries of a mount read with its latest rows.
func latestOf(rows []mountLatestRow) []core.StateEntry {
	var latest []core.StateEntry // nil when there is none, as before
	for _, r := range rows {
		if r.LatestCode.Valid {
			if latest == nil {
				latest = make([]core.StateEntry, 0, len(rows))
			}
			latest = append(latest, core.StateEntry{Code: core.StateCode(r.LatestCode.String),
				Value: r.LatestValue.String, OccurredAt: fromMillis(r.LatestOccurredAt.Int64), Verified: r.LatestVerified.Bool})
		}
	}
	return latest
}

// mergeLatest is what the upsert of mount_latest_states leaves: per code,
// the newer of the stored entry and the report's (core.Newer).
func mergeLatest(stored, reported []core.StateEntry) []core.StateEntry {
	out := slices.Clone(stored)
	for _, r := range reported {
		i := slices.IndexFunc(out, func(e core.StateEntry) bool { return e.Code == r.Code })
		switch {
		case i < 0:
			out = append(out, core.StateEntry{Code: r.Code, Value: r.Value, OccurredAt: r.OccurredAt, Verified: r.Verified})
		case core.Newer(r, out[i]):
			out[i] = core.StateEntry{Code: r.Code, Value: r.Value, OccurredAt: r.OccurredAt, Verified: r.Verified}
		}
	}
	return out
}

// checkReport runs a report's check on the mount row its transaction read
// and decides whether a verified report moves the mount to its signed
// software revision: when its counter is the highest the mount's device key
// signed a revision with (docs/api.md, "The truth from the mount"), so that
// a replayed or late older report changes nothing. The transaction holds
// the mount (PostgreSQL: the report's first statement locks its row;
// SQLite: the write lock), so the move decided on the row as read stands:
// it is applied to mount here, and the caller writes it (writeRevision, or
// with the latest values' update of the row, upsertLatestPG).
func checkReport(r core.ReportCheck, mount *mountRow, now time.Time) (*revisionSet, error) {
	if r.Check != nil {
		if err := r.Check(mount.toMount()); err != nil {
			return nil, err
		}
	}
	if r.SoftwareRevision == "" || r.Counter == nil || !mount.DevicePublicKey.Valid {
		return nil, nil
	}
	counter := int64(*r.Counter) // core bounds a report's counter to int64
	if mount.RevisionCounter.Valid && mount.RevisionKey == mount.DevicePublicKey && mount.RevisionCounter.Int64 >= counter {
		return nil, nil // not the highest: no write
	}
	rev := &revisionSet{revision: r.SoftwareRevision, counter: counter, updatedAt: millis(now)}
	if mount.SoftwareRevision != rev.revision {
		mount.UpdatedAt = rev.updatedAt
	}
	mount.SoftwareRevision = rev.revision
	mount.RevisionCounter = sql.NullInt64{Int64: rev.counter, Valid: true}
	mount.RevisionKey = mount.DevicePublicKey
	return rev, nil
}

// revisionSet is a report's revision move (checkReport).
type revisionSet struct {
	revision  string
	counter   int64
	updatedAt int64
}

// revisionSQL are the assignments of a revision move, with revisionArgs.
const revisionSQL = `software_revision = ?, revision_counter = ?, revision_key = device_public_key,
	updated_at = CASE WHEN software_revision = ? THEN updated_at ELSE ? END`

func (rev revisionSet) args() []any {
	return []any{rev.revision, rev.counter, rev.revision, rev.updatedAt}
}

// writeRevision writes a revision move in an update of its own.
func writeRevision(ctx context.Context, tx bun.Tx, uid string, rev revisionSet) error {
	_, err := tx.NewRaw(`UPDATE mounts SET `+revisionSQL+` WHERE uid = ?`, append(rev.args(), uid)...).Exec(ctx)
	return err
}

// seenSnapshot is the mount as a report leaves it, for the report's event:
// with the lastSeenAt the report gives it (the watch writes it later in the
// transaction).
func seenSnapshot(m *mountRow, r core.ReportCheck) *mountRow {
	at := millis(r.SeenAt)
	if r.SeenAt.IsZero() || m.LastSeenAt.Valid && m.LastSeenAt.Int64 >= at {
		return m
	}
	snap := *m
	snap.LastSeenAt, snap.OfflineAnnounced = sql.NullInt64{Int64: at, Valid: true}, false
	return &snap
}

// lockMountSQL locks a mount's row for a watched report (PostgreSQL).
const lockMountSQL = `SELECT uid FROM mounts WHERE uid = $1 FOR UPDATE`

// moveLastSeen is a report's light watch (ReportCheck.LightCut): no rule
// applies to the mount, so a mount heard within its threshold and not
// announced offline only has lastSeenAt moved on. That update is monotonic
// and emits nothing, so concurrent reports need no lock beyond the
// report's own. A mount with a lapse to announce or announced offline gets
// ErrFullWatch: its events need the full watch under the mount's lock.
func (s *Store) moveLastSeen(ctx context.Context, tx bun.Tx, m *mountRow, r core.ReportCheck) error {
	at, err := lightSeen(m, r)
	if err != nil || at == 0 {
		return err
	}
	_, err = tx.NewRaw(`UPDATE mounts SET last_seen_at = ? WHERE uid = ? AND (last_seen_at IS NULL OR last_seen_at < ?)`, at, m.UID, at).Exec(ctx)
	return err
}

// lightSeen is moveLastSeen's decision: ErrFullWatch, or the instant to
// move lastSeenAt to (0 when the report moves nothing).
func lightSeen(m *mountRow, r core.ReportCheck) (int64, error) {
	if m.OfflineAnnounced || m.LastSeenAt.Valid && m.LastSeenAt.Int64 <= millis(r.LightCut) {
		return 0, core.ErrFullWatch
	}
	if r.SeenAt.IsZero() {
		return 0, nil
	}
	return millis(r.SeenAt), nil
}
