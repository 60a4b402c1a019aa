package memory

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.ExpiryScheduler = (*ExpiryScheduler)(nil)

// ExpiryScheduler is core.ExpiryScheduler within one process: a min-heap of
// deadlines woken by a timer. Several Run loops on one instance fire each
// deadline once; separate instances know nothing of each other.
type ExpiryScheduler struct {
	mu      sync.Mutex
	current map[string]uint64 // uid → seq of its live heap item
	items   deadlineHeap      // may hold stale items, skipped when popped
	seq     uint64
	wake    chan struct{}
}

type deadline struct {
	at  time.Time
	uid string
	seq uint64
}

type deadlineHeap []deadline

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h deadlineHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *deadlineHeap) Push(x any)        { *h = append(*h, x.(deadline)) }
func (h *deadlineHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// NewExpiryScheduler returns a scheduler without deadlines.
func NewExpiryScheduler() *ExpiryScheduler {
	return &ExpiryScheduler{current: map[string]uint64{}, wake: make(chan struct{}, 1)}
}

// Schedule sets or moves uid's deadline. Moving leaves the old heap item in
// place as stale rather than searching for it.
func (s *ExpiryScheduler) Schedule(_ context.Context, uid string, at time.Time) error {
	s.mu.Lock()
	s.seq++
	s.current[uid] = s.seq
	heap.Push(&s.items, deadline{at: at, uid: uid, seq: s.seq})
	if len(s.items) > 2*len(s.current)+64 {
		s.compactLocked()
	}
	s.mu.Unlock()
	select { // the new deadline may be earlier than what Run waits for
	case s.wake <- struct{}{}:
	default:
	}
	return nil
}

// Cancel forgets uid's deadline; its heap item turns stale.
func (s *ExpiryScheduler) Cancel(_ context.Context, uid string) error {
	s.mu.Lock()
	delete(s.current, uid)
	s.mu.Unlock()
	return nil
}

// Run fires due deadlines, one at a time and outside the lock, until ctx
// ends; it then returns nil.
func (s *ExpiryScheduler) Run(ctx context.Context, fire func(ctx context.Context, uid string)) error {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := s.popDue(time.Now())
		for _, uid := range due {
			if ctx.Err() != nil {
				return nil
			}
			fire(ctx, uid)
		}
		if len(due) > 0 {
			continue // firing took time: look again before sleeping
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-s.wake:
		}
	}
}

// popDue removes and returns the live deadlines at or before now, and how
// long to wait for the next one.
func (s *ExpiryScheduler) popDue(now time.Time) ([]string, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []string
	for len(s.items) > 0 {
		top := s.items[0]
		if s.current[top.uid] != top.seq { // stale: moved or cancelled
			heap.Pop(&s.items)
			continue
		}
		if top.at.After(now) {
			return due, top.at.Sub(now)
		}
		heap.Pop(&s.items)
		delete(s.current, top.uid)
		due = append(due, top.uid)
	}
	return due, time.Hour
}

// compactLocked drops stale items so that often-moved deadlines cannot grow
// the heap without bound.
func (s *ExpiryScheduler) compactLocked() {
	live := s.items[:0]
	for _, d := range s.items {
		if s.current[d.uid] == d.seq {
			live = append(live, d)
		}
	}
	s.items = live
	heap.Init(&s.items)
}
