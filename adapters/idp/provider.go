// Package idp is mountd's embedded OpenID Connect identity provider. API
// clients trade their credentials for RS256 JWT access tokens (the
// client_credentials grant only), which the API then verifies exactly as it
// would an external issuer's. Tokens are signed by github.com/zitadel/oidc's
// op package; nothing about a token is stored.
package idp

import (
	"context"
	"crypto"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/mountd/mountd/core"
)

// The API's endpoint paths (docs/api.md, "Identity"); the issuer is the server root.
const (
	pathDiscovery  = oidc.DiscoveryEndpoint // /.well-known/openid-configuration
	pathToken      = "/oauth/v2/token"
	pathKeys       = "/oauth/v2/keys"
	pathIntrospect = "/oauth/v2/introspect"
	pathUserinfo   = "/oidc/v1/userinfo"
	pathAuthorize  = "/oauth/v2/authorize"
	pathRevoke     = "/oauth/v2/revoke"
)

// maxFormBytes bounds token and introspection request bodies; real ones are
// well under 4 KiB.
const maxFormBytes = 64 << 10

// Config is the deployment-specific part of the provider.
type Config struct {
	// Issuer is the public URL of the server root, without a trailing slash;
	// it is written verbatim as every token's iss.
	Issuer string
	// TokenTTL is the access token lifetime; zero means one hour.
	TokenTTL time.Duration
	// Scopes knows the audience item and the shape of the other scope items.
	Scopes core.ScopeRules
	// CryptoKey is zitadel's key for opaque tokens (op.Config.CryptoKey). The
	// provider issues only JWTs, but zitadel requires one.
	CryptoKey [32]byte
	// SignIn, when set, lets people sign in: the authorization code flow
	// with PKCE for the console, its login page and refresh tokens.
	SignIn *SignIn
}

// SigningKey is the RS256 key the provider signs with. Loading and persisting
// it is the caller's job, so that every replica signs with the same key.
type SigningKey struct {
	// ID is the JWKS kid; empty means the key's RFC 7638 thumbprint.
	ID  string
	Key *rsa.PrivateKey
}

// Provider serves the identity provider's endpoints.
type Provider struct {
	cfg       Config
	log       *slog.Logger
	store     *storage
	op        *op.Provider
	verifier  *op.AccessTokenVerifier
	pub       *rsa.PublicKey
	discovery []byte
	// callbackURL is where a completed sign-in goes back to zitadel's
	// authorize flow, waiting for the sign-in's id.
	callbackURL string
	handler     http.Handler
	devices     *devices // the login page's device cookies
}

// newProviderMu serialises op.NewProvider and the discovery document it
// gives: its endpoint options write into the package-level
// op.DefaultEndpoints, and the document reads them, which would otherwise
// race when several providers are built at once (as in parallel tests).
// Nothing reads them after construction: what the provider needs of
// them later (the discovery document, the callback URL) is read here.
var newProviderMu sync.Mutex

// New builds the provider. It fails on configuration that would yield tokens
// nobody can verify: a missing key or issuer, or no project id for the
// audience.
func New(cfg Config, accounts *core.AccountService, key SigningKey, logger *slog.Logger) (*Provider, error) {
	if accounts == nil {
		return nil, errors.New("idp: no account service")
	}
	if key.Key == nil {
		return nil, errors.New("idp: no signing key")
	}
	if bits := key.Key.N.BitLen(); bits < 2048 {
		return nil, fmt.Errorf("idp: RSA signing key has %d bits, want at least 2048", bits)
	}
	if cfg.Issuer == "" || strings.HasSuffix(cfg.Issuer, "/") {
		return nil, fmt.Errorf("idp: issuer %q must be a URL without a trailing slash", cfg.Issuer)
	}
	if cfg.Scopes.ProjectID == "" {
		return nil, errors.New("idp: no project id for the audience scope item")
	}
	if cfg.TokenTTL == 0 {
		cfg.TokenTTL = time.Hour
	}
	if cfg.TokenTTL < time.Second {
		return nil, fmt.Errorf("idp: token lifetime %s is shorter than a second", cfg.TokenTTL)
	}
	if logger == nil {
		logger = slog.Default()
	}
	if key.ID == "" {
		thumb, err := (&jose.JSONWebKey{Key: &key.Key.PublicKey}).Thumbprint(crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("idp: key thumbprint: %w", err)
		}
		key.ID = base64.RawURLEncoding.EncodeToString(thumb)
	}

	store := &storage{accounts: accounts, rules: cfg.Scopes, ttl: cfg.TokenTTL, key: signingKey{id: key.ID, key: key.Key},
		signIn: cfg.SignIn, console: &consoleClient{issuer: cfg.Issuer, rules: cfg.Scopes, ttl: cfg.TokenTTL}}
	opCfg := &op.Config{
		CryptoKey:      cfg.CryptoKey,
		AuthMethodPost: true,
		SupportedScopes: []string{
			core.ScopeOpenID, core.ScopeSub, core.ScopeProfile, cfg.Scopes.AudienceItem(),
			"role:" + string(core.RoleOwner), "role:" + string(core.RoleRestricted), oidc.ScopeOfflineAccess,
		},
		SupportedClaims: []string{"iss", "sub", "aud", "exp", "iat", "nbf", "jti", "client_id", claimScope, claimAccountID, claimUsername},
	}
	newProviderMu.Lock()
	o, err := op.NewProvider(opCfg, store, op.StaticIssuer(cfg.Issuer),
		op.WithAllowInsecure(), // the issuer is plain http on localhost in development
		op.WithCustomTokenEndpoint(op.NewEndpoint(pathToken)),
		op.WithCustomAuthEndpoint(op.NewEndpoint(pathAuthorize)),
		op.WithCustomKeysEndpoint(op.NewEndpoint(pathKeys)),
		op.WithCustomIntrospectionEndpoint(op.NewEndpoint(pathIntrospect)),
		op.WithCustomUserinfoEndpoint(op.NewEndpoint(pathUserinfo)),
	)
	if err != nil {
		newProviderMu.Unlock()
		return nil, fmt.Errorf("idp: %w", err)
	}

	p := &Provider{
		cfg:   cfg,
		log:   logger,
		store: store,
		op:    o,
		verifier: op.NewAccessTokenVerifier(cfg.Issuer, &op.OpenIDKeySet{Storage: store},
			op.WithSupportedAccessTokenSigningAlgorithms(string(jose.RS256))),
		pub:     &key.Key.PublicKey,
		devices: newDevices(cfg.CryptoKey),
	}
	p.discovery, err = p.discoveryDocument()
	// Read here, under the lock, for the same reason: op.AuthCallbackURL
	// reads the shared endpoints each time it is called.
	p.callbackURL = op.AuthCallbackURL(o)(op.ContextWithIssuer(context.Background(), cfg.Issuer), "")
	newProviderMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("idp: discovery document: %w", err)
	}

	// zitadel's own router is not used: its introspection accepts client
	// credentials only by Basic and answers bad ones in plain text, its
	// userinfo cannot see the token's scope without a token table, and its
	// token endpoint reports expires_in one second short. The handlers
	// below reuse zitadel's parsing, token creation and verification.
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+pathDiscovery, p.serveDiscovery)
	mux.HandleFunc("POST "+pathToken, p.serveToken)
	mux.HandleFunc("GET "+pathKeys, p.serveKeys)
	mux.HandleFunc("POST "+pathIntrospect, p.serveIntrospect)
	mux.HandleFunc("GET "+pathUserinfo, p.serveUserinfo)
	mux.HandleFunc("POST "+pathUserinfo, p.serveUserinfo)
	if cfg.SignIn != nil {
		mux.HandleFunc("GET "+pathAuthorize, p.serveAuthorize)
		mux.HandleFunc("GET "+pathAuthorize+"/callback", p.serveCallback)
		mux.HandleFunc("GET "+pathLogin, p.serveLoginForm)
		mux.HandleFunc("POST "+pathLogin, p.serveLogin)
		mux.HandleFunc("POST "+pathRevoke, p.serveRevoke)
	}
	p.handler = mux
	return p, nil
}

// Handler serves the paths listed by Paths; other methods on them are 405.
func (p *Provider) Handler() http.Handler { return p.handler }

// Paths lists the paths Handler serves, for the caller's mux.
func (p *Provider) Paths() []string {
	paths := []string{pathDiscovery, pathToken, pathKeys, pathIntrospect, pathUserinfo}
	if p.cfg.SignIn != nil {
		paths = append(paths, pathAuthorize, pathAuthorize+"/callback", pathLogin, pathRevoke)
	}
	return paths
}

// PublicKeys returns the verification keys, so that the API can check tokens
// in process (go-oidc StaticKeySet) instead of fetching its own JWKS.
func (p *Provider) PublicKeys() []crypto.PublicKey {
	return []crypto.PublicKey{p.pub}
}

// discoveryDocument starts from zitadel's document and narrows it to what is
// actually served: one grant, two client authentication methods, no
// revocation, logout or device endpoints. authorization_endpoint and
// response_types_supported stay because OpenID Discovery requires them.
func (p *Provider) discoveryDocument() ([]byte, error) {
	iss := p.cfg.Issuer
	d := op.CreateDiscoveryConfig(op.ContextWithIssuer(context.Background(), iss), p.op, p.store)
	d.TokenEndpoint = iss + pathToken
	d.JwksURI = iss + pathKeys
	d.IntrospectionEndpoint = iss + pathIntrospect
	d.UserinfoEndpoint = iss + pathUserinfo
	d.RevocationEndpoint = ""
	d.EndSessionEndpoint = ""
	d.DeviceAuthorizationEndpoint = ""
	d.CheckSessionIframe = ""
	d.GrantTypesSupported = []oidc.GrantType{oidc.GrantTypeClientCredentials}
	auth := []oidc.AuthMethod{oidc.AuthMethodBasic, oidc.AuthMethodPost}
	d.TokenEndpointAuthMethodsSupported = auth
	d.IntrospectionEndpointAuthMethodsSupported = auth
	d.TokenEndpointAuthSigningAlgValuesSupported = nil
	d.IntrospectionEndpointAuthSigningAlgValuesSupported = nil
	d.RevocationEndpointAuthMethodsSupported = nil
	d.RevocationEndpointAuthSigningAlgValuesSupported = nil
	d.CodeChallengeMethodsSupported = nil
	if p.cfg.SignIn != nil {
		d.AuthorizationEndpoint = iss + pathAuthorize
		d.ResponseTypesSupported = []string{string(oidc.ResponseTypeCode)}
		d.GrantTypesSupported = append(d.GrantTypesSupported, oidc.GrantTypeCode, oidc.GrantTypeRefreshToken)
		d.CodeChallengeMethodsSupported = []oidc.CodeChallengeMethod{oidc.CodeChallengeMethodS256}
		d.TokenEndpointAuthMethodsSupported = append(d.TokenEndpointAuthMethodsSupported, oidc.AuthMethodNone)
		d.RevocationEndpoint = iss + pathRevoke
		d.RevocationEndpointAuthMethodsSupported = []oidc.AuthMethod{oidc.AuthMethodNone}
	}
	d.BackChannelLogoutSupported = false
	d.BackChannelLogoutSessionSupported = false
	return json.Marshal(d)
}

func (p *Provider) serveDiscovery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(p.discovery)
}

func (p *Provider) serveKeys(w http.ResponseWriter, r *http.Request) {
	op.Keys(w, r, p.store)
}

// serveToken is the client_credentials grant (RFC 6749 §4.4) with errors as
// §5.2. Client authentication comes before scope parsing, so that an
// unauthenticated caller learns nothing about scope syntax.
func (p *Provider) serveToken(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("the body is not a valid form"), false)
		return
	}
	if secretInQuery(w, r, p) {
		return
	}
	switch r.Form.Get("grant_type") {
	case string(oidc.GrantTypeClientCredentials):
	case string(oidc.GrantTypeCode), string(oidc.GrantTypeRefreshToken):
		if p.cfg.SignIn == nil {
			p.oauthError(w, r, oidc.ErrUnsupportedGrantType().WithDescription("only client_credentials is supported"), false)
			return
		}
		r = r.WithContext(withSource(op.ContextWithIssuer(r.Context(), p.cfg.Issuer), r))
		if r.Form.Get("grant_type") == string(oidc.GrantTypeCode) {
			op.CodeExchange(w, r, p.op)
		} else {
			op.RefreshTokenExchange(w, r, p.op)
		}
		return
	case "":
		p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("grant_type missing"), false)
		return
	default:
		p.oauthError(w, r, oidc.ErrUnsupportedGrantType().WithDescription("only client_credentials is supported"), false)
		return
	}
	_, _, basic := r.BasicAuth()
	// zitadel reads client_id/client_secret from the form or, URL-decoded
	// (RFC 6749 §2.3.1), from Basic credentials.
	req, err := op.ParseClientCredentialsRequest(r, p.op.Decoder())
	if err != nil {
		p.oauthError(w, r, err, basic)
		return
	}
	ctx := withSource(op.ContextWithIssuer(r.Context(), p.cfg.Issuer), r)
	cl, err := p.store.authenticate(ctx, req.ClientID, req.ClientSecret)
	if err != nil {
		p.oauthError(w, r, clientAuthError(err), basic)
		return
	}
	treq, err := p.store.tokenRequest(cl, req.Scope)
	if err != nil {
		p.oauthError(w, r, err, basic)
		return
	}
	resp, err := op.CreateClientCredentialsTokenResponse(ctx, treq, p.op, &client{id: cl.ClientID, rules: p.cfg.Scopes})
	if err != nil {
		p.oauthError(w, r, err, basic)
		return
	}
	// zitadel derives expires_in from a later clock reading and truncates
	// it, which turns an hour into 3599 s; the API says 3600.
	resp.ExpiresIn = uint64(p.cfg.TokenTTL / time.Second)
	p.log.DebugContext(ctx, "access token issued", "client_id", cl.ClientID, "account_id", cl.AccountID)
	writeJSON(w, http.StatusOK, resp)
}

// serveIntrospect is RFC 7662 for the clients of an account: a client sees
// its own account's valid tokens as active and every other token as
// inactive, so that introspection reveals nothing about other accounts.
func (p *Provider) serveIntrospect(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("the body is not a valid form"), false)
		return
	}
	if secretInQuery(w, r, p) {
		return
	}
	id, secret, basic := r.BasicAuth()
	if basic {
		var err1, err2 error
		id, err1 = url.QueryUnescape(id)
		secret, err2 = url.QueryUnescape(secret)
		if err1 != nil || err2 != nil {
			p.oauthError(w, r, oidc.ErrInvalidClient().WithDescription("malformed Basic credentials"), true)
			return
		}
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	ctx := withSource(r.Context(), r)
	caller, err := p.store.authenticate(ctx, id, secret)
	if err != nil {
		p.oauthError(w, r, clientAuthError(err), basic)
		return
	}
	token := r.PostForm.Get("token")
	if token == "" {
		p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("token missing"), basic)
		return
	}
	resp := &oidc.IntrospectionResponse{}
	if claims, err := p.verify(ctx, token); err == nil && claimString(claims, claimAccountID) == caller.AccountID {
		resp.Active = true
		resp.Scope = strings.Fields(claimString(claims, claimScope))
		resp.ClientID = claims.ClientID
		resp.TokenType = oidc.BearerToken
		resp.Expiration = claims.Expiration
		resp.IssuedAt = claims.IssuedAt
		resp.NotBefore = claims.NotBefore
		resp.Subject = claims.Subject
		resp.Audience = claims.Audience
		resp.Issuer = claims.Issuer
		resp.JWTID = claims.JWTID
		resp.Claims = map[string]any{claimAccountID: caller.AccountID}
	}
	writeJSON(w, http.StatusOK, resp)
}

// serveUserinfo answers any valid token with its identity and scope, which
// is how a holder of a token alone (the SDK) checks it. Unlike OpenID Connect
// userinfo it does not require the openid item: a token lacking mandatory
// items is still a token of this provider.
func (p *Provider) serveUserinfo(w http.ResponseWriter, r *http.Request) {
	token := bearerToken(w, r)
	if token == "" {
		// RFC 6750 §3.1: no error code in the challenge when no token was sent.
		w.Header().Set("WWW-Authenticate", `Bearer realm="mountd"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{
			"error": "invalid_token", "error_description": "access token missing",
		})
		return
	}
	claims, err := p.verify(r.Context(), token)
	if err != nil || claimString(claims, claimAccountID) == "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mountd", error="invalid_token"`)
		writeJSON(w, http.StatusUnauthorized, map[string]string{
			"error": "invalid_token", "error_description": "the access token is invalid or expired",
		})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"sub":          claims.Subject,
		claimAccountID: claimString(claims, claimAccountID),
		claimScope:     claimString(claims, claimScope),
		"client_id":    claims.ClientID,
	})
}

// verify checks a token of this provider: signature, issuer and expiry. The
// signature is checked before zitadel decodes the claims, because its claim
// types panic on some malformed JSON (a non-string aud element) and only
// payloads this provider signed are known to be well-formed.
func (p *Provider) verify(ctx context.Context, token string) (*oidc.AccessTokenClaims, error) {
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		return nil, err
	}
	if _, err := jws.Verify(p.pub); err != nil {
		return nil, err
	}
	return op.VerifyAccessToken[*oidc.AccessTokenClaims](ctx, token, p.verifier)
}

// bearerToken reads the access token from the Authorization header or, for
// a form POST, from the access_token field (RFC 6750 §2.1, §2.2).
func bearerToken(w http.ResponseWriter, r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, oidc.BearerToken) {
			return ""
		}
		return strings.TrimSpace(token)
	}
	if r.Method != http.MethodPost {
		return ""
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		return ""
	}
	return r.PostForm.Get("access_token")
}

func claimString(c *oidc.AccessTokenClaims, name string) string {
	s, _ := c.Claims[name].(string)
	return s
}

// secretInQuery refuses credentials in the URL (RFC 6749 §2.3.1: they
// belong in the body or the Authorization header, never in a URL that
// proxies and logs keep). It reports whether it answered.
func secretInQuery(w http.ResponseWriter, r *http.Request, p *Provider) bool {
	if !r.URL.Query().Has("client_secret") {
		return false
	}
	p.oauthError(w, r, oidc.ErrInvalidRequest().WithDescription("client_secret must not be sent in the URL query"), false)
	return true
}

// errTemporarilyUnavailable is the RFC 6749 §4.1.2.1 code, used here for a
// refusal the client should retry after Retry-After.
const errTemporarilyUnavailable = "temporarily_unavailable"

// retryError is an OAuth error answered with status and Retry-After.
type retryError struct {
	oauth  *oidc.Error
	status int
	after  time.Duration
}

func (e *retryError) Error() string { return e.oauth.Error() }

// clientAuthError maps a failed authentication: bad credentials are
// invalid_client; throttling is 429 and a full hash queue or a dependency
// that is down is 503, both with Retry-After; anything else is a fault of
// ours.
func clientAuthError(err error) error {
	var ce *core.Error
	switch {
	case core.ErrorCode(err) == core.CodeUnauthenticated:
		return oidc.ErrInvalidClient().WithDescription("invalid client credentials")
	case errors.As(err, &ce) && ce.Code == core.CodeRateLimited:
		return &retryError{oauth: &oidc.Error{ErrorType: errTemporarilyUnavailable, Description: ce.Message},
			status: http.StatusTooManyRequests, after: ce.RetryAfter}
	case errors.As(err, &ce) && ce.Code == core.CodeUnavailable:
		return &retryError{oauth: &oidc.Error{ErrorType: errTemporarilyUnavailable, Description: ce.Message},
			status: http.StatusServiceUnavailable, after: ce.RetryAfter}
	case core.IsUnavailable(err):
		return &retryError{oauth: &oidc.Error{ErrorType: errTemporarilyUnavailable, Description: "a dependency is unavailable; retry shortly"},
			status: http.StatusServiceUnavailable, after: core.UnavailableRetry}
	}
	return err
}

// oauthError writes an RFC 6749 §5.2 error: invalid_client is 401 (with a
// Basic challenge when the client used Basic), server faults are 500 and
// logged, everything else is 400. Error texts never carry secrets or tokens.
func (p *Provider) oauthError(w http.ResponseWriter, r *http.Request, err error, basic bool) {
	var re *retryError
	if errors.As(err, &re) {
		w.Header().Set("Retry-After", retryAfterSeconds(re.after))
		p.log.DebugContext(r.Context(), "identity provider request deferred", "path", r.URL.Path, "status", re.status, "description", re.oauth.Description)
		writeJSON(w, re.status, re.oauth)
		return
	}
	var e *oidc.Error
	if !errors.As(err, &e) {
		e = oidc.ErrServerError().WithDescription("internal error")
	}
	status := http.StatusBadRequest
	switch e.ErrorType {
	case oidc.InvalidClient:
		status = http.StatusUnauthorized
		if basic {
			w.Header().Set("WWW-Authenticate", `Basic realm="mountd"`)
		}
	case oidc.ServerError:
		status = http.StatusInternalServerError
	}
	if status == http.StatusInternalServerError {
		p.log.ErrorContext(r.Context(), "identity provider request failed", "path", r.URL.Path, "err", err)
	} else {
		p.log.DebugContext(r.Context(), "identity provider request refused", "path", r.URL.Path, "error", string(e.ErrorType), "description", e.Description)
	}
	writeJSON(w, status, &oidc.Error{ErrorType: e.ErrorType, Description: e.Description})
}

// writeJSON writes v; tokens and what is said about them must not be cached
// (RFC 6749 §5.1).
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// retryAfterSeconds renders a Retry-After in whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
