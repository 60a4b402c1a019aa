package memory

import (
	"context"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.JobStore = (*Store)(nil)

var errJobsNotBuilt = core.Errorf(core.CodeUnavailable, "jobs are not built yet")

// CreateJob implements core.JobStore.
func (s *Store) CreateJob(ctx context.Context, j core.Job, f core.MountFilter, now time.Time) (core.Job, *core.Event, error) {
	return core.Job{}, nil, errJobsNotBuilt
}

// Job implements core.JobStore.
func (s *Store) Job(ctx context.Context, accountID, id string) (core.Job, error) {
	return core.Job{}, errJobsNotBuilt
}

// ListJobs implements core.JobStore.
func (s *Store) ListJobs(ctx context.Context, accountID string, p core.Page) ([]core.Job, int, error) {
	return nil, 0, errJobsNotBuilt
}

// JobTargets implements core.JobStore.
func (s *Store) JobTargets(ctx context.Context, accountID, id string, p core.Page) ([]core.JobTarget, int, error) {
	return nil, 0, errJobsNotBuilt
}

// CancelJob implements core.JobStore.
func (s *Store) CancelJob(ctx context.Context, accountID, id string, now time.Time) (core.Job, error) {
	return core.Job{}, errJobsNotBuilt
}

// ActiveJobs implements core.JobStore.
func (s *Store) ActiveJobs(ctx context.Context, accountID string) (int, error) {
	return 0, errJobsNotBuilt
}

// PendingJobs implements core.JobStore.
func (s *Store) PendingJobs(ctx context.Context, uid, accountID string, now time.Time, limit int) ([]core.Job, error) {
	return nil, errJobsNotBuilt
}

// ExpireJobs implements core.JobStore.
func (s *Store) ExpireJobs(ctx context.Context, now time.Time, limit int) ([]*core.Event, error) {
	return nil, errJobsNotBuilt
}
