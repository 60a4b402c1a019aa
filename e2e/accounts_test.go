package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/core"
)

// TestAccountsCommands lists accounts and rotates a client secret: the old
// secret stops working at once, the new one works, and a token issued
// before lives on until it expires.
func TestAccountsCommands(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			first := in.createAccount("First Fleet")
			second := in.createAccount("Second Fleet")
			before := in.ownerToken(first)

			list := decode[struct {
				Accounts []struct {
					AccountID string    `json:"accountId"`
					Name      string    `json:"name"`
					Clients   int       `json:"clients"`
					CreatedAt time.Time `json:"createdAt"`
				} `json:"accounts"`
			}](t, []byte(in.runCLI("accounts", "list", "--json")))
			if len(list.Accounts) != 2 || list.Accounts[0].AccountID != first.AccountID || list.Accounts[0].Name != "First Fleet" ||
				list.Accounts[0].Clients != 1 || list.Accounts[1].AccountID != second.AccountID || list.Accounts[0].CreatedAt.IsZero() {
				t.Fatalf("accounts list = %+v", list)
			}
			if text := in.runCLI("accounts", "list"); !strings.Contains(text, "ACCOUNT ID") || !strings.Contains(text, "Second Fleet") {
				t.Fatalf("accounts list (text):\n%s", text)
			}

			rotated := decode[credentials](t, []byte(in.runCLI("accounts", "rotate-secret", "--account", first.AccountID, "--json")))
			if rotated.AccountID != first.AccountID || rotated.ClientID != first.ClientID || rotated.ClientSecret == "" || rotated.ClientSecret == first.ClientSecret {
				t.Fatalf("rotated = %+v", rotated)
			}
			grant := func(c credentials) int {
				res, _ := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ClientID},
					"client_secret": {c.ClientSecret}, "scope": {"openid sub " + audItem}}, nil)
				return res.StatusCode
			}
			if got := grant(first); got != http.StatusUnauthorized {
				t.Fatalf("the old secret after rotation: %d, want 401", got)
			}
			if got := grant(rotated); got != http.StatusOK {
				t.Fatalf("the new secret: %d, want 200", got)
			}
			if got := grant(second); got != http.StatusOK {
				t.Fatalf("another account's secret after rotation: %d, want 200", got)
			}
			if res, body := in.call(http.MethodGet, "/api/v1/accounts/me", before, nil); res.StatusCode != http.StatusOK {
				t.Fatalf("a token issued before the rotation: %d %s", res.StatusCode, body)
			}
			if text := in.runCLI("accounts", "rotate-secret", "--account", second.AccountID); !strings.Contains(text, "client secret:") {
				t.Fatalf("rotate-secret (text):\n%s", text)
			}
			if _, errOut, err := in.tryCLI("accounts", "rotate-secret", "--account", "acc_unknown"); err == nil {
				t.Fatalf("rotating an unknown account's secret succeeded: %s", errOut)
			}
		})
	}
}

// TestReadmeWalkthrough follows the README: create an account, get a token,
// call GET /api/v1/accounts/me, on each backend.
func TestReadmeWalkthrough(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			acc := in.createAccount("Fleet One")
			token := in.ownerToken(acc)

			res, body := in.call(http.MethodGet, "/api/v1/accounts/me", token, nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("me: %d %s", res.StatusCode, body)
			}
			me := decode[map[string]any](t, body)
			if me["accountId"] != acc.AccountID || me["name"] != "Fleet One" || me["role"] != "owner" {
				t.Fatalf("me = %s", body)
			}
			exp, err := time.Parse(time.RFC3339, me["expiresAt"].(string))
			if err != nil || time.Until(exp) < 59*time.Minute || !strings.HasSuffix(me["expiresAt"].(string), "Z") {
				t.Fatalf("expiresAt = %v", me["expiresAt"])
			}

			// Authorization: Bearer is the same as Access-Key.
			req, _ := http.NewRequest(http.MethodGet, in.base+"/api/v1/accounts/me", nil)
			req.Header.Set("Authorization", "Bearer "+token)
			if res, body := in.do(req); res.StatusCode != http.StatusOK {
				t.Fatalf("bearer: %d %s", res.StatusCode, body)
			}

			res, body = in.call(http.MethodGet, "/readyz", "", nil)
			if res.StatusCode != http.StatusOK {
				t.Fatalf("readyz: %d %s", res.StatusCode, body)
			}
			if in.cfg.RedisURL != "" && !strings.Contains(string(body), `"redis":"ok"`) {
				t.Fatalf("readyz does not check redis: %s", body)
			}
			res, body = in.call(http.MethodGet, "/metrics", "", nil)
			if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `mountd_http_requests_total{method="GET",route="GET /api/v1/accounts/me",status="200"}`) {
				t.Fatalf("metrics lack the request counter:\n%.2000s", body)
			}
		})
	}
}

// TestScopeRoleMatrix checks what each kind of token gets from the API.
func TestScopeRoleMatrix(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	cases := []struct {
		name      string
		scope     []string
		status    int
		code      string
		role      string
		mountUIDs []string
	}{
		{"owner", []string{"openid", "sub", audItem}, 200, "", "owner", []string{}},
		{"owner with profile and mount item", []string{"openid", "profile", "sub", audItem, "role:owner", "mount:M1"}, 200, "", "owner", []string{}},
		{"restricted to a mount", []string{"openid", "sub", audItem, "role:restricted", "mount:M1", "mount:M2"}, 200, "", "restricted", []string{"M1", "M2"}},
		{"maintainer", []string{"openid", "sub", audItem, "role:restricted"}, 200, "", "restricted", []string{}},
		{"no audience item", []string{"openid", "sub"}, 403, "INSUFFICIENT_SCOPE", "", nil},
		{"no openid", []string{"sub", audItem}, 403, "INSUFFICIENT_SCOPE", "", nil},
		{"no sub", []string{"openid", audItem, "role:restricted"}, 403, "INSUFFICIENT_SCOPE", "", nil},
		{"no scope at all", nil, 403, "INSUFFICIENT_SCOPE", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			token := in.token(acc, c.scope...)
			res, body := in.call(http.MethodGet, "/api/v1/accounts/me", token, nil)
			if c.code != "" {
				wantProblem(t, res, body, c.status, c.code)
				return
			}
			me := decode[struct {
				Role      string   `json:"role"`
				MountUIDs []string `json:"mountUids"`
			}](t, body)
			if res.StatusCode != c.status || me.Role != c.role || strings.Join(me.MountUIDs, ",") != strings.Join(c.mountUIDs, ",") {
				t.Fatalf("got %d %s", res.StatusCode, body)
			}
		})
	}
}

// TestTokenEndpointErrors checks RFC 6749 §5.2 answers through the server.
func TestTokenEndpointErrors(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	acc := in.createAccount("Fleet")
	form := func(kv ...string) url.Values {
		v := url.Values{"grant_type": {"client_credentials"}, "client_id": {acc.ClientID}, "client_secret": {acc.ClientSecret}, "scope": {"openid sub " + audItem}}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				v.Del(kv[i])
				continue
			}
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		name   string
		form   url.Values
		status int
		error  string
	}{
		{"wrong secret", form("client_secret", "nope"), 401, "invalid_client"},
		{"unknown client", form("client_id", "cli_unknown"), 401, "invalid_client"},
		{"unsupported grant", form("grant_type", "password"), 400, "unsupported_grant_type"},
		{"unknown scope item", form("scope", "openid sub email"), 400, "invalid_scope"},
		{"bad role", form("scope", "openid sub role:admin"), 400, "invalid_scope"},
		{"missing grant type", form("grant_type", ""), 400, "invalid_request"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, body := in.tokenRequest(c.form, nil)
			e := decode[map[string]any](t, body)
			if res.StatusCode != c.status || e["error"] != c.error {
				t.Fatalf("got %d %s; want %d %s", res.StatusCode, body, c.status, c.error)
			}
		})
	}
	t.Run("basic auth", func(t *testing.T) {
		res, body := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "scope": {"openid sub " + audItem}},
			http.Header{"Authorization": {"Basic " + basic(url.QueryEscape(acc.ClientID), url.QueryEscape(acc.ClientSecret))}})
		if res.StatusCode != 200 || !strings.Contains(string(body), `"token_type":"Bearer"`) || !strings.Contains(string(body), `"expires_in":3600`) {
			t.Fatalf("got %d %s", res.StatusCode, body)
		}
	})
}

// TestBadTokens checks that every kind of bad token is a 401 problem.
func TestBadTokens(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.TokenTTL = time.Second
	in := start(t, cfg)
	acc := in.createAccount("Fleet")
	short := in.ownerToken(acc)

	other := start(t, testConfig(t.TempDir(), "")) // another installation: another key
	foreign := other.ownerToken(other.createAccount("Elsewhere"))

	parts := strings.Split(short, ".")
	tampered := parts[0] + "." + parts[1] + "x." + parts[2]
	time.Sleep(1100 * time.Millisecond)
	for name, token := range map[string]string{
		"malformed":      "not-a-jwt",
		"tampered":       tampered,
		"foreign-signed": foreign,
		"expired":        short,
		"alg none":       "eyJhbGciOiJub25lIn0." + parts[1] + ".",
	} {
		t.Run(name, func(t *testing.T) {
			res, body := in.call(http.MethodGet, "/api/v1/accounts/me", token, nil)
			wantProblem(t, res, body, 401, "UNAUTHENTICATED")
			if res.Header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
}

// TestTokensSurviveRestart: the identity key lives in the database, so a
// token outlives the process that issued it.
func TestTokensSurviveRestart(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.PublicURL = "http://mountd.example" // the issuer must not change with the port
	first := start(t, cfg)
	acc := first.createAccount("Fleet")
	token := first.ownerToken(acc)
	first.stop()

	second := start(t, cfg)
	if res, body := second.call(http.MethodGet, "/api/v1/accounts/me", token, nil); res.StatusCode != 200 {
		t.Fatalf("after restart: %d %s", res.StatusCode, body)
	}
}

func TestUnknownRoutesAreProblems(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	res, body := in.call(http.MethodGet, "/api/v1/nope", "", nil)
	wantProblem(t, res, body, 404, "NOT_FOUND")
	res, body = in.call(http.MethodDelete, "/healthz", "", nil)
	wantProblem(t, res, body, 405, "METHOD_NOT_ALLOWED")
}

func basic(user, pass string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
}

// TestOlderClientSecretRehashed: an account whose secret an older version
// stored as argon2id still gets tokens, and from its first token on its
// secret is stored as HMAC-SHA-256 under the master key, as the admin
// commands store new and rotated secrets; a rotation still ends the old
// secret at once.
func TestOlderClientSecretRehashed(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			in := start(t, cfg)
			dbURL := cfg.DatabaseURL
			if dbURL == "" {
				dbURL = "sqlite://" + filepath.Join(cfg.DataDir, "mountd.db")
			}
			ctx := context.Background()
			store, closeStore, err := bunstore.Open(ctx, dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			// What an older version wrote: argon2id.
			created, err := core.NewAccountService(store, nil).Create(ctx, "Older Fleet")
			if err != nil {
				t.Fatal(err)
			}
			older := credentials{AccountID: created.AccountID, ClientID: created.ClientID, ClientSecret: created.ClientSecret}
			stored := func(clientID string) string {
				t.Helper()
				cl, err := store.APIClient(ctx, clientID)
				if err != nil {
					t.Fatal(err)
				}
				return cl.SecretHash
			}
			const argon, keyed = "$argon2id$", "$hmac-sha256$v=1$"
			if h := stored(older.ClientID); !strings.HasPrefix(h, argon) {
				t.Fatalf("the older account's secret stored as %.20q…, want argon2id", h)
			}
			grant := func(c credentials) int {
				res, _ := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ClientID},
					"client_secret": {c.ClientSecret}, "scope": {"openid sub " + audItem}}, nil)
				return res.StatusCode
			}
			wrong := older
			wrong.ClientSecret += "x"
			if got := grant(wrong); got != http.StatusUnauthorized {
				t.Fatalf("a wrong secret: %d, want 401", got)
			}
			if h := stored(older.ClientID); !strings.HasPrefix(h, argon) {
				t.Fatalf("a wrong secret changed the stored hash to %.20q…", h)
			}
			if res, body := in.call(http.MethodGet, "/api/v1/accounts/me", in.ownerToken(older), nil); res.StatusCode != http.StatusOK {
				t.Fatalf("the older account's token: %d %s", res.StatusCode, body)
			}
			if h := stored(older.ClientID); !strings.HasPrefix(h, keyed) {
				t.Fatalf("after its first token the secret is stored as %.20q…, want HMAC", h)
			}
			if got := grant(older); got != http.StatusOK {
				t.Fatalf("the rehashed secret: %d, want 200", got)
			}

			fresh := in.createAccount("Fresh Fleet")
			if h := stored(fresh.ClientID); !strings.HasPrefix(h, keyed) {
				t.Fatalf("accounts create stored %.20q…, want HMAC", h)
			}
			rotated := decode[credentials](t, []byte(in.runCLI("accounts", "rotate-secret", "--account", older.AccountID, "--json")))
			if h := stored(older.ClientID); !strings.HasPrefix(h, keyed) {
				t.Fatalf("rotate-secret stored %.20q…, want HMAC", h)
			}
			for _, tc := range []struct {
				name string
				cred credentials
				want int
			}{
				{"the secret before the rotation", older, http.StatusUnauthorized},
				{"the rotated secret", rotated, http.StatusOK},
				{"a new account's secret", fresh, http.StatusOK},
			} {
				if got := grant(tc.cred); got != tc.want {
					t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
				}
			}
		})
	}
}
