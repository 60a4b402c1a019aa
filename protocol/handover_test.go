package protocol

import (
	"crypto/ed25519"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"
)

// The hand-over vector of docs/ble.md ("Hand-over"): the mount holds RFC
// 8032's first test key as its owner key; the ASSOCIATE_OWNER brings the
// second test key's public half.
const (
	handoverPayload = "1795687200000;ASSOCIATE_OWNER;M-1;accountId=acc_1,publicKey=3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c;00112233445566778899aabbccddeeff"
	handoverByOwner = "6f8f99c36dd8f49aea87c19cb043c5f55bc39bbf19386c87074201eb9c2206e34f6d339f6b509b8b5e81862b15c9d487f01980101733f147d3e6ee6140614b0b"
	handoverByOther = "872200c24f0eb0887ec761580aba7d3ac3a0be1cfcc38cae1ee8d91c8266bcc7594ec8733e0270be9bb29d8dde58cc26479e42964fc5e233f35b690f9fff0f0c"
	vector2Seed     = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb"
)

func TestHandoverVector(t *testing.T) {
	seed, _ := hex.DecodeString(vectorSeed)
	owner := ed25519.NewKeyFromSeed(seed)
	seed2, _ := hex.DecodeString(vector2Seed)
	other := ed25519.NewKeyFromSeed(seed2)
	payload := BuildPayload(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC), string(CmdAssociateOwner), "M-1",
		map[string]string{"accountId": "acc_1", "publicKey": hex.EncodeToString(other.Public().(ed25519.PublicKey))},
		"00112233445566778899aabbccddeeff")
	if payload != handoverPayload {
		t.Fatalf("payload %q", payload)
	}
	if got := Sign(owner, payload); got != handoverByOwner {
		t.Fatalf("owner's signature %s", got)
	}
	if got := Sign(other, payload); got != handoverByOther {
		t.Fatalf("other key's signature %s", got)
	}
	pub := owner.Public().(ed25519.PublicKey)
	tests := []struct {
		name, handover string
		ok             bool
	}{
		{"owner's", handoverByOwner, true},
		{"joined, owner's second", JoinHandover([]string{handoverByOther, handoverByOwner}), true},
		{"joined, owner's first", handoverByOwner + "+" + handoverByOther, true},
		{"another key's", handoverByOther, false},
		{"none", "", false},
		{"upper case", strings.ToUpper(handoverByOwner), false},
		{"empty part", "+" + handoverByOther, false},
		{"altered", "0" + handoverByOwner[1:], false},
		{"too many", strings.Repeat(handoverByOther+"+", MaxHandoverSignatures) + handoverByOwner, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := VerifyHandover(pub, payload, tc.handover); got != tc.ok {
				t.Fatalf("VerifyHandover = %v", got)
			}
		})
	}
	if VerifyHandover(pub, payload+"0", handoverByOwner) {
		t.Fatal("a hand-over verifies for another payload")
	}
	// docs/ble.md prints the same bytes.
	doc, err := os.ReadFile("../docs/ble.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{handoverPayload, handoverByOwner, handoverByOther, vector2Seed} {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/ble.md does not print %s", want)
		}
	}
}
