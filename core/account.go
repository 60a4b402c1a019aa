package core

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"strings"
	"time"
	"unicode/utf8"
)

// Account is an operator's account: it owns mounts, tags and API clients.
type Account struct {
	ID        string
	Name      string
	CreatedAt time.Time
}

// APIClient is an account's client credential. Only a hash of the secret is
// ever stored.
type APIClient struct {
	ClientID   string
	AccountID  string
	SecretHash string
	CreatedAt  time.Time
}

// AccountStore persists accounts and their API clients.
type AccountStore interface {
	// CreateAccount stores an account and its first client in one transaction.
	CreateAccount(ctx context.Context, a Account, c APIClient) error
	// Account returns an account; CodeNotFound when there is none.
	Account(ctx context.Context, id string) (Account, error)
	// APIClient returns a client by client id; CodeNotFound when there is none.
	APIClient(ctx context.Context, clientID string) (APIClient, error)
}

// NewAccount is what creating an account yields; the secret is shown once.
type NewAccount struct {
	AccountID    string `json:"accountId"`
	ClientID     string `json:"clientId"`
	ClientSecret string `json:"clientSecret"`
}

// AccountService holds the rules about accounts and client credentials.
type AccountService struct {
	store AccountStore
	now   func() time.Time
}

// NewAccountService returns an AccountService over store.
func NewAccountService(store AccountStore) *AccountService {
	return &AccountService{store: store, now: time.Now}
}

// Create makes an account with one client credential.
func (s *AccountService) Create(ctx context.Context, name string) (NewAccount, error) {
	name = strings.TrimSpace(name)
	var v Validation
	if name == "" || utf8.RuneCountInString(name) > 100 {
		v.Add("name", "must be 1 to 100 characters")
	}
	if err := v.Err(); err != nil {
		return NewAccount{}, err
	}
	secret := randomText(32)
	hash, err := HashSecret(secret)
	if err != nil {
		return NewAccount{}, err
	}
	now := s.now().UTC()
	acc := Account{ID: "acc_" + randomHex(12), Name: name, CreatedAt: now}
	cl := APIClient{ClientID: "cli_" + randomHex(12), AccountID: acc.ID, SecretHash: hash, CreatedAt: now}
	if err := s.store.CreateAccount(ctx, acc, cl); err != nil {
		return NewAccount{}, err
	}
	return NewAccount{AccountID: acc.ID, ClientID: cl.ClientID, ClientSecret: secret}, nil
}

// Authenticate checks a client's credentials. Every failure is the same
// UNAUTHENTICATED error and costs one hash, so that unknown client ids cannot
// be told from wrong secrets.
func (s *AccountService) Authenticate(ctx context.Context, clientID, secret string) (APIClient, error) {
	cl, err := s.store.APIClient(ctx, clientID)
	if err != nil && ErrorCode(err) != CodeNotFound {
		return APIClient{}, err
	}
	if err != nil {
		VerifySecret(dummySecretHash, secret)
		return APIClient{}, Errorf(CodeUnauthenticated, "invalid client credentials")
	}
	if !VerifySecret(cl.SecretHash, secret) {
		return APIClient{}, Errorf(CodeUnauthenticated, "invalid client credentials")
	}
	return cl, nil
}

// Client returns a client credential record by id.
func (s *AccountService) Client(ctx context.Context, clientID string) (APIClient, error) {
	return s.store.APIClient(ctx, clientID)
}

// Account returns an account by id.
func (s *AccountService) Account(ctx context.Context, id string) (Account, error) {
	return s.store.Account(ctx, id)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// randomText returns n random bytes as unpadded URL-safe base64, which needs
// no escaping in forms or Basic credentials.
func randomText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
