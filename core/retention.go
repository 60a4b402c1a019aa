package core

import (
	"context"
	"log/slog"
	"time"
)

// Default retentions (docs/operations.md, "Retention").
const (
	DefaultStateRetention    = 90 * 24 * time.Hour
	DefaultDeliveryRetention = 30 * 24 * time.Hour
)

// prepareAhead is how far ahead of the clock the state store is readied
// (PostgreSQL creates a partition per day): a week without the worker
// running costs nothing.
const prepareAhead = 7 * 24 * time.Hour

// Housekeeping is what the retention worker asks of storage. Each prune
// removes at most limit rows and returns how many it removed, so that the
// worker deletes in small steps between other writes.
type Housekeeping interface {
	// PrepareStates readies the history for entries up to until.
	PrepareStates(ctx context.Context, until time.Time) error
	// PruneStates removes history entries that occurred before before.
	// Storage that can drop whole ranges at once (PostgreSQL partitions)
	// does so and does not count them.
	PruneStates(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneDeliveries removes finished webhook attempts made before before;
	// pending ones stay whatever their age.
	PruneDeliveries(ctx context.Context, before time.Time, limit int) (int, error)
	// PruneSignIns removes sign-ins begun before requestsBefore and
	// refresh tokens that expired before tokensBefore.
	PruneSignIns(ctx context.Context, requestsBefore, tokensBefore time.Time, limit int) (int, error)
	// PruneAudit removes audit entries recorded before before.
	PruneAudit(ctx context.Context, before time.Time, limit int) (int, error)
}

// RetentionPolicy is how long each kind of record is kept; zero keeps all.
type RetentionPolicy struct {
	States     time.Duration
	Deliveries time.Duration
	Audit      time.Duration
}

// Retention keeps storage bounded: it prepares the state history ahead of
// time and deletes what is past its retention. Safe on every replica at
// once. (The event log has its own worker, EventService.RunRetention.)
type Retention struct {
	store  Housekeeping
	policy RetentionPolicy
	logger *slog.Logger
	now    func() time.Time
}

// NewRetention returns the worker for policy over store.
func NewRetention(store Housekeeping, policy RetentionPolicy, logger *slog.Logger) *Retention {
	return &Retention{store: store, policy: policy, logger: logger, now: time.Now}
}

// signInsKept is how long a sign-in that never finished is kept: well past
// AuthRequestTTL, so none is pulled from under a person signing in.
const signInsKept = 6 * AuthRequestTTL

// RunOnce prepares the history ahead and prunes every kind of record in
// batches of pruneBatch until each has nothing left to prune.
func (r *Retention) RunOnce(ctx context.Context) error {
	now := r.now()
	if err := r.store.PrepareStates(ctx, now.Add(prepareAhead)); err != nil {
		return err
	}
	if r.policy.States > 0 {
		if err := drain(ctx, func() (int, error) { return r.store.PruneStates(ctx, now.Add(-r.policy.States), pruneBatch) }); err != nil {
			return err
		}
	}
	if r.policy.Deliveries > 0 {
		if err := drain(ctx, func() (int, error) {
			return r.store.PruneDeliveries(ctx, now.Add(-r.policy.Deliveries), pruneBatch)
		}); err != nil {
			return err
		}
	}
	if r.policy.Audit > 0 {
		if err := drain(ctx, func() (int, error) { return r.store.PruneAudit(ctx, now.Add(-r.policy.Audit), pruneBatch) }); err != nil {
			return err
		}
	}
	return drain(ctx, func() (int, error) { return r.store.PruneSignIns(ctx, now.Add(-signInsKept), now, pruneBatch) })
}

// drain calls prune until it removes less than a batch.
func drain(ctx context.Context, prune func() (int, error)) error {
	for ctx.Err() == nil {
		n, err := prune()
		if err != nil || n < pruneBatch {
			return err
		}
	}
	return ctx.Err()
}

// Run calls RunOnce at once and then every interval until ctx ends.
func (r *Retention) Run(ctx context.Context, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "retention failed; retried at the next run", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
