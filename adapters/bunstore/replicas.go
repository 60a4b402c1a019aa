package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/dbread"
)

// Read replicas (CONTRACT §22). Reads whose context dbread marked go to a
// replica whose lag is at most maxLag; everything else reads the primary.
// Lag is measured by WAL position, not by the age of the last replayed
// transaction (which grows while the primary is idle): every
// lagProbeInterval the primary's WAL position is noted with the time, and a
// replica whose replay position has reached the note of time t holds
// everything committed before t, so its lag is at most now - t.

// lagProbeInterval is how often the positions are read. A replica's lag is
// known to within one interval plus the age of the last probe, both counted
// against maxLag.
const lagProbeInterval = 200 * time.Millisecond

// lagProbeTimeout bounds one probe's statement.
const lagProbeTimeout = time.Second

// replicaRetryAfter is how long a replica that failed a read is left out
// before probes may bring it back.
const replicaRetryAfter = 2 * time.Second

type replica struct {
	name  string // host:port, for logs and metrics
	db    *bun.DB
	stmts sync.Map
	// lag is the lag at the last probe (ns), math.MaxInt64 when unknown;
	// probedAt when that probe ran (unix ns); downUntil set by a failed
	// read (unix ns).
	lag, probedAt, downUntil atomic.Int64
}

type walSample struct {
	at  time.Time
	lsn uint64
}

type replicaSet struct {
	replicas []*replica
	maxLag   time.Duration
	now      func() time.Time
	next     atomic.Uint64
	// reads counts the reads that could have gone to a replica, by where
	// they went.
	primaryReads, replicaReads atomic.Int64
	// samples are the primary's WAL positions, oldest first, spanning a
	// little over 2×maxLag.
	samples []walSample
}

// AddReadReplicas lets marked reads go to the PostgreSQL read replicas at
// urls while their lag is at most maxLag. The returned function stops the
// probes and closes the pools. A replica that cannot be reached now is
// probed again and used once it answers.
func (s *Store) AddReadReplicas(ctx context.Context, urls []string, maxLag time.Duration, logger *slog.Logger) (func(), error) {
	if !s.postgres {
		return nil, errors.New("read replicas need PostgreSQL (the database url is not postgres://)")
	}
	if maxLag <= 0 {
		return nil, errors.New("read max lag must be positive")
	}
	set := &replicaSet{maxLag: maxLag, now: time.Now}
	for _, u := range urls {
		if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
			return nil, fmt.Errorf("database read url must start with postgres://")
		}
		db, connector := openPostgres(u)
		db.AddQueryHook(queryCounter{n: &s.queries})
		r := &replica{name: connector.Config().Addr, db: db}
		r.lag.Store(math.MaxInt64)
		set.replicas = append(set.replicas, r)
	}
	closeAll := func() {
		for _, r := range set.replicas {
			_ = r.db.Close()
		}
	}
	if len(set.replicas) == 0 {
		return func() {}, nil
	}
	probeCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	s.replicas = set
	go func() {
		defer close(done)
		set.probeLoop(probeCtx, s.db, logger)
	}()
	return func() { stop(); <-done; closeAll() }, nil
}

func (set *replicaSet) probeLoop(ctx context.Context, primary *bun.DB, logger *slog.Logger) {
	tick := time.NewTicker(lagProbeInterval)
	defer tick.Stop()
	failing := make([]bool, len(set.replicas))
	for {
		set.probe(ctx, primary, func(i int, err error) {
			if errors.Is(err, errMeasuring) {
				return
			}
			if (err != nil) != failing[i] {
				failing[i] = err != nil
				if err != nil {
					logger.Warn("read replica not usable", "replica", set.replicas[i].name, "err", err)
				} else {
					logger.Info("read replica usable again", "replica", set.replicas[i].name)
				}
			}
		})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probe notes the primary's WAL position and measures every replica
// against the positions noted so far.
func (set *replicaSet) probe(ctx context.Context, primary *bun.DB, report func(int, error)) {
	pctx, cancel := context.WithTimeout(ctx, lagProbeTimeout)
	defer cancel()
	var pos string
	if err := primary.QueryRowContext(pctx, "SELECT pg_current_wal_lsn()::text").Scan(&pos); err == nil {
		if lsn, err := parseLSN(pos); err == nil {
			set.note(walSample{at: set.now(), lsn: lsn})
		}
	}
	for i, r := range set.replicas {
		lag, err := set.measure(pctx, r)
		if err != nil {
			lag = math.MaxInt64
		}
		r.lag.Store(lag)
		r.probedAt.Store(set.now().UnixNano())
		report(i, err)
	}
}

func (set *replicaSet) note(s walSample) {
	keep := int(2*set.maxLag/lagProbeInterval) + 3
	if len(set.samples) >= keep {
		set.samples = append(set.samples[:0], set.samples[len(set.samples)-keep+1:]...)
	}
	set.samples = append(set.samples, s)
}

// measure returns r's lag in ns: now minus the newest noted time whose
// position r has replayed.
func (set *replicaSet) measure(ctx context.Context, r *replica) (int64, error) {
	var pos sql.NullString
	if err := r.db.QueryRowContext(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&pos); err != nil {
		return 0, err
	}
	if !pos.Valid {
		return 0, errors.New("not a replica (it replays no WAL: promoted, or a primary)")
	}
	replayed, err := parseLSN(pos.String)
	if err != nil {
		return 0, err
	}
	now := set.now()
	lag, ok := lagOf(set.samples, replayed, now)
	if !ok {
		if len(set.samples) == 0 || now.Sub(set.samples[0].at) < set.maxLag {
			return 0, errMeasuring
		}
		return 0, errors.New("lag beyond what is measured (or the primary's position is unknown)")
	}
	return int64(lag), nil
}

// errMeasuring is a replica's state while the probes have not yet noted
// positions as far back as the largest lag allowed: it is not used yet,
// and no fault is reported.
var errMeasuring = errors.New("lag not measured yet")

// lagOf is the lag of a replica that replayed up to position replayed:
// now minus the newest sample it has reached; ok is false when it reached
// none.
func lagOf(samples []walSample, replayed uint64, now time.Time) (lag time.Duration, ok bool) {
	for i := len(samples) - 1; i >= 0; i-- {
		if samples[i].lsn <= replayed {
			return now.Sub(samples[i].at), true
		}
	}
	return 0, false
}

// parseLSN reads PostgreSQL's text form of a WAL position, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("wal position %q", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("wal position %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("wal position %q: %w", s, err)
	}
	return h<<32 | l, nil
}

// pick returns a replica close enough for a read now, or nil.
func (set *replicaSet) pick() *replica {
	now := set.now().UnixNano()
	n := len(set.replicas)
	start := int(set.next.Add(1))
	for k := range n {
		r := set.replicas[(start+k)%n]
		lag := r.lag.Load()
		if lag == math.MaxInt64 || r.downUntil.Load() > now {
			continue
		}
		// The lag may have grown since the probe by as much as its age.
		if lag+(now-r.probedAt.Load()) <= int64(set.maxLag) {
			return r
		}
	}
	return nil
}

// read runs fn on a replica when ctx allows it and one is close enough,
// else on the primary. A read the replica fails for want of a connection,
// or cancels in a conflict with its recovery, is run again on the primary
// (fn must only read), and the replica left out for replicaRetryAfter.
func (s *Store) read(ctx context.Context, fn func(db *bun.DB) error) error {
	r := s.replicaFor(ctx)
	if r == nil {
		return fn(s.db)
	}
	err := fn(r.db)
	if err == nil || ctx.Err() != nil || !replicaFault(err) {
		s.replicas.replicaReads.Add(1)
		return err
	}
	r.downUntil.Store(s.replicas.now().Add(replicaRetryAfter).UnixNano())
	s.replicas.primaryReads.Add(1)
	return fn(s.db)
}

// replicaFor returns the replica a read of ctx goes to, nil for the
// primary, and counts the read.
func (s *Store) replicaFor(ctx context.Context) *replica {
	set := s.replicas
	if set == nil || !dbread.ReplicaAllowed(ctx) {
		return nil
	}
	r := set.pick()
	if r == nil {
		set.primaryReads.Add(1)
	}
	return r
}

// streamDB is the database a streamed read (an export) runs on: a replica
// when ctx allows it, else the primary. A stream cannot be run again once
// rows went out, so a replica that fails it fails the export.
func (s *Store) streamDB(ctx context.Context) *bun.DB {
	if r := s.replicaFor(ctx); r != nil {
		s.replicas.replicaReads.Add(1)
		return r.db
	}
	return s.db
}

// replicaFault reports whether err is the replica's and not the read's:
// unreachable, or a statement cancelled because recovery needed what it
// read (SQLSTATE 40001 on a standby).
func replicaFault(err error) bool {
	if core.IsUnavailable(err) {
		return true
	}
	var pg interface{ Field(byte) string }
	if errors.As(err, &pg) {
		code := pg.Field('C')
		return code == "40001" || code == "40P01"
	}
	return false
}

// preparedIn is prepared on db, the primary or a replica.
func (s *Store) preparedIn(ctx context.Context, db *bun.DB, query string) (*sql.Stmt, error) {
	stmts := &s.stmts
	if db != s.db && s.replicas != nil {
		for _, r := range s.replicas.replicas {
			if r.db == db {
				stmts = &r.stmts
			}
		}
	}
	if st, ok := stmts.Load(query); ok {
		return st.(*sql.Stmt), nil
	}
	st, err := db.DB.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	if prev, loaded := stmts.LoadOrStore(query, st); loaded {
		_ = st.Close()
		return prev.(*sql.Stmt), nil
	}
	return st, nil
}

// ReplicaStats are what the metrics show of the read replicas.
type ReplicaStats struct {
	PrimaryReads, ReplicaReads int64
	// Lag is each replica's lag by name, as of its last probe; -1 when
	// it is unknown (unreachable, promoted, or beyond measure).
	Lag map[string]time.Duration
}

// ReplicaStats returns the read counts and lags; ok is false without
// replicas.
func (s *Store) ReplicaStats() (ReplicaStats, bool) {
	set := s.replicas
	if set == nil {
		return ReplicaStats{}, false
	}
	st := ReplicaStats{PrimaryReads: set.primaryReads.Load(), ReplicaReads: set.replicaReads.Load(),
		Lag: make(map[string]time.Duration, len(set.replicas))}
	for _, r := range set.replicas {
		lag := time.Duration(r.lag.Load())
		if lag == math.MaxInt64 {
			lag = -1
		}
		st.Lag[r.name] = lag
	}
	return st, true
}

// readPage counts and reads one page of the select query builds on the
// database read picks. build is called again when a replica fails, so it
// must start from an empty model.
func (s *Store) readPage(ctx context.Context, build func(db *bun.DB) *bun.SelectQuery) (total int, err error) {
	err = s.read(ctx, func(db *bun.DB) error {
		total, err = build(db).ScanAndCount(ctx)
		return err
	})
	return total, err
}
