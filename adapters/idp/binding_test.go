package idp_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/mountd/mountd/adapters/idp"
)

const testVerifier = "a-verifier-of-at-least-forty-three-characters-long"

// noRedirects is a client without cookies that shows every redirect.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func get(t *testing.T, c *http.Client, target string, header http.Header) (*http.Response, string) {
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

// codeIn returns the code a redirect carries, if any.
func codeIn(res *http.Response) string {
	loc, err := url.Parse(res.Header.Get("Location"))
	if err != nil {
		return ""
	}
	return loc.Query().Get("code")
}

// TestSignInBoundToBrowser: a sign-in belongs to the browser that opened
// the authorize URL. Whoever starts one cannot have someone else sign in
// at its link and collect the code; and a sign-in yields one code only.
func TestSignInBoundToBrowser(t *testing.T) {
	e := newSignInEnv(t)

	t.Run("a sign-in link opened in another browser is refused", func(t *testing.T) {
		attacker := newBrowser(t, e.srv.URL)
		ar, _ := attacker.start(testVerifier, nil)

		victim := newBrowser(t, e.srv.URL)
		res, page := victim.do(mustGet(t, e.srv.URL+"/login?authRequest="+url.QueryEscape(ar)))
		if res.StatusCode != http.StatusForbidden || !strings.Contains(page, "started in another browser") {
			t.Fatalf("the link in another browser: %d %.300s", res.StatusCode, page)
		}
		csrf := "none"
		for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
			if m[1] == "csrf" && m[2] != "" {
				csrf = m[2]
			}
		}
		// Without the form's token the form comes again; with it, the
		// sign-in is still refused.
		for range 2 {
			res, page = victim.login(ar, csrf, "alice", password)
			if res.StatusCode != http.StatusForbidden || victim.landed != nil {
				t.Fatalf("signing in at the link in another browser: %d, landed %v: %.300s", res.StatusCode, victim.landed, page)
			}
			for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
				if m[1] == "csrf" {
					csrf = m[2]
				}
			}
		}
		if !strings.Contains(page, "started in another browser") {
			t.Fatalf("signing in at the link in another browser: %.300s", page)
		}
		for _, c := range []*http.Client{noRedirects, attacker.c} {
			res, body := get(t, c, e.srv.URL+"/oauth/v2/authorize/callback?id="+url.QueryEscape(ar), nil)
			if code := codeIn(res); code != "" {
				t.Fatalf("the callback gave a code for a sign-in nobody finished: %d %s", res.StatusCode, res.Header.Get("Location"))
			}
			if res.StatusCode == http.StatusInternalServerError {
				t.Fatalf("callback: 500 %s", body)
			}
		}
	})

	t.Run("only the browser that started it gets the code, once", func(t *testing.T) {
		b := newBrowser(t, e.srv.URL)
		b.c.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
			if req.URL.Path == "/oauth/v2/authorize/callback" {
				return http.ErrUseLastResponse
			}
			return nil
		}
		ar, csrf := b.start(testVerifier, nil)
		res, _ := b.login(ar, csrf, "alice", password)
		callback := res.Header.Get("Location")
		if res.StatusCode != http.StatusFound || !strings.Contains(callback, "/oauth/v2/authorize/callback?id=") {
			t.Fatalf("sign-in: %d to %q", res.StatusCode, callback)
		}
		if !strings.HasPrefix(callback, "http") {
			callback = e.srv.URL + callback
		}

		res, page := get(t, noRedirects, callback, nil)
		if codeIn(res) != "" || res.StatusCode != http.StatusForbidden || !strings.Contains(page, "started in another browser") {
			t.Fatalf("callback without the browser's cookie: %d %s %.200s", res.StatusCode, res.Header.Get("Location"), page)
		}
		own := &http.Client{Jar: b.c.Jar, CheckRedirect: noRedirects.CheckRedirect}
		res, _ = get(t, own, callback, nil)
		code := codeIn(res)
		if code == "" {
			t.Fatalf("callback in the browser that started it: %d %s", res.StatusCode, res.Header.Get("Location"))
		}
		res, page = get(t, own, callback, nil)
		if codeIn(res) != "" || res.StatusCode == http.StatusInternalServerError {
			t.Fatalf("second callback: %d %s %.200s", res.StatusCode, res.Header.Get("Location"), page)
		}
		status, tok := tokenCall(t, e.srv.URL, url.Values{"grant_type": {"authorization_code"}, "code": {code},
			"redirect_uri": {e.srv.URL + "/console/"}, "client_id": {idp.ConsoleClientID}, "code_verifier": {testVerifier}})
		if status != http.StatusOK || tok["refresh_token"] == nil {
			t.Fatalf("exchanging the one code: %d %v", status, tok)
		}
	})

	t.Run("two sign-ins in one browser both finish", func(t *testing.T) {
		b := newBrowser(t, e.srv.URL)
		first, _ := b.start(testVerifier, nil)
		second, csrf := b.start(testVerifier, nil)
		if res, page := b.login(second, csrf, "alice", password); b.landed == nil || b.landed.Query().Get("code") == "" {
			t.Fatalf("the second sign-in: %d %.300s", res.StatusCode, page)
		}
		// The first tab's form is shown again (its anti-forgery token was replaced).
		res, page := b.do(mustGet(t, e.srv.URL+"/login?authRequest="+url.QueryEscape(first)))
		csrf = ""
		for _, m := range hiddenField.FindAllStringSubmatch(page, -1) {
			if m[1] == "csrf" {
				csrf = m[2]
			}
		}
		if res.StatusCode != http.StatusOK || csrf == "" {
			t.Fatalf("the first sign-in's form: %d %.300s", res.StatusCode, page)
		}
		if res, page := b.login(first, csrf, "alice", password); b.landed == nil || b.landed.Query().Get("code") == "" {
			t.Fatalf("the first sign-in: %d %.300s", res.StatusCode, page)
		}
	})

	t.Run("the cookie", func(t *testing.T) {
		res, _ := get(t, noRedirects, authorizeURL(e.srv.URL, nil), nil)
		var found int
		for _, c := range res.Cookies() {
			if c.Name != "mountd_signin" {
				continue
			}
			found++
			if !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || (c.Path != "/login" && c.Path != "/oauth/v2/authorize") || c.MaxAge != 600 {
				t.Errorf("cookie %+v", c)
			}
		}
		if found != 2 {
			t.Fatalf("authorize set %d sign-in cookies, want one for /login and one for the callback: %v", found, res.Header.Values("Set-Cookie"))
		}
	})
}

func mustGet(t *testing.T, target string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, target, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// authorizeURL is the console's authorize URL with some parameters changed.
func authorizeURL(base string, extra url.Values) string {
	q := url.Values{"client_id": {idp.ConsoleClientID}, "redirect_uri": {base + "/console/"}, "response_type": {"code"},
		"scope": {"openid offline_access"}, "state": {"st4te"}, "code_challenge": {"E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"},
		"code_challenge_method": {"S256"}}
	for k, v := range extra {
		q[k] = v
	}
	return base + "/oauth/v2/authorize?" + q.Encode()
}

// TestAuthorizeBounds: oversized, repeated or malformed parameters are
// refused before anything is stored, and one source address has at most
// 100 sign-ins open at once.
func TestAuthorizeBounds(t *testing.T) {
	e := newSignInEnv(t)
	long := strings.Repeat("x", 513)
	for _, tt := range []struct {
		name  string
		extra url.Values
		raw   string // appended to the query as is
	}{
		{"a 60 KB state", url.Values{"state": {strings.Repeat("s", 60<<10)}}, ""},
		{"a long state", url.Values{"state": {long}}, ""},
		{"a long nonce", url.Values{"nonce": {long}}, ""},
		{"a long redirect_uri", url.Values{"redirect_uri": {e.srv.URL + "/console/" + long}}, ""},
		{"a long scope", url.Values{"scope": {strings.TrimSpace(strings.Repeat("openid ", 80))}}, ""},
		{"a long code_challenge", url.Values{"code_challenge": {long}}, ""},
		{"a long login_hint", url.Values{"login_hint": {long}}, ""},
		{"a long response_mode", url.Values{"response_mode": {long}}, ""},
		{"a repeated state", nil, "&state=again"},
		{"a redirect_uri with a fragment", url.Values{"redirect_uri": {e.srv.URL + "/console/#top"}}, ""},
		{"a redirect_uri with an encoded fragment", url.Values{"redirect_uri": {e.srv.URL + "/console/%23x"}}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, body := get(t, noRedirects, authorizeURL(e.srv.URL, tt.extra)+tt.raw, nil)
			var out map[string]any
			_ = json.Unmarshal([]byte(body), &out)
			if res.StatusCode != http.StatusBadRequest || out["error"] != "invalid_request" || res.Header.Get("Location") != "" {
				t.Fatalf("answered %d %s: %.300s", res.StatusCode, res.Header.Get("Location"), body)
			}
		})
	}

	t.Run("100 open sign-ins per source address", func(t *testing.T) {
		from := func(addr string) http.Header { return http.Header{sourceHeader: {addr}} }
		for i := range 100 {
			if res, body := get(t, noRedirects, authorizeURL(e.srv.URL, nil), from("198.51.100.7")); res.StatusCode != http.StatusFound ||
				!strings.HasPrefix(res.Header.Get("Location"), "/login?") {
				t.Fatalf("sign-in %d: %d %s %.200s", i+1, res.StatusCode, res.Header.Get("Location"), body)
			}
		}
		res, body := get(t, noRedirects, authorizeURL(e.srv.URL, nil), from("198.51.100.7"))
		var out map[string]any
		_ = json.Unmarshal([]byte(body), &out)
		if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || out["error"] == nil {
			t.Fatalf("the 101st: %d %s %.300s", res.StatusCode, res.Header.Get("Location"), body)
		}
		if res, _ := get(t, noRedirects, authorizeURL(e.srv.URL, nil), from("198.51.100.8")); res.StatusCode != http.StatusFound {
			t.Fatalf("another address: %d", res.StatusCode)
		}
	})
}
