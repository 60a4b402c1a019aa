package bunstore_test

import (
	"os"
	"testing"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestMain prepares the migrated templates that testenv.MigratedDatabases
// copies for the contract suite's cases (the migration tests start from
// empty databases, testenv.Databases).
func TestMain(m *testing.M) {
	drop := testenv.UseMigratedTemplates()
	code := m.Run()
	drop()
	os.Exit(code)
}
