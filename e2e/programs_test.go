package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The end-to-end tests run the real programs. They are built once per
// test run, by one `go build` that TestMain starts in the background: on a
// cold build cache that build takes minutes of CPU, which then overlap
// the first tests instead of stopping the first test that needs a
// program.

var (
	programsOnce sync.Once
	programsDir  string
	programsErr  error
	programsDone = make(chan struct{})
)

// buildPrograms builds mountd, mountctl and mountsim into a temporary
// directory, once; MOUNTD_TEST_PROGRAMS names a directory where they are
// built already (make test builds them once for its test processes).
func buildPrograms() {
	programsOnce.Do(func() {
		if dir := os.Getenv("MOUNTD_TEST_PROGRAMS"); dir != "" {
			programsDir = dir
			close(programsDone)
			return
		}
		go func() {
			defer close(programsDone)
			if programsDir, programsErr = os.MkdirTemp("", "mountd-programs-"); programsErr != nil {
				return
			}
			out, err := exec.Command("go", "build", "-o", programsDir+string(filepath.Separator), "../cmd/mountd", "../cmd/mountctl", "../cmd/mountsim").CombinedOutput()
			if err != nil {
				programsErr = fmt.Errorf("build: %v\n%s", err, out)
			}
		}()
	})
}

// mountdBinary is the mountd program (cmd/mountd).
func mountdBinary(t *testing.T) string { return programBinary(t, "mountd") }

// mountctlBinary is mountctl, the program beside mountd.
func mountctlBinary(t *testing.T) string { return programBinary(t, "mountctl") }

// mountsimBinary is mountsim, the program beside mountd.
func mountsimBinary(t *testing.T) string { return programBinary(t, "mountsim") }

// programBinary waits for the programs' build and returns name's path.
func programBinary(t *testing.T, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds binaries")
	}
	buildPrograms()
	<-programsDone
	if programsErr != nil {
		t.Fatal(programsErr)
	}
	return filepath.Join(programsDir, name)
}
