package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// users: usernames are unique across accounts, a user needs its account,
// a new password ends the user's refresh tokens, deleting a user ends its
// sign-ins and tokens.
func users(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	created := time.Date(2026, 11, 25, 5, 0, 0, 123_000_000, time.UTC)
	alice := core.User{ID: "usr_1", Username: "alice", AccountID: "acc_a", Role: core.RoleOwner, MountUIDs: []string{}, PasswordHash: "h1", CreatedAt: created}
	bob := core.User{ID: "usr_2", Username: "bob", AccountID: "acc_a", Role: core.RoleRestricted, MountUIDs: []string{"M1", "M2"}, PasswordHash: "h2", CreatedAt: created}
	for _, u := range []core.User{bob, alice} {
		if err := store.CreateUser(ctx, u); err != nil {
			t.Fatalf("CreateUser %s: %v", u.Username, err)
		}
	}
	for _, tt := range []struct {
		name string
		call func() error
		want core.Code
	}{
		{"username taken in another account", func() error {
			return store.CreateUser(ctx, core.User{ID: "usr_3", Username: "alice", AccountID: "acc_b", Role: core.RoleOwner, PasswordHash: "h", CreatedAt: created})
		}, core.CodeConflict},
		{"unknown account", func() error {
			return store.CreateUser(ctx, core.User{ID: "usr_4", Username: "carol", AccountID: "acc_x", Role: core.RoleOwner, PasswordHash: "h", CreatedAt: created})
		}, core.CodeNotFound},
		{"unknown username", func() error { _, err := store.UserByUsername(ctx, "nobody"); return err }, core.CodeNotFound},
		{"unknown id", func() error { _, err := store.User(ctx, "usr_x"); return err }, core.CodeNotFound},
		{"set password of nobody", func() error { return store.SetUserPassword(ctx, "nobody", "h") }, core.CodeNotFound},
		{"delete nobody", func() error { return store.DeleteUser(ctx, "nobody") }, core.CodeNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.ErrorCode(tt.call()); got != tt.want {
				t.Fatalf("code = %s, want %s", got, tt.want)
			}
		})
	}
	got, err := store.UserByUsername(ctx, "bob")
	if err != nil || !reflect.DeepEqual(got, bob) {
		t.Fatalf("UserByUsername = %+v, %v; want %+v", got, err, bob)
	}
	if got, err := store.User(ctx, "usr_1"); err != nil || !reflect.DeepEqual(got, alice) {
		t.Fatalf("User = %+v, %v; want %+v", got, err, alice)
	}
	list, err := store.ListUsers(ctx, "acc_a")
	if err != nil || len(list) != 2 || list[0].Username != "alice" || list[1].Username != "bob" {
		t.Fatalf("ListUsers = %+v, %v; want alice, bob", list, err)
	}
	if list, _ := store.ListUsers(ctx, "acc_b"); len(list) != 0 {
		t.Fatalf("ListUsers(acc_b) = %+v, want none", list)
	}

	token := core.RefreshToken{Hash: "t1", Family: "f1", UserID: "usr_2", ClientID: "c", Scopes: []string{"openid"},
		AuthTime: created, CreatedAt: created, ExpiresAt: created.Add(time.Hour)}
	if err := store.CreateRefreshToken(ctx, token); err != nil {
		t.Fatal(err)
	}
	if err := store.SetUserPassword(ctx, "bob", "h3"); err != nil {
		t.Fatal(err)
	}
	if u, _ := store.UserByUsername(ctx, "bob"); u.PasswordHash != "h3" {
		t.Fatalf("password hash = %q after SetUserPassword", u.PasswordHash)
	}
	if _, err := store.RefreshToken(ctx, "t1"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("refresh token after a new password: %v, want not found", err)
	}

	token.Hash = "t2"
	if err := store.CreateRefreshToken(ctx, token); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateAuthRequest(ctx, core.AuthRequest{ID: "ar_1", ClientID: "c", Scopes: []string{"openid"}, CreatedAt: created}); err != nil {
		t.Fatal(err)
	}
	if err := store.CompleteAuthRequest(ctx, "ar_1", "usr_2", created); err != nil {
		t.Fatal(err)
	}
	if err := store.DeleteUser(ctx, "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.UserByUsername(ctx, "bob"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("deleted user: %v", err)
	}
	if _, err := store.RefreshToken(ctx, "t2"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("refresh token of a deleted user: %v, want not found", err)
	}
	if err := store.CreateRefreshToken(ctx, token); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("refresh token for a deleted user: %v, want not found", err)
	}
}

// sessions: a sign-in is completed once, found by its code's hash and
// forgotten; a refresh token rotates once, its family revoked as one.
func sessions(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	created := time.Date(2026, 11, 25, 5, 0, 0, 123_000_000, time.UTC)
	if err := store.CreateUser(ctx, core.User{ID: "usr_1", Username: "alice", AccountID: "acc_a", Role: core.RoleOwner, PasswordHash: "h", CreatedAt: created}); err != nil {
		t.Fatal(err)
	}
	req := core.AuthRequest{ID: "ar_1", ClientID: "mountd-console", RedirectURI: "http://x/console/", State: "s", Nonce: "n",
		Scopes: []string{"openid", "offline_access"}, ResponseType: "code", ResponseMode: "query",
		CodeChallenge: "abc", CodeChallengeMethod: "S256", BrowserHash: "bh", Source: "2001:db8::/64", CreatedAt: created}
	if err := store.CreateAuthRequest(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got, err := store.AuthRequest(ctx, "ar_1"); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("AuthRequest = %+v, %v; want %+v", got, err, req)
	}
	if err := store.CompleteAuthRequest(ctx, "ar_1", "usr_1", created.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := store.CompleteAuthRequest(ctx, "ar_1", "usr_1", created.Add(time.Second)); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("second completion: %v, want not found", err)
	}
	if err := store.SaveAuthCode(ctx, "ar_1", "codehash"); err != nil {
		t.Fatal(err)
	}
	if err := store.SaveAuthCode(ctx, "ar_1", "another"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("a second code: %v, want not found", err)
	}
	if err := store.SaveAuthCode(ctx, "ar_none", "another"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("a code for no sign-in: %v, want not found", err)
	}
	got, err := store.AuthRequestByCode(ctx, "codehash")
	if err != nil || got.UserID != "usr_1" || !got.AuthTime.Equal(created.Add(time.Second)) || got.CodeHash != "codehash" {
		t.Fatalf("AuthRequestByCode = %+v, %v", got, err)
	}
	if _, err := store.AuthRequestByCode(ctx, "other"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("unknown code: %v", err)
	}
	if err := store.DeleteAuthRequest(ctx, "ar_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AuthRequest(ctx, "ar_1"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("deleted sign-in: %v", err)
	}

	first := core.RefreshToken{Hash: "t1", Family: "f1", UserID: "usr_1", ClientID: "mountd-console", Scopes: []string{"openid", "role:owner"},
		AuthTime: created, CreatedAt: created, ExpiresAt: created.Add(time.Hour)}
	if err := store.CreateRefreshToken(ctx, first); err != nil {
		t.Fatal(err)
	}
	if got, err := store.RefreshToken(ctx, "t1"); err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("RefreshToken = %+v, %v; want %+v", got, err, first)
	}
	second := first
	second.Hash, second.CreatedAt = "t2", created.Add(time.Minute)
	used := created.Add(time.Minute)
	if err := store.RotateRefreshToken(ctx, "t1", used, second); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.RefreshToken(ctx, "t1"); !got.UsedAt.Equal(used) {
		t.Fatalf("rotated token's UsedAt = %v, want %v", got.UsedAt, used)
	}
	third := second
	third.Hash = "t3"
	if err := store.RotateRefreshToken(ctx, "t1", used, third); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("second rotation of one token: %v, want conflict", err)
	}
	if _, err := store.RefreshToken(ctx, "t3"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("a refused rotation stored its token: %v", err)
	}
	other := first
	other.Hash, other.Family = "o1", "f2"
	if err := store.CreateRefreshToken(ctx, other); err != nil {
		t.Fatal(err)
	}
	if err := store.RevokeRefreshFamily(ctx, "f1"); err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"t1", "t2"} {
		if _, err := store.RefreshToken(ctx, h); core.ErrorCode(err) != core.CodeNotFound {
			t.Fatalf("token %s of a revoked family: %v", h, err)
		}
	}
	if _, err := store.RefreshToken(ctx, "o1"); err != nil {
		t.Fatalf("another family's token went with it: %v", err)
	}
	if err := store.RevokeUserRefreshTokens(ctx, "usr_1"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RefreshToken(ctx, "o1"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("token after revoking the user's: %v", err)
	}
}

// openSignIns: sign-ins are counted per source, only those created after
// the given instant, at most limit; the oldest counted is returned.
func openSignIns(t *testing.T, store Store) {
	ctx := context.Background()
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	if n, oldest, err := store.OpenSignIns(ctx, "192.0.2.1", base.Add(-time.Hour), 10); err != nil || n != 0 || !oldest.IsZero() {
		t.Fatalf("none yet: %d %v %v", n, oldest, err)
	}
	for i, src := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.1", "2001:db8::/64"} {
		r := core.AuthRequest{ID: fmt.Sprintf("ar_%d", i), ClientID: "c", Scopes: []string{"openid"}, BrowserHash: "b", Source: src,
			CreatedAt: base.Add(time.Duration(i) * time.Minute)}
		if err := store.CreateAuthRequest(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		name   string
		source string
		after  time.Time
		limit  int
		n      int
		oldest time.Time
	}{
		{"all of one source", "192.0.2.1", base.Add(-time.Second), 10, 4, base},
		{"strictly after", "192.0.2.1", base, 10, 3, base.Add(time.Minute)},
		{"at most limit, the oldest", "192.0.2.1", base.Add(-time.Second), 2, 2, base},
		{"another source", "2001:db8::/64", base.Add(-time.Second), 10, 1, base.Add(4 * time.Minute)},
		{"an unknown source", "192.0.2.9", base.Add(-time.Second), 10, 0, time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, oldest, err := store.OpenSignIns(ctx, tt.source, tt.after, tt.limit)
			if err != nil || n != tt.n || !oldest.Equal(tt.oldest) {
				t.Fatalf("OpenSignIns = %d, %v, %v; want %d, %v", n, oldest, err, tt.n, tt.oldest)
			}
		})
	}
}

// trimRefreshTokens: a family keeps its newest used tokens and its unused
// one; a user keeps the families signed in to last.
func trimRefreshTokens(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	base := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	for _, id := range []string{"usr_1", "usr_2"} {
		if err := store.CreateUser(ctx, core.User{ID: id, Username: id, AccountID: "acc_a", Role: core.RoleOwner, PasswordHash: "h", CreatedAt: base}); err != nil {
			t.Fatal(err)
		}
	}
	tok := func(hash, family, user string, authTime time.Time) core.RefreshToken {
		return core.RefreshToken{Hash: hash, Family: family, UserID: user, ClientID: "mountd-console", Scopes: []string{"openid"},
			AuthTime: authTime, CreatedAt: authTime, ExpiresAt: authTime.Add(24 * time.Hour)}
	}
	exists := func(hash string) bool {
		_, err := store.RefreshToken(ctx, hash)
		if err != nil && core.ErrorCode(err) != core.CodeNotFound {
			t.Fatal(err)
		}
		return err == nil
	}

	// f1 rotates 5 times: t0..t4 used, t5 current; keep the 2 newest used.
	if err := store.CreateRefreshToken(ctx, tok("t0", "f1", "usr_1", base)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if err := store.RotateRefreshToken(ctx, fmt.Sprintf("t%d", i-1), base.Add(time.Duration(i)*time.Minute),
			tok(fmt.Sprintf("t%d", i), "f1", "usr_1", base)); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.CreateRefreshToken(ctx, tok("g0", "f2", "usr_1", base.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := store.RotateRefreshToken(ctx, "g0", base.Add(time.Minute), tok("g1", "f2", "usr_1", base.Add(time.Second))); err != nil {
		t.Fatal(err)
	}
	if err := store.TrimUsedRefreshTokens(ctx, "f1", 2); err != nil {
		t.Fatal(err)
	}
	for hash, want := range map[string]bool{"t0": false, "t1": false, "t2": false, "t3": true, "t4": true, "t5": true, "g0": true, "g1": true} {
		if exists(hash) != want {
			t.Errorf("after trimming f1 to 2 used tokens, %s stored: %v, want %v", hash, !want, want)
		}
	}

	// usr_1 has f1 (signed in at base) and f2 (a second later), f3 later
	// still; usr_2 has one family older than all. Keep usr_1's newest 2.
	if err := store.CreateRefreshToken(ctx, tok("h0", "f3", "usr_1", base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := store.CreateRefreshToken(ctx, tok("u0", "f4", "usr_2", base.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if err := store.TrimRefreshFamilies(ctx, "usr_1", 2); err != nil {
		t.Fatal(err)
	}
	for hash, want := range map[string]bool{"t3": false, "t4": false, "t5": false, "g0": true, "g1": true, "h0": true, "u0": true} {
		if exists(hash) != want {
			t.Errorf("after trimming usr_1 to 2 families, %s stored: %v, want %v", hash, !want, want)
		}
	}
	if err := store.TrimRefreshFamilies(ctx, "usr_1", 2); err != nil {
		t.Fatal(err)
	}
	if !exists("g1") || !exists("h0") {
		t.Error("trimming again removed a kept family")
	}
}
