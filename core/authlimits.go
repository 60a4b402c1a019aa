package core

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Rate is at most Limit events per Period, spread evenly (GCRA): once the
// limit is reached, one more event fits every Period/Limit.
type Rate struct {
	Limit  int
	Period time.Duration
}

// FailureLimiter counts failures per key, shared by every replica when it
// is backed by Redis. Core asks it before an expensive check and tells it
// after a failed one, so that successes never count.
type FailureLimiter interface {
	// Blocked returns how long key must wait before it may fail again
	// under r; zero when it may now.
	Blocked(ctx context.Context, key string, r Rate) (time.Duration, error)
	// Failed counts one failure of key under r.
	Failed(ctx context.Context, key string, r Rate) error
}

// Abuse limits on client authentication (CONTRACT §15). Client ids are not
// secret (every token's sub shows one), so the limit is per client id and
// source address: an attacker elsewhere cannot lock an operator's servers
// out. The looser limit per address alone stops one source from walking
// through many client ids.
var (
	ClientFailuresPerSource = Rate{Limit: 10, Period: time.Minute}
	FailuresPerAddress      = Rate{Limit: 100, Period: time.Minute}
)

// HashGate lets at most a fixed number of secret hashes run at once, each
// holding about 19 MiB, behind a bounded queue with a short wait. Beyond
// it the caller gets UNAVAILABLE with a Retry-After, so parallel wrong
// secrets cost bounded memory and CPU whatever their number.
type HashGate struct {
	slots   chan struct{}
	waiting atomic.Int64
	queue   int64
	wait    time.Duration
}

// NewHashGate returns a gate of slots concurrent hashes, queue waiting ones,
// each waiting at most wait.
func NewHashGate(slots, queue int, wait time.Duration) *HashGate {
	return &HashGate{slots: make(chan struct{}, max(slots, 1)), queue: int64(max(queue, 0)), wait: wait}
}

// hashGate bounds every secret hash of the process.
var hashGate = NewHashGate(runtime.GOMAXPROCS(0), 8*runtime.GOMAXPROCS(0), 2*time.Second)

// hashBusyRetry is what a caller turned away by the gate is told to wait.
const hashBusyRetry = time.Second

// Do runs fn in a slot.
func (g *HashGate) Do(ctx context.Context, fn func()) error {
	select {
	case g.slots <- struct{}{}:
	default:
		if g.waiting.Add(1) > g.queue {
			g.waiting.Add(-1)
			return busy()
		}
		timer := time.NewTimer(g.wait)
		select {
		case g.slots <- struct{}{}:
			timer.Stop()
			g.waiting.Add(-1)
		case <-timer.C:
			g.waiting.Add(-1)
			return busy()
		case <-ctx.Done():
			timer.Stop()
			g.waiting.Add(-1)
			return ctx.Err()
		}
	}
	defer func() { <-g.slots }()
	fn()
	return nil
}

func busy() error {
	return &Error{Code: CodeUnavailable, Message: "too many credential checks in progress; retry shortly", RetryAfter: hashBusyRetry}
}
