package idp

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/mountd/mountd/core"
)

// ConsoleClientID is the built-in public client of the console: no secret,
// the authorization code flow with PKCE (S256 only) and refresh tokens.
const ConsoleClientID = core.ConsoleClientID

// SignIn holds what people signing in need; nil in Config leaves the
// provider with the client_credentials grant alone.
type SignIn struct {
	Users    *core.UserService
	Sessions *core.SessionService
}

// consoleClient is the console as zitadel sees it. Redirects go back to the
// console on the issuer's own origin, nowhere else (GraphiQL takes the
// console's token in the same tab, or one typed into its header editor).
type consoleClient struct {
	issuer string
	rules  core.ScopeRules
	ttl    time.Duration
}

var (
	_ op.Client           = (*consoleClient)(nil)
	_ op.HasRedirectGlobs = (*consoleClient)(nil)
)

func (c *consoleClient) GetID() string { return ConsoleClientID }
func (c *consoleClient) RedirectURIs() []string {
	return []string{c.issuer + "/console/"}
}
func (c *consoleClient) RedirectURIGlobs() []string           { return []string{c.issuer + "/console/*"} }
func (c *consoleClient) PostLogoutRedirectURIs() []string     { return c.RedirectURIs() }
func (c *consoleClient) PostLogoutRedirectURIGlobs() []string { return c.RedirectURIGlobs() }
func (c *consoleClient) ApplicationType() op.ApplicationType  { return op.ApplicationTypeUserAgent }
func (c *consoleClient) AuthMethod() oidc.AuthMethod          { return oidc.AuthMethodNone }
func (c *consoleClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *consoleClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode, oidc.GrantTypeRefreshToken}
}
func (c *consoleClient) LoginURL(id string) string            { return pathLogin + "?authRequest=" + id }
func (c *consoleClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *consoleClient) IDTokenLifetime() time.Duration       { return c.ttl }
func (c *consoleClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *consoleClient) ClockSkew() time.Duration             { return 0 }

// DevMode lets the redirect use plain http, which the issuer itself uses on
// a development machine; redirects are still checked against the list.
func (c *consoleClient) DevMode() bool { return strings.HasPrefix(c.issuer, "http://") }

// IsScopeAllowed: what the console asks for; the token's rights come from
// the user, never from the request.
func (c *consoleClient) IsScopeAllowed(scope string) bool {
	return scope == oidc.ScopeOfflineAccess || scope == oidc.ScopeOpenID || scope == core.ScopeProfile
}
func (c *consoleClient) RestrictAdditionalIdTokenScopes() func([]string) []string { return keepScopes }
func (c *consoleClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return keepScopes
}

// authRequest is a core.AuthRequest as zitadel sees it.
type authRequest struct {
	core.AuthRequest
	audience []string
}

var _ op.AuthRequest = (*authRequest)(nil)

func (r *authRequest) GetID() string          { return r.ID }
func (r *authRequest) GetACR() string         { return "" }
func (r *authRequest) GetAMR() []string       { return []string{"pwd"} }
func (r *authRequest) GetAudience() []string  { return r.audience }
func (r *authRequest) GetAuthTime() time.Time { return r.AuthTime }
func (r *authRequest) GetClientID() string    { return r.ClientID }
func (r *authRequest) GetNonce() string       { return r.Nonce }
func (r *authRequest) GetRedirectURI() string { return r.RedirectURI }
func (r *authRequest) GetScopes() []string    { return r.Scopes }
func (r *authRequest) GetState() string       { return r.State }
func (r *authRequest) GetSubject() string     { return r.UserID }
func (r *authRequest) Done() bool             { return r.UserID != "" }
func (r *authRequest) GetResponseMode() oidc.ResponseMode {
	return oidc.ResponseMode(r.ResponseMode)
}
func (r *authRequest) GetResponseType() oidc.ResponseType {
	return oidc.ResponseType(r.ResponseType)
}
func (r *authRequest) GetCodeChallenge() *oidc.CodeChallenge {
	if r.CodeChallenge == "" {
		return nil
	}
	return &oidc.CodeChallenge{Challenge: r.CodeChallenge, Method: oidc.CodeChallengeMethod(r.CodeChallengeMethod)}
}

// refreshRequest is a checked refresh token as zitadel sees it, with the
// user it belongs to as the user is now.
type refreshRequest struct {
	token    core.RefreshToken
	user     core.User
	audience []string
	scopes   []string
}

var _ op.RefreshTokenRequest = (*refreshRequest)(nil)

func (r *refreshRequest) GetAMR() []string            { return []string{"pwd"} }
func (r *refreshRequest) GetAudience() []string       { return r.audience }
func (r *refreshRequest) GetAuthTime() time.Time      { return r.token.AuthTime }
func (r *refreshRequest) GetClientID() string         { return r.token.ClientID }
func (r *refreshRequest) GetScopes() []string         { return r.scopes }
func (r *refreshRequest) GetSubject() string          { return r.token.UserID }
func (r *refreshRequest) SetCurrentScopes(s []string) { r.scopes = s }

func (s *storage) audience() []string { return []string{s.rules.ProjectID, ConsoleClientID} }

func signInUnsupported() error {
	return oidc.ErrUnsupportedGrantType().WithDescription("people cannot sign in to this provider")
}

// CreateAuthRequest implements op.AuthStorage: PKCE with S256 is required.
func (s *storage) CreateAuthRequest(ctx context.Context, r *oidc.AuthRequest, _ string) (op.AuthRequest, error) {
	if s.signIn == nil {
		return nil, signInUnsupported()
	}
	if r.ClientID != ConsoleClientID {
		return nil, oidc.ErrUnauthorizedClient().WithDescription("only the console signs people in")
	}
	if r.CodeChallenge == "" || r.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("PKCE with code_challenge_method S256 is required")
	}
	if r.ResponseType != oidc.ResponseTypeCode {
		return nil, oidc.ErrInvalidRequest().WithDescription("only the code response type is supported")
	}
	call, _ := ctx.Value(authorizeKey{}).(*authorizeCall)
	if call == nil {
		return nil, errors.New("idp: a sign-in started outside serveAuthorize")
	}
	started, err := s.signIn.Sessions.StartSignIn(ctx, core.AuthRequest{ClientID: r.ClientID, RedirectURI: r.RedirectURI,
		State: r.State, Nonce: r.Nonce, Scopes: r.Scopes, ResponseType: string(r.ResponseType), ResponseMode: string(r.ResponseMode),
		CodeChallenge: r.CodeChallenge, CodeChallengeMethod: string(r.CodeChallengeMethod),
		BrowserHash: core.TokenHash(call.secret), Source: sourceFrom(ctx)})
	if err != nil {
		if core.ErrorCode(err) == core.CodeValidation {
			return nil, oidc.ErrInvalidRequest().WithDescription("%s", core.ErrorMessage(err))
		}
		return nil, err
	}
	call.started()
	return &authRequest{AuthRequest: started, audience: s.audience()}, nil
}

// AuthRequestByID implements op.AuthStorage.
func (s *storage) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	if s.signIn == nil {
		return nil, signInUnsupported()
	}
	r, err := s.signIn.Sessions.SignIn(ctx, id)
	if err != nil {
		return nil, oidc.ErrInvalidRequest().WithDescription("the sign-in is unknown or has expired").WithParent(err)
	}
	return &authRequest{AuthRequest: r, audience: s.audience()}, nil
}

// AuthRequestByCode implements op.AuthStorage.
func (s *storage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	if s.signIn == nil {
		return nil, signInUnsupported()
	}
	r, err := s.signIn.Sessions.SignInByCode(ctx, code)
	if err != nil {
		return nil, oidc.ErrInvalidGrant().WithDescription("the code is unknown, used or expired").WithParent(err)
	}
	return &authRequest{AuthRequest: r, audience: s.audience()}, nil
}

// SaveAuthCode implements op.AuthStorage.
func (s *storage) SaveAuthCode(ctx context.Context, id, code string) error {
	if s.signIn == nil {
		return signInUnsupported()
	}
	err := s.signIn.Sessions.SaveCode(ctx, id, code)
	if core.ErrorCode(err) == core.CodeNotFound {
		// A code was handed out already (serveCallback checks first; this
		// is the loser of two racing callbacks).
		return oidc.ErrInvalidRequest().WithDescription("the sign-in is unknown or has been used")
	}
	return err
}

// DeleteAuthRequest implements op.AuthStorage: a code is used once.
func (s *storage) DeleteAuthRequest(ctx context.Context, id string) error {
	if s.signIn == nil {
		return signInUnsupported()
	}
	return s.signIn.Sessions.EndSignIn(ctx, id)
}

// CreateAccessAndRefreshTokens implements op.AuthStorage: the first refresh
// token of a sign-in, or the next of a refresh token's family.
func (s *storage) CreateAccessAndRefreshTokens(ctx context.Context, request op.TokenRequest, current string) (string, string, time.Time, error) {
	if s.signIn == nil {
		return "", "", time.Time{}, signInUnsupported()
	}
	id, exp, _ := s.CreateAccessToken(ctx, request)
	var (
		refresh string
		err     error
	)
	switch r := request.(type) {
	case *authRequest:
		refresh, err = s.signIn.Sessions.IssueRefresh(ctx, r.UserID, r.ClientID, r.Scopes, r.AuthTime)
	case *refreshRequest:
		refresh, err = s.signIn.Sessions.Rotate(ctx, current, r.scopes)
	default:
		return "", "", time.Time{}, signInUnsupported()
	}
	if err != nil {
		if core.ErrorCode(err) == core.CodeUnauthenticated {
			return "", "", time.Time{}, oidc.ErrInvalidGrant().WithDescription("%s", err.Error())
		}
		return "", "", time.Time{}, err
	}
	return id, refresh, exp, nil
}

// TokenRequestByRefreshToken implements op.AuthStorage; zitadel checks the
// token's client against the caller.
func (s *storage) TokenRequestByRefreshToken(ctx context.Context, token string) (op.RefreshTokenRequest, error) {
	if s.signIn == nil {
		return nil, signInUnsupported()
	}
	t, u, err := s.signIn.Sessions.Refresh(ctx, token, ConsoleClientID)
	if err != nil {
		if core.ErrorCode(err) == core.CodeUnauthenticated {
			return nil, oidc.ErrInvalidGrant().WithDescription("%s", err.Error())
		}
		return nil, err
	}
	return &refreshRequest{token: t, user: u, audience: s.audience(), scopes: t.Scopes}, nil
}

// GetRefreshTokenInfo implements op.AuthStorage (revocation is not
// served; sign-out revokes through the console's own call).
func (s *storage) GetRefreshTokenInfo(context.Context, string, string) (string, string, error) {
	return "", "", op.ErrInvalidRefreshToken
}

// userClaims are the private claims of a person's access token: the user's
// account, role and mount items as the user is now, and the username, by
// which the audit log names the person.
func (s *storage) userClaims(ctx context.Context, userID string) (map[string]any, error) {
	if s.signIn == nil {
		return nil, signInUnsupported()
	}
	u, err := s.signIn.Users.User(ctx, userID)
	if err != nil {
		if core.ErrorCode(err) == core.CodeNotFound {
			return nil, oidc.ErrInvalidGrant().WithDescription("the user no longer exists")
		}
		return nil, err
	}
	return map[string]any{
		claimScope:     strings.Join(s.rules.UserScopes(u), " "),
		claimAccountID: u.AccountID,
		claimUsername:  u.Username,
	}, nil
}
