package core_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// tokenOf is a verifier that grants each raw token the account it names.
type tokenOf map[string]string

func (v tokenOf) Verify(_ context.Context, raw string) (core.Principal, error) {
	acc, ok := v[raw]
	if !ok {
		return core.Principal{}, core.Errorf(core.CodeUnauthenticated, "bad token")
	}
	return core.Principal{AccountID: acc}, nil
}

// countingStore counts EnsureAccount calls.
type countingStore struct {
	*memory.Store
	ensured int
}

func (s *countingStore) EnsureAccount(ctx context.Context, a core.Account) error {
	s.ensured++
	return s.Store.EnsureAccount(ctx, a)
}

func TestIssuedAccounts(t *testing.T) {
	ctx := context.Background()
	store := &countingStore{Store: memory.NewStore()}
	v := core.NewIssuedAccounts(tokenOf{"t1": "tenant-1", "t1b": "tenant-1", "long": strings.Repeat("x", 201), "bad": "\xff"}, store)
	for _, tt := range []struct {
		token string
		code  core.Code
	}{
		{"t1", ""},
		{"t1b", ""}, // the same account again: remembered, not written
		{"unknown", core.CodeUnauthenticated},
		{"long", core.CodeUnauthenticated},
		{"bad", core.CodeUnauthenticated},
	} {
		_, err := v.Verify(ctx, tt.token)
		if (tt.code == "" && err != nil) || (tt.code != "" && core.ErrorCode(err) != tt.code) {
			t.Fatalf("%s: err = %v, want %q", tt.token, err, tt.code)
		}
	}
	if acc, err := store.Account(ctx, "tenant-1"); err != nil || acc.Name != "tenant-1" {
		t.Fatalf("the issued account was not recorded: %+v %v", acc, err)
	}
	if store.ensured != 1 {
		t.Fatalf("EnsureAccount called %d times, want once", store.ensured)
	}
}
