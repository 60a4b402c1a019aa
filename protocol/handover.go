package protocol

import (
	"crypto/ed25519"
	"encoding/hex"
	"strings"
)

// MaxHandoverSignatures bounds data.handover of an ASSOCIATE_OWNER: the
// last confirmed association's signature and those of the keys issued
// after it (docs/ble.md, "Hand-over"). A mount reads no more than these.
const MaxHandoverSignatures = 16

// HandoverSeparator joins the signatures of data.handover.
const HandoverSeparator = "+"

// JoinHandover renders data.handover from signatures (lowercase hex, the
// confirmed key's first).
func JoinHandover(signatures []string) string {
	return strings.Join(signatures, HandoverSeparator)
}

// VerifyHandover reports whether one of handover's signatures (lowercase
// hex Ed25519 signatures of payload joined by '+', at most
// MaxHandoverSignatures) verifies with owner, the key the mount holds.
func VerifyHandover(owner ed25519.PublicKey, payload, handover string) bool {
	if len(owner) != ed25519.PublicKeySize || handover == "" {
		return false
	}
	sigs := strings.SplitN(handover, HandoverSeparator, MaxHandoverSignatures+1)
	if len(sigs) > MaxHandoverSignatures {
		return false
	}
	for _, s := range sigs {
		sig, err := hex.DecodeString(s)
		if err != nil || len(sig) != ed25519.SignatureSize || !lowerHex(s) {
			continue
		}
		if ed25519.Verify(owner, []byte(payload), sig) {
			return true
		}
	}
	return false
}
