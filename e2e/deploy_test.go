package e2e

import (
	"os"
	"os/exec"
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
		// A section or a subsection of one.
		for _, mark := range []string{"## ", "### "} {
			if title, ok := strings.CutPrefix(line, mark); ok {
				sections[strings.TrimSpace(title)] = true
			}
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

// unitEnvironment is the environment systemd gives the service of a unit
// file as it reads it: Environment= lines, then EnvironmentFile= files
// (which override them, as systemd.exec says), then the variables that
// ExecStart sets through /usr/bin/env, which override both. instance
// replaces %i. envFiles maps an EnvironmentFile= path to its content.
func unitEnvironment(t *testing.T, unit, instance string, envFiles map[string]string) map[string]string {
	t.Helper()
	env := map[string]string{}
	var files []string
	var exec string
	for _, line := range strings.Split(unit, "\n") {
		line = strings.ReplaceAll(strings.TrimSpace(line), "%i", instance)
		key, value, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		switch key {
		case "Environment":
			k, v, _ := strings.Cut(value, "=")
			env[k] = v
		case "EnvironmentFile":
			files = append(files, strings.TrimPrefix(value, "-"))
		case "ExecStart":
			exec = value
		}
	}
	for _, f := range files {
		content, ok := envFiles[f]
		if !ok {
			t.Fatalf("the unit reads %s, which the test does not know", f)
		}
		for _, line := range strings.Split(content, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok && !strings.HasPrefix(k, "#") {
				env[k] = v
			}
		}
	}
	if rest, ok := strings.CutPrefix(exec, "/usr/bin/env "); ok {
		for _, word := range strings.Fields(rest) {
			k, v, ok := strings.Cut(word, "=")
			if !ok {
				break
			}
			env[k] = v
		}
	}
	return env
}

// TestSystemdInstancesListenApart: every instance of mountd@.service
// listens on its own port, although the shared env file (as shipped in
// mountd.env.example) sets MOUNTD_LISTEN; and the units pass
// systemd-analyze verify where it is installed.
func TestSystemdInstancesListenApart(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("..", "deploy", "systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	template, example := read("mountd@.service"), read("mountd.env.example")
	envFiles := map[string]string{"/etc/mountd/mountd.env": example}
	if got := unitEnvironment(t, read("mountd.service"), "", envFiles)["MOUNTD_LISTEN"]; got != "127.0.0.1:8081" {
		t.Fatalf("mountd.service listens on %q, want the env file's 127.0.0.1:8081", got)
	}
	seen := map[string]string{}
	for _, instance := range []string{"8081", "8082", "8083"} {
		env := unitEnvironment(t, template, instance, envFiles)
		listen := env["MOUNTD_LISTEN"]
		if listen != "127.0.0.1:"+instance {
			t.Errorf("mountd@%s listens on %q, want 127.0.0.1:%s", instance, listen, instance)
		}
		if other, dup := seen[listen]; dup {
			t.Errorf("mountd@%s and mountd@%s both listen on %s", instance, other, listen)
		}
		seen[listen] = instance
		if env["MOUNTD_DATABASE_URL"] == "" || env["MOUNTD_DATA_DIR"] == "" {
			t.Errorf("mountd@%s lacks the shared configuration: %v", instance, env)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the units' syntax is not verified")
		return
	}
	// verify wants the binaries the units name: point them at one that
	// exists; everything else is checked as shipped.
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for name, unit := range map[string]string{"mountd.service": read("mountd.service"), "mountd@8081.service": template} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/mountd", self)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", path).CombinedOutput()
		if err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", name, err, out)
		}
	}
}
