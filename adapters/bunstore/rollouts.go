package bunstore

import (
	"context"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.RolloutStore = (*Store)(nil)

// errRolloutsNotBuilt answers until rollouts are stored here.
var errRolloutsNotBuilt = core.Errorf(core.CodeUnavailable, "rollouts are not built yet")

// CreateRollout implements core.RolloutStore.
func (s *Store) CreateRollout(ctx context.Context, r core.Rollout, f core.MountFilter, now time.Time) (core.Rollout, []*core.Event, error) {
	return core.Rollout{}, nil, errRolloutsNotBuilt
}

// Rollout implements core.RolloutStore.
func (s *Store) Rollout(ctx context.Context, accountID, id string) (core.Rollout, error) {
	return core.Rollout{}, core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
}

// ListRollouts implements core.RolloutStore.
func (s *Store) ListRollouts(ctx context.Context, accountID string, p core.Page) ([]core.Rollout, int, error) {
	return nil, 0, nil
}

// RolloutTargets implements core.RolloutStore.
func (s *Store) RolloutTargets(ctx context.Context, accountID, id string, p core.Page) ([]core.RolloutTarget, int, error) {
	return nil, 0, core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
}

// ChangeRollout implements core.RolloutStore.
func (s *Store) ChangeRollout(ctx context.Context, accountID, id string, now time.Time,
	change func(*core.Rollout) ([]*core.Event, error)) (core.Rollout, []*core.Event, error) {
	return core.Rollout{}, nil, core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
}

// RolloutOffers implements core.RolloutStore.
func (s *Store) RolloutOffers(ctx context.Context, uid, accountID string) ([]core.RolloutOffer, error) {
	return nil, nil
}

// RolloutFor implements core.RolloutStore.
func (s *Store) RolloutFor(ctx context.Context, accountID, model, uid string) (core.Rollout, *core.RolloutTarget, bool, error) {
	return core.Rollout{}, nil, false, nil
}

// DecideRolloutTargets implements core.RolloutStore.
func (s *Store) DecideRolloutTargets(ctx context.Context, now time.Time, limit int) ([]*core.Event, error) {
	return nil, nil
}
