package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestReadmeForNewUsers checks what a new user following the README and
// the guide word for word relies on: one account reused throughout, its secret file kept
// out of git, secrets never on a command line, the firmware download shown
// with its parameters and a tool that verifies it, and the ways in (Bearer,
// health and metrics endpoints, GraphiQL's header).
func TestReadmeForNewUsers(t *testing.T) {
	readme := readmeDocs(t)
	var code strings.Builder
	for i, block := range strings.Split(readme, "```") {
		if i%2 == 1 {
			code.WriteString(block)
		}
	}
	blocks := code.String()
	if n := strings.Count(blocks, "accounts create"); n != 1 {
		t.Errorf("the README's commands create %d accounts; one, reused, is enough", n)
	}
	if regexp.MustCompile(`--client-secret|client-secret "?\$`).MatchString(blocks) {
		t.Error("a README command passes a client secret on the command line (ps shows it)")
	}
	gitignore, err := os.ReadFile("../.gitignore")
	if err != nil || !regexp.MustCompile(`(?m)^/?account\.json$`).Match(gitignore) {
		t.Error(".gitignore does not keep account.json (it holds a client secret) out of git")
	}
	for _, want := range []string{
		"Authorization: Bearer", "/healthz", "/readyz", "/metrics", "Access-Key",
		"firmware/download?modelNumber=", "mountctl firmware download --model", "--version",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("neither the README nor the guide mentions %q", want)
		}
	}
	if strings.Contains(blocks, "sed") && regexp.MustCompile(`sed[^\n]*download`).MatchString(blocks) {
		t.Error("the README extracts the download link with sed (it is JSON-escaped)")
	}
	// account.json holds a client secret: created readable by its owner only.
	if !regexp.MustCompile(`umask 077[^\n]*accounts create[^\n]*account\.json`).MatchString(blocks) {
		t.Error("the README writes account.json without umask 077 (the secret would be world-readable)")
	}
	// Every block runs in order on a fresh checkout: what a command uses
	// was made by an earlier line (make run builds only bin/mountd).
	for _, use := range []struct{ made, used string }{
		{"> fw.bin", "--file fw.bin"},
		{"make build", "./bin/mountctl"},
	} {
		made, used := strings.Index(blocks, use.made), strings.Index(blocks, use.used)
		if used >= 0 && (made < 0 || made > used) {
			t.Errorf("the README uses %q before any block makes it (%q)", use.used, use.made)
		}
	}
}

// TestReadmeFilesIgnored: what the commands of the README and the guide
// write in the checkout (exports, a downloaded image, mountsim's --state-dir, the
// account's secret) is in .gitignore, so that following it leaves git
// status clean; its mountsim keeps its mounts (--state-dir) and its
// configuration table has every variable the docs send operators to.
func TestReadmeFilesIgnored(t *testing.T) {
	raw := readmeDocs(t)
	var code strings.Builder
	for i, block := range strings.Split(raw, "```") {
		if i%2 == 1 {
			code.WriteString(block)
		}
	}
	gitignore, err := os.ReadFile("../.gitignore")
	if err != nil {
		t.Fatal(err)
	}
	ignored := func(name string) bool {
		for _, line := range strings.Split(string(gitignore), "\n") {
			pattern := strings.Trim(strings.TrimSpace(line), "/")
			if pattern == "" || strings.HasPrefix(pattern, "#") {
				continue
			}
			if ok, _ := filepath.Match(pattern, name); ok {
				return true
			}
		}
		return false
	}
	written := regexp.MustCompile(`(?:\s-o|--output|--state-dir|\btee|>)\s*([A-Za-z0-9_.][A-Za-z0-9_.-]*)`).FindAllStringSubmatch(code.String(), -1)
	if len(written) < 4 {
		t.Fatalf("found only %v written by the README's commands", written)
	}
	for _, w := range written {
		if name := w[1]; !ignored(name) {
			t.Errorf("the README's commands write %s (%q), which .gitignore does not keep out of git", name, strings.TrimSpace(w[0]))
		}
	}
	if !regexp.MustCompile(`mountsim [^\n]*--state-dir`).MatchString(code.String()) {
		t.Error("the README's mountsim keeps no --state-dir: each run makes new device keys for the same uids")
	}
	if !strings.Contains(raw, "| `MOUNTD_OFFLINE_AFTER` |") {
		t.Error("the guide's configuration table lacks MOUNTD_OFFLINE_AFTER")
	}
}

// readmeDocs is the README followed by the guide (readmeFiles), as a new
// user reads them.
func readmeDocs(t *testing.T) string {
	t.Helper()
	var all strings.Builder
	for _, file := range readmeFiles {
		raw, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(raw)
		all.WriteString("\n")
	}
	return all.String()
}

// TestReadmeShort: the README is what a newcomer reads first, so it stays
// one short page, and its first section shows the two commands; the rest
// is in docs/.
func TestReadmeShort(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	if n := strings.Count(strings.TrimSuffix(readme, "\n"), "\n") + 1; n > 150 {
		t.Errorf("the README has %d lines; at most 150 (move the detail to docs/guide.md)", n)
	}
	sections := strings.Split(readme, "\n## ")
	if len(sections) < 2 {
		t.Fatal("the README has no section after its introduction")
	}
	for _, want := range []string{"\nmake run ", "\nmake test "} {
		if !strings.Contains(sections[1], want) {
			t.Errorf("the README's first section does not show %q:\n%s", strings.TrimSpace(want), sections[1])
		}
	}
}

// TestReadmeLinks: every link of the README and of docs/ to a file of the
// repository finds it, and a link to a heading of a Markdown file finds
// the heading (its GitHub anchor), so moving a section cannot leave a
// link behind.
func TestReadmeLinks(t *testing.T) {
	docs, _ := filepath.Glob("../docs/*.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, path := range append(docs, "../README.md") {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target, anchor, _ := strings.Cut(m[1], "#")
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file := path
			if target != "" {
				file = filepath.Join(filepath.Dir(path), target)
			}
			text, err := os.ReadFile(file)
			if err != nil {
				t.Errorf("%s links %s, which is not there", strings.TrimPrefix(path, "../"), m[1])
				continue
			}
			if anchor != "" && !slices.Contains(markdownAnchors(string(text)), anchor) {
				t.Errorf("%s links %s: %s has no heading with that anchor", strings.TrimPrefix(path, "../"), m[1], file)
			}
		}
	}
}

// markdownAnchors are the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation dropped, spaces as hyphens.
func markdownAnchors(text string) []string {
	var anchors []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(line, "#") {
			continue
		}
		anchor := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, strings.TrimSpace(title))
		anchors = append(anchors, anchor)
	}
	return anchors
}
