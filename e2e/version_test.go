package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersionFlag: every program answers --version with its module version
// and, built from a git checkout, the VCS revision.
func TestVersionFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("builds binaries")
	}
	programs := []string{"mountd", "mountctl", "mountsim", "mountbench", "fanoutbench"}
	bin := t.TempDir() + string(filepath.Separator)
	for _, b := range []struct {
		dir  string // the module
		pkgs []string
	}{
		{"..", []string{"./cmd/mountd", "./cmd/mountctl", "./cmd/mountsim"}},
		{"../bench", []string{"./cmd/mountbench", "./cmd/fanoutbench"}}, // a module of their own
	} {
		cmd := exec.Command("go", append([]string{"build", "-buildvcs=auto", "-o", bin}, b.pkgs...)...)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build in %s: %v\n%s", b.dir, err, out)
		}
	}
	// Go stamps the revision from a checkout whose .git is a folder (a
	// clone; not a linked worktree, whose .git is a file).
	rev := ""
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		if fi, err := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && fi.IsDir() {
			if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
				rev = strings.TrimSpace(string(out))[:12]
			}
		}
	}
	for _, p := range programs {
		out, err := exec.Command(filepath.Join(bin, p), "--version").CombinedOutput()
		got := strings.TrimSpace(string(out))
		if err != nil || !strings.HasPrefix(got, p+" version ") || strings.Count(got, "\n") != 0 {
			t.Errorf("%s --version: %v %q", p, err, got)
			continue
		}
		if rev != "" && !strings.Contains(got, "rev "+rev) {
			t.Errorf("%s --version does not name the revision %s: %q", p, rev, got)
		}
	}
}
