package client

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/mountd/mountd"

// importRules say which packages of the module may not depend on which
// others (directly or through any package in between), by import path
// below the module: "core" stands for core and everything under it.
var importRules = []struct {
	name      string
	patterns  []string // the packages the rule holds for, as go list takes them
	forbidden []string
	advice    string
}{
	{
		name:      "clients of the API",
		patterns:  []string{"./client/...", "./sdk/...", "./device/...", "./protocol/...", "./cmd/mountctl", "./cmd/mountsim"},
		forbidden: []string{"core", "adapters", "graph", "app", "console"},
		advice: "a client reaches the server only through its API (client/, sdk/, protocol/): " +
			"move what it shares with the server into protocol (or client, for the HTTP API alone) " +
			"and have the server's package alias or call it there, so the rule lives once",
	},
	{
		name:      "internal libraries",
		patterns:  []string{"./internal/..."},
		forbidden: []string{"adapters", "graph", "app", "cmd"},
		advice: "a package under internal/ is a library the composition root (app/, cmd/) uses: " +
			"take what it needs as a parameter (an interface, an http.Handler) instead of importing it, " +
			"or move the package next to what it serves",
	},
}

// TestImportRules keeps the clients of the API free of the server and
// internal/ free of the composition root, by what `go list -deps` reports.
func TestImportRules(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH")
	}
	root := moduleRoot(t, goTool)
	for _, rule := range importRules {
		t.Run(rule.name, func(t *testing.T) {
			imports, listed := listDeps(t, goTool, root, rule.patterns)
			if len(listed) == 0 {
				t.Fatalf("go list found no packages for %v", rule.patterns)
			}
			for _, pkg := range listed {
				for _, chain := range forbiddenChains(imports, pkg, rule.forbidden) {
					t.Errorf("%s depends on %s (%s), which %s must not: %s",
						short(chain[0]), short(chain[len(chain)-1]), shortChain(chain), rule.name, rule.advice)
				}
			}
		})
	}
}

// moduleRoot is the folder of the module's go.mod, where go list runs.
func moduleRoot(t *testing.T, goTool string) string {
	t.Helper()
	out, err := exec.Command(goTool, "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == "/dev/null" {
		t.Fatalf("go env GOMOD = %q, %v: the test runs inside the module", gomod, err)
	}
	return filepath.Dir(gomod)
}

// listDeps runs go list -deps on patterns and returns every package's
// imports and the packages the patterns name (not those only depended on).
// Import paths of the dependencies are matched by prefix, so a pattern for
// a package that does not exist yet (./app) is never listed.
//
// go test caches a result by the files the test itself looked at, not by
// what go list read; listDeps looks at the module's packages it lists so
// that a new import anywhere there runs the test again.
func listDeps(t *testing.T, goTool, root string, patterns []string) (map[string][]string, []string) {
	t.Helper()
	args := append([]string{"list", "-deps", "-test=false",
		"-f", `{{.ImportPath}}{{"\t"}}{{.DepOnly}}{{"\t"}}{{.Dir}}{{"\t"}}{{join .Imports " "}}`}, patterns...)
	cmd := exec.Command(goTool, args...)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, exit.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	imports := map[string][]string{}
	var listed []string
	for line := range strings.Lines(string(bytes.TrimSpace(out))) {
		fields := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 4)
		if len(fields) != 4 {
			t.Fatalf("go list printed %q", line)
		}
		pkg, depOnly, dir := fields[0], fields[1], fields[2]
		imports[pkg] = strings.Fields(fields[3])
		if depOnly == "false" {
			listed = append(listed, pkg)
		}
		if strings.HasPrefix(pkg, module+"/") {
			lookAt(t, dir)
		}
	}
	return imports, listed
}

// lookAt reads dir and stats its files, which go test counts among the
// test's inputs.
func lookAt(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// forbiddenChains walks pkg's imports breadth first and returns, for each
// forbidden package it reaches, the shortest chain of imports from pkg to
// it (the walk does not go on through a forbidden package: its own imports
// are its rule's business).
func forbiddenChains(imports map[string][]string, pkg string, forbidden []string) [][]string {
	isForbidden := func(path string) bool {
		rel, ok := strings.CutPrefix(path, module+"/")
		return ok && slices.ContainsFunc(forbidden, func(f string) bool {
			return rel == f || strings.HasPrefix(rel, f+"/")
		})
	}
	from := map[string]string{pkg: ""}
	var chains [][]string
	for queue := []string{pkg}; len(queue) > 0; queue = queue[1:] {
		for _, next := range imports[queue[0]] {
			if _, seen := from[next]; seen {
				continue
			}
			from[next] = queue[0]
			if !isForbidden(next) {
				queue = append(queue, next)
				continue
			}
			chain := []string{next}
			for at := queue[0]; at != ""; at = from[at] {
				chain = append(chain, at)
			}
			slices.Reverse(chain)
			chains = append(chains, chain)
		}
	}
	return chains
}

func short(path string) string { return strings.TrimPrefix(path, module+"/") }

func shortChain(chain []string) string {
	names := make([]string, len(chain))
	for i, p := range chain {
		names[i] = short(p)
	}
	return strings.Join(names, " imports ")
}

func TestForbiddenChains(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	imports := map[string][]string{
		m("cmd/tool"):    {"fmt", m("client"), m("appkit")},
		m("client"):      {m("core")},
		m("core"):        {m("adapters/rest")},
		m("appkit"):      {m("app/wire")},
		m("cmd/direct"):  {m("adapters/rest")},
		m("cmd/clean"):   {"fmt", m("protocol")},
		m("cmd/similar"): {m("coreutils")},
	}
	forbidden := []string{"core", "adapters", "app"}
	for _, c := range []struct {
		pkg  string
		want []string
	}{
		{m("cmd/tool"), []string{"cmd/tool imports client imports core", "cmd/tool imports appkit imports app/wire"}},
		{m("cmd/direct"), []string{"cmd/direct imports adapters/rest"}},
		{m("cmd/clean"), nil},
		{m("cmd/similar"), nil},
	} {
		var got []string
		for _, chain := range forbiddenChains(imports, c.pkg, forbidden) {
			got = append(got, shortChain(chain))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("forbiddenChains(%s) = %q, want %q", short(c.pkg), got, c.want)
		}
	}
}
