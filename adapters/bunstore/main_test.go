package bunstore_test

import (
	"context"
	"os"
	"testing"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/testenv"
)

// TestMain prepares the migrated templates that testenv.MigratedDatabases
// copies for the contract suite's cases (the migration tests start from
// empty databases, testenv.Databases).
func TestMain(m *testing.M) {
	drop := testenv.UseTemplates(func(ctx context.Context, databaseURL string) error {
		store, closeStore, err := bunstore.Open(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer closeStore()
		_, err = store.Migrate(ctx)
		return err
	})
	code := m.Run()
	drop()
	os.Exit(code)
}
