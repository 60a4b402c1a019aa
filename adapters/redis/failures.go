package redis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.FailureLimiter = (*FailureLimiter)(nil)

// reserveScript keeps an exact sliding window per key: a sorted set of the
// key's last attempts scored by Redis's own clock in microseconds (TIME, so
// that replicas with skewed clocks agree), at most Limit of them, expiring
// with the window. Asking and counting are one step, so that parallel
// attempts on any replicas cannot all pass. Effects are replicated, not the
// script, so TIME is safe.
//
// KEYS[1] the set; ARGV[1] Limit; ARGV[2] Period in µs; ARGV[3] the
// attempt's member (random, so that two attempts in one microsecond both
// count); ARGV[4] Period in ms for PEXPIRE; ARGV[5] now in µs, empty for
// Redis's TIME (tests give a clock of their own).
//
// It drops attempts older than the window; while fewer than Limit remain it
// records one at now and returns 0, otherwise how many µs until the oldest
// of the last Limit leaves the window.
var reserveScript = goredis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local limit, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local now
if ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - period)
local n = redis.call('ZCARD', key)
if n >= limit then
  local oldest = redis.call('ZRANGE', key, n - limit, n - limit, 'WITHSCORES')
  return math.max(tonumber(oldest[2]) + period - now, 1)
end
redis.call('ZADD', key, now, ARGV[3])
redis.call('PEXPIRE', key, ARGV[4])
return 0
`)

// FailureLimiter is core.FailureLimiter on Redis, shared by every replica on
// the prefix: an exact sliding window, a sorted set of the last attempts
// per key (`<prefix>failures:{<key>}`, failureKey). A key never has more
// than Limit attempts in any window of Period, which is what "10 a minute"
// means in docs/operations.md, "Abuse limits"; GCRA (redis_rate), used before, let one
// more through every Period/Limit once full, nearly twice the limit within
// one period.
type FailureLimiter struct {
	client goredis.UniversalClient
	prefix string
	now    func() time.Time // nil: Redis's clock
}

// NewFailureLimiter returns a limiter whose keys live under prefix.
func NewFailureLimiter(rdb goredis.UniversalClient, prefix string) *FailureLimiter {
	return &FailureLimiter{client: rdb, prefix: prefix}
}

// Reserve implements core.FailureLimiter in one script: while fewer than
// Limit attempts lie within the last Period it records one at Redis's now;
// otherwise key waits until the oldest of them leaves the window.
func (l *FailureLimiter) Reserve(ctx context.Context, key string, r core.Rate) (time.Duration, string, error) {
	if r.Limit < 1 {
		return 0, "", nil
	}
	token := strconv.FormatUint(rand.Uint64(), 36)
	now := ""
	if l.now != nil {
		now = strconv.FormatInt(l.now().UnixMicro(), 10)
	}
	ttl := max((r.Period+time.Millisecond-1)/time.Millisecond, 1)
	us, err := reserveScript.Run(ctx, l.client, []string{failureKey(l.prefix, key)}, r.Limit, r.Period.Microseconds(), token, int64(ttl), now).Int64()
	if err != nil {
		return 0, "", err
	}
	if us > 0 {
		return time.Duration(us) * time.Microsecond, "", nil
	}
	return 0, token, nil
}

// Refund implements core.FailureLimiter.
func (l *FailureLimiter) Refund(ctx context.Context, key, token string) error {
	if token == "" {
		return nil
	}
	if err := l.client.ZRem(ctx, failureKey(l.prefix, key), token).Err(); err != nil {
		return fmt.Errorf("redis: refund: %w", err)
	}
	return nil
}

// failureKey is where key's attempts live. Until this layout (2026-11) it
// was `<prefix><key>`, with no hash tag (docs/operations.md, "Redis").
func failureKey(prefix, key string) string { return taggedKey(prefix, "failures:", key) }
