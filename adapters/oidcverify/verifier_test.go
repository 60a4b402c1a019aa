package oidcverify

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	jose "github.com/go-jose/go-jose/v4"

	"github.com/mountd/mountd/core"
)

const testIssuer = "https://issuer.test"

// countingKeySet verifies with static keys and counts signature checks, so a
// test can tell a cached answer from a fresh verification.
type countingKeySet struct {
	keys   oidc.KeySet
	checks atomic.Int64
}

func (k *countingKeySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	k.checks.Add(1)
	return k.keys.VerifySignature(ctx, jwt)
}

func sign(t *testing.T, key *rsa.PrivateKey, claims map[string]any) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(body)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestVerifierRemembersValidTokensUntilExpiry(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ks := &countingKeySet{keys: &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{key.Public()}}}
	rules := core.ScopeRules{ProjectID: "mountd"}
	v := newVerifier(testIssuer, rules, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(context.Context) (oidc.KeySet, error) { return ks, nil })
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v.now = func() time.Time { return now }

	expiry := now.Add(time.Hour)
	token := sign(t, key, map[string]any{
		"iss": testIssuer, "sub": "client-1", "aud": []string{"mountd"},
		"exp": expiry.Unix(), "iat": now.Unix(),
		"account_id": "acc-1", "scope": "openid",
	})
	ctx := context.Background()

	first, err := v.Verify(ctx, token)
	if err != nil {
		t.Fatalf("first Verify: %v", err)
	}
	if first.AccountID != "acc-1" || first.ClientID != "client-1" || !first.ExpiresAt.Equal(expiry) {
		t.Fatalf("principal = %+v", first)
	}
	second, err := v.Verify(ctx, token)
	if err != nil {
		t.Fatalf("second Verify: %v", err)
	}
	if second.AccountID != first.AccountID || !second.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("cached principal %+v differs from %+v", second, first)
	}
	if got := ks.checks.Load(); got != 1 {
		t.Fatalf("signature checks after two Verify calls = %d, want 1 (second from cache)", got)
	}

	tests := []struct {
		name  string
		token string
		at    time.Time
	}{
		{"tampered signature", token[:len(token)-2] + "AA", now},
		{"cached token past its expiry", token, expiry.Add(time.Second)},
		{"not a token", "abc", now},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			now = tc.at
			_, err := v.Verify(ctx, tc.token)
			var ce *core.Error
			if !errors.As(err, &ce) || ce.Code != core.CodeUnauthenticated {
				t.Fatalf("Verify = %v, want %s", err, core.CodeUnauthenticated)
			}
		})
	}

	// A failure is not remembered: the same bad token is checked again.
	now = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	before := ks.checks.Load()
	bad := token[:len(token)-2] + "AA"
	for range 2 {
		if _, err := v.Verify(ctx, bad); err == nil {
			t.Fatal("tampered token verified")
		}
	}
	if got := ks.checks.Load() - before; got != 2 {
		t.Fatalf("signature checks for a bad token twice = %d, want 2", got)
	}
}

// TestVerifierClaimNames: with an external issuer the account and the scope
// come from the claims the operator names (MOUNTD_ACCOUNT_CLAIM,
// MOUNTD_SCOPE_CLAIM); the scope claim may be a string or an array.
func TestVerifierClaimNames(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rules := core.ScopeRules{IDPName: "corp", ProjectID: "mountd"}
	now := time.Now()
	mandatory := []string{"openid", "sub", rules.AudienceItem()}
	for _, tt := range []struct {
		name        string
		claims      Claims
		token       map[string]any
		wantAccount string
		wantRole    core.Role
		wantErr     bool
	}{
		{"defaults", Claims{}, map[string]any{"account_id": "acc-1", "scope": "openid sub " + rules.AudienceItem()}, "acc-1", core.RoleOwner, false},
		{"named claims, array scope", Claims{Account: "https://corp.example/tenant", Scope: "permissions"},
			map[string]any{"https://corp.example/tenant": "acc-2", "permissions": append(mandatory, "role:restricted", "mount:M1")}, "acc-2", core.RoleRestricted, false},
		{"the default name is not read when another is named", Claims{Account: "tenant"},
			map[string]any{"account_id": "acc-3", "scope": "openid"}, "", "", true},
		{"an account that is not a string", Claims{Account: "tenant"}, map[string]any{"tenant": 42}, "", "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := newVerifier(testIssuer, rules, slog.New(slog.NewTextHandler(io.Discard, nil)), func(context.Context) (oidc.KeySet, error) {
				return &oidc.StaticKeySet{PublicKeys: []crypto.PublicKey{key.Public()}}, nil
			})
			v.claims = tt.claims.withDefaults()
			claims := map[string]any{"iss": testIssuer, "sub": "person-1", "aud": []string{"mountd"}, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
			for k, val := range tt.token {
				claims[k] = val
			}
			p, err := v.Verify(context.Background(), sign(t, key, claims))
			if tt.wantErr {
				if core.ErrorCode(err) != core.CodeUnauthenticated {
					t.Fatalf("err = %v, want UNAUTHENTICATED", err)
				}
				return
			}
			if err != nil || p.AccountID != tt.wantAccount || p.Role != tt.wantRole || !p.Complete {
				t.Fatalf("principal = %+v, %v", p, err)
			}
		})
	}
}
