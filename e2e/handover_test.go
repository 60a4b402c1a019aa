package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// TestHandoverOverTheAir: a mount changes hands only through the server's
// hand-over (docs/api.md, "Commands"; docs/ble.md, "Hand-over"). Account Y associates a simulated
// mount and confirms, then abandons it; account Z's ASSOCIATE_OWNER reaches
// the mount but Z never confirms (the window lapses); account X then
// associates through the SDK and the mount accepts, its hand-over signed by
// Y's and Z's keys; X associates again through mountctl --deliver (a
// hand-over by X's key) and the mount takes that key too. A stranger's ASSOCIATE_OWNER (its own key, no or a
// self-signed hand-over) over the radio is refused and the mount keeps X.
func TestHandoverOverTheAir(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cfg := newConfig(t)
			const window = 3 * time.Second
			cfg.AssociationWindow = window
			in := start(t, cfg)
			y, z, x, stranger := newFleet(in, "Y"), newFleet(in, "Z"), newFleet(in, "X"), newFleet(in, "Stranger")
			uid := uniqueUID("HO")
			mount := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:31", SerialNumber: "SN-HO-1"})
			air := sim.NewAir(sim.Config{AdvertisingInterval: 20 * time.Millisecond})
			if err := air.Register(mount); err != nil {
				t.Fatal(err)
			}
			ln, err := sim.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = sim.Serve(ctx, air, ln) }()
			radio := func() sdk.Radio { return sim.Dial("sim://" + ln.Addr().(*net.TCPAddr).String()) }
			base := in.base + "/api/v1"
			owner := func(step, account string) simmount.Status {
				t.Helper()
				s := mount.Status()
				if s.AccountID != account || s.OwnerKey == nil {
					t.Fatalf("%s: the mount's owner is %q, want %q", step, s.AccountID, account)
				}
				return s
			}

			// Y associates and confirms (a new mount: no hand-over), then abandons.
			yPhone := mustSDK(t, base, y.token, radio())
			if a, err := yPhone.Associate(ctx, uid, "Y's rack"); err != nil || !a.Delivered.Accepted {
				t.Fatalf("Y's association: %+v %v", a, err)
			}
			_ = yPhone.Disconnect(uid)
			owner("Y associated", y.creds.AccountID)
			if res, raw := y.call(http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil); res.StatusCode != http.StatusNoContent {
				t.Fatalf("abandon: %d %s", res.StatusCode, raw)
			}

			// Z's ASSOCIATE_OWNER reaches the mount (signed by Y's key), Z never
			// confirms and the window lapses.
			zCmd := z.associate(t, uid, nil)
			if h, _ := zCmd.Data["handover"].(string); strings.Count(h, "+") != 0 || len(h) != 128 {
				t.Fatalf("Z's hand-over %q, want Y's signature", h)
			}
			zPhone := mustSDK(t, base, z.token, radio())
			if _, err := zPhone.Connect(ctx, uid); err != nil {
				t.Fatal(err)
			}
			if res, err := zPhone.Deliver(ctx, uid, bleCommand(zCmd)); err != nil || !res.Accepted {
				t.Fatalf("Z's ASSOCIATE_OWNER: %+v %v", res, err)
			}
			_ = zPhone.Disconnect(uid)
			owner("Z's command delivered", z.creds.AccountID)
			time.Sleep(window + 500*time.Millisecond)

			// X associates through the SDK: its hand-over carries Y's and Z's
			// signatures, and the mount, holding Z's key, takes it.
			xPhone := mustSDK(t, base, x.token, radio())
			a, err := xPhone.Associate(ctx, uid, "X's rack")
			if err != nil || !a.Delivered.Accepted {
				t.Fatalf("X's association: %+v %v", a, err)
			}
			_ = xPhone.Disconnect(uid)
			sdkKey := owner("X associated", x.creds.AccountID).OwnerKey
			page := decode[struct {
				Commands []commandView `json:"commands"`
			}](t, x.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/commands?pageSize=1", nil))
			if len(page.Commands) != 1 || strings.Count(page.Commands[0].Data["handover"].(string), "+") != 1 {
				t.Fatalf("X's ASSOCIATE_OWNER: %+v, want a hand-over of two signatures", page.Commands)
			}

			// X associates again while ASSOCIATED, through mountctl: its
			// ASSOCIATE_OWNER carries the hand-over by X's key to the mount.
			ctl := exec.Command(mountctlBinary(t), "mounts", "associate", uid, "--deliver")
			ctl.Env = append(os.Environ(), "MOUNTCTL_API="+in.base, "MOUNTCTL_BLE=sim://"+ln.Addr().String(),
				"MOUNTCTL_CLIENT_ID="+x.creds.ClientID, "MOUNTCTL_CLIENT_SECRET="+x.creds.ClientSecret)
			if out, err := ctl.CombinedOutput(); err != nil {
				t.Fatalf("mountctl mounts associate --deliver: %v\n%s", err, out)
			}
			held := owner("X associated again through mountctl", x.creds.AccountID)
			if held.OwnerKey.Equal(sdkKey) {
				t.Fatal("mountctl's ASSOCIATE_OWNER did not replace X's key")
			}

			// A stranger in radio range tries to install its own key.
			pub, priv, _ := ed25519.GenerateKey(rand.Reader)
			forged := func(handover any) protocol.BLECommand {
				now := time.Now()
				params := map[string]string{"accountId": stranger.creds.AccountID, "publicKey": hex.EncodeToString(pub)}
				c := protocol.BLECommand{Code: string(protocol.CmdAssociateOwner), GeneratedAt: protocol.FormatTime(now),
					Payload: protocol.BuildPayload(now, string(protocol.CmdAssociateOwner), uid, params, protocol.NewNonce()),
					Data:    map[string]any{"accountId": params["accountId"], "publicKey": params["publicKey"], "expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))}}
				c.Data["handover"] = handover
				if handover == "self" {
					c.Data["handover"] = protocol.Sign(priv, c.Payload)
				}
				return c
			}
			sPhone := mustSDK(t, base, stranger.token, radio())
			if _, err := sPhone.Connect(ctx, uid); err != nil {
				t.Fatal(err)
			}
			for _, h := range []any{nil, "self", page.Commands[0].Data["handover"]} {
				_, err := sPhone.Deliver(ctx, uid, forged(h))
				var refused *sdk.RefusedError
				if !errors.As(err, &refused) || refused.Reason != simmount.ReasonBadHandover {
					t.Fatalf("a stranger's ASSOCIATE_OWNER (hand-over %v): %v, want refused %q", h, err, simmount.ReasonBadHandover)
				}
			}
			_ = sPhone.Disconnect(uid)
			if s := owner("after the stranger", x.creds.AccountID); !s.OwnerKey.Equal(held.OwnerKey) {
				t.Fatal("the stranger replaced the owner key")
			}

			// X's rider still releases the helmet: the key is X's.
			rider := in.token(x.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
			rPhone := mustSDK(t, base, rider, radio())
			if _, err := rPhone.Connect(ctx, uid); err != nil {
				t.Fatal(err)
			}
			if out, err := rPhone.ReleaseHelmet(ctx, uid); err != nil || !out.Result.Accepted {
				t.Fatalf("X's rider's release: %+v %v", out, err)
			}
		})
	}
}

// bleCommand is a command of the API as the phone writes it.
func bleCommand(c commandView) protocol.BLECommand {
	return protocol.BLECommand{Code: c.Code, Data: c.Data, GeneratedAt: c.GeneratedAt, Payload: c.Payload, SignedToken: c.SignedToken}
}
