package memory

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

// peopleState holds users, sign-ins in progress and refresh tokens.
type peopleState struct {
	users    map[string]core.User // by id
	requests map[string]core.AuthRequest
	refresh  map[string]core.RefreshToken // by hash
}

func (p *peopleState) init() {
	if p.users == nil {
		p.users, p.requests, p.refresh = map[string]core.User{}, map[string]core.AuthRequest{}, map[string]core.RefreshToken{}
	}
}

func userNotFound() error { return core.Errorf(core.CodeNotFound, "user not found") }

func (s *Store) userByNameLocked(username string) (core.User, bool) {
	for _, u := range s.people.users {
		if u.Username == username {
			return u, true
		}
	}
	return core.User{}, false
}

func copyUser(u core.User) core.User {
	u.MountUIDs = slices.Clone(u.MountUIDs)
	return u
}

// CreateUser implements core.UserStore.
func (s *Store) CreateUser(ctx context.Context, u core.User) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	if _, ok := s.accounts[u.AccountID]; !ok {
		return core.Errorf(core.CodeNotFound, "account %q not found", u.AccountID)
	}
	if _, taken := s.userByNameLocked(u.Username); taken {
		return core.Errorf(core.CodeConflict, "the username %q is taken", u.Username)
	}
	u.CreatedAt = ms(u.CreatedAt)
	s.people.users[u.ID] = copyUser(u)
	s.auditLocked(ctx)
	return nil
}

// UserByUsername implements core.UserStore.
func (s *Store) UserByUsername(_ context.Context, username string) (core.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	u, ok := s.userByNameLocked(username)
	if !ok {
		return core.User{}, userNotFound()
	}
	return copyUser(u), nil
}

// User implements core.UserStore.
func (s *Store) User(_ context.Context, id string) (core.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	u, ok := s.people.users[id]
	if !ok {
		return core.User{}, userNotFound()
	}
	return copyUser(u), nil
}

// ListUsers implements core.UserStore.
func (s *Store) ListUsers(_ context.Context, accountID string) ([]core.User, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	out := []core.User{}
	for _, u := range s.people.users {
		if u.AccountID == accountID {
			out = append(out, copyUser(u))
		}
	}
	slices.SortFunc(out, func(a, b core.User) int { return strings.Compare(a.Username, b.Username) })
	return out, nil
}

// SetUserPassword implements core.UserStore: the user's refresh tokens go
// with the old password.
func (s *Store) SetUserPassword(ctx context.Context, username, hash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	u, ok := s.userByNameLocked(username)
	if !ok {
		return userNotFound()
	}
	u.PasswordHash = hash
	s.people.users[u.ID] = u
	s.revokeUserLocked(u.ID)
	s.auditLocked(ctx)
	return nil
}

// DeleteUser implements core.UserStore.
func (s *Store) DeleteUser(ctx context.Context, username string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	u, ok := s.userByNameLocked(username)
	if !ok {
		return userNotFound()
	}
	delete(s.people.users, u.ID)
	s.revokeUserLocked(u.ID)
	s.auditLocked(ctx)
	return nil
}

func (s *Store) revokeUserLocked(userID string) {
	for h, t := range s.people.refresh {
		if t.UserID == userID {
			delete(s.people.refresh, h)
		}
	}
}

func authRequestNotFound() error { return core.Errorf(core.CodeNotFound, "sign-in not found") }

func copyRequest(r core.AuthRequest) core.AuthRequest {
	r.Scopes = slices.Clone(r.Scopes)
	return r
}

// CreateAuthRequest implements core.SessionStore.
func (s *Store) CreateAuthRequest(_ context.Context, r core.AuthRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	r.CreatedAt = ms(r.CreatedAt)
	s.people.requests[r.ID] = copyRequest(r)
	return nil
}

// AuthRequest implements core.SessionStore.
func (s *Store) AuthRequest(_ context.Context, id string) (core.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	r, ok := s.people.requests[id]
	if !ok {
		return core.AuthRequest{}, authRequestNotFound()
	}
	return copyRequest(r), nil
}

// AuthRequestByCode implements core.SessionStore.
func (s *Store) AuthRequestByCode(_ context.Context, codeHash string) (core.AuthRequest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	for _, r := range s.people.requests {
		if r.CodeHash != "" && r.CodeHash == codeHash {
			return copyRequest(r), nil
		}
	}
	return core.AuthRequest{}, authRequestNotFound()
}

// CompleteAuthRequest implements core.SessionStore.
func (s *Store) CompleteAuthRequest(_ context.Context, id, userID string, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	r, ok := s.people.requests[id]
	if !ok || r.UserID != "" {
		return authRequestNotFound()
	}
	r.UserID, r.AuthTime = userID, ms(at)
	s.people.requests[id] = r
	return nil
}

// OpenSignIns implements core.SessionStore.
func (s *Store) OpenSignIns(_ context.Context, source string, after time.Time, limit int) (int, time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	var created []time.Time
	for _, r := range s.people.requests {
		if r.Source == source && r.CreatedAt.After(after) {
			created = append(created, r.CreatedAt)
		}
	}
	if len(created) == 0 {
		return 0, time.Time{}, nil
	}
	return min(len(created), limit), slices.MinFunc(created, time.Time.Compare), nil
}

// SaveAuthCode implements core.SessionStore.
func (s *Store) SaveAuthCode(_ context.Context, id, codeHash string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	r, ok := s.people.requests[id]
	if !ok || r.CodeHash != "" {
		return authRequestNotFound()
	}
	r.CodeHash = codeHash
	s.people.requests[id] = r
	return nil
}

// DeleteAuthRequest implements core.SessionStore.
func (s *Store) DeleteAuthRequest(_ context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	delete(s.people.requests, id)
	return nil
}

func copyRefresh(t core.RefreshToken) core.RefreshToken {
	t.Scopes = slices.Clone(t.Scopes)
	t.AuthTime, t.CreatedAt, t.ExpiresAt, t.UsedAt = ms(t.AuthTime), ms(t.CreatedAt), ms(t.ExpiresAt), ms(t.UsedAt)
	return t
}

// CreateRefreshToken implements core.SessionStore.
func (s *Store) CreateRefreshToken(_ context.Context, t core.RefreshToken) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	if _, ok := s.people.users[t.UserID]; !ok {
		return userNotFound()
	}
	s.people.refresh[t.Hash] = copyRefresh(t)
	return nil
}

// RefreshToken implements core.SessionStore.
func (s *Store) RefreshToken(_ context.Context, hash string) (core.RefreshToken, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	t, ok := s.people.refresh[hash]
	if !ok {
		return core.RefreshToken{}, core.Errorf(core.CodeNotFound, "refresh token not found")
	}
	return copyRefresh(t), nil
}

// RotateRefreshToken implements core.SessionStore.
func (s *Store) RotateRefreshToken(_ context.Context, oldHash string, now time.Time, next core.RefreshToken) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	old, ok := s.people.refresh[oldHash]
	if !ok || !old.UsedAt.IsZero() {
		return core.Errorf(core.CodeConflict, "the refresh token was used already")
	}
	old.UsedAt = ms(now)
	s.people.refresh[oldHash] = old
	s.people.refresh[next.Hash] = copyRefresh(next)
	return nil
}

// RevokeRefreshFamily implements core.SessionStore.
func (s *Store) RevokeRefreshFamily(_ context.Context, family string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	for h, t := range s.people.refresh {
		if t.Family == family {
			delete(s.people.refresh, h)
		}
	}
	return nil
}

// RevokeUserRefreshTokens implements core.SessionStore.
func (s *Store) RevokeUserRefreshTokens(_ context.Context, userID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	s.revokeUserLocked(userID)
	return nil
}

// TrimUsedRefreshTokens implements core.SessionStore.
func (s *Store) TrimUsedRefreshTokens(_ context.Context, family string, keep int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	var used []core.RefreshToken
	for _, t := range s.people.refresh {
		if t.Family == family && !t.UsedAt.IsZero() {
			used = append(used, t)
		}
	}
	slices.SortFunc(used, func(a, b core.RefreshToken) int { return b.UsedAt.Compare(a.UsedAt) })
	for _, t := range used[min(keep, len(used)):] {
		delete(s.people.refresh, t.Hash)
	}
	return nil
}

// TrimRefreshFamilies implements core.SessionStore.
func (s *Store) TrimRefreshFamilies(_ context.Context, userID string, keep int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.people.init()
	signedIn := map[string]time.Time{} // family: its sign-in
	for _, t := range s.people.refresh {
		if t.UserID == userID {
			signedIn[t.Family] = t.AuthTime
		}
	}
	families := slices.Collect(maps.Keys(signedIn))
	slices.SortFunc(families, func(a, b string) int { return signedIn[b].Compare(signedIn[a]) })
	for _, f := range families[min(keep, len(families)):] {
		for h, t := range s.people.refresh {
			if t.Family == f {
				delete(s.people.refresh, h)
			}
		}
	}
	return nil
}
