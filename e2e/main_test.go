package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/rest/openapitest"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
	"github.com/mountd/mountd/client"
)

const audItem = "urn:mountd:iam:org:project:id:mountd:aud"

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

// instance is a running mountd on 127.0.0.1:0.
type instance struct {
	t    testing.TB
	cfg  app.Config
	base string
	stop func()
}

// backends lists the configurations the end-to-end tests run on: the
// embedded default, and PostgreSQL with Redis.
func backends(t testing.TB) map[string]func(t testing.TB) app.Config {
	return map[string]func(t testing.TB) app.Config{
		"embedded": func(t testing.TB) app.Config {
			dir := t.TempDir()
			return testConfig(dir, "")
		},
		"postgres+redis": func(t testing.TB) app.Config {
			cfg := testConfig(t.TempDir(), testenv.PostgresURL(t))
			cfg.RedisURL, cfg.RedisPrefix = testenv.RedisURL(t)
			return cfg
		},
	}
}

func testConfig(dataDir, databaseURL string) app.Config {
	return app.Config{
		Listen: "127.0.0.1:0", DataDir: dataDir, DatabaseURL: databaseURL,
		ProjectID: "mountd", IDPName: "mountd",
		MasterKey:         strings.Repeat("ab", 32),
		AssociationWindow: 10 * time.Minute, TokenTTL: time.Hour, DownloadTTL: 15 * time.Minute,
		LogLevel: "warn",
	}
}

// start runs serve in-process and waits until it answers.
func start(t testing.TB, cfg app.Config) *instance {
	t.Helper()
	seedSQLite(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	go func() { done <- app.Serve(ctx, cfg, logger, ready) }()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("serve: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start in 30s")
	}
	inst := &instance{t: t, cfg: cfg, base: "http://" + addr}
	var once bool
	inst.stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve returned %v", err)
		}
	}
	t.Cleanup(inst.stop)
	return inst
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// runCLI runs a mountd subcommand in-process against the instance's database.
func (in *instance) runCLI(args ...string) string {
	in.t.Helper()
	out, errOut, err := in.tryCLI(args...)
	if err != nil {
		in.t.Fatalf("mountd %v: %v\n%s", args, err, errOut)
	}
	return out
}

// tryCLI runs an admin command against the instance's data dir and
// database and returns its output and error.
func (in *instance) tryCLI(args ...string) (stdout, stderr string, err error) {
	return in.tryCLIInput("", args...)
}

// tryCLIInput is tryCLI with stdin.
func (in *instance) tryCLIInput(stdin string, args ...string) (stdout, stderr string, err error) {
	var out, errOut bytes.Buffer
	full := append([]string{"mountd", "--data-dir", in.cfg.DataDir, "--master-key", in.cfg.MasterKey, "--log-level", "warn"}, args...)
	if in.cfg.DatabaseURL != "" {
		full = append([]string{"mountd", "--database-url", in.cfg.DatabaseURL}, full[1:]...)
	}
	err = app.NewCommandWithInput(strings.NewReader(stdin), &out, &errOut).Run(context.Background(), full)
	return out.String(), errOut.String(), err
}

type credentials struct {
	AccountID    string `json:"accountId"`
	ClientID     string `json:"clientId"`
	ClientSecret string `json:"clientSecret"`
}

func (in *instance) createAccount(name string) credentials {
	in.t.Helper()
	var c credentials
	if err := json.Unmarshal([]byte(in.runCLI("accounts", "create", "--name", name, "--json")), &c); err != nil {
		in.t.Fatal(err)
	}
	return c
}

// token asks the embedded identity provider for a token with scope items,
// through the client package as every program does.
func (in *instance) token(c credentials, scope ...string) string {
	in.t.Helper()
	tok, err := client.ClientCredentials(in.base, c.ClientID, c.ClientSecret, scope).Token(context.Background())
	if err != nil {
		in.t.Fatalf("token: %v", err)
	}
	return tok.AccessToken
}

func (in *instance) ownerToken(c credentials) string {
	return in.token(c, "openid", "sub", audItem)
}

func (in *instance) tokenRequest(form url.Values, header http.Header) (*http.Response, []byte) {
	in.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, in.base+"/oauth/v2/token", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header[k] = v
	}
	return in.do(req)
}

// do sends req and checks the answer against the OpenAPI document, so the
// document cannot drift from what the server does.
func (in *instance) do(req *http.Request) (*http.Response, []byte) {
	in.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	openapitest.New(in.t).Check(in.t, req, res, body)
	return res, body
}

// call sends an API request with a token; body may be nil, a string (sent
// as is) or a value (sent as JSON).
func (in *instance) call(method, path, token string, body any) (*http.Response, []byte) {
	in.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, in.base+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Access-Key", token)
	}
	return in.do(req)
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// wantProblem checks a problem+json answer's status and code.
func wantProblem(t testing.TB, res *http.Response, body []byte, status int, code string) problem {
	t.Helper()
	var p problem
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s; want %d problem+json %s", res.StatusCode, res.Header.Get("Content-Type"), body, status, code)
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Code != code || p.Status != status || p.Type != "about:blank" {
		t.Fatalf("problem %s; want code %s", body, code)
	}
	return p
}

func decode[T any](t testing.TB, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}
