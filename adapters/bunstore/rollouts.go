package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.RolloutStore = (*Store)(nil)

type rolloutRow struct {
	bun.BaseModel    `bun:"table:rollouts"`
	ID               string        `bun:"id,pk" json:"id"`
	AccountID        string        `bun:"account_id" json:"accountId"`
	ModelNumber      string        `bun:"model_number" json:"modelNumber"`
	SoftwareRevision string        `bun:"software_revision" json:"softwareRevision"`
	SHA256           string        `bun:"sha256" json:"sha256"`
	Size             int64         `bun:"size" json:"size"`
	Filter           string        `bun:"filter" json:"filter"`
	Phases           string        `bun:"phases" json:"phases"`
	FailureThreshold int           `bun:"failure_threshold" json:"failureThreshold"`
	MinSample        int           `bun:"min_sample" json:"minSample"`
	HealthWindow     int64         `bun:"health_window" json:"healthWindow"`
	RequireIdle      bool          `bun:"require_idle" json:"requireIdle"`
	State            string        `bun:"state" json:"state"`
	PausedReason     string        `bun:"paused_reason" json:"pausedReason"`
	OpenPhase        int           `bun:"open_phase" json:"openPhase"`
	Targets          int           `bun:"targets" json:"targets"`
	Pending          int           `bun:"pending" json:"pending"`
	Eligible         int           `bun:"eligible" json:"eligible"`
	Installing       int           `bun:"installing" json:"installing"`
	Healthy          int           `bun:"healthy" json:"healthy"`
	Failed           int           `bun:"failed" json:"failed"`
	SampleHealthy    int           `bun:"sample_healthy" json:"sampleHealthy"`
	SampleFailed     int           `bun:"sample_failed" json:"sampleFailed"`
	CreatedAt        int64         `bun:"created_at" json:"createdAt"`
	EndedAt          sql.NullInt64 `bun:"ended_at" json:"endedAt"`
	CreatedBy        string        `bun:"created_by" json:"createdBy"`
}

func toRolloutRow(r core.Rollout) *rolloutRow {
	phases := r.Phases
	if phases == nil {
		phases = []int{}
	}
	b, _ := json.Marshal(phases) // a []int always marshals
	return &rolloutRow{ID: r.ID, AccountID: r.AccountID, ModelNumber: r.ModelNumber, SoftwareRevision: r.SoftwareRevision,
		SHA256: r.SHA256, Size: r.Size, Filter: r.Filter, Phases: string(b), FailureThreshold: r.FailureThreshold,
		MinSample: r.MinSample, HealthWindow: r.HealthWindow.Milliseconds(), RequireIdle: r.RequireIdle, State: string(r.State),
		PausedReason: r.PausedReason, OpenPhase: r.OpenPhase, Targets: r.Targets, Pending: r.Counts.Pending,
		Eligible: r.Counts.Eligible, Installing: r.Counts.Installing, Healthy: r.Counts.Healthy, Failed: r.Counts.Failed,
		SampleHealthy: r.SampleHealthy, SampleFailed: r.SampleFailed, CreatedAt: millis(r.CreatedAt),
		EndedAt: sql.NullInt64{Int64: optMillis(r.EndedAt), Valid: !r.EndedAt.IsZero()}, CreatedBy: r.CreatedBy}
}

func (r *rolloutRow) toRollout() (core.Rollout, error) {
	phases := []int{}
	if err := json.Unmarshal([]byte(r.Phases), &phases); err != nil {
		return core.Rollout{}, fmt.Errorf("rollout %s: phases: %w", r.ID, err)
	}
	out := core.Rollout{ID: r.ID, AccountID: r.AccountID, ModelNumber: r.ModelNumber, SoftwareRevision: r.SoftwareRevision,
		SHA256: r.SHA256, Size: r.Size, Filter: r.Filter, Phases: phases, FailureThreshold: r.FailureThreshold,
		MinSample: r.MinSample, HealthWindow: time.Duration(r.HealthWindow) * time.Millisecond, RequireIdle: r.RequireIdle,
		State: core.RolloutState(r.State), PausedReason: r.PausedReason, OpenPhase: r.OpenPhase, Targets: r.Targets,
		Counts: core.RolloutCounts{Pending: r.Pending, Eligible: r.Eligible, Installing: r.Installing, Healthy: r.Healthy,
			Failed: r.Failed}, SampleHealthy: r.SampleHealthy, SampleFailed: r.SampleFailed, CreatedAt: fromMillis(r.CreatedAt),
		CreatedBy: r.CreatedBy}
	if r.EndedAt.Valid {
		out.EndedAt = fromMillis(r.EndedAt.Int64)
	}
	return out, nil
}

func toRollouts(rows []rolloutRow) ([]core.Rollout, error) {
	out := make([]core.Rollout, len(rows))
	for i := range rows {
		var err error
		if out[i], err = rows[i].toRollout(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type rolloutTargetRow struct {
	bun.BaseModel      `bun:"table:rollout_targets"`
	RolloutID          string        `bun:"rollout_id,pk"`
	MountUID           string        `bun:"mount_uid,pk"`
	Phase              int           `bun:"phase"`
	State              string        `bun:"state"`
	CommandID          string        `bun:"command_id"`
	InstallingSince    sql.NullInt64 `bun:"installing_since"`
	DecideAt           sql.NullInt64 `bun:"decide_at"`
	NewRevisionCounter sql.NullInt64 `bun:"new_revision_counter"`
	OldRevisionCounter sql.NullInt64 `bun:"old_revision_counter"`
	Reason             string        `bun:"reason"`
	UpdatedAt          int64         `bun:"updated_at"`
}

func (r *rolloutTargetRow) toTarget() core.RolloutTarget {
	t := core.RolloutTarget{RolloutID: r.RolloutID, UID: r.MountUID, Phase: r.Phase, State: core.RolloutTargetState(r.State),
		CommandID: r.CommandID, Reason: r.Reason, UpdatedAt: fromMillis(r.UpdatedAt)}
	if r.InstallingSince.Valid {
		t.InstallingSince = fromMillis(r.InstallingSince.Int64)
	}
	t.NewRevisionCounter, t.OldRevisionCounter = fromCounter(r.NewRevisionCounter), fromCounter(r.OldRevisionCounter)
	return t
}

func fromCounter(n sql.NullInt64) *uint64 {
	if !n.Valid {
		return nil
	}
	c := uint64(n.Int64)
	return &c
}

func toCounter(c *uint64) sql.NullInt64 {
	if c == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*c), Valid: true}
}

func rolloutNotFound(id string) error {
	return core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
}

// rolloutTargetBound is MaxRolloutTargets unless a test set a smaller one.
func (s *Store) rolloutTargetBound() int {
	if s.maxRolloutTargets > 0 {
		return s.maxRolloutTargets
	}
	return core.MaxRolloutTargets
}

// LimitRolloutTargets makes CreateRollout refuse more than n targets
// instead of core.MaxRolloutTargets (the contract suite); 0 restores it.
func (s *Store) LimitRolloutTargets(n int) { s.maxRolloutTargets = n }

// rolloutTargetBatch bounds the rows of one INSERT of targets.
const rolloutTargetBatch = 1000

// CreateRollout implements core.RolloutStore. The targets are read in
// one SELECT over the mounts the filter selects (cut at one past the
// bound), split into phases in Go (core.AssignRolloutPhases) and inserted
// in batches; rollouts_one_live makes the second of two creations for
// one model fail.
func (s *Store) CreateRollout(ctx context.Context, r core.Rollout, f core.MountFilter, now time.Time) (core.Rollout, []*core.Event, error) {
	bound := s.rolloutTargetBound()
	var events []*core.Event
	var out core.Rollout
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		events = nil
		var live []rolloutRow
		if err := tx.NewSelect().Model(&live).Where("account_id = ? AND model_number = ? AND state IN ('RUNNING', 'PAUSED')",
			r.AccountID, r.ModelNumber).Limit(1).Scan(ctx); err != nil {
			return err
		}
		if len(live) > 0 {
			return core.Errorf(core.CodeConflict, "rollout %q of model %q is %s; cancel it first", live[0].ID, r.ModelNumber, live[0].State)
		}
		var uids []string
		sel := tx.NewSelect().Model((*mountRow)(nil)).Column("uid").
			Where("owner_account_id = ? AND association_state = 'ASSOCIATED'", r.AccountID).
			Where("model_number = ? AND software_revision <> ?", r.ModelNumber, r.SoftwareRevision).
			Where("device_public_key IS NOT NULL AND device_public_key <> ''")
		if err := filterMounts(sel, f).Order("uid").Limit(bound+1).Scan(ctx, &uids); err != nil {
			return err
		}
		if len(uids) > bound {
			var v core.Validation
			v.Add("filter", "selects more than %d mounts; a rollout has at most %d targets", bound, bound)
			return v.Err()
		}
		phases := core.AssignRolloutPhases(uids, r.Phases)
		r.State, r.PausedReason, r.OpenPhase, r.EndedAt = core.RolloutRunning, "", 0, time.Time{}
		r.Targets, r.Counts, r.SampleHealthy, r.SampleFailed = len(uids), core.RolloutCounts{}, 0, 0
		for _, p := range phases {
			if p == 0 {
				r.Counts.Eligible++
			} else {
				r.Counts.Pending++
			}
		}
		if _, err := tx.NewInsert().Model(toRolloutRow(r)).Exec(ctx); err != nil {
			if isUniqueViolation(err) {
				return core.Errorf(core.CodeConflict, "a rollout of model %q is RUNNING or PAUSED already; cancel it first", r.ModelNumber)
			}
			return err
		}
		for from := 0; from < len(uids); from += rolloutTargetBatch {
			to := min(from+rolloutTargetBatch, len(uids))
			var sb strings.Builder
			args := make([]any, 0, (to-from)*5)
			sb.WriteString(`INSERT INTO rollout_targets (rollout_id, mount_uid, phase, state, command_id, reason, updated_at) VALUES `)
			for i := from; i < to; i++ {
				if i > from {
					sb.WriteString(", ")
				}
				state := core.TargetStatePending
				if phases[i] == 0 {
					state = core.TargetStateEligible
				}
				sb.WriteString("(?, ?, ?, ?, '', '', ?)")
				args = append(args, r.ID, uids[i], phases[i], string(state), millis(now))
			}
			if _, err := tx.NewRaw(sb.String(), args...).Exec(ctx); err != nil {
				return err
			}
		}
		var err error
		events, err = s.settleRollout(ctx, tx, &r, now, []*core.Event{core.RolloutEvent(core.EventRolloutPhaseOpened, r, now)})
		if err != nil {
			return err
		}
		out = r
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Rollout{}, nil, err
	}
	return out, events, nil
}

// advanceRollout applies the gates to r (core.AdvanceRolloutWith), each
// phase it opens turned ELIGIBLE with one UPDATE (rollout_targets_pending);
// the caller saves r and appends the events.
func (s *Store) advanceRollout(ctx context.Context, tx bun.Tx, r *core.Rollout, now time.Time) ([]*core.Event, error) {
	return core.AdvanceRolloutWith(r, now, func(phase int) (int, error) {
		res, err := tx.NewRaw(`UPDATE rollout_targets SET state = 'ELIGIBLE', updated_at = ?
			WHERE rollout_id = ? AND phase = ? AND state = 'PENDING'`, millis(now), r.ID, phase).Exec(ctx)
		if err != nil {
			return 0, err
		}
		n, err := res.RowsAffected()
		return int(n), err
	})
}

// settleRollout ends every transition of r: the gates (advanceRollout),
// r saved, and events (the transition's own) with the gates' appended to
// the log; it returns them all.
func (s *Store) settleRollout(ctx context.Context, tx bun.Tx, r *core.Rollout, now time.Time, events []*core.Event) ([]*core.Event, error) {
	more, err := s.advanceRollout(ctx, tx, r, now)
	if err != nil {
		return nil, err
	}
	events = append(events, more...)
	if err := s.saveRollout(ctx, tx, *r); err != nil {
		return nil, err
	}
	for _, e := range events {
		if err := s.appendAccountEvent(ctx, tx, e); err != nil {
			return nil, err
		}
	}
	return events, nil
}

// saveRollout writes what the transitions move of r.
func (s *Store) saveRollout(ctx context.Context, tx bun.Tx, r core.Rollout) error {
	_, err := tx.NewRaw(`UPDATE rollouts SET state = ?, paused_reason = ?, open_phase = ?, pending = ?, eligible = ?,
		installing = ?, healthy = ?, failed = ?, sample_healthy = ?, sample_failed = ?, ended_at = ? WHERE id = ?`,
		string(r.State), r.PausedReason, r.OpenPhase, r.Counts.Pending, r.Counts.Eligible, r.Counts.Installing,
		r.Counts.Healthy, r.Counts.Failed, r.SampleHealthy, r.SampleFailed,
		sql.NullInt64{Int64: optMillis(r.EndedAt), Valid: !r.EndedAt.IsZero()}, r.ID).Exec(ctx)
	return err
}

// saveTarget writes t; decide_at is its health window's end while
// INSTALLING.
func (s *Store) saveTarget(ctx context.Context, tx bun.Tx, r core.Rollout, t core.RolloutTarget) error {
	decideAt := sql.NullInt64{}
	if t.State == core.TargetStateInstalling {
		decideAt = sql.NullInt64{Int64: millis(t.InstallingSince.Add(r.HealthWindow)), Valid: true}
	}
	since := sql.NullInt64{Int64: optMillis(t.InstallingSince), Valid: !t.InstallingSince.IsZero()}
	_, err := tx.NewRaw(`UPDATE rollout_targets SET state = ?, command_id = ?, installing_since = ?, decide_at = ?,
		new_revision_counter = ?, old_revision_counter = ?, reason = ?, updated_at = ? WHERE rollout_id = ? AND mount_uid = ?`,
		string(t.State), t.CommandID, since, decideAt, toCounter(t.NewRevisionCounter), toCounter(t.OldRevisionCounter),
		t.Reason, millis(t.UpdatedAt), t.RolloutID, t.UID).Exec(ctx)
	return err
}

// lockRollout reads rollout id in tx, locking its row on PostgreSQL
// (SQLite has one writer): every transition of a rollout and its targets
// goes through this lock. nil when there is no such rollout.
func (s *Store) lockRollout(ctx context.Context, tx bun.Tx, id string) (*core.Rollout, error) {
	query := `SELECT * FROM rollouts WHERE id = ?`
	if s.postgres {
		query += ` FOR UPDATE`
	}
	var row rolloutRow
	err := tx.NewRaw(query, id).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r, err := row.toRollout()
	return &r, err
}

func (s *Store) rolloutTarget(ctx context.Context, db bun.IDB, id, uid string) (*core.RolloutTarget, error) {
	var row rolloutTargetRow
	err := db.NewSelect().Model(&row).Where("rollout_id = ? AND mount_uid = ?", id, uid).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := row.toTarget()
	return &t, nil
}

func (s *Store) rolloutIn(ctx context.Context, db bun.IDB, accountID, id string) (core.Rollout, error) {
	var row rolloutRow
	err := db.NewSelect().Model(&row).Where("id = ? AND account_id = ?", id, accountID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return core.Rollout{}, rolloutNotFound(id)
	}
	if err != nil {
		return core.Rollout{}, err
	}
	return row.toRollout()
}

// Rollout implements core.RolloutStore.
func (s *Store) Rollout(ctx context.Context, accountID, id string) (r core.Rollout, err error) {
	err = s.read(ctx, func(db *bun.DB) error {
		r, err = s.rolloutIn(ctx, db, accountID, id)
		return err
	})
	return r, err
}

// ListRollouts implements core.RolloutStore: newest first
// (rollouts_account_created read backwards).
func (s *Store) ListRollouts(ctx context.Context, accountID string, p core.Page) ([]core.Rollout, int, error) {
	var rows []rolloutRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("account_id = ?", accountID).
			OrderExpr("created_at DESC, id DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out, err := toRollouts(rows)
	return out, total, err
}

// RunningRolloutsOf implements core.RolloutStore.
func (s *Store) RunningRolloutsOf(ctx context.Context, model, revision string) ([]core.Rollout, error) {
	var rows []rolloutRow
	if err := s.db.NewSelect().Model(&rows).Where("state = 'RUNNING' AND model_number = ? AND software_revision = ?", model, revision).
		Order("id").Scan(ctx); err != nil {
		return nil, err
	}
	return toRollouts(rows)
}

// RolloutTargets implements core.RolloutStore.
func (s *Store) RolloutTargets(ctx context.Context, accountID, id string, p core.Page) ([]core.RolloutTarget, int, error) {
	if _, err := s.Rollout(ctx, accountID, id); err != nil {
		return nil, 0, err
	}
	var rows []rolloutTargetRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("rollout_id = ?", id).
			Order("mount_uid").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.RolloutTarget, len(rows))
	for i := range rows {
		out[i] = rows[i].toTarget()
	}
	return out, total, nil
}

// ChangeRollout implements core.RolloutStore. A rollout RUNNING after
// the change (resumed) has its gates applied at once; a canceled one's
// INSTALLING targets leave the sweep.
func (s *Store) ChangeRollout(ctx context.Context, accountID, id string, now time.Time,
	change func(*core.Rollout) ([]*core.Event, error)) (core.Rollout, []*core.Event, error) {
	var out core.Rollout
	var events []*core.Event
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		r, err := s.lockRollout(ctx, tx, id)
		if err != nil {
			return err
		}
		if r == nil || r.AccountID != accountID {
			return rolloutNotFound(id)
		}
		if events, err = change(r); err != nil {
			return err
		}
		if r.State == core.RolloutCanceled {
			if _, err := tx.NewRaw(`UPDATE rollout_targets SET decide_at = NULL WHERE rollout_id = ? AND state = 'INSTALLING'`,
				r.ID).Exec(ctx); err != nil {
				return err
			}
		}
		if events, err = s.settleRollout(ctx, tx, r, now, events); err != nil {
			return err
		}
		out = *r
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Rollout{}, nil, err
	}
	return out, events, nil
}

// RolloutOffers implements core.RolloutStore: the mount's offered targets
// (rollout_targets_offered) joined with their RUNNING rollouts of the
// account in one statement, however many canceled rollouts the mount was
// a target of.
func (s *Store) RolloutOffers(ctx context.Context, uid, accountID string) ([]core.RolloutOffer, error) {
	return s.rolloutsAt(ctx, uid, `t.mount_uid = ? AND t.state IN ('ELIGIBLE', 'INSTALLING') AND r.account_id = ? AND r.state = 'RUNNING'
		ORDER BY t.rollout_id`, uid, accountID)
}

// MountRollouts implements core.RolloutStore: newest first, through
// rollout_targets_mount; the account is the rollout's, so a mount that
// changed hands shows each account its own.
func (s *Store) MountRollouts(ctx context.Context, accountID, uid string, p core.Page) ([]core.RolloutOffer, int, error) {
	var total int
	if err := s.db.NewRaw(`SELECT COUNT(*) FROM rollout_targets t JOIN rollouts r ON r.id = t.rollout_id
		WHERE t.mount_uid = ? AND r.account_id = ?`, uid, accountID).Scan(ctx, &total); err != nil {
		return nil, 0, err
	}
	out, err := s.rolloutsAt(ctx, uid, `t.mount_uid = ? AND r.account_id = ?
		ORDER BY r.created_at DESC, r.id DESC LIMIT ? OFFSET ?`, uid, accountID, p.PageSize, p.Offset())
	return out, total, err
}

// rolloutsAt reads rollouts with their target at mount uid: where (and
// its order) follows the join of rollout_targets t and rollouts r.
func (s *Store) rolloutsAt(ctx context.Context, uid, where string, args ...any) ([]core.RolloutOffer, error) {
	var rows []struct {
		rolloutRow       `bun:"extend"`
		TargetPhase      int           `bun:"t_phase"`
		TargetState      string        `bun:"t_state"`
		TargetCommandID  string        `bun:"t_command_id"`
		TargetSince      sql.NullInt64 `bun:"t_installing_since"`
		TargetNewCounter sql.NullInt64 `bun:"t_new_revision_counter"`
		TargetOldCounter sql.NullInt64 `bun:"t_old_revision_counter"`
		TargetReason     string        `bun:"t_reason"`
		TargetUpdatedAt  int64         `bun:"t_updated_at"`
	}
	if err := s.db.NewRaw(`SELECT r.*, t.phase AS t_phase, t.state AS t_state, t.command_id AS t_command_id,
			t.installing_since AS t_installing_since, t.new_revision_counter AS t_new_revision_counter,
			t.old_revision_counter AS t_old_revision_counter, t.reason AS t_reason, t.updated_at AS t_updated_at
		FROM rollout_targets t JOIN rollouts r ON r.id = t.rollout_id
		WHERE `+where, args...).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	out := make([]core.RolloutOffer, 0, len(rows))
	for i := range rows {
		r, err := rows[i].toRollout()
		if err != nil {
			return nil, err
		}
		t := rolloutTargetRow{RolloutID: r.ID, MountUID: uid, Phase: rows[i].TargetPhase, State: rows[i].TargetState,
			CommandID: rows[i].TargetCommandID, InstallingSince: rows[i].TargetSince, NewRevisionCounter: rows[i].TargetNewCounter,
			OldRevisionCounter: rows[i].TargetOldCounter, Reason: rows[i].TargetReason, UpdatedAt: rows[i].TargetUpdatedAt}
		out = append(out, core.RolloutOffer{Rollout: r, Target: t.toTarget()})
	}
	return out, nil
}

// RolloutFor implements core.RolloutStore (rollouts_one_live).
func (s *Store) RolloutFor(ctx context.Context, accountID, model, uid string) (core.Rollout, *core.RolloutTarget, bool, error) {
	var rows []rolloutRow
	if err := s.db.NewSelect().Model(&rows).Where("account_id = ? AND model_number = ? AND state IN ('RUNNING', 'PAUSED')",
		accountID, model).Limit(1).Scan(ctx); err != nil {
		return core.Rollout{}, nil, false, err
	}
	if len(rows) == 0 {
		return core.Rollout{}, nil, false, nil
	}
	r, err := rows[0].toRollout()
	if err != nil {
		return core.Rollout{}, nil, false, err
	}
	t, err := s.rolloutTarget(ctx, s.db, r.ID, uid)
	if err != nil {
		return core.Rollout{}, nil, false, err
	}
	return r, t, true, nil
}

// DecideRolloutTargets implements core.RolloutStore: the due targets
// (rollout_targets_due), then each rollout locked in id order (so that
// two sweepers never wait on each other in a cycle) and its targets read
// again under the lock: of two sweepers at once, the second decides none
// of the first's.
func (s *Store) DecideRolloutTargets(ctx context.Context, now time.Time, limit int) (int, []*core.Event, error) {
	var due []rolloutTargetRow
	if err := s.db.NewSelect().Model(&due).Column("rollout_id", "mount_uid").
		Where("state = 'INSTALLING' AND decide_at IS NOT NULL AND decide_at <= ?", millis(now)).
		Order("decide_at", "rollout_id", "mount_uid").Limit(limit).Scan(ctx); err != nil || len(due) == 0 {
		return 0, nil, err
	}
	byRollout := map[string][]string{}
	for _, d := range due {
		byRollout[d.RolloutID] = append(byRollout[d.RolloutID], d.MountUID)
	}
	ids := make([]string, 0, len(byRollout))
	for id := range byRollout {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var events []*core.Event
	decided := 0
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		events, decided = events[:0], 0
		for _, id := range ids {
			r, err := s.lockRollout(ctx, tx, id)
			if err != nil {
				return err
			}
			if r == nil || (r.State != core.RolloutRunning && r.State != core.RolloutPaused) {
				continue
			}
			moved := false
			for _, uid := range byRollout[id] {
				t, err := s.rolloutTarget(ctx, tx, id, uid)
				if err != nil {
					return err
				}
				if t == nil || t.State != core.TargetStateInstalling || t.InstallingSince.Add(r.HealthWindow).After(now) {
					continue
				}
				next := core.DecideAtWindowEnd(*r, *t, now)
				core.ApplyRolloutTarget(r, *t, next)
				if err := s.saveTarget(ctx, tx, *r, next); err != nil {
					return err
				}
				moved = true
				decided++
			}
			if !moved {
				continue
			}
			more, err := s.settleRollout(ctx, tx, r, now, nil)
			if err != nil {
				return err
			}
			events = append(events, more...)
		}
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return decided, events, nil
}

// checkRolloutCommand tells whether c may be issued for its rollout: the
// rollout is the command's account's and RUNNING, and c's mount a target
// ELIGIBLE or INSTALLING; CONFLICT otherwise. It locks the rollout's row
// (after a key share of the mount's, the lock the command's insert takes
// anyway: a report, which locks the mount and then the rollout, then
// never waits on this transaction in a cycle).
func (s *Store) checkRolloutCommand(ctx context.Context, tx bun.Tx, c core.Command) (*core.Rollout, *core.RolloutTarget, error) {
	if s.postgres {
		if _, err := tx.NewRaw(`SELECT uid FROM mounts WHERE uid = ? FOR KEY SHARE`, c.MountUID).Exec(ctx); err != nil {
			return nil, nil, err
		}
	}
	r, err := s.lockRollout(ctx, tx, c.RolloutID)
	if err != nil {
		return nil, nil, err
	}
	if r == nil || r.AccountID != c.AccountID {
		return nil, nil, core.Errorf(core.CodeConflict, "rollout %q does not exist", c.RolloutID)
	}
	if r.State != core.RolloutRunning {
		return nil, nil, core.Errorf(core.CodeConflict, "rollout %q is %s", c.RolloutID, r.State)
	}
	t, err := s.rolloutTarget(ctx, tx, c.RolloutID, c.MountUID)
	if err != nil {
		return nil, nil, err
	}
	if t == nil || (t.State != core.TargetStateEligible && t.State != core.TargetStateInstalling) {
		return nil, nil, core.Errorf(core.CodeConflict, "rollout %q offers mount %q nothing", c.RolloutID, c.MountUID)
	}
	return r, t, nil
}

// installRolloutTarget records c as the target's latest command; the
// target keeps its state (a fetch is no outcome: core.DecideRolloutReceipt).
func (s *Store) installRolloutTarget(ctx context.Context, tx bun.Tx, r *core.Rollout, t core.RolloutTarget, c core.Command) error {
	t.CommandID, t.UpdatedAt = c.ID, fromMillis(millis(c.GeneratedAt))
	return s.saveTarget(ctx, tx, *r, t)
}

// decideRolloutTarget applies the deciding receipt of rollout command c
// (core.DecideRolloutReceipt) under the rollout's lock and returns the
// events appended.
func (s *Store) decideRolloutTarget(ctx context.Context, tx bun.Tx, c core.Command, now time.Time) ([]*core.Event, error) {
	r, err := s.lockRollout(ctx, tx, c.RolloutID)
	if err != nil || r == nil || (r.State != core.RolloutRunning && r.State != core.RolloutPaused) {
		return nil, err
	}
	t, err := s.rolloutTarget(ctx, tx, c.RolloutID, c.MountUID)
	if err != nil || t == nil {
		return nil, err
	}
	next, changed := core.DecideRolloutReceipt(*t, c, fromMillis(millis(now)))
	if !changed {
		return nil, nil
	}
	return s.moveRolloutTarget(ctx, tx, r, *t, next, now)
}

// moveRolloutTarget saves a target's move, applies the gates and appends
// their events.
func (s *Store) moveRolloutTarget(ctx context.Context, tx bun.Tx, r *core.Rollout, t, next core.RolloutTarget, now time.Time) ([]*core.Event, error) {
	core.ApplyRolloutTarget(r, t, next)
	if err := s.saveTarget(ctx, tx, *r, next); err != nil {
		return nil, err
	}
	return s.settleRollout(ctx, tx, r, fromMillis(millis(now)), nil)
}

// observeRolloutReport applies a verified report of mount uid to its
// ELIGIBLE and INSTALLING targets of RUNNING or PAUSED rollouts of accountID
// (rollout_targets_offered), each under its rollout's lock, and returns
// the events appended.
func (s *Store) observeRolloutReport(ctx context.Context, tx bun.Tx, uid, accountID, revision string, counter uint64,
	now time.Time) ([]*core.Event, error) {
	// Prepared: every verified report asks it, and its parse and plan
	// cost PostgreSQL more than the answer, which is mostly empty.
	st, err := s.prepared(ctx, `SELECT t.rollout_id FROM rollout_targets t JOIN rollouts r ON r.id = t.rollout_id
		WHERE t.mount_uid = `+s.param(1)+` AND t.state IN ('ELIGIBLE', 'INSTALLING') AND r.account_id = `+s.param(2)+`
			AND r.state IN ('RUNNING', 'PAUSED')
		ORDER BY t.rollout_id`)
	if err != nil {
		return nil, err
	}
	s.queries.Add(1)
	rows, err := tx.StmtContext(ctx, st).QueryContext(ctx, uid, accountID)
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := s.db.ScanRows(ctx, rows, &ids); err != nil {
		return nil, err
	}
	var out []*core.Event
	for _, id := range ids {
		r, err := s.lockRollout(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		if r == nil || (r.State != core.RolloutRunning && r.State != core.RolloutPaused) {
			continue
		}
		t, err := s.rolloutTarget(ctx, tx, id, uid)
		if err != nil {
			return nil, err
		}
		if t == nil {
			continue
		}
		next, changed := core.ObserveRolloutReport(*r, *t, revision, counter, fromMillis(millis(now)))
		if !changed {
			continue
		}
		events, err := s.moveRolloutTarget(ctx, tx, r, *t, next, now)
		if err != nil {
			return nil, err
		}
		out = append(out, events...)
	}
	return out, nil
}

// leaveRolloutTargets fails the undecided targets of mount uid in the
// RUNNING or PAUSED rollouts of every account but keep ("" for all): the
// mount left those accounts. The caller has locked the mount's row (its
// UPDATE or DELETE), so the lock order is the mount's, then each
// rollout's, as InsertCommand's. It returns the events appended.
func (s *Store) leaveRolloutTargets(ctx context.Context, tx bun.Tx, uid, keep string, now time.Time) ([]*core.Event, error) {
	var ids []string
	if err := tx.NewRaw(`SELECT t.rollout_id FROM rollout_targets t JOIN rollouts r ON r.id = t.rollout_id
		WHERE t.mount_uid = ? AND t.state IN ('PENDING', 'ELIGIBLE', 'INSTALLING') AND r.account_id <> ?
			AND r.state IN ('RUNNING', 'PAUSED')
		ORDER BY t.rollout_id`, uid, keep).Scan(ctx, &ids); err != nil {
		return nil, err
	}
	var out []*core.Event
	for _, id := range ids {
		r, err := s.lockRollout(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		if r == nil || r.AccountID == keep || (r.State != core.RolloutRunning && r.State != core.RolloutPaused) {
			continue
		}
		t, err := s.rolloutTarget(ctx, tx, id, uid)
		if err != nil {
			return nil, err
		}
		if t == nil {
			continue
		}
		next, changed := core.LeaveRolloutTarget(*t, fromMillis(millis(now)))
		if !changed {
			continue
		}
		events, err := s.moveRolloutTarget(ctx, tx, r, *t, next, now)
		if err != nil {
			return nil, err
		}
		out = append(out, events...)
	}
	return out, nil
}

// eventRollout is a rollout as a ROLLOUT_* event carries it: its row,
// one conversion for both.
type eventRollout = rolloutRow

func toEventRollout(r *core.Rollout) *eventRollout {
	if r == nil {
		return nil
	}
	return toRolloutRow(*r)
}

// fromEventRollout reads an event's rollout; phases that do not parse
// (never written so) leave it out.
func fromEventRollout(r *eventRollout) *core.Rollout {
	if r == nil {
		return nil
	}
	out, err := r.toRollout()
	if err != nil {
		return nil
	}
	return &out
}
