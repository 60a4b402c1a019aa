package memory

import (
	"cmp"
	"context"
	"math"
	"slices"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.ExportStore = (*Store)(nil)

// everything is a page holding a whole list.
var everything = core.Page{CurrentPage: 1, PageSize: math.MaxInt32}

// EachMount implements core.ExportStore. The store holds everything in
// memory already; it copies the list under its lock and yields outside it,
// so a slow reader never blocks writers.
func (s *Store) EachMount(ctx context.Context, accountID string, f core.MountFilter, now time.Time, yield func(core.Mount) error) error {
	mounts, _, err := s.ListMounts(ctx, accountID, f, everything, now)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := yield(m); err != nil {
			return err
		}
	}
	return nil
}

// EachState implements core.ExportStore, oldest first.
func (s *Store) EachState(ctx context.Context, uid, accountID string, f core.StateFilter, yield func(core.StateEntry) error) error {
	entries, _, err := s.ListStates(ctx, uid, accountID, f, everything)
	if err != nil {
		return err
	}
	slices.SortFunc(entries, func(a, b core.StateEntry) int {
		return cmp.Or(a.OccurredAt.Compare(b.OccurredAt), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Value, b.Value))
	})
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := yield(e); err != nil {
			return err
		}
	}
	return nil
}
