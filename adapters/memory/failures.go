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

// FailureLimiter is core.FailureLimiter within one process: an exact
// sliding window, as the Redis adapter, over an LRU of each key's last
// failures (at most Limit unix-nanosecond times, oldest first). A key
// never has more than Limit failures in any window of Period, which is
// what the contract's "at most N per period" means; GCRA, used before,
// let one more through every Period/Limit once full, nearly twice the
// limit within one period.
type FailureLimiter struct {
	mu    sync.Mutex
	times *lru.Cache[string, []int64]
	now   func() time.Time
}

// NewFailureLimiter returns a limiter without failures.
func NewFailureLimiter() *FailureLimiter {
	c, _ := lru.New[string, []int64](maxFailureKeys)
	return &FailureLimiter{times: c, now: time.Now}
}

// recent returns the failures of key within (now-Period, now], oldest
// first, dropping older ones from the cache.
func (l *FailureLimiter) recent(key string, now int64, r core.Rate) []int64 {
	ts, ok := l.times.Get(key)
	if !ok {
		return nil
	}
	i := 0
	for i < len(ts) && ts[i] <= now-int64(r.Period) {
		i++
	}
	if i == len(ts) {
		l.times.Remove(key)
		return nil
	}
	if i > 0 {
		ts = ts[i:]
		l.times.Add(key, ts)
	}
	return ts
}

// Blocked implements core.FailureLimiter: key is blocked while Limit
// failures lie within the last Period, until the oldest of them leaves it.
func (l *FailureLimiter) Blocked(_ context.Context, key string, r core.Rate) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().UnixNano()
	ts := l.recent(key, now, r)
	if r.Limit < 1 || len(ts) < r.Limit {
		return 0, nil
	}
	oldest := ts[len(ts)-r.Limit]
	return max(time.Duration(oldest+int64(r.Period)-now), 1), nil
}

// Failed implements core.FailureLimiter: it records a failure at now,
// keeping the newest Limit.
func (l *FailureLimiter) Failed(_ context.Context, key string, r core.Rate) error {
	if r.Limit < 1 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().UnixNano()
	ts := l.recent(key, now, r)
	// A fresh slice: the old one may still be shared by the cache.
	next := make([]int64, 0, min(len(ts)+1, r.Limit))
	if keep := r.Limit - 1; len(ts) > keep {
		ts = ts[len(ts)-keep:]
	}
	next = append(append(next, ts...), max(now, last(ts)))
	l.times.Add(key, next)
	return nil
}

func last(ts []int64) int64 {
	if len(ts) == 0 {
		return 0
	}
	return ts[len(ts)-1]
}
