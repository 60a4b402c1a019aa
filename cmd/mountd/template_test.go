package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/mountd/mountd/adapters/bunstore"
)

// SQLite under -race spends most of a test server's start in the
// migrations (about a second each time): the tests' embedded servers
// start from a copy of one database migrated once per test run. The
// migrations still run at every start, finding nothing to do; tests of
// the migrations themselves prepare their file before start, which then
// leaves it alone.

var (
	sqliteTemplateOnce sync.Once
	sqliteTemplate     string
	sqliteTemplateErr  error
)

// migratedSQLite returns the path of the migrated template database.
func migratedSQLite() (string, error) {
	sqliteTemplateOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mountd-template-")
		if err != nil {
			sqliteTemplateErr = err
			return
		}
		templates = append(templates, dir)
		path := filepath.Join(dir, "mountd.db")
		store, closeStore, err := bunstore.Open(context.Background(), "sqlite://"+path)
		if err != nil {
			sqliteTemplateErr = err
			return
		}
		defer closeStore()
		if _, err := store.Migrate(context.Background()); err != nil {
			sqliteTemplateErr = err
			return
		}
		// Everything into the file itself: only that file is copied.
		if _, err := store.DB().ExecContext(context.Background(), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			sqliteTemplateErr = err
			return
		}
		sqliteTemplate = path
	})
	return sqliteTemplate, sqliteTemplateErr
}

// templates are the directories TestMain removes.
var templates []string

// seedSQLite copies the migrated template to cfg's database when cfg is
// the embedded default and its file does not exist yet.
func seedSQLite(t testing.TB, cfg Config) {
	t.Helper()
	if cfg.DatabaseURL != "" || cfg.DataDir == "" {
		return
	}
	dst := filepath.Join(cfg.DataDir, "mountd.db")
	if _, err := os.Stat(dst); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	src, err := migratedSQLite()
	if err != nil {
		t.Fatalf("template database: %v", err)
	}
	if err := copyFile(src, dst); err != nil {
		t.Fatalf("template database: %v", err)
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
