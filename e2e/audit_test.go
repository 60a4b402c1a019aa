package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/app"
	"github.com/mountd/mountd/core"
)

// auditGraphQL reads it through GraphQL.
func (f fleet) auditGraphQL(t *testing.T) auditPageView {
	t.Helper()
	r := f.gql(t, `{ audit(limit: 1000) { entries { id at actor { type id name } action target sourceAddress details } next } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("audit: %+v", r.Errors)
	}
	return decodeField[auditPageView](t, r, "audit")
}

// auditCLI reads an account's log ("" the installation's) with mountd audit.
func (in *instance) auditCLI(t *testing.T, account string) auditPageView {
	t.Helper()
	args := []string{"audit", "--json", "--limit", "1000"}
	if account != "" {
		args = append(args, "--account", account)
	}
	return decode[auditPageView](t, []byte(in.runCLI(args...)))
}

func findEntry(entries []auditView, action, target string) (auditView, bool) {
	for _, e := range entries {
		if e.Action == action && e.Target == target {
			return e, true
		}
	}
	return auditView{}, false
}

// TestAuditEveryChange: every kind of change, made through the API,
// GraphQL or the mountd commands, is found in the audit log with its
// actor and source address: an account's changes through the API,
// GraphQL and `mountd audit --account`, the installation's through
// `mountd audit` alone. Failed changes record nothing, another account
// sees nothing, restricted tokens are refused, and no entry holds a
// secret.
func TestAuditEveryChange(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true
			cfg.TrustedProxies = "127.0.0.1/32"
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")
			op := app.Operator()
			secrets := []string{a.creds.ClientSecret, b.creds.ClientSecret}
			const password = "a long password for ana"
			hookURL := "http://127.0.0.1:9/hook?token=receiver-secret"
			secrets = append(secrets, "receiver-secret", password)
			var hookAPI, hookGQL, ruleID, alarmID, jobID, rolloutID, grantID string
			var person fleet

			type change struct {
				via, action, target string
				do                  func(t *testing.T)
			}
			api := func(action, target, method, path string, body any) change {
				return change{"api", action, target, func(t *testing.T) { t.Helper(); a.ok(t, method, path, body) }}
			}
			gql := func(action, target, op string, vars map[string]any) change {
				return change{"graphql", action, target, func(t *testing.T) {
					t.Helper()
					r := a.gql(t, op, vars)
					if len(r.Errors) > 0 {
						t.Fatalf("%s: %+v", op, r.Errors)
					}
				}}
			}
			cliChange := func(action, target string, do func(t *testing.T)) change { return change{"cli", action, target, do} }
			changes := []change{
				api("mount.request-association", "mount:AU-1", http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-1", "name": "Front"}),
				api("mount.confirm-association", "mount:AU-1", http.MethodPost, "/api/v1/mounts/AU-1/confirm-association", nil),
				api("mount.update", "mount:AU-1", http.MethodPatch, "/api/v1/mounts/AU-1", map[string]any{"name": "Rear"}),
				api("nfc-tags.sync", "mount:AU-1", http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": "AU-1", "tagUids": []string{"04A1B2C3"}}),
				api("nfc-tag.update", "nfc-tag:04A1B2C3", http.MethodPatch, "/api/v1/nfc-tags/04A1B2C3", map[string]any{"name": "Blue"}),
				{"api", "webhook.create", "", func(t *testing.T) {
					res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": hookURL, "description": "ops"})
					if res.StatusCode != http.StatusCreated {
						t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
					}
					v := decode[map[string]any](t, raw)
					hookAPI = v["id"].(string)
					secrets = append(secrets, v["secret"].(string))
				}},
				{"api", "webhook.update", "", func(t *testing.T) {
					a.ok(t, http.MethodPatch, "/api/v1/webhooks/"+hookAPI, map[string]any{"enabled": false})
				}},
				{"api", "webhook.rotate-secret", "", func(t *testing.T) {
					secrets = append(secrets, decode[map[string]string](t, a.ok(t, http.MethodPost, "/api/v1/webhooks/"+hookAPI+"/rotate-secret", nil))["secret"])
				}},
				{"api", "webhook.delete", "", func(t *testing.T) { a.noContent(t, http.MethodDelete, "/api/v1/webhooks/"+hookAPI, nil) }},
				gql("mount.request-association", "mount:AU-2", `mutation { requestAssociation(input: {uid: "AU-2"}) { code } }`, nil),
				gql("mount.confirm-association", "mount:AU-2", `mutation { confirmAssociation(uid: "AU-2") { uid } }`, nil),
				gql("mount.update", "mount:AU-2", `mutation { updateMount(uid: "AU-2", input: {name: "Side"}) { uid } }`, nil),
				gql("nfc-tags.sync", "mount:AU-2", `mutation { syncNfcTags(mountUid: "AU-2", tagUids: ["04D1E2F3"]) { added } }`, nil),
				gql("nfc-tag.update", "nfc-tag:04D1E2F3", `mutation { updateNfcTag(uid: "04D1E2F3", input: {name: "Red"}) { uid } }`, nil),
				{"graphql", "webhook.create", "", func(t *testing.T) {
					r := a.gql(t, `mutation($url: String!) { createWebhook(input: {url: $url}) { webhook { id } secret } }`, map[string]any{"url": hookURL})
					v := decodeField[struct {
						Webhook struct{ ID string } `json:"webhook"`
						Secret  string              `json:"secret"`
					}](t, r, "createWebhook")
					hookGQL = v.Webhook.ID
					secrets = append(secrets, v.Secret)
				}},
				{"graphql", "webhook.update", "", func(t *testing.T) {
					if r := a.gql(t, `mutation($id: ID!) { updateWebhook(id: $id, input: {description: "x"}) { id } }`, map[string]any{"id": hookGQL}); len(r.Errors) > 0 {
						t.Fatal(r.Errors)
					}
				}},
				{"graphql", "webhook.rotate-secret", "", func(t *testing.T) {
					secrets = append(secrets, decodeField[string](t, a.gql(t, `mutation($id: ID!) { rotateWebhookSecret(id: $id) }`, map[string]any{"id": hookGQL}), "rotateWebhookSecret"))
				}},
				{"graphql", "webhook.delete", "", func(t *testing.T) {
					if r := a.gql(t, `mutation($id: ID!) { deleteWebhook(id: $id) }`, map[string]any{"id": hookGQL}); len(r.Errors) > 0 {
						t.Fatal(r.Errors)
					}
				}},
				gql("mount.abandon", "mount:AU-2", `mutation { abandonMount(uid: "AU-2") }`, nil),
				gql("mount.delete", "mount:AU-1", `mutation { deleteMount(uid: "AU-1") }`, nil),
				api("mount.request-association", "mount:AU-3", http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-3"}),
				cliChange("keys.rotate", "mount:AU-3", func(t *testing.T) { in.runCLI("keys", "rotate", "--mount", "AU-3") }),
				{"api", "mount.abandon", "mount:AU-3", func(t *testing.T) { a.noContent(t, http.MethodDelete, "/api/v1/mounts/AU-3/abandon", nil) }},
				api("mount.request-association", "mount:AU-4", http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-4"}),
				{"api", "mount.delete", "mount:AU-4", func(t *testing.T) { a.noContent(t, http.MethodDelete, "/api/v1/mounts/AU-4", nil) }},
				cliChange("account.rotate-secret", "account:"+a.creds.AccountID, func(t *testing.T) {
					var c credentials
					if err := json.Unmarshal([]byte(in.runCLI("accounts", "rotate-secret", "--account", a.creds.AccountID, "--json")), &c); err != nil {
						t.Fatal(err)
					}
					secrets = append(secrets, c.ClientSecret)
					a.creds.ClientSecret = c.ClientSecret // tokens already issued live on
				}),
				cliChange("user.create", "", func(t *testing.T) {
					in.runCLIInput(t, password+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ana", "--role", "owner", "--password-stdin")
				}),
				cliChange("user.set-password", "", func(t *testing.T) {
					in.runCLIInput(t, password+"\n", "users", "set-password", "--username", "ana", "--password-stdin")
				}),
				{"person", "mount.request-association", "mount:AU-5", func(t *testing.T) {
					tokens, err := in.signInPerson(t, "ana", password)
					if err != nil {
						t.Fatal(err)
					}
					person = fleet{in: in, creds: a.creds, token: tokens.AccessToken}
					person.ok(t, http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-5"})
				}},
				cliChange("user.delete", "", func(t *testing.T) { in.runCLI("users", "delete", "--username", "ana") }),
				// A command the client issues under its default name.
				api("mount.request-association", "mount:AU-9", http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-9"}),
				// From here on the client's changes show its new name.
				cliChange("account.rename-client", "account:"+a.creds.AccountID, func(t *testing.T) {
					in.runCLI("accounts", "rename-client", "--account", a.creds.AccountID, "--name", "Night shift")
				}),
				{"api", "alarm-rule.create", "", func(t *testing.T) {
					a.associated(t, "AU-7")
					ruleID = a.createRule(t, lowBattery("AU-7")).ID
				}},
				{"api", "alarm-rule.update", "", func(t *testing.T) {
					a.ok(t, http.MethodPatch, "/api/v1/alarm-rules/"+ruleID, map[string]any{"name": "Battery very low"})
				}},
				{"api", "alarm.acknowledge", "", func(t *testing.T) {
					a.report(t, "AU-7", entry("BATTERY_LEVEL", "5", time.Now()))
					page := a.alarms(t, url.Values{"mountUid": {"AU-7"}, "state": {"ACTIVE"}})
					if len(page.Alarms) != 1 {
						t.Fatalf("alarms of AU-7: %+v", page)
					}
					alarmID = page.Alarms[0].ID
					a.ok(t, http.MethodPost, "/api/v1/alarms/"+alarmID+"/acknowledge", nil)
				}},
				{"api", "alarm-rule.delete", "", func(t *testing.T) { a.noContent(t, http.MethodDelete, "/api/v1/alarm-rules/"+ruleID, nil) }},
				{"api", "job.create", "", func(t *testing.T) {
					jobID = a.createJob(t, map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{"AU-7"}}).ID
				}},
				{"graphql", "job.cancel", "", func(t *testing.T) {
					if r := a.gql(t, `mutation($id: ID!) { cancelJob(id: $id) { id } }`, map[string]any{"id": jobID}); len(r.Errors) > 0 {
						t.Fatal(r.Errors)
					}
				}},
				{"api", "rollout.create", "", func(t *testing.T) {
					in.publish(t, "HM-R", "1.1.0", 64)
					a.associate(t, "AU-8", map[string]any{"modelNumber": "HM-R", "devicePublicKey": newDevice("AU-8").publicKey()})
					a.confirm(t, "AU-8")
					res, raw := a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": "HM-R", "softwareRevision": "1.1.0"})
					if res.StatusCode != http.StatusCreated {
						t.Fatalf("create rollout: %d %s", res.StatusCode, raw)
					}
					rolloutID = decode[rolloutView](t, raw).ID
				}},
				{"api", "rollout.pause", "", func(t *testing.T) { a.ok(t, http.MethodPost, "/api/v1/rollouts/"+rolloutID+"/pause", nil) }},
				{"api", "rollout.resume", "", func(t *testing.T) { a.ok(t, http.MethodPost, "/api/v1/rollouts/"+rolloutID+"/resume", nil) }},
				{"api", "rollout.cancel", "", func(t *testing.T) { a.ok(t, http.MethodPost, "/api/v1/rollouts/"+rolloutID+"/cancel", nil) }},
				{"api", "grant.create", "", func(t *testing.T) {
					a.associate(t, "AU-G", map[string]any{"devicePublicKey": newDevice("AU-G").publicKey()})
					a.confirm(t, "AU-G")
					res, raw := a.call(http.MethodPost, "/api/v1/mounts/AU-G/grants", map[string]any{"riderKey": riderKeyHex(t),
						"notAfter": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
					if res.StatusCode != http.StatusCreated {
						t.Fatalf("create grant: %d %s", res.StatusCode, raw)
					}
					grantID = decode[grantView](t, raw).ID
				}},
				{"graphql", "grant.revoke", "", func(t *testing.T) {
					if r := a.gql(t, `mutation($id: ID!) { revokeGrant(id: $id) { id } }`, map[string]any{"id": grantID}); len(r.Errors) > 0 {
						t.Fatal(r.Errors)
					}
				}},
				cliChange("firmware.publish", "firmware:HM-A@1.0.0", func(t *testing.T) { in.publish(t, "HM-A", "1.0.0", 64) }),
				cliChange("firmware.deprecate", "firmware:HM-A@1.0.0", func(t *testing.T) {
					in.runCLI("firmware", "deprecate", "--model", "HM-A", "--revision", "1.0.0")
				}),
			}
			installation := map[string]bool{"account.create": true, "firmware.publish": true, "firmware.deprecate": true, "keys.rotate": true}
			seen := map[string]bool{}
			for i, c := range changes {
				c.do(t)
				target := c.target
				switch {
				case target != "":
				case strings.HasPrefix(c.action, "webhook.") && c.via == "api":
					target = "webhook:" + hookAPI
				case strings.HasPrefix(c.action, "webhook."):
					target = "webhook:" + hookGQL
				case strings.HasPrefix(c.action, "alarm-rule."):
					target = "alarm-rule:" + ruleID
				case c.action == "alarm.acknowledge":
					target = "alarm:" + alarmID
				case strings.HasPrefix(c.action, "job."):
					target = "job:" + jobID
				case strings.HasPrefix(c.action, "rollout."):
					target = "rollout:" + rolloutID
				case strings.HasPrefix(c.action, "grant."):
					target = "grant:" + grantID
				}
				if installation[c.action] {
					e, log, ok := eventually(t, func() []auditView { return in.auditCLI(t, "").Entries }, is(c.action, target))
					if !ok {
						t.Fatalf("change %d (%s %s via %s) not in mountd audit: %+v", i, c.action, target, c.via, log)
					}
					if e.Actor.Type != "cli" || e.Actor.ID != op.ID {
						t.Fatalf("%s: actor %+v, want the operator %+v", c.action, e.Actor, op)
					}
					if _, ok := findEntry(a.auditREST(t, nil).Entries, c.action, target); ok {
						t.Fatalf("%s, a change of the installation, in the account's log", c.action)
					}
					seen[c.action] = true
					continue
				}
				var e auditView
				pass := is(c.action, target)
				if target == "" { // a user's id is the server's
					pass = func(x auditView) bool { return x.Action == c.action && x.Details["username"] == "ana" }
				}
				for reader, read := range map[string]func() []auditView{
					"api":     func() []auditView { return a.auditREST(t, nil).Entries },
					"graphql": func() []auditView { return a.auditGraphQL(t).Entries },
					"cli":     func() []auditView { return in.auditCLI(t, a.creds.AccountID).Entries },
				} {
					found, log, ok := eventually(t, read, pass)
					if !ok {
						t.Fatalf("change %d (%s %s via %s) not found through %s: %+v", i, c.action, target, c.via, reader, log)
					}
					e = found
				}
				switch c.via {
				case "api", "graphql":
					if e.Actor.Type != "client" || e.Actor.ID != a.creds.ClientID || e.SourceAddress != "127.0.0.1" {
						t.Fatalf("%s via %s: actor %+v from %q", c.action, c.via, e.Actor, e.SourceAddress)
					}
				case "person":
					if e.Actor.Type != "user" || !strings.HasPrefix(e.Actor.ID, "usr_") || e.Actor.Name != "ana" {
						t.Fatalf("%s by a person: actor %+v", c.action, e.Actor)
					}
				case "cli":
					if e.Actor.Type != "cli" || e.Actor.ID != op.ID || e.SourceAddress != "" {
						t.Fatalf("%s via the CLI: actor %+v from %q", c.action, e.Actor, e.SourceAddress)
					}
				}
				seen[c.action] = true
			}
			// Names, not ids: the client's entries before the rename carry
			// its default name (the account's + " API client"), those
			// after it the new one, in REST, GraphQL and mountd audit;
			// the alarm it acknowledged names it too.
			log := a.auditREST(t, nil).Entries
			first, _ := findEntry(log, "webhook.create", "webhook:"+hookAPI)
			acked, _ := findEntry(log, "alarm.acknowledge", "alarm:"+alarmID)
			renamed, _ := findEntry(log, "account.rename-client", "account:"+a.creds.AccountID)
			if first.Actor.Name != "A API client" || acked.Actor.Name != "Night shift" || renamed.Details["name"] != "Night shift" {
				t.Fatalf("actor names: before the rename %+v, after %+v; rename details %v", first.Actor, acked.Actor, renamed.Details)
			}
			if e, _ := findEntry(a.auditGraphQL(t).Entries, "alarm.acknowledge", "alarm:"+alarmID); e.Actor.Name != "Night shift" {
				t.Fatalf("GraphQL audit actor %+v", e.Actor)
			}
			if e, _ := findEntry(in.auditCLI(t, a.creds.AccountID).Entries, "alarm.acknowledge", "alarm:"+alarmID); e.Actor.Name != "Night shift" {
				t.Fatalf("mountd audit actor %+v", e.Actor)
			}
			alarms := decode[struct {
				Alarms []map[string]any `json:"alarms"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/alarms?mountUid=AU-7", nil)).Alarms
			if len(alarms) != 1 || alarms[0]["acknowledgedBy"] != a.creds.ClientID || alarms[0]["acknowledgedByName"] != "Night shift" {
				t.Fatalf("REST alarms of AU-7: %+v", alarms)
			}
			if r := a.gql(t, `{ alarms(mountUid: "AU-7") { alarms { acknowledgedBy acknowledgedByName } } }`, nil); len(r.Errors) > 0 ||
				!strings.Contains(string(r.Data), `"acknowledgedByName":"Night shift"`) {
				t.Fatalf("GraphQL alarm: %s %+v", r.Data, r.Errors)
			}
			// Commands keep the name their issuer had when issuing them:
			// AU-9's from before the rename the default name, AU-7's from
			// after it the new one, AU-5's the person's username (its user
			// since deleted), in REST and GraphQL.
			for uid, want := range map[string][2]string{"AU-9": {a.creds.ClientID, "A API client"},
				"AU-7": {a.creds.ClientID, "Night shift"}, "AU-5": {"usr_", "ana"}} {
				cmds := decode[struct {
					Commands []map[string]any `json:"commands"`
				}](t, a.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/commands", nil)).Commands
				if len(cmds) == 0 {
					t.Fatalf("no commands of %s", uid)
				}
				for _, c := range cmds {
					if by, _ := c["issuedBy"].(string); !strings.HasPrefix(by, want[0]) || c["issuedByName"] != want[1] {
						t.Fatalf("REST commands of %s: %+v; want issued by %s… named %q", uid, cmds, want[0], want[1])
					}
				}
				r := a.gql(t, `query($uid: ID!) { mountCommands(uid: $uid) { commands { issuedBy issuedByName } } }`, map[string]any{"uid": uid})
				if len(r.Errors) > 0 || !strings.Contains(string(r.Data), `"issuedByName":"`+want[1]+`"`) {
					t.Fatalf("GraphQL commands of %s: %s %+v", uid, r.Data, r.Errors)
				}
			}
			if e, _, ok := eventually(t, func() []auditView { return in.auditCLI(t, "").Entries }, is("account.create", "account:"+b.creds.AccountID)); !ok || e.Details["name"] != "B" {
				t.Fatalf("account.create of B: %+v", e)
			}
			seen["account.create"] = true
			// An epoch rise takes 257 revocations on one mount: the store's
			// contract suite checks its entry (storetest, EpochOverflow).
			seen["grant.resign"] = true
			for _, action := range core.AuditActions {
				if !seen[string(action)] {
					t.Errorf("no change of kind %s was checked", action)
				}
			}

			// Behind a trusted proxy the source is the client it names, as
			// for the rate limits.
			req, _ := http.NewRequest(http.MethodPost, in.base+"/api/v1/mounts", strings.NewReader(`{"uid":"AU-6"}`))
			req.Header.Set("Access-Key", a.token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Forwarded-For", "203.0.113.9")
			if res, body := in.do(req); res.StatusCode != http.StatusOK {
				t.Fatalf("claim behind the proxy: %d %s", res.StatusCode, body)
			}
			// Once this newest entry is read, every older one is too.
			if e, _, ok := eventually(t, func() []auditView { return a.auditREST(t, nil).Entries }, is("mount.request-association", "mount:AU-6")); !ok || e.SourceAddress != "203.0.113.9" {
				t.Fatalf("behind a trusted proxy: %+v", e)
			}

			// Failed changes record nothing: B's claim of A's mount, B's
			// change of A's mount, a bad webhook, an unknown user.
			before := len(a.auditREST(t, nil).Entries)
			for _, fail := range []func() (*http.Response, []byte){
				func() (*http.Response, []byte) {
					return b.call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "AU-6"})
				},
				func() (*http.Response, []byte) {
					return b.call(http.MethodPatch, "/api/v1/mounts/AU-6", map[string]any{"name": "mine"})
				},
				func() (*http.Response, []byte) {
					return a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "ftp://x"})
				},
				func() (*http.Response, []byte) { return a.call(http.MethodDelete, "/api/v1/webhooks/wh_nothing", nil) },
			} {
				if res, body := fail(); res.StatusCode < 400 {
					t.Fatalf("a failure succeeded: %d %s", res.StatusCode, body)
				}
			}
			if _, _, err := in.tryCLIInput(password+"\n", "users", "set-password", "--username", "nobody", "--password-stdin"); err == nil {
				t.Fatal("set-password of nobody succeeded")
			}
			if after := len(a.auditREST(t, nil).Entries); after != before {
				t.Fatalf("failed changes recorded %d entries", after-before)
			}
			if got := b.auditREST(t, nil).Entries; len(got) != 0 {
				t.Fatalf("B's log holds %+v", got)
			}

			// Filters and pages.
			if got := a.auditREST(t, url.Values{"target": {"mount:AU-1"}}).Entries; len(got) != 5 {
				t.Fatalf("target mount:AU-1: %+v", got)
			}
			if got := a.auditREST(t, url.Values{"action": {"webhook.create"}, "actor": {a.creds.ClientID}}).Entries; len(got) != 2 {
				t.Fatalf("webhook.create by the client: %+v", got)
			}
			all := a.auditREST(t, nil).Entries
			page := a.auditREST(t, url.Values{"limit": {"2"}})
			rest := a.auditREST(t, url.Values{"after": {page.Next}})
			if len(page.Entries) != 2 || len(rest.Entries) != len(all)-2 || rest.Entries[0].ID != all[2].ID {
				t.Fatalf("pages of %d and %d of %d", len(page.Entries), len(rest.Entries), len(all))
			}
			tail := decode[auditPageView](t, a.ok(t, http.MethodGet, "/api/v1/audit?tail=2", nil))
			if len(tail.Entries) != 2 || tail.Entries[0].ID != all[len(all)-2].ID || tail.Entries[1].ID != all[len(all)-1].ID ||
				tail.Next != all[len(all)-1].ID {
				t.Fatalf("tail=2: %+v, want the last two of %d", tail, len(all))
			}

			// Rights and bad input.
			restricted := in.token(a.creds, "openid", "sub", audItem, "role:restricted")
			res, body := in.call(http.MethodGet, "/api/v1/audit", restricted, nil)
			wantProblem(t, res, body, http.StatusForbidden, "FORBIDDEN")
			if r := in.gql(t, restricted, `{ audit { next } }`, nil); r.code() != "FORBIDDEN" {
				t.Fatalf("restricted GraphQL audit: %+v", r)
			}
			for field, query := range map[string]string{"limit": "limit=0", "after": "after=" + strings.Repeat("A", 32),
				"action": "action=mount.explode", "actor": "actor=", "target": "target=" + strings.Repeat("x", 201),
				"tail": "tail=5&limit=5"} {
				res, body := a.call(http.MethodGet, "/api/v1/audit?"+query, nil)
				if p := wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED"); len(p.Errors) != 1 || p.Errors[0].Field != field {
					t.Fatalf("%s: %s", query, body)
				}
			}
			if r := a.gql(t, `{ audit(limit: 5000) { next } }`, nil); r.code() != "VALIDATION_FAILED" {
				t.Fatalf("GraphQL limit 5000: %+v", r)
			}

			// No entry holds a secret.
			raw := fmt.Sprint(string(a.ok(t, http.MethodGet, "/api/v1/audit?limit=1000", nil)), in.runCLI("audit", "--json", "--limit", "1000"))
			for _, s := range secrets {
				if s == "" {
					t.Fatal("a secret was not captured")
				}
				if strings.Contains(raw, s) {
					t.Fatalf("the audit log holds a secret %q", s)
				}
			}
			if !strings.Contains(raw, `"url":"http://127.0.0.1:9/hook"`) {
				t.Fatalf("webhook URL not recorded without its query: %s", raw)
			}
		})
	}
}
