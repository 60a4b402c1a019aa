package e2e

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/protocol"
)

// What an association's end takes with it (docs/api.md,
// "The truth from the mount"), from outside, on both backends.

// TestDeviceKeyNotPlanted: account Y claims a uid with a device key of its
// choosing and abandons it; account X associates the uid without a key.
// X's mount has no key (it inherited none), so whatever Y's seed signs is
// refused (400 INVALID_SIGNATURE: no key pinned), through X's rider too,
// and X's audit shows what its own claim pinned (nothing), Y's the key Y
// brought. X's own claims then pin a key of theirs, kept by X's POST
// /mounts during its association.
func TestDeviceKeyNotPlanted(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			x, y := newFleet(in, "X"), newFleet(in, "Y")
			const uid = "PLANT-1"
			planted := newDevice(uid) // Y holds its seed
			y.associate(t, uid, map[string]any{"devicePublicKey": planted.publicKey()})
			y.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)

			x.associate(t, uid, map[string]any{"name": "Front"})
			if m := x.confirm(t, uid); m.DevicePublicKey != nil {
				t.Fatalf("X's mount inherited Y's device key %q", *m.DevicePublicKey)
			}
			if m := x.get(t, uid); m.DevicePublicKey != nil {
				t.Fatalf("X reads Y's device key %q", *m.DevicePublicKey)
			}

			// Y's seed signs a report and a receipt; X's rider relays them.
			rider := in.token(x.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
			at := time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond)
			res, raw := in.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states", rider, planted.signedReport("9.9.9",
				protocol.ReportEntry{Code: "MOUNT_LOCKED", Value: "1", OccurredAt: at}))
			wantProblem(t, res, raw, 400, "INVALID_SIGNATURE")
			cmd := x.issue(t, uid, "code=RELEASE_HELMET")
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/"+uid+"/commands/receipts", rider,
				receipts(planted.receipt(cmd.ID, "EXECUTED", "", at)))
			wantProblem(t, res, raw, 400, "INVALID_SIGNATURE")
			if c := x.commandByID(t, uid, cmd.ID); c.Status != "ISSUED" {
				t.Fatalf("a receipt signed by Y's seed moved X's command: %+v", c)
			}
			if m := x.get(t, uid); m.MountLocked != nil || m.SoftwareRevision == "9.9.9" {
				t.Fatalf("a report signed by Y's seed was stored: %+v", m)
			}

			// The audit: each claim's details name the key it brought. The
			// audit shows an entry once every transaction begun before it
			// has ended (other tests' too): wait for the claim's.
			claimKey := func(f fleet) []any {
				var keys []any
				waitForStep(t, "the claim's audit entry", func() bool {
					keys = nil
					for _, e := range f.auditREST(t, url.Values{"action": {"mount.request-association"}, "target": {"mount:" + uid}}).Entries {
						keys = append(keys, e.Details["devicePublicKey"])
					}
					return len(keys) > 0
				})
				return keys
			}
			if got := claimKey(y); !slices.Equal(got, []any{planted.publicKey()}) {
				t.Fatalf("Y's claim's audit names keys %v", got)
			}
			if got := claimKey(x); !slices.Equal(got, []any{nil}) {
				t.Fatalf("X's claim's audit names keys %v", got)
			}

			// X's own key, kept by X's POST /mounts during its association.
			own := newDevice(uid + "-own")
			x.associate(t, uid, map[string]any{"devicePublicKey": own.publicKey()})
			x.associate(t, uid, nil)
			if m := x.get(t, uid); m.DevicePublicKey == nil || *m.DevicePublicKey != own.publicKey() {
				t.Fatalf("X's own key after X's POST /mounts without one: %v", m.DevicePublicKey)
			}
		})
	}
}

// TestReceiptsOfAnEarlierAssociation: a command issued in an association
// that the same account abandoned is not the mount's in the next one:
// its receipt answers 404 COMMAND_NOT_FOUND (docs/api.md, "The truth from the mount"), the new association's
// is taken; and a receipt dated more than 5 minutes ahead of the server's
// clock is 400 naming receipts[0].at, the mount not heard.
func TestReceiptsOfAnEarlierAssociation(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			const uid = "AGAIN-1"
			d := newDevice(uid)
			a.associate(t, uid, map[string]any{"devicePublicKey": d.publicKey()})
			a.confirm(t, uid)
			old := a.issue(t, uid, "code=RELEASE_HELMET")
			a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)
			a.associate(t, uid, map[string]any{"devicePublicKey": d.publicKey()})
			a.confirm(t, uid)

			now := time.Now()
			res, raw := a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/commands/receipts", receipts(d.receipt(old.ID, "EXECUTED", "", now)))
			wantProblem(t, res, raw, 404, "COMMAND_NOT_FOUND")
			if c := a.commandByID(t, uid, old.ID); c.Status != "ISSUED" {
				t.Fatalf("the earlier association's command moved: %+v", c)
			}

			// Dated ahead: refused, and the mount is not heard.
			cmd := a.issue(t, uid, "code=RELEASE_HELMET")
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/commands/receipts",
				receipts(d.receipt(cmd.ID, "EXECUTED", "", now.Add(10*time.Minute))))
			if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Equal(fieldsOf(p), []string{"receipts[0].at"}) {
				t.Fatalf("a receipt dated 10 minutes ahead: %s", raw)
			}
			if m := a.get(t, uid); m.Presence != "UNKNOWN" || m.LastSeenAt != nil {
				t.Fatalf("a refused receipt was heard: %s %v", m.Presence, m.LastSeenAt)
			}

			// The current association's command: taken.
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/commands/receipts", receipts(d.receipt(cmd.ID, "EXECUTED", "", now)))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("the current association's receipt: %d %s", res.StatusCode, raw)
			}
			if c := a.commandByID(t, uid, cmd.ID); c.Status != "EXECUTED" || !c.Verified {
				t.Fatalf("the current association's command: %+v", c)
			}
		})
	}
}
