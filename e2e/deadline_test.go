package e2e

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/testenv"
)

// fiftyComparisons is the filter of issue 37: 48 comparisons under NOT and
// OR, within the bound of 100 terms.
func fiftyComparisons() string {
	var terms []string
	for i := range 48 {
		field := "batteryLevel"
		if i%2 == 1 {
			field = "cpuTemperature"
		}
		terms = append(terms, fmt.Sprintf("NOT %s >= -%d", field, i+1))
	}
	return strings.Join(terms, " OR ")
}

// TestRequestDeadline: a request whose work outlasts MOUNTD_REQUEST_TIMEOUT
// answers 503 UNAVAILABLE with Retry-After (GraphQL: UNAVAILABLE), not a
// 500 or a silent 499, on both backends. A second replica on the same
// database, with a deadline of 1 ns (shorter than any statement; 1 ms
// let the cheap filter of the new layout finish on SQLite), serves the
// requests of tokens the first issued. (That the statement itself stops in
// the database is TestStatementsStopAtTheirDeadline in adapters/bunstore.)
func TestRequestDeadline(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			in := start(t, cfg)
			a := newFleet(in, "A")
			a.associate(t, "DEADLINE1", nil)
			short := in.cfg
			short.Listen, short.PublicURL, short.RequestTimeout = "127.0.0.1:0", in.base, time.Nanosecond
			slow := start(t, short)
			b := fleet{in: slow, creds: a.creds, token: a.token}
			filter := url.QueryEscape(fiftyComparisons())
			res, raw := b.call(http.MethodGet, "/api/v1/mounts?filter="+filter, nil)
			wantProblem(t, res, raw, http.StatusServiceUnavailable, "UNAVAILABLE")
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			r := b.gql(t, `query($f: String!) { mounts(pageSize: 1, filter: {expression: $f}) { mounts { uid } } }`,
				map[string]any{"f": fiftyComparisons()})
			if r.code() != "UNAVAILABLE" {
				t.Fatalf("GraphQL past its deadline: %+v %s", r.Errors, r.Data)
			}
			// The first replica, with the default deadline, answers.
			if res, raw := a.call(http.MethodGet, "/api/v1/mounts?filter="+filter, nil); res.StatusCode != http.StatusOK {
				t.Fatalf("default deadline: %d %s", res.StatusCode, raw)
			}
		})
	}
}

// TestDatabaseConnectionLimit: PostgreSQL refusing connections ("too many
// connections", SQLSTATE 53300) answers 503 UNAVAILABLE with Retry-After,
// never 500. mountd connects as a role whose connection limit is lowered
// to 0 once it runs; its open connections are then ended, so that the
// next request needs a new one.
func TestDatabaseConnectionLimit(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	dbName := strings.TrimPrefix(u.Path, "/")
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(dbURL)))
	defer admin.Close()
	role := "limited_" + dbName
	exec := func(q string) {
		t.Helper()
		if _, err := admin.ExecContext(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE ROLE " + role + " LOGIN PASSWORD 'limited'")
	t.Cleanup(func() {
		// The database is dropped after this (cleanups run last first).
		a := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(os.Getenv("MOUNTD_TEST_DATABASE_URL"))))
		defer a.Close()
		_, _ = a.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		_, _ = a.Exec("REASSIGN OWNED BY " + role + " TO CURRENT_USER")
		_, _ = a.Exec("DROP ROLE IF EXISTS " + role)
	})
	exec("ALTER DATABASE " + dbName + " OWNER TO " + role)
	u.User = url.UserPassword(role, "limited")
	cfg := testConfig(t.TempDir(), u.String())
	in := start(t, cfg)
	a := newFleet(in, "A")
	a.associate(t, "LIMIT1", nil)

	exec("ALTER ROLE " + role + " CONNECTION LIMIT 0")
	exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '" + role + "'")
	// The first requests may meet the ended connections (57P01); those
	// after them need new ones, which the limit refuses (53300).
	for _, path := range []string{"/api/v1/mounts?mountUid=LIMIT1", "/api/v1/mounts?mountUid=", "/api/v1/audit",
		"/api/v1/mounts?mountUid=LIMIT1", "/api/v1/mounts?mountUid=", "/api/v1/audit", "/api/v1/alarms"} {
		res, raw := a.call(http.MethodGet, path, nil)
		wantProblem(t, res, raw, http.StatusServiceUnavailable, "UNAVAILABLE")
		if res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: 503 without Retry-After", path)
		}
	}
	exec("ALTER ROLE " + role + " CONNECTION LIMIT -1")
	if res, raw := a.call(http.MethodGet, "/api/v1/mounts/LIMIT1", nil); res.StatusCode != http.StatusOK {
		t.Fatalf("after the limit is lifted: %d %s", res.StatusCode, raw)
	}
}

// TestExpensiveFilterStopsInPostgres: issue 37's filter over 100,000
// mounts ran on in PostgreSQL for minutes after mountd had answered, as a
// closed socket does not stop a backend. Here the listing's statements wait
// for a lock the test holds on the mounts table, so that they outlast the
// request deadline whatever the machine's speed: the request answers 503
// UNAVAILABLE with Retry-After, and within seconds of the answer no
// backend still waits on it, while the test holds the lock. The deadline
// (2 s) leaves the set-up's token and claim room on a busy machine (make
// test failed once when 300 ms did not).
func TestExpensiveFilterStopsInPostgres(t *testing.T) {
	cfg := testConfig(t.TempDir(), testenv.PostgresURL(t))
	cfg.RequestTimeout = 2 * time.Second
	in := start(t, cfg)
	a := newFleet(in, "A")
	a.associate(t, "SEED0", nil)
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(cfg.DatabaseURL)))
	defer db.Close()
	ctx := context.Background()
	lock, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, "LOCK TABLE mounts IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	res, raw := a.call(http.MethodGet, "/api/v1/mounts?pageSize=1&filter="+url.QueryEscape(fiftyComparisons()), nil)
	answered := time.Now()
	wantProblem(t, res, raw, http.StatusServiceUnavailable, "UNAVAILABLE")
	if res.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	for {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity WHERE state = 'active'
			AND query LIKE '%battery_level IS NOT NULL%' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		// The cancel reaches the backend within milliseconds on a quiet
		// machine; 3 s leaves room for a 2-core machine running test
		// processes beside PostgreSQL, while an uncancelled statement waits
		// as long as the lock is held.
		if time.Since(answered) > 3*time.Second {
			t.Fatalf("%d backend(s) still wait on the listing %v after the answer", n, time.Since(answered))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
