package memory

import (
	"context"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mountd/mountd/core"
)

var _ core.FailureLimiter = (*FailureLimiter)(nil)

// maxFailureKeys bounds the keys remembered: beyond it the least recently
// used goes, so a flood of made-up client ids costs bounded memory (and the
// flooding address's own key stays recent).
const maxFailureKeys = 100_000

// FailureLimiter is core.FailureLimiter within one process: GCRA, as the
// Redis adapter, over an LRU of theoretical arrival times.
type FailureLimiter struct {
	mu  sync.Mutex
	tat *lru.Cache[string, time.Time]
	now func() time.Time
}

// NewFailureLimiter returns a limiter without failures.
func NewFailureLimiter() *FailureLimiter {
	c, _ := lru.New[string, time.Time](maxFailureKeys)
	return &FailureLimiter{tat: c, now: time.Now}
}

// Blocked implements core.FailureLimiter: key is blocked while its
// theoretical arrival time is more than Limit-1 intervals ahead, that is
// once Limit failures fill the window.
func (l *FailureLimiter) Blocked(_ context.Context, key string, r core.Rate) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	interval := r.Period / time.Duration(r.Limit)
	tat, ok := l.tat.Get(key)
	if !ok {
		return 0, nil
	}
	if wait := tat.Sub(l.now()) - time.Duration(r.Limit-1)*interval; wait > 0 {
		return wait, nil
	}
	return 0, nil
}

// Failed implements core.FailureLimiter.
func (l *FailureLimiter) Failed(_ context.Context, key string, r core.Rate) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	interval := r.Period / time.Duration(r.Limit)
	tat, ok := l.tat.Get(key)
	if !ok || tat.Before(now) {
		tat = now
	}
	// Never more than a full window ahead, as the Redis script refuses
	// an event past its burst.
	if next := tat.Add(interval); next.Sub(now) <= r.Period {
		l.tat.Add(key, next)
	}
	return nil
}
