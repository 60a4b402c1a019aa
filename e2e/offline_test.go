package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// cutNetwork is a phone's network that, while cut, reaches nothing: the
// API, the identity provider, the token endpoint (an underground garage).
type cutNetwork struct{ cut *atomic.Bool }

func (c cutNetwork) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("network is unreachable")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// offlineCommand is a Command as GET /mounts/{uid}/commands/{id} answers
// it, with the grant of an offline use.
type offlineCommand struct {
	ID       string  `json:"id"`
	Code     string  `json:"code"`
	Status   string  `json:"status"`
	Reason   *string `json:"reason"`
	Verified bool    `json:"verified"`
	GrantID  string  `json:"grantId"`
}

// offlinePhone is a phone with a rider key, grants and an upload queue,
// whose network the test cuts.
type offlinePhone struct {
	*sdk.Client
	cut    *atomic.Bool
	keeper sdk.GrantKeeper
}

// TestOfflineAccess: the SDK, the simulated firmware on the simulated
// radio and the real server, on both databases (CONTRACT §21). A rider
// releases a helmet with no network through a stored grant, and the use
// becomes an EXECUTED Command of the grant once the phone is back; a
// revoked grant is refused once an online phone's contact carried the
// list; an expired grant is refused by the mount's trusted clock; a
// restarted mount keeps its clock and its list; another rider's phone
// carries a mount's log and the mount drops what the API acknowledged; a
// stranger's writes leave no trace.
func TestOfflineAccess(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			in := start(t, newConfig(t))
			operator := newFleet(in, "Offline")
			air := sim.NewAir(sim.Config{AdvertisingInterval: 20 * time.Millisecond})
			ln, err := sim.Listen("127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = sim.Serve(ctx, air, ln) }()
			radio := func() sdk.Radio { return sim.Dial("sim://" + ln.Addr().(*net.TCPAddr).String()) }
			base := in.base + "/api/v1"

			// Four mounts, each for its own story; C's clock is the test's,
			// D keeps its state in a directory, as through a power loss.
			var skewC atomic.Int64
			stateDir := t.TempDir()
			uids := map[string]string{"A": uniqueUID("OA"), "B": uniqueUID("OB"), "C": uniqueUID("OC"), "D": uniqueUID("OD")}
			macs := map[string]string{"A": "02:00:00:00:0A:01", "B": "02:00:00:00:0A:02", "C": "02:00:00:00:0A:03", "D": "02:00:00:00:0A:04"}
			mounts := map[string]*simmount.Mount{}
			for _, k := range []string{"A", "B", "C", "D"} {
				cfg := simmount.Config{UID: uids[k], MACAddress: macs[k]}
				switch k {
				case "C":
					cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skewC.Load())) }
				case "D":
					cfg.Store = simmount.DirStore{Dir: stateDir}
				}
				m, err := simmount.Open(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if err := air.Register(m); err != nil {
					t.Fatal(err)
				}
				mounts[k] = m
			}
			opPhone := mustSDK(t, base, operator.token, radio())
			for _, k := range []string{"A", "B", "C", "D"} {
				if a, err := opPhone.Associate(ctx, uids[k], "Offline "+k); err != nil || !a.Delivered.Accepted {
					t.Fatalf("Associate %s: %+v %v", k, a, err)
				}
				_ = opPhone.Disconnect(uids[k])
			}

			riderToken := func(keys ...string) string {
				scope := []string{"openid", "sub", audItem, "role:restricted"}
				for _, k := range keys {
					scope = append(scope, "mount:"+uids[k])
				}
				return in.token(operator.creds, scope...)
			}
			phone := func(token string) offlinePhone {
				t.Helper()
				var cut atomic.Bool
				keeper, err := sdk.NewFileKeeper(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				c, err := sdk.New(sdk.Config{BaseURL: base, Token: token, Radio: radio(),
					HTTPClient:     &http.Client{Timeout: 10 * time.Second, Transport: cutNetwork{cut: &cut}},
					ConfirmTimeout: 5 * time.Second, UploadWait: 2 * time.Second, RetryMin: time.Hour,
					QueueDir: t.TempDir(), Keeper: keeper})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				return offlinePhone{Client: c, cut: &cut, keeper: keeper}
			}
			anna := phone(riderToken("A", "B", "C", "D"))
			ben := phone(riderToken("A", "D"))
			grants := map[string]sdk.StoredGrant{}
			for _, k := range []string{"A", "B", "C", "D"} {
				g, err := anna.RequestGrant(ctx, uids[k], time.Now().Add(time.Hour))
				if err != nil {
					t.Fatalf("RequestGrant %s: %v", k, err)
				}
				grants[k] = g
			}
			command := func(k, id string) offlineCommand {
				t.Helper()
				res, raw := operator.call(http.MethodGet, "/api/v1/mounts/"+uids[k]+"/commands/"+id, nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("command %s: %d %s", id, res.StatusCode, raw)
				}
				return decode[offlineCommand](t, raw)
			}
			connect := func(p offlinePhone, k string, online bool) {
				t.Helper()
				p.cut.Store(!online)
				if _, err := p.Connect(ctx, uids[k]); err != nil {
					t.Fatalf("Connect %s: %v", k, err)
				}
			}
			refusedOffline := func(p offlinePhone, k, reason string) {
				t.Helper()
				out, err := p.ReleaseHelmet(ctx, uids[k])
				var refused *sdk.RefusedError
				if !errors.As(err, &refused) || refused.Reason != reason || !out.Offline {
					t.Fatalf("ReleaseHelmet on %s: %+v %v; want refused %q offline", k, out, err, reason)
				}
				if !mounts[k].Status().HelmetMounted {
					t.Fatalf("mount %s gave the helmet to a grant refused %q", k, reason)
				}
			}

			// (1) No network at mount A: the stored grant releases the helmet;
			// back online, the use is an EXECUTED Command of the grant.
			connect(anna, "A", true)
			anna.cut.Store(true)
			out, err := anna.ReleaseHelmet(ctx, uids["A"])
			if err != nil || !out.Offline || !out.Result.Accepted || mounts["A"].Status().HelmetMounted {
				t.Fatalf("offline ReleaseHelmet: %+v %v; helmet mounted %v", out, err, mounts["A"].Status().HelmetMounted)
			}
			first := out.Result.Nonce
			if log := mounts["A"].Offline().Log; len(log) != 1 || log[0].Nonce != first || log[0].GrantID != grants["A"].ID {
				t.Fatalf("mount A's log: %+v", log)
			}
			_ = anna.Disconnect(uids["A"])
			anna.cut.Store(false)
			if err := anna.Flush(ctx); err != nil || anna.Queued().Items != 0 {
				t.Fatalf("Flush: %v, %d queued", err, anna.Queued().Items)
			}
			if c := command("A", first); c.Status != "EXECUTED" || c.GrantID != grants["A"].ID || !c.Verified || c.Code != "RELEASE_HELMET" {
				t.Fatalf("the offline use on the server: %+v", c)
			}

			// (5) Anna comes back without network: the ack she was given is
			// written; she releases again and leaves; Ben's phone, online,
			// carries the log and the mount drops it.
			mounts["A"].ReturnHelmet()
			connect(anna, "A", false)
			if n := mounts["A"].BLEInfo().LogPending; n != 0 {
				t.Fatalf("mount A's logPending after Anna's held ack: %d", n)
			}
			out, err = anna.ReleaseHelmet(ctx, uids["A"])
			if err != nil || !out.Offline {
				t.Fatalf("second offline ReleaseHelmet: %+v %v", out, err)
			}
			second := out.Result.Nonce
			_ = anna.Disconnect(uids["A"])
			if n := mounts["A"].BLEInfo().LogPending; n != 1 {
				t.Fatalf("mount A's logPending after the second use: %d, want 1", n)
			}
			connect(ben, "A", true)
			if n, err := ben.UploadPending(ctx, uids["A"]); err != nil || n != 1 {
				t.Fatalf("Ben's UploadPending: %d %v; want 1 acknowledged", n, err)
			}
			if n := mounts["A"].BLEInfo().LogPending; n != 0 {
				t.Fatalf("mount A's logPending after Ben carried the log: %d", n)
			}
			if c := command("A", second); c.Status != "EXECUTED" || c.GrantID != grants["A"].ID {
				t.Fatalf("the second offline use on the server: %+v", c)
			}
			// Ben's upload told the server what the mount's info said.
			var told []struct {
				Offline *struct {
					RevocationVersion int64 `json:"revocationVersion"`
					TimeTrusted       bool  `json:"timeTrusted"`
				} `json:"offline"`
			}
			if res, raw := operator.call(http.MethodGet, "/api/v1/mounts/"+uids["A"], nil); res.StatusCode != http.StatusOK ||
				json.Unmarshal(raw, &told) != nil || len(told) != 1 || told[0].Offline == nil || !told[0].Offline.TimeTrusted ||
				told[0].Offline.RevocationVersion != mounts["A"].BLEInfo().RevocationVersion {
				t.Fatalf("mount A's offline after Ben's upload: %s", raw)
			}

			// (6) A stranger near mount A: a grant with a bad signature, a
			// proof by another key, a grant of another mount. Refused
			// unsigned, nothing in the log, no counter used.
			_ = ben.Disconnect(uids["A"])
			stranger(t, ctx, radio(), mounts["A"], grants)

			// (2) Anna's grant on B is revoked; the operator's phone, online,
			// connects once: the list is on the mount, and Anna, offline
			// with an older list, is refused.
			operator.ok(t, http.MethodPost, "/api/v1/grants/"+grants["B"].ID+"/revoke", nil)
			if _, err := opPhone.Connect(ctx, uids["B"]); err != nil {
				t.Fatal(err)
			}
			_ = opPhone.Disconnect(uids["B"])
			if o := mounts["B"].Offline(); !slices.Contains(o.Revoked, grants["B"].ID) {
				t.Fatalf("mount B's list after an online contact: %+v", o)
			}
			connect(anna, "B", false)
			refusedOffline(anna, "B", protocol.ReasonRevoked)
			// Back online, Anna's refresh drops the revoked grant and keeps
			// the others as the API signed them.
			anna.cut.Store(false)
			if err := anna.RefreshGrants(ctx); err != nil {
				t.Fatalf("RefreshGrants: %v", err)
			}
			held, _ := anna.keeper.Grants()
			heldIDs := []string{}
			for _, g := range held {
				heldIDs = append(heldIDs, g.ID)
			}
			if len(held) != 3 || slices.Contains(heldIDs, grants["B"].ID) || !slices.Contains(heldIDs, grants["A"].ID) {
				t.Fatalf("Anna's grants after RefreshGrants: %v; want those of A, C and D", heldIDs)
			}

			// (3) Mount C's trusted clock passes the grant's notAfter.
			skewC.Store(int64(2 * time.Hour))
			connect(anna, "C", false)
			if !mounts["C"].Offline().TimeTrusted {
				t.Fatal("mount C has no trusted time")
			}
			refusedOffline(anna, "C", protocol.ReasonExpired)

			// (4) Mount D: Ben's grant revoked and the list carried, then a
			// power loss and a start with a clock back at 1970: the list
			// and the time it had stay; Ben is refused, Anna released.
			bensD, err := ben.RequestGrant(ctx, uids["D"], time.Now().Add(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			operator.ok(t, http.MethodPost, "/api/v1/grants/"+bensD.ID+"/revoke", nil)
			if _, err := opPhone.Connect(ctx, uids["D"]); err != nil {
				t.Fatal(err)
			}
			_ = opPhone.Disconnect(uids["D"])
			before := mounts["D"].Offline()
			air.Unregister(macs["D"])
			saved, _, err := simmount.DirStore{Dir: stateDir}.Load(uids["D"])
			if err != nil || saved.Clock == 0 {
				t.Fatalf("mount D saved no clock: %+v %v", saved, err)
			}
			bootAt := time.Now()
			restarted, err := simmount.Open(simmount.Config{UID: uids["D"], MACAddress: macs["D"], Store: simmount.DirStore{Dir: stateDir},
				Now: func() time.Time { return time.Unix(0, 0).Add(time.Since(bootAt)) }})
			if err != nil {
				t.Fatal(err)
			}
			if err := air.Register(restarted); err != nil {
				t.Fatal(err)
			}
			mounts["D"] = restarted
			after := restarted.Offline()
			if after.RevocationVersion != before.RevocationVersion || !slices.Contains(after.Revoked, bensD.ID) ||
				after.Time.Before(time.UnixMilli(saved.Clock)) || after.TimeTrusted {
				t.Fatalf("mount D before the restart %+v, after %+v: want the list and the time kept, untrusted", before, after)
			}
			connect(ben, "D", false)
			refusedOffline(ben, "D", protocol.ReasonRevoked)
			_ = ben.Disconnect(uids["D"])
			connect(anna, "D", false)
			if out, err := anna.ReleaseHelmet(ctx, uids["D"]); err != nil || !out.Offline || restarted.Status().HelmetMounted {
				t.Fatalf("Anna's ReleaseHelmet on restarted D: %+v %v", out, err)
			}
		})
	}
}

// stranger writes uses a mount must refuse before its signature: a grant
// whose signature is not the owner's, a proof by a key that is not the
// grant's, a grant of another mount. Each is answered with an unsigned
// result and leaves no trace: no offline message, nothing in the log, the
// counter unused.
func stranger(t *testing.T, ctx context.Context, radio sdk.Radio, m *simmount.Mount, grants map[string]sdk.StoredGrant) {
	t.Helper()
	// Read before connecting: the mount signs the states it notifies on a
	// connection with its next counter, at a moment Connect does not wait for.
	countBefore, logBefore := m.Status().Counter, len(m.Offline().Log)
	link, err := radio.Connect(ctx, m.BLEInfo().MACAddress)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	key, _ := protocol.GenerateRiderKey()
	uid := m.UID()
	_, notOwner, _ := ed25519.GenerateKey(nil)
	own, others := grants["A"], grants["B"]
	cases := []struct {
		name      string
		grant     sdk.StoredGrant
		signature string
		reason    string
	}{
		{"a grant signed by another key", own, protocol.Sign(notOwner, own.Text), protocol.ReasonBadGrant},
		{"a proof by another key", own, own.Signature, protocol.ReasonBadProof},
		{"a grant of another mount", others, others.Signature, protocol.ReasonBadGrant},
	}
	var r protocol.Reassembler
	for _, tc := range cases {
		raw, err := link.ReadInfo(ctx)
		var info protocol.BLEInfo
		if err == nil {
			err = json.Unmarshal(raw, &info)
		}
		if err != nil {
			t.Fatal(err)
		}
		proof, _ := protocol.SignRider(key, protocol.BuildUseText(uid, tc.grant.ID, "RELEASE_HELMET", info.Challenge))
		use, _ := json.Marshal(protocol.BLEUse{Type: protocol.BLEWriteUse, Grant: tc.grant.Text, GrantSignature: tc.signature,
			Code: "RELEASE_HELMET", Nonce: info.Challenge, Proof: proof})
		for _, f := range protocol.SplitFrames(use, link.MTU()) {
			if err := link.WriteFrame(ctx, f); err != nil {
				t.Fatal(err)
			}
		}
		var answer *protocol.BLEMessage
		for answer == nil {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: no answer", tc.name)
			case frame, ok := <-link.Frames():
				if !ok {
					t.Fatalf("%s: the link closed", tc.name)
				}
				msg, done, err := r.Add(frame)
				if err != nil || !done {
					continue
				}
				var m protocol.BLEMessage
				if json.Unmarshal(msg, &m) != nil {
					continue
				}
				if m.Type == protocol.BLEMessageOffline {
					t.Fatalf("%s: the mount notified an offline receipt %+v", tc.name, m)
				}
				if m.Type == protocol.BLEMessageResult && m.Nonce == info.Challenge {
					answer = &m
				}
			}
		}
		if answer.Accepted || answer.Reason != tc.reason || answer.Signature != "" || answer.Counter != nil {
			t.Fatalf("%s: answered %+v, want an unsigned %q", tc.name, answer, tc.reason)
		}
	}
	// One counter for the states notified on connecting, none for the uses.
	if st := m.Status(); st.Counter != countBefore+1 || len(m.Offline().Log) != logBefore || m.BLEInfo().LogPending != logBefore {
		t.Fatalf("after the stranger: counter %d (was %d, +1 for the connection's states), log %d (was %d)", st.Counter, countBefore, len(m.Offline().Log), logBefore)
	}
}
