package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeAddress is where the README's server listens; the test's listens
// on a free port instead, so every mention is replaced by it.
const readmeAddress = "127.0.0.1:8080"

// readmeLines says how TestReadmeBlocks runs the lines of readmeFiles
// that cannot run as written in a test; every other line of every ```sh
// block runs as written. A line is matched by its start (leading blanks
// aside). A line that looks as if it cannot run (readmeNeedsEntry) and has
// no entry fails the test, and so does an entry that matches no line: documents
// and table cannot drift apart.
var readmeLines = []struct{ start, run, why string }{
	{"make run", `./bin/mountd serve >mountd.log 2>&1 & readme_wait_http "http://$MOUNTD_LISTEN/healthz"`,
		"the server runs in the background of the session, built already"},
	{"make test", "", "the tests run this test"},
	{"make build", "", "the binaries are built into ./bin before the session"},
	{"./bin/mountsim --mounts 3 --state-dir sim-state &", `./bin/mountsim --mounts 3 --state-dir sim-state >mountsim.log 2>&1 & readme_wait_tcp "$MOUNTSIM_AIR"`,
		"its radio listens before the next line scans"},
	{"./bin/mountctl watch SIM-0001 &", `./bin/mountctl watch SIM-0001 >watch.out 2>&1 & readme_wait_file 'watching mount' watch.out`,
		"subscribed before the release it is to show; its output is checked at the end"},
	{"./bin/mountctl events --follow", "timeout --preserve-status -s INT 5 ./bin/mountctl events --follow",
		"follows until interrupted: interrupted after 5 s"},
	{"./bin/mountctl webhooks create https://ops.example.com/mountd", `./bin/mountctl webhooks create "$README_RECEIVER" --types STATES_REPORTED,DELETED`,
		"a local receiver instead of ops.example.com"},
	{"./bin/mountctl webhooks deliveries wh_...", `./bin/mountctl webhooks deliveries "$(readme_webhook_id)"`,
		"the id of the webhook created above"},
	{"./bin/mountctl webhooks test wh_...", `./bin/mountctl webhooks test "$(readme_webhook_id)"`,
		"the id of the webhook created above"},
	{"./bin/mountctl webhooks disable wh_...", `./bin/mountctl webhooks disable "$(readme_webhook_id)"`,
		"the id of the webhook created above"},
}

// readmeNeedsEntry matches lines that cannot run as written in a test: make
// targets, background jobs, commands that run until interrupted, example
// hosts and placeholders.
var readmeNeedsEntry = regexp.MustCompile(`^make\b|&\s*(#.*)?$|--follow|\bwatch\b|example\.(com|org|net)|\.\.\.|\bsudo\b|<[a-z]+>`)

// readmeSession runs before the first block: the shell options each block
// runs under, and the helpers the table's lines use.
const readmeSession = `set -euo pipefail
readme_wait() { # readme_wait WHAT COMMAND...: retry COMMAND for 30 s
  local what=$1; shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "readme test: $what did not come" >&2; return 1
}
readme_wait_http() { readme_wait "$1" curl -sf "$1"; }
readme_wait_tcp() { readme_wait "$1" bash -c "exec 3<>/dev/tcp/${1%:*}/${1##*:}"; }
readme_wait_file() { readme_wait "$1 in $2" grep -q "$1" "$2"; }
readme_webhook_id() { ./bin/mountctl --json webhooks list | grep -m1 -o '"id":"[^"]*"' | cut -d'"' -f4; }
`

// readmeChecks are what a block's output must show, the block named by
// the start of one of its lines.
var readmeChecks = []struct {
	block string
	want  []string
}{
	{"(umask 077 && ./bin/mountd accounts create", []string{`"name":"Demo Fleet"`, `"role":"owner"`}},
	{"ACCOUNT_ID=$(sed", []string{"ann"}},
	{"API=http://" + readmeAddress, []string{`"associationState":"ASSOCIATED"`, `"batteryLevel":87`}},
	{"head -c 1048576 /dev/urandom > fw.bin", []string{`"UPDATE_AVAILABLE"`, "verified", "HM-1 1.4.0"}},
	{"curl -s http://" + readmeAddress + "/graphql", []string{`"totalItems":1`}},
	{"./bin/mountctl scan", []string{"SIM-0001", "SIM-0003", "locked=false helmet=false"}},
	// follow printed the association; the filtered read from the start the
	// release's report again, as JSON.
	{"./bin/mountctl events --follow", []string{"ASSOCIATION_CONFIRMED SIM-0001", `"type":"STATES_REPORTED"`, `"uid":"SIM-0001"`}},
	{"./bin/mountctl webhooks create", []string{"whsec_", "disabled"}},
	{"./bin/mountctl alarm-rules create", []string{"BATTERY_LEVEL<20 for 10m0s", "presence=OFFLINE", "SIM-0001", "2 rules", "alarms"}},
}

// readmeFiles are what a new user follows, in this order: the README's
// first calls make the account and token the guide's commands use.
var readmeFiles = []string{"README.md", "docs/guide.md"}

type readmeBlock struct {
	file  string // of readmeFiles
	line  int    // of the opening fence
	lines []string
}

// at names a line of the block's file in messages.
func (b readmeBlock) at(line int) string { return fmt.Sprintf("%s line %d", b.file, line) }

// readmeShBlocks returns the ```sh blocks of the README and the guide, in
// order.
func readmeShBlocks(t *testing.T) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, file := range readmeFiles {
		raw, err := os.ReadFile(filepath.Join("..", file))
		if err != nil {
			t.Fatal(err)
		}
		first := len(blocks)
		var cur *readmeBlock
		fenced := false
		for i, line := range strings.Split(string(raw), "\n") {
			switch {
			case !fenced && strings.HasPrefix(line, "```"):
				fenced = true
				if strings.TrimSpace(strings.TrimPrefix(line, "```")) == "sh" {
					blocks = append(blocks, readmeBlock{file: file, line: i + 1})
					cur = &blocks[len(blocks)-1]
				}
			case fenced && strings.HasPrefix(line, "```"):
				fenced, cur = false, nil
			case cur != nil:
				cur.lines = append(cur.lines, line)
			}
		}
		if len(blocks) == first {
			t.Fatalf("%s has no ```sh block", file)
		}
	}
	return blocks
}

// readmeScript is a block as the test runs it: each line as written or
// as the table says, and the README's address replaced by addr.
func readmeScript(t *testing.T, b readmeBlock, addr string, used []bool) string {
	t.Helper()
	var out strings.Builder
	for n, line := range b.lines {
		trimmed := strings.TrimSpace(line)
		entry := -1
		for i, e := range readmeLines {
			if strings.HasPrefix(trimmed, e.start) {
				entry = i
				break
			}
		}
		switch {
		case entry >= 0:
			used[entry] = true
			line = readmeLines[entry].run
		case readmeNeedsEntry.MatchString(trimmed):
			t.Errorf("%s cannot run as written in a test: give it an entry in readmeLines\n%s", b.at(b.line+1+n), line)
		}
		out.WriteString(strings.ReplaceAll(line, readmeAddress, addr) + "\n")
	}
	return out.String()
}

// TestReadmeBlocks runs every ```sh block of the README, then of the guide
// (readmeFiles), in order, in one bash session (variables carry over from
// block to block) in an empty directory with the programs built into ./bin,
// as a new user would after cloning: each block must exit 0 under `set -euo
// pipefail`, and show what readmeChecks says. Lines that cannot run in a
// test run as readmeLines says.
func TestReadmeBlocks(t *testing.T) {
	blocks := readmeShBlocks(t)
	addr, air := freeAddr(t), freeAddr(t)
	used := make([]bool, len(readmeLines))
	scripts := make([]string, len(blocks))
	for i, b := range blocks {
		scripts[i] = filepath.Join(t.TempDir(), fmt.Sprintf("block-%d.sh", i))
		if err := os.WriteFile(scripts[i], []byte(readmeScript(t, b, addr, used)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, e := range readmeLines {
		if !used[i] {
			t.Errorf("readmeLines has an entry for %q, which no line of readmeFiles starts with", e.start)
		}
	}
	for _, c := range readmeChecks {
		if blockOf(blocks, c.block) < 0 {
			t.Errorf("readmeChecks names a block by %q, which no block of readmeFiles has", c.block)
		}
	}
	if t.Failed() {
		return
	}

	// ./bin as make build leaves it.
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, path := range map[string]string{"mountd": mountdBinary(t), "mountctl": mountctlBinary(t), "mountsim": mountsimBinary(t)} {
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(receiver.Close) // after the session's end (cleanups run last first)

	// The test's addresses, in the variables the programs read.
	home := filepath.Join(work, "home")
	sh := exec.Command("bash")
	sh.Dir = work
	sh.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8",
		"MOUNTD_LISTEN=" + addr, "MOUNTD_WEBHOOK_ALLOW_PRIVATE=true", // the local receiver
		"MOUNTCTL_API=http://" + addr, "MOUNTCTL_BLE=sim://" + air, "MOUNTSIM_API=http://" + addr, "MOUNTSIM_AIR=" + air,
		"README_RECEIVER=" + receiver.URL + "/mountd"}
	// Its own process group: the background jobs (the server, mountsim,
	// watch) end with it.
	sh.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	sh.Stdout, sh.Stderr = w, w
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = syscall.Kill(-sh.Process.Pid, syscall.SIGKILL)
		_ = sh.Wait()
		r.Close()
	})
	lines := make(chan string, 1024)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	logs := func() string {
		var b strings.Builder
		for _, f := range []string{"mountd.log", "mountsim.log", "watch.out"} {
			if raw, err := os.ReadFile(filepath.Join(work, f)); err == nil {
				fmt.Fprintf(&b, "--- %s:\n%s", f, lastLines(string(raw), 40))
			}
		}
		return b.String()
	}
	if _, err := io.WriteString(stdin, readmeSession); err != nil {
		t.Fatal(err)
	}

	outputs := make([]string, len(blocks))
	for i, b := range blocks {
		done := fmt.Sprintf("::readme block %d done", i)
		// stdin from /dev/null: a command of the block must not read the
		// session's next commands.
		if _, err := fmt.Fprintf(stdin, "source %s </dev/null\necho '%s'\n", scripts[i], done); err != nil {
			t.Fatalf("the session ended before the block at %s", b.at(b.line))
		}
		var out strings.Builder
		timeout := time.After(2 * time.Minute)
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					_ = sh.Wait()
					t.Fatalf("the block at %s failed (%v):\n%s\noutput:\n%s\n%s", b.at(b.line), sh.ProcessState, strings.Join(b.lines, "\n"), out.String(), logs())
				}
				// A block's last output may lack its newline.
				if before, ok := strings.CutSuffix(line, done); ok {
					out.WriteString(before)
					break read
				}
				out.WriteString(line + "\n")
			case <-timeout:
				t.Fatalf("the block at %s did not end in 2 minutes:\n%s\noutput:\n%s\n%s", b.at(b.line), strings.Join(b.lines, "\n"), out.String(), logs())
			}
		}
		outputs[i] = out.String()
		t.Logf("%s:\n%s", b.at(b.line), outputs[i])
	}

	for _, c := range readmeChecks {
		i := blockOf(blocks, c.block)
		for _, want := range c.want {
			if !strings.Contains(outputs[i], want) {
				t.Errorf("the block at %s does not show %q:\n%s", blocks[i].at(blocks[i].line), want, outputs[i])
			}
		}
	}
	// What the blocks leave behind: account.json for its owner only, the
	// downloaded firmware the published one, watch's report of the release.
	if fi, err := os.Stat(filepath.Join(work, "account.json")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("account.json: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	published, err1 := os.ReadFile(filepath.Join(work, "fw.bin"))
	downloaded, err2 := os.ReadFile(filepath.Join(work, "fw-1.4.0.bin"))
	if err1 != nil || err2 != nil || len(published) != 1<<20 || !bytes.Equal(published, downloaded) {
		t.Errorf("fw-1.4.0.bin is not the published fw.bin (%v, %v)", err1, err2)
	}
	if raw, _ := os.ReadFile(filepath.Join(work, "watch.out")); !strings.Contains(string(raw), "MOUNT_LOCKED=0") {
		t.Errorf("watch did not print the release:\n%s", raw)
	}
}

// blockOf is the index of the block with a line starting with start, or -1.
func blockOf(blocks []readmeBlock, start string) int {
	for i, b := range blocks {
		for _, line := range b.lines {
			if strings.HasPrefix(strings.TrimSpace(line), start) {
				return i
			}
		}
	}
	return -1
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
