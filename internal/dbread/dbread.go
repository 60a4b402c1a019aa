// Package dbread decides which reads may go to a PostgreSQL read replica
// (CONTRACT §22). The API marks a request's context when it only reads and
// its client (its token) wrote nothing within the replicas' allowed lag;
// the store sends marked reads to a replica that is close enough, and every
// other statement to the primary. Unmarked is the default, so a sweep, the
// event log or a read inside a write never reaches a replica.
package dbread

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

type replicaKey struct{}

// WithReplica marks ctx: its reads may be served by a read replica.
func WithReplica(ctx context.Context) context.Context {
	return context.WithValue(ctx, replicaKey{}, true)
}

// ReplicaAllowed reports whether ctx was marked by WithReplica.
func ReplicaAllowed(ctx context.Context) bool {
	ok, _ := ctx.Value(replicaKey{}).(bool)
	return ok
}

// Pins remembers the clients that wrote recently, across the replicas of
// mountd (Redis) or in one process (MemoryPins).
type Pins interface {
	// Pin makes Pinned true for client during d from now (or longer).
	Pin(ctx context.Context, client string, d time.Duration) error
	Pinned(ctx context.Context, client string) (bool, error)
}

// Policy is read-your-writes per client. A nil *Policy (no read replicas)
// marks nothing and pins nothing.
type Policy struct {
	Pins Pins
	// MaxLag is MOUNTD_READ_MAX_LAG: a client's reads go to the primary
	// for this long after its write ended.
	MaxLag time.Duration
	// RequestTimeout bounds a write request: the pin taken when a write
	// starts lasts its whole length plus MaxLag, so that a read racing the
	// write's answer (on another replica of mountd) is pinned too.
	RequestTimeout time.Duration
	Logger         *slog.Logger
}

// Write pins client before a request that may write runs.
func (p *Policy) Write(ctx context.Context, client string) {
	if p == nil || client == "" {
		return
	}
	if err := p.Pins.Pin(ctx, client, p.RequestTimeout+p.MaxLag); err != nil {
		// A later read may then reach a replica within MaxLag of this
		// write; the write itself goes on (Redis is optional, §22).
		p.Logger.WarnContext(ctx, "read pin not stored", "err", err)
	}
}

// Read marks ctx for a replica unless client wrote within MaxLag (or
// whether it did is unknown: then the primary answers).
func (p *Policy) Read(ctx context.Context, client string) context.Context {
	if p == nil || client == "" {
		return ctx
	}
	pinned, err := p.Pins.Pinned(ctx, client)
	if err != nil || pinned {
		return ctx
	}
	return WithReplica(ctx)
}

// MemoryPins are Pins of one process, for mountd without Redis. At most
// maxMemoryPins clients are remembered; past that every read goes to the
// primary until the oldest pins lapse, so a flood of tokens costs replica
// reads, never a stale one.
type MemoryPins struct {
	now  func() time.Time
	mu   sync.Mutex
	till map[string]time.Time
	// full is when a pin was refused for space: reads of every client go
	// to the primary until it passes.
	full time.Time
}

const maxMemoryPins = 100_000

// NewMemoryPins returns empty pins on clock now (time.Now when nil).
func NewMemoryPins(now func() time.Time) *MemoryPins {
	if now == nil {
		now = time.Now
	}
	return &MemoryPins{now: now, till: map[string]time.Time{}}
}

// Pin implements Pins.
func (m *MemoryPins) Pin(_ context.Context, client string, d time.Duration) error {
	now := m.now()
	until := now.Add(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.till[client]; !ok && len(m.till) >= maxMemoryPins {
		for c, t := range m.till {
			if !t.After(now) {
				delete(m.till, c)
			}
		}
		if len(m.till) >= maxMemoryPins {
			if until.After(m.full) {
				m.full = until
			}
			return nil
		}
	}
	if until.After(m.till[client]) {
		m.till[client] = until
	}
	return nil
}

// Pinned implements Pins.
func (m *MemoryPins) Pinned(_ context.Context, client string) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full.After(now) {
		return true, nil
	}
	t, ok := m.till[client]
	if ok && !t.After(now) {
		delete(m.till, client)
		return false, nil
	}
	return ok, nil
}
