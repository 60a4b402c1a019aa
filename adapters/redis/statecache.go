package redis

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.StateCache = (*StateCache)(nil)

// completeField marks a mount's hash as filled from the database; it cannot
// clash with a state code, which never starts with '#'.
const completeField = "#complete"

// mergeScript merges entries into a mount's hash keeping the newer per code
// (core.Newer: a verified entry first, then the later), atomically, so that replicas writing at once can never move
// a value backwards.
//
// KEYS[1] the hash; ARGV[1] TTL in ms (0: none); ARGV[2] "fill" to mark the
// hash complete, "offer" to return the whole hash (flat field/value list)
// when it is complete and false otherwise; then code, unix ms, value, flag
// ("v" when verified, else "") for each entry. Values compare bytewise like
// Go strings (Lua's < would follow the server's locale).
var mergeScript = goredis.NewScript(`
local function greater(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local key = KEYS[1]
for i = 3, #ARGV, 4 do
  local code, ms, value, flag = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3]
  local newer = true
  local cur = redis.call('HGET', key, code)
  if cur then
    local sep = string.find(cur, '|', 1, true)
    local cms = sep and tonumber(string.sub(cur, 1, sep - 1))
    if cms then
      local cvalue = string.sub(cur, sep + 1)
      local cverified = false
      local vsep = string.find(cvalue, '|', 1, true)
      if vsep then
        cverified = string.sub(cvalue, vsep + 1) == 'v'
        cvalue = string.sub(cvalue, 1, vsep - 1)
      end
      local verified = flag == 'v'
      if verified ~= cverified then
        newer = verified
      else
        newer = ms > cms or (ms == cms and greater(value, cvalue))
      end
    end
  end
  if newer then
    local v = ARGV[i + 1] .. '|' .. value
    if flag == 'v' then v = v .. '|v' end
    redis.call('HSET', key, code, v)
  end
end
if ARGV[2] == 'fill' then redis.call('HSET', key, '` + completeField + `', '1') end
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
if ARGV[2] == 'offer' then
  if redis.call('HEXISTS', key, '` + completeField + `') == 1 then return redis.call('HGETALL', key) end
  return false
end
return 1
`)

// StateCache is core.StateCache over Redis: one hash per mount,
// `<prefix>state:<uid>`, mapping code → "<unix ms>|<value>" (with "|v"
// appended when the mount signed it; state values never hold '|'), plus a
// marker field once filled. Replicas sharing a prefix share the cache.
// Every script and command touches one mount's hash alone, so on a cluster
// it lives in one slot without a hash tag; the name stays as it was, since
// replicas of two versions writing two names during a rolling upgrade would
// each serve a complete hash missing the other's reports.
type StateCache struct {
	client goredis.UniversalClient
	prefix string
	ttl    time.Duration
}

// NewStateCache returns a cache whose writes refresh a mount's TTL (0: keep
// forever), so mounts no one reads age out while the database stays the
// source of truth.
func NewStateCache(client goredis.UniversalClient, prefix string, ttl time.Duration) *StateCache {
	return &StateCache{client: client, prefix: prefix, ttl: ttl}
}

func (c *StateCache) key(uid string) string { return c.prefix + "state:" + uid }

// Latest returns the mount's entries, sorted by code, once a Fill has
// completed its hash.
func (c *StateCache) Latest(ctx context.Context, uid string) ([]core.StateEntry, bool, error) {
	fields, err := c.client.HGetAll(ctx, c.key(uid)).Result()
	if err != nil {
		return nil, false, fmt.Errorf("state cache latest: %w", err)
	}
	if _, ok := fields[completeField]; !ok {
		return nil, false, nil
	}
	out := make([]core.StateEntry, 0, len(fields)-1)
	for code, v := range fields {
		if code == completeField {
			continue
		}
		e, err := decodeField(code, v)
		if err != nil {
			return nil, false, fmt.Errorf("state cache latest: %w", err)
		}
		out = append(out, e)
	}
	sortByCode(out)
	return out, true, nil
}

// Offer merges entries without completing the mount and, in the same script,
// returns what Latest would right after.
func (c *StateCache) Offer(ctx context.Context, uid string, entries []core.StateEntry) ([]core.StateEntry, bool, error) {
	pairs, err := c.merge(ctx, uid, entries, "offer").StringSlice()
	if errors.Is(err, goredis.Nil) {
		return nil, false, nil // not complete: a miss
	}
	if err != nil {
		return nil, false, fmt.Errorf("state cache offer: %w", err)
	}
	out := make([]core.StateEntry, 0, len(pairs)/2)
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i] == completeField {
			continue
		}
		e, err := decodeField(pairs[i], pairs[i+1])
		if err != nil {
			return nil, false, fmt.Errorf("state cache offer: %w", err)
		}
		out = append(out, e)
	}
	sortByCode(out)
	return out, true, nil
}

// Fill merges entries and completes the mount.
func (c *StateCache) Fill(ctx context.Context, uid string, entries []core.StateEntry) error {
	if err := c.merge(ctx, uid, entries, "fill").Err(); err != nil {
		return fmt.Errorf("state cache fill: %w", err)
	}
	return nil
}

// Forget deletes the mount's hash, marker included.
func (c *StateCache) Forget(ctx context.Context, uid string) error {
	if err := c.client.Del(ctx, c.key(uid)).Err(); err != nil {
		return fmt.Errorf("state cache forget: %w", err)
	}
	return nil
}

func (c *StateCache) merge(ctx context.Context, uid string, entries []core.StateEntry, mode string) *goredis.Cmd {
	args := make([]any, 0, 2+4*len(entries))
	args = append(args, c.ttl.Milliseconds(), mode)
	for _, e := range entries {
		flag := ""
		if e.Verified {
			flag = "v"
		}
		args = append(args, string(e.Code), e.OccurredAt.UnixMilli(), e.Value, flag)
	}
	return mergeScript.Run(ctx, c.client, []string{c.key(uid)}, args...)
}

// decodeField reads one "<unix ms>|<value>" field of a mount's hash.
func decodeField(code, v string) (core.StateEntry, error) {
	msText, value, ok := strings.Cut(v, "|")
	ms, err := strconv.ParseInt(msText, 10, 64)
	if !ok || err != nil {
		return core.StateEntry{}, fmt.Errorf("malformed field %s=%q", code, v)
	}
	value, flag, _ := strings.Cut(value, "|")
	return core.StateEntry{Code: core.StateCode(code), Value: value, OccurredAt: time.UnixMilli(ms).UTC(), Verified: flag == "v"}, nil
}

func sortByCode(es []core.StateEntry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Code < es[j].Code })
}
