package graph

import (
	"context"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

// subscribe streams the events core lets the caller see for the named
// mounts (all it may see when named is false), converted by convert (false
// skips an event).
func subscribe[T any](ctx context.Context, r *Resolver, uids []string, named bool, after *string, convert func(core.Event) (T, bool)) (<-chan T, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, err
	}
	f := core.EventFilter{}
	if named {
		f.MountUIDs = uids
	}
	if after != nil {
		c, err := r.Cursors.Decode(*after)
		if err != nil {
			return nil, err
		}
		f.After = &c
	}
	events, err := r.EventLog.Subscribe(ctx, p, f)
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

// toMountEvent is an event of the log as GraphQL shows it.
func toMountEvent(cursors *core.CursorCodec, e core.Event) *model.MountEvent {
	out := &model.MountEvent{ID: cursors.Encode(e.ID), Type: model.MountEventType(e.Type), UID: e.UID, Mount: toMount(e.Mount),
		OccurredAt: dateTime(e.OccurredAt)}
	if e.Type == core.EventStatesReported {
		out.States = toStates(e.States)
	}
	return out
}
