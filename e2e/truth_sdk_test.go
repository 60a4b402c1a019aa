package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// cutUploads is a phone's network that fails the SDK's uploads (reports
// and receipts) while cut, as if it went after the command came.
type cutUploads struct {
	cut  *atomic.Bool
	next http.RoundTripper
}

func (c cutUploads) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() && r.Method == http.MethodPost &&
		(strings.HasSuffix(r.URL.Path, "/states") || strings.HasSuffix(r.URL.Path, "/commands/receipts")) {
		return nil, errors.New("network is unreachable")
	}
	return c.next.RoundTrip(r)
}

// TestSDKCarriesTheTruth: the SDK, the simulated firmware and the real
// server. Associating through the SDK pins the mount's device key and its
// receipt makes ASSOCIATE_OWNER EXECUTED; a rider's release ends with the
// command EXECUTED and the mount's states verified; a refusal the mount
// signed makes the command REFUSED; and what the phone could not upload
// (the network gone after the command came) waits in its queue across a
// restart of the app and then moves the command on just the same.
func TestSDKCarriesTheTruth(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			in := start(t, newConfig(t))
			operator := newFleet(in, "Truth")
			uid := uniqueUID("TR")
			var skew atomic.Int64
			mount := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:07", SerialNumber: "SN-TR-1",
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
			key := mount.BLEInfo().DevicePublicKey
			if !protocol.ValidPublicKey(key) {
				t.Fatalf("the simulated mount has no device key: %q", key)
			}

			// The operator associates through the SDK.
			opPhone := mustSDK(t, base, operator.token, radio())
			a, err := opPhone.Associate(ctx, uid, "Truth rack")
			if err != nil || !a.Delivered.Accepted || a.Delivered.Receipt == nil || a.Pending != 0 {
				t.Fatalf("Associate: %+v %v", a, err)
			}
			var m struct {
				DevicePublicKey *string `json:"devicePublicKey"`
			}
			if err := json.Unmarshal(a.Mount, &m); err != nil || m.DevicePublicKey == nil || *m.DevicePublicKey != key {
				t.Fatalf("the confirmed mount's devicePublicKey is not the mount's %s: %s", key, a.Mount)
			}
			if c := operator.commandByID(t, uid, a.Delivered.Nonce); c.Status != "EXECUTED" || !c.Verified {
				t.Fatalf("ASSOCIATE_OWNER after Associate: %+v", c)
			}
			_ = opPhone.Disconnect(uid)

			// A rider's phone, with an upload queue.
			rider := in.token(operator.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
			queueDir := t.TempDir()
			var cut atomic.Bool
			hc := &http.Client{Timeout: 10 * time.Second, Transport: cutUploads{cut: &cut, next: http.DefaultTransport}}
			openPhone := func() *sdk.Client {
				t.Helper()
				c, err := sdk.New(sdk.Config{BaseURL: base, Token: rider, Radio: radio(), HTTPClient: hc,
					ConfirmTimeout: 5 * time.Second, QueueDir: queueDir, RetryMin: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := c.Connect(ctx, uid); err != nil {
					t.Fatal(err)
				}
				return c
			}
			verified := func(out sdk.Outcome) {
				t.Helper()
				if c := operator.commandByID(t, uid, out.Result.Nonce); c.Status != "EXECUTED" || !c.Verified {
					t.Fatalf("RELEASE_HELMET after its receipt: %+v", c)
				}
				var page struct {
					States []struct {
						Code       string `json:"code"`
						Value      string `json:"value"`
						OccurredAt string `json:"occurredAt"`
						Verified   bool   `json:"verified"`
					} `json:"states"`
				}
				if err := json.Unmarshal(operator.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/states?pageSize=100", nil), &page); err != nil {
					t.Fatal(err)
				}
				for _, want := range out.Report.States {
					found := false
					for _, s := range page.States {
						// (the value as the API normalises it: "30.0" is 30)
						if s.Code == want.Code && s.OccurredAt == want.OccurredAt {
							found = s.Verified
						}
					}
					if !found {
						t.Fatalf("the mount's %s@%s is not stored verified: %+v", want.Code, want.OccurredAt, page.States)
					}
				}
				if lm := operator.get(t, uid); lm.MountLocked == nil || *lm.MountLocked || lm.HelmetMounted == nil || *lm.HelmetMounted {
					t.Fatalf("the mount after the release: %+v", lm)
				}
			}

			phone := openPhone()
			out, err := phone.ReleaseHelmet(ctx, uid)
			if err != nil || out.Pending != 0 || out.Result.Receipt == nil || out.Report == nil || out.Report.Signature == "" {
				t.Fatalf("ReleaseHelmet: %+v %v", out, err)
			}
			verified(out)

			// A configuration command: no states follow it, its receipt alone
			// goes up.
			conf, err := phone.ConfigureAlarm(ctx, uid, "ON", "HIGH", "LOW")
			if err != nil || conf.Pending != 0 || conf.Result.Receipt == nil || conf.Report != nil {
				t.Fatalf("ConfigureAlarm: %+v %v", conf, err)
			}
			if c := operator.commandByID(t, uid, conf.Result.Nonce); c.Status != "EXECUTED" || !c.Verified {
				t.Fatalf("CONFIGURE_ALARM after its receipt: %+v", c)
			}

			// A command the mount refuses after its signature verified (its
			// clock 6 minutes behind; one 6 minutes ahead would date its
			// receipt past the server's 5-minute bound): the signed refusal
			// moves it to REFUSED.
			skew.Store(int64(-6 * time.Minute))
			var refused *sdk.RefusedError
			out, err = phone.ReleaseHelmet(ctx, uid)
			if !errors.As(err, &refused) || refused.Reason != simmount.ReasonStale || out.Result.Receipt == nil || out.Pending != 0 {
				t.Fatalf("stale ReleaseHelmet: %+v %v", out, err)
			}
			if c := operator.commandByID(t, uid, out.Result.Nonce); c.Status != "REFUSED" || !c.Verified || c.Reason == nil || *c.Reason != simmount.ReasonStale {
				t.Fatalf("the refused command: %+v", c)
			}
			skew.Store(0)

			// The network goes after the command came: the receipt and the
			// report wait in the queue, the command stays ISSUED.
			mount.ReturnHelmet()
			cut.Store(true)
			out, err = phone.ReleaseHelmet(ctx, uid)
			if err != nil || out.Pending != 2 {
				t.Fatalf("ReleaseHelmet offline: pending %d, %v; want 2 pending, no error", out.Pending, err)
			}
			if c := operator.commandByID(t, uid, out.Result.Nonce); c.Status != "ISSUED" {
				t.Fatalf("the command before its receipt arrived: %+v", c)
			}
			if err := phone.Close(); err != nil {
				t.Fatal(err)
			}

			// The app starts again with the network back: its queue goes up.
			cut.Store(false)
			phone = openPhone()
			defer phone.Close()
			for phone.Queued().Items > 0 {
				if err := phone.Flush(ctx); err != nil && ctx.Err() != nil {
					t.Fatalf("Flush: %v", err)
				}
			}
			verified(out)
		})
	}
}

// TestSDKWithLegacyFirmware: a mount without a device key signs nothing;
// the SDK reports its states as before (stored unverified), uploads no
// receipt, and the association pins no key.
func TestSDKWithLegacyFirmware(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	in := start(t, testConfig(t.TempDir(), ""))
	operator := newFleet(in, "Legacy")
	uid := uniqueUID("LG")
	mount := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:08", Legacy: true})
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

	opPhone := mustSDK(t, base, operator.token, radio())
	a, err := opPhone.Associate(ctx, uid, "")
	if err != nil || !a.Delivered.Accepted || a.Delivered.Receipt != nil {
		t.Fatalf("Associate: %+v %v", a, err)
	}
	if strings.Contains(string(a.Mount), `"devicePublicKey":"`) {
		t.Fatalf("a legacy mount got a device key pinned: %s", a.Mount)
	}
	_ = opPhone.Disconnect(uid)

	rider := in.token(operator.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)
	c, err := sdk.New(sdk.Config{BaseURL: base, Token: rider, Radio: radio(), ConfirmTimeout: 5 * time.Second, QueueDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Connect(ctx, uid); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReleaseHelmet(ctx, uid)
	if err != nil || out.Pending != 0 || out.Result.Receipt != nil || out.Report == nil || out.Report.Signature != "" || out.Report.Counter != nil {
		t.Fatalf("ReleaseHelmet: %+v %v", out, err)
	}
	if cmd := operator.commandByID(t, uid, out.Result.Nonce); cmd.Status != "ISSUED" {
		t.Fatalf("a command without a receipt: %+v", cmd)
	}
	var page struct {
		States []struct {
			Code     string `json:"code"`
			Value    string `json:"value"`
			Verified bool   `json:"verified"`
		} `json:"states"`
	}
	if err := json.Unmarshal(operator.ok(t, http.MethodGet, "/api/v1/mounts/"+uid+"/states?code=MOUNT_LOCKED", nil), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.States) == 0 || page.States[0].Value != "0" || page.States[0].Verified {
		t.Fatalf("the legacy mount's report: %+v", page.States)
	}
}
