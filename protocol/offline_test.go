package protocol

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"encoding/hex"
	"errors"
	"math/big"
	"os"
	"strings"
	"testing"
	"time"
)

// The offline vectors of docs/ble.md ("Offline access", "Test vectors"):
// the owner key is RFC 8032's first test key, the device key its second,
// the rider key RFC 6979's P-256 key (appendix A.2.5).
const (
	riderScalar = "c9afa9d845ba75166b5c215767b1d6934e50c3db36e89b127b8a622b120f6721"
	riderKeyHex = "0460fed4ba255a9d31c961eb74c6356d68c049b8923b61fa6ce669622e60f29fb67903fe1008b8bc99a41ae9e95628bc64f2f1b20c2d7e9f5177a3c294d4462299"
	vectorGrant = "gr_00112233445566778899aabb"
)

type offlineVector struct {
	name, text, signature string
	by                    string // owner, device or rider
}

var offlineVectors = []offlineVector{
	{"grant", "grant;M-1;gr_00112233445566778899aabb;" + riderKeyHex + ";RELEASE_HELMET;1795687200000;1795730400000;1",
		"876582ba87df578e6545ba1909dde5b613893360eb8f84ed18da97972db19da736109488e2b615ddaed99782b4ca685b079efa7ce94f2b1fadfa9d859928290a", "owner"},
	{"use", "use;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef",
		"23ba0e8179e9c83dc9d350b7496c36b30b533f6fd5a9a8997353de3bc226e77dbbaac3e20a7bc1870376a4fc7dc95305ff5d4f18ec3bfc5454cdb2dfb29be456", "rider"},
	{"offline executed", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;EXECUTED;;45;1795687500000",
		"8833514ad597522bd07f2f9f98787b4b536cbdf6502c77be50b7198ed18865c54f2d14a1f1a15e9218423f5ae5e942ea7738a54acd4a43635eebc3af9af29203", "device"},
	{"offline refused", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;00112233445566778899aabbccddeeff;REFUSED;revoked;46;1795687560000",
		"2e249b3074ccc896fa62af05bf87fdfccee375817d7cebd54f841b5ad0fadc84748af09600c1f897f40c18eecc25903347cbc38ba800f9e66d0ae753211f450e", "device"},
	{"time", "time;M-1;1795687200000;fedcba9876543210fedcba9876543210",
		"56c60a3d7a8abda0b5e0a40ac0a6f3b0e1e8f3d115ba8b8f2c0b87409207fbc51a107115019f64c229783643aee6237aef7d8c7ced8ef44d5196dad1dfd0d303", "owner"},
	{"revocations", "revocations;M-1;3;1;gr_00112233445566778899aabb+gr_ffeeddccbbaa998877665544",
		"cc76744daefbb6c30b4f747e89e2ca7af73bdeba2f4faeb989c2a49727198addecb80bf16ae598095bc6bc52336d88265da8183dcaffdbb53ff7cd269be4160b", "owner"},
	{"empty revocations", "revocations;M-1;1;1;",
		"3d995d8366c8daeeff69684622627d06f171e4fcf6b376a946a8f846a1bd6b1b8ab023d0cf597d594a5d50535d945d00ce37841bba4301d559554bffdeade405", "owner"},
	{"ack", "ack;M-1;0123456789abcdef0123456789abcdef+fedcba9876543210fedcba9876543210",
		"465f188046b9d791563214d0296ed51a914577e555a964b2f427ab07b1b8c92108962d720e733e6981c880db4110c4e56997c976a094bc36d76e23fe8a538e06", "owner"},
}

func vectorKeys(t *testing.T) (owner, device ed25519.PrivateKey, rider *ecdsa.PrivateKey) {
	t.Helper()
	seed, _ := hex.DecodeString(vectorSeed)
	seed2, _ := hex.DecodeString(vector2Seed)
	d, _ := hex.DecodeString(riderScalar)
	rider, err := ecdsa.ParseRawPrivateKey(elliptic.P256(), d)
	if err != nil {
		t.Fatal(err)
	}
	return ed25519.NewKeyFromSeed(seed), ed25519.NewKeyFromSeed(seed2), rider
}

// TestOfflineVectors rebuilds every text of docs/ble.md's offline vectors
// from its fields, signs it with the same keys, and finds both in the doc.
func TestOfflineVectors(t *testing.T) {
	owner, device, rider := vectorKeys(t)
	if got, err := RiderKeyHex(&rider.PublicKey); err != nil || got != riderKeyHex {
		t.Fatalf("rider key %s %v", got, err)
	}
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	built := map[string]string{
		"grant": BuildGrantText(Grant{UID: "M-1", ID: vectorGrant, RiderKey: riderKeyHex, Rights: []string{"RELEASE_HELMET"},
			NotBefore: at, NotAfter: at.Add(12 * time.Hour), Epoch: 1}),
		"use": BuildUseText("M-1", vectorGrant, "RELEASE_HELMET", "0123456789abcdef0123456789abcdef"),
		"offline executed": BuildOfflineReceiptText(OfflineReceipt{UID: "M-1", GrantID: vectorGrant, Code: "RELEASE_HELMET",
			Nonce: "0123456789abcdef0123456789abcdef", Outcome: OutcomeExecuted, Counter: 45, At: at.Add(5 * time.Minute)}),
		"offline refused": BuildOfflineReceiptText(OfflineReceipt{UID: "M-1", GrantID: vectorGrant, Code: "RELEASE_HELMET",
			Nonce: "00112233445566778899aabbccddeeff", Outcome: OutcomeRefused, Reason: ReasonRevoked, Counter: 46, At: at.Add(6 * time.Minute)}),
		"time": BuildTimeText("M-1", at, "fedcba9876543210fedcba9876543210"),
		"revocations": BuildRevocationsText(Revocations{UID: "M-1", Version: 3, Epoch: 1,
			GrantIDs: []string{"gr_ffeeddccbbaa998877665544", vectorGrant}}),
		"empty revocations": BuildRevocationsText(Revocations{UID: "M-1", Version: 1, Epoch: 1}),
		"ack":               BuildAckText("M-1", []string{"0123456789abcdef0123456789abcdef", "fedcba9876543210fedcba9876543210"}),
	}
	doc, err := os.ReadFile("../docs/ble.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range offlineVectors {
		t.Run(v.name, func(t *testing.T) {
			if built[v.name] != v.text {
				t.Fatalf("text %q, want %q", built[v.name], v.text)
			}
			var sig string
			switch v.by {
			case "owner":
				sig = Sign(owner, v.text)
			case "device":
				sig = Sign(device, v.text)
			default:
				if sig, err = SignRider(rider, v.text); err != nil {
					t.Fatal(err)
				}
				if !VerifyRider(&rider.PublicKey, v.text, v.signature) {
					t.Fatal("the documented proof does not verify")
				}
			}
			if sig != v.signature {
				t.Fatalf("signature %s, want %s", sig, v.signature)
			}
			for _, want := range []string{v.text, v.signature} {
				if !strings.Contains(string(doc), want) {
					t.Errorf("docs/ble.md does not print %s", want)
				}
			}
		})
	}
	for _, want := range []string{riderScalar, riderKeyHex, vectorSeed, vector2Seed} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/ble.md does not print %s", want)
		}
	}
}

// SignRider is RFC 6979 deterministic ECDSA: the RFC's own P-256/SHA-256
// signature of "sample" (appendix A.2.5).
func TestSignRiderRFC6979(t *testing.T) {
	_, _, rider := vectorKeys(t)
	sig, err := SignRider(rider, "sample")
	if err != nil {
		t.Fatal(err)
	}
	want := "efd48b2aacb6a8fd1140dd9cd45e81d69d2c877b56aaf991c34d0ea84eaf3716" +
		"f7cb1c942d657c41d436c7a1b6e29f65f3e900dbb9aff4064dc4ab2f843acda8"
	if sig != want {
		t.Fatalf("signature %s", sig)
	}
}

func TestRiderKeys(t *testing.T) {
	priv, err := GenerateRiderKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := RiderKeyHex(&priv.PublicKey)
	if err != nil || len(key) != RiderKeyLength || !strings.HasPrefix(key, "04") || strings.ToLower(key) != key {
		t.Fatalf("rider key %q %v", key, err)
	}
	pub, err := ParseRiderKey(strings.ToUpper(key))
	if err != nil || !pub.Equal(&priv.PublicKey) {
		t.Fatalf("upper case: %v", err)
	}
	if n, err := NormalizeRiderKey(strings.ToUpper(key)); err != nil || n != key {
		t.Fatalf("normalised %q %v", n, err)
	}
	sig, err := SignRider(priv, "use;M-1;x")
	if err != nil || len(sig) != 128 || !VerifyRider(pub, "use;M-1;x", sig) {
		t.Fatalf("signature %q %v", sig, err)
	}
	other, _ := GenerateRiderKey()
	raw, _ := hex.DecodeString(sig)
	n := new(big.Int).SetBytes(raw[32:])
	highS := new(big.Int).Sub(elliptic.P256().Params().N, n).FillBytes(make([]byte, 32))
	rejected := map[string]struct {
		pub       *ecdsa.PublicKey
		text, sig string
	}{
		"another text":       {pub, "use;M-1;y", sig},
		"another key":        {&other.PublicKey, "use;M-1;x", sig},
		"upper case":         {pub, "use;M-1;x", strings.ToUpper(sig)},
		"short":              {pub, "use;M-1;x", sig[:126]},
		"not hex":            {pub, "use;M-1;x", "zz" + sig[2:]},
		"zero":               {pub, "use;M-1;x", strings.Repeat("0", 128)},
		"no key":             {nil, "use;M-1;x", sig},
		"s replaced by n−s ": {pub, "use;M-1;y", sig[:64] + hex.EncodeToString(highS)},
	}
	for name, tc := range rejected {
		if VerifyRider(tc.pub, tc.text, tc.sig) {
			t.Errorf("%s: verifies", name)
		}
	}
	for _, bad := range []string{
		"", key[:128], "05" + key[2:], key + "00", "04" + strings.Repeat("0", 128), // not on the curve
		"04" + strings.Repeat("g", 128),
	} {
		if _, err := ParseRiderKey(bad); err == nil {
			t.Errorf("rider key %q accepted", bad)
		}
	}
	if _, err := RiderKeyHex(nil); err == nil {
		t.Error("nil key rendered")
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), nil)
	if _, err := SignRider(p384, "x"); err == nil {
		t.Error("a P-384 key signed")
	}
}

func TestOfflineTextsRoundTrip(t *testing.T) {
	at := time.UnixMilli(1795687200123).UTC()
	g := Grant{UID: "M-1", ID: NewGrantID(), RiderKey: riderKeyHex, Rights: []string{"RELEASE_HELMET", "OTHER_RIGHT"},
		NotBefore: at, NotAfter: at.Add(time.Hour), Epoch: 7}
	if got, err := ParseGrantText(BuildGrantText(g)); err != nil || BuildGrantText(got) != BuildGrantText(g) ||
		!got.NotBefore.Equal(g.NotBefore) || !got.HasRight("OTHER_RIGHT") || got.HasRight("X") {
		t.Fatalf("grant %+v %v", got, err)
	}
	u := Use{UID: "M-1", GrantID: g.ID, Code: "RELEASE_HELMET", Nonce: NewNonce()}
	if got, err := ParseUseText(BuildUseText(u.UID, u.GrantID, u.Code, u.Nonce)); err != nil || got != u {
		t.Fatalf("use %+v %v", got, err)
	}
	for _, r := range []OfflineReceipt{
		{UID: "M-1", GrantID: g.ID, Code: "RELEASE_HELMET", Nonce: NewNonce(), Outcome: OutcomeExecuted, Counter: 9, At: at},
		{UID: "M-1", GrantID: g.ID, Code: "RELEASE_HELMET", Nonce: NewNonce(), Outcome: OutcomeRefused, Reason: ReasonNoTrustedTime, Counter: 10, At: at},
	} {
		if got, err := ParseOfflineReceiptText(BuildOfflineReceiptText(r)); err != nil || got != r {
			t.Fatalf("offline receipt %+v %v", got, err)
		}
	}
	tt := TimeToken{UID: "M-1", At: at, Nonce: NewNonce()}
	if got, err := ParseTimeText(BuildTimeText(tt.UID, tt.At, tt.Nonce)); err != nil || got != tt {
		t.Fatalf("time %+v %v", got, err)
	}
	rv := Revocations{UID: "M-1", Version: 4, Epoch: 2, GrantIDs: []string{"gr_bbbbbbbbbbbbbbbbbbbbbbbb", "gr_aaaaaaaaaaaaaaaaaaaaaaaa", "gr_bbbbbbbbbbbbbbbbbbbbbbbb"}}
	got, err := ParseRevocationsText(BuildRevocationsText(rv))
	if err != nil || strings.Join(got.GrantIDs, ",") != "gr_aaaaaaaaaaaaaaaaaaaaaaaa,gr_bbbbbbbbbbbbbbbbbbbbbbbb" || got.Version != 4 || got.Epoch != 2 {
		t.Fatalf("revocations %+v %v", got, err)
	}
	if rv.GrantIDs[0] != "gr_bbbbbbbbbbbbbbbbbbbbbbbb" {
		t.Fatal("BuildRevocationsText sorted the caller's slice")
	}
	a := Ack{UID: "M-1", Nonces: []string{NewNonce(), NewNonce()}}
	if got, err := ParseAckText(BuildAckText(a.UID, a.Nonces)); err != nil || strings.Join(got.Nonces, "+") != strings.Join(a.Nonces, "+") {
		t.Fatalf("ack %+v %v", got, err)
	}
	if got, err := ParseAckText(BuildAckText("M-1", nil)); err != nil || len(got.Nonces) != 0 {
		t.Fatalf("empty ack %+v %v", got, err)
	}
}

func TestOfflineTextsRejected(t *testing.T) {
	grant := "grant;M-1;gr_00112233445566778899aabb;" + riderKeyHex + ";RELEASE_HELMET;1795687200000;1795730400000;1"
	many := make([]string, MaxRevocations+1)
	for i := range many {
		many[i] = GrantIDPrefix + strings.Repeat("0", 18) + hex.EncodeToString([]byte{0, 0, byte(i >> 8), byte(i)})[2:]
	}
	tests := []struct {
		name, text string
		parse      func(string) error
	}{
		{"grant: 7 fields", strings.TrimSuffix(grant, ";1"), parseGrant},
		{"grant: other kind", "grunt" + grant[5:], parseGrant},
		{"grant: empty uid", strings.Replace(grant, ";M-1;", ";;", 1), parseGrant},
		{"grant: bad id", strings.Replace(grant, "gr_00", "gr_0", 1), parseGrant},
		{"grant: upper-case id", strings.Replace(grant, "aabb", "AABB", 1), parseGrant},
		{"grant: upper-case rider key", strings.Replace(grant, riderKeyHex, strings.ToUpper(riderKeyHex), 1), parseGrant},
		{"grant: rider key off the curve", strings.Replace(grant, riderKeyHex, "04"+strings.Repeat("1", 128), 1), parseGrant},
		{"grant: no rights", strings.Replace(grant, "RELEASE_HELMET", "", 1), parseGrant},
		{"grant: empty right", strings.Replace(grant, "RELEASE_HELMET", "RELEASE_HELMET+", 1), parseGrant},
		{"grant: lower-case right", strings.Replace(grant, "RELEASE_HELMET", "release", 1), parseGrant},
		{"grant: time not ms", strings.Replace(grant, "1795687200000", "2026-11-26", 1), parseGrant},
		{"grant: leading zero", strings.Replace(grant, ";1795687200000", ";01795687200000", 1), parseGrant},
		{"grant: negative epoch", strings.TrimSuffix(grant, "1") + "-1", parseGrant},
		{"use: bad nonce", "use;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123", parseUse},
		{"use: extra field", "use;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;x", parseUse},
		{"offline: executed with a reason", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;EXECUTED;x;45;1795687500000", parseOffline},
		{"offline: refused without one", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;REFUSED;;45;1795687500000", parseOffline},
		{"offline: other outcome", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;DONE;;45;1795687500000", parseOffline},
		{"offline: negative counter", "offline;M-1;gr_00112233445566778899aabb;RELEASE_HELMET;0123456789abcdef0123456789abcdef;EXECUTED;;-1;1795687500000", parseOffline},
		{"time: bad nonce", "time;M-1;1795687200000;xyz", parseTime},
		{"time: bad ms", "time;M-1;soon;fedcba9876543210fedcba9876543210", parseTime},
		{"revocations: version 0", "revocations;M-1;0;1;", parseRevocations},
		{"revocations: epoch 0", "revocations;M-1;1;0;", parseRevocations},
		{"revocations: unsorted", "revocations;M-1;3;1;gr_ffeeddccbbaa998877665544+gr_00112233445566778899aabb", parseRevocations},
		{"revocations: repeated", "revocations;M-1;3;1;gr_00112233445566778899aabb+gr_00112233445566778899aabb", parseRevocations},
		{"revocations: not a grant id", "revocations;M-1;3;1;gr_1", parseRevocations},
		{"revocations: over the bound", "revocations;M-1;3;1;" + strings.Join(many, "+"), parseRevocations},
		{"revocations: no trailing field", "revocations;M-1;1;1", parseRevocations},
		{"ack: bad nonce", "ack;M-1;0123", parseAck},
		{"ack: empty nonce", "ack;M-1;0123456789abcdef0123456789abcdef+", parseAck},
	}
	for _, tc := range tests {
		if err := tc.parse(tc.text); !errors.Is(err, ErrSignedText) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	if _, err := ParseRevocationsText("revocations;M-1;3;1;" + strings.Join(many[:MaxRevocations], "+")); err != nil {
		t.Errorf("%d ids refused: %v", MaxRevocations, err)
	}
}

func parseGrant(s string) error       { _, err := ParseGrantText(s); return err }
func parseUse(s string) error         { _, err := ParseUseText(s); return err }
func parseOffline(s string) error     { _, err := ParseOfflineReceiptText(s); return err }
func parseTime(s string) error        { _, err := ParseTimeText(s); return err }
func parseRevocations(s string) error { _, err := ParseRevocationsText(s); return err }
func parseAck(s string) error         { _, err := ParseAckText(s); return err }

func TestOfflineVerify(t *testing.T) {
	owner, device, _ := vectorKeys(t)
	pub := owner.Public().(ed25519.PublicKey)
	devicePub := hex.EncodeToString(device.Public().(ed25519.PublicKey))
	for _, v := range offlineVectors {
		var err error
		switch v.name {
		case "grant":
			_, err = VerifyGrant(pub, v.text, v.signature)
			if _, bad := VerifyGrant(pub, v.text, offlineVectors[4].signature); !errors.Is(bad, ErrBadSignature) {
				t.Errorf("grant with another text's signature: %v", bad)
			}
		case "time":
			_, err = VerifyTimeText(pub, v.text, v.signature)
			if _, bad := VerifyTimeText(device.Public().(ed25519.PublicKey), v.text, v.signature); !errors.Is(bad, ErrBadSignature) {
				t.Errorf("time token by another key: %v", bad)
			}
		case "revocations", "empty revocations":
			_, err = VerifyRevocations(pub, v.text, v.signature)
		case "ack":
			_, err = VerifyAck(pub, v.text, v.signature)
			if _, bad := VerifyAck(pub, v.text, strings.ToUpper(v.signature)); !errors.Is(bad, ErrBadSignature) {
				t.Errorf("upper-case signature: %v", bad)
			}
		case "offline executed", "offline refused":
			r, perr := ParseOfflineReceiptText(v.text)
			if perr != nil || !VerifyOfflineReceipt(devicePub, r, v.signature) {
				t.Errorf("%s does not verify: %v", v.name, perr)
			}
			r.Counter++
			if VerifyOfflineReceipt(devicePub, r, v.signature) {
				t.Errorf("%s verifies with another counter", v.name)
			}
		}
		if err != nil {
			t.Errorf("%s: %v", v.name, err)
		}
	}
	if _, err := VerifyAck(pub, "ack;M-1;nope", offlineVectors[7].signature); !errors.Is(err, ErrSignedText) {
		t.Errorf("malformed ack: %v", err)
	}
}

func TestOfflineMessage(t *testing.T) {
	counter := uint64(45)
	msg := BLEMessage{Type: BLEMessageOffline, GrantID: vectorGrant, Code: "RELEASE_HELMET", Nonce: "0123456789abcdef0123456789abcdef",
		Accepted: true, Outcome: OutcomeExecuted, Counter: &counter, At: "2026-11-26T10:05:00.000Z"}
	r, err := msg.OfflineReceipt("M-1")
	if err != nil || BuildOfflineReceiptText(r) != offlineVectors[2].text {
		t.Fatalf("%+v %v", r, err)
	}
	msg.Type = BLEMessageResult
	if _, err := msg.OfflineReceipt("M-1"); err == nil {
		t.Fatal("a result taken for an offline receipt")
	}
	msg.Type, msg.At = BLEMessageOffline, "yesterday"
	if _, err := msg.OfflineReceipt("M-1"); err == nil {
		t.Fatal("a bad time accepted")
	}
}
