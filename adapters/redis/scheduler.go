package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/mountd/mountd/core"
)

var _ core.ExpiryScheduler = (*ExpiryScheduler)(nil)

// popBatch bounds one poll's work; a full batch polls again at once.
const popBatch = 100

// popDueScript removes and returns the deadlines due by ARGV[1] (unix ms),
// at most ARGV[2], in one step: of several replicas polling at once, exactly
// one gets each member.
var popDueScript = goredis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
`)

// ExpiryScheduler is core.ExpiryScheduler over a Redis sorted set,
// `<prefix>deadlines` (member uid, score unix ms), that replicas sharing the
// prefix poll together. A deadline is removed before it fires, so it fires
// at most once: a replica dying in between loses it (the database sweep of
// lapsed associations expires it then). The set is the only key its script
// and commands touch, so on a cluster it needs no hash tag; its name stays
// as it was, so that replicas of two versions poll one set during a rolling
// upgrade.
type ExpiryScheduler struct {
	client goredis.UniversalClient
	key    string
	poll   time.Duration
}

// NewExpiryScheduler returns a scheduler whose Run polls every poll (200ms
// when not positive): deadlines fire up to that late.
func NewExpiryScheduler(client goredis.UniversalClient, prefix string, poll time.Duration) *ExpiryScheduler {
	if poll <= 0 {
		poll = 200 * time.Millisecond
	}
	return &ExpiryScheduler{client: client, key: prefix + "deadlines", poll: poll}
}

// Schedule sets or moves uid's deadline, rounded up to the millisecond so
// that it never fires early.
func (s *ExpiryScheduler) Schedule(ctx context.Context, uid string, at time.Time) error {
	ms := at.UnixMilli()
	if at.After(time.UnixMilli(ms)) {
		ms++
	}
	if err := s.client.ZAdd(ctx, s.key, goredis.Z{Score: float64(ms), Member: uid}).Err(); err != nil {
		return fmt.Errorf("schedule expiry: %w", err)
	}
	return nil
}

// Cancel forgets uid's deadline.
func (s *ExpiryScheduler) Cancel(ctx context.Context, uid string) error {
	if err := s.client.ZRem(ctx, s.key, uid).Err(); err != nil {
		return fmt.Errorf("cancel expiry: %w", err)
	}
	return nil
}

// Run polls for due deadlines and fires them one at a time until ctx ends,
// then returns nil. A failed poll is retried on the next tick, so an outage
// delays expiry rather than stopping it; slog.Default logs its start and end
// (the constructor takes no logger).
func (s *ExpiryScheduler) Run(ctx context.Context, fire func(ctx context.Context, uid string)) error {
	ticker := time.NewTicker(s.poll)
	defer ticker.Stop()
	failing := false // log an outage once, not on every poll
	for {
		due, err := s.popDue(ctx)
		switch {
		case err != nil && !failing:
			slog.Default().WarnContext(ctx, "polling expiry deadlines fails, retrying", "error", err)
		case err == nil && failing:
			slog.Default().InfoContext(ctx, "polling expiry deadlines works again")
		}
		failing = err != nil
		for _, uid := range due {
			if ctx.Err() != nil {
				// Popped but not fired: put it back for another replica.
				s.requeue(uid)
				continue
			}
			fire(ctx, uid)
		}
		if ctx.Err() != nil {
			return nil
		}
		if len(due) == popBatch {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// popDue pops what is due. It outlives ctx by up to a few seconds so that
// what the script popped is known, and requeued if ctx has ended.
func (s *ExpiryScheduler) popDue(ctx context.Context) ([]string, error) {
	popCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return popDueScript.Run(popCtx, s.client, []string{s.key},
		strconv.FormatInt(time.Now().UnixMilli(), 10), popBatch).StringSlice()
}

// requeue puts back a deadline popped during shutdown, unless it was
// scheduled anew meanwhile.
func (s *ExpiryScheduler) requeue(uid string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = s.client.ZAddNX(ctx, s.key, goredis.Z{Score: float64(time.Now().UnixMilli()), Member: uid}).Err()
}
