package core

import (
	"context"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

// User is a person of an account who signs in to the console (docs/api.md,
// "People"). A user's token carries the user's role and mount items, so the
// rules of a token apply to people unchanged.
type User struct {
	ID        string `json:"userId"`
	Username  string `json:"username"`
	AccountID string `json:"accountId"`
	Role      Role   `json:"role"`
	// MountUIDs are the mount items of a restricted user; none: a
	// maintainer.
	MountUIDs    []string  `json:"mountUids,omitempty"`
	PasswordHash string    `json:"-"`
	CreatedAt    time.Time `json:"createdAt"`
}

// UserStore persists users.
type UserStore interface {
	// CreateUser stores a user; CodeConflict when the username is taken,
	// CodeNotFound when the account does not exist.
	CreateUser(ctx context.Context, u User) error
	// UserByUsername returns a user; CodeNotFound when there is none.
	UserByUsername(ctx context.Context, username string) (User, error)
	// User returns a user by id; CodeNotFound when there is none.
	User(ctx context.Context, id string) (User, error)
	// ListUsers returns an account's users by username.
	ListUsers(ctx context.Context, accountID string) ([]User, error)
	// SetUserPassword replaces a user's password hash; CodeNotFound when
	// there is no such user.
	SetUserPassword(ctx context.Context, username, hash string) error
	// DeleteUser removes a user and its sessions; CodeNotFound when there
	// is none.
	DeleteUser(ctx context.Context, username string) error
}

// Password and username rules (docs/api.md, "People"). The upper bound on a
// password bounds the work one sign-in attempt can ask of the hash.
const (
	MinPasswordLength = 12
	MaxPasswordBytes  = 1024
)

var usernamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._@+-]{0,63}$`)

// NormalizeUsername folds a username to the form it is stored and looked
// up in: usernames do not differ by case.
func NormalizeUsername(s string) string { return strings.ToLower(strings.TrimSpace(s)) }

// SignInFailures bounds failed sign-ins per username and source address:
// a stranger elsewhere cannot lock a person out, and one address cannot
// guess one person's password faster than this. SignInFailuresPerAddress
// bounds one address walking through many usernames; a browser that
// signed the username in before (SignInSource.KnownDevice) is not held by
// it, so that one address's failures do not lock out everyone behind it.
var (
	SignInFailures           = Rate{Limit: 5, Period: 15 * time.Minute}
	SignInFailuresPerAddress = Rate{Limit: 30, Period: time.Minute}
)

// SignInSource is where a sign-in comes from.
type SignInSource struct {
	// Address is the caller's address.
	Address string
	// KnownDevice says that the browser proved an earlier successful
	// sign-in of the same username (the login page's device cookie).
	KnownDevice bool
}

// NewUser is what creating a user takes.
type NewUser struct {
	AccountID string
	Username  string
	Role      Role
	MountUIDs []string
	Password  string
}

// UserService holds the rules about people and their passwords.
type UserService struct {
	store    UserStore
	failures FailureLimiter
	now      func() time.Time
}

// NewUserService returns a UserService over store that throttles failed
// sign-ins through failures (nil: no throttle).
func NewUserService(store UserStore, failures FailureLimiter) *UserService {
	return &UserService{store: store, failures: failures, now: time.Now}
}

func validatePassword(v *Validation, field, password string) {
	switch {
	case utf8.RuneCountInString(password) < MinPasswordLength:
		v.Add(field, "must have at least 12 characters")
	case len(password) > MaxPasswordBytes:
		v.Add(field, "must have at most 1024 bytes")
	}
}

// Create makes a user of an account.
func (s *UserService) Create(ctx context.Context, in NewUser) (User, error) {
	u := User{ID: "usr_" + randomHex(12), Username: NormalizeUsername(in.Username), AccountID: in.AccountID,
		Role: in.Role, MountUIDs: []string{}, CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	var v Validation
	if !usernamePattern.MatchString(u.Username) {
		v.Add("username", "must be 1 to 64 of a-z, 0-9 and . _ @ + - (case does not matter), starting with a letter or digit")
	}
	switch in.Role {
	case RoleOwner:
		if len(in.MountUIDs) > 0 {
			v.Add("mount", "only a restricted user has mount items")
		}
	case RoleRestricted:
	default:
		v.Add("role", "must be owner or restricted")
	}
	seen := map[string]bool{}
	for _, uid := range in.MountUIDs {
		if !ValidMountUID(uid) {
			v.Add("mount", "is not a mount uid")
			break
		}
		if !seen[uid] {
			seen[uid] = true
			u.MountUIDs = append(u.MountUIDs, uid)
		}
	}
	if len(u.MountUIDs) > 100 {
		v.Add("mount", "at most 100 mount items")
	}
	validatePassword(&v, "password", in.Password)
	if err := v.Err(); err != nil {
		return User{}, err
	}
	hash, err := HashSecret(in.Password)
	if err != nil {
		return User{}, err
	}
	u.PasswordHash = hash
	actx := byOperator(ctx, u.AccountID, u.CreatedAt, AuditUserCreate, AuditTarget("user", u.ID),
		map[string]any{"username": u.Username, "role": string(u.Role), "mountUids": u.MountUIDs})
	if err := s.store.CreateUser(actx, u); err != nil {
		return User{}, err
	}
	return u, nil
}

// List returns an account's users.
func (s *UserService) List(ctx context.Context, accountID string) ([]User, error) {
	return s.store.ListUsers(ctx, accountID)
}

// User returns a user by id.
func (s *UserService) User(ctx context.Context, id string) (User, error) {
	return s.store.User(ctx, id)
}

// SetPassword replaces a user's password.
func (s *UserService) SetPassword(ctx context.Context, username, password string) error {
	var v Validation
	validatePassword(&v, "password", password)
	if err := v.Err(); err != nil {
		return err
	}
	hash, err := HashSecret(password)
	if err != nil {
		return err
	}
	actx, err := s.byOperatorOn(ctx, AuditUserSetPassword, username)
	if err != nil {
		return err
	}
	return s.store.SetUserPassword(actx, NormalizeUsername(username), hash)
}

// Delete removes a user; its refresh tokens stop working at once, its
// access tokens at their expiry.
func (s *UserService) Delete(ctx context.Context, username string) error {
	actx, err := s.byOperatorOn(ctx, AuditUserDelete, username)
	if err != nil {
		return err
	}
	return s.store.DeleteUser(actx, NormalizeUsername(username))
}

// byOperatorOn is the audit entry of a change to the user named username,
// whose account and id it reads; CodeNotFound when there is none.
func (s *UserService) byOperatorOn(ctx context.Context, action AuditAction, username string) (context.Context, error) {
	u, err := s.store.UserByUsername(ctx, NormalizeUsername(username))
	if err != nil {
		return nil, err
	}
	return byOperator(ctx, u.AccountID, s.now(), action, AuditTarget("user", u.ID), map[string]any{"username": u.Username}), nil
}

// SignIn checks a person's username and password presented from source.
// Every failure is the same UNAUTHENTICATED error and costs one hash, so
// that unknown usernames cannot be told from wrong passwords. Over the
// failure limits it is RATE_LIMITED before any hashing; a known device is
// held by the limit per username and address alone.
func (s *UserService) SignIn(ctx context.Context, username, password string, source SignInSource) (User, error) {
	username = NormalizeUsername(username)
	if len(password) > MaxPasswordBytes {
		password = password[:MaxPasswordBytes+1] // still wrong, bounded work
	}
	keys := []failureKey{{key: "signin:user:" + shortHash(username) + "|" + sourceKey(source.Address), rate: SignInFailures}}
	if !source.KnownDevice {
		keys = append(keys, failureKey{key: "signin:addr:" + sourceKey(source.Address), rate: SignInFailuresPerAddress})
	}
	var u User
	ok, err := checkSecret(ctx, s.failures, nil, keys, "too many failed sign-ins; wait before trying again", func() (string, error) {
		var err error
		u, err = s.store.UserByUsername(ctx, username)
		return u.PasswordHash, err
	}, password)
	if err != nil {
		return User{}, err
	}
	if !ok {
		return User{}, Errorf(CodeUnauthenticated, "the username or the password is wrong")
	}
	return u, nil
}

// UserScopes are the scope items of a user's tokens: the mandatory ones, the
// user's role and mount items.
func (r ScopeRules) UserScopes(u User) []string {
	items := []string{ScopeOpenID, ScopeSub, r.AudienceItem(), scopeRolePrefix + string(u.Role)}
	for _, uid := range u.MountUIDs {
		items = append(items, scopeMountPrefix+uid)
	}
	return items
}
