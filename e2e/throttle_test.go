package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/mountd/mountd/core"
)

// tokenStatus asks for a token with client_secret_post and returns the status.
func (in *instance) tokenStatus(t *testing.T, clientID, secret string) int {
	t.Helper()
	res, err := http.PostForm(in.base+"/oauth/v2/token", url.Values{"grant_type": {"client_credentials"},
		"scope": {"openid sub " + audItem}, "client_id": {clientID}, "client_secret": {secret}})
	if err != nil {
		t.Error(err)
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// loginForm is a sign-in in progress in one browser: the login page's
// form, which takes any number of failed posts.
type loginForm struct {
	in      *instance
	browser *http.Client
	fields  url.Values
	landed  *url.URL
}

// newBrowser returns a browser with its own cookie jar that stops at the
// redirect back to the console.
func newBrowser() *http.Client {
	jar, _ := cookiejar.New(nil)
	return &http.Client{Jar: jar}
}

// startSignIn opens the login page in browser as the console does
// (authorize with PKCE, then the form).
func (in *instance) startSignIn(t *testing.T, browser *http.Client) *loginForm {
	t.Helper()
	f := &loginForm{in: in, fields: url.Values{}}
	b := *browser
	b.CheckRedirect = func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.Path, "/console/") {
			f.landed = req.URL
			return http.ErrUseLastResponse
		}
		return nil
	}
	f.browser = &b
	sum := sha256.Sum256([]byte("v-" + strings.Repeat("y", 50)))
	q := url.Values{"client_id": {"mountd-console"}, "redirect_uri": {in.base + "/console/"}, "response_type": {"code"},
		"scope": {"openid offline_access"}, "state": {"s1"}, "code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"}}
	res, err := f.browser.Get(in.base + "/oauth/v2/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	for _, m := range loginField.FindAllStringSubmatch(string(page), -1) {
		f.fields.Set(m[1], m[2])
	}
	if f.fields.Get("authRequest") == "" {
		t.Fatalf("no login form (%d): %.300s", res.StatusCode, page)
	}
	return f
}

// post sends the form with a username and password: the status, and
// whether the browser was sent back to the console (signed in).
func (f *loginForm) post(t *testing.T, username, password string) (int, bool) {
	form := url.Values{"username": {username}, "password": {password}}
	for k, v := range f.fields {
		form[k] = v
	}
	res, err := f.browser.PostForm(f.in.base+"/login", form)
	if err != nil {
		t.Error(err)
		return 0, false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, f.landed != nil
}

// TestClientAuthFailuresOfOthers: failed authentications of other clients
// from one address never refuse a correct secret from there; failures
// naming unknown client ids count per address.
func TestClientAuthFailuresOfOthers(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			per, perAddress := core.ClientFailuresPerSource.Limit, core.UnknownClientFailuresPerAddress.Limit
			var clients []credentials
			for i := range perAddress/per + 1 {
				clients = append(clients, in.createAccount(fmt.Sprint("Tenant ", i)))
			}
			good := clients[len(clients)-1]
			for i := range perAddress {
				if s := in.tokenStatus(t, clients[i/per].ClientID, "not-the-secret"); s != http.StatusUnauthorized {
					t.Fatalf("failure %d: %d", i+1, s)
				}
			}
			if s := in.tokenStatus(t, good.ClientID, good.ClientSecret); s != http.StatusOK {
				t.Fatalf("a correct secret after %d failures of other clients from its address: %d", perAddress, s)
			}
			for i := range perAddress {
				if s := in.tokenStatus(t, fmt.Sprintf("cli_nobody%d", i), "not-the-secret"); s != http.StatusUnauthorized {
					t.Fatalf("unknown client id %d: %d", i+1, s)
				}
			}
			if s := in.tokenStatus(t, "cli_nobody_more", "not-the-secret"); s != http.StatusTooManyRequests {
				t.Fatalf("an unknown client id past %d from one address: %d, want 429", perAddress, s)
			}
			if s := in.tokenStatus(t, good.ClientID, good.ClientSecret); s != http.StatusOK {
				t.Fatalf("a correct secret after unknown client ids from its address: %d", s)
			}
		})
	}
}

// TestSignInKnownDevice: a browser that signed in before is not held by
// the per-address limit that failures for other usernames reached; a
// browser that never did is.
func TestSignInKnownDevice(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			acc := in.createAccount("People")
			in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", acc.AccountID, "--username", "ann",
				"--role", "owner", "--password-stdin")
			known := newBrowser()
			if _, ok := in.startSignIn(t, known).post(t, "ann", personPassword); !ok {
				t.Fatal("the first sign-in failed")
			}
			walk := in.startSignIn(t, newBrowser())
			for i := range core.SignInFailuresPerAddress.Limit {
				if s, _ := walk.post(t, fmt.Sprintf("walker%d", i), "wrong password!"); s != http.StatusUnauthorized {
					t.Fatalf("failure %d: %d", i+1, s)
				}
			}
			if s, ok := in.startSignIn(t, newBrowser()).post(t, "ann", personPassword); ok || s != http.StatusTooManyRequests {
				t.Fatalf("a new browser past the address limit: %d signed in %v, want 429", s, ok)
			}
			if s, ok := in.startSignIn(t, known).post(t, "ann", personPassword); !ok {
				t.Fatalf("ann's own browser past the address limit: %d, want signed in", s)
			}
			// The device cookie is ann's: another username from her browser is held.
			if s, _ := in.startSignIn(t, known).post(t, "bob", "wrong password!"); s != http.StatusTooManyRequests {
				t.Fatalf("another username from ann's browser: %d, want 429", s)
			}
		})
	}
}

// TestParallelFailureBursts: wrong secrets and passwords sent all at once
// get exactly their limit of tries, the rest 429.
func TestParallelFailureBursts(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			acc := in.createAccount("Burst")
			in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", acc.AccountID, "--username", "ann",
				"--role", "owner", "--password-stdin")
			burst := func(n int, try func() int) map[int]int {
				var (
					mu    sync.Mutex
					codes = map[int]int{}
					wg    sync.WaitGroup
				)
				for range n {
					wg.Go(func() {
						s := try()
						mu.Lock()
						codes[s]++
						mu.Unlock()
					})
				}
				wg.Wait()
				return codes
			}
			check := func(what string, codes map[int]int, n, limit int) {
				t.Helper()
				// A try the hash gate turns away (503, busy) is not counted;
				// on a slow machine a few may be.
				tried, busy := codes[http.StatusUnauthorized], codes[http.StatusServiceUnavailable]
				if tried > limit || busy == 0 && tried != limit || tried+busy+codes[http.StatusTooManyRequests] != n {
					t.Fatalf("%d parallel %s: statuses %v, want %d × 401 and the rest 429", n, what, codes, limit)
				}
			}
			// More correct secrets at once than the limit (servers starting
			// together behind one address): a place held by one in flight
			// frees when it succeeds, and none gets 429 (the hash gate may
			// turn some away busy on a loaded machine).
			n := core.ClientFailuresPerSource.Limit + 1
			if codes := burst(n, func() int { return in.tokenStatus(t, acc.ClientID, acc.ClientSecret) }); codes[http.StatusOK]+codes[http.StatusServiceUnavailable] != n {
				t.Fatalf("%d parallel correct secrets: statuses %v, want 200 (or 503 busy)", n, codes)
			}
			check("wrong secrets", burst(40, func() int { return in.tokenStatus(t, acc.ClientID, "not-the-secret") }),
				40, core.ClientFailuresPerSource.Limit)
			form := in.startSignIn(t, newBrowser())
			check("wrong passwords", burst(60, func() int { s, _ := form.post(t, "ann", "wrong password!"); return s }),
				60, core.SignInFailures.Limit)
		})
	}
}
