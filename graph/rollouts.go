package graph

import (
	"context"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

// changeRollout runs one of the rollout's state changes (pause, resume,
// cancel) for the caller and answers the rollout as it then stands.
func (r *mutationResolver) changeRollout(ctx context.Context, id string,
	change func(context.Context, core.Principal, string) (core.Rollout, error)) (*model.Rollout, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, err
	}
	ro, err := change(ctx, p, id)
	if err != nil {
		return nil, err
	}
	return toRollout(ro), nil
}
