package memory

import (
	"context"
	"strconv"
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
// attempts (at most Limit, oldest first). A key never has more than Limit
// attempts in any window of Period, which is what "10 a minute" means in
// docs/operations.md, "Abuse limits"; GCRA, used before, let one more through
// every Period/Limit once full, nearly twice the limit within one period.
type FailureLimiter struct {
	mu       sync.Mutex
	attempts *lru.Cache[string, []attempt]
	now      func() time.Time
	last     uint64 // the last token handed out
}

// attempt is one reserved attempt: when (unix nanoseconds) and its token.
type attempt struct {
	at int64
	id uint64
}

// NewFailureLimiter returns a limiter without attempts.
func NewFailureLimiter() *FailureLimiter {
	c, _ := lru.New[string, []attempt](maxFailureKeys)
	return &FailureLimiter{attempts: c, now: time.Now}
}

// WithClock makes l read its time from now (tests) and returns l.
func (l *FailureLimiter) WithClock(now func() time.Time) *FailureLimiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now = now
	return l
}

// recent returns the attempts of key within (now-Period, now], oldest
// first, dropping older ones from the cache.
func (l *FailureLimiter) recent(key string, now int64, r core.Rate) []attempt {
	as, ok := l.attempts.Get(key)
	if !ok {
		return nil
	}
	i := 0
	for i < len(as) && as[i].at <= now-int64(r.Period) {
		i++
	}
	if i == len(as) {
		l.attempts.Remove(key)
		return nil
	}
	if i > 0 {
		as = as[i:]
		l.attempts.Add(key, as)
	}
	return as
}

// Reserve implements core.FailureLimiter: while fewer than Limit attempts
// lie within the last Period it records one at now; otherwise key waits
// until the oldest of them leaves the window.
func (l *FailureLimiter) Reserve(_ context.Context, key string, r core.Rate) (time.Duration, string, error) {
	if r.Limit < 1 {
		return 0, "", nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now().UnixNano()
	as := l.recent(key, now, r)
	if len(as) >= r.Limit {
		oldest := as[len(as)-r.Limit]
		return max(time.Duration(oldest.at+int64(r.Period)-now), 1), "", nil
	}
	l.last++
	at := now
	if n := len(as); n > 0 {
		at = max(at, as[n-1].at) // a clock that steps back keeps the order
	}
	// A fresh slice: the old one may still be shared by the cache.
	next := append(append(make([]attempt, 0, len(as)+1), as...), attempt{at: at, id: l.last})
	l.attempts.Add(key, next)
	return 0, strconv.FormatUint(l.last, 36), nil
}

// Refund implements core.FailureLimiter.
func (l *FailureLimiter) Refund(_ context.Context, key, token string) error {
	id, err := strconv.ParseUint(token, 36, 64)
	if err != nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	as, ok := l.attempts.Peek(key)
	if !ok {
		return nil
	}
	for i, a := range as {
		if a.id == id {
			if len(as) == 1 {
				l.attempts.Remove(key)
				return nil
			}
			l.attempts.Add(key, append(append(make([]attempt, 0, len(as)-1), as[:i]...), as[i+1:]...))
			return nil
		}
	}
	return nil
}
