package idp

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/httpobs"
)

// errNotSupported answers every storage method that only the flows mountd
// does not offer (JWT profile, revocation, logout) would call.
var errNotSupported = errors.New("idp: not supported")

// Claim names mountd adds to zitadel's registered access-token claims.
const (
	claimScope     = "scope"
	claimAccountID = "account_id"
	// claimUsername names a person (OpenID Connect's standard claim).
	claimUsername = "preferred_username"
)

var (
	_ op.Storage                        = (*storage)(nil)
	_ op.ClientCredentialsStorage       = (*storage)(nil)
	_ op.CanGetPrivateClaimsFromRequest = (*storage)(nil)
)

// storage is the op.Storage of the embedded provider. It is stateless: a token
// is a signed JWT carrying everything later needed (account, scope), so no
// token table exists and only client credentials are looked up.
type storage struct {
	signIn   *SignIn // nil: no people sign in
	console  *consoleClient
	accounts *core.AccountService
	rules    core.ScopeRules
	ttl      time.Duration
	key      signingKey
}

// authenticate checks client credentials. Only core.AccountService sees the
// secret; wrong and unknown credentials are told apart from internal faults
// so that a database outage is not reported as invalid_client.
func (s *storage) authenticate(ctx context.Context, clientID, secret string) (core.APIClient, error) {
	if clientID == "" {
		return core.APIClient{}, core.Errorf(core.CodeUnauthenticated, "no client credentials")
	}
	return s.accounts.Authenticate(ctx, clientID, secret, sourceFrom(ctx))
}

// withSource carries the caller's address to authenticate, which
// throttles failures per client id and address: the address the API's
// audit log names (httpobs.SourceAddress).
func withSource(ctx context.Context, r *http.Request) context.Context {
	return core.WithSource(ctx, httpobs.SourceAddress(r))
}

func sourceFrom(ctx context.Context) string { return core.SourceFrom(ctx) }

// tokenRequest turns a client and its requested scope items into what the
// access token will say. Unknown or malformed items are invalid_scope; missing
// mandatory items are not (the token is issued and the API refuses it).
func (s *storage) tokenRequest(cl core.APIClient, scopes []string) (*tokenRequest, error) {
	grant, err := s.rules.Parse(scopes)
	if err != nil {
		return nil, oidc.ErrInvalidScope().WithDescription("%s", err.Error())
	}
	aud := []string{cl.ClientID}
	for _, item := range grant.Scopes {
		if item == s.rules.AudienceItem() {
			aud = []string{s.rules.ProjectID}
			break
		}
	}
	return &tokenRequest{subject: cl.ClientID, accountID: cl.AccountID, audience: aud, scopes: grant.Scopes}, nil
}

// ClientCredentials implements op.ClientCredentialsStorage.
func (s *storage) ClientCredentials(ctx context.Context, clientID, clientSecret string) (op.Client, error) {
	cl, err := s.authenticate(ctx, clientID, clientSecret)
	if err != nil {
		return nil, err
	}
	return &client{id: cl.ClientID, rules: s.rules}, nil
}

// ClientCredentialsTokenRequest implements op.ClientCredentialsStorage.
func (s *storage) ClientCredentialsTokenRequest(ctx context.Context, clientID string, scopes []string) (op.TokenRequest, error) {
	cl, err := s.accounts.Client(ctx, clientID)
	if err != nil {
		return nil, err
	}
	return s.tokenRequest(cl, scopes)
}

// CreateAccessToken implements op.AuthStorage: it only names the token (jti)
// and fixes its expiry, since nothing is stored.
func (s *storage) CreateAccessToken(context.Context, op.TokenRequest) (string, time.Time, error) {
	return rand.Text(), time.Now().UTC().Add(s.ttl), nil
}

// GetPrivateClaimsFromRequest implements op.CanGetPrivateClaimsFromRequest.
// zitadel writes no scope claim into JWT access tokens, and the scopes it
// passes here lack "profile"; the request's own items are used instead, as
// one space-separated string (RFC 9068).
func (s *storage) GetPrivateClaimsFromRequest(ctx context.Context, request op.TokenRequest, _ []string) (map[string]any, error) {
	var req *tokenRequest
	switch r := request.(type) {
	case *tokenRequest:
		req = r
	case *authRequest:
		return s.userClaims(ctx, r.UserID)
	case *refreshRequest:
		return s.userClaims(ctx, r.token.UserID)
	default:
		return nil, errNotSupported
	}
	return map[string]any{
		claimScope:     strings.Join(req.scopes, " "),
		claimAccountID: req.accountID,
	}, nil
}

// GetPrivateClaimsFromScopes implements op.OPStorage; zitadel calls
// GetPrivateClaimsFromRequest instead.
func (s *storage) GetPrivateClaimsFromScopes(context.Context, string, string, []string) (map[string]any, error) {
	return nil, errNotSupported
}

// GetClientByClientID implements op.OPStorage.
func (s *storage) GetClientByClientID(ctx context.Context, clientID string) (op.Client, error) {
	if clientID == ConsoleClientID && s.signIn != nil {
		return s.console, nil
	}
	cl, err := s.accounts.Client(ctx, clientID)
	if err != nil {
		return nil, err
	}
	return &client{id: cl.ClientID, rules: s.rules}, nil
}

// AuthorizeClientIDSecret implements op.OPStorage.
func (s *storage) AuthorizeClientIDSecret(ctx context.Context, clientID, clientSecret string) error {
	_, err := s.authenticate(ctx, clientID, clientSecret)
	return err
}

// SigningKey implements op.AuthStorage.
func (s *storage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }

// SignatureAlgorithms implements op.AuthStorage.
func (s *storage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

// KeySet implements op.AuthStorage: the JWKS holds the one public key.
func (s *storage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{publicKey{s.key}}, nil
}

// Health implements op.Storage.
func (s *storage) Health(context.Context) error { return nil }

// The methods below belong to flows mountd does not offer.

func (s *storage) TerminateSession(context.Context, string, string) error { return errNotSupported }

func (s *storage) RevokeToken(context.Context, string, string, string) *oidc.Error {
	// RFC 7009 §2.2.1: the server does not revoke tokens of any type.
	return &oidc.Error{ErrorType: "unsupported_token_type", Description: "revocation not supported"}
}

// SetUserinfoFromScopes is deprecated in zitadel and must stay empty.
func (s *storage) SetUserinfoFromScopes(context.Context, *oidc.UserInfo, string, string, []string) error {
	return nil
}

// SetUserinfoFromToken is not used: the provider serves userinfo itself from
// the verified token's claims.
func (s *storage) SetUserinfoFromToken(context.Context, *oidc.UserInfo, string, string, string) error {
	return errNotSupported
}

// SetIntrospectionFromToken is not used: the provider serves introspection
// itself from the verified token's claims.
func (s *storage) SetIntrospectionFromToken(context.Context, *oidc.IntrospectionResponse, string, string, string) error {
	return errNotSupported
}

func (s *storage) GetKeyByIDAndClientID(context.Context, string, string) (*jose.JSONWebKey, error) {
	return nil, errNotSupported
}

func (s *storage) ValidateJWTProfileScopes(context.Context, string, []string) ([]string, error) {
	return nil, errNotSupported
}

// tokenRequest is the op.TokenRequest of a client_credentials grant.
type tokenRequest struct {
	subject   string
	accountID string
	audience  []string
	scopes    []string
}

func (r *tokenRequest) GetSubject() string    { return r.subject }
func (r *tokenRequest) GetAudience() []string { return r.audience }
func (r *tokenRequest) GetScopes() []string   { return r.scopes }

// client is an API client as zitadel sees it: a confidential client allowed
// only the client_credentials grant, receiving JWT access tokens.
type client struct {
	id    string
	rules core.ScopeRules
}

var _ op.Client = (*client)(nil)

func (c *client) GetID() string                        { return c.id }
func (c *client) RedirectURIs() []string               { return nil }
func (c *client) PostLogoutRedirectURIs() []string     { return nil }
func (c *client) ApplicationType() op.ApplicationType  { return op.ApplicationTypeWeb }
func (c *client) AuthMethod() oidc.AuthMethod          { return oidc.AuthMethodBasic }
func (c *client) ResponseTypes() []oidc.ResponseType   { return nil }
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (c *client) IDTokenLifetime() time.Duration       { return 0 }
func (c *client) DevMode() bool                        { return false }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeClientCredentials}
}
func (c *client) IsScopeAllowed(scope string) bool {
	_, err := c.rules.Parse([]string{scope})
	return err == nil
}
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string { return keepScopes }

// RestrictAdditionalAccessTokenScopes keeps every item: zitadel must not drop
// mountd's own items (role:, mount:, the audience URN).
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string { return keepScopes }

func keepScopes(scopes []string) []string { return scopes }

// signingKey is the provider's RS256 key as zitadel wants it.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Key() any                                    { return k.key }
func (k signingKey) ID() string                                  { return k.id }

// publicKey is the JWKS entry of a signingKey.
type publicKey struct{ signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return &k.key.PublicKey }
