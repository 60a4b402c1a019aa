package redis

import (
	"context"
	"sync"
	"time"

	"github.com/go-redis/redis_rate/v10"
	lru "github.com/hashicorp/golang-lru/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.RateLimiter = (*RateLimiter)(nil)

const (
	// maxBatch bounds the permits a replica takes from Redis at once; a
	// batch is at most a hundredth of the limit, so small limits are
	// counted one request at a time.
	maxBatch = 32
	// batchLife is how long taken permits may wait for their requests:
	// permits are counted in Redis when taken, so a replica can never
	// admit more than the limit, but a batch kept for long could be spent
	// in one burst on top of a refilled limit.
	batchLife = 250 * time.Millisecond
	// maxBatchKeys bounds the batches kept; a batch forgotten is only a
	// few permits the account does not get.
	maxBatchKeys = 10_000
)

// RateLimiter is core.RateLimiter on Redis through redis_rate (GCRA),
// shared by every replica on the prefix. A request costs a Redis round trip
// only every batch of permits: each replica takes up to a hundredth of the
// limit at once (redis_rate's AllowAtMost) and admits from it locally.
type RateLimiter struct {
	limiter *redis_rate.Limiter
	prefix  string
	now     func() time.Time

	mu      sync.Mutex
	batches *lru.Cache[string, *batch]
}

// batch is permits taken from Redis for one key and not used yet.
type batch struct {
	left    int
	remain  int // Redis's Remaining when the batch was taken
	reset   time.Time
	expires time.Time
}

// NewRateLimiter returns a limiter whose keys live under prefix.
func NewRateLimiter(rdb *goredis.Client, prefix string) *RateLimiter {
	batches, _ := lru.New[string, *batch](maxBatchKeys)
	return &RateLimiter{limiter: redis_rate.NewLimiter(rdb), prefix: prefix, now: time.Now, batches: batches}
}

// Allow implements core.RateLimiter.
func (l *RateLimiter) Allow(ctx context.Context, key string, r core.Rate) (core.RateDecision, error) {
	if d, ok := l.fromBatch(key, r); ok {
		return d, nil
	}
	size := min(max(r.Limit/100, 1), maxBatch)
	res, err := l.limiter.AllowAtMost(ctx, l.prefix+key, redis_rate.Limit{Rate: r.Limit, Burst: r.Limit, Period: r.Period}, size)
	if err != nil {
		return core.RateDecision{}, err
	}
	if res.Allowed == 0 {
		return core.RateDecision{Limit: r.Limit, RetryAfter: max(res.RetryAfter, 0), ResetAfter: max(res.ResetAfter, 0)}, nil
	}
	now := l.now()
	if res.Allowed > 1 {
		l.mu.Lock()
		b, ok := l.batches.Get(key)
		if !ok || !now.Before(b.expires) {
			b = &batch{}
			l.batches.Add(key, b)
		}
		b.left += res.Allowed - 1
		b.remain, b.reset, b.expires = res.Remaining, now.Add(res.ResetAfter), now.Add(batchLife)
		l.mu.Unlock()
	}
	return core.RateDecision{Allowed: true, Limit: r.Limit, Remaining: res.Remaining + res.Allowed - 1, ResetAfter: max(res.ResetAfter, 0)}, nil
}

// fromBatch admits from the key's batch when it has a permit left.
func (l *RateLimiter) fromBatch(key string, r core.Rate) (core.RateDecision, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.batches.Get(key)
	now := l.now()
	if !ok || b.left == 0 || !now.Before(b.expires) {
		return core.RateDecision{}, false
	}
	b.left--
	return core.RateDecision{Allowed: true, Limit: r.Limit, Remaining: b.remain + b.left, ResetAfter: max(b.reset.Sub(now), 0)}, true
}
