// Package testenv gives tests the real servers that scripts/test-services.sh
// starts: a fresh PostgreSQL database per call, a Redis key prefix per call.
// Without the servers a test is skipped, unless MOUNTD_TEST_REQUIRE_SERVICES
// is set (as `make test` does), where it fails: CI never passes by skipping.
package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/bunstore"
)

func missing(tb testing.TB, what string) {
	tb.Helper()
	if os.Getenv("MOUNTD_TEST_REQUIRE_SERVICES") != "" {
		tb.Fatalf("%s is not set although the test servers are required; run through scripts/test-services.sh", what)
	}
	tb.Skipf("%s not set: run `make test` for the PostgreSQL and Redis tests", what)
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// PostgresURL creates a fresh, empty database on the test server and
// returns its URL; the database is dropped when the test ends. (There is
// no migrated template for PostgreSQL: it migrates fast, and copying a
// template holds the cluster's snapshot horizon back for the copy's
// duration, which hides every other test's newer events from the event
// log meanwhile.)
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	return postgresURLOn(tb, os.Getenv("MOUNTD_TEST_DATABASE_URL"))
}

// postgresURLOn is PostgresURL on the server of admin.
func postgresURLOn(tb testing.TB, admin string) string {
	tb.Helper()
	if admin == "" {
		missing(tb, "MOUNTD_TEST_DATABASE_URL")
	}
	name := "mountd_test_" + randomSuffix()
	if err := createDatabase(admin, name); err != nil {
		tb.Fatalf("create test database: %v", err)
	}
	tb.Cleanup(func() { dropDatabase(admin, name) })
	return databaseURL(tb, admin, name)
}

func createDatabase(admin, name string) error {
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(admin)))
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := db.ExecContext(ctx, "CREATE DATABASE "+name)
	return err
}

func dropDatabase(admin, name string) {
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(admin)))
	defer db.Close()
	_, _ = db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
}

func databaseURL(tb testing.TB, admin, name string) string {
	tb.Helper()
	u, err := url.Parse(admin)
	if err != nil {
		tb.Fatalf("parse MOUNTD_TEST_DATABASE_URL: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

var (
	templateMu      sync.Mutex
	templatePrepare func(ctx context.Context, databaseURL string) error
	sqliteTemplate  string // the SQLite template file
	sqliteErr       error
)

// UseTemplates makes MigratedSQLiteURL hand out copies of one SQLite
// database that prepare (the migrations) sets up the first time one is
// asked for: SQLite under -race migrates in about a second, a copy takes
// milliseconds. TestMain calls it and, after the tests, the function it
// returns, which removes the template.
func UseTemplates(prepare func(ctx context.Context, databaseURL string) error) (drop func()) {
	templateMu.Lock()
	templatePrepare = prepare
	templateMu.Unlock()
	return func() {
		templateMu.Lock()
		defer templateMu.Unlock()
		if sqliteTemplate != "" {
			os.RemoveAll(filepath.Dir(sqliteTemplate))
		}
	}
}

// UseMigratedTemplates is UseTemplates with the store's migrations.
func UseMigratedTemplates() (drop func()) {
	return UseTemplates(func(ctx context.Context, databaseURL string) error {
		store, closeStore, err := bunstore.Open(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer closeStore()
		_, err = store.Migrate(ctx)
		return err
	})
}

// SQLiteTemplate is the path of the SQLite database that the function
// given to UseTemplates prepared, prepared on first use. Copy the file;
// it has no write-ahead log beside it.
func SQLiteTemplate() (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if sqliteTemplate != "" || sqliteErr != nil {
		return sqliteTemplate, sqliteErr
	}
	if templatePrepare == nil {
		return "", errors.New("testenv: no template: TestMain calls UseTemplates")
	}
	dir, err := os.MkdirTemp("", "mountd-template-")
	if err != nil {
		sqliteErr = err
		return "", err
	}
	path := filepath.Join(dir, "mountd.db")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if sqliteErr = templatePrepare(ctx, "sqlite://"+path); sqliteErr != nil {
		return "", sqliteErr
	}
	// prepare closed its connections: the last one folded the write-ahead
	// log into the file. Make sure.
	if _, err := os.Stat(path + "-wal"); err == nil {
		sqliteErr = fmt.Errorf("testenv: %s-wal left after prepare: close every connection", path)
		return "", sqliteErr
	}
	sqliteTemplate = path
	return path, nil
}

// MigratedSQLiteURL returns the URL of a copy of the SQLite template in
// the test's temp dir.
func MigratedSQLiteURL(tb testing.TB) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "mountd.db")
	if err := CopySQLiteTemplate(path); err != nil {
		tb.Fatalf("template database: %v", err)
	}
	return "sqlite://" + path
}

// CopySQLiteTemplate copies the SQLite template to path, a file that does
// not exist yet.
func CopySQLiteTemplate(path string) error {
	src, err := SQLiteTemplate()
	if err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}

// SQLiteURL returns the URL of a fresh SQLite file in the test's temp dir.
func SQLiteURL(tb testing.TB) string {
	tb.Helper()
	return "sqlite://" + filepath.Join(tb.TempDir(), "mountd.db")
}

// RedisURL returns the test Redis URL and a key prefix unique to this call.
func RedisURL(tb testing.TB) (redisURL, prefix string) {
	tb.Helper()
	return redisFrom(tb, "MOUNTD_TEST_REDIS_URL")
}

// RedisClusterURL returns the test Redis Cluster's URL (go-redis's cluster
// URL: one seed address, the others in addr parameters) and a key prefix
// unique to this call.
func RedisClusterURL(tb testing.TB) (clusterURL, prefix string) {
	tb.Helper()
	return redisFrom(tb, "MOUNTD_TEST_REDIS_CLUSTER_URL")
}

func redisFrom(tb testing.TB, env string) (rawURL, prefix string) {
	tb.Helper()
	u := os.Getenv(env)
	if u == "" {
		missing(tb, env)
	}
	return u, "mountdtest:" + randomSuffix() + ":"
}

// Databases lists the database URLs a store test runs against: SQLite
// always, PostgreSQL through the test server. Each is a fresh, empty
// database.
func Databases(tb testing.TB) map[string]func(testing.TB) string {
	tb.Helper()
	return map[string]func(testing.TB) string{
		"sqlite":   SQLiteURL,
		"postgres": PostgresURL,
	}
}

// MigratedDatabases is Databases with SQLite as a copy of the migrated
// template (UseTemplates); PostgreSQL's database is still empty: migrate
// it.
func MigratedDatabases(tb testing.TB) map[string]func(testing.TB) string {
	tb.Helper()
	return map[string]func(testing.TB) string{
		"sqlite":   MigratedSQLiteURL,
		"postgres": PostgresURL,
	}
}

// Chromium returns the path of the Chromium binary for browser tests.
func Chromium(tb testing.TB) string {
	tb.Helper()
	return binary(tb, "MOUNTD_TEST_CHROMIUM")
}

// Nginx returns the path of the nginx binary for the deployment test.
func Nginx(tb testing.TB) string {
	tb.Helper()
	return binary(tb, "MOUNTD_TEST_NGINX")
}

// binary reads the path of a program the test script found.
func binary(tb testing.TB, env string) string {
	tb.Helper()
	p := os.Getenv(env)
	if p == "" {
		missing(tb, env)
	}
	return p
}
