package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.JobStore = (*Store)(nil)

// jobState is the jobs and their targets.
type jobState struct {
	jobs    map[string]*core.Job
	targets map[string]map[string]*core.JobTarget // job id → mount uid →
	// maxTargets, when not 0, replaces core.MaxJobTargets (tests).
	maxTargets int
}

// LimitJobTargets makes CreateJob refuse more than n targets instead of
// core.MaxJobTargets, as the database store's; 0 restores it.
func (s *Store) LimitJobTargets(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.jb.maxTargets = n
}

func cloneJob(j core.Job) core.Job {
	j.Params = maps.Clone(j.Params)
	if j.Params == nil {
		j.Params = map[string]string{}
	}
	return j
}

func jobNotFound(id string) error { return core.Errorf(core.CodeJobNotFound, "job %q not found", id) }

// jobMatchesLocked reports whether f selects mount m for a job of
// accountID: ASSOCIATED, owned, and within f's fields.
func (s *Store) jobMatchesLocked(m *core.Mount, accountID string, f core.MountFilter) bool {
	switch {
	case m.OwnerID != accountID || m.State != core.StateAssociated,
		f.MACAddress != nil && m.MACAddress != strings.ToUpper(*f.MACAddress),
		f.MountUID != nil && m.UID != *f.MountUID,
		f.SerialNumber != nil && m.SerialNumber != *f.SerialNumber,
		f.UIDs != nil && !slices.Contains(f.UIDs, m.UID):
		return false
	}
	return s.exprMatchesLocked(m, f)
}

// CreateJob implements core.JobStore.
func (s *Store) CreateJob(ctx context.Context, j core.Job, f core.MountFilter, now time.Time) (core.Job, *core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jb.jobs == nil {
		s.jb.jobs, s.jb.targets = map[string]*core.Job{}, map[string]map[string]*core.JobTarget{}
	}
	if _, ok := s.jb.jobs[j.ID]; ok {
		return core.Job{}, nil, core.Errorf(core.CodeConflict, "job %q already exists", j.ID)
	}
	active := 0
	for _, o := range s.jb.jobs {
		if o.AccountID == j.AccountID && o.State == core.JobActive {
			active++
		}
	}
	if active >= core.MaxActiveJobsPerAccount {
		return core.Job{}, nil, core.Errorf(core.CodeConflict,
			"an account has at most %d active jobs; cancel one or wait for one to complete", core.MaxActiveJobsPerAccount)
	}
	// Created after the account's newest job, so that jobs of one
	// millisecond keep the order of creation (as bunstore).
	j.CreatedAt = j.CreatedAt.Truncate(time.Millisecond)
	for _, o := range s.jb.jobs {
		if o.AccountID == j.AccountID && !j.CreatedAt.After(o.CreatedAt) {
			j.CreatedAt = o.CreatedAt.Add(time.Millisecond)
		}
	}
	bound := core.MaxJobTargets
	if s.jb.maxTargets > 0 {
		bound = s.jb.maxTargets
	}
	now = ms(now)
	targets := map[string]*core.JobTarget{}
	for _, m := range s.mounts {
		if !s.jobMatchesLocked(m, j.AccountID, f) {
			continue
		}
		if len(targets) == bound {
			field := "filter"
			if f.UIDs != nil {
				field = "mountUids"
			}
			var v core.Validation
			v.Add(field, "selects more than %d mounts; a job has at most %d targets", bound, bound)
			return core.Job{}, nil, v.Err()
		}
		targets[m.UID] = &core.JobTarget{JobID: j.ID, UID: m.UID, Status: core.TargetPending, UpdatedAt: now}
	}
	j = cloneJob(j)
	j.CreatedAt, j.ExpiresAt = ms(j.CreatedAt), ms(j.ExpiresAt)
	j.State, j.EndedAt, j.Finished = core.JobActive, time.Time{}, 0
	j.Targets, j.Counts = len(targets), core.JobCounts{Pending: len(targets)}
	var ev *core.Event
	if len(targets) == 0 {
		j.State, j.EndedAt = core.JobCompleted, now
		ev = core.JobCompletedEvent(j, now)
		s.appendAccountLocked(ev)
	}
	stored := j
	s.jb.jobs[j.ID], s.jb.targets[j.ID] = &stored, targets
	s.auditLocked(ctx)
	return cloneJob(j), ev, nil
}

func (s *Store) jobLocked(accountID, id string) (*core.Job, error) {
	j, ok := s.jb.jobs[id]
	if !ok || j.AccountID != accountID {
		return nil, jobNotFound(id)
	}
	return j, nil
}

// Job implements core.JobStore.
func (s *Store) Job(_ context.Context, accountID, id string) (core.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.jobLocked(accountID, id)
	if err != nil {
		return core.Job{}, err
	}
	return cloneJob(*j), nil
}

// ListJobs implements core.JobStore.
func (s *Store) ListJobs(_ context.Context, accountID string, p core.Page) ([]core.Job, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.Job
	for _, j := range s.jb.jobs {
		if j.AccountID == accountID {
			all = append(all, cloneJob(*j))
		}
	}
	slices.SortFunc(all, func(a, b core.Job) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	return page(all, p), len(all), nil
}

// JobTargets implements core.JobStore.
func (s *Store) JobTargets(_ context.Context, accountID, id string, p core.Page) ([]core.JobTarget, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.jobLocked(accountID, id); err != nil {
		return nil, 0, err
	}
	all := make([]core.JobTarget, 0, len(s.jb.targets[id]))
	for _, t := range s.jb.targets[id] {
		all = append(all, *t)
	}
	slices.SortFunc(all, func(a, b core.JobTarget) int { return cmp.Compare(a.UID, b.UID) })
	return page(all, p), len(all), nil
}

// CancelJob implements core.JobStore.
func (s *Store) CancelJob(ctx context.Context, accountID, id string, now time.Time) (core.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j, err := s.jobLocked(accountID, id)
	if err != nil {
		return core.Job{}, err
	}
	if j.State != core.JobActive {
		return core.Job{}, core.Errorf(core.CodeConflict, "job %q is %s; only an ACTIVE job can be canceled", id, j.State)
	}
	j.State, j.EndedAt = core.JobCanceled, ms(now)
	s.auditLocked(ctx)
	return cloneJob(*j), nil
}

// ActiveJobs implements core.JobStore.
func (s *Store) ActiveJobs(_ context.Context, accountID string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, j := range s.jb.jobs {
		if j.AccountID == accountID && j.State == core.JobActive {
			n++
		}
	}
	return n, nil
}

// PendingJobs implements core.JobStore.
func (s *Store) PendingJobs(_ context.Context, uid, accountID string, now time.Time, limit int) ([]core.PendingJob, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.PendingJob{}
	for id, j := range s.jb.jobs {
		t, ok := s.jb.targets[id][uid]
		if ok && !t.Final && j.AccountID == accountID && j.State == core.JobActive && j.ExpiresAt.After(now) {
			out = append(out, core.PendingJob{Job: cloneJob(*j), Target: *t})
		}
	}
	slices.SortFunc(out, func(a, b core.PendingJob) int {
		return cmp.Or(a.Job.CreatedAt.Compare(b.Job.CreatedAt), cmp.Compare(a.Job.ID, b.Job.ID))
	})
	return out[:min(limit, len(out))], nil
}

// ExpireJobs implements core.JobStore.
func (s *Store) ExpireJobs(_ context.Context, now time.Time, limit int) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*core.Job
	for _, j := range s.jb.jobs {
		if j.State == core.JobActive && !j.ExpiresAt.After(now) {
			due = append(due, j)
		}
	}
	slices.SortFunc(due, func(a, b *core.Job) int { return cmp.Or(a.ExpiresAt.Compare(b.ExpiresAt), cmp.Compare(a.ID, b.ID)) })
	out := []*core.Event{}
	for _, j := range due[:min(limit, len(due))] {
		j.State, j.EndedAt = core.JobCompleted, j.ExpiresAt
		e := core.JobCompletedEvent(cloneJob(*j), j.EndedAt)
		s.appendAccountLocked(e)
		out = append(out, e)
	}
	return out, nil
}

// checkJobCommandLocked is the database's check of a job command before
// it is stored (bunstore's checkJobCommand).
func (s *Store) checkJobCommandLocked(c core.Command) error {
	j, ok := s.jb.jobs[c.JobID]
	if !ok || j.AccountID != c.AccountID {
		return core.Errorf(core.CodeConflict, "job %q does not exist", c.JobID)
	}
	if j.State != core.JobActive || !j.ExpiresAt.After(c.GeneratedAt) {
		return core.Errorf(core.CodeConflict, "job %q is no longer active", c.JobID)
	}
	if _, ok := s.jb.targets[c.JobID][c.MountUID]; !ok {
		return core.Errorf(core.CodeConflict, "mount %q is not a target of job %q", c.MountUID, c.JobID)
	}
	return nil
}

// moveJobTargetLocked moves the target of c's job at c's mount as c now
// stands, and the job's counts with it; it returns the JOB_COMPLETED event
// it appended when the job thereby completed.
func (s *Store) moveJobTargetLocked(c core.Command, now time.Time) *core.Event {
	j, ok := s.jb.jobs[c.JobID]
	if !ok {
		return nil
	}
	t, ok := s.jb.targets[c.JobID][c.MountUID]
	if !ok {
		return nil
	}
	next, changed := core.AdvanceJobTarget(*t, c, ms(now))
	if !changed {
		return nil
	}
	completed := core.ApplyJobTarget(j, *t, next, ms(now))
	*t = next
	if !completed {
		return nil
	}
	e := core.JobCompletedEvent(cloneJob(*j), ms(now))
	s.appendAccountLocked(e)
	return e
}

// appendAccountLocked appends an account-level event (no mount).
func (s *Store) appendAccountLocked(e *core.Event) {
	s.eventSeq++
	e.ID, e.UID, e.Mount, e.OccurredAt = core.Cursor{Seq: s.eventSeq}, "", core.Mount{}, ms(e.OccurredAt)
	stored := *e
	if e.Job != nil {
		j := cloneJob(*e.Job)
		stored.Job = &j
	}
	if e.Rollout != nil {
		r := cloneRollout(*e.Rollout)
		stored.Rollout = &r
	}
	s.events = append(s.events, stored)
}

// exprMatchesLocked evaluates f.Expr on m with core's evaluator, as
// ListMounts does.
func (s *Store) exprMatchesLocked(m *core.Mount, f core.MountFilter) bool {
	return f.Expr == nil || f.Expr.Matches(*m, latestValues(s.latestLocked(m.UID, m.OwnerID)), f.OfflineCut)
}
