package e2e

import (
	"flag"
	"os"
	"testing"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestMain builds the programs the end-to-end tests run (in the
// background, unless MOUNTD_TEST_PROGRAMS names them), starts servers from
// a migrated SQLite file, and stops the shared Chromium at the end.
func TestMain(m *testing.M) {
	flag.Parse()
	if !testing.Short() {
		buildPrograms()
	}
	dropTemplates := testenv.UseMigratedTemplates()
	code := m.Run()
	chromiumStop()
	dropTemplates()
	if programsDir != "" && os.Getenv("MOUNTD_TEST_PROGRAMS") == "" {
		<-programsDone
		os.RemoveAll(programsDir)
	}
	os.Exit(code)
}
