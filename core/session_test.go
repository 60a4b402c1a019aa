package core_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

func consoleSignIn(source string) core.AuthRequest {
	return core.AuthRequest{ClientID: core.ConsoleClientID, RedirectURI: "https://m.example/console/", State: "s", Nonce: "n",
		Scopes: []string{"openid", "offline_access"}, ResponseType: "code", CodeChallenge: strings.Repeat("c", 43),
		CodeChallengeMethod: "S256", BrowserHash: core.TokenHash("browser"), Source: source}
}

// TestStartSignInBounds: every stored parameter is bounded, and one source
// address (an IPv6 /64) has at most MaxOpenSignIns sign-ins open at once.
func TestStartSignInBounds(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	sessions := core.NewSessionService(store, store)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	sessions.SetClock(func() time.Time { return now })

	start := func(r core.AuthRequest) error {
		if err := sessions.AdmitSignIn(ctx, r.Source); err != nil {
			return err
		}
		_, err := sessions.StartSignIn(ctx, r)
		return err
	}
	long := strings.Repeat("x", core.MaxSignInParam+1)
	for name, edit := range map[string]func(*core.AuthRequest){
		"state":          func(r *core.AuthRequest) { r.State = long },
		"nonce":          func(r *core.AuthRequest) { r.Nonce = long },
		"redirect_uri":   func(r *core.AuthRequest) { r.RedirectURI = "https://m.example/console/" + long },
		"scope":          func(r *core.AuthRequest) { r.Scopes = strings.Fields(strings.Repeat("openid ", 80)) },
		"code_challenge": func(r *core.AuthRequest) { r.CodeChallenge = long },
		"response_mode":  func(r *core.AuthRequest) { r.ResponseMode = long },
		"client_id":      func(r *core.AuthRequest) { r.ClientID = long },
	} {
		t.Run(name, func(t *testing.T) {
			r := consoleSignIn("192.0.2.1")
			edit(&r)
			if err := start(r); core.ErrorCode(err) != core.CodeValidation {
				t.Fatalf("StartSignIn = %v, want %s", err, core.CodeValidation)
			}
		})
	}
	if n, _, err := store.OpenSignIns(ctx, "192.0.2.1", now.Add(-time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("refused sign-ins stored: %d, %v", n, err)
	}

	// One /64 fills up; the next /64 and an IPv4 address still start.
	for i := range core.MaxOpenSignIns {
		if i == 1 {
			now = now.Add(time.Minute) // the oldest is a minute older than the rest
		}
		if err := start(consoleSignIn("2001:db8:1:2::" + string(rune('a'+i%6)))); err != nil {
			t.Fatalf("sign-in %d: %v", i+1, err)
		}
	}
	err := start(consoleSignIn("2001:db8:1:2:ffff::1"))
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != core.CodeRateLimited || ce.RetryAfter != core.AuthRequestTTL-time.Minute {
		t.Fatalf("one more from the same /64: %v, want RATE_LIMITED with RetryAfter %s", err, core.AuthRequestTTL-time.Minute)
	}
	for _, other := range []string{"2001:db8:1:3::1", "192.0.2.1", "::ffff:192.0.2.2"} {
		if err := start(consoleSignIn(other)); err != nil {
			t.Fatalf("from %s: %v", other, err)
		}
	}
	// When the oldest expires, one more fits.
	now = now.Add(core.AuthRequestTTL - time.Minute)
	if err := start(consoleSignIn("2001:db8:1:2::1")); err != nil {
		t.Fatalf("after the oldest expired: %v", err)
	}
	if err := start(consoleSignIn("2001:db8:1:2::1")); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("full again: %v", err)
	}
}

// TestRefreshTokensBounded: a refresh loop keeps KeptUsedRefresh used
// tokens of its sign-in, and a user keeps MaxRefreshFamilies sign-ins.
func TestRefreshTokensBounded(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	u, err := core.NewUserService(store, nil).Create(ctx, core.NewUser{AccountID: acc.AccountID, Username: "alice", Role: core.RoleOwner,
		Password: "correct horse battery"})
	if err != nil {
		t.Fatal(err)
	}
	sessions := core.NewSessionService(store, store)
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	sessions.SetClock(func() time.Time { return now })

	first, err := sessions.IssueRefresh(ctx, u.ID, core.ConsoleClientID, []string{"openid"}, now)
	if err != nil {
		t.Fatal(err)
	}
	tokens := []string{first}
	for range core.KeptUsedRefresh + 5 {
		now = now.Add(time.Second)
		next, err := sessions.Rotate(ctx, tokens[len(tokens)-1], []string{"openid"})
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, next)
	}
	// The oldest used tokens are forgotten: refused, without ending the sign-in.
	if _, _, err := sessions.Refresh(ctx, tokens[0], core.ConsoleClientID); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("a forgotten used token: %v", err)
	}
	if _, err := store.RefreshToken(ctx, core.TokenHash(tokens[0])); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("the oldest used token is still stored: %v", err)
	}
	current := tokens[len(tokens)-1]
	if _, _, err := sessions.Refresh(ctx, current, core.ConsoleClientID); err != nil {
		t.Fatalf("the current token after the loop: %v", err)
	}
	// A recent used token is still known as used: the sign-in ends.
	if _, _, err := sessions.Refresh(ctx, tokens[len(tokens)-2], core.ConsoleClientID); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("a reused recent token: %v", err)
	}
	if _, _, err := sessions.Refresh(ctx, current, core.ConsoleClientID); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("the current token after a reuse: %v", err)
	}

	// Sign-ins beyond MaxRefreshFamilies end the oldest.
	var signIns []string
	for range core.MaxRefreshFamilies + 1 {
		now = now.Add(time.Second)
		tok, err := sessions.IssueRefresh(ctx, u.ID, core.ConsoleClientID, []string{"openid"}, now)
		if err != nil {
			t.Fatal(err)
		}
		signIns = append(signIns, tok)
	}
	if _, _, err := sessions.Refresh(ctx, signIns[0], core.ConsoleClientID); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("the oldest of %d sign-ins: %v", len(signIns), err)
	}
	for _, tok := range []string{signIns[1], signIns[len(signIns)-1]} {
		if _, _, err := sessions.Refresh(ctx, tok, core.ConsoleClientID); err != nil {
			t.Fatalf("a kept sign-in: %v", err)
		}
	}
}
