// Package e2e holds the end-to-end tests. They start mountd in-process
// through package app (on the embedded SQLite and on PostgreSQL with
// Redis), build and run the real mountctl and mountsim (and mountd itself
// as a process where a test needs replicas or kills one), and drive real
// PostgreSQL, Redis, nginx and Chromium, which scripts/test-services.sh
// starts and names in MOUNTD_TEST_* variables; a test whose service is
// missing skips.
//
// The helpers shared by several files are in:
//
//   - main_test.go: TestMain alone
//   - server_test.go: an instance, its backends and configuration, start,
//     accounts and tokens, admin commands, firmware publishing, people
//   - http_test.go: REST and GraphQL requests over HTTP and WebSocket,
//     problems, decoding answers
//   - fleet_test.go: a fleet of mounts on an instance, simulated devices,
//     their reports, commands and receipts
//   - views_test.go: the shapes answers decode into
//   - programs_test.go: building and running mountd, mountctl and mountsim
//   - browser_test.go: the shared Chromium and a console session
//   - services_test.go: nginx, Redis and webhook receivers
//
// Every other file holds the tests of one capability, named capability
// first so that they sort together: alarms_test.go (REST and the cases
// across interfaces), then alarms_graphql_test.go, alarms_console_test.go
// (in Chromium), alarms_mountctl_test.go, and so on; _bench_test.go files
// hold benchmarks. A helper used by one file stays beside its test.
//
// One test, on SQLite only:
//
//	go test -count=1 -run 'TestLifecycle/embedded' ./e2e
//
// With PostgreSQL, Redis, nginx and Chromium:
//
//	scripts/test-services.sh go test -count=1 -run TestLifecycle ./e2e
//
// -short builds no program and skips the tests that run one (and a few
// slow ones); MOUNTD_TEST_PROGRAMS names a directory where the programs are
// built already.
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
	if !testing.Short() && os.Getenv("MOUNTD_TEST_PROGRAMS") == "" {
		<-programsDone // the build writes programsDir
		if programsDir != "" {
			os.RemoveAll(programsDir)
		}
	}
	os.Exit(code)
}
