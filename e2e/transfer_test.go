package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestOwnershipTransfer: what belongs to an association (tag links, state
// history and latest values, command audit, name) stays with the account
// that produced it. A mount that changes hands after abandon or expiry
// shows the new owner none of it and signs none of it into their
// commands, through REST and GraphQL, on both databases.
func TestOwnershipTransfer(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")

			for _, tc := range []struct {
				name  string
				uid   string
				leave func(t *testing.T, uid string) // how A lets go of the mount
			}{
				{"abandon", "MX", func(t *testing.T, uid string) {
					a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)
				}},
				{"delete then claim", "MY", func(t *testing.T, uid string) {
					a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid, nil)
				}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					uid := tc.uid
					a.associate(t, uid, map[string]any{"name": "A's front", "serialNumber": "SN-" + uid, "macAddress": "aa:bb:cc:dd:ee:01"})
					a.confirm(t, uid)
					a.ok(t, http.MethodPost, "/api/v1/nfc-tags", map[string]any{"mountUid": uid, "tagUids": []string{"11223344", "AABBCCDDEEFF00"}})
					a.report(t, uid, entry("BATTERY_LEVEL", "80", time.Now().Add(-time.Minute)), entry("MOUNT_LOCKED", "1", time.Now().Add(-time.Minute)))
					a.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/query?code=RELEASE_HELMET", nil)
					tc.leave(t, uid)

					b.associate(t, uid, nil)
					m := b.confirm(t, uid)
					if m.Name != "" || m.BatteryLevel != nil || m.MountLocked != nil {
						t.Fatalf("B's new mount carries A's association: %+v", m)
					}
					if m := b.get(t, uid); m.Name != "" || m.BatteryLevel != nil || m.MountLocked != nil {
						t.Fatalf("GET for B: %+v", m)
					}
					// Nothing of A's tags is signed for B.
					cmd := decode[[]commandView](t, b.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/query?code=SYNC_NFC_TAGS", nil))[0]
					if fmt.Sprint(cmd.Data["tagUids"]) != "[]" || strings.Contains(cmd.Payload, "11223344") || strings.Contains(cmd.Payload, "AABBCCDDEEFF00") {
						t.Fatalf("B's SYNC_NFC_TAGS authorises A's tags: %+v", cmd)
					}
					states := decode[map[string]any](t, b.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/states", nil))
					if n := states["pagination"].(map[string]any)["totalItems"].(float64); n != 0 {
						t.Fatalf("B reads A's state history: %v", states)
					}
					cmds := decode[map[string]any](t, b.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/commands", nil))
					for _, c := range cmds["commands"].([]any) {
						if c.(map[string]any)["issuedBy"] == a.creds.ClientID || strings.Contains(fmt.Sprint(c), "RELEASE_HELMET") {
							t.Fatalf("B reads A's command audit: %v", cmds)
						}
					}
					r := b.gql(t, `query($uid: ID!) {
						mount(uid: $uid) { name batteryLevel mountLocked nfcTags { uid } }
						mountStates(uid: $uid) { pagination { totalItems } }
						mountCommands(uid: $uid) { commands { code issuedBy } }
					}`, map[string]any{"uid": uid})
					if r.code() != "" {
						t.Fatalf("GraphQL: %+v", r.Errors)
					}
					got := string(r.Data)
					if !strings.Contains(got, `"name":""`) || !strings.Contains(got, `"batteryLevel":null`) || !strings.Contains(got, `"nfcTags":[]`) ||
						!strings.Contains(got, `"totalItems":0`) || strings.Contains(got, "RELEASE_HELMET") || strings.Contains(got, a.creds.ClientID) {
						t.Fatalf("GraphQL shows B A's association: %s", got)
					}
					// A keeps its tags, unlinked; A's history stays A's.
					tags := decode[tagList](t, a.ok(t, http.MethodGet, "/api/v1/nfc-tags", nil))
					for _, tag := range tags.Tags {
						if len(tag.MountUIDs) != 0 {
							t.Fatalf("A's tag still linked after the mount left: %+v", tag)
						}
					}
					// B's own history starts from nothing and stays B's.
					b.report(t, uid, entry("BATTERY_LEVEL", "40", time.Now().Add(-time.Second)))
					if m := b.get(t, uid); m.BatteryLevel == nil || *m.BatteryLevel != 40 {
						t.Fatalf("B's own report: %+v", m)
					}
					b.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)
					// A claims back: nothing of B's association shows.
					a.associate(t, uid, nil)
					if m := a.get(t, uid); m.Name != "" || m.BatteryLevel != nil && *m.BatteryLevel == 40 {
						t.Fatalf("A re-claims and sees B's association: %+v", m)
					}
					states = decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/states?code=BATTERY_LEVEL", nil))
					for _, s := range states["states"].([]any) {
						if s.(map[string]any)["value"] == "40" {
							t.Fatalf("A reads B's history: %v", states)
						}
					}
					a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid, nil)
				})
			}
		})
	}
}
