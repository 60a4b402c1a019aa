package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
)

// signInClient is a browser (cookies kept, redirects shown) or, without a
// jar, a script that keeps no cookies.
func signInClient(jar bool) *http.Client {
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if jar {
		c.Jar, _ = cookiejar.New(nil)
	}
	return c
}

func authorizeQuery(base, verifier string) url.Values {
	sum := sha256.Sum256([]byte(verifier))
	return url.Values{"client_id": {"mountd-console"}, "redirect_uri": {base + "/console/"}, "response_type": {"code"},
		"scope": {"openid offline_access"}, "state": {"s1"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}}
}

func signInGet(t *testing.T, c *http.Client, target string, header http.Header) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res, string(body)
}

// loginFields reads the login form's hidden fields.
func loginFields(page string) url.Values {
	form := url.Values{}
	for _, m := range loginField.FindAllStringSubmatch(page, -1) {
		form.Set(m[1], m[2])
	}
	return form
}

func redirectCode(res *http.Response) string {
	loc, _ := url.Parse(res.Header.Get("Location"))
	if loc == nil {
		return ""
	}
	return loc.Query().Get("code")
}

// TestSignInFixation: whoever opens the authorize URL cannot send the login
// link to someone else and collect their tokens. The person signing in at
// the link is refused (the sign-in belongs to the browser that started
// it); a caller without that browser's cookie gets no code at the
// callback; and a sign-in yields one code, not a fresh one per callback.
func TestSignInFixation(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			f := newFleet(in, "Fix")
			in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", f.creds.AccountID, "--username", "victim",
				"--role", "owner", "--password-stdin")
			const verifier = "attacker-verifier-of-at-least-forty-three-characters"

			// The attacker starts a sign-in and sends the login link.
			attacker := signInClient(true)
			res, _ := signInGet(t, attacker, in.base+"/oauth/v2/authorize?"+authorizeQuery(in.base, verifier).Encode(), nil)
			link := res.Header.Get("Location")
			if res.StatusCode != http.StatusFound || !strings.HasPrefix(link, "/login?authRequest=") {
				t.Fatalf("authorize: %d %q", res.StatusCode, link)
			}
			ar := strings.TrimPrefix(link, "/login?authRequest=")

			// The victim opens it in their own browser and signs in.
			victim := signInClient(true)
			res, page := signInGet(t, victim, in.base+link, nil)
			if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "started in another browser") {
				t.Errorf("the login link in the victim's browser: %d, want 403 saying so", res.StatusCode)
			}
			form := loginFields(page)
			form.Set("authRequest", ar)
			form.Set("username", "victim")
			form.Set("password", personPassword)
			res, err := victim.PostForm(in.base+"/login", form)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("the victim signing in at the attacker's link: %d %s, want 403", res.StatusCode, res.Header.Get("Location"))
			}

			// The attacker collects, with no cookie and with its own.
			for _, c := range []*http.Client{signInClient(false), attacker} {
				for range 2 {
					res, body := signInGet(t, c, in.base+"/oauth/v2/authorize/callback?id="+url.QueryEscape(ar), nil)
					if code := redirectCode(res); code != "" {
						status, raw := in.exchangeCode(t, code, verifier)
						t.Fatalf("the attacker got a code at the callback (exchange: %d %.80s)", status, raw)
					}
					if res.StatusCode >= 500 {
						t.Fatalf("callback: %d %.200s", res.StatusCode, body)
					}
				}
			}

			// A person's own sign-in: the callback answers once, in their browser only.
			person := signInClient(true)
			res, page = signInGet(t, person, in.base+"/oauth/v2/authorize?"+authorizeQuery(in.base, verifier).Encode(), nil)
			res, page = signInGet(t, person, in.base+res.Header.Get("Location"), nil)
			form = loginFields(page)
			form.Set("username", "victim")
			form.Set("password", personPassword)
			res, err = person.PostForm(in.base+"/login", form)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			callback := res.Header.Get("Location")
			if !strings.Contains(callback, "/oauth/v2/authorize/callback?id=") {
				t.Fatalf("sign-in: %d to %q", res.StatusCode, callback)
			}
			if res, _ := signInGet(t, signInClient(false), callback, nil); redirectCode(res) != "" || res.StatusCode != http.StatusForbidden {
				t.Fatalf("the callback without the person's cookie: %d %s", res.StatusCode, res.Header.Get("Location"))
			}
			res, _ = signInGet(t, person, callback, nil)
			code := redirectCode(res)
			if code == "" {
				t.Fatalf("the callback in the person's browser: %d %s", res.StatusCode, res.Header.Get("Location"))
			}
			if res, body := signInGet(t, person, callback, nil); redirectCode(res) != "" || res.StatusCode >= 500 {
				t.Fatalf("a second callback: %d %s %.200s", res.StatusCode, res.Header.Get("Location"), body)
			}
			if status, raw := in.exchangeCode(t, code, verifier); status != http.StatusOK {
				t.Fatalf("the one code: %d %s", status, raw)
			}
		})
	}
}

func (in *instance) exchangeCode(t *testing.T, code, verifier string) (int, string) {
	t.Helper()
	res, err := http.PostForm(in.base+"/oauth/v2/token", url.Values{"grant_type": {"authorization_code"}, "code": {code},
		"redirect_uri": {in.base + "/console/"}, "client_id": {"mountd-console"}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw)
}

// TestSignInBounds: the authorize endpoint stores nothing oversized and
// keeps at most 100 sign-ins open per source address, so unauthenticated
// callers cannot fill the database.
func TestSignInBounds(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.TrustedProxies = "127.0.0.1" // X-Forwarded-For names the source address
			in := start(t, cfg)
			from := func(addr string) http.Header { return http.Header{"X-Forwarded-For": {addr}} }
			script := signInClient(false)
			authorize := func(edit func(url.Values), addr string) (*http.Response, map[string]any) {
				q := authorizeQuery(in.base, "a-verifier-of-at-least-forty-three-characters")
				if edit != nil {
					edit(q)
				}
				res, body := signInGet(t, script, in.base+"/oauth/v2/authorize?"+q.Encode(), from(addr))
				var out map[string]any
				_ = json.Unmarshal([]byte(body), &out)
				return res, out
			}

			for name, edit := range map[string]func(url.Values){
				"60 KB state":                func(q url.Values) { q.Set("state", strings.Repeat("s", 60<<10)) },
				"long nonce":                 func(q url.Values) { q.Set("nonce", strings.Repeat("n", 513)) },
				"long redirect_uri":          func(q url.Values) { q.Set("redirect_uri", in.base+"/console/"+strings.Repeat("r", 600)) },
				"redirect_uri with fragment": func(q url.Values) { q.Set("redirect_uri", in.base+"/console/#top") },
			} {
				res, out := authorize(edit, "203.0.113.1")
				if res.StatusCode != http.StatusBadRequest || out["error"] != "invalid_request" {
					t.Errorf("%s: %d %s %v, want 400 invalid_request", name, res.StatusCode, res.Header.Get("Location"), out)
				}
			}

			// Nothing of the refused sign-ins was stored.
			dbURL := cfg.DatabaseURL
			if dbURL == "" {
				dbURL = "sqlite://" + filepath.Join(cfg.DataDir, "mountd.db")
			}
			store, closeStore, err := bunstore.Open(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			stored := func() int {
				n, _, err := store.OpenSignIns(context.Background(), "203.0.113.1", time.Now().Add(-time.Hour), 1000)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := stored(); n != 0 {
				t.Fatalf("%d refused sign-ins were stored", n)
			}

			for i := range 100 {
				if res, out := authorize(nil, "203.0.113.1"); res.StatusCode != http.StatusFound {
					t.Fatalf("sign-in %d: %d %v", i+1, res.StatusCode, out)
				}
			}
			res, out := authorize(nil, "203.0.113.1")
			if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || out["error"] == nil {
				t.Fatalf("the 101st open sign-in: %d %s %v, want 429 with Retry-After", res.StatusCode, res.Header.Get("Location"), out)
			}
			if n := stored(); n != 100 {
				t.Fatalf("%d sign-ins stored, want the 100 admitted", n)
			}
			if res, out := authorize(nil, "203.0.113.2"); res.StatusCode != http.StatusFound {
				t.Fatalf("another address: %d %v", res.StatusCode, out)
			}
			if res, out := authorize(nil, "2001:db8:7:7::1"); res.StatusCode != http.StatusFound {
				t.Fatalf("an IPv6 address: %d %v", res.StatusCode, out)
			}
		})
	}
}
