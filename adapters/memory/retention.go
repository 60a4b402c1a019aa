package memory

import (
	"context"
	"slices"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.Housekeeping = (*Store)(nil)

// PrepareStates implements core.Housekeeping: nothing to prepare in memory.
func (s *Store) PrepareStates(context.Context, time.Time) error { return nil }

// PruneStates implements core.Housekeeping.
func (s *Store) PruneStates(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, cut := 0, before.UnixMilli()
	for k := range s.states {
		if n == limit {
			break
		}
		if k.at < cut {
			delete(s.states, k)
			n++
		}
	}
	return n, nil
}

// PruneDeliveries implements core.Housekeeping.
func (s *Store) PruneDeliveries(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	s.wh.deliveries = slices.DeleteFunc(s.wh.deliveries, func(d core.Delivery) bool {
		if n < limit && d.Status != core.DeliveryPending && d.AttemptedAt.Before(before) {
			n++
			return true
		}
		return false
	})
	if n > 0 {
		s.dropOrphanBodiesLocked()
	}
	return n, nil
}

// PruneSignIns implements core.Housekeeping.
func (s *Store) PruneSignIns(_ context.Context, requestsBefore, tokensBefore time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	n := 0
	for id, r := range s.people.requests {
		if n < limit && r.CreatedAt.Before(requestsBefore) {
			delete(s.people.requests, id)
			n++
		}
	}
	for h, t := range s.people.refresh {
		if n < limit && t.ExpiresAt.Before(tokensBefore) {
			delete(s.people.refresh, h)
			n++
		}
	}
	return n, nil
}
