// Package bunstore implements mountd's storage ports with github.com/uptrace/bun
// on PostgreSQL and on SQLite (the embedded default, pure Go).
package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/dialect/sqlitedialect"
	"github.com/uptrace/bun/driver/pgdriver"
	"github.com/uptrace/bun/driver/sqliteshim"
	"github.com/uptrace/bun/migrate"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/migrations"
)

// Store is the bun-backed implementation of the storage ports.
type Store struct {
	db       *bun.DB
	postgres bool
	// dsn is PostgreSQL's URL, for the migrations' own connections.
	dsn     string
	queries atomic.Int64
	// stmts holds prepared statements by query text (*sql.Stmt).
	stmts sync.Map
	// writer, on SQLite only, lets one write at a time reach the database.
	// SQLite has a single writer, and a connection that finds it taken
	// sleeps in SQLite's busy handler in steps of up to 100 ms; under
	// concurrent writes that sleeping cost more than queueing here (the
	// webhook benchmark in docs/performance.md doubled its rate).
	writer chan struct{}
	// sql holds query texts built once from the dialect and row types.
	sql struct {
		// mountRead is MountWithLatest's (mountReadSQL).
		mountRead string
		// mountWithLatestTx is the same query for bun (? placeholders), to
		// run in a transaction.
		mountWithLatestTx string
		// ingest is a report's first statement on PostgreSQL.
		ingest string
		// ingestWatched is ingest for a report whose rules are evaluated
		// in its transaction (ingestWatchedSQL).
		ingestWatched string
	}
	// maxJobTargets, when not 0, replaces core.MaxJobTargets (tests).
	maxJobTargets int
	// maxRolloutTargets, when not 0, replaces core.MaxRolloutTargets (tests).
	maxRolloutTargets int
	// replicas serve the reads dbread marks (replicas.go); nil when none.
	replicas *replicaSet
}

// queryCounter counts every statement sent to the database, so operators
// (and tests of N+1 behaviour) can see how many queries a request costs.
type queryCounter struct{ n *atomic.Int64 }

func (q queryCounter) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }
func (q queryCounter) AfterQuery(context.Context, *bun.QueryEvent)                        { q.n.Add(1) }

// Queries returns how many statements the store has sent.
func (s *Store) Queries() int64 { return s.queries.Load() }

// Open connects to a `postgres://` or `sqlite://PATH` URL. The returned
// function closes the pool.
func Open(ctx context.Context, databaseURL string) (*Store, func(), error) {
	var s *Store
	switch {
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		db, _ := openPostgres(databaseURL)
		s = &Store{db: db, postgres: true, dsn: databaseURL}
	case strings.HasPrefix(databaseURL, "sqlite://"):
		path := strings.TrimPrefix(databaseURL, "sqlite://")
		if path == "" {
			return nil, nil, fmt.Errorf("database url %q names no file", databaseURL)
		}
		if dir := filepath.Dir(path); dir != "." {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, nil, fmt.Errorf("create database directory: %w", err)
			}
		}
		// WAL lets readers run beside the single writer; immediate
		// transactions take the write lock up front, so two writers queue
		// on the busy timeout instead of failing mid-transaction.
		dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
			"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		// Queries are interrupted when their context ends, also while
		// their rows are read (sqliteinterrupt.go).
		sqldb := sql.OpenDB(&interruptConnector{drv: sqliteshim.Driver(), dsn: dsn})
		sqldb.SetMaxOpenConns(8)
		s = &Store{db: bun.NewDB(sqldb, sqlitedialect.New()), writer: make(chan struct{}, 1)}
	default:
		return nil, nil, fmt.Errorf("database url must start with postgres:// or sqlite://")
	}
	s.db.AddQueryHook(queryCounter{n: &s.queries})
	s.sql.mountRead = s.mountReadSQL()
	s.sql.mountWithLatestTx = s.mountWithLatestSQL("?")
	s.sql.ingest = s.ingestSQL()
	s.sql.ingestWatched = s.ingestWatchedSQL()
	if err := s.pingAtStart(ctx); err != nil {
		_ = s.db.Close()
		return nil, nil, fmt.Errorf("connect to database: %w", err)
	}
	return s, func() { _ = s.db.Close() }, nil
}

// startWait is how long Open tries the database before it gives up: a
// replica started while PostgreSQL restarts ("the database system is
// shutting down", "is starting up") or fails over waits for it instead of
// exiting.
const startWait = 30 * time.Second

// pingAtStart pings the database every second (each ping bounded to 10 s)
// until it answers or startWait has passed.
func (s *Store) pingAtStart(ctx context.Context) error {
	deadline := time.Now().Add(startWait)
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := s.db.PingContext(pingCtx)
		cancel()
		if err == nil || !core.IsUnavailable(err) || time.Now().Add(time.Second).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Second):
		}
	}
}

// openPostgres returns a pool of up to 32 connections to dsn (it connects
// on first use) and its connector. Statements are cancelled on the server
// when their context ends (pgcancel.go): a request's deadline stops the
// database's work too.
func openPostgres(dsn string) (*bun.DB, *pgdriver.Connector) {
	connector := pgdriver.NewConnector(pgdriver.WithDSN(dsn))
	sqldb := sql.OpenDB(newCancelConnector(connector))
	sqldb.SetMaxOpenConns(32)
	sqldb.SetMaxIdleConns(32)
	return bun.NewDB(sqldb, pgdialect.New()), connector
}

// write runs fn, which writes outside a transaction, as the only writer on
// SQLite; on PostgreSQL it just runs fn.
func (s *Store) write(ctx context.Context, fn func() error) error {
	if s.writer == nil {
		return fn()
	}
	select {
	case s.writer <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.writer }()
	return fn()
}

// inTx runs fn in a transaction, as the only writer on SQLite (every
// SQLite transaction here is immediate: it takes the write lock).
func (s *Store) inTx(ctx context.Context, fn func(context.Context, bun.Tx) error) error {
	return s.write(ctx, func() error { return s.db.RunInTx(ctx, nil, fn) })
}

// prepared returns query prepared on the pool (database/sql prepares it on
// each connection the first time that connection runs it). For the hottest
// reads this skips the server's parse and plan: a mount read by uid costs
// PostgreSQL about half as much prepared (docs/performance.md). Queries must
// name their columns: a prepared "*" breaks when a migration adds one.
func (s *Store) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.preparedIn(ctx, s.db, query)
}

// param is the n-th (from 1) bind parameter in the dialect's syntax.
func (s *Store) param(n int) string {
	if s.postgres {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// columns lists the columns of a bun model type for a select, each
// qualified by alias (none when alias is empty).
func (s *Store) columns(typ reflect.Type, alias string) string {
	fields := s.db.Table(typ).Fields
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = string(f.SQLName)
		if alias != "" {
			names[i] = alias + "." + names[i]
		}
	}
	return strings.Join(names, ", ")
}

// PoolSize is the most connections the store opens at once.
func (s *Store) PoolSize() int { return s.db.DB.Stats().MaxOpenConnections }

// DB exposes the bun handle to tests and benchmarks in this module.
func (s *Store) DB() *bun.DB { return s.db }

// Postgres reports whether the store runs on PostgreSQL.
func (s *Store) Postgres() bool { return s.postgres }

// Ping checks that the database answers; readiness probes use it.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// Migrate applies every pending migration. Concurrent callers (two replicas
// starting together) are serialised: PostgreSQL by an advisory lock that dies
// with its session, SQLite by its own write lock around bun's lock table.
func (s *Store) Migrate(ctx context.Context) (applied []string, err error) {
	db := s.db
	if s.postgres {
		// A migration rewrites whole tables (100,000 mounts take tens of
		// seconds): its statements run without the driver's read timeout
		// of 10 s, bounded by ctx alone.
		sqldb := sql.OpenDB(newCancelConnector(pgdriver.NewConnector(pgdriver.WithDSN(s.dsn), pgdriver.WithReadTimeout(0))))
		defer sqldb.Close()
		db = bun.NewDB(sqldb, pgdialect.New())
	}
	m := migrate.NewMigrator(db, migrations.Migrations,
		migrate.WithMarkAppliedOnSuccess(true),
		migrate.WithTemplateData(map[string]bool{"Postgres": s.postgres}))
	if s.postgres {
		conn, err := db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		h := fnv.New64a()
		h.Write([]byte("mountd migrations"))
		lockID := int64(h.Sum64() >> 1)
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", lockID); err != nil {
			return nil, fmt.Errorf("lock migrations: %w", err)
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", lockID) //nolint:errcheck
		if err := m.Init(ctx); err != nil {
			return nil, fmt.Errorf("init migrations: %w", err)
		}
	} else {
		if err := m.Init(ctx); err != nil {
			return nil, fmt.Errorf("init migrations: %w", err)
		}
		if err := lockWithRetry(ctx, m); err != nil {
			return nil, err
		}
		defer m.Unlock(context.WithoutCancel(ctx)) //nolint:errcheck
	}
	group, err := m.Migrate(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	for _, mig := range group.Migrations {
		applied = append(applied, mig.Name)
	}
	if s.postgres {
		if err := advanceTransactionIDs(ctx, db); err != nil {
			return applied, err
		}
	}
	return applied, nil
}

// maxTransactionIDAdvance bounds what advanceTransactionIDs burns: about a
// minute of a core. Further than that, an operator decides (docs/operations.md).
const maxTransactionIDAdvance = 20_000_000

// advanceTransactionIDs keeps the event log's and the audit's positions in
// order after a logical copy of the database (pg_dump restored into another
// server): a position is the writing transaction's id, and a server that
// counts its transactions from fewer than the source did would place new
// rows before the restored ones, behind every cursor already handed out.
// It moves this server's transaction ids past the newest position (with a
// margin: the audit's is read by its time), one subtransaction id per
// step, or refuses to start when that is too far. Runs under the migrations'
// lock, once per start; without a copy it reads two index ends.
func advanceTransactionIDs(ctx context.Context, db *bun.DB) error {
	var gap int64
	if err := db.QueryRowContext(ctx, `SELECT (GREATEST(
			COALESCE((SELECT tx FROM events ORDER BY tx DESC, id DESC LIMIT 1), '0'::xid8)::text::numeric,
			COALESCE((SELECT tx FROM audit_log ORDER BY at DESC LIMIT 1), '0'::xid8)::text::numeric)
		- pg_current_xact_id()::text::numeric)::bigint`).Scan(&gap); err != nil {
		return fmt.Errorf("compare positions with transaction ids: %w", err)
	}
	if gap < 0 {
		return nil // every start but the first after a copy
	}
	// The audit's newest row is read by its time, not its position: a
	// margin past it covers the rows written beside it.
	gap += 1000
	if gap > maxTransactionIDAdvance {
		return fmt.Errorf("the event log's positions are %d transactions ahead of this PostgreSQL server's "+
			"(the database was copied with pg_dump into another server): mountd advances at most %d; "+
			"restore it physically instead (docs/operations.md, \"PostgreSQL and Redis\")", gap, maxTransactionIDAdvance)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS mountd_transaction_ids (n int)`); err != nil {
		return err
	}
	// Each subtransaction that writes takes a transaction id of its own;
	// batches of 100,000 keep one transaction's subtransactions bounded.
	for left := gap + 1; left > 0; left -= 100_000 {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`DO $$ BEGIN
				FOR i IN 1..%d LOOP
					BEGIN INSERT INTO mountd_transaction_ids VALUES (i); EXCEPTION WHEN OTHERS THEN NULL; END;
				END LOOP;
			END $$`, min(left, 100_000))); err != nil {
			return fmt.Errorf("advance transaction ids: %w", err)
		}
	}
	_, err = conn.ExecContext(ctx, `DROP TABLE mountd_transaction_ids`)
	return err
}

// lockWithRetry waits for bun's migration lock, which fails at once when held.
func lockWithRetry(ctx context.Context, m *migrate.Migrator) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := m.Lock(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migrations are locked by another process (bun_migration_locks): %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// translate turns driver errors into coded core errors.
func translate(err error, notFound core.Code, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sql.ErrNoRows):
		return core.Errorf(notFound, "%s not found", what)
	case isUniqueViolation(err):
		return core.Errorf(core.CodeConflict, "%s already exists", what)
	}
	return err
}

func isUniqueViolation(err error) bool {
	var pgErr pgdriver.Error
	if errors.As(err, &pgErr) {
		return pgErr.Field('C') == "23505"
	}
	msg := err.Error()
	return strings.Contains(msg, "UNIQUE constraint failed") || strings.Contains(msg, "PRIMARY KEY constraint failed")
}

// millis stores instants as Unix milliseconds in both engines.
func millis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
