package core

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// ConsoleClientID is the built-in public client of the console (docs/api.md,
// "People"). A person's token names it as client_id; the person is its sub.
const ConsoleClientID = "mountd-console"

// AuthRequest is one sign-in through the authorization code flow, from the
// console's redirect to the identity provider until its code is exchanged.
// It lives in the database so that any replica can serve any step.
type AuthRequest struct {
	ID                  string
	ClientID            string
	RedirectURI         string
	State               string
	Nonce               string
	Scopes              []string
	ResponseType        string
	ResponseMode        string
	CodeChallenge       string
	CodeChallengeMethod string
	// BrowserHash is the SHA-256 of the secret in the cookie of the
	// browser that started the sign-in: only that browser may sign in at
	// its login page and collect its code.
	BrowserHash string
	// Source is the address the sign-in came from, as its throttle key (an
	// IPv6 address counts as its /64), which bounds open sign-ins.
	Source string
	// UserID and AuthTime are set once the person has signed in.
	UserID   string
	AuthTime time.Time
	// CodeHash is the SHA-256 of the code handed out; the code itself is
	// never stored.
	CodeHash  string
	CreatedAt time.Time
}

// RefreshToken is a refresh token's record. Tokens rotate: each use marks
// the token used and hands out the next of its family; a used token
// presented again means it leaked, and the whole family is revoked.
type RefreshToken struct {
	// Hash is the SHA-256 of the token; the token itself is never stored.
	Hash      string
	Family    string
	UserID    string
	ClientID  string
	Scopes    []string
	AuthTime  time.Time
	CreatedAt time.Time
	ExpiresAt time.Time
	// UsedAt is when it was exchanged for the next (zero: not yet).
	UsedAt time.Time
}

// SessionStore persists sign-ins in progress and refresh tokens.
type SessionStore interface {
	CreateAuthRequest(ctx context.Context, r AuthRequest) error
	// AuthRequest returns a request by id; CodeNotFound when there is none.
	AuthRequest(ctx context.Context, id string) (AuthRequest, error)
	// AuthRequestByCode returns a request by its code's hash; CodeNotFound
	// when there is none.
	AuthRequestByCode(ctx context.Context, codeHash string) (AuthRequest, error)
	// CompleteAuthRequest records who signed in, once: CodeNotFound when
	// there is no such request or someone already did.
	CompleteAuthRequest(ctx context.Context, id, userID string, at time.Time) error
	// OpenSignIns counts the requests from source created after after, up
	// to limit, and returns the oldest of those counted.
	OpenSignIns(ctx context.Context, source string, after time.Time, limit int) (n int, oldest time.Time, err error)
	// SaveAuthCode records the hash of the code handed out for a request,
	// once: CodeNotFound when there is no such request or it has a code.
	SaveAuthCode(ctx context.Context, id, codeHash string) error
	DeleteAuthRequest(ctx context.Context, id string) error
	CreateRefreshToken(ctx context.Context, t RefreshToken) error
	// RefreshToken returns a token's record by hash; CodeNotFound when
	// there is none.
	RefreshToken(ctx context.Context, hash string) (RefreshToken, error)
	// RotateRefreshToken marks the token of oldHash used at now and stores
	// next, in one transaction: CodeConflict when the old one was used
	// already (or is gone), and then nothing is stored.
	RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, next RefreshToken) error
	// TrimUsedRefreshTokens deletes the used tokens of a family but the
	// keep most recently used.
	TrimUsedRefreshTokens(ctx context.Context, family string, keep int) error
	// TrimRefreshFamilies deletes the families of a user but the keep
	// signed in to last.
	TrimRefreshFamilies(ctx context.Context, userID string, keep int) error
	// RevokeRefreshFamily deletes every token of a family.
	RevokeRefreshFamily(ctx context.Context, family string) error
	// RevokeUserRefreshTokens deletes every refresh token of a user.
	RevokeUserRefreshTokens(ctx context.Context, userID string) error
}

// Lifetimes of sign-ins (docs/api.md, "People").
const (
	// AuthRequestTTL is how long a person has to sign in and the console
	// to exchange the code.
	AuthRequestTTL = 10 * time.Minute
	// RefreshIdle is how long a refresh token stays valid unused; each use
	// hands out a new one.
	RefreshIdle = 7 * 24 * time.Hour
	// RefreshMax is how long after signing in refresh tokens are handed
	// out at all: then the person signs in again.
	RefreshMax = 30 * 24 * time.Hour
)

// Bounds of what an unauthenticated caller may store by starting sign-ins
// (docs/api.md, "People").
const (
	// MaxSignInParam bounds each stored parameter of a sign-in in bytes
	// (the scope items together).
	MaxSignInParam = 512
	// MaxOpenSignIns is how many sign-ins one source address may have open
	// (started within AuthRequestTTL and not yet exchanged) at once.
	MaxOpenSignIns = 100
	// MaxRefreshFamilies is how many sign-ins with refresh tokens a user
	// keeps: a new one ends the oldest beyond it.
	MaxRefreshFamilies = 200
	// KeptUsedRefresh is how many used refresh tokens of a sign-in are
	// remembered to detect a leak: a refresh loop cannot grow storage
	// without bound, and an older token presented again is just refused.
	KeptUsedRefresh = 10
)

// TokenHash is the stored form of a code or refresh token.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// SessionService holds the rules of sign-ins and refresh tokens.
type SessionService struct {
	store SessionStore
	users UserStore
	now   func() time.Time
}

// NewSessionService returns a SessionService over store.
func NewSessionService(store SessionStore, users UserStore) *SessionService {
	return &SessionService{store: store, users: users, now: time.Now}
}

// SetClock replaces the clock (tests).
func (s *SessionService) SetClock(now func() time.Time) { s.now = now }

func (s *SessionService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// AdmitSignIn refuses a new sign-in from source (an address) with
// CodeRateLimited, and the wait, when the source already has
// MaxOpenSignIns open; callers ask before StartSignIn. Two racing requests
// may both be admitted: the overshoot is bounded by the requests in flight.
func (s *SessionService) AdmitSignIn(ctx context.Context, source string) error {
	now := s.clock()
	n, oldest, err := s.store.OpenSignIns(ctx, sourceKey(source), now.Add(-AuthRequestTTL), MaxOpenSignIns)
	if err != nil {
		return err
	}
	if n >= MaxOpenSignIns {
		return &Error{Code: CodeRateLimited, RetryAfter: max(time.Second, oldest.Add(AuthRequestTTL).Sub(now)),
			Message: "too many sign-ins in progress from this address; finish one or wait"}
	}
	return nil
}

// StartSignIn stores a new sign-in and returns it with its id:
// CodeValidation when a parameter is longer than MaxSignInParam. r.Source
// is the caller's address.
func (s *SessionService) StartSignIn(ctx context.Context, r AuthRequest) (AuthRequest, error) {
	for name, v := range map[string]string{"client_id": r.ClientID, "redirect_uri": r.RedirectURI, "state": r.State,
		"nonce": r.Nonce, "scope": strings.Join(r.Scopes, " "), "response_type": r.ResponseType, "response_mode": r.ResponseMode,
		"code_challenge": r.CodeChallenge, "code_challenge_method": r.CodeChallengeMethod} {
		if len(v) > MaxSignInParam {
			return AuthRequest{}, &Error{Code: CodeValidation, Message: "a parameter is too long",
				Fields: []FieldError{{Field: name, Message: fmt.Sprintf("must be at most %d bytes", MaxSignInParam)}}}
		}
	}
	r.ID, r.CreatedAt = "ar_"+randomText(24), s.clock()
	r.UserID, r.AuthTime, r.CodeHash = "", time.Time{}, ""
	r.Source = sourceKey(r.Source)
	if err := s.store.CreateAuthRequest(ctx, r); err != nil {
		return AuthRequest{}, err
	}
	return r, nil
}

func (s *SessionService) live(r AuthRequest, err error) (AuthRequest, error) {
	if err != nil {
		return AuthRequest{}, err
	}
	if !s.clock().Before(r.CreatedAt.Add(AuthRequestTTL)) {
		return AuthRequest{}, Errorf(CodeNotFound, "the sign-in has expired; start again")
	}
	return r, nil
}

// SignIn returns a sign-in in progress; CodeNotFound when there is none or
// it has expired.
func (s *SessionService) SignIn(ctx context.Context, id string) (AuthRequest, error) {
	return s.live(s.store.AuthRequest(ctx, id))
}

// SignInByCode returns the sign-in a code was handed out for.
func (s *SessionService) SignInByCode(ctx context.Context, code string) (AuthRequest, error) {
	return s.live(s.store.AuthRequestByCode(ctx, TokenHash(code)))
}

// CompleteSignIn records that u signed in for the sign-in id.
func (s *SessionService) CompleteSignIn(ctx context.Context, id string, u User) error {
	if _, err := s.SignIn(ctx, id); err != nil {
		return err
	}
	return s.store.CompleteAuthRequest(ctx, id, u.ID, s.clock())
}

// SaveCode records the code handed out for a sign-in.
func (s *SessionService) SaveCode(ctx context.Context, id, code string) error {
	return s.store.SaveAuthCode(ctx, id, TokenHash(code))
}

// EndSignIn forgets a sign-in (its code was exchanged).
func (s *SessionService) EndSignIn(ctx context.Context, id string) error {
	return s.store.DeleteAuthRequest(ctx, id)
}

// IssueRefresh hands out the first refresh token of a new family.
func (s *SessionService) IssueRefresh(ctx context.Context, userID, clientID string, scopes []string, authTime time.Time) (string, error) {
	token := "rt_" + randomText(32)
	now := s.clock()
	t := RefreshToken{Hash: TokenHash(token), Family: "rf_" + randomHex(12), UserID: userID, ClientID: clientID,
		Scopes: scopes, AuthTime: authTime, CreatedAt: now, ExpiresAt: s.refreshExpiry(now, authTime)}
	if err := s.store.CreateRefreshToken(ctx, t); err != nil {
		return "", err
	}
	if err := s.store.TrimRefreshFamilies(ctx, userID, MaxRefreshFamilies); err != nil {
		return "", err
	}
	return token, nil
}

func (s *SessionService) refreshExpiry(now, authTime time.Time) time.Time {
	exp := now.Add(RefreshIdle)
	if limit := authTime.Add(RefreshMax); limit.Before(exp) {
		exp = limit
	}
	return exp
}

func invalidRefresh() error {
	return Errorf(CodeUnauthenticated, "the refresh token is not valid; sign in again")
}

// Refresh checks a refresh token presented by clientID and returns its
// record with the user's current role and mount items as its scopes, so a
// change to the user applies at the next refresh. A token used before is a
// leaked token: its family is revoked. A deleted user's tokens are gone.
func (s *SessionService) Refresh(ctx context.Context, token, clientID string) (RefreshToken, User, error) {
	t, err := s.store.RefreshToken(ctx, TokenHash(token))
	if ErrorCode(err) == CodeNotFound {
		return RefreshToken{}, User{}, invalidRefresh()
	}
	if err != nil {
		return RefreshToken{}, User{}, err
	}
	if t.ClientID != clientID {
		return RefreshToken{}, User{}, invalidRefresh()
	}
	if !t.UsedAt.IsZero() {
		if err := s.store.RevokeRefreshFamily(ctx, t.Family); err != nil {
			return RefreshToken{}, User{}, err
		}
		return RefreshToken{}, User{}, invalidRefresh()
	}
	if !s.clock().Before(t.ExpiresAt) {
		return RefreshToken{}, User{}, invalidRefresh()
	}
	u, err := s.users.User(ctx, t.UserID)
	if ErrorCode(err) == CodeNotFound {
		return RefreshToken{}, User{}, invalidRefresh()
	}
	if err != nil {
		return RefreshToken{}, User{}, err
	}
	return t, u, nil
}

// Rotate exchanges a refresh token (checked by Refresh) for the next of its
// family. Two uses racing: one wins, the other revokes the family.
func (s *SessionService) Rotate(ctx context.Context, token string, scopes []string) (string, error) {
	old, err := s.store.RefreshToken(ctx, TokenHash(token))
	if ErrorCode(err) == CodeNotFound {
		return "", invalidRefresh()
	}
	if err != nil {
		return "", err
	}
	next := "rt_" + randomText(32)
	now := s.clock()
	t := RefreshToken{Hash: TokenHash(next), Family: old.Family, UserID: old.UserID, ClientID: old.ClientID,
		Scopes: scopes, AuthTime: old.AuthTime, CreatedAt: now, ExpiresAt: s.refreshExpiry(now, old.AuthTime)}
	if err := s.store.RotateRefreshToken(ctx, old.Hash, now, t); err != nil {
		if ErrorCode(err) == CodeConflict {
			if err := s.store.RevokeRefreshFamily(ctx, old.Family); err != nil {
				return "", err
			}
			return "", invalidRefresh()
		}
		return "", err
	}
	if err := s.store.TrimUsedRefreshTokens(ctx, old.Family, KeptUsedRefresh); err != nil {
		return "", err
	}
	return next, nil
}

// SignOut revokes a refresh token's family (the console's sign-out).
func (s *SessionService) SignOut(ctx context.Context, token string) error {
	t, err := s.store.RefreshToken(ctx, TokenHash(token))
	if ErrorCode(err) == CodeNotFound {
		return nil
	}
	if err != nil {
		return err
	}
	return s.store.RevokeRefreshFamily(ctx, t.Family)
}
