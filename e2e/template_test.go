package e2e

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
)

// seedSQLite copies the migrated template (testenv.UseTemplates) to cfg's
// database when cfg is the embedded default and its file does not exist
// yet: SQLite under -race spends most of a test server's start in the
// migrations otherwise. The server still migrates at start, finding
// nothing to do; a test that prepares its file before start keeps it.
func seedSQLite(t testing.TB, cfg app.Config) {
	t.Helper()
	if cfg.DatabaseURL != "" || cfg.DataDir == "" {
		return
	}
	path := filepath.Join(cfg.DataDir, "mountd.db")
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := testenv.CopySQLiteTemplate(path); err != nil {
		t.Fatalf("template database: %v", err)
	}
}
