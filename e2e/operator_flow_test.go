package e2e

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// TestOperatorFlow plays the operator flow (docs/api.md) end to end:
// mountd, the simulated radio served over a socket as mountsim serves it,
// the simulated mount firmware, and the SDK on the phone's side.
func TestOperatorFlow(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			in := start(t, newConfig(t))
			operator := newFleet(in, "Operator")
			uid := uniqueUID("OP")

			// The fleet on the air: one mount whose clock the test can skew.
			var skew atomic.Int64
			mount := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:01", SerialNumber: "SN-OP-1",
				Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
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

			// 1-2. The operator associates the mount with the device key its
			// info gives: ASSOCIATE_OWNER goes over BLE, then confirm, then
			// the mount's receipt goes to the API.
			opPhone := mustSDK(t, base, operator.token, radio())
			info, err := opPhone.Connect(ctx, uid)
			if err != nil {
				t.Fatalf("operator connect: %v", err)
			}
			assoc := operator.associate(t, uid, map[string]any{"name": "Front rack", "devicePublicKey": info.DevicePublicKey})
			res, err := opPhone.Deliver(ctx, uid, toBLE(assoc))
			if err != nil || !res.Accepted || res.Receipt == nil {
				t.Fatalf("ASSOCIATE_OWNER over BLE: %+v %v", res, err)
			}
			operator.confirm(t, uid)
			if pending, err := opPhone.Upload(ctx, sdk.Upload{UID: uid, Receipt: res.Receipt}); pending != 0 || err != nil {
				t.Fatalf("upload of the association's receipt: %d pending, %v", pending, err)
			}
			if c := operator.commandByID(t, uid, res.Nonce); c.Status != "EXECUTED" || !c.Verified {
				t.Fatalf("the association's command after its receipt: %+v", c)
			}
			_ = opPhone.Disconnect(uid)
			if st := mount.Status(); st.OwnerKey == nil || st.AccountID != operator.creds.AccountID {
				t.Fatalf("the mount did not take the owner key: %+v", st)
			}

			// A console subscribed to the mount's states over GraphQL.
			console := in.wsReady(t, operator.token)
			console.Subscribe("s", stateSubscription, map[string]any{"uid": uid})
			prime(t, operator, uid, sub{c: console, id: "s", field: "mountStateChanged"})

			// 2-3. The operator's server asks for a rider token for this mount only.
			rider := in.token(operator.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
			phone := mustSDK(t, base, rider, radio())
			engine := phone.EngineEvents()

			// 4. Scan: a ScanResultEvent lists the mount.
			devices, err := phone.Scan(ctx, 500*time.Millisecond)
			if err != nil || len(devices) != 1 || devices[0].MountUID != uid {
				t.Fatalf("scan: %+v %v", devices, err)
			}
			sawResult := false
			for drained := false; !drained; {
				select {
				case ev := <-engine:
					if r, ok := ev.(sdk.ScanResultEvent); ok && len(r.Devices) == 1 && r.Devices[0].MountUID == uid {
						sawResult = true
					}
					if _, ok := ev.(sdk.ScanStopped); ok {
						drained = true
					}
				case <-time.After(10 * time.Second):
					drained = true
				}
			}
			if !sawResult {
				t.Fatal("no ScanResultEvent with the mount on the engine stream")
			}

			// 5. Connect; 6. release the helmet.
			if _, err := phone.Connect(ctx, uid); err != nil {
				t.Fatalf("connect: %v", err)
			}
			states, err := phone.DeviceStates(uid)
			if err != nil {
				t.Fatal(err)
			}
			outcome, err := phone.ReleaseHelmet(ctx, uid)
			if err != nil || !outcome.Result.Accepted {
				t.Fatalf("release helmet: %+v %v", outcome, err)
			}
			// 7. The device state stream shows the helmet gone and the lock open.
			if !waitDevice(states, func(s map[string]string) bool { return s["HELMET_MOUNTED"] == "0" && s["MOUNT_LOCKED"] == "0" }) {
				t.Fatal("the device state stream never showed the helmet released")
			}
			// The API shows the same, and so does the GraphQL console.
			m := operator.get(t, uid)
			if m.MountLocked == nil || *m.MountLocked || m.HelmetMounted == nil || *m.HelmetMounted {
				t.Fatalf("API mount after release: %+v", m)
			}
			seen := false
			for deadline := time.Now().Add(30 * time.Second); !seen && time.Now().Before(deadline); {
				msg, err := console.NextWithin(time.Until(deadline))
				if err != nil {
					break
				}
				ev := data[stateEvent](t, msg, "s", "mountStateChanged")
				seen = ev.Mount.MountLocked != nil && !*ev.Mount.MountLocked && ev.Mount.HelmetMounted != nil && !*ev.Mount.HelmetMounted
			}
			if !seen {
				t.Fatal("the GraphQL subscriber never saw the release")
			}

			// A replayed command is refused by the mount.
			cmd := operator.command(t, uid, "RELEASE_HELMET")
			mount.ReturnHelmet()
			if r, err := phone.Deliver(ctx, uid, cmd); err != nil || !r.Accepted {
				t.Fatalf("fresh command: %+v %v", r, err)
			}
			var refused *sdk.RefusedError
			if _, err := phone.Deliver(ctx, uid, cmd); !errors.As(err, &refused) || refused.Reason != simmount.ReasonReplayed {
				t.Fatalf("replayed command: %v", err)
			}
			// A stale command (the mount's clock 6 minutes behind: its receipt
			// stays within the server's 5-minute bound ahead) is refused.
			skew.Store(int64(-6 * time.Minute))
			if _, err := phone.Deliver(ctx, uid, operator.command(t, uid, "RELEASE_HELMET")); !errors.As(err, &refused) || refused.Reason != simmount.ReasonStale {
				t.Fatalf("stale command: %v", err)
			}
			skew.Store(0)

			// A token for another mount is refused by the SDK before any BLE write.
			_ = phone.Disconnect(uid) // a mount serves one phone at a time
			other := in.token(operator.creds, "openid", "sub", audItem, "role:restricted", "mount:OTHER")
			wrongPhone := mustSDK(t, base, other, radio())
			if _, err := wrongPhone.Connect(ctx, uid); err != nil {
				t.Fatal(err)
			}
			before := mount.Status()
			if _, err := wrongPhone.ReleaseHelmet(ctx, uid); !errors.Is(err, sdk.ErrMountNotAllowed) {
				t.Fatalf("token for another mount: %v", err)
			}
			if after := mount.Status(); after.Accepted != before.Accepted || after.Refused != before.Refused {
				t.Fatalf("something reached the mount: %+v → %+v", before, after)
			}
			_ = wrongPhone.Disconnect(uid)
			// So is a token the identity provider does not accept.
			broken := mustSDK(t, base, rider[:len(rider)-4]+"AAAA", radio())
			if _, err := broken.Connect(ctx, uid); err != nil {
				t.Fatal(err)
			}
			if _, err := broken.ReleaseHelmet(ctx, uid); !errors.Is(err, sdk.ErrTokenRejected) {
				t.Fatalf("tampered token: %v", err)
			}
			if after := mount.Status(); after.Accepted != before.Accepted || after.Refused != before.Refused {
				t.Fatalf("something reached the mount: %+v → %+v", before, after)
			}
		})
	}
}

// waitDevice waits for a states event satisfying ok.
func waitDevice(events <-chan sdk.DeviceEvent, ok func(map[string]string) bool) bool {
	timeout := time.After(30 * time.Second) // generous: it returns as soon as ok holds
	for {
		select {
		case ev, open := <-events:
			if !open {
				return false
			}
			s := map[string]string{}
			for _, e := range ev.States {
				s[e.Code] = e.Value
			}
			if len(ev.States) > 0 && ok(s) {
				return true
			}
		case <-timeout:
			return false
		}
	}
}

func toBLE(c commandView) protocol.BLECommand {
	return protocol.BLECommand{Code: c.Code, Data: c.Data, GeneratedAt: c.GeneratedAt, Payload: c.Payload, SignedToken: c.SignedToken}
}

// TestAssociateSendsDeviceInfo: associating through the SDK sends what the
// mount's info characteristic says (serial, MAC, model, revisions), so the
// server's record of the mount is not empty.
func TestAssociateSendsDeviceInfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	in := start(t, testConfig(t.TempDir(), ""))
	operator := newFleet(in, "Operator")
	uid := uniqueUID("INFO")
	mount := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:09", SerialNumber: "SN-INFO-9",
		ModelNumber: "HM-1", FirmwareRevision: "2.1.0", SoftwareRevision: "1.4.0"})
	air := sim.NewAir(sim.Config{AdvertisingInterval: 20 * time.Millisecond})
	if err := air.Register(mount); err != nil {
		t.Fatal(err)
	}
	ln, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sim.Serve(ctx, air, ln) }()
	phone := mustSDK(t, in.base+"/api/v1", operator.token, sim.Dial("sim://"+ln.Addr().(*net.TCPAddr).String()))

	a, err := phone.Associate(ctx, uid, "Front rack")
	if err != nil || !a.Delivered.Accepted {
		t.Fatalf("Associate: %+v %v", a, err)
	}
	m := operator.get(t, uid)
	if m.AssociationState != "ASSOCIATED" || m.Name != "Front rack" || m.SerialNumber != "SN-INFO-9" || m.MACAddress != "02:00:00:00:00:09" ||
		m.ModelNumber != "HM-1" || m.FirmwareRevision != "2.1.0" || m.SoftwareRevision != "1.4.0" {
		t.Fatalf("the server's mount %+v lacks what the mount reported", m)
	}
	if st := mount.Status(); st.AccountID != operator.creds.AccountID {
		t.Fatalf("the mount did not take the owner key: %+v", st)
	}
}
