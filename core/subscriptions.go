package core

import "context"

// EventFilter is what a subscriber asks for: the events of the named mounts,
// or, with MountUIDs nil, of every mount the principal may see.
type EventFilter struct {
	MountUIDs []string
}

// SubscriptionService decides who may follow which mounts' events and
// narrows the account's event stream to them.
type SubscriptionService struct {
	events EventBus
	mounts *MountService
}

// NewSubscriptionService returns a SubscriptionService over the event bus;
// mounts decides whether a named mount is reachable.
func NewSubscriptionService(events EventBus, mounts *MountService) *SubscriptionService {
	return &SubscriptionService{events: events, mounts: mounts}
}

// Authorize decides whether p may subscribe with f: the action, and each
// named mount under the rules of reading it (a mount p cannot reach is
// MOUNT_NOT_FOUND). A subscriber that joins a running shared execution is
// checked here, since it runs no subscription of its own.
func (s *SubscriptionService) Authorize(ctx context.Context, p Principal, f EventFilter) error {
	if err := p.Authorize(ActionSubscribe); err != nil {
		return err
	}
	for _, uid := range f.MountUIDs {
		if _, err := s.mounts.Mount(ctx, p, uid); err != nil {
			return err
		}
	}
	return nil
}

// Subscribe returns the events p may see that f asks for, until ctx ends;
// the channel closes then. One goroutine per subscription filters.
func (s *SubscriptionService) Subscribe(ctx context.Context, p Principal, f EventFilter) (<-chan Event, error) {
	if err := s.Authorize(ctx, p, f); err != nil {
		return nil, err
	}
	var want map[string]bool
	if f.MountUIDs != nil {
		want = make(map[string]bool, len(f.MountUIDs))
		for _, uid := range f.MountUIDs {
			want[uid] = true
		}
	}
	all, err := s.events.Subscribe(ctx, p.AccountID)
	if err != nil {
		return nil, err
	}
	out := make(chan Event, 1)
	go func() {
		defer close(out)
		for e := range all {
			if want != nil && !want[e.UID] || !p.CanSeeMount(e.UID) {
				continue
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}
