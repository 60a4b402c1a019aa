package graph

import (
	"context"

	"github.com/mountd/mountd/core"
)

// subscribe streams the events core lets the caller see for the named
// mounts (all it may see when named is false), converted by convert (false
// skips an event).
func subscribe[T any](ctx context.Context, r *Resolver, uids []string, named bool, convert func(core.Event) (T, bool)) (<-chan T, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, err
	}
	f := core.EventFilter{}
	if named {
		f.MountUIDs = uids
	}
	events, err := r.Subscriptions.Subscribe(ctx, p, f)
	if err != nil {
		return nil, err
	}
	out := make(chan T, 1)
	go func() {
		defer close(out)
		for e := range events {
			v, ok := convert(e)
			if !ok {
				continue
			}
			select {
			case out <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
