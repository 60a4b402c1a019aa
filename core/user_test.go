package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

func TestCreateUserRules(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	users := core.NewUserService(store, nil)
	good := "correct horse battery"
	for _, tt := range []struct {
		name  string
		in    core.NewUser
		field string // "" when it is created
	}{
		{"owner", core.NewUser{Username: "Alice", Role: core.RoleOwner, Password: good}, ""},
		{"maintainer", core.NewUser{Username: "maint", Role: core.RoleRestricted, Password: good}, ""},
		{"rider with mounts", core.NewUser{Username: "rider", Role: core.RoleRestricted, MountUIDs: []string{"M1", "M1", "M2"}, Password: good}, ""},
		{"short password", core.NewUser{Username: "carol", Role: core.RoleOwner, Password: "elevenchars"}, "password"},
		{"huge password", core.NewUser{Username: "carol", Role: core.RoleOwner, Password: strings.Repeat("x", 1025)}, "password"},
		{"bad username", core.NewUser{Username: "a b", Role: core.RoleOwner, Password: good}, "username"},
		{"empty username", core.NewUser{Username: " ", Role: core.RoleOwner, Password: good}, "username"},
		{"unknown role", core.NewUser{Username: "carol", Role: "admin", Password: good}, "role"},
		{"owner with mounts", core.NewUser{Username: "carol", Role: core.RoleOwner, MountUIDs: []string{"M1"}, Password: good}, "mount"},
		{"bad mount uid", core.NewUser{Username: "carol", Role: core.RoleRestricted, MountUIDs: []string{"a b"}, Password: good}, "mount"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.AccountID = acc.AccountID
			u, err := users.Create(ctx, tt.in)
			if tt.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				if u.Username != strings.ToLower(tt.in.Username) || strings.Contains(u.PasswordHash, good) {
					t.Fatalf("user = %+v", u)
				}
				return
			}
			var e *core.Error
			if err == nil || core.ErrorCode(err) != core.CodeValidation {
				t.Fatalf("err = %v, want a validation error on %s", err, tt.field)
			}
			if e, _ = err.(*core.Error); e == nil || len(e.Fields) == 0 || e.Fields[0].Field != tt.field {
				t.Fatalf("err = %#v, want field %s", err, tt.field)
			}
		})
	}
	if _, err := users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "ALICE", Role: core.RoleOwner, Password: good}); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("a username differing by case: %v, want conflict", err)
	}
	rider, _ := store.UserByUsername(ctx, "rider")
	if strings.Join(rider.MountUIDs, ",") != "M1,M2" {
		t.Fatalf("rider's mounts = %v", rider.MountUIDs)
	}
}

// TestSignIn: one message for a wrong password and an unknown username;
// five failures for one username from one address, then RATE_LIMITED
// there until the oldest leaves its 15 minutes, while the same username
// from another address still signs in; thirty failures from one address,
// then RATE_LIMITED there for a minute, except for a known device.
func TestSignIn(t *testing.T) {
	defer core.SetTarpitDelay(0)()
	ctx := context.Background()
	store := memory.NewStore()
	acc, _ := core.NewAccountService(store, nil).Create(ctx, "Fleet")
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	users := core.NewUserService(store, memory.NewFailureLimiter().WithClock(clock.Now))
	const password = "correct horse battery"
	if _, err := users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "alice", Role: core.RoleOwner, Password: password}); err != nil {
		t.Fatal(err)
	}
	from := func(addr string) core.SignInSource { return core.SignInSource{Address: addr} }
	if u, err := users.SignIn(ctx, " Alice ", password, from("10.0.0.1")); err != nil || u.Username != "alice" {
		t.Fatalf("SignIn = %+v, %v", u, err)
	}
	_, wrong := users.SignIn(ctx, "alice", "wrong password!", from("10.0.0.1"))
	_, unknown := users.SignIn(ctx, "nobody", password, from("10.0.0.1"))
	if core.ErrorCode(wrong) != core.CodeUnauthenticated || wrong.Error() != unknown.Error() {
		t.Fatalf("wrong password: %v; unknown user: %v; want the same UNAUTHENTICATED", wrong, unknown)
	}
	clock.Advance(time.Minute) // the first failure is the oldest
	for range 4 {
		_, _ = users.SignIn(ctx, "alice", "wrong password!", from("10.0.0.1"))
	}
	_, err := users.SignIn(ctx, "alice", password, from("10.0.0.1"))
	if ce, ok := err.(*core.Error); !ok || ce.Code != core.CodeRateLimited || ce.RetryAfter != 14*time.Minute {
		t.Fatalf("sixth try from one address: %v, want RATE_LIMITED for 14 minutes", err)
	}
	if _, err := users.SignIn(ctx, "alice", password, from("10.0.0.2")); err != nil {
		t.Fatalf("from another address: %v; a stranger must not lock alice out", err)
	}
	// Walking through usernames from one address meets the address limit,
	// 30 a minute: exactly 30 tries.
	limit := core.SignInFailuresPerAddress.Limit
	for i := range limit {
		if _, err := users.SignIn(ctx, fmt.Sprintf("walker%d", i), "wrong password!", from("10.0.0.3")); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("failure %d from one address: %v", i+1, err)
		}
	}
	if _, err := users.SignIn(ctx, "walker-more", "wrong password!", from("10.0.0.3")); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("failure %d from one address: %v, want RATE_LIMITED", limit+1, err)
	}
	if _, err := users.SignIn(ctx, "alice", password, from("10.0.0.3")); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("alice from a new browser behind that address: %v, want RATE_LIMITED", err)
	}
	known := core.SignInSource{Address: "10.0.0.3", KnownDevice: true}
	if _, err := users.SignIn(ctx, "alice", password, known); err != nil {
		t.Fatalf("alice from her known browser behind that address: %v", err)
	}
	// A known device is still held by its username's own limit, and does
	// not count against the address.
	for i := range core.SignInFailures.Limit {
		if _, err := users.SignIn(ctx, "alice", "wrong password!", known); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("known device, failure %d: %v", i+1, err)
		}
	}
	if _, err := users.SignIn(ctx, "alice", password, known); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("known device past its username's limit: %v, want RATE_LIMITED", err)
	}
	clock.Advance(core.SignInFailuresPerAddress.Period)
	if _, err := users.SignIn(ctx, "walker-later", "wrong password!", from("10.0.0.3")); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("a minute later: %v", err)
	}
	clock.Advance(core.SignInFailures.Period - core.SignInFailuresPerAddress.Period)
	if _, err := users.SignIn(ctx, "alice", password, known); err != nil {
		t.Fatalf("15 minutes later: %v", err)
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	acc, _ := core.NewAccountService(store, nil).Create(ctx, "Fleet")
	users := core.NewUserService(store, nil)
	alice, err := users.Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "alice", Role: core.RoleOwner, Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	sessions := core.NewSessionService(store, store)
	sessions.SetClock(clock.Now)

	t.Run("a sign-in expires", func(t *testing.T) {
		r, err := sessions.StartSignIn(ctx, core.AuthRequest{ClientID: "mountd-console"})
		if err != nil {
			t.Fatal(err)
		}
		clock.Advance(core.AuthRequestTTL - time.Second)
		if err := sessions.CompleteSignIn(ctx, r.ID, alice); err != nil {
			t.Fatal(err)
		}
		if err := sessions.CompleteSignIn(ctx, r.ID, alice); core.ErrorCode(err) != core.CodeNotFound {
			t.Fatalf("second completion: %v", err)
		}
		if err := sessions.SaveCode(ctx, r.ID, "the-code"); err != nil {
			t.Fatal(err)
		}
		if got, err := sessions.SignInByCode(ctx, "the-code"); err != nil || got.UserID != alice.ID {
			t.Fatalf("SignInByCode = %+v, %v", got, err)
		}
		clock.Advance(time.Second)
		if _, err := sessions.SignInByCode(ctx, "the-code"); core.ErrorCode(err) != core.CodeNotFound {
			t.Fatalf("expired sign-in: %v", err)
		}
	})

	t.Run("rotation and reuse", func(t *testing.T) {
		signedIn := clock.Now()
		first, err := sessions.IssueRefresh(ctx, alice.ID, "mountd-console", []string{"openid"}, signedIn)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := sessions.Refresh(ctx, first, "another-client"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("another client's refresh: %v", err)
		}
		if _, u, err := sessions.Refresh(ctx, first, "mountd-console"); err != nil || u.ID != alice.ID {
			t.Fatalf("Refresh = %+v, %v", u, err)
		}
		second, err := sessions.Rotate(ctx, first, []string{"openid"})
		if err != nil {
			t.Fatal(err)
		}
		// The first token again: it leaked; the family, second included, is revoked.
		if _, _, err := sessions.Refresh(ctx, first, "mountd-console"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("reused token: %v", err)
		}
		if _, _, err := sessions.Refresh(ctx, second, "mountd-console"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("the family's newer token after a reuse: %v", err)
		}
	})

	t.Run("idle and absolute expiry", func(t *testing.T) {
		signedIn := clock.Now()
		token, _ := sessions.IssueRefresh(ctx, alice.ID, "mountd-console", nil, signedIn)
		for clock.Now().Before(signedIn.Add(core.RefreshMax - core.RefreshIdle)) {
			clock.Advance(core.RefreshIdle - time.Hour)
			if _, _, err := sessions.Refresh(ctx, token, "mountd-console"); err != nil {
				t.Fatalf("refresh within the idle time, %v after signing in: %v", clock.Now().Sub(signedIn), err)
			}
			if token, err = sessions.Rotate(ctx, token, nil); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(core.RefreshIdle)
		if _, _, err := sessions.Refresh(ctx, token, "mountd-console"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("refresh past %v after signing in: %v", core.RefreshMax, err)
		}
		idle, _ := sessions.IssueRefresh(ctx, alice.ID, "mountd-console", nil, clock.Now())
		clock.Advance(core.RefreshIdle)
		if _, _, err := sessions.Refresh(ctx, idle, "mountd-console"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("refresh after %v unused: %v", core.RefreshIdle, err)
		}
	})

	t.Run("a deleted user's tokens end", func(t *testing.T) {
		token, _ := sessions.IssueRefresh(ctx, alice.ID, "mountd-console", nil, clock.Now())
		if err := users.Delete(ctx, "alice"); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sessions.Refresh(ctx, token, "mountd-console"); core.ErrorCode(err) != core.CodeUnauthenticated {
			t.Fatalf("deleted user's refresh: %v", err)
		}
	})
}
