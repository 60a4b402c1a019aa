package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
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

// proc is a mountd process.
type proc struct {
	cmd  *exec.Cmd
	base string
	out  *syncBuffer
	env  []string
	bin  string
}

// startProc starts `mountd serve` on addr and waits for /healthz.
func startProc(t *testing.T, addr string, env []string) *proc {
	t.Helper()
	p := &proc{bin: mountdBinary(t), base: "http://" + addr, out: &syncBuffer{}, env: append(env, "MOUNTD_LISTEN="+addr)}
	p.cmd = exec.Command(p.bin, "serve")
	p.cmd.Env = append(os.Environ(), p.env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.kill() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if res, err := http.Get(p.base + "/healthz"); err == nil {
			res.Body.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("mountd did not start:\n%s", p.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func replicaEnv(t *testing.T, dbURL, redisURL, publicURL string, extra ...string) []string {
	return append([]string{"MOUNTD_DATABASE_URL=" + dbURL, "MOUNTD_REDIS_URL=" + redisURL, "MOUNTD_REDIS_PREFIX=faults:",
		"MOUNTD_MASTER_KEY=" + strings.Repeat("cd", 32), "MOUNTD_PUBLIC_URL=" + publicURL, "MOUNTD_PROJECT_ID=mountd",
		"MOUNTD_IDP_NAME=mountd", "MOUNTD_LOG_LEVEL=warn", "MOUNTD_DATA_DIR=" + t.TempDir()}, extra...)
}

func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
	}
}

// admin runs a mountd admin command with the deployment's settings.
func (p *proc) admin(t *testing.T, args ...string) string {
	t.Helper()
	return p.adminInput(t, "", args...)
}

// adminInput is admin with input on the command's standard input.
func (p *proc) adminInput(t *testing.T, input string, args ...string) string {
	t.Helper()
	cmd := exec.Command(p.bin, args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mountd %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// ownerClient creates an account and returns an API client with its
// owner credentials (tokens renewed as needed), and the credentials.
func (p *proc) ownerClient(t *testing.T, name string) (*client.Client, credentials) {
	t.Helper()
	var c credentials
	if err := json.Unmarshal([]byte(p.admin(t, "accounts", "create", "--name", name, "--json")), &c); err != nil {
		t.Fatal(err)
	}
	return p.clientFor(c), c
}

// clientFor is an API client of this process with c's owner credentials.
func (p *proc) clientFor(c credentials) *client.Client {
	return client.New(p.base, client.CredentialsSource(client.ClientCredentials(p.base, c.ClientID, c.ClientSecret,
		[]string{"openid", "sub", audItem}), nil))
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// battery reads the BATTERY_LEVEL values of mountctl's --json lines, in
// the order printed.
func battery(out string) []string {
	var vals []string
	for line := range strings.Lines(out) {
		var ev struct {
			States []struct{ Code, Value string } `json:"states"`
		}
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		for _, st := range ev.States {
			if st.Code == "BATTERY_LEVEL" {
				vals = append(vals, st.Value)
			}
		}
	}
	return vals
}

// mountsimSummary is the part of mountsim's JSON summary checked here.
type mountsimSummary struct {
	Mounts           int              `json:"mounts"`
	Associated       int              `json:"associated"`
	Reports          int64            `json:"reports"`
	Errors           int64            `json:"errors"`
	ErrorsByKind     map[string]int64 `json:"errorsByKind"`
	Legacy           int              `json:"legacy"`
	SignedReports    int64            `json:"signedReports"`
	Receipts         int64            `json:"receipts"`
	ReceiptsAccepted int64            `json:"receiptsAccepted"`
	ForgedReports    int64            `json:"forgedReports"`
	ForgedRefused    int64            `json:"forgedRefused"`
	ForgedAccepted   int64            `json:"forgedAccepted"`
}
