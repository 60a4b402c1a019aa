package protocol

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"testing"
	"time"
)

// The test vector of docs/ble.md ("Signed messages"): RFC 8032's first
// test key, so a firmware engineer can check their implementation.
const (
	vectorSeed      = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60"
	vectorPublicKey = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
)

func TestSignedTextVectors(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	key := ed25519.NewKeyFromSeed(seed)
	if got := hex.EncodeToString(key.Public().(ed25519.PublicKey)); got != vectorPublicKey {
		t.Fatalf("public key %s", got)
	}
	at := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name, text, signature string
	}{
		{"report", BuildReportText(Report{UID: "M-1", Counter: 42, SoftwareRevision: "1.4.2", Entries: []ReportEntry{
			{StateMountLocked, "1", at}, {StateHelmetMounted, "1", at}, {StateBatteryLevel, "87", at.Add(-1500 * time.Millisecond)}}}),
			"04ad0bbdb6cca42188b7c6005738c7d4500c2f77c41945021915dcfc7637a1f18d3135660591923bf93ccf5ed1387bb635845c2092c42a3826cfb7177d275602"},
		{"executed", BuildReceiptText(Receipt{UID: "M-1", Nonce: "0123456789abcdef0123456789abcdef", Outcome: OutcomeExecuted, Counter: 43, At: at.Add(250 * time.Millisecond)}),
			"88c05c2af1338f93f322c0c3e7220438b70bfcca6b1549f613394583f720d2be7f3a98e420334507418ba7494a97e0b0d2bc308d46a8a399e14ed6ac8050850e"},
		{"refused", BuildReceiptText(Receipt{UID: "M-1", Nonce: "fedcba9876543210fedcba9876543210", Outcome: OutcomeRefused, Reason: "stale command", Counter: 44, At: at.Add(time.Second)}),
			"325d078eb1f5d1cffbd50ef97a390748759beed310d58a11bec10e49d1b0d0bef2e6d4d77006ea9b6be95e7353e95e6cfbd95acb4c4cc5be195b0bb5d35c6c01"},
	}
	wantTexts := map[string]string{
		"report":   "report;M-1;42;1.4.2;MOUNT_LOCKED=1@1795687200000,HELMET_MOUNTED=1@1795687200000,BATTERY_LEVEL=87@1795687198500",
		"executed": "result;M-1;0123456789abcdef0123456789abcdef;EXECUTED;;43;1795687200250",
		"refused":  "result;M-1;fedcba9876543210fedcba9876543210;REFUSED;stale command;44;1795687201000",
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.text != wantTexts[tc.name] {
				t.Fatalf("text %q, want %q", tc.text, wantTexts[tc.name])
			}
			if got := Sign(key, tc.text); got != tc.signature {
				t.Fatalf("signature %s", got)
			}
			if !Verify(vectorPublicKey, tc.text, tc.signature) {
				t.Fatal("does not verify")
			}
			if Verify(vectorPublicKey, tc.text+"0", tc.signature) {
				t.Fatal("an altered text verifies")
			}
		})
	}
}

func TestSignedTextsRoundTrip(t *testing.T) {
	at := time.UnixMilli(1795687200123).UTC()
	r := Report{UID: "M-1", Counter: 7, SoftwareRevision: "2.0.0", Entries: []ReportEntry{{StateBatteryLevel, "15.5", at}}}
	got, err := ParseReportText(BuildReportText(r))
	if err != nil || got.UID != r.UID || got.Counter != 7 || got.SoftwareRevision != "2.0.0" || len(got.Entries) != 1 ||
		got.Entries[0] != r.Entries[0] {
		t.Fatalf("report %+v %v", got, err)
	}
	rc := Receipt{UID: "M-1", Nonce: "0123456789abcdef0123456789abcdef", Outcome: OutcomeRefused, Reason: "replayed nonce", Counter: 9, At: at}
	gotRc, err := ParseReceiptText(BuildReceiptText(rc))
	if err != nil || gotRc != rc {
		t.Fatalf("receipt %+v %v", gotRc, err)
	}
}

func TestParseSignedTextRefuses(t *testing.T) {
	for _, s := range []string{"", "report;M-1;x;1;", "report;;1;1;", "report;M-1;1;1;A=1", "state;M-1;1;1;",
		"result;M-1;0123456789abcdef0123456789abcdef;EXECUTED;why;1;1",
		"result;M-1;0123456789abcdef0123456789abcdef;REFUSED;;1;1",
		"result;M-1;nonce;EXECUTED;;1;1", "result;M-1;0123456789abcdef0123456789abcdef;DONE;;1;1"} {
		_, err1 := ParseReportText(s)
		_, err2 := ParseReceiptText(s)
		if !errors.Is(err1, ErrSignedText) || !errors.Is(err2, ErrSignedText) {
			t.Errorf("%q: %v / %v", s, err1, err2)
		}
	}
}

func TestVerifyRefusesMalformedKeysAndSignatures(t *testing.T) {
	sig := "04ad0bbdb6cca42188b7c6005738c7d4500c2f77c41945021915dcfc7637a1f18d3135660591923bf93ccf5ed1387bb635845c2092c42a3826cfb7177d275602"
	text := "report;M-1;42;1.4.2;MOUNT_LOCKED=1@1795687200000,HELMET_MOUNTED=1@1795687200000,BATTERY_LEVEL=87@1795687198500"
	for _, c := range []struct{ key, sig string }{{"", sig}, {"zz", sig}, {vectorPublicKey[:62], sig},
		{"D75A980182B10AB7D54BFED3C964073A0EE172F3DAA62325AF021A68F707511A", sig}, {vectorPublicKey, ""}, {vectorPublicKey, sig[:126]}} {
		if Verify(c.key, text, c.sig) {
			t.Errorf("verified with key %q sig %q", c.key, c.sig)
		}
	}
}
