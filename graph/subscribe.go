package graph

import (
	"context"

	"github.com/mountd/mountd/core"
)

// subscribe checks the caller's rights and streams the account's events,
// narrowed to the given mounts (when named) and to what the token may see,
// converted by convert (false skips an event). One goroutine per
// subscription does the filtering and the conversion.
// A named mount the caller cannot reach is MOUNT_NOT_FOUND, as in REST.
func subscribe[T any](ctx context.Context, r *Resolver, uids []string, named bool, convert func(core.Event) (T, bool)) (<-chan T, error) {
	p, err := core.PrincipalFrom(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.authorizeSubscription(ctx, p, uids); err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, uid := range uids {
		want[uid] = true
	}
	all, err := r.Events.Subscribe(ctx, p.AccountID)
	if err != nil {
		return nil, err
	}
	out := make(chan T, 1)
	go func() {
		defer close(out)
		for e := range all {
			if (named && !want[e.UID]) || !p.CanSeeMount(e.UID) {
				continue
			}
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

// authorizeSubscription decides whether p may subscribe to the events of
// the named mounts (or of every mount it may see, for none).
func (r *Resolver) authorizeSubscription(ctx context.Context, p core.Principal, uids []string) error {
	if err := p.Authorize(core.ActionSubscribe); err != nil {
		return err
	}
	for _, uid := range uids {
		// Reading the mount applies the same rules as GET /mounts/{uid}.
		if _, err := r.MountService.Mount(ctx, p, uid); err != nil {
			return err
		}
	}
	return nil
}
