package redis

import (
	"context"
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
// (core.Newer), atomically, so that replicas writing at once can never move
// a value backwards.
//
// KEYS[1] the hash; ARGV[1] TTL in ms (0: none); ARGV[2] "1" to mark the
// hash complete; then code, unix ms, value for each entry. Values compare
// bytewise like Go strings (Lua's < would follow the server's locale).
var mergeScript = goredis.NewScript(`
local function greater(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return #a > #b
end
local key = KEYS[1]
for i = 3, #ARGV, 3 do
  local code, ms, value = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local newer = true
  local cur = redis.call('HGET', key, code)
  if cur then
    local sep = string.find(cur, '|', 1, true)
    local cms = sep and tonumber(string.sub(cur, 1, sep - 1))
    if cms then
      local cvalue = string.sub(cur, sep + 1)
      newer = ms > cms or (ms == cms and greater(value, cvalue))
    end
  end
  if newer then redis.call('HSET', key, code, ARGV[i + 1] .. '|' .. value) end
end
if ARGV[2] == '1' then redis.call('HSET', key, '` + completeField + `', '1') end
local ttl = tonumber(ARGV[1])
if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
return 1
`)

// StateCache is core.StateCache over Redis: one hash per mount,
// `<prefix>state:<uid>`, mapping code → "<unix ms>|<value>", plus a marker
// field once filled. Replicas sharing a prefix share the cache.
type StateCache struct {
	client *goredis.Client
	prefix string
	ttl    time.Duration
}

// NewStateCache returns a cache whose writes refresh a mount's TTL (0: keep
// forever), so mounts no one reads age out while the database stays the
// source of truth.
func NewStateCache(client *goredis.Client, prefix string, ttl time.Duration) *StateCache {
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
		msText, value, ok := strings.Cut(v, "|")
		ms, err := strconv.ParseInt(msText, 10, 64)
		if !ok || err != nil {
			return nil, false, fmt.Errorf("state cache latest: malformed field %s=%q", code, v)
		}
		out = append(out, core.StateEntry{Code: core.StateCode(code), Value: value,
			OccurredAt: time.UnixMilli(ms).UTC()})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out, true, nil
}

// Offer merges entries without completing the mount.
func (c *StateCache) Offer(ctx context.Context, uid string, entries []core.StateEntry) error {
	if len(entries) == 0 {
		return nil
	}
	return c.merge(ctx, uid, entries, false)
}

// Fill merges entries and completes the mount.
func (c *StateCache) Fill(ctx context.Context, uid string, entries []core.StateEntry) error {
	return c.merge(ctx, uid, entries, true)
}

// Forget deletes the mount's hash, marker included.
func (c *StateCache) Forget(ctx context.Context, uid string) error {
	if err := c.client.Del(ctx, c.key(uid)).Err(); err != nil {
		return fmt.Errorf("state cache forget: %w", err)
	}
	return nil
}

func (c *StateCache) merge(ctx context.Context, uid string, entries []core.StateEntry, complete bool) error {
	args := make([]any, 0, 2+3*len(entries))
	mark := "0"
	if complete {
		mark = "1"
	}
	args = append(args, c.ttl.Milliseconds(), mark)
	for _, e := range entries {
		args = append(args, string(e.Code), e.OccurredAt.UnixMilli(), e.Value)
	}
	if err := mergeScript.Run(ctx, c.client, []string{c.key(uid)}, args...).Err(); err != nil {
		return fmt.Errorf("state cache merge: %w", err)
	}
	return nil
}
