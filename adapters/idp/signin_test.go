package idp_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/mountd/mountd/adapters/idp"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

const password = "correct horse battery"

type signInEnv struct {
	srv          *httptest.Server
	store        *memory.Store
	alice, rider core.User
}

// sourceHeader names the source address a test request pretends to come
// from (the server takes it as the request's RemoteAddr).
const sourceHeader = "X-Test-Source"

func newSignInEnv(t *testing.T) *signInEnv {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	accounts := core.NewAccountService(store, nil)
	acc, err := accounts.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	users := core.NewUserService(store, memory.NewFailureLimiter())
	e := &signInEnv{store: store}
	if e.alice, err = users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "alice", Role: core.RoleOwner, Password: password}); err != nil {
		t.Fatal(err)
	}
	if e.rider, err = users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "rider", Role: core.RoleRestricted, MountUIDs: []string{"M1"}, Password: password}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a := r.Header.Get(sourceHeader); a != "" {
			r.RemoteAddr = net.JoinHostPort(a, "1234")
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	provider, err := idp.New(idp.Config{Issuer: e.srv.URL, Scopes: rules,
		SignIn: &idp.SignIn{Users: users, Sessions: core.NewSessionService(store, store)}},
		accounts, idp.SigningKey{ID: keyID, Key: testKey()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range provider.Paths() {
		mux.Handle(p, provider.Handler())
	}
	return e
}

// browser is a person's browser: it keeps cookies and stops at the first
// redirect that leaves the identity provider's pages.
type browser struct {
	t      *testing.T
	c      *http.Client
	base   string
	landed *url.URL // where the last redirect to the console pointed
}

func newBrowser(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	b := &browser{t: t, base: base}
	b.c = &http.Client{Jar: jar, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/console/") {
			b.landed = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}}
	return b
}

func (b *browser) do(req *http.Request) (*http.Response, string) {
	b.t.Helper()
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

var hiddenField = regexp.MustCompile(`name="(authRequest|csrf)" value="([^"]*)"`)

// start opens the authorize URL with a PKCE challenge and returns the login
// form's hidden fields.
func (b *browser) start(verifier string, extra url.Values) (authRequest, csrf string) {
	b.t.Helper()
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"client_id": {idp.ConsoleClientID}, "redirect_uri": {b.base + "/console/"}, "response_type": {"code"},
		"scope": {"openid offline_access"}, "state": {"st4te"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}}
	for k, v := range extra {
		q[k] = v
	}
	req, _ := http.NewRequest(http.MethodGet, b.base+"/oauth/v2/authorize?"+q.Encode(), nil)
	res, body := b.do(req)
	if res.StatusCode != http.StatusOK || res.Request.URL.Path != "/login" {
		b.t.Fatalf("authorize ended at %s with %d: %.300s", res.Request.URL, res.StatusCode, body)
	}
	for _, want := range []string{`name="username"`, `name="password"`, `type="submit"`} {
		if !strings.Contains(body, want) {
			b.t.Fatalf("login page lacks %s", want)
		}
	}
	for _, m := range hiddenField.FindAllStringSubmatch(body, -1) {
		if m[1] == "authRequest" {
			authRequest = m[2]
		} else {
			csrf = m[2]
		}
	}
	return authRequest, csrf
}

func (b *browser) login(authRequest, csrf, username, pw string) (*http.Response, string) {
	b.t.Helper()
	form := url.Values{"authRequest": {authRequest}, "csrf": {csrf}, "username": {username}, "password": {pw}}
	req, _ := http.NewRequest(http.MethodPost, b.base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	b.landed = nil
	return b.do(req)
}

func tokenCall(t *testing.T, base string, form url.Values) (int, map[string]any) {
	t.Helper()
	res, err := http.PostForm(base+"/oauth/v2/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return res.StatusCode, out
}

func userinfo(t *testing.T, base, token string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/oidc/v1/userinfo", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(res.Body).Decode(&out)
	return out
}

// signIn runs the whole flow for a user and returns the token response.
func (e *signInEnv) signIn(t *testing.T, username string) map[string]any {
	t.Helper()
	b := newBrowser(t, e.srv.URL)
	const verifier = "a-verifier-of-at-least-forty-three-characters-long"
	ar, csrf := b.start(verifier, nil)
	if res, body := b.login(ar, csrf, username, password); b.landed == nil {
		t.Fatalf("sign-in answered %d: %.300s", res.StatusCode, body)
	}
	if b.landed.Query().Get("state") != "st4te" {
		t.Fatalf("redirect %s lost the state", b.landed)
	}
	code := b.landed.Query().Get("code")
	status, tok := tokenCall(t, e.srv.URL, url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {e.srv.URL + "/console/"}, "client_id": {idp.ConsoleClientID}, "code_verifier": {verifier}})
	if status != http.StatusOK {
		t.Fatalf("code exchange: %d %v", status, tok)
	}
	return tok
}

func TestSignInCodeFlow(t *testing.T) {
	e := newSignInEnv(t)

	t.Run("discovery lists the flow", func(t *testing.T) {
		res, err := http.Get(e.srv.URL + "/.well-known/openid-configuration")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var d struct {
			Authorization string   `json:"authorization_endpoint"`
			ResponseTypes []string `json:"response_types_supported"`
			Grants        []string `json:"grant_types_supported"`
			Challenges    []string `json:"code_challenge_methods_supported"`
		}
		_ = json.NewDecoder(res.Body).Decode(&d)
		if d.Authorization != e.srv.URL+"/oauth/v2/authorize" || !slices.Contains(d.ResponseTypes, "code") ||
			!slices.Contains(d.Grants, "authorization_code") || !slices.Contains(d.Grants, "refresh_token") ||
			!slices.Equal(d.Challenges, []string{"S256"}) {
			t.Fatalf("discovery = %+v", d)
		}
	})

	t.Run("an owner signs in, refreshes, and a reused refresh token ends the session", func(t *testing.T) {
		tok := e.signIn(t, "Alice")
		info := userinfo(t, e.srv.URL, tok["access_token"].(string))
		if info["sub"] != e.alice.ID || info["account_id"] != e.alice.AccountID || !strings.Contains(info["scope"].(string), "role:owner") ||
			!strings.Contains(info["scope"].(string), rules.AudienceItem()) {
			t.Fatalf("userinfo = %v", info)
		}
		first, _ := tok["refresh_token"].(string)
		if first == "" {
			t.Fatalf("no refresh token: %v", tok)
		}
		refresh := func(token string) (int, map[string]any) {
			return tokenCall(t, e.srv.URL, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}, "client_id": {idp.ConsoleClientID}})
		}
		status, next := refresh(first)
		if status != http.StatusOK || next["access_token"] == nil || next["refresh_token"] == first {
			t.Fatalf("refresh: %d %v", status, next)
		}
		if status, out := refresh(first); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Fatalf("reused refresh token: %d %v", status, out)
		}
		if status, out := refresh(next["refresh_token"].(string)); status != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Fatalf("the family's newer token after a reuse: %d %v", status, out)
		}
	})

	t.Run("signing out revokes the sign-in", func(t *testing.T) {
		tok := e.signIn(t, "alice")
		res, err := http.PostForm(e.srv.URL+"/oauth/v2/revoke", url.Values{"token": {tok["refresh_token"].(string)}, "client_id": {idp.ConsoleClientID}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("revoke: %d", res.StatusCode)
		}
		status, out := tokenCall(t, e.srv.URL, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok["refresh_token"].(string)}, "client_id": {idp.ConsoleClientID}})
		if status != http.StatusBadRequest || out["error"] != "invalid_grant" {
			t.Fatalf("refresh after sign-out: %d %v", status, out)
		}
		res, _ = http.PostForm(e.srv.URL+"/oauth/v2/revoke", url.Values{"token": {"unknown"}, "client_id": {idp.ConsoleClientID}})
		if res.StatusCode != http.StatusOK {
			t.Fatalf("revoking an unknown token: %d, want 200", res.StatusCode)
		}
	})

	t.Run("a restricted user's token carries its mounts", func(t *testing.T) {
		tok := e.signIn(t, "rider")
		scope := userinfo(t, e.srv.URL, tok["access_token"].(string))["scope"].(string)
		if !strings.Contains(scope, "role:restricted") || !strings.Contains(scope, "mount:M1") {
			t.Fatalf("scope = %q", scope)
		}
	})

	t.Run("a code is used once and needs its verifier", func(t *testing.T) {
		b := newBrowser(t, e.srv.URL)
		const verifier = "another-verifier-of-at-least-forty-three-characters"
		ar, csrf := b.start(verifier, nil)
		b.login(ar, csrf, "alice", password)
		code := b.landed.Query().Get("code")
		form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {e.srv.URL + "/console/"},
			"client_id": {idp.ConsoleClientID}, "code_verifier": {"the-wrong-verifier-of-at-least-forty-three-chars"}}
		if status, out := tokenCall(t, e.srv.URL, form); status == http.StatusOK {
			t.Fatalf("wrong verifier: %d %v", status, out)
		}
		form.Set("code_verifier", verifier)
		if status, out := tokenCall(t, e.srv.URL, form); status != http.StatusOK {
			t.Fatalf("right verifier: %d %v", status, out)
		}
		if status, out := tokenCall(t, e.srv.URL, form); status == http.StatusOK {
			t.Fatalf("second use of a code: %d %v", status, out)
		}
	})

	t.Run("wrong credentials: one message, the form again", func(t *testing.T) {
		b := newBrowser(t, e.srv.URL)
		ar, csrf := b.start("a-verifier-of-at-least-forty-three-characters-long", nil)
		_, wrong := b.login(ar, csrf, "alice", "not the password")
		_, unknown := b.login(ar, csrf, "nobody", password)
		for _, body := range []string{wrong, unknown} {
			if !strings.Contains(body, "The username or the password is wrong.") || !strings.Contains(body, `name="password"`) {
				t.Fatalf("failed sign-in page: %.500s", body)
			}
		}
		if b.landed != nil {
			t.Fatal("a failed sign-in redirected")
		}
	})

	t.Run("a form without its cookie is refused", func(t *testing.T) {
		b := newBrowser(t, e.srv.URL)
		ar, _ := b.start("a-verifier-of-at-least-forty-three-characters-long", nil)
		other := newBrowser(t, e.srv.URL) // another site's page posting the form: no cookie
		res, _ := other.login(ar, "forged", "alice", password)
		if res.StatusCode != http.StatusForbidden || other.landed != nil {
			t.Fatalf("forged form: %d, landed %v", res.StatusCode, other.landed)
		}
	})

	t.Run("refused requests", func(t *testing.T) {
		for _, tt := range []struct {
			name  string
			extra url.Values
		}{
			{"no PKCE", url.Values{"code_challenge": {""}, "code_challenge_method": {""}}},
			{"plain PKCE", url.Values{"code_challenge_method": {"plain"}}},
			{"foreign redirect", url.Values{"redirect_uri": {"https://evil.example/console/"}}},
			{"redirect outside the console", url.Values{"redirect_uri": {e.srv.URL + "/graphiql"}}},
			{"unknown client", url.Values{"client_id": {"someone"}}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				b := newBrowser(t, e.srv.URL)
				q := url.Values{"client_id": {idp.ConsoleClientID}, "redirect_uri": {e.srv.URL + "/console/"}, "response_type": {"code"},
					"scope": {"openid"}, "state": {"s"}, "code_challenge": {"x"}, "code_challenge_method": {"S256"}}
				for k, v := range tt.extra {
					q[k] = v
				}
				req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/oauth/v2/authorize?"+q.Encode(), nil)
				res, _ := b.do(req)
				if res.Request.URL.Path == "/login" && res.StatusCode == http.StatusOK {
					t.Fatal("reached the login page")
				}
				if b.landed != nil && b.landed.Query().Get("error") == "" {
					t.Fatalf("redirected without an error: %s", b.landed)
				}
				if b.landed != nil && strings.HasPrefix(b.landed.String(), "https://evil") {
					t.Fatal("redirected to a foreign address")
				}
			})
		}
	})
}

// TestSignInThrottle: five failures for one username from one address,
// then the page says to wait (429), even with the right password.
func TestSignInThrottle(t *testing.T) {
	e := newSignInEnv(t)
	b := newBrowser(t, e.srv.URL)
	ar, csrf := b.start("a-verifier-of-at-least-forty-three-characters-long", nil)
	for range 5 {
		b.login(ar, csrf, "alice", "not the password")
	}
	res, body := b.login(ar, csrf, "alice", password)
	if res.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, "Too many failed sign-ins") || res.Header.Get("Retry-After") == "" {
		t.Fatalf("sixth try: %d %.300s", res.StatusCode, body)
	}
}
