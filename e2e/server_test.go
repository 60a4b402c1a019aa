package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
	"github.com/mountd/mountd/client"
)

const audItem = "urn:mountd:iam:org:project:id:mountd:aud"

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

// seedSQLite copies the migrated template (testenv.UseTemplates) to cfg's
// database when cfg is the embedded default and its file does not exist
// yet: SQLite under -race spends most of a test server's start in the
// migrations otherwise. The server still migrates at start, finding
// nothing to do; a test that prepares its file before start keeps it.
func seedSQLite(t testing.TB, cfg app.Config) {
	t.Helper()
	if cfg.DatabaseURL != "" || cfg.DataDir == "" {
		return
	}
	path := filepath.Join(cfg.DataDir, "mountd.db")
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err := testenv.CopySQLiteTemplate(path); err != nil {
		t.Fatalf("template database: %v", err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
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

// runCLIInput runs a mountd subcommand with stdin and fails the test on error.
func (in *instance) runCLIInput(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := in.tryCLIInput(stdin, args...)
	if err != nil {
		t.Fatalf("mountd %v: %v\n%s", args, err, errOut)
	}
	return out
}

// publish runs `mountd firmware publish` with a random binary of size bytes.
func (in *instance) publish(t *testing.T, model, revision string, size int, extra ...string) (versionView, []byte) {
	t.Helper()
	data := make([]byte, size)
	_, _ = rand.Read(data)
	path := filepath.Join(t.TempDir(), "fw.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	out := in.runCLI(append(in.publishArgs("--model", model, "--revision", revision, "--file", path, "--json"), extra...)...)
	return decode[versionView](t, []byte(out)), data
}

// publishArgs is `firmware publish` with args, and --local-blobs on
// PostgreSQL without blob storage: a test's one replica serves its files.
func (in *instance) publishArgs(args ...string) []string {
	if in.cfg.BlobURL == "" && in.cfg.OnPostgres() {
		args = append([]string{"--local-blobs"}, args...)
	}
	return append([]string{"firmware", "publish"}, args...)
}

const personPassword = "correct horse battery"

var loginField = regexp.MustCompile(`name="(authRequest|csrf)" value="([^"]*)"`)

// personTokens is the console's token response.
type personTokens struct {
	AccessToken  string `json:"access_token"`
	RefreshToken string `json:"refresh_token"`
}

// signInPerson signs a user in through the authorization code flow with
// PKCE as the console does: authorize, the login form, the code exchange.
func (in *instance) signInPerson(t *testing.T, username, password string) (personTokens, error) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	var landed *url.URL
	browser := &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/console/") {
			landed = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	verifier := "v-" + strings.Repeat("x", 50)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"client_id": {"mountd-console"}, "redirect_uri": {in.base + "/console/"}, "response_type": {"code"},
		"scope": {"openid offline_access"}, "state": {"s1"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}}
	res, err := browser.Get(in.base + "/oauth/v2/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	form := url.Values{"username": {username}, "password": {password}}
	for _, m := range loginField.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], m[2])
	}
	if form.Get("authRequest") == "" {
		t.Fatalf("no login form at %s (%d): %.300s", res.Request.URL, res.StatusCode, page)
	}
	res, err = browser.PostForm(in.base+"/login", form)
	if err != nil {
		t.Fatal(err)
	}
	page, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if landed == nil {
		return personTokens{}, &signInError{status: res.StatusCode, page: string(page)}
	}
	res, err = http.PostForm(in.base+"/oauth/v2/token", url.Values{"grant_type": {"authorization_code"}, "code": {landed.Query().Get("code")},
		"redirect_uri": {in.base + "/console/"}, "client_id": {"mountd-console"}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("code exchange: %d %s", res.StatusCode, raw)
	}
	return decode[personTokens](t, raw), nil
}

type signInError struct {
	status int
	page   string
}

func (e *signInError) Error() string { return "sign-in refused: " + http.StatusText(e.status) }

func (in *instance) refreshPerson(t *testing.T, refreshToken string) (int, personTokens) {
	t.Helper()
	res, err := http.PostForm(in.base+"/oauth/v2/token", url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken},
		"client_id": {"mountd-console"}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out personTokens
	_ = json.Unmarshal(raw, &out)
	return res.StatusCode, out
}
