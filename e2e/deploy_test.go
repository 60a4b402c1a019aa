package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDeployFilesPointToDocs: every `docs/operations.md, "Section"` that a
// file in deploy/ names (across a line break of its comment too) is a
// section of docs/operations.md.
func TestDeployFilesPointToDocs(t *testing.T) {
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(ops), "\n") {
		if title, ok := strings.CutPrefix(line, "## "); ok {
			sections[strings.TrimSpace(title)] = true
		}
	}
	ref := regexp.MustCompile(`docs/operations\.md,\s*(?:#\s*)?"([^"]+)"`)
	found := 0
	err = filepath.WalkDir("../deploy", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range ref.FindAllStringSubmatch(string(raw), -1) {
			found++
			if !sections[m[1]] {
				t.Errorf("%s points to the section %q, which docs/operations.md does not have", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found == 0 {
		t.Fatal("no reference to docs/operations.md found in deploy/: the pattern is out of date")
	}
}

// TestNginxConfigsGuardMetrics: both nginx configurations shipped keep
// /metrics to the proxy's own host.
func TestNginxConfigsGuardMetrics(t *testing.T) {
	block := regexp.MustCompile(`(?s)location = /metrics \{(.*?)\}`)
	for _, name := range []string{"mountd.conf", "compose.conf"} {
		raw, err := os.ReadFile(filepath.Join("../deploy/nginx", name))
		if err != nil {
			t.Fatal(err)
		}
		m := block.FindStringSubmatch(string(raw))
		if m == nil {
			t.Errorf("%s has no location = /metrics: the metrics are public through it", name)
			continue
		}
		if !strings.Contains(m[1], "deny all;") || !strings.Contains(m[1], "allow 127.0.0.1;") {
			t.Errorf("%s: /metrics is not restricted to the proxy's host:%s", name, m[1])
		}
	}
}
