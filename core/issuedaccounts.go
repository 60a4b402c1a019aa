package core

import (
	"context"
	"sync"
	"time"
	"unicode/utf8"
)

// maxIssuedAccountID bounds the account ids an external issuer may name.
const maxIssuedAccountID = 200

// rememberedAccounts bounds the ids IssuedAccounts keeps in memory; past it
// the memory is cleared, and each account costs one more idempotent write.
const rememberedAccounts = 10_000

// IssuedAccounts verifies tokens of an external issuer, which owns the
// accounts: an account mountd has not seen is recorded on its first valid
// token (named by its id), so that its mounts, tags and webhooks have an
// account to belong to. Nothing else about the account is mountd's to keep.
type IssuedAccounts struct {
	verifier TokenVerifier
	store    AccountStore
	now      func() time.Time

	mu    sync.Mutex
	known map[string]bool
}

// NewIssuedAccounts wraps verifier, recording accounts in store.
func NewIssuedAccounts(verifier TokenVerifier, store AccountStore) *IssuedAccounts {
	return &IssuedAccounts{verifier: verifier, store: store, now: time.Now, known: map[string]bool{}}
}

// Verify implements TokenVerifier.
func (a *IssuedAccounts) Verify(ctx context.Context, raw string) (Principal, error) {
	p, err := a.verifier.Verify(ctx, raw)
	if err != nil {
		return Principal{}, err
	}
	if len(p.AccountID) > maxIssuedAccountID || !utf8.ValidString(p.AccountID) {
		return Principal{}, Errorf(CodeUnauthenticated, "the access token's account id is not valid UTF-8 of at most %d bytes", maxIssuedAccountID)
	}
	a.mu.Lock()
	known := a.known[p.AccountID]
	a.mu.Unlock()
	if known {
		return p, nil
	}
	if err := a.store.EnsureAccount(ctx, Account{ID: p.AccountID, Name: p.AccountID, CreatedAt: a.now().UTC().Truncate(time.Millisecond)}); err != nil {
		return Principal{}, err
	}
	a.mu.Lock()
	if len(a.known) >= rememberedAccounts {
		clear(a.known)
	}
	a.known[p.AccountID] = true
	a.mu.Unlock()
	return p, nil
}
