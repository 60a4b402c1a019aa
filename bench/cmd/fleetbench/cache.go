package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// The seeded fleet is kept as a pg_dump of mountd's whole database, named
// by the fleet's size, the newest migration of the schema it was seeded
// under and the value model, with the account's credentials beside it
// (the secret is stored hashed in the database, so it must be kept here).
//
// --prepare runs before mountd starts on the throw-away database: it finds
// the newest migration of the mountd binary by migrating a scratch
// database, and restores the dump of that name when there is one. The run
// proper then either uses the restored fleet or seeds it through the API
// and saves the dump. The two talk through the state file.

// meta is what is kept beside a dump.
type meta struct {
	Mounts       int       `json:"mounts"`
	Migration    string    `json:"migration"`
	Model        string    `json:"model"`
	AccountID    string    `json:"accountId"`
	ClientID     string    `json:"clientId"`
	ClientSecret string    `json:"clientSecret"`
	SeededAt     time.Time `json:"seededAt"`
	SeedSeconds  float64   `json:"seedSeconds"`
	// SettleSeconds is the wait for the presence sweep after the seed.
	SettleSeconds float64 `json:"settleSeconds"`
}

// runState is what --prepare leaves for the run proper.
type runState struct {
	Dump      string  `json:"dump"`
	Migration string  `json:"migration"`
	Restored  bool    `json:"restored"`
	Seconds   float64 `json:"restoreSeconds,omitempty"`
}

func metaPath(dump string) string { return dump[:len(dump)-len(filepath.Ext(dump))] + ".json" }

// dumpPath is the cache file of a fleet of n mounts under migration.
func dumpPath(dir string, n int, migration string) string {
	return filepath.Join(dir, fmt.Sprintf("fleet-%d-%s-%s.dump", n, migration, seedModel))
}

// defaultCacheDir is $FLEETBENCH_CACHE, else ~/.cache/mountd-bench.
func defaultCacheDir() string {
	if d := os.Getenv("FLEETBENCH_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "mountd-bench")
	}
	return filepath.Join(os.TempDir(), "mountd-bench")
}

// prepare finds the dump for this mountd and restores it into the empty
// database at cfg.DatabaseURL.
func prepare(ctx context.Context, cfg config) error {
	if cfg.StateFile == "" {
		return errors.New("--prepare needs --state")
	}
	migration, err := newestMigration(ctx, cfg)
	if err != nil {
		return err
	}
	st := runState{Dump: cfg.Dump, Migration: migration}
	if st.Dump == "" {
		st.Dump = dumpPath(cfg.CacheDir, cfg.Mounts, migration)
	}
	_, dumpErr := os.Stat(st.Dump)
	_, metaErr := os.Stat(metaPath(st.Dump))
	switch {
	case cfg.Reseed:
		logf("--reseed: seeding anew into %s", st.Dump)
	case dumpErr == nil && metaErr == nil:
		t0 := time.Now()
		if err := command(ctx, nil, "pg_restore", "--no-owner", "--no-privileges", "--exit-on-error", "-j", "2",
			"-d", cfg.DatabaseURL, st.Dump); err != nil {
			return fmt.Errorf("restore %s: %w", st.Dump, err)
		}
		st.Restored, st.Seconds = true, round(time.Since(t0).Seconds(), 1)
		logf("restored %s in %.1f s", st.Dump, st.Seconds)
	case cfg.Dump != "":
		return fmt.Errorf("--dump %s: no such dump and meta file", cfg.Dump)
	default:
		logf("no dump %s yet: the run seeds the fleet through the API and saves it", st.Dump)
	}
	raw, _ := json.Marshal(st)
	return os.WriteFile(cfg.StateFile, raw, 0o600)
}

// newestMigration migrates a scratch database with the mountd binary and
// reads the newest migration it applied.
func newestMigration(ctx context.Context, cfg config) (string, error) {
	if cfg.Mountd == "" {
		return "", errors.New("--prepare needs --mountd")
	}
	const scratch = "fleetbench_migrations"
	scratchURL, err := withDatabase(cfg.DatabaseURL, scratch)
	if err != nil {
		return "", err
	}
	admin, err := openDB(cfg.DatabaseURL)
	if err != nil {
		return "", err
	}
	defer admin.Close()
	for _, q := range []string{"DROP DATABASE IF EXISTS " + scratch, "CREATE DATABASE " + scratch} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			return "", err
		}
	}
	defer admin.ExecContext(context.WithoutCancel(ctx), "DROP DATABASE IF EXISTS "+scratch) //nolint:errcheck
	if err := command(ctx, []string{"MOUNTD_DATABASE_URL=" + scratchURL}, cfg.Mountd, "migrate"); err != nil {
		return "", fmt.Errorf("mountd migrate: %w", err)
	}
	db, err := openDB(scratchURL)
	if err != nil {
		return "", err
	}
	defer db.Close()
	var name string
	if err := db.QueryRowContext(ctx, "SELECT name FROM bun_migrations ORDER BY name DESC LIMIT 1").Scan(&name); err != nil {
		return "", fmt.Errorf("read the newest migration: %w", err)
	}
	return name, nil
}

// saveDump writes the database to the dump (through a temporary file, so
// that an interrupted run leaves no half dump) and m beside it.
func saveDump(ctx context.Context, cfg config, dump string, m meta) error {
	if err := os.MkdirAll(filepath.Dir(dump), 0o700); err != nil {
		return err
	}
	tmp := dump + ".partial"
	if err := command(ctx, nil, "pg_dump", "-Fc", "-f", tmp, "-d", cfg.DatabaseURL); err != nil {
		return fmt.Errorf("pg_dump: %w", err)
	}
	raw, _ := json.MarshalIndent(m, "", "  ")
	if err := os.WriteFile(metaPath(dump), raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dump)
}

func readMeta(dump string) (meta, error) {
	var m meta
	raw, err := os.ReadFile(metaPath(dump))
	if err != nil {
		return m, err
	}
	return m, json.Unmarshal(raw, &m)
}

func readState(path string) (runState, error) {
	var st runState
	raw, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(raw, &st)
}

// command runs a program with extra environment, its output on stderr.
func command(ctx context.Context, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// withDatabase is a PostgreSQL URL naming another database of its server.
func withDatabase(databaseURL, name string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

func openDB(databaseURL string) (*sql.DB, error) {
	// VACUUM of a large fleet outlasts the driver's default read timeout.
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(databaseURL), pgdriver.WithReadTimeout(30*time.Minute)))
	db.SetMaxOpenConns(2)
	return db, nil
}
