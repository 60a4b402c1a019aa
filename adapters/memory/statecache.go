package memory

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.StateCache = (*StateCache)(nil)

// StateCache is core.StateCache in a mutex-guarded map. It never expires
// entries: the process's lifetime bounds them.
type StateCache struct {
	mu     sync.Mutex
	mounts map[string]*cachedMount
}

type cachedMount struct {
	complete bool
	codes    map[core.StateCode]core.StateEntry
}

// NewStateCache returns an empty cache.
func NewStateCache() *StateCache {
	return &StateCache{mounts: map[string]*cachedMount{}}
}

// Latest returns the mount's entries, sorted by code, once a Fill has
// completed it.
func (c *StateCache) Latest(_ context.Context, uid string) ([]core.StateEntry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out, ok := c.latestLocked(uid)
	return out, ok, nil
}

// Offer merges entries without completing the mount and returns what
// Latest would right after.
func (c *StateCache) Offer(_ context.Context, uid string, entries []core.StateEntry) ([]core.StateEntry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mergeLocked(uid, entries, false)
	out, ok := c.latestLocked(uid)
	return out, ok, nil
}

func (c *StateCache) latestLocked(uid string) ([]core.StateEntry, bool) {
	m, ok := c.mounts[uid]
	if !ok || !m.complete {
		return nil, false
	}
	out := make([]core.StateEntry, 0, len(m.codes))
	for _, e := range m.codes {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out, true
}

// Fill merges entries and completes the mount.
func (c *StateCache) Fill(_ context.Context, uid string, entries []core.StateEntry) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mergeLocked(uid, entries, true)
	return nil
}

// Forget drops the mount, marker included.
func (c *StateCache) Forget(_ context.Context, uid string) error {
	c.mu.Lock()
	delete(c.mounts, uid)
	c.mu.Unlock()
	return nil
}

func (c *StateCache) mergeLocked(uid string, entries []core.StateEntry, complete bool) {
	if len(entries) == 0 && !complete {
		return
	}
	m, ok := c.mounts[uid]
	if !ok {
		m = &cachedMount{codes: map[core.StateCode]core.StateEntry{}}
		c.mounts[uid] = m
	}
	for _, e := range entries {
		// Store what the Redis adapter can: millisecond UTC, no ReceivedAt,
		// so both adapters compare and return the same values.
		e = core.StateEntry{Code: e.Code, Value: e.Value,
			OccurredAt: time.UnixMilli(e.OccurredAt.UnixMilli()).UTC(), Verified: e.Verified}
		if cur, ok := m.codes[e.Code]; !ok || core.Newer(e, cur) {
			m.codes[e.Code] = e
		}
	}
	m.complete = m.complete || complete
}
