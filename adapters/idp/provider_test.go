package idp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gooidc "github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/mountd/mountd/adapters/idp"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

const (
	projectID = "proj123"
	keyID     = "test-key"
)

var rules = core.ScopeRules{IDPName: "mountd", ProjectID: projectID}

// fullScope has every mandatory item plus a restricted role on one mount.
var fullScope = "openid sub profile " + rules.AudienceItem() + " role:restricted mount:M1"

// Keys are slow to generate; the tests share them.
var (
	testKey    = sync.OnceValue(func() *rsa.PrivateKey { return newKey(2048) })
	foreignKey = sync.OnceValue(func() *rsa.PrivateKey { return newKey(2048) })
)

func newKey(bits int) *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		panic(err)
	}
	return k
}

// fakeStore is an in-memory core.AccountStore.
type fakeStore struct {
	mu       sync.Mutex
	accounts map[string]core.Account
	clients  map[string]core.APIClient
	down     bool // the database cannot be reached
}

func newFakeStore() *fakeStore {
	return &fakeStore{accounts: map[string]core.Account{}, clients: map[string]core.APIClient{}}
}

func (s *fakeStore) CreateAccount(_ context.Context, a core.Account, c core.APIClient) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accounts[a.ID] = a
	s.clients[c.ClientID] = c
	return nil
}

func (s *fakeStore) Accounts(context.Context) ([]core.AccountSummary, error) { return nil, nil }

func (s *fakeStore) ReplaceClientSecrets(context.Context, string, string) ([]string, error) {
	return nil, core.Errorf(core.CodeNotFound, "no clients")
}

// RehashClientSecret keeps every hash: the provider's tests store secrets
// as argon2id through an unkeyed service, which never rehashes.
func (s *fakeStore) RehashClientSecret(context.Context, string, string, string) (bool, error) {
	return false, nil
}

func (s *fakeStore) RenameClients(context.Context, string, string) ([]string, error) {
	return nil, core.Errorf(core.CodeNotFound, "no clients")
}

func (s *fakeStore) EnsureAccount(ctx context.Context, a core.Account) error {
	return s.CreateAccount(ctx, a, core.APIClient{})
}

func (s *fakeStore) Account(_ context.Context, id string) (core.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.accounts[id]
	if !ok {
		return core.Account{}, core.Errorf(core.CodeNotFound, "no account %q", id)
	}
	return a, nil
}

func (s *fakeStore) APIClient(_ context.Context, id string) (core.APIClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return core.APIClient{}, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	c, ok := s.clients[id]
	if !ok {
		return core.APIClient{}, core.Errorf(core.CodeNotFound, "no client %q", id)
	}
	return c, nil
}

// addClient gives an existing account another client credential.
func (s *fakeStore) addClient(t *testing.T, accountID, clientID, secret string) cred {
	t.Helper()
	hash, err := core.HashSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clients[clientID] = core.APIClient{ClientID: clientID, AccountID: accountID, SecretHash: hash, CreatedAt: time.Now()}
	return cred{id: clientID, secret: secret, account: accountID}
}

type cred struct{ id, secret, account string }

type env struct {
	srv      *httptest.Server
	provider *idp.Provider
	// main and second are clients of account 1; odd (also account 1) has a
	// client id and secret that need URL-encoding in Basic credentials;
	// other is the client of account 2.
	main, second, odd, other cred
}

func newEnv(t *testing.T, ttl time.Duration) *env {
	t.Helper()
	return newEnvWith(t, ttl, newFakeStore(), nil)
}

// newEnvWith is newEnv over store, throttling failures through failures.
func newEnvWith(t *testing.T, ttl time.Duration, store *fakeStore, failures core.FailureLimiter) *env {
	t.Helper()
	ctx := context.Background()
	accounts := core.NewAccountService(store, failures)
	a1, err := accounts.Create(ctx, "first")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := accounts.Create(ctx, "second")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		main:   cred{a1.ClientID, a1.ClientSecret, a1.AccountID},
		other:  cred{a2.ClientID, a2.ClientSecret, a2.AccountID},
		second: store.addClient(t, a1.AccountID, "cli_second", "second-secret"),
		odd:    store.addClient(t, a1.AccountID, "cli:odd id+é", "s3cr%t:+/ &=é"),
	}
	mux := http.NewServeMux()
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.srv.Close)
	e.provider, err = idp.New(idp.Config{Issuer: e.srv.URL, TokenTTL: ttl, Scopes: rules},
		accounts, idp.SigningKey{ID: keyID, Key: testKey()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range e.provider.Paths() {
		mux.Handle(p, e.provider.Handler())
	}
	return e
}

// auth says how a request authenticates its client.
type auth int

const (
	authNone  auth = iota
	authPost       // client_id / client_secret form fields
	authBasic      // HTTP Basic, URL-encoded per RFC 6749 §2.3.1
)

func (e *env) post(t *testing.T, path string, form url.Values, how auth, c cred) (*http.Response, map[string]any) {
	t.Helper()
	if form == nil {
		form = url.Values{}
	}
	if how == authPost {
		form.Set("client_id", c.id)
		form.Set("client_secret", c.secret)
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if how == authBasic {
		req.SetBasicAuth(url.QueryEscape(c.id), url.QueryEscape(c.secret))
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil && resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("%s %s: body is not a JSON object: %q", req.Method, req.URL.Path, raw)
	}
	return resp, body
}

// token obtains an access token, failing the test otherwise.
func (e *env) token(t *testing.T, c cred, scope string) string {
	t.Helper()
	resp, body := e.post(t, "/oauth/v2/token", url.Values{"grant_type": {"client_credentials"}, "scope": {scope}}, authPost, c)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token request: status %d, body %v", resp.StatusCode, body)
	}
	return body["access_token"].(string)
}

// decodeJWT reads a JWT's header and claims without verifying it; the
// go-oidc test verifies.
func decodeJWT(t *testing.T, token string) (header, claims map[string]any) {
	t.Helper()
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		t.Fatalf("access token is not a compact JWS: %d parts", len(parts))
	}
	for i, dst := range []*map[string]any{&header, &claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			t.Fatal(err)
		}
	}
	return header, claims
}

// forge signs claims with key, standing in for tokens the provider would
// never issue (expired, foreign, wrong issuer).
func forge(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: key, KeyID: keyID}},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (e *env) claimsFor(c cred, iss string, exp time.Time) map[string]any {
	return map[string]any{
		"iss": iss, "sub": c.id, "client_id": c.id, "aud": []string{projectID},
		"iat": exp.Add(-time.Hour).Unix(), "exp": exp.Unix(), "jti": "forged",
		"scope": fullScope, "account_id": c.account,
	}
}

// unsignedJWT builds header.payload.signature from raw JSON with a junk
// signature.
func unsignedJWT(header, payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(header)) + "." + enc([]byte(payload)) + "." + enc([]byte("junk"))
}

func TestDiscovery(t *testing.T) {
	e := newEnv(t, 0)
	resp, d := do(t, mustRequest(t, http.MethodGet, e.srv.URL+"/.well-known/openid-configuration", nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	iss := e.srv.URL
	for field, want := range map[string]string{
		"issuer":                 iss,
		"token_endpoint":         iss + "/oauth/v2/token",
		"jwks_uri":               iss + "/oauth/v2/keys",
		"introspection_endpoint": iss + "/oauth/v2/introspect",
		"userinfo_endpoint":      iss + "/oidc/v1/userinfo",
	} {
		if d[field] != want {
			t.Errorf("%s = %v, want %q", field, d[field], want)
		}
	}
	for field, want := range map[string][]string{
		"grant_types_supported":                         {"client_credentials"},
		"token_endpoint_auth_methods_supported":         {"client_secret_basic", "client_secret_post"},
		"introspection_endpoint_auth_methods_supported": {"client_secret_basic", "client_secret_post"},
		"id_token_signing_alg_values_supported":         {"RS256"},
	} {
		got := stringList(d[field])
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("%s = %v, want it to contain %q", field, got, w)
			}
		}
	}
	// Only what is served is advertised.
	if got := stringList(d["grant_types_supported"]); len(got) != 1 {
		t.Errorf("grant_types_supported = %v, want only client_credentials", got)
	}
	for _, field := range []string{"revocation_endpoint", "end_session_endpoint", "device_authorization_endpoint"} {
		if _, ok := d[field]; ok {
			t.Errorf("%s advertised but not served", field)
		}
	}
}

func TestPathsAndMethods(t *testing.T) {
	e := newEnv(t, 0)
	want := []string{"/.well-known/openid-configuration", "/oauth/v2/token", "/oauth/v2/keys", "/oauth/v2/introspect", "/oidc/v1/userinfo"}
	if got := e.provider.Paths(); !slices.Equal(got, want) {
		t.Errorf("Paths() = %v, want %v", got, want)
	}
	tests := []struct {
		method, path string
		want         int
	}{
		{http.MethodGet, "/oauth/v2/token", http.StatusMethodNotAllowed},
		{http.MethodPost, "/.well-known/openid-configuration", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/oauth/v2/keys", http.StatusMethodNotAllowed},
		{http.MethodGet, "/oauth/v2/introspect", http.StatusMethodNotAllowed},
		{http.MethodGet, "/authorize", http.StatusNotFound}, // zitadel's other routes are not served
		{http.MethodGet, "/healthz", http.StatusNotFound},
	}
	for _, tt := range tests {
		rec := httptest.NewRecorder()
		e.provider.Handler().ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.want {
			t.Errorf("%s %s: status %d, want %d", tt.method, tt.path, rec.Code, tt.want)
		}
	}
}

func TestTokenIssued(t *testing.T) {
	e := newEnv(t, 0)
	short := newEnv(t, 2*time.Minute)
	tests := []struct {
		name      string
		env       *env
		how       auth
		c         func(*env) cred
		scope     string
		wantScope string
		wantAud   string // an audience the token must name
		wantTTL   int64
	}{
		{"post auth", e, authPost, mainCred, fullScope, fullScope, projectID, 3600},
		{"basic auth", e, authBasic, mainCred, fullScope, fullScope, projectID, 3600},
		{"basic auth, id and secret need URL-encoding", e, authBasic, oddCred, fullScope, fullScope, projectID, 3600},
		{"post auth, id and secret need form-encoding", e, authPost, oddCred, fullScope, fullScope, projectID, 3600},
		{"second client of the account", e, authBasic, secondCred, fullScope, fullScope, projectID, 3600},
		{"owner role, duplicates and extra spaces", e, authPost, mainCred,
			"openid  sub openid " + rules.AudienceItem() + " role:owner", "openid sub " + rules.AudienceItem() + " role:owner", projectID, 3600},
		// Missing mandatory items: issued all the same; the API answers 403.
		{"without mandatory items", e, authPost, mainCred, "role:restricted mount:M1", "role:restricted mount:M1", "", 3600},
		{"without audience item", e, authPost, mainCred, "openid sub", "openid sub", "", 3600},
		{"without any scope", e, authPost, mainCred, "", "", "", 3600},
		{"configured lifetime", short, authPost, mainCred, fullScope, fullScope, projectID, 120},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.c(tt.env)
			resp, body := tt.env.post(t, "/oauth/v2/token",
				url.Values{"grant_type": {"client_credentials"}, "scope": {tt.scope}}, tt.how, c)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, body %v", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", cc)
			}
			if body["token_type"] != "Bearer" {
				t.Errorf("token_type = %v", body["token_type"])
			}
			if body["expires_in"] != float64(tt.wantTTL) {
				t.Errorf("expires_in = %v, want %d", body["expires_in"], tt.wantTTL)
			}
			if got, _ := body["scope"].(string); got != tt.wantScope {
				t.Errorf("scope = %q, want %q", got, tt.wantScope)
			}
			if _, ok := body["refresh_token"]; ok {
				t.Error("refresh_token issued")
			}
			if _, ok := body["id_token"]; ok {
				t.Error("id_token issued")
			}

			header, claims := decodeJWT(t, body["access_token"].(string))
			if header["alg"] != "RS256" || header["kid"] != keyID {
				t.Errorf("JWT header %v, want RS256 with kid %q", header, keyID)
			}
			want := map[string]any{
				"iss": tt.env.srv.URL, "sub": c.id, "client_id": c.id,
				"scope": tt.wantScope, "account_id": c.account,
			}
			for k, v := range want {
				if claims[k] != v {
					t.Errorf("claim %s = %v, want %v", k, claims[k], v)
				}
			}
			aud := stringList(claims["aud"])
			if tt.wantAud != "" && !slices.Contains(aud, tt.wantAud) {
				t.Errorf("aud = %v, want it to contain %q", aud, tt.wantAud)
			}
			if tt.wantAud == "" && (slices.Contains(aud, projectID) || len(aud) == 0) {
				t.Errorf("aud = %v, want a harmless audience without the project", aud)
			}
			exp, iat := claims["exp"].(float64), claims["iat"].(float64)
			if int64(exp-iat) != tt.wantTTL {
				t.Errorf("exp - iat = %v, want %d", exp-iat, tt.wantTTL)
			}
			if now := float64(time.Now().Unix()); iat < now-60 || iat > now+1 {
				t.Errorf("iat %v is not now (%v)", iat, now)
			}
			if jti, _ := claims["jti"].(string); jti == "" {
				t.Error("no jti")
			}
		})
	}

	t.Run("each token has its own jti", func(t *testing.T) {
		_, c1 := decodeJWT(t, e.token(t, e.main, fullScope))
		_, c2 := decodeJWT(t, e.token(t, e.main, fullScope))
		if c1["jti"] == c2["jti"] {
			t.Errorf("two tokens share jti %v", c1["jti"])
		}
	})
}

func mainCred(e *env) cred   { return e.main }
func secondCred(e *env) cred { return e.second }
func oddCred(e *env) cred    { return e.odd }

func TestTokenErrors(t *testing.T) {
	e := newEnv(t, 0)
	cc := url.Values{"grant_type": {"client_credentials"}, "scope": {fullScope}}
	with := func(v url.Values, k, val string) url.Values {
		out := url.Values{}
		for key, vals := range v {
			out[key] = slices.Clone(vals)
		}
		if val == "" {
			out.Del(k)
		} else {
			out.Set(k, val)
		}
		return out
	}
	wrong := cred{id: e.main.id, secret: "not-the-secret"}
	unknown := cred{id: "cli_unknown", secret: e.main.secret}

	tests := []struct {
		name string
		// Either form (with auth) or a raw body with its content type.
		form        url.Values
		how         auth
		c           cred
		rawBody     string
		contentType string
		basicRaw    [2]string // Basic credentials sent as is, when set
		query       string    // URL query, when set
		wantStatus  int
		wantError   string
		wantBasic   bool // WWW-Authenticate: Basic expected
	}{
		{name: "wrong secret, post", form: cc, how: authPost, c: wrong, wantStatus: 401, wantError: "invalid_client"},
		{name: "wrong secret, basic", form: cc, how: authBasic, c: wrong, wantStatus: 401, wantError: "invalid_client", wantBasic: true},
		{name: "unknown client", form: cc, how: authPost, c: unknown, wantStatus: 401, wantError: "invalid_client"},
		{name: "unknown client, basic", form: cc, how: authBasic, c: unknown, wantStatus: 401, wantError: "invalid_client", wantBasic: true},
		{name: "no client credentials", form: cc, how: authNone, wantStatus: 401, wantError: "invalid_client"},
		{name: "secret of another client", form: cc, how: authPost, c: cred{id: e.main.id, secret: e.other.secret}, wantStatus: 401, wantError: "invalid_client"},
		{name: "Basic not URL-decodable", form: cc, basicRaw: [2]string{e.main.id, "%zz"}, wantStatus: 401, wantError: "invalid_client", wantBasic: true},
		{name: "Basic id:secret not URL-encoded", form: cc, basicRaw: [2]string{e.odd.id, e.odd.secret}, wantStatus: 401, wantError: "invalid_client", wantBasic: true},
		{name: "grant_type password", form: with(cc, "grant_type", "password"), how: authPost, c: e.main, wantStatus: 400, wantError: "unsupported_grant_type"},
		{name: "grant_type authorization_code", form: with(cc, "grant_type", "authorization_code"), how: authPost, c: e.main, wantStatus: 400, wantError: "unsupported_grant_type"},
		{name: "grant_type refresh_token", form: with(cc, "grant_type", "refresh_token"), how: authPost, c: e.main, wantStatus: 400, wantError: "unsupported_grant_type"},
		{name: "grant_type jwt-bearer", form: with(cc, "grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"), how: authPost, c: e.main, wantStatus: 400, wantError: "unsupported_grant_type"},
		// RFC 6749 §5.2: a missing required parameter is invalid_request.
		{name: "grant_type missing", form: with(cc, "grant_type", ""), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_request"},
		{name: "unknown scope item", form: with(cc, "scope", "openid sub admin"), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_scope"},
		{name: "malformed role", form: with(cc, "scope", fullScope+" role:admin"), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_scope"},
		{name: "conflicting roles", form: with(cc, "scope", "role:owner role:restricted"), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_scope"},
		{name: "malformed mount item", form: with(cc, "scope", "role:restricted mount:a/b"), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_scope"},
		{name: "audience of another project", form: with(cc, "scope", "openid sub urn:mountd:iam:org:project:id:other:aud"), how: authPost, c: e.main, wantStatus: 400, wantError: "invalid_scope"},
		{name: "bad credentials win over bad scope", form: with(cc, "scope", "admin"), how: authPost, c: wrong, wantStatus: 401, wantError: "invalid_client"},
		{name: "malformed form body", rawBody: "grant_type=client_credentials&scope=%zz", contentType: "application/x-www-form-urlencoded", wantStatus: 400, wantError: "invalid_request"},
		{name: "JSON body", rawBody: `{"grant_type":"client_credentials"}`, contentType: "application/json", wantStatus: 400, wantError: "invalid_request"},
		// RFC 6749 §2.3.1: credentials never in the URL.
		{name: "client_secret in the query", form: cc, how: authPost, c: e.main, query: "client_secret=" + url.QueryEscape(e.main.secret), wantStatus: 400, wantError: "invalid_request"},
		{name: "client_secret in the query only", form: with(cc, "client_id", e.main.id), query: "client_secret=" + url.QueryEscape(e.main.secret), wantStatus: 400, wantError: "invalid_request"},
		{name: "oversized body", rawBody: "grant_type=client_credentials&scope=" + strings.Repeat("a", 70<<10), contentType: "application/x-www-form-urlencoded", wantStatus: 400, wantError: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var resp *http.Response
			var body map[string]any
			switch {
			case tt.query != "":
				form := url.Values{}
				for k, v := range tt.form {
					form[k] = v
				}
				if tt.how == authPost {
					form.Set("client_id", tt.c.id)
					form.Set("client_secret", tt.c.secret)
				}
				req := mustRequest(t, http.MethodPost, e.srv.URL+"/oauth/v2/token?"+tt.query, strings.NewReader(form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				resp, body = do(t, req)
			case tt.rawBody != "":
				req := mustRequest(t, http.MethodPost, e.srv.URL+"/oauth/v2/token", strings.NewReader(tt.rawBody))
				req.Header.Set("Content-Type", tt.contentType)
				resp, body = do(t, req)
			case tt.basicRaw != [2]string{}:
				req := mustRequest(t, http.MethodPost, e.srv.URL+"/oauth/v2/token", strings.NewReader(tt.form.Encode()))
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.SetBasicAuth(tt.basicRaw[0], tt.basicRaw[1])
				resp, body = do(t, req)
			default:
				resp, body = e.post(t, "/oauth/v2/token", tt.form, tt.how, tt.c)
			}
			if resp.StatusCode != tt.wantStatus || body["error"] != tt.wantError {
				t.Fatalf("got %d %v, want %d %q", resp.StatusCode, body, tt.wantStatus, tt.wantError)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
			if _, ok := body["access_token"]; ok {
				t.Error("error response carries an access token")
			}
			if got := resp.Header.Get("WWW-Authenticate"); tt.wantBasic != strings.HasPrefix(got, "Basic") {
				t.Errorf("WWW-Authenticate %q, want Basic challenge: %v", got, tt.wantBasic)
			}
		})
	}
}

func TestKeysAndGoOIDC(t *testing.T) {
	e := newEnv(t, 0)
	ctx := context.Background()

	resp, jwks := do(t, mustRequest(t, http.MethodGet, e.srv.URL+"/oauth/v2/keys", nil))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("JWKS status %d", resp.StatusCode)
	}
	keys, _ := jwks["keys"].([]any)
	if len(keys) != 1 {
		t.Fatalf("JWKS has %d keys, want 1", len(keys))
	}
	k := keys[0].(map[string]any)
	if k["kid"] != keyID || k["alg"] != "RS256" || k["use"] != "sig" || k["kty"] != "RSA" {
		t.Errorf("JWKS key %v", k)
	}
	if _, ok := k["d"]; ok {
		t.Fatal("JWKS publishes the private key")
	}
	if n := base64.RawURLEncoding.EncodeToString(testKey().N.Bytes()); k["n"] != n {
		t.Error("JWKS modulus is not the signing key's")
	}

	full := e.token(t, e.main, fullScope)
	bare := e.token(t, e.main, "role:owner")
	foreign := forge(t, foreignKey(), e.claimsFor(e.main, e.srv.URL, time.Now().Add(time.Hour)))

	discovered, err := gooidc.NewProvider(ctx, e.srv.URL)
	if err != nil {
		t.Fatalf("go-oidc discovery: %v", err)
	}
	static := gooidc.NewVerifier(e.srv.URL, &gooidc.StaticKeySet{PublicKeys: e.provider.PublicKeys()}, &gooidc.Config{SkipClientIDCheck: true})
	tests := []struct {
		name     string
		verifier *gooidc.IDTokenVerifier
		token    string
		wantOK   bool
	}{
		{"remote JWKS", discovered.Verifier(&gooidc.Config{SkipClientIDCheck: true}), full, true},
		{"remote JWKS, audience is the project", discovered.Verifier(&gooidc.Config{ClientID: projectID}), full, true},
		{"remote JWKS, token without audience item", discovered.Verifier(&gooidc.Config{ClientID: projectID}), bare, false},
		{"remote JWKS, foreign key", discovered.Verifier(&gooidc.Config{SkipClientIDCheck: true}), foreign, false},
		{"static keys from PublicKeys", static, full, true},
		{"static keys, token without mandatory items", static, bare, true},
		{"static keys, foreign key", static, foreign, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tok, err := tt.verifier.Verify(ctx, tt.token)
			if (err == nil) != tt.wantOK {
				t.Fatalf("Verify error %v, want ok %v", err, tt.wantOK)
			}
			if err != nil {
				return
			}
			var c struct {
				AccountID string `json:"account_id"`
				Scope     string `json:"scope"`
			}
			if err := tok.Claims(&c); err != nil {
				t.Fatal(err)
			}
			if tok.Subject != e.main.id || c.AccountID != e.main.account || c.Scope == "" {
				t.Errorf("verified token: sub %q, claims %+v", tok.Subject, c)
			}
		})
	}
}

func TestIntrospection(t *testing.T) {
	e := newEnv(t, 0)
	full := e.token(t, e.main, fullScope)
	bare := e.token(t, e.main, "role:restricted mount:M1")
	otherAccount := e.token(t, e.other, fullScope)
	soon := time.Now().Add(time.Hour)
	expired := forge(t, testKey(), e.claimsFor(e.main, e.srv.URL, time.Now().Add(-time.Minute)))
	foreign := forge(t, foreignKey(), e.claimsFor(e.main, e.srv.URL, soon))
	wrongIssuer := forge(t, testKey(), e.claimsFor(e.main, "https://elsewhere.example", soon))
	// zitadel's claim types panic on a non-string aud element; such a
	// payload must be refused before it is decoded.
	badAud := unsignedJWT(`{"alg":"RS256","kid":"test-key"}`, `{"aud":[1],"iss":"x"}`)
	badAudForeign := forge(t, foreignKey(), map[string]any{"aud": []any{1}, "iss": e.srv.URL})
	algNone := unsignedJWT(`{"alg":"none"}`, `{"iss":"`+e.srv.URL+`","sub":"x","exp":9999999999,"account_id":"`+e.main.account+`"}`)
	algNone = strings.TrimSuffix(algNone, base64.RawURLEncoding.EncodeToString([]byte("junk")))

	tests := []struct {
		name       string
		how        auth
		c          cred
		token      string
		noToken    bool
		wantStatus int
		wantActive bool
		wantError  string
	}{
		{name: "own token, basic", how: authBasic, c: e.main, token: full, wantStatus: 200, wantActive: true},
		{name: "own token, form", how: authPost, c: e.main, token: full, wantStatus: 200, wantActive: true},
		{name: "another client of the same account", how: authPost, c: e.second, token: full, wantStatus: 200, wantActive: true},
		{name: "same account, URL-encoded Basic", how: authBasic, c: e.odd, token: full, wantStatus: 200, wantActive: true},
		{name: "token without mandatory items", how: authBasic, c: e.main, token: bare, wantStatus: 200, wantActive: true},
		{name: "token of another account", how: authBasic, c: e.main, token: otherAccount, wantStatus: 200},
		{name: "other account asks about ours", how: authPost, c: e.other, token: full, wantStatus: 200},
		{name: "expired", how: authBasic, c: e.main, token: expired, wantStatus: 200},
		{name: "signed by a foreign key", how: authBasic, c: e.main, token: foreign, wantStatus: 200},
		{name: "wrong issuer", how: authBasic, c: e.main, token: wrongIssuer, wantStatus: 200},
		{name: "garbage", how: authBasic, c: e.main, token: "not-a-jwt", wantStatus: 200},
		{name: "malformed claims, unsigned", how: authBasic, c: e.main, token: badAud, wantStatus: 200},
		{name: "malformed claims, foreign key", how: authBasic, c: e.main, token: badAudForeign, wantStatus: 200},
		{name: "alg none", how: authBasic, c: e.main, token: algNone, wantStatus: 200},
		{name: "wrong secret, basic", how: authBasic, c: cred{id: e.main.id, secret: "nope"}, token: full, wantStatus: 401, wantError: "invalid_client"},
		{name: "wrong secret, form", how: authPost, c: cred{id: e.main.id, secret: "nope"}, token: full, wantStatus: 401, wantError: "invalid_client"},
		{name: "unknown client", how: authPost, c: cred{id: "cli_nobody", secret: "x"}, token: full, wantStatus: 401, wantError: "invalid_client"},
		{name: "no client credentials", how: authNone, token: full, wantStatus: 401, wantError: "invalid_client"},
		{name: "no token", how: authBasic, c: e.main, noToken: true, wantStatus: 400, wantError: "invalid_request"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			form := url.Values{}
			if !tt.noToken {
				form.Set("token", tt.token)
			}
			resp, body := e.post(t, "/oauth/v2/introspect", form, tt.how, tt.c)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d; body %v", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantError != "" {
				if body["error"] != tt.wantError {
					t.Errorf("error = %v, want %q", body["error"], tt.wantError)
				}
				return
			}
			if body["active"] != tt.wantActive {
				t.Fatalf("active = %v, want %v; body %v", body["active"], tt.wantActive, body)
			}
			if !tt.wantActive {
				if len(body) != 1 {
					t.Errorf("inactive answer says more than active: %v", body)
				}
				return
			}
			_, claims := decodeJWT(t, tt.token)
			for _, k := range []string{"scope", "client_id", "sub", "iss", "account_id", "exp", "iat", "jti"} {
				if body[k] != claims[k] {
					t.Errorf("%s = %v, want %v", k, body[k], claims[k])
				}
			}
			if body["account_id"] != e.main.account || body["token_type"] != "Bearer" {
				t.Errorf("body %v", body)
			}
		})
	}
}

func TestUserinfo(t *testing.T) {
	e := newEnv(t, 0)
	full := e.token(t, e.main, fullScope)
	bare := e.token(t, e.second, "role:restricted mount:M1")
	other := e.token(t, e.other, "profile")
	expired := forge(t, testKey(), e.claimsFor(e.main, e.srv.URL, time.Now().Add(-time.Minute)))
	foreign := forge(t, foreignKey(), e.claimsFor(e.main, e.srv.URL, time.Now().Add(time.Hour)))

	bearer := func(method, scheme, token string) func(*testing.T) *http.Request {
		return func(t *testing.T) *http.Request {
			req := mustRequest(t, method, e.srv.URL+"/oidc/v1/userinfo", nil)
			req.Header.Set("Authorization", scheme+" "+token)
			return req
		}
	}
	tests := []struct {
		name      string
		req       func(*testing.T) *http.Request
		wantSub   string
		wantAcc   string
		wantScope string
		wantError bool // 401; the challenge names invalid_token
	}{
		{name: "GET with full token", req: bearer(http.MethodGet, "Bearer", full), wantSub: e.main.id, wantAcc: e.main.account, wantScope: fullScope},
		{name: "without mandatory items", req: bearer(http.MethodGet, "Bearer", bare), wantSub: e.second.id, wantAcc: e.main.account, wantScope: "role:restricted mount:M1"},
		{name: "other account", req: bearer(http.MethodGet, "Bearer", other), wantSub: e.other.id, wantAcc: e.other.account, wantScope: "profile"},
		{name: "POST with header", req: bearer(http.MethodPost, "Bearer", full), wantSub: e.main.id, wantAcc: e.main.account, wantScope: fullScope},
		{name: "scheme is case-insensitive", req: bearer(http.MethodGet, "bearer", full), wantSub: e.main.id, wantAcc: e.main.account, wantScope: fullScope},
		{name: "POST with access_token form field", req: func(t *testing.T) *http.Request {
			req := mustRequest(t, http.MethodPost, e.srv.URL+"/oidc/v1/userinfo", strings.NewReader(url.Values{"access_token": {full}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			return req
		}, wantSub: e.main.id, wantAcc: e.main.account, wantScope: fullScope},
		{name: "no token", req: func(t *testing.T) *http.Request {
			return mustRequest(t, http.MethodGet, e.srv.URL+"/oidc/v1/userinfo", nil)
		}},
		{name: "garbage token", req: bearer(http.MethodGet, "Bearer", "garbage"), wantError: true},
		{name: "expired token", req: bearer(http.MethodGet, "Bearer", expired), wantError: true},
		{name: "foreign key", req: bearer(http.MethodGet, "Bearer", foreign), wantError: true},
		{name: "malformed claims", req: bearer(http.MethodGet, "Bearer", unsignedJWT(`{"alg":"RS256"}`, `{"aud":[1]}`)), wantError: true},
		{name: "Basic scheme", req: func(t *testing.T) *http.Request {
			req := mustRequest(t, http.MethodGet, e.srv.URL+"/oidc/v1/userinfo", nil)
			req.SetBasicAuth(e.main.id, e.main.secret)
			return req
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := do(t, tt.req(t))
			if tt.wantSub == "" {
				if resp.StatusCode != http.StatusUnauthorized {
					t.Fatalf("status %d, want 401; body %v", resp.StatusCode, body)
				}
				challenge := resp.Header.Get("WWW-Authenticate")
				if !strings.HasPrefix(challenge, "Bearer") || tt.wantError != strings.Contains(challenge, `error="invalid_token"`) {
					t.Errorf("WWW-Authenticate %q", challenge)
				}
				return
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d; body %v", resp.StatusCode, body)
			}
			if body["sub"] != tt.wantSub || body["account_id"] != tt.wantAcc || body["scope"] != tt.wantScope {
				t.Errorf("body %v, want sub %q account_id %q scope %q", body, tt.wantSub, tt.wantAcc, tt.wantScope)
			}
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	accounts := core.NewAccountService(newFakeStore(), nil)
	good := idp.Config{Issuer: "http://127.0.0.1:8080", Scopes: rules}
	key := idp.SigningKey{ID: keyID, Key: testKey()}
	tests := []struct {
		name     string
		cfg      func(idp.Config) idp.Config
		key      idp.SigningKey
		accounts *core.AccountService
	}{
		{"no issuer", func(c idp.Config) idp.Config { c.Issuer = ""; return c }, key, accounts},
		{"trailing slash", func(c idp.Config) idp.Config { c.Issuer += "/"; return c }, key, accounts},
		{"not http(s)", func(c idp.Config) idp.Config { c.Issuer = "ftp://example.com"; return c }, key, accounts},
		{"issuer with query", func(c idp.Config) idp.Config { c.Issuer += "?x=1"; return c }, key, accounts},
		{"no project id", func(c idp.Config) idp.Config { c.Scopes.ProjectID = ""; return c }, key, accounts},
		{"lifetime under a second", func(c idp.Config) idp.Config { c.TokenTTL = time.Millisecond; return c }, key, accounts},
		{"no key", func(c idp.Config) idp.Config { return c }, idp.SigningKey{ID: keyID}, accounts},
		{"weak key", func(c idp.Config) idp.Config { return c }, idp.SigningKey{ID: keyID, Key: newKey(1024)}, accounts},
		{"no account service", func(c idp.Config) idp.Config { return c }, key, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := idp.New(tt.cfg(good), tt.accounts, tt.key, nil); err == nil {
				t.Error("New succeeded")
			}
		})
	}
	t.Run("https issuer and key without id", func(t *testing.T) {
		p, err := idp.New(idp.Config{Issuer: "https://idp.example.com", Scopes: rules}, accounts, idp.SigningKey{Key: testKey()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/oauth/v2/keys", nil))
		var jwks struct{ Keys []struct{ Kid string } }
		if err := json.Unmarshal(rec.Body.Bytes(), &jwks); err != nil || len(jwks.Keys) != 1 || jwks.Keys[0].Kid == "" {
			t.Errorf("JWKS %s: want one key with a derived kid", rec.Body.Bytes())
		}
	})
}

func mustRequest(t *testing.T, method, target string, body io.Reader) *http.Request {
	t.Helper()
	if body == nil {
		body = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// stringList reads a JSON string or array of strings.
func stringList(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []any:
		out := make([]string, 0, len(v))
		for _, s := range v {
			if s, ok := s.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// TestClientAuthLimits: failed client authentications are throttled per
// client id and address (429 with Retry-After, on the token endpoint and on
// introspection alike), and a database that cannot be reached is 503 with
// Retry-After, not server_error.
func TestClientAuthLimits(t *testing.T) {
	store := newFakeStore()
	e := newEnvWith(t, 0, store, memory.NewFailureLimiter())
	cc := url.Values{"grant_type": {"client_credentials"}, "scope": {fullScope}}
	wrong := cred{id: e.main.id, secret: "not-the-secret"}
	for i := 0; i < core.ClientFailuresPerSource.Limit; i++ {
		if resp, body := e.post(t, "/oauth/v2/token", cc, authPost, wrong); resp.StatusCode != 401 {
			t.Fatalf("failure %d: %d %v", i+1, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/oauth/v2/token", "/oauth/v2/introspect"} {
		resp, body := e.post(t, path, cc, authPost, wrong)
		if resp.StatusCode != http.StatusTooManyRequests || body["error"] != "temporarily_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s over the limit: %d %v Retry-After %q", path, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}
	// Another client of the account is not locked out by them.
	e.token(t, e.second, fullScope)

	store.mu.Lock()
	store.down = true
	store.mu.Unlock()
	for _, path := range []string{"/oauth/v2/token", "/oauth/v2/introspect"} {
		resp, body := e.post(t, path, cc, authPost, e.other)
		if resp.StatusCode != http.StatusServiceUnavailable || body["error"] != "temporarily_unavailable" || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s with the database down: %d %v Retry-After %q", path, resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
	}
}
