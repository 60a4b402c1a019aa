package graph

import (
	"context"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
	"github.com/mountd/mountd/graph/wsproto"
)

// subscribe streams the events core lets the caller see for the named
// mounts (all it may see when named is false) of the given types (nil:
// all), converted by convert (false skips an event).
func subscribe[T any](ctx context.Context, r *Resolver, uids []string, named bool, types []core.EventType, after *string, convert func(core.Event) (T, bool)) (<-chan T, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, err
	}
	f := core.EventFilter{Types: types}
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
	// The event log's goroutine converts and hands over: no goroutine of
	// our own per subscription. Under graphql-transport-ws it also produces
	// the operation's result (Pull), so the operation holds none either.
	pull := wsproto.PullFrom(ctx)
	ready := func() {
		if pull != nil {
			pull.Ready()
		}
	}
	out := make(chan T, 1)
	err = r.EventLog.Stream(ctx, p, f, func(e core.Event) bool {
		v, ok := convert(e)
		if !ok {
			return true
		}
		select {
		case out <- v:
			ready()
			return true
		case <-ctx.Done():
			return false
		}
	}, func() {
		close(out)
		ready()
	})
	if err != nil {
		return nil, err
	}
	if pull != nil {
		pull.Claim()
	}
	return out, nil
}

// toMountEvent is an event of the log as GraphQL shows it; withIssuer
// shows a command's issuedBy, which a restricted token never sees.
func (r *Resolver) toMountEvent(e core.Event, withIssuer bool) *model.MountEvent {
	out := &model.MountEvent{ID: r.Cursors.Encode(e.ID), Type: model.MountEventType(e.Type), UID: e.UID, Mount: r.eventMount(e),
		OccurredAt: dateTime(e.OccurredAt)}
	if e.Type == core.EventStatesReported {
		out.States = toStates(e.States)
	}
	if e.Command != nil {
		c := toCommand(*e.Command, withIssuer)
		out.Command = &c
	}
	if e.Alarm != nil {
		out.Alarm = toAlarm(*e.Alarm)
	}
	if e.Grant != nil {
		// Restricted tokens with mount items never receive these.
		out.Grant = toGrant(core.Principal{}, *e.Grant)
	}
	return out
}

// eventMount is the event's mount as it was at the event: its presence,
// unless the log computed it, is computed from its lastSeenAt at the
// event's occurredAt (a MOUNT_OFFLINE's mount is OFFLINE, the mount of a
// report ONLINE), as reads compute it at the read.
func (r *Resolver) eventMount(e core.Event) *model.Mount {
	m := e.Mount
	m.Presence = core.EventPresence(e, time.Duration(r.OfflineAfter))
	return toMount(m)
}

// toAccountEvent is an account-level event as GraphQL shows it.
func (r *Resolver) toAccountEvent(e core.Event) *model.AccountEvent {
	out := &model.AccountEvent{ID: r.Cursors.Encode(e.ID), Type: model.AccountEventType(e.Type), OccurredAt: dateTime(e.OccurredAt)}
	if e.Job != nil {
		out.Job = toJob(*e.Job)
	}
	if e.Rollout != nil {
		out.Rollout = toRollout(*e.Rollout)
	}
	return out
}
