package simmount_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// clock is a settable time for a mount.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var epoch = time.Date(2026, 11, 22, 1, 40, 13, 0, time.UTC)

func newKey(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// spec is a command as the API would issue it; zero fields take the
// mount's uid, the code, a fresh nonce, the clock's now.
type spec struct {
	code    protocol.CommandCode
	payCode protocol.CommandCode // the code inside the payload, if different
	uid     string
	params  map[string]string
	at      time.Time
	nonce   string
	key     ed25519.PrivateKey // nil: unsigned
	payload string             // overrides the built payload (signed as is)
}

func (s spec) build() []byte {
	payCode := s.payCode
	if payCode == "" {
		payCode = s.code
	}
	payload := protocol.BuildPayload(s.at, string(payCode), s.uid, s.params, s.nonce)
	if s.payload != "" {
		payload = s.payload
	}
	cmd := protocol.BLECommand{Code: string(s.code), Data: map[string]any{}, GeneratedAt: protocol.FormatTime(s.at), Payload: payload}
	for k, v := range s.params {
		cmd.Data[k] = v
	}
	if s.key != nil {
		sig := hex.EncodeToString(ed25519.Sign(s.key, []byte(payload)))
		cmd.SignedToken = &sig
	}
	raw, _ := json.Marshal(cmd)
	return raw
}

// associate is an ASSOCIATE_OWNER bringing pub, its data.handover signed
// by the keys by (none: null), joined by '+'.
func associate(uid string, pub ed25519.PublicKey, account string, at time.Time, by ...ed25519.PrivateKey) []byte {
	key := hex.EncodeToString(pub)
	params := map[string]string{"accountId": account, "publicKey": key}
	cmd := protocol.BLECommand{
		Code: string(protocol.CmdAssociateOwner), GeneratedAt: protocol.FormatTime(at),
		Data:    map[string]any{"accountId": account, "publicKey": key, "expiresAt": protocol.FormatTime(at.Add(5 * time.Minute)), "handover": nil},
		Payload: protocol.BuildPayload(at, string(protocol.CmdAssociateOwner), uid, params, protocol.NewNonce()),
	}
	if len(by) > 0 {
		sigs := make([]string, len(by))
		for i, k := range by {
			sigs[i] = protocol.Sign(k, cmd.Payload)
		}
		cmd.Data["handover"] = protocol.JoinHandover(sigs)
	}
	raw, _ := json.Marshal(cmd)
	return raw
}

type fixture struct {
	m     *simmount.Mount
	clock *clock
	pub   ed25519.PublicKey
	priv  ed25519.PrivateKey
}

func newFixture(t *testing.T, associated bool) *fixture {
	f := &fixture{clock: &clock{t: epoch}}
	f.pub, f.priv = newKey(t)
	f.m = simmount.New(simmount.Config{UID: "M1", MACAddress: "02:00:00:00:00:01", Now: f.clock.Now})
	if associated {
		if res := f.m.Handle(associate("M1", f.pub, "acc-1", f.clock.Now())); !res.Accepted {
			t.Fatalf("ASSOCIATE_OWNER refused: %+v", res)
		}
	}
	return f
}

// signed is a valid command for the fixture's mount now.
func (f *fixture) signed(code protocol.CommandCode, params map[string]string) spec {
	return spec{code: code, uid: "M1", params: params, at: f.clock.Now(), nonce: protocol.NewNonce(), key: f.priv}
}

func TestCommands(t *testing.T) {
	_, otherKey := newKey(t)
	tests := []struct {
		name       string
		associated bool
		// steps run in order; all but the last must be accepted.
		steps  func(f *fixture) [][]byte
		reason string // of the last step; "" means accepted
		check  func(t *testing.T, s simmount.Status)
	}{
		{"valid release", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdReleaseHelmet, nil).build()}
		}, "", func(t *testing.T, s simmount.Status) {
			if s.Locked || s.HelmetMounted {
				t.Fatalf("after release: %+v", s)
			}
		}},
		{"no owner key", false, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdReleaseHelmet, nil).build()}
		}, simmount.ReasonNoOwner, func(t *testing.T, s simmount.Status) {
			if !s.Locked || !s.HelmetMounted {
				t.Fatal("a refused command changed the mount")
			}
		}},
		{"signed with another key", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.key = otherKey
			return [][]byte{s.build()}
		}, simmount.ReasonBadSignature, nil},
		{"unsigned", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.key = nil
			return [][]byte{s.build()}
		}, simmount.ReasonBadSignature, nil},
		{"signature over another payload", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdConfigureAlarm, map[string]string{"alarmMode": "OFF", "alarmSensitivity": "LOW", "alarmVolume": "LOW"})
			raw := string(s.build())
			return [][]byte{[]byte(strings.Replace(raw, "alarmMode=OFF", "alarmMode=ON", 1))}
		}, simmount.ReasonBadSignature, nil},
		{"another mount's uid", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.uid = "M2"
			return [][]byte{s.build()}
		}, simmount.ReasonWrongMount, nil},
		{"code differs from the payload's", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.payCode = protocol.CmdSetRFIDMode
			return [][]byte{s.build()}
		}, simmount.ReasonCodeMismatch, nil},
		{"6 minutes old", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.at = s.at.Add(-6 * time.Minute)
			return [][]byte{s.build()}
		}, simmount.ReasonStale, nil},
		{"6 minutes ahead", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.at = s.at.Add(6 * time.Minute)
			return [][]byte{s.build()}
		}, simmount.ReasonStale, nil},
		{"4 minutes old and 4 ahead pass", true, func(f *fixture) [][]byte {
			a, b := f.signed(protocol.CmdReleaseHelmet, nil), f.signed(protocol.CmdReleaseHelmet, nil)
			a.at, b.at = a.at.Add(-4*time.Minute), b.at.Add(4*time.Minute)
			return [][]byte{a.build(), b.build()}
		}, "", nil},
		{"replayed", true, func(f *fixture) [][]byte {
			raw := f.signed(protocol.CmdReleaseHelmet, nil).build()
			return [][]byte{raw, raw}
		}, simmount.ReasonReplayed, nil},
		{"re-association replaces the key", true, func(f *fixture) [][]byte {
			old := f.priv
			f.pub, f.priv = newKey(t)
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.key = old
			return [][]byte{associate("M1", f.pub, "acc-1", f.clock.Now(), old), f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "LEARN"}).build(), s.build()}
		}, simmount.ReasonBadSignature, func(t *testing.T, s simmount.Status) {
			if s.Settings.RFIDMode != "LEARN" {
				t.Fatalf("the new key's command did not apply: %+v", s.Settings)
			}
		}},
		{"association for another mount", false, func(f *fixture) [][]byte {
			return [][]byte{associate("M2", f.pub, "acc-1", f.clock.Now())}
		}, simmount.ReasonWrongMount, func(t *testing.T, s simmount.Status) {
			if s.OwnerKey != nil {
				t.Fatal("a refused association set a key")
			}
		}},
		{"association whose data and payload disagree", false, func(f *fixture) [][]byte {
			raw := associate("M1", f.pub, "acc-1", f.clock.Now())
			other, _ := newKey(t)
			return [][]byte{[]byte(strings.Replace(string(raw), `"publicKey":"`+hex.EncodeToString(f.pub), `"publicKey":"`+hex.EncodeToString(other), 1))}
		}, simmount.ReasonMalformed, nil},
		{"not JSON", true, func(f *fixture) [][]byte { return [][]byte{[]byte("{")} }, simmount.ReasonMalformed, nil},
		{"payload of four fields", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.payload = "1;RELEASE_HELMET;M1;"
			return [][]byte{s.build()}
		}, simmount.ReasonMalformed, nil},
		{"nonce not hex", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.nonce = strings.Repeat("Z", 32)
			return [][]byte{s.build()}
		}, simmount.ReasonMalformed, nil},
		{"unknown code", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed("SELF_DESTRUCT", nil).build()}
		}, simmount.ReasonUnknown, nil},
		{"alarm settings", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdConfigureAlarm, map[string]string{"alarmMode": "SILENT", "alarmSensitivity": "HIGH", "alarmVolume": "LOW"}).build()}
		}, "", func(t *testing.T, s simmount.Status) {
			if s.Settings.AlarmMode != "SILENT" || s.Settings.AlarmSensitivity != "HIGH" || s.Settings.AlarmVolume != "LOW" {
				t.Fatalf("settings %+v", s.Settings)
			}
		}},
		{"alarm value outside the list", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdConfigureAlarm, map[string]string{"alarmMode": "LOUD", "alarmSensitivity": "HIGH", "alarmVolume": "LOW"}).build()}
		}, simmount.ReasonBadParameters, nil},
		{"rfid mode missing", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdSetRFIDMode, nil).build()}
		}, simmount.ReasonBadParameters, nil},
		{"tags: add, add, remove, sync", true, func(f *fixture) [][]byte {
			return [][]byte{
				f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "04A2B3C4"}).build(),
				f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "04A2B3C4D5E6F7"}).build(),
				f.signed(protocol.CmdRemoveNfcTag, map[string]string{"tagUid": "04A2B3C4"}).build(),
				f.signed(protocol.CmdSyncNfcTags, map[string]string{"tagUids": "04A2B3C4D5E6F7+0102030405060708090A"}).build(),
				f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "AABBCCDD"}).build(),
			}
		}, "", func(t *testing.T, s simmount.Status) {
			if strings.Join(s.Settings.Tags, ",") != "0102030405060708090A,04A2B3C4D5E6F7,AABBCCDD" {
				t.Fatalf("tags %v", s.Settings.Tags)
			}
		}},
		{"sync to no tags", true, func(f *fixture) [][]byte {
			return [][]byte{
				f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "04A2B3C4"}).build(),
				f.signed(protocol.CmdSyncNfcTags, map[string]string{"tagUids": ""}).build(),
			}
		}, "", func(t *testing.T, s simmount.Status) {
			if len(s.Settings.Tags) != 0 {
				t.Fatalf("tags %v", s.Settings.Tags)
			}
		}},
		{"bad tag uid", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "04A2B3"}).build()}
		}, simmount.ReasonBadParameters, nil},
		{"another account's association drops the tags", true, func(f *fixture) [][]byte {
			return [][]byte{
				f.signed(protocol.CmdAddNfcTag, map[string]string{"tagUid": "04A2B3C4"}).build(),
				associate("M1", f.pub, "acc-2", f.clock.Now(), f.priv),
			}
		}, "", func(t *testing.T, s simmount.Status) {
			if len(s.Settings.Tags) != 0 || s.AccountID != "acc-2" {
				t.Fatalf("%+v", s)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.associated)
			steps := tt.steps(f)
			for i, raw := range steps {
				res := f.m.Handle(raw)
				var cmd protocol.BLECommand
				if json.Unmarshal(raw, &cmd) == nil && res.Code != cmd.Code {
					t.Fatalf("step %d: result code %q, want %q", i, res.Code, cmd.Code)
				}
				if res.Type != "result" {
					t.Fatalf("step %d: %+v", i, res)
				}
				last := i == len(steps)-1
				want := ""
				if last {
					want = tt.reason
				}
				if res.Accepted != (want == "") || res.Reason != want {
					t.Fatalf("step %d: accepted=%v reason=%q, want reason %q", i, res.Accepted, res.Reason, want)
				}
				if p := cmd.Payload; want != simmount.ReasonMalformed && res.Nonce != p[strings.LastIndex(p, ";")+1:] {
					t.Fatalf("step %d: result nonce %q for payload %q", i, res.Nonce, p)
				}
			}
			if tt.check != nil {
				tt.check(t, f.m.Status())
			}
		})
	}
}

func TestNonceMemoryIsBounded(t *testing.T) {
	f := newFixture(t, true)
	first := f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "NORMAL"}).build()
	if res := f.m.Handle(first); !res.Accepted {
		t.Fatal(res.Reason)
	}
	for i := range 1100 { // past the memory's bound of 1024
		f.clock.Add(50 * time.Millisecond) // all within a minute
		if res := f.m.Handle(f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "NORMAL"}).build()); !res.Accepted {
			t.Fatalf("command %d: %s", i, res.Reason)
		}
	}
	// The first nonce is forgotten by now, still within five minutes:
	// refused all the same.
	if res := f.m.Handle(first); res.Accepted || res.Reason != simmount.ReasonReplayed {
		t.Fatalf("replay after eviction: %+v", res)
	}
}

func TestStates(t *testing.T) {
	f := newFixture(t, true)
	changes := 0
	c := &clock{t: epoch}
	m := simmount.New(simmount.Config{UID: "M1", Now: c.Now, Battery: 80, BatteryDrain: 2, Temperature: 40,
		OnChange: func(*simmount.Mount) { changes++ }})
	m.Handle(associate("M1", f.pub, "acc-1", c.Now()))
	check := func(want map[string]string) []protocol.BLEStateEntry {
		t.Helper()
		states := m.States()
		if len(states) != 4 {
			t.Fatalf("%d states", len(states))
		}
		for _, s := range states {
			if err := protocol.ValidateState(protocol.StateCode(s.Code), s.Value); err != nil {
				t.Fatalf("%s=%s: %v", s.Code, s.Value, err)
			}
			at, err := time.Parse(protocol.TimeLayout, s.OccurredAt)
			if err != nil || !strings.HasSuffix(s.OccurredAt, "Z") || len(s.OccurredAt) != len("2026-11-22T01:40:13.000Z") || at.After(c.Now()) {
				t.Fatalf("occurredAt %q", s.OccurredAt)
			}
			if w, ok := want[s.Code]; ok && s.Value != w {
				t.Fatalf("%s=%s, want %s", s.Code, s.Value, w)
			}
		}
		return states
	}
	check(map[string]string{"BATTERY_LEVEL": "80", "CPU_TEMPERATURE": "40.0", "MOUNT_LOCKED": "1", "HELMET_MOUNTED": "1"})
	c.Add(5 * time.Hour)
	states := check(map[string]string{"BATTERY_LEVEL": "70", "MOUNT_LOCKED": "1"})
	if states[2].OccurredAt != protocol.FormatTime(epoch) {
		t.Fatalf("an unchanged lock must keep its time: %s", states[2].OccurredAt)
	}
	if states[0].OccurredAt != protocol.FormatTime(c.Now()) {
		t.Fatal("battery is measured now")
	}
	sig := spec{code: protocol.CmdReleaseHelmet, uid: "M1", at: c.Now(), nonce: protocol.NewNonce(), key: f.priv}
	if res := m.Handle(sig.build()); !res.Accepted {
		t.Fatal(res.Reason)
	}
	check(map[string]string{"MOUNT_LOCKED": "0", "HELMET_MOUNTED": "0"})
	c.Add(time.Minute)
	m.ReturnHelmet()
	m.ReturnHelmet() // nothing to change the second time
	states = check(map[string]string{"MOUNT_LOCKED": "1", "HELMET_MOUNTED": "1"})
	if states[3].OccurredAt != protocol.FormatTime(c.Now()) || changes != 2 {
		t.Fatalf("return: %v, %d changes", states, changes)
	}
	c.Add(100 * time.Hour)
	check(map[string]string{"BATTERY_LEVEL": "0"})
	// The temperature drifts, within bounds.
	moved := false
	for range 50 {
		c.Add(10 * time.Minute)
		if m.States()[1].Value != "40.0" {
			moved = true
		}
	}
	if !moved {
		t.Fatal("temperature never drifted")
	}
}

// TestOverTheAir runs the firmware on a simulated radio, in process and
// over a socket: association, a release with its result and states, and
// the helmet coming back.
func TestOverTheAir(t *testing.T) {
	air := sim.NewAir(sim.Config{AdvertisingInterval: 20 * time.Millisecond})
	changed := make(chan struct{}, 8)
	m := simmount.New(simmount.Config{UID: "SIM-0001", MACAddress: "02:53:49:4D:00:01", SerialNumber: "SN1",
		OnChange: func(*simmount.Mount) { changed <- struct{}{} }})
	if err := air.Register(m); err != nil {
		t.Fatal(err)
	}
	ln, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go sim.Serve(ctx, air, ln)
	pub, priv := newKey(t)

	for name, radio := range map[string]sdk.Radio{"in-process": air.Central(), "socket": sim.Dial(ln.Addr().String())} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var dev protocol.BLEDevice
			scanCtx, stop := context.WithCancel(ctx)
			radio.Scan(scanCtx, func(d protocol.BLEDevice) { dev = d; stop() })
			if dev.MountUID != "SIM-0001" || dev.Name != "MNT-SIM-0001" {
				t.Fatalf("scan: %+v", dev)
			}
			link, err := radio.Connect(ctx, dev.Address)
			if err != nil {
				t.Fatal(err)
			}
			defer link.Close()
			raw, err := link.ReadInfo(ctx)
			var info protocol.BLEInfo
			if err != nil || json.Unmarshal(raw, &info) != nil || info.UID != "SIM-0001" || info.SerialNumber != "SN1" || info.MACAddress != dev.Address {
				t.Fatalf("info %s %v", raw, err)
			}
			msgs := messages(link)
			next := func() protocol.BLEMessage {
				select {
				case msg := <-msgs:
					return msg
				case <-ctx.Done():
					t.Fatal("no message")
				}
				return protocol.BLEMessage{}
			}
			if first := next(); first.Type != "states" || len(first.States) != 4 || !verifyReport(t, info.DevicePublicKey, "SIM-0001", first) {
				t.Fatalf("on connect: %+v", first)
			}
			send := func(raw []byte) {
				for _, f := range protocol.SplitFrames(raw, link.MTU()) {
					if err := link.WriteFrame(ctx, f); err != nil {
						t.Fatal(err)
					}
				}
			}
			send(associate("SIM-0001", pub, "acc-1", time.Now(), priv)) // the second run's hand-over
			if res := next(); res.Type != "result" || !res.Accepted || res.Code != "ASSOCIATE_OWNER" {
				t.Fatalf("association: %+v", res)
			}
			next() // states after association
			send(spec{code: protocol.CmdReleaseHelmet, uid: "SIM-0001", at: time.Now(), nonce: protocol.NewNonce(), key: priv}.build())
			if res := next(); !res.Accepted || res.Code != "RELEASE_HELMET" || !verifyReceipt(t, info.DevicePublicKey, "SIM-0001", res) {
				t.Fatalf("release: %+v", res)
			}
			st := next()
			if st.Type != "states" || st.States[2].Value != "0" || st.States[3].Value != "0" {
				t.Fatalf("after release: %+v", st)
			}
			<-changed
			m.ReturnHelmet()
			<-changed
			if st := next(); st.Type != "states" || st.States[2].Value != "1" || st.States[3].Value != "1" {
				t.Fatalf("after return: %+v", st)
			}
			// A broken frame sequence is answered, and the link goes on.
			if err := link.WriteFrame(ctx, []byte{0x05, 'x'}); err != nil {
				t.Fatal(err)
			}
			if res := next(); res.Accepted || res.Reason != simmount.ReasonBadFrame {
				t.Fatalf("bad frame: %+v", res)
			}
		})
	}
}

// messages reassembles a link's notifications.
func messages(link sdk.BLELink) <-chan protocol.BLEMessage {
	out := make(chan protocol.BLEMessage, 16)
	go func() {
		var r protocol.Reassembler
		for f := range link.Frames() {
			raw, done, err := r.Add(f)
			if err != nil || !done {
				continue
			}
			var msg protocol.BLEMessage
			if json.Unmarshal(raw, &msg) == nil {
				out <- msg
			}
		}
	}()
	return out
}

// TestHandover: a mount that holds an owner key takes a new one only with
// a data.handover its key verifies (docs/ble.md, "Hand-over"); a refusal is
// unsigned and leaves the owner as it was. A physical reset makes it take
// any ASSOCIATE_OWNER again.
func TestHandover(t *testing.T) {
	newPub, newPriv := newKey(t)
	_, stranger := newKey(t)
	_, lapsed := newKey(t)
	tests := []struct {
		name   string
		raw    func(f *fixture) []byte
		reason string
	}{
		{"unsigned", func(f *fixture) []byte { return associate("M1", newPub, "acc-2", f.clock.Now()) }, simmount.ReasonBadHandover},
		{"signed by a stranger's key", func(f *fixture) []byte {
			return associate("M1", newPub, "acc-2", f.clock.Now(), stranger)
		}, simmount.ReasonBadHandover},
		{"signed by the new key itself", func(f *fixture) []byte {
			return associate("M1", newPub, "acc-2", f.clock.Now(), newPriv)
		}, simmount.ReasonBadHandover},
		{"the owner's signature of another payload", func(f *fixture) []byte {
			raw := associate("M1", newPub, "acc-2", f.clock.Now(), f.priv)
			other := associate("M1", newPub, "acc-2", f.clock.Now())
			var a, b protocol.BLECommand
			_ = json.Unmarshal(raw, &a)
			_ = json.Unmarshal(other, &b)
			b.Data["handover"] = a.Data["handover"]
			out, _ := json.Marshal(b)
			return out
		}, simmount.ReasonBadHandover},
		{"handover not a string", func(f *fixture) []byte {
			raw := associate("M1", newPub, "acc-2", f.clock.Now())
			return []byte(strings.Replace(string(raw), `"handover":null`, `"handover":["`+protocol.Sign(f.priv, "x")+`"]`, 1))
		}, simmount.ReasonBadHandover},
		{"signed by the owner's key", func(f *fixture) []byte {
			return associate("M1", newPub, "acc-2", f.clock.Now(), f.priv)
		}, ""},
		{"owner's signature first of two", func(f *fixture) []byte {
			return associate("M1", newPub, "acc-2", f.clock.Now(), f.priv, lapsed)
		}, ""},
		{"owner's signature after a lapsed key's", func(f *fixture) []byte {
			return associate("M1", newPub, "acc-2", f.clock.Now(), lapsed, stranger, f.priv)
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, true)
			res := f.m.Handle(tt.raw(f))
			if res.Accepted != (tt.reason == "") || res.Reason != tt.reason {
				t.Fatalf("accepted=%v reason=%q, want %q", res.Accepted, res.Reason, tt.reason)
			}
			s := f.m.Status()
			if tt.reason != "" {
				if res.Signature != "" || res.Outcome != "" || res.Counter != nil {
					t.Fatalf("a refused hand-over got a receipt: %+v", res)
				}
				if !s.OwnerKey.Equal(f.pub) || s.AccountID != "acc-1" {
					t.Fatalf("the refusal changed the owner: %+v", s)
				}
				// The owner's commands still run.
				if res := f.m.Handle(f.signed(protocol.CmdReleaseHelmet, nil).build()); !res.Accepted {
					t.Fatalf("the owner's command after the refusal: %+v", res)
				}
				return
			}
			if res.Signature == "" || res.Outcome != protocol.OutcomeExecuted {
				t.Fatalf("an accepted hand-over is a receipt: %+v", res)
			}
			if !s.OwnerKey.Equal(newPub) || s.AccountID != "acc-2" {
				t.Fatalf("the hand-over did not replace the owner: %+v", s)
			}
			if res := f.m.Handle(f.signed(protocol.CmdReleaseHelmet, nil).build()); res.Reason != simmount.ReasonBadSignature {
				t.Fatalf("the former owner's command after the hand-over: %+v", res)
			}
		})
	}

	t.Run("after a physical reset", func(t *testing.T) {
		f := newFixture(t, true)
		if err := f.m.ResetOwner(); err != nil {
			t.Fatal(err)
		}
		if s := f.m.Status(); s.OwnerKey != nil || s.AccountID != "" {
			t.Fatalf("after the reset: %+v", s)
		}
		if res := f.m.Handle(associate("M1", newPub, "acc-2", f.clock.Now())); !res.Accepted {
			t.Fatalf("unsigned ASSOCIATE_OWNER after the reset: %+v", res)
		}
		if res := f.m.Handle(associate("M1", f.pub, "acc-3", f.clock.Now())); res.Reason != simmount.ReasonBadHandover {
			t.Fatalf("unsigned ASSOCIATE_OWNER to the new owner: %+v", res)
		}
	})
}
