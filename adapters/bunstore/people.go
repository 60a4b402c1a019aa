package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var (
	_ core.UserStore    = (*Store)(nil)
	_ core.SessionStore = (*Store)(nil)
)

type userRow struct {
	bun.BaseModel `bun:"table:users"`
	ID            string `bun:"id,pk"`
	Username      string `bun:"username"`
	AccountID     string `bun:"account_id"`
	Role          string `bun:"role"`
	MountUIDs     string `bun:"mount_uids"` // space-separated
	PasswordHash  string `bun:"password_hash"`
	CreatedAt     int64  `bun:"created_at"`
}

func (r *userRow) toUser() core.User {
	return core.User{ID: r.ID, Username: r.Username, AccountID: r.AccountID, Role: core.Role(r.Role),
		MountUIDs: strings.Fields(r.MountUIDs), PasswordHash: r.PasswordHash, CreatedAt: fromMillis(r.CreatedAt)}
}

func userNotFound() error { return core.Errorf(core.CodeNotFound, "user not found") }

// CreateUser implements core.UserStore.
func (s *Store) CreateUser(ctx context.Context, u core.User) error {
	row := &userRow{ID: u.ID, Username: u.Username, AccountID: u.AccountID, Role: string(u.Role),
		MountUIDs: strings.Join(u.MountUIDs, " "), PasswordHash: u.PasswordHash, CreatedAt: millis(u.CreatedAt)}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		n, err := tx.NewSelect().Table("accounts").Where("id = ?", u.AccountID).Count(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return core.Errorf(core.CodeNotFound, "account %q not found", u.AccountID)
		}
		if _, err := tx.NewInsert().Model(row).Exec(ctx); err != nil {
			if isUniqueViolation(err) {
				return core.Errorf(core.CodeConflict, "the username %q is taken", u.Username)
			}
			return err
		}
		return s.recordAudit(ctx, tx)
	})
}

func (s *Store) userWhere(ctx context.Context, where string, arg any) (core.User, error) {
	var row userRow
	err := s.db.NewSelect().Model(&row).Where(where, arg).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return core.User{}, userNotFound()
	}
	if err != nil {
		return core.User{}, err
	}
	return row.toUser(), nil
}

// UserByUsername implements core.UserStore.
func (s *Store) UserByUsername(ctx context.Context, username string) (core.User, error) {
	return s.userWhere(ctx, "username = ?", username)
}

// User implements core.UserStore.
func (s *Store) User(ctx context.Context, id string) (core.User, error) {
	return s.userWhere(ctx, "id = ?", id)
}

// ListUsers implements core.UserStore.
func (s *Store) ListUsers(ctx context.Context, accountID string) ([]core.User, error) {
	var rows []userRow
	if err := s.db.NewSelect().Model(&rows).Where("account_id = ?", accountID).OrderExpr("username").Scan(ctx); err != nil {
		return nil, err
	}
	out := make([]core.User, len(rows))
	for i := range rows {
		out[i] = rows[i].toUser()
	}
	return out, nil
}

// SetUserPassword implements core.UserStore: the user's refresh tokens go
// with the old password, in the same transaction.
func (s *Store) SetUserPassword(ctx context.Context, username, hash string) error {
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var id string
		err := tx.NewRaw(`UPDATE users SET password_hash = ? WHERE username = ? RETURNING id`, hash, username).Scan(ctx, &id)
		if errors.Is(err, sql.ErrNoRows) {
			return userNotFound()
		}
		if err != nil {
			return err
		}
		if _, err = tx.NewDelete().Table("refresh_tokens").Where("user_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
}

// DeleteUser implements core.UserStore; the schema cascades to the user's
// sign-ins and refresh tokens.
func (s *Store) DeleteUser(ctx context.Context, username string) error {
	return s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		res, err := db.NewDelete().Table("users").Where("username = ?", username).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return userNotFound()
		}
		return nil
	})
}

type authRequestRow struct {
	bun.BaseModel       `bun:"table:auth_requests"`
	ID                  string         `bun:"id,pk"`
	ClientID            string         `bun:"client_id"`
	RedirectURI         string         `bun:"redirect_uri"`
	State               string         `bun:"state"`
	Nonce               string         `bun:"nonce"`
	Scopes              string         `bun:"scopes"`
	ResponseType        string         `bun:"response_type"`
	ResponseMode        string         `bun:"response_mode"`
	CodeChallenge       string         `bun:"code_challenge"`
	CodeChallengeMethod string         `bun:"code_challenge_method"`
	BrowserHash         string         `bun:"browser_hash"`
	Source              string         `bun:"source"`
	UserID              sql.NullString `bun:"user_id"`
	AuthTime            sql.NullInt64  `bun:"auth_time"`
	CodeHash            sql.NullString `bun:"code_hash"`
	CreatedAt           int64          `bun:"created_at"`
}

func (r *authRequestRow) toRequest() core.AuthRequest {
	out := core.AuthRequest{ID: r.ID, ClientID: r.ClientID, RedirectURI: r.RedirectURI, State: r.State, Nonce: r.Nonce,
		Scopes: strings.Fields(r.Scopes), ResponseType: r.ResponseType, ResponseMode: r.ResponseMode,
		CodeChallenge: r.CodeChallenge, CodeChallengeMethod: r.CodeChallengeMethod, BrowserHash: r.BrowserHash, Source: r.Source,
		UserID:   r.UserID.String,
		CodeHash: r.CodeHash.String, CreatedAt: fromMillis(r.CreatedAt)}
	if r.AuthTime.Valid {
		out.AuthTime = fromMillis(r.AuthTime.Int64)
	}
	return out
}

func authRequestNotFound() error { return core.Errorf(core.CodeNotFound, "sign-in not found") }

// CreateAuthRequest implements core.SessionStore.
func (s *Store) CreateAuthRequest(ctx context.Context, r core.AuthRequest) error {
	row := &authRequestRow{ID: r.ID, ClientID: r.ClientID, RedirectURI: r.RedirectURI, State: r.State, Nonce: r.Nonce,
		Scopes: strings.Join(r.Scopes, " "), ResponseType: r.ResponseType, ResponseMode: r.ResponseMode,
		CodeChallenge: r.CodeChallenge, CodeChallengeMethod: r.CodeChallengeMethod, BrowserHash: r.BrowserHash, Source: r.Source,
		CreatedAt: millis(r.CreatedAt)}
	return s.write(ctx, func() error {
		_, err := s.db.NewInsert().Model(row).Exec(ctx)
		return err
	})
}

func (s *Store) authRequestWhere(ctx context.Context, where string, arg any) (core.AuthRequest, error) {
	var row authRequestRow
	err := s.db.NewSelect().Model(&row).Where(where, arg).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return core.AuthRequest{}, authRequestNotFound()
	}
	if err != nil {
		return core.AuthRequest{}, err
	}
	return row.toRequest(), nil
}

// AuthRequest implements core.SessionStore.
func (s *Store) AuthRequest(ctx context.Context, id string) (core.AuthRequest, error) {
	return s.authRequestWhere(ctx, "id = ?", id)
}

// AuthRequestByCode implements core.SessionStore.
func (s *Store) AuthRequestByCode(ctx context.Context, codeHash string) (core.AuthRequest, error) {
	return s.authRequestWhere(ctx, "code_hash = ?", codeHash)
}

// execOne runs a write statement that must change one row; notFound when
// it changed none.
func (s *Store) execOne(ctx context.Context, notFound func() error, query string, args ...any) error {
	var res sql.Result
	err := s.write(ctx, func() (err error) {
		res, err = s.db.NewRaw(query, args...).Exec(ctx)
		return err
	})
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return notFound()
	}
	return nil
}

// CompleteAuthRequest implements core.SessionStore.
func (s *Store) CompleteAuthRequest(ctx context.Context, id, userID string, at time.Time) error {
	return s.execOne(ctx, authRequestNotFound, `UPDATE auth_requests SET user_id = ?, auth_time = ? WHERE id = ? AND user_id IS NULL`,
		userID, millis(at), id)
}

// OpenSignIns implements core.SessionStore. It reads at most limit rows
// of the (source, created_at) index.
func (s *Store) OpenSignIns(ctx context.Context, source string, after time.Time, limit int) (int, time.Time, error) {
	var (
		n      int
		oldest sql.NullInt64
	)
	err := s.db.NewRaw(`SELECT COUNT(*), MIN(created_at) FROM (SELECT created_at FROM auth_requests
		WHERE source = ? AND created_at > ? ORDER BY created_at LIMIT ?) AS open`, source, millis(after), limit).Scan(ctx, &n, &oldest)
	if err != nil || !oldest.Valid {
		return n, time.Time{}, err
	}
	return n, fromMillis(oldest.Int64), nil
}

// SaveAuthCode implements core.SessionStore.
func (s *Store) SaveAuthCode(ctx context.Context, id, codeHash string) error {
	return s.execOne(ctx, authRequestNotFound, `UPDATE auth_requests SET code_hash = ? WHERE id = ? AND code_hash IS NULL`, codeHash, id)
}

// DeleteAuthRequest implements core.SessionStore.
func (s *Store) DeleteAuthRequest(ctx context.Context, id string) error {
	return s.write(ctx, func() error {
		_, err := s.db.NewDelete().Table("auth_requests").Where("id = ?", id).Exec(ctx)
		return err
	})
}

type refreshRow struct {
	bun.BaseModel `bun:"table:refresh_tokens"`
	Hash          string        `bun:"hash,pk"`
	Family        string        `bun:"family"`
	UserID        string        `bun:"user_id"`
	ClientID      string        `bun:"client_id"`
	Scopes        string        `bun:"scopes"`
	AuthTime      int64         `bun:"auth_time"`
	CreatedAt     int64         `bun:"created_at"`
	ExpiresAt     int64         `bun:"expires_at"`
	UsedAt        sql.NullInt64 `bun:"used_at"`
}

func toRefreshRow(t core.RefreshToken) *refreshRow {
	return &refreshRow{Hash: t.Hash, Family: t.Family, UserID: t.UserID, ClientID: t.ClientID, Scopes: strings.Join(t.Scopes, " "),
		AuthTime: millis(t.AuthTime), CreatedAt: millis(t.CreatedAt), ExpiresAt: millis(t.ExpiresAt), UsedAt: optNull(t.UsedAt)}
}

func (r *refreshRow) toToken() core.RefreshToken {
	t := core.RefreshToken{Hash: r.Hash, Family: r.Family, UserID: r.UserID, ClientID: r.ClientID, Scopes: strings.Fields(r.Scopes),
		AuthTime: fromMillis(r.AuthTime), CreatedAt: fromMillis(r.CreatedAt), ExpiresAt: fromMillis(r.ExpiresAt)}
	if r.UsedAt.Valid {
		t.UsedAt = fromMillis(r.UsedAt.Int64)
	}
	return t
}

// CreateRefreshToken implements core.SessionStore.
func (s *Store) CreateRefreshToken(ctx context.Context, t core.RefreshToken) error {
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		n, err := tx.NewSelect().Table("users").Where("id = ?", t.UserID).Count(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return userNotFound()
		}
		_, err = tx.NewInsert().Model(toRefreshRow(t)).Exec(ctx)
		return err
	})
}

// RefreshToken implements core.SessionStore.
func (s *Store) RefreshToken(ctx context.Context, hash string) (core.RefreshToken, error) {
	var row refreshRow
	err := s.db.NewSelect().Model(&row).Where("hash = ?", hash).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return core.RefreshToken{}, core.Errorf(core.CodeNotFound, "refresh token not found")
	}
	if err != nil {
		return core.RefreshToken{}, err
	}
	return row.toToken(), nil
}

// RotateRefreshToken implements core.SessionStore: the conditional UPDATE
// lets one of two racing uses win.
func (s *Store) RotateRefreshToken(ctx context.Context, oldHash string, now time.Time, next core.RefreshToken) error {
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		res, err := tx.NewRaw(`UPDATE refresh_tokens SET used_at = ? WHERE hash = ? AND used_at IS NULL`, millis(now), oldHash).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return core.Errorf(core.CodeConflict, "the refresh token was used already")
		}
		_, err = tx.NewInsert().Model(toRefreshRow(next)).Exec(ctx)
		return err
	})
}

// TrimUsedRefreshTokens implements core.SessionStore; a family holds few
// rows, found by its index.
func (s *Store) TrimUsedRefreshTokens(ctx context.Context, family string, keep int) error {
	return s.write(ctx, func() error {
		_, err := s.db.NewRaw(`DELETE FROM refresh_tokens WHERE family = ? AND used_at IS NOT NULL AND hash NOT IN
			(SELECT hash FROM refresh_tokens WHERE family = ? AND used_at IS NOT NULL ORDER BY used_at DESC, hash LIMIT ?)`,
			family, family, keep).Exec(ctx)
		return err
	})
}

// TrimRefreshFamilies implements core.SessionStore: a family's sign-in is
// the auth_time its tokens share.
func (s *Store) TrimRefreshFamilies(ctx context.Context, userID string, keep int) error {
	return s.write(ctx, func() error {
		_, err := s.db.NewRaw(`DELETE FROM refresh_tokens WHERE user_id = ? AND family NOT IN
			(SELECT family FROM refresh_tokens WHERE user_id = ? GROUP BY family ORDER BY MAX(auth_time) DESC, family LIMIT ?)`,
			userID, userID, keep).Exec(ctx)
		return err
	})
}

// RevokeRefreshFamily implements core.SessionStore.
func (s *Store) RevokeRefreshFamily(ctx context.Context, family string) error {
	return s.write(ctx, func() error {
		_, err := s.db.NewDelete().Table("refresh_tokens").Where("family = ?", family).Exec(ctx)
		return err
	})
}

// RevokeUserRefreshTokens implements core.SessionStore.
func (s *Store) RevokeUserRefreshTokens(ctx context.Context, userID string) error {
	return s.write(ctx, func() error {
		_, err := s.db.NewDelete().Table("refresh_tokens").Where("user_id = ?", userID).Exec(ctx)
		return err
	})
}
