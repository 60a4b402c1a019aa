package idp

import (
	"crypto/rand"
	"crypto/subtle"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/mountd/mountd/core"
)

// pathLogin is the sign-in page the authorize endpoint sends people to.
const pathLogin = "/login"

// loginCookie carries the form's anti-forgery token: a form posted from
// another site has no such cookie (SameSite=Strict), and the token in the
// form must equal it.
const loginCookie = "mountd_login"

// loginPage is self-contained: no script, no remote font or style, so it
// works on an air-gapped network and under a strict Content-Security-Policy.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Sign in · mountd</title>
<style>
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;background:#f4f5f7;color:#1d2330;margin:0;display:flex;min-height:100vh;align-items:center;justify-content:center}
main{background:#fff;border:1px solid #d9dde3;border-radius:10px;padding:32px;width:min(360px,90vw);box-shadow:0 2px 8px rgba(0,0,0,.06)}
h1{font-size:22px;margin:0 0 4px}
p.sub{margin:0 0 24px;color:#5b6474}
label{display:block;font-weight:600;margin:16px 0 6px}
input{box-sizing:border-box;width:100%;padding:10px 12px;border:1px solid #b8bfca;border-radius:6px;font:inherit}
input:focus{outline:2px solid #2f6fde;border-color:#2f6fde}
button{margin-top:24px;width:100%;padding:11px;border:0;border-radius:6px;background:#2f6fde;color:#fff;font:inherit;font-weight:600;cursor:pointer}
button:hover{background:#2459b8}
.message{margin:0 0 8px;padding:10px 12px;border-radius:6px;background:#fdecec;color:#8a1c1c;border:1px solid #f3c2c2}
</style>
</head>
<body>
<main>
<h1>Sign in</h1>
<p class="sub">mountd console</p>
{{if .Message}}<p class="message" role="alert">{{.Message}}</p>{{end}}
<form method="post" action="/login" autocomplete="on">
<input type="hidden" name="authRequest" value="{{.AuthRequest}}">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="username">Username</label>
<input id="username" name="username" autocomplete="username" required autofocus value="{{.Username}}">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required>
<button type="submit">Sign in</button>
</form>
</main>
</body>
</html>
`))

type loginView struct {
	AuthRequest, CSRF, Username, Message string
}

// Messages of the sign-in page. A failure never says which of the two
// fields was wrong.
const (
	msgWrong   = "The username or the password is wrong."
	msgExpired = "This sign-in has expired. Go back to the console and start again."
	msgBusy    = "The server is busy. Try again in a moment."
)

func (p *Provider) renderLogin(w http.ResponseWriter, status int, v loginView) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = loginPage.Execute(w, v)
}

// serveLoginForm shows the form for a sign-in in progress, with a fresh
// anti-forgery token.
func (p *Provider) serveLoginForm(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("authRequest")
	req, err := p.store.signIn.Sessions.SignIn(r.Context(), id)
	if err != nil {
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgExpired})
		return
	}
	if !sameBrowser(r, req) {
		p.renderLogin(w, http.StatusForbidden, loginView{Message: msgOtherBrowser})
		return
	}
	p.renderLogin(w, http.StatusOK, loginView{AuthRequest: id, CSRF: p.setLoginCookie(w, r)})
}

func (p *Provider) setLoginCookie(w http.ResponseWriter, r *http.Request) string {
	token := rand.Text()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: token, Path: pathLogin, HttpOnly: true,
		Secure: p.secureCookies(r), SameSite: http.SameSiteStrictMode, MaxAge: int(core.AuthRequestTTL / time.Second)})
	return token
}

// serveLogin checks the form: the anti-forgery token, then the person's
// credentials (throttled per username and address in core), then hands the
// sign-in back to zitadel, which redirects to the console with a code.
func (p *Provider) serveLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgExpired})
		return
	}
	id, username := r.PostForm.Get("authRequest"), r.PostForm.Get("username")
	cookie, err := r.Cookie(loginCookie)
	csrf := r.PostForm.Get("csrf")
	if err != nil || csrf == "" || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(csrf)) != 1 {
		// A form from elsewhere, or cookies off: show a fresh form.
		p.renderLogin(w, http.StatusForbidden, loginView{AuthRequest: id, CSRF: p.setLoginCookie(w, r), Username: username,
			Message: "The form expired. Sign in again."})
		return
	}
	ctx := r.Context()
	req, err := p.store.signIn.Sessions.SignIn(ctx, id)
	if err != nil {
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgExpired})
		return
	}
	if !sameBrowser(r, req) {
		p.renderLogin(w, http.StatusForbidden, loginView{Message: msgOtherBrowser})
		return
	}
	user, err := p.store.signIn.Users.SignIn(ctx, username, r.PostForm.Get("password"),
		core.SignInSource{Address: sourceFrom(withSource(ctx, r)), KnownDevice: p.devices.known(r, username)})
	if err != nil {
		view := loginView{AuthRequest: id, CSRF: csrf, Username: username}
		status := http.StatusUnauthorized
		switch core.ErrorCode(err) {
		case core.CodeUnauthenticated:
			view.Message = msgWrong
		case core.CodeRateLimited:
			status = http.StatusTooManyRequests
			wait := time.Minute
			if e, ok := err.(*core.Error); ok && e.RetryAfter > 0 {
				wait = e.RetryAfter
			}
			w.Header().Set("Retry-After", retryAfterSeconds(wait))
			view.Message = "Too many failed sign-ins. Wait " + waitText(wait) + " before trying again."
		case core.CodeUnavailable:
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "1")
			view.Message = msgBusy
		default:
			p.log.ErrorContext(ctx, "sign-in failed", "err", err)
			status = http.StatusServiceUnavailable
			w.Header().Set("Retry-After", "5")
			view.Message = msgBusy
		}
		p.renderLogin(w, status, view)
		return
	}
	if err := p.store.signIn.Sessions.CompleteSignIn(ctx, id, user); err != nil {
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgExpired})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: pathLogin, MaxAge: -1})
	p.devices.set(w, p.secureCookies(r), user.Username)
	p.log.InfoContext(ctx, "person signed in", "user_id", user.ID, "account_id", user.AccountID)
	http.Redirect(w, r, p.callbackURL+url.QueryEscape(id), http.StatusFound)
}

// waitText says a wait in whole minutes (or seconds below one).
func waitText(d time.Duration) string {
	if d < time.Minute {
		s := max(1, int(d/time.Second))
		if s == 1 {
			return "a second"
		}
		return strconv.Itoa(s) + " seconds"
	}
	m := int((d + time.Minute - 1) / time.Minute)
	if m == 1 {
		return "a minute"
	}
	return strconv.Itoa(m) + " minutes"
}

// serveRevoke is RFC 7009 for the console's refresh tokens: signing out
// revokes the whole sign-in (the token's family). Unknown tokens, and access
// tokens (JWTs, which expire on their own), are answered 200 like any other,
// so the endpoint tells nothing about a token.
func (p *Provider) serveRevoke(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil || r.PostForm.Get("token") == "" {
		p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("token missing"), false)
		return
	}
	if id := r.PostForm.Get("client_id"); id != ConsoleClientID {
		p.oauthError(w, r, oidc.ErrInvalidClient().WithDescription("only the console's tokens are revoked here"), false)
		return
	}
	if err := p.store.signIn.Sessions.SignOut(r.Context(), r.PostForm.Get("token")); err != nil {
		p.log.ErrorContext(r.Context(), "revoke failed", "err", err)
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, &oidc.Error{ErrorType: errTemporarilyUnavailable, Description: "retry shortly"})
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// secureCookies tells whether the cookies set for r must be Secure: the
// request came over TLS, or the public address is https (TLS at a proxy).
func (p *Provider) secureCookies(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(p.cfg.Issuer, "https://")
}
