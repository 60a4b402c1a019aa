// Package oidcverify verifies access tokens with github.com/coreos/go-oidc/v3,
// against the embedded identity provider's keys or an external issuer's JWKS.
package oidcverify

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/mountd/mountd/core"
)

var _ core.TokenVerifier = (*Verifier)(nil)

// Verifier checks signature, issuer and expiry, then reads the scope items.
//
// A token's verification depends only on its bytes, the issuer's keys and
// the clock, so a verified principal is remembered until its token expires:
// clients reuse one token for many requests, and a signature check (RSA and
// two JSON parses) costs more than the rest of a GET /mounts/{uid}. Failures
// are never remembered.
type Verifier struct {
	issuer string
	claims Claims
	rules  core.ScopeRules
	logger *slog.Logger
	now    func() time.Time

	// verified maps the SHA-256 of a raw token to the principal it grants.
	// Principals are shared between requests and must not be modified.
	verified *lru.Cache[[sha256.Size]byte, core.Principal]

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	// keySet is nil for an external issuer until discovery succeeds.
	newKeySet func(ctx context.Context) (oidc.KeySet, error)
}

var supportedAlgs = []string{oidc.RS256, oidc.ES256, oidc.EdDSA}

// verifiedTokens bounds the cache: far more tokens than clients use at once,
// a few megabytes at most.
const verifiedTokens = 10_000

// Claims names the token claims that carry the account and the scope items.
type Claims struct {
	// Account is the claim holding the account id; empty: account_id.
	Account string
	// Scope is the claim holding the scope items, a space-separated string
	// or an array; empty: scope.
	Scope string
}

func (c Claims) withDefaults() Claims {
	if c.Account == "" {
		c.Account = "account_id"
	}
	if c.Scope == "" {
		c.Scope = "scope"
	}
	return c
}

func newVerifier(issuer string, rules core.ScopeRules, logger *slog.Logger, newKeySet func(ctx context.Context) (oidc.KeySet, error)) *Verifier {
	cache, err := lru.New[[sha256.Size]byte, core.Principal](verifiedTokens)
	if err != nil {
		panic(err) // only for a non-positive size
	}
	return &Verifier{issuer: issuer, claims: Claims{}.withDefaults(), rules: rules, logger: logger, now: time.Now, verified: cache, newKeySet: newKeySet}
}

// NewStatic verifies tokens signed by the given keys, as the embedded
// identity provider issues them; no HTTP round trip to ourselves.
func NewStatic(issuer string, keys []crypto.PublicKey, rules core.ScopeRules, logger *slog.Logger) *Verifier {
	ks := &oidc.StaticKeySet{PublicKeys: keys}
	return newVerifier(issuer, rules, logger, func(context.Context) (oidc.KeySet, error) { return ks, nil })
}

// NewRemote verifies tokens of an external issuer, reading the account and
// the scope items from the claims named by claims. Discovery happens on
// first use and is retried on later requests while it fails, so mountd
// starts even when the issuer is briefly down.
func NewRemote(issuer string, claims Claims, rules core.ScopeRules, logger *slog.Logger) *Verifier {
	v := newVerifier(issuer, rules, logger,
		func(ctx context.Context) (oidc.KeySet, error) {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			p, err := oidc.NewProvider(ctx, issuer)
			if err != nil {
				return nil, err
			}
			var meta struct {
				JWKSURI string `json:"jwks_uri"`
			}
			if err := p.Claims(&meta); err != nil {
				return nil, err
			}
			// The key set outlives this request: it refetches keys on rotation.
			return oidc.NewRemoteKeySet(context.Background(), meta.JWKSURI), nil
		})
	v.claims = claims.withDefaults()
	return v
}

func (v *Verifier) tokenVerifier(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.verifier != nil {
		return v.verifier, nil
	}
	ks, err := v.newKeySet(ctx)
	if err != nil {
		v.logger.Error("identity provider discovery failed", "issuer", v.issuer, "err", err)
		return nil, core.Errorf(core.CodeUnavailable, "the identity provider is unavailable")
	}
	v.verifier = oidc.NewVerifier(v.issuer, ks, &oidc.Config{
		// Access tokens name the project, not a client, as audience; the
		// audience is checked below as a scope rule.
		SkipClientIDCheck:    true,
		SupportedSigningAlgs: supportedAlgs,
		Now:                  v.now,
	})
	return v.verifier, nil
}

type accessClaims struct {
	Subject  string `json:"sub"`
	ClientID string `json:"client_id"`
	// Username names a person, for the audit log.
	Username string `json:"preferred_username"`
}

// Verify implements core.TokenVerifier.
func (v *Verifier) Verify(ctx context.Context, raw string) (core.Principal, error) {
	key := tokenKey(raw)
	if p, ok := v.verified.Get(key); ok {
		if v.now().Before(p.ExpiresAt) {
			return p, nil
		}
		v.verified.Remove(key)
	}
	p, err := v.verify(ctx, raw)
	if err != nil {
		return core.Principal{}, err
	}
	// Half the digest tells tokens apart for bounds per token and cannot
	// be turned back into the token.
	p.TokenID = hex.EncodeToString(key[:16])
	v.verified.Add(key, p)
	return p, nil
}

// tokenKey is the cache's key of a token: its SHA-256. A token of usual
// size is copied to the stack to be hashed; []byte(raw) would put each one
// on the heap (a GET's largest allocation but one after the row scan).
func tokenKey(raw string) [sha256.Size]byte {
	var buf [4096]byte
	if len(raw) <= len(buf) {
		n := copy(buf[:], raw)
		return sha256.Sum256(buf[:n])
	}
	return sha256.Sum256([]byte(raw))
}

func (v *Verifier) verify(ctx context.Context, raw string) (core.Principal, error) {
	tv, err := v.tokenVerifier(ctx)
	if err != nil {
		return core.Principal{}, err
	}
	tok, err := tv.Verify(ctx, raw)
	if err != nil {
		if ctx.Err() != nil {
			// Not the token's fault: its request ended (deadline, or a
			// client that left) while its keys were fetched.
			return core.Principal{}, fmt.Errorf("verify the access token: %w", ctx.Err())
		}
		return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "the access token is invalid or expired")
	}
	var (
		c   accessClaims
		all map[string]json.RawMessage
	)
	if err := tok.Claims(&c); err != nil || tok.Claims(&all) != nil {
		return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "the access token's claims are malformed")
	}
	var accountID string
	if raw, ok := all[v.claims.Account]; !ok || json.Unmarshal(raw, &accountID) != nil || accountID == "" {
		return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "the access token names no account")
	}
	items, err := scopeItems(all[v.claims.Scope])
	if err != nil {
		return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "the access token's scope claim is malformed")
	}
	grant, err := v.rules.Parse(items)
	if err != nil {
		// A token the provider should not have issued grants nothing.
		grant = core.Grant{Role: core.RoleRestricted, Scopes: items, MountUIDs: []string{}}
	}
	grant.Complete = grant.Complete && containsString(tok.Audience, v.rules.ProjectID)
	// The principal is named by its client id, or for a person signed in
	// to the console by the user id (sub), so that audits name the person.
	clientID, person := c.ClientID, false
	if clientID == "" || clientID == core.ConsoleClientID {
		clientID, person = c.Subject, true
	}
	return core.Principal{AccountID: accountID, ClientID: clientID, Person: person, Name: c.Username,
		IssuedAt: tok.IssuedAt.UTC(), ExpiresAt: tok.Expiry.UTC(), Grant: grant}, nil
}

// scopeItems accepts the scope claim as one space-separated string (RFC 9068)
// or as an array, as some issuers write it.
func scopeItems(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return strings.Fields(s), nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("scope claim: %w", err)
	}
	return list, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
