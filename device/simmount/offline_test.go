package simmount_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// offline is a mount associated with an owner key, on a store it can be
// restarted from, and a rider with a key.
type offline struct {
	*fixture
	store    *simmount.MemoryStore
	cfg      simmount.Config
	rider    *ecdsa.PrivateKey
	riderKey string
	device   string // the device key, hex
}

func newOffline(t testing.TB) *offline {
	t.Helper()
	o := &offline{fixture: &fixture{clock: &clock{t: epoch}}, store: simmount.NewMemoryStore()}
	o.pub, o.priv = newKey(t)
	o.cfg = simmount.Config{UID: "M1", MACAddress: "02:00:00:00:00:01", Now: o.clock.Now, Store: o.store}
	o.m = simmount.New(o.cfg)
	if res := o.m.Handle(associate("M1", o.pub, "acc-1", o.clock.Now())); !res.Accepted {
		t.Fatalf("ASSOCIATE_OWNER refused: %+v", res)
	}
	o.device = o.m.BLEInfo().DevicePublicKey
	o.rider, o.riderKey = newRider(t)
	return o
}

func newRider(t testing.TB) (*ecdsa.PrivateKey, string) {
	t.Helper()
	priv, err := protocol.GenerateRiderKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := protocol.RiderKeyHex(&priv.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return priv, key
}

// restart is a power loss and a new start from the store.
func (o *offline) restart(t *testing.T) {
	t.Helper()
	m, err := simmount.Open(o.cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.m = m
}

// signedGrant is a grant as the API hands it out.
type signedGrant struct {
	protocol.Grant
	text, signature string
}

// grant is a grant for the rider, valid from an hour ago for two hours at
// epoch 1, signed by the owner key; edit changes it before it is signed.
func (o *offline) grant(edit func(*protocol.Grant)) signedGrant {
	now := o.clock.Now()
	g := protocol.Grant{UID: "M1", ID: protocol.NewGrantID(), RiderKey: o.riderKey, Rights: []string{string(protocol.CmdReleaseHelmet)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), Epoch: 1}
	if edit != nil {
		edit(&g)
	}
	text := protocol.BuildGrantText(g)
	return signedGrant{Grant: g, text: text, signature: protocol.Sign(o.priv, text)}
}

// use is the write of a use of g for code, answering nonce, its proof by
// key over proofCode (the code itself when empty).
func (o *offline) use(t testing.TB, g signedGrant, code, nonce string, key *ecdsa.PrivateKey, proofCode string) []byte {
	t.Helper()
	if proofCode == "" {
		proofCode = code
	}
	proof, err := protocol.SignRider(key, protocol.BuildUseText("M1", g.ID, proofCode, nonce))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(protocol.BLEUse{Type: protocol.BLEWriteUse, Grant: g.text, GrantSignature: g.signature, Code: code, Nonce: nonce, Proof: proof})
	return raw
}

// release is a valid use of g for RELEASE_HELMET with a fresh challenge.
func (o *offline) release(t testing.TB, g signedGrant) []byte {
	return o.use(t, g, string(protocol.CmdReleaseHelmet), o.m.Challenge(), o.rider, "")
}

// signedText is a time, revocations or ack write signed by key.
func signedText(typ, text string, key ed25519.PrivateKey) []byte {
	raw, _ := json.Marshal(protocol.BLESignedText{Type: typ, Text: text, Signature: protocol.Sign(key, text)})
	return raw
}

func (o *offline) revocations(version, epoch int64, ids ...string) []byte {
	return signedText(protocol.BLEWriteRevocations, protocol.BuildRevocationsText(protocol.Revocations{UID: "M1", Version: version, Epoch: epoch, GrantIDs: ids}), o.priv)
}

func (o *offline) timeToken(at time.Time, nonce string) []byte {
	return signedText(protocol.BLEWriteTime, protocol.BuildTimeText("M1", at, nonce), o.priv)
}

func (o *offline) ack(nonces ...string) []byte {
	return signedText(protocol.BLEWriteAck, protocol.BuildAckText("M1", nonces), o.priv)
}

// accept handles raw and fails unless it was accepted.
func (o *offline) accept(t *testing.T, raw []byte) protocol.BLEMessage {
	t.Helper()
	res := o.m.Handle(raw)
	if !res.Accepted {
		t.Fatalf("refused: %+v", res)
	}
	return res
}

// checkOfflineReceipt fails unless res is an offline receipt whose
// signature the device key verifies.
func (o *offline) checkOfflineReceipt(t *testing.T, res protocol.BLEMessage) protocol.OfflineReceipt {
	t.Helper()
	r, err := res.OfflineReceipt("M1")
	if err != nil || !protocol.VerifyOfflineReceipt(o.device, r, res.Signature) {
		t.Fatalf("not a verified offline receipt: %+v %v", res, err)
	}
	return r
}

// TestUse: the six checks of a use in §21's order. Refusals of the first
// three (and malformed writes) are unsigned and leave no trace; from the
// revocation check on the answer is a signed offline receipt, logged.
func TestUse(t *testing.T) {
	_, stranger := newKey(t)
	release := string(protocol.CmdReleaseHelmet)
	tests := []struct {
		name   string
		build  func(t *testing.T, o *offline) []byte // may prepare the mount
		reason string                                // "" executed
		signed bool
	}{
		{"executed", func(t *testing.T, o *offline) []byte { return o.release(t, o.grant(nil)) }, "", true},
		{"malformed", func(t *testing.T, o *offline) []byte { return []byte(`{"type":"use","nonce":5}`) }, simmount.ReasonMalformed, false},
		{"log full", func(t *testing.T, o *offline) []byte {
			g := o.grant(nil)
			for range protocol.MaxOfflineLog {
				o.accept(t, o.release(t, g))
			}
			return o.release(t, g)
		}, protocol.ReasonLogFull, false},
		{"no owner key", func(t *testing.T, o *offline) []byte {
			if err := o.m.ResetOwner(); err != nil {
				t.Fatal(err)
			}
			return o.release(t, o.grant(nil))
		}, protocol.ReasonBadGrant, false},
		{"grant signed by another key", func(t *testing.T, o *offline) []byte {
			g := o.grant(nil)
			g.signature = protocol.Sign(stranger, g.text)
			return o.release(t, g)
		}, protocol.ReasonBadGrant, false},
		{"grant for another mount", func(t *testing.T, o *offline) []byte {
			return o.release(t, o.grant(func(g *protocol.Grant) { g.UID = "M2" }))
		}, protocol.ReasonBadGrant, false},
		{"grant text altered", func(t *testing.T, o *offline) []byte {
			g := o.grant(nil)
			g.NotAfter = g.NotAfter.Add(24 * time.Hour)
			g.text = protocol.BuildGrantText(g.Grant)
			return o.release(t, g)
		}, protocol.ReasonBadGrant, false},
		{"proof by another rider key", func(t *testing.T, o *offline) []byte {
			other, _ := newRider(t)
			return o.use(t, o.grant(nil), release, o.m.Challenge(), other, "")
		}, protocol.ReasonBadProof, false},
		{"proof over another code", func(t *testing.T, o *offline) []byte {
			return o.use(t, o.grant(nil), release, o.m.Challenge(), o.rider, string(protocol.CmdSetRFIDMode))
		}, protocol.ReasonBadProof, false},
		{"no challenge given out", func(t *testing.T, o *offline) []byte {
			return o.use(t, o.grant(nil), release, protocol.NewNonce(), o.rider, "")
		}, protocol.ReasonBadProof, false},
		{"challenge older than a minute", func(t *testing.T, o *offline) []byte {
			nonce := o.m.Challenge()
			o.clock.Add(protocol.ChallengeLifetime)
			return o.use(t, o.grant(nil), release, nonce, o.rider, "")
		}, protocol.ReasonBadProof, false},
		{"challenge used already", func(t *testing.T, o *offline) []byte {
			raw := o.release(t, o.grant(nil))
			o.accept(t, raw)
			return raw
		}, protocol.ReasonBadProof, false},
		{"revoked: listed", func(t *testing.T, o *offline) []byte {
			g := o.grant(nil)
			o.accept(t, o.revocations(2, 1, g.ID))
			return o.release(t, g)
		}, protocol.ReasonRevoked, true},
		{"revoked: epoch below the mount's", func(t *testing.T, o *offline) []byte {
			o.accept(t, o.revocations(2, 2))
			return o.release(t, o.grant(nil))
		}, protocol.ReasonRevoked, true},
		{"revoked before not granted", func(t *testing.T, o *offline) []byte {
			g := o.grant(nil)
			o.accept(t, o.revocations(2, 1, g.ID))
			return o.use(t, g, string(protocol.CmdSetRFIDMode), o.m.Challenge(), o.rider, "")
		}, protocol.ReasonRevoked, true},
		{"a grant of the new epoch", func(t *testing.T, o *offline) []byte {
			o.accept(t, o.revocations(2, 2))
			return o.release(t, o.grant(func(g *protocol.Grant) { g.Epoch = 2 }))
		}, "", true},
		{"not granted", func(t *testing.T, o *offline) []byte {
			return o.use(t, o.grant(nil), string(protocol.CmdSetRFIDMode), o.m.Challenge(), o.rider, "")
		}, protocol.ReasonNotGranted, true},
		{"a right the mount does not run offline", func(t *testing.T, o *offline) []byte {
			g := o.grant(func(g *protocol.Grant) { g.Rights = append(g.Rights, string(protocol.CmdSetRFIDMode)) })
			return o.use(t, g, string(protocol.CmdSetRFIDMode), o.m.Challenge(), o.rider, "")
		}, protocol.ReasonNotGranted, true},
		{"not granted before expired", func(t *testing.T, o *offline) []byte {
			g := o.grant(func(g *protocol.Grant) { g.NotAfter = g.NotBefore.Add(time.Minute) })
			return o.use(t, g, string(protocol.CmdSetRFIDMode), o.m.Challenge(), o.rider, "")
		}, protocol.ReasonNotGranted, true},
		{"not yet valid", func(t *testing.T, o *offline) []byte {
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotBefore = o.clock.Now().Add(time.Minute) }))
		}, protocol.ReasonNotYetValid, true},
		{"expired", func(t *testing.T, o *offline) []byte {
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotAfter = o.clock.Now().Add(-time.Millisecond) }))
		}, protocol.ReasonExpired, true},
		{"at notAfter exactly", func(t *testing.T, o *offline) []byte {
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotAfter = o.clock.Now() }))
		}, "", true},
		{"after a restart, expired: no trusted time", func(t *testing.T, o *offline) []byte {
			o.restart(t)
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotAfter = o.clock.Now().Add(-time.Minute) }))
		}, protocol.ReasonNoTrustedTime, true},
		{"after a restart, not yet valid: no trusted time", func(t *testing.T, o *offline) []byte {
			o.restart(t)
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotBefore = o.clock.Now().Add(time.Minute) }))
		}, protocol.ReasonNoTrustedTime, true},
		{"after a restart, within the grant", func(t *testing.T, o *offline) []byte {
			o.restart(t)
			return o.release(t, o.grant(nil))
		}, "", true},
		{"after a restart and a time token, expired", func(t *testing.T, o *offline) []byte {
			o.restart(t)
			o.accept(t, o.timeToken(o.clock.Now(), o.m.Challenge()))
			return o.release(t, o.grant(func(g *protocol.Grant) { g.NotAfter = o.clock.Now().Add(-time.Minute) }))
		}, protocol.ReasonExpired, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOffline(t)
			raw := tc.build(t, o)
			before, logBefore := o.m.Status(), o.m.Offline().Log
			res := o.m.Handle(raw)
			after, logAfter := o.m.Status(), o.m.Offline().Log
			if res.Reason != tc.reason || res.Accepted != (tc.reason == "") {
				t.Fatalf("answer %+v, want reason %q", res, tc.reason)
			}
			if !tc.signed {
				if res.Type != protocol.BLEMessageResult || res.Signature != "" || res.Counter != nil || res.Outcome != "" {
					t.Fatalf("an unsigned refusal was signed: %+v", res)
				}
				if after.Counter != before.Counter || !slices.Equal(signatures(logAfter), signatures(logBefore)) ||
					after.HelmetMounted != before.HelmetMounted || after.Locked != before.Locked {
					t.Fatalf("an unsigned refusal left a trace: counter %d → %d, log %d → %d", before.Counter, after.Counter, len(logBefore), len(logAfter))
				}
				return
			}
			r := o.checkOfflineReceipt(t, res)
			wantOutcome := protocol.OutcomeExecuted
			if tc.reason != "" {
				wantOutcome = protocol.OutcomeRefused
			}
			if res.Type != protocol.BLEMessageOffline || r.Outcome != wantOutcome || r.Counter <= before.Counter ||
				!r.At.Equal(o.m.Offline().Time) || r.Code != string(protocol.CmdReleaseHelmet) && tc.reason == "" {
				t.Fatalf("receipt %+v", r)
			}
			if len(logAfter) != len(logBefore)+1 || logAfter[len(logAfter)-1].Signature != res.Signature {
				t.Fatalf("the receipt is not logged: %d → %d entries", len(logBefore), len(logAfter))
			}
			if released := !after.HelmetMounted && !after.Locked; released != (tc.reason == "") {
				t.Fatalf("executed %v, helmet mounted %v, locked %v", tc.reason == "", after.HelmetMounted, after.Locked)
			}
			// The challenge is used up.
			if again := o.m.Handle(raw); again.Reason != protocol.ReasonBadProof {
				t.Fatalf("the same use again: %+v", again)
			}
		})
	}
}

func signatures(log []protocol.BLEMessage) []string {
	out := make([]string, len(log))
	for i, m := range log {
		out[i] = m.Signature
	}
	return out
}

// TestUseRefusalLeavesChallenge: a stranger who overheard a challenge
// cannot spend it with a bad proof; the rider still can.
func TestUseRefusalLeavesChallenge(t *testing.T) {
	o := newOffline(t)
	g := o.grant(nil)
	nonce := o.m.Challenge()
	stranger, _ := newRider(t)
	if res := o.m.Handle(o.use(t, g, string(protocol.CmdReleaseHelmet), nonce, stranger, "")); res.Reason != protocol.ReasonBadProof {
		t.Fatalf("stranger: %+v", res)
	}
	o.checkOfflineReceipt(t, o.accept(t, o.use(t, g, string(protocol.CmdReleaseHelmet), nonce, o.rider, "")))
}

// TestRefusedReceiptsOncePerGrantAndReason: the log keeps one unacknowledged
// REFUSED receipt per grant and reason; each refusal is answered signed.
func TestRefusedReceiptsOncePerGrantAndReason(t *testing.T) {
	o := newOffline(t)
	setRFID := string(protocol.CmdSetRFIDMode)
	g, other := o.grant(nil), o.grant(nil)
	expired := o.grant(func(gr *protocol.Grant) { gr.NotAfter = o.clock.Now().Add(-time.Minute) })
	steps := []struct {
		raw     []byte
		wantLog int
	}{
		{o.use(t, g, setRFID, o.m.Challenge(), o.rider, ""), 1},
		{o.use(t, g, setRFID, o.m.Challenge(), o.rider, ""), 1},       // same grant, same reason
		{o.use(t, other, setRFID, o.m.Challenge(), o.rider, ""), 2},   // another grant
		{o.use(t, expired, setRFID, o.m.Challenge(), o.rider, ""), 3}, // another grant
		{o.release(t, expired), 4},                                    // same grant, another reason
		{o.release(t, expired), 4},
	}
	counters := map[uint64]bool{}
	for i, s := range steps {
		res := o.m.Handle(s.raw)
		r := o.checkOfflineReceipt(t, res)
		if r.Outcome != protocol.OutcomeRefused || counters[r.Counter] {
			t.Fatalf("step %d: %+v", i, r)
		}
		counters[r.Counter] = true
		if n := len(o.m.Offline().Log); n != s.wantLog {
			t.Fatalf("step %d: %d receipts logged, want %d", i, n, s.wantLog)
		}
	}
	// Acknowledged, the same refusal is logged again.
	first := o.m.Offline().Log[0]
	o.accept(t, o.ack(first.Nonce))
	o.checkOfflineReceipt(t, o.m.Handle(o.use(t, g, setRFID, o.m.Challenge(), o.rider, "")))
	if n := len(o.m.Offline().Log); n != 4 {
		t.Fatalf("%d receipts logged after the ack and a new refusal, want 4", n)
	}
}

// TestLogFullAndAck: 256 unacknowledged EXECUTED receipts fill the log; a
// verified ack makes room, survives a restart; other acks change nothing.
func TestLogFullAndAck(t *testing.T) {
	o := newOffline(t)
	g := o.grant(nil)
	for range protocol.MaxOfflineLog {
		o.accept(t, o.release(t, g))
	}
	if res := o.m.Handle(o.release(t, g)); res.Reason != protocol.ReasonLogFull {
		t.Fatalf("257th use: %+v", res)
	}
	o.accept(t, o.revocations(1795687260000, 1795687260000)) // versions and epochs rise to the server's time in ms
	raw := o.m.Info()
	var info protocol.BLEInfo
	if err := json.Unmarshal(raw, &info); err != nil || info.LogPending != protocol.MaxOfflineLog || info.Challenge == "" {
		t.Fatalf("info %+v %v", info, err)
	}
	if len(raw) > protocol.BLEMaxAttrValue-128 { // room left for longer uids, serials and models
		t.Fatalf("info of %d bytes: %s", len(raw), raw)
	}
	log := o.m.Offline().Log
	ten := make([]string, 10)
	for i := range ten {
		ten[i] = log[i].Nonce
	}
	_, stranger := newKey(t)
	refused := []struct {
		name, reason string
		raw          []byte
	}{
		{"signed by another key", simmount.ReasonBadSignature, signedText(protocol.BLEWriteAck, protocol.BuildAckText("M1", ten), stranger)},
		{"for another mount", simmount.ReasonWrongMount, signedText(protocol.BLEWriteAck, protocol.BuildAckText("M2", ten), o.priv)},
		{"not an ack", simmount.ReasonMalformed, signedText(protocol.BLEWriteAck, protocol.BuildTimeText("M1", o.clock.Now(), ten[0]), o.priv)},
		{"not JSON", simmount.ReasonMalformed, []byte(`{"type":"ack","text":1}`)},
	}
	for _, tc := range refused {
		if res := o.m.Handle(tc.raw); res.Reason != tc.reason || res.Type != protocol.BLEMessageResult || res.Code != protocol.BLEWriteAck {
			t.Fatalf("%s: %+v", tc.name, res)
		}
	}
	if n := len(o.m.Offline().Log); n != protocol.MaxOfflineLog {
		t.Fatalf("refused acks dropped receipts: %d left", n)
	}
	res := o.accept(t, o.ack(append(ten, protocol.NewNonce())...)) // a nonce it does not hold is ignored
	if res.Code != protocol.BLEWriteAck {
		t.Fatalf("ack answer %+v", res)
	}
	o.restart(t)
	left := o.m.Offline().Log
	if len(left) != protocol.MaxOfflineLog-10 || left[0].Nonce != log[10].Nonce {
		t.Fatalf("after the ack and a restart: %d receipts, first %s", len(left), left[0].Nonce)
	}
	// Room again (for a grant of the epoch the list raised).
	o.checkOfflineReceipt(t, o.accept(t, o.release(t, o.grant(func(g *protocol.Grant) { g.Epoch = 1795687260000 }))))
}

// TestTimeToken: a verified time token for a live challenge is trusted
// time; T moves to it only forward.
func TestTimeToken(t *testing.T) {
	_, stranger := newKey(t)
	tests := []struct {
		name    string
		restart bool
		build   func(o *offline) []byte
		reason  string
		wantT   func(before time.Time) time.Time
	}{
		{"an hour ahead", true, func(o *offline) []byte { return o.timeToken(o.clock.Now().Add(time.Hour), o.m.Challenge()) }, "",
			func(before time.Time) time.Time { return before.Add(time.Hour) }},
		{"an hour behind: T stays", true, func(o *offline) []byte { return o.timeToken(o.clock.Now().Add(-time.Hour), o.m.Challenge()) }, "",
			func(before time.Time) time.Time { return before }},
		{"no challenge given out", true, func(o *offline) []byte { return o.timeToken(o.clock.Now(), protocol.NewNonce()) },
			simmount.ReasonUnknownChallenge, nil},
		{"challenge older than a minute", true, func(o *offline) []byte {
			nonce := o.m.Challenge()
			o.clock.Add(protocol.ChallengeLifetime)
			return o.timeToken(o.clock.Now(), nonce)
		}, simmount.ReasonUnknownChallenge, nil},
		{"challenge used already", true, func(o *offline) []byte {
			raw := o.timeToken(o.clock.Now(), o.m.Challenge())
			o.m.Handle(raw)
			o.restart(t) // untrusted again; the challenges are gone
			return raw
		}, simmount.ReasonUnknownChallenge, nil},
		{"signed by another key", true, func(o *offline) []byte {
			return signedText(protocol.BLEWriteTime, protocol.BuildTimeText("M1", o.clock.Now(), o.m.Challenge()), stranger)
		}, simmount.ReasonBadSignature, nil},
		{"for another mount", true, func(o *offline) []byte {
			return signedText(protocol.BLEWriteTime, protocol.BuildTimeText("M2", o.clock.Now(), o.m.Challenge()), o.priv)
		}, simmount.ReasonWrongMount, nil},
		{"no owner key", true, func(o *offline) []byte {
			if err := o.m.ResetOwner(); err != nil {
				t.Fatal(err)
			}
			return o.timeToken(o.clock.Now(), o.m.Challenge())
		}, simmount.ReasonNoOwner, nil},
		{"malformed text", true, func(o *offline) []byte { return signedText(protocol.BLEWriteTime, "time;M1;now;x", o.priv) },
			simmount.ReasonMalformed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := newOffline(t)
			if tc.restart {
				o.restart(t)
			}
			raw := tc.build(o)
			before := o.m.Offline()
			res := o.m.Handle(raw)
			after := o.m.Offline()
			if res.Reason != tc.reason || res.Accepted != (tc.reason == "") || res.Code != protocol.BLEWriteTime || res.Signature != "" {
				t.Fatalf("answer %+v, want reason %q", res, tc.reason)
			}
			if tc.reason != "" {
				if after.TimeTrusted || !after.Time.Equal(before.Time) {
					t.Fatalf("a refused token changed the clock: %+v", after)
				}
				return
			}
			if !after.TimeTrusted || !after.Time.Equal(tc.wantT(before.Time)) {
				t.Fatalf("T %v trusted %v, want %v", after.Time, after.TimeTrusted, tc.wantT(before.Time))
			}
		})
	}
}

// TestClockAcrossRestarts: T is persisted at every change and at least
// every 10 minutes in use, and a restarted mount goes on from it: never
// back to an earlier time, whatever its monotonic clock says.
func TestClockAcrossRestarts(t *testing.T) {
	for name, store := range stores(t) {
		t.Run(name, func(t *testing.T) {
			o := newOffline(t)
			o.cfg.Store = store
			o.restart(t) // a first start on this store
			first := o.m.Offline()
			if !first.TimeTrusted || !first.Time.Equal(o.clock.Now()) {
				t.Fatalf("first start: T %v trusted %v, want the factory clock %v", first.Time, first.TimeTrusted, o.clock.Now())
			}
			o.accept(t, associate("M1", o.pub, "acc-1", o.clock.Now()))
			// A time token an hour ahead of the mount's clock.
			o.accept(t, o.timeToken(o.clock.Now().Add(time.Hour), o.m.Challenge()))
			ahead := o.clock.Now().Add(time.Hour)
			o.restart(t)
			if got := o.m.Offline(); got.TimeTrusted || !got.Time.Equal(ahead) {
				t.Fatalf("after a restart: T %v trusted %v, want %v untrusted", got.Time, got.TimeTrusted, ahead)
			}
			// 11 minutes in use: T was saved on the way.
			o.clock.Add(11 * time.Minute)
			o.m.Report()
			o.restart(t)
			if got := o.m.Offline().Time; got.Before(ahead.Add(11 * time.Minute)) {
				t.Fatalf("after 11 minutes and a restart: T %v, want at least %v", got, ahead.Add(11*time.Minute))
			}
			// The monotonic clock jumps back: what was saved stays the floor.
			floor := o.m.Offline().Time
			o.clock.Add(-30 * time.Minute)
			o.accept(t, o.ack())
			o.restart(t)
			if got := o.m.Offline().Time; got.Before(floor) {
				t.Fatalf("T went back across a restart: %v < %v", got, floor)
			}
			var info protocol.BLEInfo
			if err := json.Unmarshal(o.m.Info(), &info); err != nil || info.TimeTrusted {
				t.Fatalf("info after a restart: %+v %v", info, err)
			}
		})
	}
}

// TestCommandsBeforeTrustedTime: after a restart, until trusted time
// arrives, a signed command is stale only when older than T − 5 minutes;
// one from the future is taken and moves T; then the 5-minute window holds
// both ways.
func TestCommandsBeforeTrustedTime(t *testing.T) {
	o := newOffline(t)
	o.restart(t)
	t0 := o.m.Offline().Time
	rfid := map[string]string{"rfidMode": "LEARN"}
	old := o.signed(protocol.CmdSetRFIDMode, rfid)
	old.at = t0.Add(-6 * time.Minute)
	if res := o.m.Handle(old.build()); res.Reason != simmount.ReasonStale {
		t.Fatalf("6 minutes old: %+v", res)
	}
	if o.m.Offline().TimeTrusted {
		t.Fatal("a stale command brought trusted time")
	}
	future := o.signed(protocol.CmdSetRFIDMode, rfid)
	future.at = t0.Add(6 * time.Hour)
	o.accept(t, future.build())
	if got := o.m.Offline(); !got.TimeTrusted || !got.Time.Equal(future.at) {
		t.Fatalf("after a command 6 hours ahead: T %v trusted %v", got.Time, got.TimeTrusted)
	}
	again := o.signed(protocol.CmdSetRFIDMode, rfid)
	again.at = future.at.Add(6 * time.Minute)
	if res := o.m.Handle(again.build()); res.Reason != simmount.ReasonStale {
		t.Fatalf("6 minutes ahead of trusted time: %+v", res)
	}
	// Receipts are dated by T; the mount's own clock is 6 hours behind it.
	behind := o.signed(protocol.CmdSetRFIDMode, rfid)
	if res := o.m.Handle(behind.build()); res.Reason != simmount.ReasonStale {
		t.Fatalf("a command of the mount's own clock, 6 hours behind T: %+v", res)
	}
	late := o.signed(protocol.CmdSetRFIDMode, rfid)
	late.at = future.at.Add(-time.Second)
	res := o.accept(t, late.build())
	if res.At != protocol.FormatTime(future.at) {
		t.Fatalf("receipt at %s, want %s", res.At, protocol.FormatTime(future.at))
	}
}

// TestRevocationVersions: the mount keeps the newest list by version (an
// older one is refused and changes nothing), the highest epoch, across
// restarts.
func TestRevocationVersions(t *testing.T) {
	_, stranger := newKey(t)
	a, b := "gr_aaaaaaaaaaaaaaaaaaaaaaaa", "gr_bbbbbbbbbbbbbbbbbbbbbbbb"
	o := newOffline(t)
	steps := []struct {
		name        string
		raw         []byte
		reason      string
		version     int64
		epoch       int64
		revoked     []string
		restartThen bool
	}{
		{"first list", o.revocations(3, 1, a), "", 3, 1, []string{a}, false},
		{"older version", o.revocations(2, 1, a, b), simmount.ReasonOlderList, 3, 1, []string{a}, false},
		{"same version again", o.revocations(3, 1, a), "", 3, 1, []string{a}, false},
		{"newer version", o.revocations(5, 1, a, b), "", 5, 1, []string{a, b}, true},
		{"another key", signedText(protocol.BLEWriteRevocations, protocol.BuildRevocationsText(protocol.Revocations{UID: "M1", Version: 9, Epoch: 1}), stranger),
			simmount.ReasonBadSignature, 5, 1, []string{a, b}, false},
		{"another mount", signedText(protocol.BLEWriteRevocations, protocol.BuildRevocationsText(protocol.Revocations{UID: "M2", Version: 9, Epoch: 1}), o.priv),
			simmount.ReasonWrongMount, 5, 1, []string{a, b}, false},
		{"unsorted ids", signedText(protocol.BLEWriteRevocations, "revocations;M1;9;1;"+b+"+"+a, o.priv), simmount.ReasonMalformed, 5, 1, []string{a, b}, false},
		{"new epoch, empty list", o.revocations(6, 4), "", 6, 4, nil, true},
		{"a lower epoch does not lower the mount's", o.revocations(7, 2, b), "", 7, 4, []string{b}, true},
		{"the restarted mount refuses an older version", o.revocations(6, 9), simmount.ReasonOlderList, 7, 4, []string{b}, false},
	}
	for _, s := range steps {
		res := o.m.Handle(s.raw)
		if res.Reason != s.reason || res.Accepted != (s.reason == "") || res.Code != protocol.BLEWriteRevocations {
			t.Fatalf("%s: %+v, want reason %q", s.name, res, s.reason)
		}
		if s.restartThen {
			o.restart(t)
		}
		got := o.m.Offline()
		var info protocol.BLEInfo
		_ = json.Unmarshal(o.m.Info(), &info)
		if got.RevocationVersion != s.version || got.Epoch != s.epoch || !slices.Equal(got.Revoked, s.revoked) ||
			info.RevocationVersion != s.version || info.Epoch != s.epoch {
			t.Fatalf("%s: version %d epoch %d revoked %v (info %d/%d), want %d %d %v", s.name, got.RevocationVersion, got.Epoch,
				got.Revoked, info.RevocationVersion, info.Epoch, s.version, s.epoch, s.revoked)
		}
	}
}

// TestUseStorageFailure: a use whose receipt cannot be persisted does not
// run, is answered unsigned, and leaves the challenge usable.
func TestUseStorageFailure(t *testing.T) {
	o := newOffline(t)
	raw := o.release(t, o.grant(nil))
	o.store.SetFail(errors.New("flash full"))
	res := o.m.Handle(raw)
	if res.Reason != simmount.ReasonStorage || res.Signature != "" || res.Type != protocol.BLEMessageResult {
		t.Fatalf("%+v", res)
	}
	if st := o.m.Status(); !st.HelmetMounted || !st.Locked || len(o.m.Offline().Log) != 0 {
		t.Fatalf("a use that could not be saved ran: %+v", st)
	}
	o.store.SetFail(nil)
	o.checkOfflineReceipt(t, o.accept(t, raw))
}

// TestLegacyHasNoOfflineAccess: firmware without a device key gives no
// challenge and takes offline writes for malformed commands.
func TestLegacyHasNoOfflineAccess(t *testing.T) {
	m := simmount.New(simmount.Config{UID: "OLD-1", Legacy: true, Now: (&clock{t: epoch}).Now})
	var info protocol.BLEInfo
	if err := json.Unmarshal(m.Info(), &info); err != nil || info.Challenge != "" || info.TimeTrusted {
		t.Fatalf("info %+v %v", info, err)
	}
	if res := m.Handle([]byte(`{"type":"time","text":"x","signature":"y"}`)); res.Reason != simmount.ReasonMalformed {
		t.Fatalf("%+v", res)
	}
}

// TestLogOverTheAir: every central that connects gets the log, one
// receipt per message after the states; a use and an ack over BLE.
func TestLogOverTheAir(t *testing.T) {
	o := newOffline(t)
	air := sim.NewAir(sim.Config{AdvertisingInterval: 20 * time.Millisecond})
	if err := air.Register(o.m); err != nil {
		t.Fatal(err)
	}
	g := o.grant(nil)
	o.accept(t, o.release(t, g))
	o.m.ReturnHelmet()
	o.checkOfflineReceipt(t, o.m.Handle(o.use(t, g, string(protocol.CmdSetRFIDMode), o.m.Challenge(), o.rider, "")))
	logged := o.m.Offline().Log
	if len(logged) != 2 {
		t.Fatalf("%d receipts logged", len(logged))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// connect links a phone (retrying while the mount's one slot is still
	// taken by the last) and reads its notifications.
	connect := func() (read func() protocol.BLEMessage, write func([]byte), info func() protocol.BLEInfo, hangUp func()) {
		var link sdk.BLELink
		for {
			var err error
			if link, err = air.Central().Connect(ctx, "02:00:00:00:00:01"); err == nil {
				break
			} else if !errors.Is(err, sim.ErrBusy) || ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		msgs := messages(link)
		read = func() protocol.BLEMessage {
			select {
			case m := <-msgs:
				return m
			case <-ctx.Done():
				t.Fatal("no message")
			}
			return protocol.BLEMessage{}
		}
		write = func(raw []byte) {
			for _, f := range protocol.SplitFrames(raw, link.MTU()) {
				if err := link.WriteFrame(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
		}
		info = func() protocol.BLEInfo {
			raw, err := link.ReadInfo(ctx)
			var i protocol.BLEInfo
			if err != nil || json.Unmarshal(raw, &i) != nil {
				t.Fatalf("info %s %v", raw, err)
			}
			return i
		}
		return read, write, info, func() { link.Close() }
	}

	read, write, info, hangUp := connect()
	if first := read(); first.Type != protocol.BLEMessageStates {
		t.Fatalf("first message %+v", first)
	}
	for i := range logged {
		msg := read()
		if msg.Type != protocol.BLEMessageOffline || msg.Signature != logged[i].Signature {
			t.Fatalf("log entry %d: %+v", i, msg)
		}
		o.checkOfflineReceipt(t, msg)
	}
	// A use over the air, with the challenge of an info read.
	i := info()
	if i.LogPending != 2 || !i.TimeTrusted || len(i.Challenge) != 32 {
		t.Fatalf("info %+v", i)
	}
	write(o.use(t, g, string(protocol.CmdReleaseHelmet), i.Challenge, o.rider, ""))
	res := read()
	if res.Type != protocol.BLEMessageOffline || res.Outcome != protocol.OutcomeExecuted {
		t.Fatalf("use over the air: %+v", res)
	}
	o.checkOfflineReceipt(t, res)
	if st := read(); st.Type != protocol.BLEMessageStates || st.States[3].Value != "0" {
		t.Fatalf("states after the use: %+v", st)
	}
	write(o.ack(logged[0].Nonce, res.Nonce))
	if ack := read(); !ack.Accepted || ack.Code != protocol.BLEWriteAck {
		t.Fatalf("ack over the air: %+v", ack)
	}
	if i := info(); i.LogPending != 1 {
		t.Fatalf("after the ack: %+v", i)
	}
	hangUp()

	// Another phone gets what is left: one receipt, then nothing more.
	read, write, _, hangUp = connect()
	defer hangUp()
	if first := read(); first.Type != protocol.BLEMessageStates {
		t.Fatalf("first message %+v", first)
	}
	if msg := read(); msg.Type != protocol.BLEMessageOffline || msg.Signature != logged[1].Signature {
		t.Fatalf("the second phone's log: %+v", msg)
	}
	write(o.ack())
	if msg := read(); msg.Type != protocol.BLEMessageResult || msg.Code != protocol.BLEWriteAck {
		t.Fatalf("after the log: %+v", msg)
	}
}

// TestOnUse: the hook sees every use the mount answered (signed receipts
// and unsigned refusals alike), outside the mount's lock, and no other
// write.
func TestOnUse(t *testing.T) {
	o := newOffline(t)
	var seen []protocol.BLEMessage
	o.cfg.OnUse = func(m *simmount.Mount, res protocol.BLEMessage, took time.Duration) {
		_ = m.Offline() // the mount's lock is free
		if took < 0 {
			t.Errorf("took %v", took)
		}
		seen = append(seen, res)
	}
	o.restart(t)
	g := o.grant(nil)
	stranger, _ := newRider(t)
	o.m.Handle(o.use(t, g, string(protocol.CmdReleaseHelmet), o.m.Challenge(), stranger, ""))
	o.m.Handle(o.release(t, g))
	o.m.Handle(o.revocations(2, 1))
	want := []struct{ typ, outcome, reason string }{
		{protocol.BLEMessageResult, "", protocol.ReasonBadProof},
		{protocol.BLEMessageOffline, protocol.OutcomeExecuted, ""},
	}
	if len(seen) != len(want) {
		t.Fatalf("seen %d uses, want %d: %+v", len(seen), len(want), seen)
	}
	for i, w := range want {
		if seen[i].Type != w.typ || seen[i].Outcome != w.outcome || seen[i].Reason != w.reason {
			t.Errorf("use %d: %+v, want %+v", i, seen[i], w)
		}
	}
	if seen[1].GrantID != g.ID {
		t.Errorf("grant %q, want %q", seen[1].GrantID, g.ID)
	}
}

// BenchmarkUse: the mount's handling of one offline use (the six checks,
// the receipt signed, the state saved in its memory store), and the three
// signature operations alone (the grant's and the proof's checks, the
// receipt's signature): what the handling costs beyond them.
func BenchmarkUse(b *testing.B) {
	o := newOffline(b)
	g := o.grant(nil)
	b.Run("handle", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			if i%200 == 199 {
				var nonces []string
				for _, e := range o.m.Offline().Log {
					nonces = append(nonces, e.Nonce)
				}
				o.m.Handle(o.ack(nonces...))
			}
			raw := o.release(b, g)
			b.StartTimer()
			if res := o.m.Handle(raw); res.Outcome != protocol.OutcomeExecuted {
				b.Fatalf("use refused: %+v", res)
			}
		}
	})
	b.Run("signatures", func(b *testing.B) {
		nonce := protocol.NewNonce()
		proof, err := protocol.SignRider(o.rider, protocol.BuildUseText("M1", g.ID, string(protocol.CmdReleaseHelmet), nonce))
		if err != nil {
			b.Fatal(err)
		}
		_, device := newKey(b)
		for i := 0; i < b.N; i++ {
			grant, err := protocol.VerifyGrant(o.pub, g.text, g.signature)
			rider, _ := protocol.ParseRiderKey(grant.RiderKey)
			if err != nil || !protocol.VerifyRider(rider, protocol.BuildUseText("M1", grant.ID, string(protocol.CmdReleaseHelmet), nonce), proof) {
				b.Fatal("does not verify")
			}
			protocol.Sign(device, "offline;M1;"+grant.ID+";RELEASE_HELMET;"+nonce+";EXECUTED;;1;1")
		}
	})
}
