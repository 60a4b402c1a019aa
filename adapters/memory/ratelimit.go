package memory

import (
	"context"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mountd/mountd/core"
)

var _ core.RateLimiter = (*RateLimiter)(nil)

// maxRateKeys bounds the keys remembered; a key forgotten starts afresh
// with its whole limit, which only ever errs towards letting requests in.
const maxRateKeys = 100_000

// RateLimiter is core.RateLimiter within one process: GCRA with a burst of
// the whole limit, as redis_rate computes it, over an LRU of theoretical
// arrival times.
type RateLimiter struct {
	mu  sync.Mutex
	tat *lru.Cache[string, time.Time]
	now func() time.Time
}

// NewRateLimiter returns a limiter with every key's limit free.
func NewRateLimiter() *RateLimiter {
	c, _ := lru.New[string, time.Time](maxRateKeys)
	return &RateLimiter{tat: c, now: time.Now}
}

// WithClock makes l read its time from now (tests) and returns l.
func (l *RateLimiter) WithClock(now func() time.Time) *RateLimiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
	return l
}

// Allow implements core.RateLimiter.
func (l *RateLimiter) Allow(_ context.Context, key string, r core.Rate) (core.RateDecision, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	interval := r.Period / time.Duration(r.Limit)
	tat, ok := l.tat.Get(key)
	if !ok || tat.Before(now) {
		tat = now
	}
	next := tat.Add(interval)
	// The event fits while next is at most one whole period ahead.
	if wait := next.Sub(now) - r.Period; wait > 0 {
		return core.RateDecision{Limit: r.Limit, RetryAfter: wait, ResetAfter: tat.Sub(now)}, nil
	}
	l.tat.Add(key, next)
	return core.RateDecision{Allowed: true, Limit: r.Limit, Remaining: int((r.Period - next.Sub(now)) / interval), ResetAfter: next.Sub(now)}, nil
}
