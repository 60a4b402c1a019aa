package redis

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.FailureLimiter = (*FailureLimiter)(nil)

// FailureLimiter is core.FailureLimiter on Redis through redis_rate (GCRA),
// shared by every replica on the prefix.
type FailureLimiter struct {
	limiter *redis_rate.Limiter
	prefix  string
}

// NewFailureLimiter returns a limiter whose keys live under prefix.
func NewFailureLimiter(rdb *goredis.Client, prefix string) *FailureLimiter {
	return &FailureLimiter{limiter: redis_rate.NewLimiter(rdb), prefix: prefix}
}

// Blocked implements core.FailureLimiter. redis_rate has no read-only
// query; asking for zero events with a burst one smaller reads the key
// without moving it, and refuses exactly when Limit failures fill the
// window.
func (l *FailureLimiter) Blocked(ctx context.Context, key string, r core.Rate) (time.Duration, error) {
	lim := redis_rate.Limit{Rate: r.Limit, Burst: r.Limit - 1, Period: r.Period}
	res, err := l.limiter.AllowN(ctx, l.prefix+key, lim, 0)
	if err != nil {
		return 0, err
	}
	if res.RetryAfter > 0 {
		return res.RetryAfter, nil
	}
	return 0, nil
}

// Failed implements core.FailureLimiter.
func (l *FailureLimiter) Failed(ctx context.Context, key string, r core.Rate) error {
	_, err := l.limiter.AllowN(ctx, l.prefix+key, redis_rate.Limit{Rate: r.Limit, Burst: r.Limit, Period: r.Period}, 1)
	return err
}
