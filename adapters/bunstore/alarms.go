package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.AlarmStore = (*Store)(nil)

var typeOfAlarmRow = reflect.TypeFor[alarmRow]()

type alarmRuleRow struct {
	bun.BaseModel `bun:"table:alarm_rules"`
	ID            string `bun:"id,pk"`
	AccountID     string `bun:"account_id"`
	Name          string `bun:"name"`
	Severity      string `bun:"severity"`
	Conditions    string `bun:"conditions"`
	ForSeconds    int    `bun:"for_seconds"`
	MountUIDs     string `bun:"mount_uids"`
	Enabled       bool   `bun:"enabled"`
	Revision      int    `bun:"revision"`
	CreatedAt     int64  `bun:"created_at"`
	UpdatedAt     int64  `bun:"updated_at"`
}

// ruleCondition is a condition as stored (JSON names fixed here).
type ruleCondition struct {
	Code     string `json:"code,omitempty"`
	Op       string `json:"op,omitempty"`
	Value    string `json:"value,omitempty"`
	Presence string `json:"presence,omitempty"`
}

func toRuleRow(r core.AlarmRule) (*alarmRuleRow, error) {
	conds := make([]ruleCondition, len(r.Conditions))
	for i, c := range r.Conditions {
		conds[i] = ruleCondition{Code: string(c.Code), Op: c.Op, Value: c.Value, Presence: string(c.Presence)}
	}
	cj, err := json.Marshal(conds)
	if err != nil {
		return nil, err
	}
	uids := r.MountUIDs
	if uids == nil {
		uids = []string{}
	}
	uj, err := json.Marshal(uids)
	if err != nil {
		return nil, err
	}
	return &alarmRuleRow{ID: r.ID, AccountID: r.AccountID, Name: r.Name, Severity: string(r.Severity), Conditions: string(cj),
		ForSeconds: r.ForSeconds, MountUIDs: string(uj), Enabled: r.Enabled, Revision: r.Revision,
		CreatedAt: millis(r.CreatedAt), UpdatedAt: millis(r.UpdatedAt)}, nil
}

func (r alarmRuleRow) toRule() (core.AlarmRule, error) {
	var conds []ruleCondition
	if err := json.Unmarshal([]byte(r.Conditions), &conds); err != nil {
		return core.AlarmRule{}, fmt.Errorf("alarm rule %s: conditions: %w", r.ID, err)
	}
	out := core.AlarmRule{ID: r.ID, AccountID: r.AccountID, Name: r.Name, Severity: core.Severity(r.Severity),
		ForSeconds: r.ForSeconds, MountUIDs: []string{}, Enabled: r.Enabled, Revision: r.Revision,
		CreatedAt: fromMillis(r.CreatedAt), UpdatedAt: fromMillis(r.UpdatedAt)}
	for _, c := range conds {
		out.Conditions = append(out.Conditions, core.AlarmCondition{Code: core.StateCode(c.Code), Op: c.Op, Value: c.Value,
			Presence: core.Presence(c.Presence)})
	}
	if err := json.Unmarshal([]byte(r.MountUIDs), &out.MountUIDs); err != nil {
		return core.AlarmRule{}, fmt.Errorf("alarm rule %s: mount uids: %w", r.ID, err)
	}
	return out, nil
}

type alarmRow struct {
	bun.BaseModel  `bun:"table:alarms"`
	ID             string         `bun:"id,pk"`
	AccountID      string         `bun:"account_id"`
	RuleID         string         `bun:"rule_id"`
	RuleName       string         `bun:"rule_name"`
	RuleRevision   int            `bun:"rule_revision"`
	MountUID       string         `bun:"mount_uid"`
	Severity       string         `bun:"severity"`
	State          string         `bun:"state"`
	Since          int64          `bun:"since"`
	DueAt          int64          `bun:"due_at"`
	RaisedAt       sql.NullInt64  `bun:"raised_at"`
	ClearedAt      sql.NullInt64  `bun:"cleared_at"`
	AcknowledgedAt sql.NullInt64  `bun:"acknowledged_at"`
	AcknowledgedBy sql.NullString `bun:"acknowledged_by"`
	Values         sql.NullString `bun:"alarm_values"`
	// AcknowledgedByName is last, as the migration added it.
	AcknowledgedByName sql.NullString `bun:"acknowledged_by_name"`
}

func nullMillis(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: millis(t), Valid: true}
}

func fromNullMillis(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromMillis(n.Int64)
}

func toAlarmRow(t core.AlarmTrack) *alarmRow {
	r := &alarmRow{ID: t.ID, AccountID: t.AccountID, RuleID: t.RuleID, RuleName: t.RuleName, RuleRevision: t.RuleRevision,
		MountUID: t.UID, Severity: string(t.Severity), State: string(t.State), Since: millis(t.Since), DueAt: millis(t.DueAt),
		RaisedAt: nullMillis(t.RaisedAt), ClearedAt: nullMillis(t.ClearedAt), AcknowledgedAt: nullMillis(t.AcknowledgedAt)}
	if t.AcknowledgedBy != "" {
		r.AcknowledgedBy = sql.NullString{String: t.AcknowledgedBy, Valid: true}
		r.AcknowledgedByName = sql.NullString{String: t.AcknowledgedByName, Valid: true}
	}
	if t.Values != nil {
		b, _ := json.Marshal(t.Values)
		r.Values = sql.NullString{String: string(b), Valid: true}
	}
	return r
}

func (r alarmRow) toTrack() core.AlarmTrack {
	t := core.AlarmTrack{Alarm: core.Alarm{ID: r.ID, AccountID: r.AccountID, RuleID: r.RuleID, RuleName: r.RuleName,
		UID: r.MountUID, Severity: core.Severity(r.Severity), State: core.AlarmState(r.State),
		RaisedAt: fromNullMillis(r.RaisedAt), ClearedAt: fromNullMillis(r.ClearedAt),
		AcknowledgedAt: fromNullMillis(r.AcknowledgedAt), AcknowledgedBy: r.AcknowledgedBy.String,
		AcknowledgedByName: r.AcknowledgedByName.String},
		Since: fromMillis(r.Since), DueAt: fromMillis(r.DueAt), RuleRevision: r.RuleRevision}
	if r.Values.Valid {
		_ = json.Unmarshal([]byte(r.Values.String), &t.Values)
	}
	if t.State != core.AlarmPending && t.Values == nil {
		t.Values = map[string]string{}
	}
	return t
}

func ruleNotFound(id string) error {
	return core.Errorf(core.CodeAlarmRuleNotFound, "alarm rule %q not found", id)
}

// CreateAlarmRule implements core.AlarmStore: the account's row is locked
// (PostgreSQL) so that two creations cannot both pass the limit.
func (s *Store) CreateAlarmRule(ctx context.Context, r core.AlarmRule, max int) (core.AlarmRule, error) {
	row, err := toRuleRow(r)
	if err != nil {
		return core.AlarmRule{}, err
	}
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.postgres {
			if _, err := tx.NewRaw(`SELECT id FROM accounts WHERE id = ? FOR UPDATE`, r.AccountID).Exec(ctx); err != nil {
				return err
			}
		}
		n, err := tx.NewSelect().Model((*alarmRuleRow)(nil)).Where("account_id = ?", r.AccountID).Count(ctx)
		if err != nil {
			return err
		}
		if n >= max {
			var v core.Validation
			v.Add("conditions", "an account holds at most %d alarm rules", max)
			return v.Err()
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.AlarmRule{}, err
	}
	return row.toRule()
}

// AlarmRules implements core.AlarmStore.
func (s *Store) AlarmRules(ctx context.Context, accountID string, p core.Page) ([]core.AlarmRule, int, error) {
	var rows []alarmRuleRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("account_id = ?", accountID).
			Order("created_at", "id").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.AlarmRule, len(rows))
	for i := range rows {
		if out[i], err = rows[i].toRule(); err != nil {
			return nil, 0, err
		}
	}
	return out, total, nil
}

// AlarmRule implements core.AlarmStore.
func (s *Store) AlarmRule(ctx context.Context, accountID, id string) (core.AlarmRule, error) {
	var row alarmRuleRow
	err := s.db.NewSelect().Model(&row).Where("id = ? AND account_id = ?", id, accountID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return core.AlarmRule{}, ruleNotFound(id)
	}
	if err != nil {
		return core.AlarmRule{}, err
	}
	return row.toRule()
}

// EnabledAlarmRules implements core.AlarmStore.
func (s *Store) EnabledAlarmRules(ctx context.Context, accountID string) ([]core.AlarmRule, error) {
	var rows []alarmRuleRow
	if err := s.db.NewSelect().Model(&rows).Where("account_id = ? AND enabled", accountID).Order("created_at", "id").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]core.AlarmRule, len(rows))
	for i := range rows {
		var err error
		if out[i], err = rows[i].toRule(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// closeRule closes a rule's open episodes in tx: PENDING ones go, ACTIVE
// ones are CLEARED at at, each with its event.
func (s *Store) closeRule(ctx context.Context, tx bun.Tx, accountID, id string, at time.Time, cleared func(core.Alarm) *core.Event) ([]*core.Event, error) {
	if _, err := tx.NewRaw(`DELETE FROM alarms WHERE rule_id = ? AND account_id = ? AND state = 'PENDING'`, id, accountID).Exec(ctx); err != nil {
		return nil, err
	}
	var rows []alarmRow
	if err := tx.NewRaw(`UPDATE alarms SET state = 'CLEARED', cleared_at = ? WHERE rule_id = ? AND account_id = ? AND state = 'ACTIVE'
		RETURNING `+s.columns(typeOfAlarmRow, ""), millis(at), id, accountID).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	events := make([]*core.Event, 0, len(rows))
	for _, r := range rows {
		events = append(events, cleared(r.toTrack().Alarm))
	}
	return events, s.appendAlarmEvents(ctx, tx, events)
}

// appendAlarmEvents appends events about mounts that may be gone (or
// belong to another account now), each with the mount as it is.
func (s *Store) appendAlarmEvents(ctx context.Context, tx bun.IDB, events []*core.Event) error {
	if len(events) == 0 {
		return nil
	}
	var uids []string
	for _, e := range events {
		uids = append(uids, e.UID)
	}
	var rows []mountRow
	if err := tx.NewSelect().Model(&rows).Where("uid IN (?)", bun.In(uids)).Scan(ctx); err != nil {
		return err
	}
	byUID := map[string]*mountRow{}
	for i := range rows {
		byUID[rows[i].UID] = &rows[i]
	}
	latest := map[string]map[string][]core.StateEntry{}
	for _, e := range events {
		row, ok := byUID[e.UID]
		if !ok {
			row = &mountRow{UID: e.UID}
		}
		var values []core.StateEntry
		if ok && row.OwnerID.String == e.AccountID {
			if latest[e.AccountID] == nil {
				l, err := s.latestFor(ctx, tx, e.AccountID, uids)
				if err != nil {
					return err
				}
				latest[e.AccountID] = l
			}
			values = latest[e.AccountID][e.UID]
		}
		if err := s.appendEventWith(ctx, tx, e, row, values, "", nil); err != nil {
			return err
		}
	}
	return nil
}

// UpdateAlarmRule implements core.AlarmStore.
func (s *Store) UpdateAlarmRule(ctx context.Context, r core.AlarmRule, restart bool, cleared func(core.Alarm) *core.Event) ([]*core.Event, error) {
	row, err := toRuleRow(r)
	if err != nil {
		return nil, err
	}
	var events []*core.Event
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewUpdate().Model(row).
			Column("name", "severity", "conditions", "for_seconds", "mount_uids", "enabled", "revision", "updated_at").
			Where("id = ? AND account_id = ?", r.ID, r.AccountID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ruleNotFound(r.ID)
		}
		if restart {
			if events, err = s.closeRule(ctx, tx, r.AccountID, r.ID, r.UpdatedAt, cleared); err != nil {
				return err
			}
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// DeleteAlarmRule implements core.AlarmStore.
func (s *Store) DeleteAlarmRule(ctx context.Context, accountID, id string, at time.Time, cleared func(core.Alarm) *core.Event) ([]*core.Event, error) {
	var events []*core.Event
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewDelete().Model((*alarmRuleRow)(nil)).Where("id = ? AND account_id = ?", id, accountID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return ruleNotFound(id)
		}
		if events, err = s.closeRule(ctx, tx, accountID, id, at, cleared); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// ListAlarms implements core.AlarmStore.
func (s *Store) ListAlarms(ctx context.Context, accountID string, f core.AlarmFilter, p core.Page) ([]core.Alarm, int, error) {
	var rows []alarmRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		q := db.NewSelect().Model(&rows).Where("account_id = ? AND state <> 'PENDING'", accountID)
		if f.State != nil {
			q = q.Where("state = ?", string(*f.State))
		}
		if f.Severity != nil {
			q = q.Where("severity = ?", string(*f.Severity))
		}
		if f.MountUID != nil {
			q = q.Where("mount_uid = ?", *f.MountUID)
		}
		if f.RuleID != nil {
			q = q.Where("rule_id = ?", *f.RuleID)
		}
		return q.OrderExpr("raised_at DESC, id DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.Alarm, len(rows))
	for i := range rows {
		out[i] = rows[i].toTrack().Alarm
	}
	return out, total, nil
}

// AcknowledgeAlarm implements core.AlarmStore: one conditional update.
func (s *Store) AcknowledgeAlarm(ctx context.Context, accountID, id string, by core.Actor, at time.Time, ev func(core.Alarm) *core.Event) (core.Alarm, *core.Event, error) {
	var (
		out core.Alarm
		e   *core.Event
	)
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		name, nameArgs := actorNameSQL(by)
		args := append(append([]any{millis(at), by.ID}, nameArgs...), id, accountID)
		var rows []alarmRow
		if err := tx.NewRaw(`UPDATE alarms SET acknowledged_at = ?, acknowledged_by = ?, acknowledged_by_name = `+name+`
			WHERE id = ? AND account_id = ? AND state <> 'PENDING' AND acknowledged_at IS NULL
			RETURNING `+s.columns(typeOfAlarmRow, ""), args...).Scan(ctx, &rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			var row alarmRow
			err := tx.NewSelect().Model(&row).Where("id = ? AND account_id = ? AND state <> 'PENDING'", id, accountID).Scan(ctx)
			if errors.Is(err, sql.ErrNoRows) {
				return core.Errorf(core.CodeAlarmNotFound, "alarm %q not found", id)
			}
			out = row.toTrack().Alarm
			return err
		}
		out = rows[0].toTrack().Alarm
		e = ev(out)
		if err := s.appendAlarmEvents(ctx, tx, []*core.Event{e}); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Alarm{}, nil, err
	}
	return out, e, nil
}

// WatchMount implements core.AlarmStore: on PostgreSQL the mount's row is
// locked FOR UPDATE first (every watch of the mount queues there); SQLite
// transactions here hold the write lock. Every change is conditional as
// well, and an event whose change did not happen is not appended: a mount
// without a row (deleted) has nothing to lock.
func (s *Store) WatchMount(ctx context.Context, uid string, decide func(core.MountWatch) (core.WatchChanges, error)) ([]*core.Event, error) {
	var events []*core.Event
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var err error
		events, err = s.watchTx(ctx, tx, uid, decide)
		return err
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// watchTx is WatchMount in tx.
func (s *Store) watchTx(ctx context.Context, tx bun.Tx, uid string, decide func(core.MountWatch) (core.WatchChanges, error)) ([]*core.Event, error) {
	w, row, err := s.readWatch(ctx, tx, uid)
	if err != nil {
		return nil, err
	}
	return s.applyWatch(ctx, tx, uid, w, row, decide)
}

// readWatch reads what a watch of uid decides on: the mount with its
// owner's latest values (the row locked on PostgreSQL) and its open
// episodes; row is nil for a mount without a row.
func (s *Store) readWatch(ctx context.Context, tx bun.Tx, uid string) (core.MountWatch, *mountRow, error) {
	var w core.MountWatch
	query := s.sql.mountWithLatestTx
	if s.postgres {
		query += " FOR UPDATE OF m"
	}
	var rows []mountLatestRow
	if err := tx.NewRaw(query, uid).Scan(ctx, &rows); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return w, nil, err
	}
	var row *mountRow
	if len(rows) > 0 {
		row = &rows[0].mountRow
		w.Mount, w.OfflineAnnounced = row.toMount(), row.OfflineAnnounced
		w.Latest = latestOf(rows)
	}
	var open []alarmRow
	if err := tx.NewSelect().Model(&open).Where("mount_uid = ? AND state IN ('PENDING', 'ACTIVE')", uid).Order("id").Scan(ctx); err != nil {
		return w, nil, err
	}
	for _, r := range open {
		w.Tracks = append(w.Tracks, r.toTrack())
	}
	return w, row, nil
}

// applyWatch decides on w (read with row, nil for a mount without a row,
// in tx) and makes the changes, each conditional; it returns the events
// whose change happened, appended.
func (s *Store) applyWatch(ctx context.Context, tx bun.Tx, uid string, w core.MountWatch, row *mountRow,
	decide func(core.MountWatch) (core.WatchChanges, error)) ([]*core.Event, error) {
	var events []*core.Event
	err := func() error {
		c, err := decide(w)
		if err != nil {
			return err
		}
		if c.Empty() {
			return nil
		}
		skip := map[string]bool{} // alarm ids whose change did not happen
		offlineDone := true
		if row != nil {
			if c.ResetSeen {
				if _, err := tx.NewRaw(`UPDATE mounts SET last_seen_at = NULL, offline_announced = FALSE WHERE uid = ?`, uid).Exec(ctx); err != nil {
					return err
				}
				row.LastSeenAt, row.OfflineAnnounced = sql.NullInt64{}, false
			}
			if !c.Seen.IsZero() {
				at := millis(c.Seen)
				if _, err := tx.NewRaw(`UPDATE mounts SET last_seen_at = CASE WHEN last_seen_at IS NULL OR last_seen_at < ? THEN ? ELSE last_seen_at END,
					offline_announced = FALSE WHERE uid = ?`, at, at, uid).Exec(ctx); err != nil {
					return err
				}
				if !row.LastSeenAt.Valid || row.LastSeenAt.Int64 < at {
					row.LastSeenAt = sql.NullInt64{Int64: at, Valid: true}
				}
				row.OfflineAnnounced = false
			}
			if c.AnnounceOffline {
				res, err := tx.NewRaw(`UPDATE mounts SET offline_announced = TRUE WHERE uid = ? AND NOT offline_announced`, uid).Exec(ctx)
				if err != nil {
					return err
				}
				n, _ := res.RowsAffected()
				offlineDone = n == 1
				row.OfflineAnnounced = true
			}
		}
		// On PostgreSQL a change with an event runs as its event's WITH:
		// one statement for both, the event appended only when the change
		// happened, in the events' order. New episodes without an event
		// run after the events, once the episodes they replace are closed
		// (one open episode per rule and mount).
		hasEvent := map[string]bool{}
		for _, e := range c.Events {
			if e.Alarm != nil {
				hasEvent[e.Alarm.ID] = true
			}
		}
		withEvent := map[string]alarmWrite{}
		run := func(t core.AlarmTrack, w alarmWrite) error {
			if s.postgres && hasEvent[t.ID] {
				withEvent[t.ID] = w
				return nil
			}
			var ids []string
			if err := tx.NewRaw(w.query, w.args...).Scan(ctx, &ids); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if len(ids) == 0 {
				skip[t.ID] = true
			}
			return nil
		}
		// The closes run first, the PENDING episodes dropped in one
		// statement; an episode not dropped is cleared if ACTIVE.
		var drop []core.AlarmTrack
		for _, t := range c.Close {
			if s.postgres && hasEvent[t.ID] {
				if err := run(t, clearAlarm(t)); err != nil {
					return err
				}
				continue
			}
			drop = append(drop, t)
		}
		if len(drop) > 0 {
			ids := make([]string, len(drop))
			for i, t := range drop {
				ids[i] = t.ID
			}
			var dropped []string
			if err := tx.NewRaw(`DELETE FROM alarms WHERE id IN (?) AND state = 'PENDING' RETURNING id`, bun.In(ids)).Scan(ctx, &dropped); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			for _, t := range drop {
				if slices.Contains(dropped, t.ID) {
					continue
				}
				if err := run(t, clearAlarm(t)); err != nil {
					return err
				}
			}
		}
		for _, t := range c.Raise {
			if err := run(t, raiseAlarm(t)); err != nil {
				return err
			}
		}
		var pending []core.AlarmTrack // new episodes without an event
		for _, t := range c.Open {
			if !hasEvent[t.ID] {
				pending = append(pending, t)
				continue
			}
			if err := run(t, s.openAlarm(t)); err != nil {
				return err
			}
		}
		var latest []core.StateEntry
		if row != nil && row.OwnerID.Valid {
			latest = w.Latest
		}
		for _, e := range c.Events {
			switch {
			case e.Alarm != nil && skip[e.Alarm.ID]:
				continue
			case e.Type == core.EventMountOffline && !offlineDone:
				continue
			}
			r := row
			if r == nil {
				r = &mountRow{UID: uid}
			}
			values := latest
			if r.OwnerID.String != e.AccountID {
				values = nil
			}
			appended := true
			var err error
			if change := withEvent[alarmID(e)]; change.query != "" {
				appended, err = s.appendEventGuarded(ctx, tx, e, r, values, change.query, change.args, true)
			} else {
				err = s.appendEventWith(ctx, tx, e, r, values, "", nil)
			}
			if err != nil {
				return err
			}
			if appended {
				events = append(events, e)
			}
		}
		if len(pending) > 0 {
			// No event depends on them: one statement for all.
			values := make([]string, len(pending))
			var args []any
			for i, t := range pending {
				values[i] = alarmPlaceholders
				args = append(args, alarmRowValues(toAlarmRow(t))...)
			}
			if _, err := tx.NewRaw(`INSERT INTO alarms (`+s.columns(typeOfAlarmRow, "")+`) VALUES `+strings.Join(values, ", ")+`
				ON CONFLICT DO NOTHING`, args...).Exec(ctx); err != nil {
				return err
			}
		}
		return nil
	}()
	if err != nil {
		return nil, err
	}
	return events, nil
}

// alarmWrite is one conditional change of an episode: a statement that
// answers the episode's id when the change happened.
type alarmWrite struct {
	query string
	args  []any
}

func clearAlarm(t core.AlarmTrack) alarmWrite {
	return alarmWrite{`UPDATE alarms SET state = 'CLEARED', cleared_at = ? WHERE id = ? AND state = 'ACTIVE' RETURNING id`,
		[]any{millis(t.ClearedAt), t.ID}}
}

func raiseAlarm(t core.AlarmTrack) alarmWrite {
	values, _ := json.Marshal(t.Values)
	return alarmWrite{`UPDATE alarms SET state = 'ACTIVE', raised_at = ?, alarm_values = ? WHERE id = ? AND state = 'PENDING' RETURNING id`,
		[]any{millis(t.RaisedAt), string(values), t.ID}}
}

func (s *Store) openAlarm(t core.AlarmTrack) alarmWrite {
	return alarmWrite{`INSERT INTO alarms (` + s.columns(typeOfAlarmRow, "") + `) VALUES ` + alarmPlaceholders + `
		ON CONFLICT DO NOTHING RETURNING id`, alarmRowValues(toAlarmRow(t))}
}

// alarmID is the id of e's episode, "" for an event without one.
func alarmID(e *core.Event) string {
	if e.Alarm == nil {
		return ""
	}
	return e.Alarm.ID
}

// alarmPlaceholders are alarmRowValues' placeholders.
const alarmPlaceholders = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"

func alarmRowValues(r *alarmRow) []any {
	return []any{r.ID, r.AccountID, r.RuleID, r.RuleName, r.RuleRevision, r.MountUID, r.Severity, r.State, r.Since, r.DueAt,
		r.RaisedAt, r.ClearedAt, r.AcknowledgedAt, r.AcknowledgedBy, r.Values, r.AcknowledgedByName}
}

// WatchCandidates implements core.AlarmStore: one statement over the
// partial indexes (unannounced lapses, due and open episodes).
func (s *Store) WatchCandidates(ctx context.Context, now time.Time, offlineAfter time.Duration, limit int) ([]string, error) {
	var uids []string
	n, cut := millis(now), millis(now)-offlineAfter.Milliseconds()
	err := s.db.NewRaw(`SELECT uid FROM (
			SELECT uid FROM mounts WHERE last_seen_at IS NOT NULL AND NOT offline_announced AND last_seen_at <= ?
				AND owner_account_id IS NOT NULL AND `+liveAssociation+`
			UNION
			SELECT a.mount_uid AS uid FROM alarms AS a
				LEFT JOIN mounts AS m ON m.uid = a.mount_uid
				LEFT JOIN alarm_rules AS r ON r.id = a.rule_id
				WHERE a.state IN ('PENDING', 'ACTIVE') AND (
					(a.state = 'PENDING' AND a.due_at <= ?)
					OR m.uid IS NULL OR m.owner_account_id IS NULL OR m.owner_account_id <> a.account_id
					OR NOT (m.association_state = 'ASSOCIATED' OR (m.association_state = 'IDLE' AND m.idle_deadline > ?))
					OR r.id IS NULL OR NOT r.enabled OR r.revision <> a.rule_revision)
		) AS due ORDER BY uid LIMIT ?`, cut, n, n, n, limit).Scan(ctx, &uids)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return uids, err
}

// AlarmCounts implements core.AlarmStore.
func (s *Store) AlarmCounts(ctx context.Context, now time.Time, offlineAfter time.Duration) (int, map[core.Severity]int, error) {
	n := millis(now)
	offline, err := s.db.NewSelect().Model((*mountRow)(nil)).
		Where("last_seen_at IS NOT NULL AND last_seen_at <= ? AND owner_account_id IS NOT NULL", n-offlineAfter.Milliseconds()).
		Where(liveAssociation, n).Count(ctx)
	if err != nil {
		return 0, nil, err
	}
	var rows []struct {
		Severity string `bun:"severity"`
		N        int    `bun:"n"`
	}
	if err := s.db.NewRaw(`SELECT severity, COUNT(*) AS n FROM alarms WHERE state = 'ACTIVE' GROUP BY severity`).Scan(ctx, &rows); err != nil {
		return 0, nil, err
	}
	active := map[core.Severity]int{}
	for _, r := range rows {
		active[core.Severity(r.Severity)] = r.N
	}
	return offline, active, nil
}

// OfflineMounts implements core.AlarmStore.
func (s *Store) OfflineMounts(ctx context.Context, accountID string, now time.Time, offlineAfter time.Duration, after string, limit int) ([]string, error) {
	var uids []string
	n := millis(now)
	err := s.db.NewSelect().Model((*mountRow)(nil)).Column("uid").
		Where("owner_account_id = ? AND uid > ? AND last_seen_at IS NOT NULL AND last_seen_at <= ?", accountID, after, n-offlineAfter.Milliseconds()).
		Where(liveAssociation, n).OrderExpr("uid").Limit(limit).Scan(ctx, &uids)
	return uids, err
}

// PruneAlarms implements core.AlarmStore.
func (s *Store) PruneAlarms(ctx context.Context, before time.Time, limit int) (int, error) {
	var n int64
	err := s.write(ctx, func() error {
		res, err := s.db.NewRaw(`DELETE FROM alarms WHERE id IN (
			SELECT id FROM alarms WHERE state = 'CLEARED' AND cleared_at < ? ORDER BY cleared_at LIMIT ?)`, millis(before), limit).Exec(ctx)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}
