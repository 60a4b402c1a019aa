package e2e

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/mountd/mountd/client"
)

// TestPeople: operators' people are created with `mountd users`, sign in
// through the login page and act with their user's rights through REST and
// GraphQL alike; a new password or deleting the user ends its sessions.
func TestPeople(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			own, other := uniqueUID("PA"), uniqueUID("PA")
			apiA := client.New(in.base, client.StaticToken(a.token))
			associate(t, apiA, own)
			associate(t, apiA, other)
			associate(t, client.New(in.base, client.StaticToken(b.token)), uniqueUID("PB"))

			var created struct{ UserID, Username, AccountID, Role string }
			out, _, err := in.tryCLIInput(personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "Ann",
				"--role", "owner", "--password-stdin", "--json")
			if err != nil || json.Unmarshal([]byte(out), &created) != nil || created.Username != "ann" || created.Role != "owner" ||
				created.AccountID != a.creds.AccountID || !strings.HasPrefix(created.UserID, "usr_") {
				t.Fatalf("users create: %q, %v", out, err)
			}
			in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "rita",
				"--role", "restricted", "--mount", own, "--password-stdin")
			for _, tt := range []struct {
				name, stdin, want string
				args              []string
			}{
				{"short password", "short\n", "the password (--password-stdin) must have at least 12 characters",
					[]string{"--account", a.creds.AccountID, "--username", "x", "--role", "owner"}},
				{"taken username", personPassword + "\n", "is taken",
					[]string{"--account", b.creds.AccountID, "--username", "ANN", "--role", "owner"}},
				{"unknown account", personPassword + "\n", "not found",
					[]string{"--account", "acc_nobody", "--username", "y", "--role", "owner"}},
				{"no password", "", "no password on stdin",
					[]string{"--account", a.creds.AccountID, "--username", "z", "--role", "owner"}},
			} {
				t.Run(tt.name, func(t *testing.T) {
					_, _, err := in.tryCLIInput(tt.stdin, append([]string{"users", "create", "--password-stdin"}, tt.args...)...)
					if err == nil || !strings.Contains(err.Error(), tt.want) {
						t.Fatalf("err = %v, want %q", err, tt.want)
					}
				})
			}
			var list struct{ Users []struct{ Username string } }
			if err := json.Unmarshal([]byte(in.runCLI("users", "list", "--account", a.creds.AccountID, "--json")), &list); err != nil ||
				len(list.Users) != 2 || list.Users[0].Username != "ann" || list.Users[1].Username != "rita" {
				t.Fatalf("users list: %+v, %v", list, err)
			}

			if _, err := in.signInPerson(t, "ann", "wrong password!!"); err == nil || !strings.Contains(err.(*signInError).page, "The username or the password is wrong.") {
				t.Fatalf("wrong password: %v", err)
			}
			ann, err := in.signInPerson(t, "ann", personPassword)
			if err != nil {
				t.Fatal(err)
			}
			rita, err := in.signInPerson(t, "Rita", personPassword)
			if err != nil {
				t.Fatal(err)
			}
			mountsOf := func(token string) []string {
				res, raw := in.call(http.MethodGet, "/api/v1/mounts", token, nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("GET /mounts: %d %s", res.StatusCode, raw)
				}
				var page struct{ Mounts []struct{ UID string } }
				_ = json.Unmarshal(raw, &page)
				var uids []string
				for _, m := range page.Mounts {
					uids = append(uids, m.UID)
				}
				return uids
			}
			if got := mountsOf(ann.AccessToken); len(got) != 2 {
				t.Fatalf("ann sees %v, want her account's two mounts", got)
			}
			if got := mountsOf(rita.AccessToken); len(got) != 1 || got[0] != own {
				t.Fatalf("rita sees %v, want only %s", got, own)
			}
			if res, raw := in.call(http.MethodPost, "/api/v1/mounts", rita.AccessToken, map[string]any{"uid": uniqueUID("PR")}); res.StatusCode != http.StatusForbidden {
				t.Fatalf("rita requesting an association: %d %s", res.StatusCode, raw)
			}
			if res, _ := in.call(http.MethodGet, "/api/v1/mounts/"+other, rita.AccessToken, nil); res.StatusCode != http.StatusNotFound {
				t.Fatalf("rita reading another mount: %d", res.StatusCode)
			}
			r := in.gql(t, rita.AccessToken, `{ mounts { mounts { uid } } }`, nil)
			if len(r.Errors) > 0 || !strings.Contains(string(r.Data), own) || strings.Contains(string(r.Data), other) {
				t.Fatalf("rita's GraphQL mounts: %s %v", r.Data, r.Errors)
			}

			status, next := in.refreshPerson(t, ann.RefreshToken)
			if status != http.StatusOK || next.AccessToken == "" {
				t.Fatalf("refresh: %d", status)
			}
			in.runCLIInput(t, "another long password\n", "users", "set-password", "--username", "ann", "--password-stdin")
			if status, _ := in.refreshPerson(t, next.RefreshToken); status != http.StatusBadRequest {
				t.Fatalf("refresh after a new password: %d", status)
			}
			in.runCLI("users", "delete", "--username", "rita")
			if status, _ := in.refreshPerson(t, rita.RefreshToken); status != http.StatusBadRequest {
				t.Fatalf("refresh of a deleted user: %d", status)
			}
			if _, err := in.signInPerson(t, "rita", personPassword); err == nil {
				t.Fatal("a deleted user signed in")
			}
		})
	}
}
