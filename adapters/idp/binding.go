package idp

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/mountd/mountd/core"
)

// signInCookie binds a sign-in to the browser that opened the authorize URL:
// it holds a secret whose hash the sign-in stores, and the login page and
// the callback that hands out the code want it back. Without it, whoever
// starts a sign-in could send its login link to someone else and collect
// the code once they signed in. One secret serves every sign-in of the
// browser, so two tabs can sign in at once.
const signInCookie = "mountd_signin"

// Messages of the pages a sign-in in the wrong browser, or used, sees.
const (
	msgOtherBrowser = "This sign-in was started in another browser. Open the console in this browser and sign in from there."
	msgUsed         = "This sign-in has been used already. Go back to the console and start again."
)

// browserSecret is the secret of the browser's cookie when it sent a
// well-formed one (a value from rand.Text), else a new one.
func browserSecret(r *http.Request) string {
	if c, err := r.Cookie(signInCookie); err == nil && len(c.Value) == len(rand.Text()) &&
		strings.Trim(c.Value, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") == "" {
		return c.Value
	}
	return rand.Text()
}

// setSignInCookies sends the secret to the two places that check it: the
// login page and the callback under the authorize path. It lives as long
// as a sign-in; Lax lets the top-level redirects of the flow carry it.
func (p *Provider) setSignInCookies(w http.ResponseWriter, r *http.Request, secret string) {
	for _, path := range []string{pathLogin, pathAuthorize} {
		http.SetCookie(w, &http.Cookie{Name: signInCookie, Value: secret, Path: path, HttpOnly: true,
			Secure: p.secureCookies(r), SameSite: http.SameSiteLaxMode,
			MaxAge: int(core.AuthRequestTTL / time.Second)})
	}
}

// sameBrowser tells whether r comes from the browser that started req.
func sameBrowser(r *http.Request, req core.AuthRequest) bool {
	c, err := r.Cookie(signInCookie)
	if err != nil || req.BrowserHash == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(core.TokenHash(c.Value)), []byte(req.BrowserHash)) == 1
}

// authorizeCall carries the browser's secret through zitadel's Authorize
// to CreateAuthRequest.
type authorizeCall struct {
	secret  string
	started func() // sets the cookies, once the sign-in is stored
}

type authorizeKey struct{}

// serveAuthorize is zitadel's authorize endpoint behind mountd's bounds:
// the query's, then the open sign-ins of the source address. Refusals are
// answered here as JSON, never redirected to the client: an oversized
// state cannot be echoed back, and a flood gains nothing from a redirect.
func (p *Provider) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	if err := checkAuthorizeQuery(r.URL.RawQuery); err != nil {
		p.oauthError(w, r, err, false)
		return
	}
	ctx := withSource(op.ContextWithIssuer(r.Context(), p.cfg.Issuer), r)
	if err := p.store.signIn.Sessions.AdmitSignIn(ctx, sourceFrom(ctx)); err != nil {
		p.oauthError(w, r, clientAuthError(err), false)
		return
	}
	secret := browserSecret(r)
	call := &authorizeCall{secret: secret, started: func() { p.setSignInCookies(w, r, secret) }}
	op.Authorize(w, r.WithContext(context.WithValue(ctx, authorizeKey{}, call)), p.op)
}

// maxAuthorizeQuery bounds an authorize query as sent: room for a dozen
// parameters of core.MaxSignInParam bytes, each percent-encoded.
const maxAuthorizeQuery = 16 << 10

// checkAuthorizeQuery refuses what would be stored oversized, or read
// ambiguously: each parameter once (RFC 6749 §3.1) and at most
// core.MaxSignInParam bytes, and a redirect_uri without a fragment
// (RFC 6749 §3.1.2).
func checkAuthorizeQuery(raw string) error {
	// Refused before it is parsed: a flood of long queries would
	// otherwise cost a decoded copy of each.
	if len(raw) > maxAuthorizeQuery {
		return oidc.ErrInvalidRequest().WithDescription("the query is longer than %d bytes", maxAuthorizeQuery)
	}
	q, err := url.ParseQuery(raw)
	if err != nil {
		return oidc.ErrInvalidRequest().WithDescription("the query is malformed")
	}
	for k, vs := range q {
		switch {
		case len(k) > 64:
			return oidc.ErrInvalidRequest().WithDescription("a parameter name is longer than 64 bytes")
		case len(vs) > 1:
			return oidc.ErrInvalidRequest().WithDescription("%s is given more than once", k)
		case len(vs[0]) > core.MaxSignInParam:
			return oidc.ErrInvalidRequest().WithDescription("%s is longer than %d bytes", k, core.MaxSignInParam)
		}
	}
	redirect := q.Get("redirect_uri")
	unescaped, err := url.QueryUnescape(redirect) // what zitadel matches against the console's addresses
	if strings.Contains(redirect, "#") || err != nil || strings.Contains(unescaped, "#") {
		return oidc.ErrInvalidRequest().WithDescription("redirect_uri must not have a fragment")
	}
	return nil
}

// serveCallback hands out the code of a finished sign-in, to the browser
// that started it and once; zitadel's AuthorizeCallback does the rest.
func (p *Provider) serveCallback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	req, err := p.store.signIn.Sessions.SignIn(ctx, r.URL.Query().Get("id"))
	switch {
	case core.ErrorCode(err) == core.CodeNotFound:
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgExpired})
		return
	case err != nil:
		p.log.ErrorContext(ctx, "sign-in callback failed", "err", err)
		w.Header().Set("Retry-After", "5")
		p.renderLogin(w, http.StatusServiceUnavailable, loginView{Message: msgBusy})
		return
	case !sameBrowser(r, req):
		p.renderLogin(w, http.StatusForbidden, loginView{Message: msgOtherBrowser})
		return
	case req.CodeHash != "":
		p.renderLogin(w, http.StatusBadRequest, loginView{Message: msgUsed})
		return
	}
	op.AuthorizeCallback(w, r.WithContext(op.ContextWithIssuer(ctx, p.cfg.Issuer)), p.op)
}
