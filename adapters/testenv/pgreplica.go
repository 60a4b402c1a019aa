package testenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// replicaWait bounds every wait for the read replica: it applies commits
// TEST_SERVICES_REPLICA_DELAY (250 ms) late, and replay may stall up to
// 5 s behind a conflicting lock (scripts/test-services.sh).
const replicaWait = 30 * time.Second

// PostgresReadURL returns the URL of database, just created on the test
// server (PostgresURL), on its streaming read replica, once the replica
// has it and every one of tables (names as to_regclass takes them, so
// "mounts" or "public.mounts") is visible there: migrate first, then ask.
// Without MOUNTD_TEST_DATABASE_READ_URL the test is skipped (failed where
// the servers are required).
func PostgresReadURL(tb testing.TB, database string, tables ...string) string {
	tb.Helper()
	admin := os.Getenv("MOUNTD_TEST_DATABASE_READ_URL")
	if admin == "" {
		missing(tb, "MOUNTD_TEST_DATABASE_READ_URL")
	}
	readURL := databaseURL(tb, admin, database)
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(readURL)))
	defer db.Close()
	err := poll(replicaWait, func(ctx context.Context) error {
		// Until the replica replays the CREATE DATABASE, connecting fails.
		if _, err := db.ExecContext(ctx, "SELECT 1"); err != nil {
			return err
		}
		for _, table := range tables {
			var found bool
			if err := db.QueryRowContext(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&found); err != nil {
				return err
			}
			if !found {
				return fmt.Errorf("table %s not on the replica yet", table)
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("database %s on the read replica: %v", database, err)
	}
	return readURL
}

// PostgresReplicatedURL is PostgresURL on the cluster the read replica
// streams from (MOUNTD_TEST_DATABASE_REPLICATED_URL), which need not be
// MOUNTD_TEST_DATABASE_URL's (each e2e shard has a cluster of its own).
func PostgresReplicatedURL(tb testing.TB) string {
	tb.Helper()
	if os.Getenv("MOUNTD_TEST_DATABASE_READ_URL") == "" {
		missing(tb, "MOUNTD_TEST_DATABASE_READ_URL")
	}
	return postgresURLOn(tb, replicatedAdmin())
}

// replicatedAdmin is the admin URL of the replica's primary.
func replicatedAdmin() string {
	if u := os.Getenv("MOUNTD_TEST_DATABASE_REPLICATED_URL"); u != "" {
		return u
	}
	return os.Getenv("MOUNTD_TEST_DATABASE_URL")
}

// DatabaseName is the name of the database that databaseURL (as
// PostgresURL returns it) names.
func DatabaseName(tb testing.TB, databaseURL string) string {
	tb.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		tb.Fatalf("parse database URL: %v", err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// ReplicaBehind is how many bytes of write-ahead log the read replica has
// yet to replay of what the primary has logged: 0 when it has caught up.
// Other tests write on the same server, so it need not stay 0.
func ReplicaBehind(tb testing.TB) int64 {
	tb.Helper()
	lsn, replica := replayTarget(tb)
	defer replica.Close()
	ctx, cancel := context.WithTimeout(context.Background(), replicaWait)
	defer cancel()
	behind, err := replayBehind(ctx, replica, lsn)
	if err != nil {
		tb.Fatalf("replica's replay position: %v", err)
	}
	return behind
}

// WaitReplayed waits until the read replica has replayed everything the
// primary had logged when it was called, so that every transaction
// committed before is visible on the replica.
func WaitReplayed(tb testing.TB) {
	tb.Helper()
	lsn, replica := replayTarget(tb)
	defer replica.Close()
	err := poll(replicaWait, func(ctx context.Context) error {
		behind, err := replayBehind(ctx, replica, lsn)
		if err == nil && behind > 0 {
			err = fmt.Errorf("%d bytes of WAL not replayed", behind)
		}
		return err
	})
	if err != nil {
		tb.Fatalf("read replica replaying up to %s: %v", lsn, err)
	}
}

// replayTarget reads the primary's WAL insert position, past every commit
// acknowledged so far, and opens the replica's admin database for the
// caller to close. Not pg_current_wal_lsn (the write position): the test
// server runs with synchronous_commit=off, so a commit may not be written
// yet when the client hears of it.
func replayTarget(tb testing.TB) (lsn string, replica *sql.DB) {
	tb.Helper()
	primaryURL, replicaURL := replicatedAdmin(), os.Getenv("MOUNTD_TEST_DATABASE_READ_URL")
	if primaryURL == "" {
		missing(tb, "MOUNTD_TEST_DATABASE_URL")
	}
	if replicaURL == "" {
		missing(tb, "MOUNTD_TEST_DATABASE_READ_URL")
	}
	primary := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(primaryURL)))
	defer primary.Close()
	ctx, cancel := context.WithTimeout(context.Background(), replicaWait)
	defer cancel()
	if err := primary.QueryRowContext(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		tb.Fatalf("primary's WAL position: %v", err)
	}
	return lsn, sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(replicaURL)))
}

// replayBehind is how many bytes the replica's replay position is short
// of lsn, 0 when past it. When lsn lies just past a WAL page's header,
// the last record ended at the page's start: the replica, which reports
// where the records it replayed end, has it all there.
func replayBehind(ctx context.Context, replica *sql.DB, lsn string) (int64, error) {
	var behind sql.NullInt64
	err := replica.QueryRowContext(ctx, `
		SELECT (target - CASE WHEN target % page <= 40 THEN target % page ELSE 0 END
		        - pg_wal_lsn_diff(pg_last_wal_replay_lsn(), '0/0'))::bigint
		FROM (SELECT pg_wal_lsn_diff($1::pg_lsn, '0/0') AS target,
		             current_setting('wal_block_size')::int AS page) AS insert_position`, lsn).Scan(&behind)
	switch {
	case err != nil:
		return 0, err
	case !behind.Valid: // pg_last_wal_replay_lsn is null off a standby
		return 0, errors.New("MOUNTD_TEST_DATABASE_READ_URL is not a standby")
	}
	return max(behind.Int64, 0), nil
}

// poll calls try, with a short per-call deadline, until it succeeds or
// within passed; it returns the last error then.
func poll(within time.Duration, try func(ctx context.Context) error) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := try(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("gave up waiting"), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
