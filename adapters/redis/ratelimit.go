package redis

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

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
	// batchLife is how long taken permits may wait for their requests: a
	// batch kept for long could be spent in one burst on top of a
	// refilled limit. What a batch did not use goes back to Redis with
	// the next round trip.
	batchLife = 250 * time.Millisecond
	// maxBatchKeys bounds the batches kept; a batch forgotten is only a
	// few permits the account does not get back at once.
	maxBatchKeys = 10_000
)

// gcraScript is redis_rate's GCRA (AllowAtMost: a burst of the whole limit,
// Redis's own clock, the key holding the theoretical arrival time in
// seconds since 2017 as redis_rate keeps it), with what a replica took and did not use given back first, in
// the same round trip: the arrival time moves back by that many intervals,
// never before now.
//
// KEYS[1] the key; ARGV[1] Limit; ARGV[2] Period in s; ARGV[3] at most how
// many permits to take; ARGV[4] how many unused ones to give back; ARGV[5]
// now in µs since 1970, empty for Redis's TIME (tests give a clock of their
// own). It returns {taken, remaining, retry after in s, reset after in s}.
var gcraScript = goredis.NewScript(`
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local limit, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local want, back = tonumber(ARGV[3]), tonumber(ARGV[4])
local jan_1_2017 = 1483228800
local now
if ARGV[5] ~= '' then
  now = (tonumber(ARGV[5]) - jan_1_2017 * 1000000) / 1000000
else
  local t = redis.call('TIME')
  now = (t[1] - jan_1_2017) + (t[2] / 1000000)
end
local interval = period / limit
local tat = tonumber(redis.call('GET', key) or now)
tat = math.max(tat - back * interval, now)
-- A microsecond of slack: the float arithmetic must not lose a permit
-- that is due.
local remaining = math.floor((now - (tat - period)) / interval + 1e-6 / interval)
local take = math.max(math.min(want, remaining), 0)
local new_tat = tat + take * interval
local reset_after = new_tat - now
if reset_after > 0 then
  redis.call('SET', key, string.format('%.6f', new_tat), 'EX', math.ceil(reset_after))
else
  redis.call('DEL', key)
end
if take < 1 then
  return {0, 0, tostring(interval - (now - (tat - period))), tostring(reset_after)}
end
return {take, remaining - take, '-1', tostring(reset_after)}
`)

// RateLimiter is core.RateLimiter on Redis (GCRA, as redis_rate computes
// it), shared by every replica on the prefix. A request costs a Redis round
// trip only every batch of permits: a replica takes up to a hundredth of
// the limit at once and admits from it locally. A batch is sized by the
// traffic: it doubles while batches are used up within their life and
// halves when one outlives its requests, so sparse traffic takes one
// permit at a time; what a batch did not use goes back with the next round
// trip. So the limit admits its count whether requests come densely or
// sparsely, on any number of replicas. A key's count is `<prefix>rate:{<key>}`
// (rateKey).
type RateLimiter struct {
	client   goredis.UniversalClient
	prefix   string
	now      func() time.Time
	redisNow func() time.Time // nil: Redis's clock

	mu      sync.Mutex
	batches *lru.Cache[string, *batch]
}

// batch is permits taken from Redis for one key and not used yet.
type batch struct {
	left    int
	remain  int // Redis's Remaining when the batch was taken
	reset   time.Time
	expires time.Time
	size    int // permits the last round trip asked for
	// fetching is set while a round trip for a batch is under way:
	// requests that miss meanwhile take one permit each, so a burst of
	// parallel requests does not take a batch each.
	fetching bool
}

// NewRateLimiter returns a limiter whose keys live under prefix.
func NewRateLimiter(rdb goredis.UniversalClient, prefix string) *RateLimiter {
	batches, _ := lru.New[string, *batch](maxBatchKeys)
	return &RateLimiter{client: rdb, prefix: prefix, now: time.Now, batches: batches}
}

// Allow implements core.RateLimiter.
func (l *RateLimiter) Allow(ctx context.Context, key string, r core.Rate) (core.RateDecision, error) {
	now := l.now()
	l.mu.Lock()
	b, ok := l.batches.Get(key)
	if !ok {
		b = &batch{}
		l.batches.Add(key, b)
	}
	if b.left > 0 && now.Before(b.expires) {
		b.left--
		d := core.RateDecision{Allowed: true, Limit: r.Limit, Remaining: b.remain + b.left, ResetAfter: max(b.reset.Sub(now), 0)}
		l.mu.Unlock()
		return d, nil
	}
	// Used up within its life: the traffic wants more; outlived: less,
	// and what it did not use goes back.
	back := b.left
	size, batchFetch := 1, !b.fetching
	if batchFetch {
		if now.Before(b.expires) {
			b.size *= 2
		} else {
			b.size /= 2
		}
		b.size = max(1, min(b.size, r.Limit/100, maxBatch))
		size, b.fetching = b.size, true
	}
	b.left = 0
	l.mu.Unlock()

	res, err := l.take(ctx, key, r, size, back)
	if batchFetch {
		l.mu.Lock()
		b.fetching = false
		l.mu.Unlock()
	}
	if err != nil {
		// The permits given back are lost: the account gets fewer, never more.
		return core.RateDecision{}, err
	}
	if res.taken == 0 {
		return core.RateDecision{Limit: r.Limit, RetryAfter: max(res.retryAfter, 0), ResetAfter: max(res.resetAfter, 0)}, nil
	}
	if res.taken > 1 {
		l.mu.Lock()
		if cur, ok := l.batches.Get(key); ok {
			b = cur
		} else {
			l.batches.Add(key, b)
		}
		b.left += res.taken - 1
		b.remain, b.reset, b.expires = res.remaining, now.Add(res.resetAfter), now.Add(batchLife)
		l.mu.Unlock()
	} else {
		l.mu.Lock()
		b.expires = now.Add(batchLife)
		l.mu.Unlock()
	}
	return core.RateDecision{Allowed: true, Limit: r.Limit, Remaining: res.remaining + res.taken - 1, ResetAfter: max(res.resetAfter, 0)}, nil
}

// rateKey is where key's count lives. Until this layout (2026-11) it was
// `rate:<prefix><key>`, with no hash tag (docs/operations.md, "Redis").
func rateKey(prefix, key string) string { return taggedKey(prefix, "rate:", key) }

type taken struct {
	taken, remaining       int
	retryAfter, resetAfter time.Duration
}

// take runs the script: give back, then take up to size permits.
func (l *RateLimiter) take(ctx context.Context, key string, r core.Rate, size, back int) (taken, error) {
	now := ""
	if l.redisNow != nil {
		now = strconv.FormatInt(l.redisNow().UnixMicro(), 10)
	}
	v, err := gcraScript.Run(ctx, l.client, []string{rateKey(l.prefix, key)}, r.Limit, r.Period.Seconds(), size, back, now).Slice()
	if err != nil {
		return taken{}, err
	}
	if len(v) != 4 {
		return taken{}, fmt.Errorf("redis: rate limit script answered %v", v)
	}
	n, _ := v[0].(int64)
	rem, _ := v[1].(int64)
	retry, err1 := seconds(v[2])
	reset, err2 := seconds(v[3])
	if err1 != nil || err2 != nil {
		return taken{}, fmt.Errorf("redis: rate limit script answered %v", v)
	}
	return taken{taken: int(n), remaining: int(rem), retryAfter: retry, resetAfter: reset}, nil
}

// seconds reads a script's float seconds, rounded up to the microsecond
// so that waiting them is always enough.
func seconds(v any) (time.Duration, error) {
	s, _ := v.(string)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	us := time.Duration(f * 1e6)
	if float64(us) < f*1e6 {
		us++
	}
	return us * time.Microsecond, nil
}
