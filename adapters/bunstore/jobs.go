package bunstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.JobStore = (*Store)(nil)

type jobRow struct {
	bun.BaseModel `bun:"table:jobs"`
	ID            string        `bun:"id,pk"`
	AccountID     string        `bun:"account_id"`
	Code          string        `bun:"code"`
	Params        string        `bun:"params"`
	Filter        string        `bun:"filter"`
	Description   string        `bun:"description"`
	State         string        `bun:"state"`
	CreatedAt     int64         `bun:"created_at"`
	ExpiresAt     int64         `bun:"expires_at"`
	EndedAt       sql.NullInt64 `bun:"ended_at"`
	Targets       int           `bun:"targets"`
	Pending       int           `bun:"pending"`
	Issued        int           `bun:"issued"`
	Executed      int           `bun:"executed"`
	Refused       int           `bun:"refused"`
	Unconfirmed   int           `bun:"unconfirmed"`
	Finished      int           `bun:"finished"`
	CreatedBy     string        `bun:"created_by"`
}

func toJobRow(j core.Job) (*jobRow, error) {
	params := j.Params
	if params == nil {
		params = map[string]string{}
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	return &jobRow{ID: j.ID, AccountID: j.AccountID, Code: string(j.Code), Params: string(b), Filter: j.Filter,
		Description: j.Description, State: string(j.State), CreatedAt: millis(j.CreatedAt), ExpiresAt: millis(j.ExpiresAt),
		EndedAt: sql.NullInt64{Int64: optMillis(j.EndedAt), Valid: !j.EndedAt.IsZero()}, Targets: j.Targets,
		Pending: j.Counts.Pending, Issued: j.Counts.Issued, Executed: j.Counts.Executed, Refused: j.Counts.Refused,
		Unconfirmed: j.Counts.Unconfirmed, Finished: j.Finished, CreatedBy: j.CreatedBy}, nil
}

func (r *jobRow) toJob() (core.Job, error) {
	params := map[string]string{}
	if err := json.Unmarshal([]byte(r.Params), &params); err != nil {
		return core.Job{}, fmt.Errorf("job %s: params: %w", r.ID, err)
	}
	j := core.Job{ID: r.ID, AccountID: r.AccountID, Code: core.CommandCode(r.Code), Params: params, Filter: r.Filter,
		Description: r.Description, State: core.JobState(r.State), CreatedAt: fromMillis(r.CreatedAt),
		ExpiresAt: fromMillis(r.ExpiresAt), Targets: r.Targets, Counts: core.JobCounts{Pending: r.Pending, Issued: r.Issued,
			Executed: r.Executed, Refused: r.Refused, Unconfirmed: r.Unconfirmed}, Finished: r.Finished, CreatedBy: r.CreatedBy}
	if r.EndedAt.Valid {
		j.EndedAt = fromMillis(r.EndedAt.Int64)
	}
	return j, nil
}

func toJobs(rows []jobRow) ([]core.Job, error) {
	out := make([]core.Job, len(rows))
	for i := range rows {
		var err error
		if out[i], err = rows[i].toJob(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type jobTargetRow struct {
	bun.BaseModel `bun:"table:job_targets"`
	JobID         string `bun:"job_id,pk"`
	MountUID      string `bun:"mount_uid,pk"`
	Status        string `bun:"status"`
	Final         bool   `bun:"final"`
	CommandID     string `bun:"command_id"`
	UpdatedAt     int64  `bun:"updated_at"`
}

func (r *jobTargetRow) toTarget() core.JobTarget {
	return core.JobTarget{JobID: r.JobID, UID: r.MountUID, Status: core.JobTargetStatus(r.Status), Final: r.Final,
		CommandID: r.CommandID, UpdatedAt: fromMillis(r.UpdatedAt)}
}

func jobNotFound(id string) error { return core.Errorf(core.CodeJobNotFound, "job %q not found", id) }

// jobTargetBound is MaxJobTargets unless a test set a smaller one.
func (s *Store) jobTargetBound() int {
	if s.maxJobTargets > 0 {
		return s.maxJobTargets
	}
	return core.MaxJobTargets
}

// LimitJobTargets makes CreateJob refuse more than n targets instead of
// core.MaxJobTargets, so that the contract suite can cross the bound
// without seeding 100,000 mounts; 0 restores it.
func (s *Store) LimitJobTargets(n int) { s.maxJobTargets = n }

// CreateJob implements core.JobStore. The targets are one INSERT … SELECT
// over the mounts the filter selects (mounts_owner and the filter's
// indexes), cut at one past the bound: a job over the bound costs no more
// than one at it, and its transaction is rolled back.
func (s *Store) CreateJob(ctx context.Context, j core.Job, f core.MountFilter, now time.Time) (core.Job, *core.Event, error) {
	bound := s.jobTargetBound()
	var ev *core.Event
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		ev = nil
		if s.postgres {
			// Creations of one account queue here, so the count below
			// holds until commit.
			if _, err := tx.NewRaw(`SELECT id FROM accounts WHERE id = ? FOR UPDATE`, j.AccountID).Exec(ctx); err != nil {
				return err
			}
		}
		active, err := tx.NewSelect().Model((*jobRow)(nil)).Where("account_id = ? AND state = 'ACTIVE'", j.AccountID).Count(ctx)
		if err != nil {
			return err
		}
		if active >= core.MaxActiveJobsPerAccount {
			return core.Errorf(core.CodeConflict, "an account has at most %d active jobs; cancel one or wait for one to complete",
				core.MaxActiveJobsPerAccount)
		}
		// Jobs are handed out oldest first; two created in one millisecond
		// would tie and fall to their random ids, so a job is created at
		// least a millisecond after the account's newest (jobs_account_created).
		var newest sql.NullInt64
		if err := tx.NewRaw(`SELECT MAX(created_at) FROM jobs WHERE account_id = ?`, j.AccountID).Scan(ctx, &newest); err != nil {
			return err
		}
		if newest.Valid && millis(j.CreatedAt) <= newest.Int64 {
			j.CreatedAt = fromMillis(newest.Int64 + 1)
		}
		j.State, j.Targets, j.Counts, j.Finished, j.EndedAt = core.JobActive, 0, core.JobCounts{}, 0, time.Time{}
		row, err := toJobRow(j)
		if err != nil {
			return err
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return translate(err, core.CodeJobNotFound, fmt.Sprintf("job %q", j.ID))
		}
		sel := tx.NewSelect().Model((*mountRow)(nil)).
			ColumnExpr("?, uid, 'PENDING', FALSE, '', ?", j.ID, millis(now)).
			Where("owner_account_id = ? AND association_state = 'ASSOCIATED'", j.AccountID)
		res, err := tx.NewRaw(`INSERT INTO job_targets (job_id, mount_uid, status, final, command_id, updated_at) ?`,
			filterMounts(sel, f).Limit(bound+1)).Exec(ctx)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n > int64(bound) {
			field := "filter"
			if f.UIDs != nil {
				field = "mountUids"
			}
			var v core.Validation
			v.Add(field, "selects more than %d mounts; a job has at most %d targets", bound, bound)
			return v.Err()
		}
		j.Targets, j.Counts.Pending = int(n), int(n)
		if n == 0 {
			// Nothing to wait for: complete from the start.
			j.State, j.EndedAt = core.JobCompleted, now
			ev = core.JobCompletedEvent(j, now)
		}
		if _, err := tx.NewRaw(`UPDATE jobs SET targets = ?, pending = ?, state = ?, ended_at = ? WHERE id = ?`,
			j.Targets, j.Counts.Pending, string(j.State), sql.NullInt64{Int64: optMillis(j.EndedAt), Valid: !j.EndedAt.IsZero()},
			j.ID).Exec(ctx); err != nil {
			return err
		}
		if err := s.appendAccountEvent(ctx, tx, ev); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
	if err != nil {
		return core.Job{}, nil, err
	}
	return j, ev, nil
}

// Job implements core.JobStore.
func (s *Store) Job(ctx context.Context, accountID, id string) (core.Job, error) {
	var row jobRow
	err := s.read(ctx, func(db *bun.DB) (err error) {
		row, err = s.jobIn(ctx, db, accountID, id)
		return err
	})
	if err != nil {
		return core.Job{}, err
	}
	return row.toJob()
}

// ListJobs implements core.JobStore: newest first (jobs_account_created
// read backwards).
func (s *Store) ListJobs(ctx context.Context, accountID string, p core.Page) ([]core.Job, int, error) {
	var rows []jobRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("account_id = ?", accountID).
			OrderExpr("created_at DESC, id DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	jobs, err := toJobs(rows)
	return jobs, total, err
}

// JobTargets implements core.JobStore.
func (s *Store) JobTargets(ctx context.Context, accountID, id string, p core.Page) ([]core.JobTarget, int, error) {
	if _, err := s.Job(ctx, accountID, id); err != nil {
		return nil, 0, err
	}
	var rows []jobTargetRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("job_id = ?", id).
			Order("mount_uid").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.JobTarget, len(rows))
	for i := range rows {
		out[i] = rows[i].toTarget()
	}
	return out, total, nil
}

// CancelJob implements core.JobStore.
func (s *Store) CancelJob(ctx context.Context, accountID, id string, now time.Time) (core.Job, error) {
	var row jobRow
	err := s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		err := db.NewRaw(`UPDATE jobs SET state = 'CANCELED', ended_at = ?
			WHERE id = ? AND account_id = ? AND state = 'ACTIVE' RETURNING *`, millis(now), id, accountID).Scan(ctx, &row)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		// Not moved: missing, or no longer ACTIVE.
		j, err := s.jobIn(ctx, db, accountID, id)
		if err != nil {
			return err
		}
		return core.Errorf(core.CodeConflict, "job %q is %s; only an ACTIVE job can be canceled", id, j.State)
	})
	if err != nil {
		return core.Job{}, err
	}
	return row.toJob()
}

func (s *Store) jobIn(ctx context.Context, db bun.IDB, accountID, id string) (jobRow, error) {
	var row jobRow
	err := db.NewSelect().Model(&row).Where("id = ? AND account_id = ?", id, accountID).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return row, jobNotFound(id)
	}
	return row, err
}

// ActiveJobs implements core.JobStore.
func (s *Store) ActiveJobs(ctx context.Context, accountID string) (int, error) {
	return s.db.NewSelect().Model((*jobRow)(nil)).Where("account_id = ? AND state = 'ACTIVE'", accountID).Count(ctx)
}

// PendingJobs implements core.JobStore: the mount's unfinished targets
// (job_targets_open), then their jobs, with the target.
func (s *Store) PendingJobs(ctx context.Context, uid, accountID string, now time.Time, limit int) ([]core.PendingJob, error) {
	var rows []struct {
		jobRow          `bun:"extend"`
		TargetStatus    string `bun:"t_status"`
		TargetCommandID string `bun:"t_command_id"`
		TargetUpdatedAt int64  `bun:"t_updated_at"`
	}
	if err := s.db.NewRaw(`SELECT j.*, t.status AS t_status, t.command_id AS t_command_id, t.updated_at AS t_updated_at
		FROM job_targets t JOIN jobs j ON j.id = t.job_id
		WHERE t.mount_uid = ? AND NOT t.final AND j.account_id = ? AND j.state = 'ACTIVE' AND j.expires_at > ?
		ORDER BY j.created_at, j.id LIMIT ?`, uid, accountID, millis(now), limit).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	out := make([]core.PendingJob, len(rows))
	for i := range rows {
		jobs, err := toJobs([]jobRow{rows[i].jobRow})
		if err != nil {
			return nil, err
		}
		t := jobTargetRow{JobID: rows[i].ID, MountUID: uid, Status: rows[i].TargetStatus, CommandID: rows[i].TargetCommandID,
			UpdatedAt: rows[i].TargetUpdatedAt}
		out[i] = core.PendingJob{Job: jobs[0], Target: t.toTarget()}
	}
	return out, nil
}

// ExpireJobs implements core.JobStore: one UPDATE … RETURNING over the
// ACTIVE jobs due (jobs_active_expiry) that re-checks state = 'ACTIVE' on
// every row it changes, so of two sweepers at once the second completes
// none of the first's (as UnconfirmCommands).
func (s *Store) ExpireJobs(ctx context.Context, now time.Time, limit int) ([]*core.Event, error) {
	due, err := s.db.NewSelect().Model((*jobRow)(nil)).Where("state = 'ACTIVE' AND expires_at <= ?", millis(now)).Exists(ctx)
	if err != nil || !due {
		return nil, err
	}
	var events []*core.Event
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		events = events[:0]
		// The batch is locked in job id order, the order in which
		// UnconfirmCommands locks the jobs its commands move: the two
		// sweeps never wait on each other's jobs (a deadlock).
		lock := ""
		if s.postgres {
			lock = " FOR UPDATE"
		}
		var rows []jobRow
		if err := tx.NewRaw(`UPDATE jobs SET state = 'COMPLETED', ended_at = expires_at
			WHERE id IN (SELECT id FROM jobs WHERE state = 'ACTIVE' AND expires_at <= ? ORDER BY id LIMIT ?`+lock+`)
				AND state = 'ACTIVE'
			RETURNING *`, millis(now), limit).Scan(ctx, &rows); err != nil {
			return err
		}
		for i := range rows {
			j, err := rows[i].toJob()
			if err != nil {
				return err
			}
			e := core.JobCompletedEvent(j, j.EndedAt)
			if err := s.appendAccountEvent(ctx, tx, e); err != nil {
				return err
			}
			events = append(events, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return events, nil
}

// lockJob reads job id in tx, locking its row on PostgreSQL (SQLite has one
// writer): every change to a job's counts goes through this lock, so the
// counts stay exact; nil when there is no such job.
func (s *Store) lockJob(ctx context.Context, tx bun.Tx, id string) (*jobRow, error) {
	query := `SELECT * FROM jobs WHERE id = ?`
	if s.postgres {
		query += ` FOR UPDATE`
	}
	var row jobRow
	err := tx.NewRaw(query, id).Scan(ctx, &row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &row, nil
}

// checkJobCommand tells whether a command may be issued for c's job: the
// job is the command's account's, ACTIVE, unexpired when the command is
// generated, and has c's mount as a target; CONFLICT otherwise. It locks
// the job's row.
func (s *Store) checkJobCommand(ctx context.Context, tx bun.Tx, c core.Command) error {
	j, err := s.lockJob(ctx, tx, c.JobID)
	if err != nil {
		return err
	}
	if j == nil || j.AccountID != c.AccountID {
		return core.Errorf(core.CodeConflict, "job %q does not exist", c.JobID)
	}
	if j.State != string(core.JobActive) || j.ExpiresAt <= millis(c.GeneratedAt) {
		return core.Errorf(core.CodeConflict, "job %q is no longer active", c.JobID)
	}
	n, err := tx.NewSelect().Model((*jobTargetRow)(nil)).Where("job_id = ? AND mount_uid = ?", c.JobID, c.MountUID).Count(ctx)
	if err != nil {
		return err
	}
	if n == 0 {
		return core.Errorf(core.CodeConflict, "mount %q is not a target of job %q", c.MountUID, c.JobID)
	}
	return nil
}

// moveJobTarget moves the target of c's job at c's mount as c now stands
// (core.AdvanceJobTarget) and the job's counts with it (ApplyJobTarget),
// under the job's row lock; when the job thereby completes, its
// JOB_COMPLETED event is appended in tx and returned.
func (s *Store) moveJobTarget(ctx context.Context, tx bun.Tx, c core.Command, now time.Time) (*core.Event, error) {
	jr, err := s.lockJob(ctx, tx, c.JobID)
	if err != nil || jr == nil {
		return nil, err
	}
	var tr jobTargetRow
	if err := tx.NewSelect().Model(&tr).Where("job_id = ? AND mount_uid = ?", c.JobID, c.MountUID).Scan(ctx); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, nil
		}
		return nil, err
	}
	j, err := jr.toJob()
	if err != nil {
		return nil, err
	}
	t := tr.toTarget()
	next, changed := core.AdvanceJobTarget(t, c, now)
	if !changed {
		return nil, nil
	}
	completed := core.ApplyJobTarget(&j, t, next, now)
	if _, err := tx.NewRaw(`UPDATE job_targets SET status = ?, final = ?, command_id = ?, updated_at = ?
		WHERE job_id = ? AND mount_uid = ?`, string(next.Status), next.Final, next.CommandID, millis(next.UpdatedAt),
		c.JobID, c.MountUID).Exec(ctx); err != nil {
		return nil, err
	}
	if _, err := tx.NewRaw(`UPDATE jobs SET pending = ?, issued = ?, executed = ?, refused = ?, unconfirmed = ?,
		finished = ?, state = ?, ended_at = ? WHERE id = ?`, j.Counts.Pending, j.Counts.Issued, j.Counts.Executed,
		j.Counts.Refused, j.Counts.Unconfirmed, j.Finished, string(j.State),
		sql.NullInt64{Int64: optMillis(j.EndedAt), Valid: !j.EndedAt.IsZero()}, j.ID).Exec(ctx); err != nil {
		return nil, err
	}
	if !completed {
		return nil, nil
	}
	e := core.JobCompletedEvent(j, now)
	return e, s.appendAccountEvent(ctx, tx, e)
}

// appendAccountEvent appends an account-level event (no mount: mount_uid
// ”) in tx; nil appends nothing.
func (s *Store) appendAccountEvent(ctx context.Context, tx bun.IDB, e *core.Event) error {
	if e == nil {
		return nil
	}
	body, err := json.Marshal(eventBody{Job: toEventJob(e.Job), Rollout: toEventRollout(e.Rollout)})
	if err != nil {
		return err
	}
	e.UID, e.OccurredAt = "", fromMillis(millis(e.OccurredAt))
	var pos struct {
		ID int64  `bun:"id"`
		Tx string `bun:"tx_text"`
	}
	if err := tx.NewRaw(`INSERT INTO events (account_id, type, mount_uid, occurred_at, body) VALUES (?, ?, '', ?, ?)
		RETURNING id, CAST(tx AS TEXT) AS tx_text`, e.AccountID, string(e.Type), millis(e.OccurredAt), string(body)).
		Scan(ctx, &pos); err != nil {
		return err
	}
	txid, err := strconv.ParseUint(pos.Tx, 10, 64)
	if err != nil {
		return fmt.Errorf("event position: %w", err)
	}
	e.ID = core.Cursor{Tx: txid, Seq: pos.ID}
	return nil
}

// eventJob is a job as a JOB_* event carries it, instants as Unix
// milliseconds (0: none).
type eventJob struct {
	ID          string            `json:"id"`
	AccountID   string            `json:"accountId"`
	Code        string            `json:"code"`
	Params      map[string]string `json:"params"`
	Filter      string            `json:"filter"`
	Description string            `json:"description"`
	State       string            `json:"state"`
	CreatedAt   int64             `json:"createdAt"`
	ExpiresAt   int64             `json:"expiresAt"`
	EndedAt     int64             `json:"endedAt,omitempty"`
	Targets     int               `json:"targets"`
	Pending     int               `json:"pending"`
	Issued      int               `json:"issued"`
	Executed    int               `json:"executed"`
	Refused     int               `json:"refused"`
	Unconfirmed int               `json:"unconfirmed"`
	Finished    int               `json:"finished"`
	CreatedBy   string            `json:"createdBy"`
}

func toEventJob(j *core.Job) *eventJob {
	if j == nil {
		return nil
	}
	params := j.Params
	if params == nil {
		params = map[string]string{}
	}
	return &eventJob{ID: j.ID, AccountID: j.AccountID, Code: string(j.Code), Params: params, Filter: j.Filter,
		Description: j.Description, State: string(j.State), CreatedAt: millis(j.CreatedAt), ExpiresAt: millis(j.ExpiresAt),
		EndedAt: optMillis(j.EndedAt), Targets: j.Targets, Pending: j.Counts.Pending, Issued: j.Counts.Issued,
		Executed: j.Counts.Executed, Refused: j.Counts.Refused, Unconfirmed: j.Counts.Unconfirmed, Finished: j.Finished,
		CreatedBy: j.CreatedBy}
}

func fromEventJob(j *eventJob) *core.Job {
	if j == nil {
		return nil
	}
	return &core.Job{ID: j.ID, AccountID: j.AccountID, Code: core.CommandCode(j.Code), Params: j.Params, Filter: j.Filter,
		Description: j.Description, State: core.JobState(j.State), CreatedAt: fromMillis(j.CreatedAt),
		ExpiresAt: fromMillis(j.ExpiresAt), EndedAt: optTime(j.EndedAt), Targets: j.Targets,
		Counts: core.JobCounts{Pending: j.Pending, Issued: j.Issued, Executed: j.Executed, Refused: j.Refused,
			Unconfirmed: j.Unconfirmed}, Finished: j.Finished, CreatedBy: j.CreatedBy}
}
