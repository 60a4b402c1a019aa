package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestAccountsCommands lists accounts and rotates a client secret: the old
// secret stops working at once, the new one works, and a token issued
// before lives on until it expires.
func TestAccountsCommands(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			first := in.createAccount("First Fleet")
			second := in.createAccount("Second Fleet")
			before := in.ownerToken(first)

			list := decode[struct {
				Accounts []struct {
					AccountID string    `json:"accountId"`
					Name      string    `json:"name"`
					Clients   int       `json:"clients"`
					CreatedAt time.Time `json:"createdAt"`
				} `json:"accounts"`
			}](t, []byte(in.runCLI("accounts", "list", "--json")))
			if len(list.Accounts) != 2 || list.Accounts[0].AccountID != first.AccountID || list.Accounts[0].Name != "First Fleet" ||
				list.Accounts[0].Clients != 1 || list.Accounts[1].AccountID != second.AccountID || list.Accounts[0].CreatedAt.IsZero() {
				t.Fatalf("accounts list = %+v", list)
			}
			if text := in.runCLI("accounts", "list"); !strings.Contains(text, "ACCOUNT ID") || !strings.Contains(text, "Second Fleet") {
				t.Fatalf("accounts list (text):\n%s", text)
			}

			rotated := decode[credentials](t, []byte(in.runCLI("accounts", "rotate-secret", "--account", first.AccountID, "--json")))
			if rotated.AccountID != first.AccountID || rotated.ClientID != first.ClientID || rotated.ClientSecret == "" || rotated.ClientSecret == first.ClientSecret {
				t.Fatalf("rotated = %+v", rotated)
			}
			grant := func(c credentials) int {
				res, _ := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "client_id": {c.ClientID},
					"client_secret": {c.ClientSecret}, "scope": {"openid sub " + audItem}}, nil)
				return res.StatusCode
			}
			if got := grant(first); got != http.StatusUnauthorized {
				t.Fatalf("the old secret after rotation: %d, want 401", got)
			}
			if got := grant(rotated); got != http.StatusOK {
				t.Fatalf("the new secret: %d, want 200", got)
			}
			if got := grant(second); got != http.StatusOK {
				t.Fatalf("another account's secret after rotation: %d, want 200", got)
			}
			if res, body := in.call(http.MethodGet, "/api/v1/accounts/me", before, nil); res.StatusCode != http.StatusOK {
				t.Fatalf("a token issued before the rotation: %d %s", res.StatusCode, body)
			}
			if text := in.runCLI("accounts", "rotate-secret", "--account", second.AccountID); !strings.Contains(text, "client secret:") {
				t.Fatalf("rotate-secret (text):\n%s", text)
			}
			if _, errOut, err := in.tryCLI("accounts", "rotate-secret", "--account", "acc_unknown"); err == nil {
				t.Fatalf("rotating an unknown account's secret succeeded: %s", errOut)
			}
		})
	}
}
