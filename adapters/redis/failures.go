package redis

import (
	"context"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.FailureLimiter = (*FailureLimiter)(nil)

// The failure scripts keep an exact sliding window per key: a sorted set of
// the key's last failures scored by Redis's own clock in microseconds (TIME,
// so that replicas with skewed clocks agree), at most Limit of them, expiring
// with the window. Effects are replicated, not the scripts, so TIME is safe.
//
// KEYS[1] the set; ARGV[1] Limit; ARGV[2] Period in µs; ARGV[3] empty to
// ask, or a random member suffix to record a failure (two failures in one
// microsecond must both count); ARGV[4] Period in ms for PEXPIRE.
//
// Asked, it drops failures older than the window and returns how many µs
// until the oldest of the last Limit leaves it, 0 when fewer than Limit lie
// within (now-Period, now]. Told of a failure, it also records one at now,
// keeps the newest Limit and lets the set expire with the window.
var windowScript = goredis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local limit, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
if ARGV[3] ~= '' then
  redis.call('ZADD', key, now, t[1] .. '.' .. t[2] .. ':' .. ARGV[3])
  redis.call('ZREMRANGEBYRANK', key, 0, -(limit + 1))
  redis.call('PEXPIRE', key, ARGV[4])
  return 0
end
local n = redis.call('ZCARD', key)
if n < limit then return 0 end
local oldest = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
return math.max(tonumber(oldest[2]) + period - now, 1)
`)

// FailureLimiter is core.FailureLimiter on Redis, shared by every replica on
// the prefix: an exact sliding window, a sorted set of the last failures
// per key (`<prefix><key>`). A key never has more than Limit failures in
// any window of Period, which is what the contract's "at most N per period"
// means; GCRA (redis_rate), used before, let one more through every
// Period/Limit once full, nearly twice the limit within one period.
type FailureLimiter struct {
	client *goredis.Client
	prefix string
}

// NewFailureLimiter returns a limiter whose keys live under prefix.
func NewFailureLimiter(rdb *goredis.Client, prefix string) *FailureLimiter {
	return &FailureLimiter{client: rdb, prefix: prefix}
}

// Blocked implements core.FailureLimiter: key is blocked while Limit
// failures lie within the last Period, until the oldest of them leaves it.
// It changes nothing but dropping failures that left the window.
func (l *FailureLimiter) Blocked(ctx context.Context, key string, r core.Rate) (time.Duration, error) {
	if r.Limit < 1 {
		return 0, nil
	}
	us, err := l.run(ctx, key, r, "").Int64()
	if err != nil {
		return 0, err
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Failed implements core.FailureLimiter: it records a failure at Redis's
// now, keeping the newest Limit.
func (l *FailureLimiter) Failed(ctx context.Context, key string, r core.Rate) error {
	if r.Limit < 1 {
		return nil
	}
	return l.run(ctx, key, r, strconv.FormatUint(rand.Uint64(), 36)).Err()
}

// run asks the window of key (member empty) or records a failure in it.
func (l *FailureLimiter) run(ctx context.Context, key string, r core.Rate, member string) *goredis.Cmd {
	ttl := max((r.Period+time.Millisecond-1)/time.Millisecond, 1)
	return windowScript.Run(ctx, l.client, []string{l.prefix + key}, r.Limit, r.Period.Microseconds(), member, int64(ttl))
}
