package simmount_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
)

// verifyReport checks a states message's signature as the server does:
// the text rebuilt from the message's fields.
func verifyReport(t *testing.T, pub, uid string, msg protocol.BLEMessage) bool {
	t.Helper()
	if msg.Counter == nil || msg.Signature == "" {
		t.Fatalf("unsigned states message: %+v", msg)
	}
	r := protocol.Report{UID: uid, Counter: *msg.Counter, SoftwareRevision: msg.SoftwareRevision}
	for _, e := range msg.States {
		at, err := time.Parse(protocol.TimeLayout, e.OccurredAt)
		if err != nil {
			t.Fatal(err)
		}
		r.Entries = append(r.Entries, protocol.ReportEntry{Code: protocol.StateCode(e.Code), Value: e.Value, OccurredAt: at})
	}
	return protocol.Verify(pub, protocol.BuildReportText(r), msg.Signature)
}

// verifyReceipt checks a result message's signature from its fields.
func verifyReceipt(t *testing.T, pub, uid string, res protocol.BLEMessage) bool {
	t.Helper()
	if res.Counter == nil || res.Signature == "" || res.Outcome == "" {
		t.Fatalf("not a receipt: %+v", res)
	}
	at, err := time.Parse(protocol.TimeLayout, res.At)
	if err != nil || !strings.HasSuffix(res.At, "Z") || len(res.At) != len("2026-11-22T01:40:13.000Z") {
		t.Fatalf("at %q: %v", res.At, err)
	}
	text := protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: res.Nonce, Outcome: res.Outcome, Reason: res.Reason, Counter: *res.Counter, At: at})
	return protocol.Verify(pub, text, res.Signature)
}

func TestSignedReport(t *testing.T) {
	f := newFixture(t, true)
	f.clock.Add(1234567 * time.Microsecond) // sub-millisecond: the text covers what the message states
	info := f.m.BLEInfo()
	if !protocol.ValidPublicKey(info.DevicePublicKey) {
		t.Fatalf("devicePublicKey %q", info.DevicePublicKey)
	}
	var raw map[string]any
	if json.Unmarshal(f.m.Info(), &raw) != nil || raw["devicePublicKey"] != info.DevicePublicKey {
		t.Fatalf("info characteristic %s", f.m.Info())
	}
	var last uint64
	for i := range 3 {
		msg := f.m.Report()
		if msg.Type != "states" || len(msg.States) != 4 || msg.SoftwareRevision != "1.0.0" {
			t.Fatalf("report %+v", msg)
		}
		if !verifyReport(t, info.DevicePublicKey, "M1", msg) {
			t.Fatalf("report %d does not verify", i)
		}
		if *msg.Counter <= last {
			t.Fatalf("counter %d after %d", *msg.Counter, last)
		}
		last = *msg.Counter
		// What a rider's phone would like to say instead does not verify.
		forged := msg
		forged.States = append([]protocol.BLEStateEntry(nil), msg.States...)
		forged.States[0].Value = "1"
		if verifyReport(t, info.DevicePublicKey, "M1", forged) {
			t.Fatal("an altered report verifies")
		}
		other := msg
		c := *msg.Counter + 1
		other.Counter = &c
		if verifyReport(t, info.DevicePublicKey, "M1", other) {
			t.Fatal("a report with another counter verifies")
		}
	}
	// The JSON on the air has the fields the server takes.
	enc, _ := json.Marshal(f.m.Report())
	for _, k := range []string{`"counter":`, `"softwareRevision":"1.0.0"`, `"signature":"`} {
		if !strings.Contains(string(enc), k) {
			t.Fatalf("%s lacks %s", enc, k)
		}
	}
}

func TestReceipts(t *testing.T) {
	_, otherKey := newKey(t)
	tests := []struct {
		name       string
		associated bool
		steps      func(f *fixture) [][]byte // the last one's result is checked
		reason     string
		receipt    bool
	}{
		{"executed", true, func(f *fixture) [][]byte { return [][]byte{f.signed(protocol.CmdReleaseHelmet, nil).build()} }, "", true},
		{"association", false, func(f *fixture) [][]byte { return [][]byte{associate("M1", f.pub, "acc-1", f.clock.Now())} }, "", true},
		{"association for another mount", false, func(f *fixture) [][]byte { return [][]byte{associate("M2", f.pub, "acc-1", f.clock.Now())} }, simmount.ReasonWrongMount, true},
		{"stale", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.at = s.at.Add(-6 * time.Minute)
			return [][]byte{s.build()}
		}, simmount.ReasonStale, true},
		{"replayed", true, func(f *fixture) [][]byte {
			raw := f.signed(protocol.CmdReleaseHelmet, nil).build()
			return [][]byte{raw, raw}
		}, simmount.ReasonReplayed, true},
		{"code mismatch", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.payCode = protocol.CmdSetRFIDMode
			return [][]byte{s.build()}
		}, simmount.ReasonCodeMismatch, true},
		{"wrong mount", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.uid = "M2"
			return [][]byte{s.build()}
		}, simmount.ReasonWrongMount, true},
		{"bad parameters", true, func(f *fixture) [][]byte {
			return [][]byte{f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "LOUD"}).build()}
		}, simmount.ReasonBadParameters, true},
		// Refused before the signature verified: unsigned, no receipt.
		{"bad signature", true, func(f *fixture) [][]byte {
			s := f.signed(protocol.CmdReleaseHelmet, nil)
			s.key = otherKey
			return [][]byte{s.build()}
		}, simmount.ReasonBadSignature, false},
		{"no owner key", false, func(f *fixture) [][]byte { return [][]byte{f.signed(protocol.CmdReleaseHelmet, nil).build()} }, simmount.ReasonNoOwner, false},
		{"malformed", true, func(f *fixture) [][]byte { return [][]byte{[]byte(`{"code":"RELEASE_HELMET","payload":"1;2"}`)} }, simmount.ReasonMalformed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.associated)
			pub := f.m.BLEInfo().DevicePublicKey
			steps := tt.steps(f)
			var res protocol.BLEMessage
			var last uint64
			for _, raw := range steps {
				f.clock.Add(time.Millisecond)
				res = f.m.Handle(raw)
				if res.Counter != nil {
					if *res.Counter <= last {
						t.Fatalf("counter %d after %d", *res.Counter, last)
					}
					last = *res.Counter
				}
			}
			if res.Reason != tt.reason || res.Accepted != (tt.reason == "") {
				t.Fatalf("result %+v, want reason %q", res, tt.reason)
			}
			if !tt.receipt {
				if res.Counter != nil || res.Signature != "" || res.Outcome != "" || res.At != "" {
					t.Fatalf("a refusal before the signature check is signed: %+v", res)
				}
				return
			}
			want := protocol.OutcomeExecuted
			if tt.reason != "" {
				want = protocol.OutcomeRefused
			}
			if res.Outcome != want || res.At != protocol.FormatTime(f.clock.Now()) {
				t.Fatalf("receipt %+v", res)
			}
			if !verifyReceipt(t, pub, "M1", res) {
				t.Fatalf("receipt does not verify: %+v", res)
			}
			forged := res
			forged.Outcome, forged.Reason = protocol.OutcomeExecuted, ""
			if tt.reason != "" && verifyReceipt(t, pub, "M1", forged) {
				t.Fatal("a refusal turned into an execution verifies")
			}
		})
	}
}

// stores are the two kinds a mount restarts from.
func stores(t *testing.T) map[string]simmount.Store {
	return map[string]simmount.Store{"memory": simmount.NewMemoryStore(), "dir": simmount.DirStore{Dir: t.TempDir()}}
}

// TestRestart: a mount started again from its store keeps its device key,
// owner and replay memory, and never uses a counter twice.
func TestRestart(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			c := &clock{t: epoch}
			cfg := simmount.Config{UID: "M1", MACAddress: "02:00:00:00:00:01", Now: c.Now, Store: store}
			m, err := simmount.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			pub, priv := newKey(t)
			f := &fixture{m: m, clock: c, pub: pub, priv: priv}
			if res := m.Handle(associate("M1", pub, "acc-1", c.Now())); !res.Accepted {
				t.Fatal(res.Reason)
			}
			device := m.BLEInfo().DevicePublicKey
			release := f.signed(protocol.CmdReleaseHelmet, nil).build()
			if res := m.Handle(release); !res.Accepted {
				t.Fatal(res.Reason)
			}
			used := map[uint64]bool{}
			var highest uint64
			for range 100 { // past a block of reserved counters
				c.Add(time.Second)
				msg := m.Report()
				used[*msg.Counter] = true
				highest = max(highest, *msg.Counter)
			}

			// Power loss: the mount is gone without a word; it boots again.
			c.Add(time.Minute)
			m2, err := simmount.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if m2.BLEInfo().DevicePublicKey != device {
				t.Fatal("the device key changed across a restart")
			}
			st := m2.Status()
			if st.OwnerKey == nil || st.Locked || st.HelmetMounted {
				t.Fatalf("after restart: %+v", st)
			}
			res := m2.Handle(release)
			if res.Accepted || res.Reason != simmount.ReasonReplayed || res.Outcome != protocol.OutcomeRefused {
				t.Fatalf("a command accepted before the restart: %+v", res)
			}
			if !verifyReceipt(t, device, "M1", res) || *res.Counter <= highest {
				t.Fatalf("receipt after restart: counter %d, highest before %d", *res.Counter, highest)
			}
			for range 100 {
				msg := m2.Report()
				if used[*msg.Counter] || *msg.Counter <= highest {
					t.Fatalf("counter %d used again (highest before the restart %d)", *msg.Counter, highest)
				}
				if !verifyReport(t, device, "M1", msg) {
					t.Fatal("report after restart does not verify")
				}
				used[*msg.Counter] = true
			}
			// A new command still runs after the restart.
			f.m = m2
			if res := m2.Handle(f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "LEARN"}).build()); !res.Accepted {
				t.Fatal(res.Reason)
			}
		})
	}
}

// TestReplayFloorSurvivesRestart: past the memory's bound, the floor is
// what refuses old commands, after a restart too.
func TestReplayFloorSurvivesRestart(t *testing.T) {
	store := simmount.NewMemoryStore()
	c := &clock{t: epoch}
	cfg := simmount.Config{UID: "M1", Now: c.Now, Store: store}
	f := &fixture{m: simmount.New(cfg), clock: c}
	f.pub, f.priv = newKey(t)
	f.m.Handle(associate("M1", f.pub, "acc-1", c.Now()))
	first := f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "NORMAL"}).build()
	f.m.Handle(first)
	for range 1030 {
		c.Add(50 * time.Millisecond)
		if res := f.m.Handle(f.signed(protocol.CmdSetRFIDMode, map[string]string{"rfidMode": "NORMAL"}).build()); !res.Accepted {
			t.Fatal(res.Reason)
		}
	}
	m2 := simmount.New(cfg)
	if res := m2.Handle(first); res.Reason != simmount.ReasonReplayed {
		t.Fatalf("%+v", res)
	}
}

func TestLegacy(t *testing.T) {
	store := simmount.NewMemoryStore()
	c := &clock{t: epoch}
	m := simmount.New(simmount.Config{UID: "OLD-1", Now: c.Now, Legacy: true, Store: store})
	if strings.Contains(string(m.Info()), "devicePublicKey") || m.BLEInfo().DevicePublicKey != "" {
		t.Fatalf("legacy info %s", m.Info())
	}
	msg := m.Report()
	enc, _ := json.Marshal(msg)
	if len(msg.States) != 4 || msg.Counter != nil || msg.Signature != "" || strings.Contains(string(enc), "counter") {
		t.Fatalf("legacy report %s", enc)
	}
	pub, priv := newKey(t)
	if res := m.Handle(associate("OLD-1", pub, "acc-1", c.Now())); !res.Accepted || res.Signature != "" || res.Outcome != "" || res.Counter != nil {
		t.Fatalf("legacy association result %+v", res)
	}
	raw := spec{code: protocol.CmdReleaseHelmet, uid: "OLD-1", at: c.Now(), nonce: protocol.NewNonce(), key: priv}.build()
	if res := m.Handle(raw); !res.Accepted || res.Signature != "" {
		t.Fatalf("legacy release %+v", res)
	}
	// Replay memory is kept all the same.
	if res := simmount.New(simmount.Config{UID: "OLD-1", Now: c.Now, Legacy: true, Store: store}).Handle(raw); res.Reason != simmount.ReasonReplayed {
		t.Fatalf("legacy replay after restart %+v", res)
	}
	// The same mount updated to firmware with device keys makes one.
	up := simmount.New(simmount.Config{UID: "OLD-1", Now: c.Now, Store: store})
	if key := up.BLEInfo().DevicePublicKey; !protocol.ValidPublicKey(key) || !verifyReport(t, key, "OLD-1", up.Report()) {
		t.Fatal("updated firmware has no working device key")
	}
	if up.Status().OwnerKey == nil {
		t.Fatal("the update lost the owner")
	}
}

// TestStorageFailure: what the mount cannot save does not happen, and
// nothing is signed with a counter the store does not cover.
func TestStorageFailure(t *testing.T) {
	store := simmount.NewMemoryStore()
	c := &clock{t: epoch}
	cfg := simmount.Config{UID: "M1", Now: c.Now, Store: store}
	f := &fixture{m: simmount.New(cfg), clock: c}
	f.pub, f.priv = newKey(t)
	f.m.Handle(associate("M1", f.pub, "acc-1", c.Now()))
	var highest uint64
	for highest == 0 || highest%64 != 0 { // use up the reservation (blocks of 64 from 0)
		highest = *f.m.Report().Counter
	}
	store.SetFail(errors.New("flash full"))
	release := f.signed(protocol.CmdReleaseHelmet, nil).build()
	res := f.m.Handle(release)
	if res.Accepted || res.Reason != simmount.ReasonStorage || res.Signature != "" || res.Counter != nil {
		t.Fatalf("result without storage %+v", res)
	}
	if st := f.m.Status(); !st.Locked || !st.HelmetMounted || st.StoreErrors == 0 {
		t.Fatalf("a command that could not be saved ran: %+v", st)
	}
	for range 100 {
		if msg := f.m.Report(); msg.Signature != "" {
			t.Fatalf("signed past the reservation without saving: counter %d", *msg.Counter)
		}
	}
	store.SetFail(nil)
	if res := f.m.Handle(release); !res.Accepted || *res.Counter <= highest {
		t.Fatalf("after the store came back: %+v", res)
	}
	if res := simmount.New(cfg).Handle(release); res.Reason != simmount.ReasonReplayed {
		t.Fatalf("restart: %+v", res)
	}
}

func TestDirStore(t *testing.T) {
	dir := t.TempDir()
	store := simmount.DirStore{Dir: dir}
	for _, uid := range []string{"../x", ".hidden", "a/b", ""} {
		if _, err := simmount.Open(simmount.Config{UID: uid, Store: store}); err == nil {
			t.Errorf("uid %q named a file", uid)
		}
	}
	m, err := simmount.Open(simmount.Config{UID: "SIM-0001", Store: store})
	if err != nil {
		t.Fatal(err)
	}
	m.Report()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "SIM-0001.json" {
		t.Fatalf("files %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, "BAD.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := simmount.Open(simmount.Config{UID: "BAD", Store: store}); err == nil {
		t.Fatal("a broken state file was taken")
	}
}
