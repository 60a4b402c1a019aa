package e2e

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/protocol"
)

type grantView struct {
	ID         string   `json:"id"`
	UID        string   `json:"uid"`
	RiderKey   string   `json:"riderKey"`
	Rights     []string `json:"rights"`
	NotBefore  string   `json:"notBefore"`
	NotAfter   string   `json:"notAfter"`
	Epoch      int64    `json:"epoch"`
	Label      *string  `json:"label"`
	RevokedAt  *string  `json:"revokedAt"`
	Text       string   `json:"text"`
	Signature  string   `json:"signature"`
	Uses       int      `json:"uses"`
	LastUsedAt *string  `json:"lastUsedAt"`
}

type signedTextView struct {
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

func riderKeyHex(t *testing.T) string {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(k.PublicKey().Bytes())
}

// verifiesWith says whether signature (hex) is ownerKey's (hex) over text.
func verifiesWith(ownerKey, text, signature string) bool {
	pub, err1 := hex.DecodeString(ownerKey)
	sig, err2 := hex.DecodeString(signature)
	return err1 == nil && err2 == nil && len(pub) == ed25519.PublicKeySize && ed25519.Verify(pub, []byte(text), sig)
}

// TestRiderGrants drives offline access's server side over REST on both
// databases (CONTRACT §21): an owner's and a rider's grants signed by the
// association's owner key, what each token sees, revocation into the
// mount's signed list, and signed time for the mount's challenge.
func TestRiderGrants(t *testing.T) {
	for name, cfg := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, cfg(t))
			owner := newFleet(in, "Grants")
			uid := uniqueUID("GR")
			devicePub, devicePriv, _ := ed25519.GenerateKey(rand.Reader)
			cmd := owner.associate(t, uid, map[string]any{"devicePublicKey": hex.EncodeToString(devicePub)})
			owner.confirm(t, uid)
			ownerKey, _ := cmd.Data["publicKey"].(string)
			bare := uniqueUID("GB") // associated, no device key
			owner.associated(t, bare)
			rider := fleet{in: in, creds: owner.creds, token: in.token(owner.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)}
			maintainer := fleet{in: in, creds: owner.creds, token: in.token(owner.creds, "openid", "sub", audItem, "role:restricted")}
			stranger := newFleet(in, "Stranger")
			notAfter := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)

			anna := riderKeyHex(t)
			res, raw := owner.call(http.MethodPost, "/api/v1/mounts/"+uid+"/grants", map[string]any{"riderKey": strings.ToUpper(anna), "notAfter": notAfter, "label": "Anna"})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, raw)
			}
			g := decode[grantView](t, raw)
			if g.RiderKey != anna || g.Epoch != 1 || g.Label == nil || *g.Label != "Anna" || g.RevokedAt != nil ||
				!strings.HasPrefix(g.Text, "grant;"+uid+";"+g.ID+";"+anna+";RELEASE_HELMET;") || !verifiesWith(ownerKey, g.Text, g.Signature) {
				t.Fatalf("grant %s; want it signed by the owner key %s", raw, ownerKey)
			}

			t.Run("refusals", func(t *testing.T) {
				for _, tc := range []struct {
					name   string
					f      fleet
					uid    string
					body   map[string]any
					status int
					code   string
				}{
					{"no device key", owner, bare, map[string]any{"riderKey": anna, "notAfter": notAfter}, 409, "DEVICE_KEY_REQUIRED"},
					{"a stranger", stranger, uid, map[string]any{"riderKey": anna, "notAfter": notAfter}, 404, "MOUNT_NOT_FOUND"},
					{"a maintainer", maintainer, uid, map[string]any{"riderKey": anna, "notAfter": notAfter}, 403, "FORBIDDEN"},
					{"no notAfter", owner, uid, map[string]any{"riderKey": anna}, 400, "VALIDATION_FAILED"},
					{"not a date", owner, uid, map[string]any{"riderKey": anna, "notAfter": "soon"}, 400, "VALIDATION_FAILED"},
					{"an unknown field", owner, uid, map[string]any{"riderKey": anna, "notAfter": notAfter, "uses": 3}, 400, "VALIDATION_FAILED"},
					{"a rider, for a day", rider, uid, map[string]any{"riderKey": riderKeyHex(t), "notAfter": time.Now().Add(24 * time.Hour).UTC().Format(time.RFC3339)}, 400, "VALIDATION_FAILED"},
				} {
					t.Run(tc.name, func(t *testing.T) {
						res, raw := tc.f.call(http.MethodPost, "/api/v1/mounts/"+tc.uid+"/grants", tc.body)
						wantProblem(t, res, raw, tc.status, tc.code)
					})
				}
			})

			t.Run("what each token sees", func(t *testing.T) {
				bob := riderKeyHex(t)
				res, raw := rider.call(http.MethodPost, "/api/v1/mounts/"+uid+"/grants", map[string]any{"riderKey": bob, "notAfter": notAfter})
				if res.StatusCode != http.StatusCreated || decode[grantView](t, raw).Label != nil {
					t.Fatalf("a rider's grant: %d %s (no label for it)", res.StatusCode, raw)
				}
				res, raw = rider.call(http.MethodGet, "/api/v1/mounts/"+uid+"/grants", nil)
				wantProblem(t, res, raw, 400, "VALIDATION_FAILED") // riderKey required
				page := decode[struct {
					Grants []grantView `json:"grants"`
				}](t, rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/grants?riderKey="+anna, nil))
				if len(page.Grants) != 1 || page.Grants[0].ID != g.ID || page.Grants[0].Label != nil {
					t.Fatalf("the rider's view of Anna's grants: %+v", page.Grants)
				}
				all := decode[struct {
					Grants []grantView `json:"grants"`
				}](t, maintainer.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/grants?state=ACTIVE", nil))
				if len(all.Grants) != 2 {
					t.Fatalf("the maintainer sees %d active grants, want 2", len(all.Grants))
				}
				res, raw = stranger.call(http.MethodGet, "/api/v1/grants/"+g.ID, nil)
				wantProblem(t, res, raw, 404, "GRANT_NOT_FOUND")
				res, raw = owner.call(http.MethodGet, "/api/v1/mounts/"+uid+"/grants?state=LIVE", nil)
				wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			})

			t.Run("a rider revoked across mounts in one call", func(t *testing.T) {
				carl := riderKeyHex(t)
				ids := map[string]string{}
				for range 3 {
					m := uniqueUID("GM")
					pub, _, _ := ed25519.GenerateKey(rand.Reader)
					owner.associate(t, m, map[string]any{"devicePublicKey": hex.EncodeToString(pub)})
					owner.confirm(t, m)
					res, raw := owner.call(http.MethodPost, "/api/v1/mounts/"+m+"/grants", map[string]any{"riderKey": carl, "notAfter": notAfter})
					if res.StatusCode != http.StatusCreated {
						t.Fatalf("Carl's grant on %s: %d %s", m, res.StatusCode, raw)
					}
					ids[m] = decode[grantView](t, raw).ID
				}
				res, raw := stranger.call(http.MethodPost, "/api/v1/grants/revoke", map[string]any{"riderKey": carl})
				if res.StatusCode != http.StatusOK || strings.Contains(string(raw), "gr_") {
					t.Fatalf("a stranger revoking Carl: %d %s; want none of this account's grants", res.StatusCode, raw)
				}
				done := decode[struct {
					Grants []grantView `json:"grants"`
				}](t, owner.ok(t, http.MethodPost, "/api/v1/grants/revoke", map[string]any{"riderKey": carl}))
				if len(done.Grants) != len(ids) {
					t.Fatalf("revoked %d grants, want Carl's %d", len(done.Grants), len(ids))
				}
				for _, g := range done.Grants {
					if g.RevokedAt == nil || ids[g.UID] != g.ID {
						t.Fatalf("revoked %+v; want Carl's grants %v", g, ids)
					}
				}
				for m, id := range ids {
					list := decode[signedTextView](t, owner.ok(t, http.MethodGet, "/api/v1/mounts/"+m+"/revocations", nil))
					if !strings.HasSuffix(list.Text, ";"+id) {
						t.Fatalf("%s's list %q: want it to name %s", m, list.Text, id)
					}
				}
				// Each grant has its event and its audit entry (read until the
				// log shows them: entries settle once older transactions end).
				want := map[string]bool{}
				for _, id := range ids {
					want["grant:"+id] = true
				}
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
					events := decode[struct {
						Events []struct {
							UID   string    `json:"uid"`
							Grant grantView `json:"grant"`
						} `json:"events"`
					}](t, owner.ok(t, http.MethodGet, "/api/v1/events?types=GRANT_REVOKED&limit=100", nil))
					audit := decode[auditPageView](t, owner.ok(t, http.MethodGet, "/api/v1/audit?action=grant.revoke&limit=100", nil))
					seenEvents, seenAudit := 0, 0
					for _, e := range events.Events {
						if ids[e.UID] == e.Grant.ID {
							seenEvents++
						}
					}
					for _, e := range audit.Entries {
						if want[e.Target] {
							seenAudit++
						}
					}
					if seenEvents == len(ids) && seenAudit == len(ids) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d GRANT_REVOKED events and %d audit entries of Carl's %d grants", seenEvents, seenAudit, len(ids))
					}
				}
			})

			t.Run("revocation reaches the signed list", func(t *testing.T) {
				res, raw := rider.call(http.MethodPost, "/api/v1/grants/"+g.ID+"/revoke", nil)
				wantProblem(t, res, raw, 403, "FORBIDDEN")
				before := decode[signedTextView](t, rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/revocations", nil))
				if before.Text != "revocations;"+uid+";1;1;" || !verifiesWith(ownerKey, before.Text, before.Signature) {
					t.Fatalf("a fresh list: %+v", before)
				}
				revoked := decode[grantView](t, owner.ok(t, http.MethodPost, "/api/v1/grants/"+g.ID+"/revoke", nil))
				if revoked.RevokedAt == nil {
					t.Fatalf("revoked: %+v", revoked)
				}
				again := decode[grantView](t, owner.ok(t, http.MethodPost, "/api/v1/grants/"+g.ID+"/revoke", nil))
				if again.RevokedAt == nil || *again.RevokedAt != *revoked.RevokedAt {
					t.Fatalf("a second revoke moved revokedAt: %+v", again)
				}
				list := decode[signedTextView](t, rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/revocations", nil))
				parts := strings.Split(list.Text, ";")
				if len(parts) != 5 || parts[1] != uid || parts[2] == "1" || parts[3] != "1" || parts[4] != g.ID || !verifiesWith(ownerKey, list.Text, list.Signature) {
					t.Fatalf("the list after a revocation: %+v", list)
				}
				byRider := decode[struct {
					Grants []grantView `json:"grants"`
				}](t, owner.ok(t, http.MethodGet, "/api/v1/grants?"+url.Values{"riderKey": {anna}}.Encode(), nil))
				if len(byRider.Grants) != 1 || byRider.Grants[0].RevokedAt == nil {
					t.Fatalf("Anna's grants: %+v", byRider.Grants)
				}
				none := decode[struct {
					Grants []grantView `json:"grants"`
				}](t, owner.ok(t, http.MethodPost, "/api/v1/grants/revoke", map[string]any{"riderKey": anna}))
				if len(none.Grants) != 0 {
					t.Fatalf("revoking Anna again revoked %d", len(none.Grants))
				}
				// One GRANT_REVOKED event, with the grant; never for a rider.
				raw, _ = owner.okUntil(t, "/api/v1/events?types=GRANT_REVOKED&mountUid="+uid, func(body []byte) bool {
					return strings.Contains(string(body), g.ID)
				})
				events := decode[struct {
					Events []struct {
						Type  string    `json:"type"`
						UID   string    `json:"uid"`
						Grant grantView `json:"grant"`
					} `json:"events"`
				}](t, raw)
				if len(events.Events) != 1 || events.Events[0].UID != uid || events.Events[0].Grant.ID != g.ID || events.Events[0].Grant.RevokedAt == nil {
					t.Fatalf("GRANT_REVOKED events: %+v; want one, of Anna's grant", events.Events)
				}
				if raw := rider.ok(t, http.MethodGet, "/api/v1/events?mountUid="+uid, nil); strings.Contains(string(raw), "GRANT_REVOKED") {
					t.Fatalf("a rider's token received GRANT_REVOKED: %s", raw)
				}
				// The rider's token from before the revocation may no longer
				// query the mount's commands or make grants there; a token
				// issued after (iat in seconds: the next second) may.
				res, raw = rider.call(http.MethodGet, "/api/v1/mounts/"+uid+"/query?code=RELEASE_HELMET", nil)
				wantProblem(t, res, raw, 403, "FORBIDDEN")
				res, raw = rider.call(http.MethodPost, "/api/v1/mounts/"+uid+"/grants", map[string]any{"riderKey": riderKeyHex(t), "notAfter": notAfter})
				wantProblem(t, res, raw, 403, "FORBIDDEN")
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 10*time.Millisecond)))
				rider.token = in.token(owner.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
				rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/query?code=RELEASE_HELMET", nil)
			})

			t.Run("over GraphQL", func(t *testing.T) {
				carl := riderKeyHex(t)
				created := field[grantView](t, owner.gql(t, `mutation($uid: ID!, $in: CreateGrantInput!) { createGrant(uid: $uid, input: $in) { id riderKey epoch label text signature revokedAt } }`,
					map[string]any{"uid": uid, "in": map[string]any{"riderKey": carl, "notAfter": notAfter, "label": "Carl"}}), "createGrant")
				if created.RiderKey != carl || created.Label == nil || *created.Label != "Carl" || !verifiesWith(ownerKey, created.Text, created.Signature) {
					t.Fatalf("createGrant: %+v", created)
				}
				page := field[struct {
					Grants []grantView `json:"grants"`
				}](t, rider.gql(t, `query($uid: ID!, $key: String) { grants(uid: $uid, riderKey: $key, state: ACTIVE) { grants { id label } } }`,
					map[string]any{"uid": uid, "key": carl}), "grants")
				if len(page.Grants) != 1 || page.Grants[0].ID != created.ID || page.Grants[0].Label != nil {
					t.Fatalf("the rider's grants of Carl: %+v", page.Grants)
				}
				if code := rider.gql(t, `mutation($id: ID!) { revokeGrant(id: $id) { id } }`, map[string]any{"id": created.ID}).code(); code != "FORBIDDEN" {
					t.Fatalf("a rider revoked over GraphQL: %q", code)
				}
				revoked := field[grantView](t, owner.gql(t, `mutation($id: ID!) { revokeGrant(id: $id) { id revokedAt } }`, map[string]any{"id": created.ID}), "revokeGrant")
				if revoked.RevokedAt == nil {
					t.Fatalf("revokeGrant: %+v", revoked)
				}
				if code := stranger.gql(t, `query($id: ID!) { grant(id: $id) { id } }`, map[string]any{"id": created.ID}).code(); code != "GRANT_NOT_FOUND" {
					t.Fatalf("a stranger's grant(id): %q", code)
				}
			})

			t.Run("offline uses come back", func(t *testing.T) {
				dana := riderKeyHex(t)
				res, raw := owner.call(http.MethodPost, "/api/v1/mounts/"+uid+"/grants", map[string]any{"riderKey": dana, "notAfter": notAfter})
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("create: %d %s", res.StatusCode, raw)
				}
				grant := decode[grantView](t, raw)
				at := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)
				receipt := func(grantID, outcome, reason string, counter uint64, key ed25519.PrivateKey) map[string]any {
					r := protocol.OfflineReceipt{UID: uid, GrantID: grantID, Code: "RELEASE_HELMET", Nonce: protocol.NewNonce(),
						Outcome: outcome, Reason: reason, Counter: counter, At: at}
					sig := ed25519.Sign(key, []byte(protocol.BuildOfflineReceiptText(r)))
					return map[string]any{"grantId": r.GrantID, "code": r.Code, "nonce": r.Nonce, "outcome": r.Outcome, "reason": r.Reason,
						"counter": r.Counter, "at": protocol.FormatTime(r.At), "signature": hex.EncodeToString(sig)}
				}
				_, otherDevice, _ := ed25519.GenerateKey(rand.Reader)
				used := receipt(grant.ID, "EXECUTED", "", 7, devicePriv)
				refused := receipt(grant.ID, "REFUSED", protocol.ReasonExpired, 8, devicePriv)
				forged := receipt(grant.ID, "EXECUTED", "", 9, otherDevice)
				unknown := receipt("gr_"+strings.Repeat("0", 24), "EXECUTED", "", 10, devicePriv)
				badAt := receipt(grant.ID, "EXECUTED", "", 11, devicePriv)
				badAt["at"] = "yesterday"
				upload := func(receipts ...map[string]any) struct {
					Accepted   int              `json:"accepted"`
					Duplicates int              `json:"duplicates"`
					Rejected   []map[string]any `json:"rejected"`
					Ack        *signedTextView  `json:"ack"`
				} {
					t.Helper()
					// Another rider's phone carries the log: any token that
					// may report the mount's states.
					return decode[struct {
						Accepted   int              `json:"accepted"`
						Duplicates int              `json:"duplicates"`
						Rejected   []map[string]any `json:"rejected"`
						Ack        *signedTextView  `json:"ack"`
					}](t, rider.ok(t, http.MethodPost, "/api/v1/mounts/"+uid+"/offline-receipts", map[string]any{"receipts": receipts}))
				}
				first := upload(used, forged, refused, unknown, badAt)
				wantAck := "ack;" + uid + ";" + used["nonce"].(string) + "+" + refused["nonce"].(string)
				if first.Accepted != 2 || first.Duplicates != 0 || len(first.Rejected) != 3 || first.Ack == nil ||
					first.Ack.Text != wantAck || !verifiesWith(ownerKey, first.Ack.Text, first.Ack.Signature) {
					t.Fatalf("first upload: %+v; want 2 accepted, 3 rejected, ack %q signed by the owner key", first, wantAck)
				}
				for i, code := range []string{"INVALID_SIGNATURE", "GRANT_NOT_FOUND", "VALIDATION_FAILED"} {
					if first.Rejected[i]["code"] != code {
						t.Fatalf("rejected[%d]: %+v, want %s", i, first.Rejected[i], code)
					}
				}
				again := upload(used, refused)
				if again.Accepted != 0 || again.Duplicates != 2 || again.Ack == nil || again.Ack.Text != wantAck {
					t.Fatalf("the same receipts again: %+v; want 2 duplicates and the same ack", again)
				}
				if none := upload(forged); none.Ack != nil || none.Accepted != 0 {
					t.Fatalf("nothing stored: %+v; want no ack", none)
				}
				cmd := decode[map[string]any](t, owner.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/commands/"+used["nonce"].(string), nil))
				if cmd["grantId"] != grant.ID || cmd["status"] != "EXECUTED" || cmd["payload"] != nil || cmd["signedToken"] != nil || cmd["verified"] != true {
					t.Fatalf("the offline use as a command: %+v", cmd)
				}
				after := decode[grantView](t, owner.ok(t, http.MethodGet, "/api/v1/grants/"+grant.ID, nil))
				if after.Uses != 1 || after.LastUsedAt == nil || *after.LastUsedAt != protocol.FormatTime(at) {
					t.Fatalf("the grant after one use and one refusal: %+v", after)
				}
				_, metrics := in.call(http.MethodGet, "/metrics", "", nil)
				for _, sample := range []string{`mountd_offline_uses_total{outcome="EXECUTED"}`, `mountd_offline_uses_total{outcome="REFUSED"}`, `mountd_grants_issued_total`} {
					if metricValue(string(metrics), sample) < 1 {
						t.Errorf("%s below 1 after the uploads", sample)
					}
				}
				if events, ok := owner.okUntil(t, "/api/v1/events?"+url.Values{"types": {"COMMAND_EXECUTED"}, "mountUid": {uid}}.Encode(), func(body []byte) bool {
					return strings.Contains(string(body), `"grantId":"`+grant.ID+`"`)
				}); !ok {
					t.Fatalf("no COMMAND_EXECUTED event with the grant: %s", events)
				}
			})

			t.Run("a phone tells the mount's offline state", func(t *testing.T) {
				type offlineView struct {
					RevocationVersion int64  `json:"revocationVersion"`
					LogPending        int    `json:"logPending"`
					TimeTrusted       bool   `json:"timeTrusted"`
					At                string `json:"at"`
				}
				list := decode[signedTextView](t, rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/revocations", nil))
				version, _ := strconv.ParseInt(strings.Split(list.Text, ";")[2], 10, 64)
				upload := func(status any) (*http.Response, []byte) {
					return rider.call(http.MethodPost, "/api/v1/mounts/"+uid+"/offline-receipts", map[string]any{"receipts": []any{}, "status": status})
				}
				for _, tc := range []struct {
					name   string
					status any
					field  string
				}{
					{"a negative version", map[string]any{"revocationVersion": -1, "logPending": 0, "timeTrusted": true}, "status.revocationVersion"},
					{"a huge log", map[string]any{"revocationVersion": 1, "logPending": 1 << 30, "timeTrusted": true}, "status.logPending"},
					{"an unknown field", map[string]any{"revocationVersion": 1, "logPending": 0, "timeTrusted": true, "x": 1}, "status"},
					{"a missing field", map[string]any{"revocationVersion": 1}, "status"},
					{"not an object", "fine", "status"},
				} {
					res, raw := upload(tc.status)
					if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Contains(fieldsOf(p), tc.field) {
						t.Errorf("%s: %s; want field %s", tc.name, raw, tc.field)
					}
				}
				// GET /mounts/{uid} answers an array of one (the spec).
				readOffline := func() struct {
					Offline *offlineView `json:"offline"`
				} {
					t.Helper()
					return decode[[]struct {
						Offline *offlineView `json:"offline"`
					}](t, owner.ok(t, http.MethodGet, "/api/v1/mounts/"+uid, nil))[0]
				}
				mount := readOffline()
				if mount.Offline != nil {
					t.Fatalf("offline before any phone told it: %+v", mount.Offline)
				}
				// A mount behind: it has not taken the newest list.
				if res, raw := upload(map[string]any{"revocationVersion": version - 1, "logPending": 2, "timeTrusted": true}); res.StatusCode != http.StatusOK {
					t.Fatalf("upload with status: %d %s", res.StatusCode, raw)
				}
				mount = readOffline()
				if o := mount.Offline; o == nil || o.RevocationVersion != version-1 || o.LogPending != 2 || !o.TimeTrusted || o.At == "" {
					t.Fatalf("offline after a phone told it: %+v", o)
				}
				got := field[struct {
					Offline *offlineView `json:"offline"`
				}](t, owner.gql(t, `query($uid: ID!) { mount(uid: $uid) { offline { revocationVersion logPending timeTrusted at } } }`, map[string]any{"uid": uid}), "mount")
				if got.Offline == nil || *got.Offline != *mount.Offline {
					t.Fatalf("GraphQL Mount.offline %+v; REST %+v", got.Offline, mount.Offline)
				}
				// A version is a time in ms: past Int's 32 bits, so the
				// schema types it Int64.
				if got.Offline.RevocationVersion <= math.MaxInt32 {
					t.Fatalf("revocationVersion %d: want a version past 32 bits here", got.Offline.RevocationVersion)
				}
				type fieldType struct {
					Name string `json:"name"`
					Type struct {
						OfType struct {
							Name string `json:"name"`
						} `json:"ofType"`
					} `json:"type"`
				}
				typ := field[struct {
					Fields []fieldType `json:"fields"`
				}](t, owner.gql(t, `{ __type(name: "MountOffline") { fields { name type { ofType { name } } } } }`, nil), "__type")
				if !slices.ContainsFunc(typ.Fields, func(f fieldType) bool { return f.Name == "revocationVersion" && f.Type.OfType.Name == "Int64" }) {
					t.Fatalf("MountOffline's fields %+v: want revocationVersion: Int64!", typ.Fields)
				}
				_, metrics := in.call(http.MethodGet, "/metrics", "", nil)
				if metricValue(string(metrics), "mountd_mounts_behind_revocations") < 1 {
					t.Errorf("mountd_mounts_behind_revocations below 1 with this mount behind")
				}
				// A stranger's upload tells nothing.
				if res, _ := stranger.call(http.MethodPost, "/api/v1/mounts/"+uid+"/offline-receipts",
					map[string]any{"receipts": []any{}, "status": map[string]any{"revocationVersion": 0, "logPending": 9, "timeTrusted": false}}); res.StatusCode != http.StatusNotFound {
					t.Fatalf("a stranger's upload: %d", res.StatusCode)
				}
				mount = readOffline()
				if o := mount.Offline; o == nil || o.LogPending != 2 {
					t.Fatalf("offline after a stranger's upload: %+v", o)
				}
			})

			t.Run("a new owner key signs the live grants again", func(t *testing.T) {
				erin := riderKeyHex(t)
				res, raw := owner.call(http.MethodPost, "/api/v1/mounts/"+uid+"/grants", map[string]any{"riderKey": erin, "notAfter": notAfter})
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("create: %d %s", res.StatusCode, raw)
				}
				g := decode[grantView](t, raw)
				// The owner asks again during its association: a new key.
				again := owner.associate(t, uid, nil)
				newKey, _ := again.Data["publicKey"].(string)
				if newKey == ownerKey {
					t.Fatal("POST /mounts again kept the owner key")
				}
				after := decode[grantView](t, owner.ok(t, http.MethodGet, "/api/v1/grants/"+g.ID, nil))
				if after.ID != g.ID || after.Text != g.Text || !verifiesWith(newKey, after.Text, after.Signature) {
					t.Fatalf("the grant after a new owner key: %+v; want the same text signed by %s", after, newKey)
				}
				ownerKey = newKey
			})

			t.Run("signed time", func(t *testing.T) {
				nonce := strings.Repeat("5a", 16)
				tok := decode[signedTextView](t, rider.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/time?nonce="+nonce, nil))
				if !strings.HasPrefix(tok.Text, "time;"+uid+";") || !strings.HasSuffix(tok.Text, ";"+nonce) || !verifiesWith(ownerKey, tok.Text, tok.Signature) {
					t.Fatalf("time token %+v", tok)
				}
				res, raw := rider.call(http.MethodGet, "/api/v1/mounts/"+uid+"/time?nonce=short", nil)
				wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
				res, raw = stranger.call(http.MethodGet, "/api/v1/mounts/"+uid+"/time?nonce="+nonce, nil)
				wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			})
		})
	}
}
