package core

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/netip"
	"strings"
	"time"
	"unicode"
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
	ClientID  string
	AccountID string
	// Name is what the audit log and alarms call the client (actor.name,
	// acknowledgedByName): DefaultClientName of the account's name until
	// `mountd accounts rename-client` names it.
	Name       string
	SecretHash string
	CreatedAt  time.Time
}

// DefaultClientName is the name an account's client gets: the account's
// name and " API client".
func DefaultClientName(accountName string) string { return accountName + " API client" }

// maxClientName bounds a client's name, in characters.
const maxClientName = 100

// AccountStore persists accounts and their API clients.
type AccountStore interface {
	// CreateAccount stores an account and its first client in one transaction.
	CreateAccount(ctx context.Context, a Account, c APIClient) error
	// Account returns an account; CodeNotFound when there is none.
	Account(ctx context.Context, id string) (Account, error)
	// EnsureAccount stores an account unless one with its id exists.
	EnsureAccount(ctx context.Context, a Account) error
	// Accounts lists every account with how many client credentials it
	// has, oldest first.
	Accounts(ctx context.Context) ([]AccountSummary, error)
	// ReplaceClientSecrets sets the secret hash of the account's clients
	// and returns their ids; CodeNotFound when the account has none.
	ReplaceClientSecrets(ctx context.Context, accountID, secretHash string) ([]string, error)
	// APIClient returns a client by client id; CodeNotFound when there is none.
	APIClient(ctx context.Context, clientID string) (APIClient, error)
	// RenameClients sets the name of the account's clients and returns
	// their ids; CodeNotFound when the account has none.
	RenameClients(ctx context.Context, accountID, name string) ([]string, error)
	// RehashClientSecret replaces the client's stored secret hash with
	// newHash, another form of the same secret, if it is still oldHash,
	// and reports whether it did: a rotation or another rehash in between
	// leaves the row alone, so a rehash never brings back a rotated secret.
	// No audit entry: the credential did not change. A client that is gone
	// is false, not CodeNotFound.
	RehashClientSecret(ctx context.Context, clientID, oldHash, newHash string) (bool, error)
}

// AccountSummary is an account as `mountd accounts list` shows it.
type AccountSummary struct {
	Account
	Clients int
}

// NewAccount is what creating an account yields; the secret is shown once.
type NewAccount struct {
	AccountID    string `json:"accountId"`
	ClientID     string `json:"clientId"`
	ClientSecret string `json:"clientSecret"`
}

// AccountService holds the rules about accounts and client credentials.
type AccountService struct {
	store    AccountStore
	failures FailureLimiter
	// secretKey stores client secrets as HMAC-SHA-256; nil: as argon2id.
	secretKey *ClientSecretKey
	now       func() time.Time
}

// NewAccountService returns an AccountService over store that throttles
// failed authentications through failures (nil: no throttle). Without
// the master key at hand it stores client secrets as argon2id, which a
// keyed service (NewKeyedAccountService) verifies and rehashes at their
// next use: load tools and tests that write accounts straight into the
// database use it.
func NewAccountService(store AccountStore, failures FailureLimiter) *AccountService {
	return &AccountService{store: store, failures: failures, now: time.Now}
}

// NewKeyedAccountService is NewAccountService storing client secrets as
// HMAC-SHA-256 under key (docs/architecture.md, "Client secrets"): what
// `mountd serve` and the admin commands use.
func NewKeyedAccountService(store AccountStore, failures FailureLimiter, key ClientSecretKey) *AccountService {
	s := NewAccountService(store, failures)
	s.secretKey = &key
	return s
}

// hashClientSecret is the stored form of a new client secret.
func (s *AccountService) hashClientSecret(secret string) (string, error) {
	if s.secretKey != nil {
		return s.secretKey.Hash(secret), nil
	}
	return HashSecret(secret)
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
	hash, err := s.hashClientSecret(secret)
	if err != nil {
		return NewAccount{}, err
	}
	now := s.now().UTC()
	acc := Account{ID: "acc_" + randomHex(12), Name: name, CreatedAt: now}
	cl := APIClient{ClientID: "cli_" + randomHex(12), AccountID: acc.ID, Name: DefaultClientName(name), SecretHash: hash, CreatedAt: now}
	// Creating an account changes the installation: no account's log
	// holds it (docs/api.md, "Audit log").
	actx := byOperator(ctx, "", now, AuditAccountCreate, AuditTarget("account", acc.ID),
		map[string]any{"name": name, "clientId": cl.ClientID})
	if err := s.store.CreateAccount(actx, acc, cl); err != nil {
		return NewAccount{}, err
	}
	return NewAccount{AccountID: acc.ID, ClientID: cl.ClientID, ClientSecret: secret}, nil
}

// List returns every account, oldest first.
func (s *AccountService) List(ctx context.Context) ([]AccountSummary, error) {
	return s.store.Accounts(ctx)
}

// RotateSecret gives the account's client a new secret: the old one stops
// working at once (tokens already issued live until they expire). The new
// secret is returned once and only its hash is kept.
func (s *AccountService) RotateSecret(ctx context.Context, accountID string) (NewAccount, error) {
	secret := randomText(32)
	hash, err := s.hashClientSecret(secret)
	if err != nil {
		return NewAccount{}, err
	}
	actx := byOperator(ctx, accountID, s.now(), AuditAccountRotateSecret, AuditTarget("account", accountID), nil)
	ids, err := s.store.ReplaceClientSecrets(actx, accountID, hash)
	if err != nil {
		return NewAccount{}, err
	}
	return NewAccount{AccountID: accountID, ClientID: ids[0], ClientSecret: secret}, nil
}

// RenameClient names the account's client (`mountd accounts rename-client`):
// 1 to 100 characters, spaces around trimmed. The audit log's actor.name
// and alarms' acknowledgedByName show it from the next change the client
// makes; entries already recorded keep the name they were made under.
func (s *AccountService) RenameClient(ctx context.Context, accountID, name string) ([]string, error) {
	name = strings.TrimSpace(name)
	var v Validation
	if name == "" || utf8.RuneCountInString(name) > maxClientName || !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		v.Add("name", "must be 1 to 100 printable characters")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	actx := byOperator(ctx, accountID, s.now(), AuditAccountRenameClient, AuditTarget("account", accountID), map[string]any{"name": name})
	return s.store.RenameClients(actx, accountID, name)
}

// Authenticate checks a client's credentials presented from source (the
// caller's address). Every failure is the same UNAUTHENTICATED error and
// costs one hash, so that unknown client ids cannot be told from wrong
// secrets. A client id over its failure limit from source gets
// RATE_LIMITED before any hashing, and so does an unknown client id once
// the address has had too many of them. A secret stored as HMAC is
// checked at once; one still stored as argon2id waits for a slot of the
// process-wide gate and, when it matches, is stored as HMAC from then on.
func (s *AccountService) Authenticate(ctx context.Context, clientID, secret, source string) (APIClient, error) {
	var cl APIClient
	ok, err := checkSecret(ctx, s.failures, s.secretKey, []failureKey{
		// The client id is hashed: it comes from the caller, of any length.
		{key: "auth:client:" + shortHash(clientID) + "|" + sourceKey(source), rate: ClientFailuresPerSource},
		{key: "auth:unknown:" + sourceKey(source), rate: UnknownClientFailuresPerAddress, unknownOnly: true},
	}, "too many failed authentications from this address; retry later", func() (string, error) {
		var err error
		cl, err = s.store.APIClient(ctx, clientID)
		return cl.SecretHash, err
	}, secret)
	if err != nil {
		return APIClient{}, err
	}
	if !ok {
		return APIClient{}, Errorf(CodeUnauthenticated, "invalid client credentials")
	}
	if s.secretKey != nil && !IsKeyedSecretHash(cl.SecretHash) {
		cl.SecretHash = s.rehash(ctx, cl, secret)
	}
	return cl, nil
}

// rehash stores a client secret that matched its argon2id hash as HMAC,
// on condition that the argon2id hash is still the one stored: a rotation
// that came in between keeps its new secret, and the old one stays
// refused. A rehash that fails (the database, the caller gone) costs
// nothing but another argon2id check at the next use. It returns the hash
// stored now, as far as it knows.
func (s *AccountService) rehash(ctx context.Context, cl APIClient, secret string) string {
	keyed := s.secretKey.Hash(secret)
	if ok, err := s.store.RehashClientSecret(ctx, cl.ClientID, cl.SecretHash, keyed); err != nil || !ok {
		return cl.SecretHash
	}
	return keyed
}

// failureKey is one count of failures a credential check keeps.
type failureKey struct {
	key  string
	rate Rate
	// unknownOnly counts only checks naming no stored credential, once the
	// lookup has said so.
	unknownOnly bool
}

// reservations are the attempts a credential check has counted.
type reservations struct {
	failures FailureLimiter
	held     [][2]string // key, token
}

// reserve counts an attempt under each of keys whose unknownOnly is
// unknown; past a limit it returns the wait, and what it counted stays
// held for refund. A limiter that cannot answer skips its key: the gate
// still bounds hashing, and a throttle that cannot be read must not lock
// everyone out.
func (r *reservations) reserve(ctx context.Context, keys []failureKey, unknown bool) time.Duration {
	if r.failures == nil {
		return 0
	}
	for _, k := range keys {
		if k.unknownOnly != unknown {
			continue
		}
		wait, token, err := r.failures.Reserve(ctx, k.key, k.rate)
		switch {
		case err != nil:
		case wait > 0:
			return wait
		case token != "":
			r.held = append(r.held, [2]string{k.key, token})
		}
	}
	return 0
}

// placeWait is how long a credential check that finds a failure limit
// full waits for a place (reserveWaiting): as long as the hash gate lets
// a check wait for its turn.
var placeWait = 2 * time.Second

// reserveWaiting is reserve for the first keys, except that a caller
// finding a limit full tries again for placeWait, which a refused caller
// spends in the tarpit anyway: attempts still in flight hold places too, and
// they free them when they succeed. Servers starting together (a farm
// behind one address) send more correct secrets at once than the limit;
// each then gets in once an earlier one is through, instead of a 429.
// Only failures that stay keep a caller out. Beyond the tarpit's callers,
// a full limit refuses at once. It reports whether it waited.
func (r *reservations) reserveWaiting(ctx context.Context, keys []failureKey) (time.Duration, bool) {
	wait := r.reserve(ctx, keys, false)
	if wait == 0 {
		return 0, false
	}
	select {
	case tarpit <- struct{}{}:
	default:
		return wait, false
	}
	defer func() { <-tarpit }()
	deadline := time.Now().Add(placeWait)
	for delay := 10 * time.Millisecond; wait > 0; delay = min(2*delay, 200*time.Millisecond) {
		r.refund(ctx) // what a partial reservation counted
		left := time.Until(deadline)
		if left <= 0 {
			return wait, true
		}
		t := time.NewTimer(min(delay, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return wait, true
		}
		wait = r.reserve(ctx, keys, false)
	}
	return 0, true
}

// refund takes back every attempt counted: the check did not fail.
func (r *reservations) refund(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	for _, h := range r.held {
		_ = r.failures.Refund(ctx, h[0], h[1])
	}
	r.held = nil
}

// checkSecret is every credential check. The attempt is counted under each
// key before any hashing (a caller over a limit gets RATE_LIMITED, after
// waiting a while for attempts in flight to free their places), so that
// parallel attempts cannot all pass; lookup returns the stored hash
// (CodeNotFound when there is none). An argon2id hash runs in a slot of the
// process-wide gate; without a key (passwords) the lookup runs in the slot
// too, so that callers turned away cost no database round trip. With a
// key (client secrets), the lookup comes first and a hash stored as HMAC
// is checked outside the gate: it costs no more than the lookup. An
// unknown name is counted under the unknownOnly keys too and costs what
// a wrong secret does (an HMAC with a key, an argon2id hash without), so
// the two cannot be told apart. Anything but a failure (a match, a fault,
// a caller turned away) refunds the attempts. It reports whether the
// secret matched a stored hash.
func checkSecret(ctx context.Context, failures FailureLimiter, key *ClientSecretKey, keys []failureKey, limited string, lookup func() (string, error), secret string) (bool, error) {
	if key == nil && hashGate.Full() {
		return false, busy()
	}
	held := &reservations{failures: failures}
	refuse := func(wait time.Duration, waited bool) error {
		held.refund(ctx)
		if !waited {
			slowDown(ctx, wait)
		}
		return &Error{Code: CodeRateLimited, RetryAfter: wait, Message: limited}
	}
	if wait, waited := held.reserveWaiting(ctx, keys); wait > 0 {
		return false, refuse(wait, waited)
	}
	var (
		ok       bool
		storeErr error
		wait     time.Duration
	)
	verify := func(hash string, err error) {
		storeErr = err
		switch {
		case err == nil:
		case ErrorCode(err) == CodeNotFound:
			if wait = held.reserve(ctx, keys, true); wait > 0 {
				return
			}
			hash = dummySecretHash
			if key != nil {
				hash = dummyKeyedHash
			}
		default:
			return
		}
		ok = verifyStored(key, hash, secret) && err == nil
	}
	var gateErr error
	switch {
	case key == nil:
		gateErr = hashGate.Do(ctx, func() { verify(lookup()) })
	default:
		hash, err := lookup()
		switch {
		case err != nil || IsKeyedSecretHash(hash):
			verify(hash, err)
		case hashGate.Full():
			gateErr = busy()
		default:
			gateErr = hashGate.Do(ctx, func() { verify(hash, nil) })
		}
	}
	if gateErr != nil {
		held.refund(ctx)
		return false, gateErr
	}
	switch {
	case storeErr != nil && ErrorCode(storeErr) != CodeNotFound:
		held.refund(ctx)
		return false, storeErr
	case wait > 0:
		return false, refuse(wait, false)
	case ok:
		held.refund(ctx)
	}
	return ok, nil
}

// verifyStored checks secret against a stored hash of either form; an HMAC
// needs the key it was made under.
func verifyStored(key *ClientSecretKey, hash, secret string) bool {
	if IsKeyedSecretHash(hash) {
		return key != nil && key.Verify(hash, secret)
	}
	return VerifySecret(hash, secret)
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

// Me is what the caller learns of itself (GET /accounts/me, GraphQL me).
type Me struct {
	AccountID string
	Name      string
	Role      Role
	// MountUIDs are the token's mount items: empty for owners and
	// maintainers, whose reach is the whole account.
	MountUIDs []string
	Scopes    []string
	ExpiresAt time.Time
}

// Me describes the caller. A token whose account is gone is no longer
// authenticated.
func (s *AccountService) Me(ctx context.Context, p Principal) (Me, error) {
	if err := p.Authorize(ActionReadAccount); err != nil {
		return Me{}, err
	}
	acc, err := s.store.Account(ctx, p.AccountID)
	if ErrorCode(err) == CodeNotFound {
		return Me{}, Errorf(CodeUnauthenticated, "the token's account does not exist")
	}
	if err != nil {
		return Me{}, err
	}
	mountUIDs := []string{}
	if p.Role == RoleRestricted {
		mountUIDs = p.MountUIDs
	}
	return Me{AccountID: acc.ID, Name: acc.Name, Role: p.Role, MountUIDs: mountUIDs, Scopes: p.Scopes, ExpiresAt: p.ExpiresAt}, nil
}

// sourceKey is the part of a throttle key that names the caller's address.
// An IPv6 caller counts by its /64, the block one subscriber is usually
// given, so that walking through its addresses does not reset its count.
func sourceKey(source string) string {
	ip, err := netip.ParseAddr(source)
	if err != nil {
		return source
	}
	if ip = ip.Unmap(); ip.Is4() {
		return ip.String()
	}
	prefix, err := ip.WithZone("").Prefix(64)
	if err != nil {
		return source
	}
	return prefix.String()
}

// shortHash names a caller-supplied string in a bounded key.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:12])
}
