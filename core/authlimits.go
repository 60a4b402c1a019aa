package core

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Rate is at most Limit events per Period. A RateLimiter spreads them
// evenly (GCRA): once the limit is reached, one more event fits every
// Period/Limit. A FailureLimiter counts an exact sliding window instead:
// at most Limit failures within any Period, so that "5 per 15 minutes"
// holds in every 15 minutes (GCRA would let nearly twice that through).
type Rate struct {
	Limit  int
	Period time.Duration
}

// FailureLimiter counts failed credential checks per key, shared by every
// replica when it is backed by Redis. Core reserves an attempt before the
// expensive check, in one atomic step with asking whether the key is at its
// limit, and refunds it when the check did not fail: parallel attempts
// cannot all pass a question asked before any of them was counted, and
// successes never count.
type FailureLimiter interface {
	// Reserve counts one attempt of key under r and returns a token naming
	// it, unless r.Limit attempts already lie within the last r.Period:
	// then it counts nothing and returns how long until the oldest of the
	// last r.Limit leaves the window.
	Reserve(ctx context.Context, key string, r Rate) (wait time.Duration, token string, err error)
	// Refund takes back the reserved attempt of key named by token; an
	// unknown token (one that left the window) is no error.
	Refund(ctx context.Context, key, token string) error
}

// Abuse limits on client authentication (docs/api.md, "Identity"). Client
// ids are not secret (every token's sub shows one), so the limit is per
// client id and source address: an attacker elsewhere cannot lock an
// operator's servers out. Failures naming client ids that do not exist
// also count per address (UnknownClientFailuresPerAddress) and hold only
// such names: one source cannot walk through made-up client ids, and no
// correct secret is ever refused because other clients failed from its
// address (a company's NAT hides many).
var (
	ClientFailuresPerSource         = Rate{Limit: 10, Period: time.Minute}
	UnknownClientFailuresPerAddress = Rate{Limit: 30, Period: time.Minute}
)

// HashGate lets at most a fixed number of secret hashes run at once, each
// holding about 19 MiB, behind a bounded queue with a short wait. Beyond
// it the caller gets UNAVAILABLE with a Retry-After, so parallel wrong
// secrets cost bounded memory and CPU whatever their number. The queue is
// long and the wait real on purpose: a waiting request costs a goroutine,
// an instant refusal would only let a client that ignores Retry-After
// come straight back and spend the CPU on refusals instead.
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

// hashGate bounds every secret hash of the process: half the processors at
// most (at least one), so that a flood of wrong secrets leaves the other
// half to the API.
var hashGate = NewHashGate(max(1, runtime.GOMAXPROCS(0)/2), 1024, 2*time.Second)

// tarpit delays refusals of throttled callers by up to a second, for at
// most cap(tarpit) callers at once (beyond, they are answered at once), so
// that a client hammering without heeding Retry-After waits between tries.
var tarpit = make(chan struct{}, 1024)

var tarpitDelay = time.Second

func slowDown(ctx context.Context, d time.Duration) {
	select {
	case tarpit <- struct{}{}:
	default:
		return
	}
	defer func() { <-tarpit }()
	t := time.NewTimer(min(d, tarpitDelay))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// hashBusyRetry is what a caller turned away by the gate is told to wait.
const hashBusyRetry = time.Second

// Full reports whether a caller would be turned away now: every slot busy
// and the queue full. It lets a flood be refused before it costs a
// throttle or database round trip.
func (g *HashGate) Full() bool {
	return len(g.slots) == cap(g.slots) && g.waiting.Load() >= g.queue
}

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
