package protocol

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Offline access (CONTRACT §21, docs/ble.md "Offline access"): the texts a
// grant, a use, an offline receipt, a time token, a revocation list and an
// acknowledgement sign, and the rider's ECDSA P-256 keys. The server signs
// grants, time, revocation lists and acks with the association's owner key
// (Ed25519, Sign); the rider's phone signs uses (SignRider); the mount
// signs offline receipts with its device key (Sign) and checks the rest.
// Every Parse function accepts exactly what its Build function makes, so a
// text has one meaning.

// Offline access limits and lifetimes.
const (
	// GrantIDPrefix starts every grant id; 24 lowercase hex follow.
	GrantIDPrefix = "gr_"
	// MaxRevocations bounds a revocation list's grant ids.
	MaxRevocations = 256
	// MaxOfflineLog is how many unacknowledged EXECUTED receipts a mount
	// keeps before it refuses uses with "log full".
	MaxOfflineLog = 256
	// ChallengeLifetime is how long a mount's challenge (for a use or a time
	// token) stays valid; each is good for one use.
	ChallengeLifetime = 60 * time.Second
	// RiderKeyLength is the length of a rider key: an uncompressed SEC1
	// P-256 point in hex ("04" + X + Y).
	RiderKeyLength = 130
)

// GrantIDLength is the length of a grant id: "gr_" + 24 lowercase hex.
const GrantIDLength = len(GrantIDPrefix) + 24

// Refusal reasons of a use, in the order the mount checks (docs/ble.md,
// "Offline access"). The first three are answered unsigned and leave no
// trace; the others are signed offline receipts.
const (
	ReasonLogFull       = "log full"
	ReasonBadGrant      = "bad grant"
	ReasonBadProof      = "bad proof"
	ReasonRevoked       = "revoked"
	ReasonNotGranted    = "not granted"
	ReasonNoTrustedTime = "no trusted time"
	ReasonNotYetValid   = "not yet valid"
	ReasonExpired       = "expired"
)

// NewGrantID returns a fresh grant id: "gr_" + 24 lowercase hex.
func NewGrantID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return GrantIDPrefix + hex.EncodeToString(b)
}

// ValidGrantID reports whether s is a grant id as NewGrantID makes them.
func ValidGrantID(s string) bool {
	return len(s) == GrantIDLength && strings.HasPrefix(s, GrantIDPrefix) && lowerHex(s[len(GrantIDPrefix):])
}

// Grant is a rider's right, signed by the owner key, to run Rights on
// mount UID between NotBefore and NotAfter with the key RiderKey.
type Grant struct {
	UID       string
	ID        string
	RiderKey  string   // lowercase hex, RiderKeyLength characters
	Rights    []string // command codes; today exactly RELEASE_HELMET
	NotBefore time.Time
	NotAfter  time.Time
	Epoch     int64 // the mount's epoch when it was signed
}

// BuildGrantText renders what a grant's signature covers:
// `grant;<uid>;<id>;<riderKey>;<rights joined by +>;<notBefore ms>;<notAfter ms>;<epoch>`.
func BuildGrantText(g Grant) string {
	return "grant;" + g.UID + ";" + g.ID + ";" + g.RiderKey + ";" + strings.Join(g.Rights, "+") + ";" +
		millis(g.NotBefore) + ";" + millis(g.NotAfter) + ";" + strconv.FormatInt(g.Epoch, 10)
}

// ParseGrantText takes apart what BuildGrantText joined: a grant id, a
// lowercase rider key that is a P-256 point, rights of command codes.
func ParseGrantText(s string) (Grant, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 8 || parts[0] != "grant" || parts[1] == "" || !ValidGrantID(parts[2]) {
		return Grant{}, fmt.Errorf("%w: want grant;<uid>;<id>;<riderKey>;<rights>;<notBefore>;<notAfter>;<epoch>", ErrSignedText)
	}
	if !lowerHex(parts[3]) {
		return Grant{}, fmt.Errorf("%w: rider key not lowercase hex", ErrSignedText)
	}
	if _, err := ParseRiderKey(parts[3]); err != nil {
		return Grant{}, fmt.Errorf("%w: %v", ErrSignedText, err)
	}
	rights := strings.Split(parts[4], "+")
	for _, r := range rights {
		if !validCode(r) {
			return Grant{}, fmt.Errorf("%w: right %q", ErrSignedText, r)
		}
	}
	nb, err1 := parseMillis(parts[5])
	na, err2 := parseMillis(parts[6])
	epoch, err3 := strconv.ParseInt(parts[7], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || epoch < 0 || strconv.FormatInt(epoch, 10) != parts[7] {
		return Grant{}, fmt.Errorf("%w: times or epoch", ErrSignedText)
	}
	return Grant{UID: parts[1], ID: parts[2], RiderKey: parts[3], Rights: rights, NotBefore: nb, NotAfter: na, Epoch: epoch}, nil
}

// VerifyGrant parses a grant text and checks its signature (lowercase hex
// Ed25519) with the owner key. The caller compares the grant's UID with
// the mount's.
func VerifyGrant(owner ed25519.PublicKey, text, signature string) (Grant, error) {
	return verifyParsed(owner, text, signature, ParseGrantText)
}

// verifyParsed parses text, then checks its Ed25519 signature by key:
// ErrSignedText for a malformed text, ErrBadSignature for a bad signature.
func verifyParsed[T any](key ed25519.PublicKey, text, signature string, parse func(string) (T, error)) (T, error) {
	v, err := parse(text)
	if err != nil {
		return v, err
	}
	if !VerifyKey(key, text, signature) {
		var zero T
		return zero, ErrBadSignature
	}
	return v, nil
}

// HasRight reports whether the grant allows code.
func (g Grant) HasRight(code string) bool { return slices.Contains(g.Rights, code) }

// Use is what a rider's proof covers: grant GrantID used for Code on mount
// UID, answering the mount's challenge Nonce.
type Use struct {
	UID, GrantID, Code, Nonce string
}

// BuildUseText renders what a use's proof (the rider's signature)
// covers: `use;<uid>;<grantId>;<code>;<nonce>`.
func BuildUseText(uid, grantID, code, nonce string) string {
	return "use;" + uid + ";" + grantID + ";" + code + ";" + nonce
}

// ParseUseText takes apart what BuildUseText joined.
func ParseUseText(s string) (Use, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 || parts[0] != "use" || parts[1] == "" || !ValidGrantID(parts[2]) || !validCode(parts[3]) || !ValidNonce(parts[4]) {
		return Use{}, fmt.Errorf("%w: want use;<uid>;<grantId>;<code>;<nonce>", ErrSignedText)
	}
	return Use{UID: parts[1], GrantID: parts[2], Code: parts[3], Nonce: parts[4]}, nil
}

// OfflineReceipt is what a mount signs with its device key for a use it
// judged from the revocation check on: executed, or refused with Reason.
type OfflineReceipt struct {
	UID     string
	GrantID string
	Code    string
	Nonce   string // the challenge the use answered: the receipt's id
	Outcome string // OutcomeExecuted or OutcomeRefused
	Reason  string // empty for OutcomeExecuted
	Counter uint64
	At      time.Time // the mount's trusted clock T
}

// BuildOfflineReceiptText renders what an offline receipt's signature
// covers: `offline;<uid>;<grantId>;<code>;<nonce>;<EXECUTED|REFUSED>;<reason>;<counter>;<at ms>`.
func BuildOfflineReceiptText(r OfflineReceipt) string {
	return "offline;" + r.UID + ";" + r.GrantID + ";" + r.Code + ";" + r.Nonce + ";" + r.Outcome + ";" + r.Reason + ";" +
		strconv.FormatUint(r.Counter, 10) + ";" + millis(r.At)
}

// ParseOfflineReceiptText takes apart what BuildOfflineReceiptText joined.
func ParseOfflineReceiptText(s string) (OfflineReceipt, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 9 || parts[0] != "offline" || parts[1] == "" || !ValidGrantID(parts[2]) || !validCode(parts[3]) ||
		!ValidNonce(parts[4]) || (parts[5] != OutcomeExecuted && parts[5] != OutcomeRefused) ||
		(parts[5] == OutcomeExecuted) != (parts[6] == "") {
		return OfflineReceipt{}, fmt.Errorf("%w: want offline;<uid>;<grantId>;<code>;<nonce>;<outcome>;<reason>;<counter>;<at>", ErrSignedText)
	}
	counter, err1 := strconv.ParseUint(parts[7], 10, 64)
	at, err2 := parseMillis(parts[8])
	if err1 != nil || err2 != nil || strconv.FormatUint(counter, 10) != parts[7] {
		return OfflineReceipt{}, fmt.Errorf("%w: counter or time", ErrSignedText)
	}
	return OfflineReceipt{UID: parts[1], GrantID: parts[2], Code: parts[3], Nonce: parts[4], Outcome: parts[5],
		Reason: parts[6], Counter: counter, At: at}, nil
}

// VerifyOfflineReceipt reports whether signature (lowercase hex) is the
// device key's signature of r's text; devicePublicKey is 64 lowercase hex.
func VerifyOfflineReceipt(devicePublicKey string, r OfflineReceipt, signature string) bool {
	return Verify(devicePublicKey, BuildOfflineReceiptText(r), signature)
}

// TimeToken is the server's time, signed for a mount's challenge.
type TimeToken struct {
	UID   string
	At    time.Time // the server's clock, milliseconds
	Nonce string    // a challenge the mount gave out
}

// BuildTimeText renders what a time token's signature covers:
// `time;<uid>;<server Unix ms>;<nonce>`.
func BuildTimeText(uid string, at time.Time, nonce string) string {
	return "time;" + uid + ";" + millis(at) + ";" + nonce
}

// ParseTimeText takes apart what BuildTimeText joined.
func ParseTimeText(s string) (TimeToken, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 4 || parts[0] != "time" || parts[1] == "" || !ValidNonce(parts[3]) {
		return TimeToken{}, fmt.Errorf("%w: want time;<uid>;<ms>;<nonce>", ErrSignedText)
	}
	at, err := parseMillis(parts[2])
	if err != nil {
		return TimeToken{}, fmt.Errorf("%w: time", ErrSignedText)
	}
	return TimeToken{UID: parts[1], At: at, Nonce: parts[3]}, nil
}

// VerifyTimeText parses a time token and checks its owner signature.
func VerifyTimeText(owner ed25519.PublicKey, text, signature string) (TimeToken, error) {
	return verifyParsed(owner, text, signature, ParseTimeText)
}

// Revocations is a mount's revocation list: the revoked grants whose
// notAfter has not passed, at a version and an epoch (both from 1, never
// going back).
type Revocations struct {
	UID      string
	Version  int64
	Epoch    int64
	GrantIDs []string
}

// BuildRevocationsText renders what a revocation list's signature covers:
// `revocations;<uid>;<version>;<epoch>;<grant ids sorted ascending, joined by +>`
// (nothing after the last ';' when the list is empty). It sorts a copy of
// the ids and drops repeats.
func BuildRevocationsText(r Revocations) string {
	ids := slices.Clone(r.GrantIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	return "revocations;" + r.UID + ";" + strconv.FormatInt(r.Version, 10) + ";" + strconv.FormatInt(r.Epoch, 10) + ";" +
		strings.Join(ids, "+")
}

// ParseRevocationsText takes apart what BuildRevocationsText joined: at
// most MaxRevocations grant ids, strictly ascending; version and epoch at
// least 1.
func ParseRevocationsText(s string) (Revocations, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 || parts[0] != "revocations" || parts[1] == "" {
		return Revocations{}, fmt.Errorf("%w: want revocations;<uid>;<version>;<epoch>;<ids>", ErrSignedText)
	}
	version, err1 := strconv.ParseInt(parts[2], 10, 64)
	epoch, err2 := strconv.ParseInt(parts[3], 10, 64)
	if err1 != nil || err2 != nil || version < 1 || epoch < 1 ||
		strconv.FormatInt(version, 10) != parts[2] || strconv.FormatInt(epoch, 10) != parts[3] {
		return Revocations{}, fmt.Errorf("%w: version or epoch", ErrSignedText)
	}
	r := Revocations{UID: parts[1], Version: version, Epoch: epoch}
	if parts[4] == "" {
		return r, nil
	}
	ids := strings.SplitN(parts[4], "+", MaxRevocations+1)
	if len(ids) > MaxRevocations {
		return Revocations{}, fmt.Errorf("%w: more than %d grant ids", ErrSignedText, MaxRevocations)
	}
	for i, id := range ids {
		if !ValidGrantID(id) || (i > 0 && ids[i-1] >= id) {
			return Revocations{}, fmt.Errorf("%w: grant ids not valid and strictly ascending", ErrSignedText)
		}
	}
	r.GrantIDs = ids
	return r, nil
}

// VerifyRevocations parses a revocation list and checks its owner
// signature.
func VerifyRevocations(owner ed25519.PublicKey, text, signature string) (Revocations, error) {
	return verifyParsed(owner, text, signature, ParseRevocationsText)
}

// Ack is the server's acknowledgement of offline receipts: the mount drops
// the receipts of these nonces from its log.
type Ack struct {
	UID    string
	Nonces []string
}

// BuildAckText renders what an ack's signature covers:
// `ack;<uid>;<nonces joined by +>`, nonces in the order given.
func BuildAckText(uid string, nonces []string) string {
	return "ack;" + uid + ";" + strings.Join(nonces, "+")
}

// ParseAckText takes apart what BuildAckText joined: every nonce as
// NewNonce makes them (an empty list acknowledges nothing).
func ParseAckText(s string) (Ack, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 3 || parts[0] != "ack" || parts[1] == "" {
		return Ack{}, fmt.Errorf("%w: want ack;<uid>;<nonces>", ErrSignedText)
	}
	a := Ack{UID: parts[1]}
	if parts[2] == "" {
		return a, nil
	}
	a.Nonces = strings.Split(parts[2], "+")
	for _, n := range a.Nonces {
		if !ValidNonce(n) {
			return Ack{}, fmt.Errorf("%w: nonce %q", ErrSignedText, n)
		}
	}
	return a, nil
}

// VerifyAck parses an ack and checks its owner signature.
func VerifyAck(owner ed25519.PublicKey, text, signature string) (Ack, error) {
	return verifyParsed(owner, text, signature, ParseAckText)
}

// ErrBadSignature is returned by the Verify functions for a text whose
// signature does not verify.
var ErrBadSignature = errors.New("protocol: bad signature")

// VerifyKey reports whether signature (128 lowercase hex) is the Ed25519
// signature of text by key.
func VerifyKey(key ed25519.PublicKey, text, signature string) bool {
	sig, err := hex.DecodeString(signature)
	if len(key) != ed25519.PublicKeySize || err != nil || len(sig) != ed25519.SignatureSize || !lowerHex(signature) {
		return false
	}
	return ed25519.Verify(key, []byte(text), sig)
}

// Rider keys: ECDSA P-256, the public key as an uncompressed SEC1 point
// in hex, signatures over SHA-256 of the text as r‖s (64 bytes) in hex.

// GenerateRiderKey makes a rider key pair.
func GenerateRiderKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

// RiderKeyHex renders a P-256 public key as a riderKey: the uncompressed
// SEC1 point, lowercase hex (RiderKeyLength characters, starting "04").
func RiderKeyHex(pub *ecdsa.PublicKey) (string, error) {
	if pub == nil || pub.Curve != elliptic.P256() {
		return "", errors.New("protocol: rider key: not a P-256 key")
	}
	b, err := pub.Bytes()
	if err != nil {
		return "", fmt.Errorf("protocol: rider key: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ParseRiderKey reads a riderKey (hex in any case): an uncompressed SEC1
// point on P-256.
func ParseRiderKey(s string) (*ecdsa.PublicKey, error) {
	if len(s) != RiderKeyLength || !strings.HasPrefix(s, "04") {
		return nil, fmt.Errorf("protocol: rider key: want %d hex characters starting 04", RiderKeyLength)
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.New("protocol: rider key: not hex")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), b)
	if err != nil {
		return nil, fmt.Errorf("protocol: rider key: %w", err)
	}
	return pub, nil
}

// NormalizeRiderKey checks a riderKey and returns it in lowercase, as it
// is stored and signed.
func NormalizeRiderKey(s string) (string, error) {
	if _, err := ParseRiderKey(s); err != nil {
		return "", err
	}
	return strings.ToLower(s), nil
}

// SignRider signs text with a rider key: ECDSA P-256 over SHA-256 of its
// UTF-8 bytes, r‖s as 128 lowercase hex characters. key is the rider's
// private key, or a signer holding it (secure hardware) whose Sign answers
// ASN.1 DER as crypto/ecdsa does. An *ecdsa.PrivateKey signs
// deterministically (RFC 6979), so test vectors can be recomputed.
func SignRider(key crypto.Signer, text string) (string, error) {
	pub, ok := key.Public().(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return "", errors.New("protocol: rider signature: not a P-256 key")
	}
	digest := sha256.Sum256([]byte(text))
	random := rand.Reader
	if _, soft := key.(*ecdsa.PrivateKey); soft {
		random = nil // RFC 6979
	}
	der, err := key.Sign(random, digest[:], crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("protocol: rider signature: %w", err)
	}
	var rs struct{ R, S *big.Int }
	if rest, err := asn1.Unmarshal(der, &rs); err != nil || len(rest) != 0 || rs.R == nil || rs.S == nil ||
		rs.R.Sign() <= 0 || rs.S.Sign() <= 0 || rs.R.BitLen() > 256 || rs.S.BitLen() > 256 {
		return "", errors.New("protocol: rider signature: the signer answered no ECDSA signature")
	}
	out := make([]byte, 64)
	rs.R.FillBytes(out[:32])
	rs.S.FillBytes(out[32:])
	return hex.EncodeToString(out), nil
}

// VerifyRider reports whether signature (128 lowercase hex, r‖s) is the
// rider key's signature of text.
func VerifyRider(pub *ecdsa.PublicKey, text, signature string) bool {
	if pub == nil || pub.Curve != elliptic.P256() || len(signature) != 128 || !lowerHex(signature) {
		return false
	}
	raw, err := hex.DecodeString(signature)
	if err != nil {
		return false
	}
	digest := sha256.Sum256([]byte(text))
	r, s := new(big.Int).SetBytes(raw[:32]), new(big.Int).SetBytes(raw[32:])
	return ecdsa.Verify(pub, digest[:], r, s)
}

// validCode reports whether s can stand as a command code in a signed
// text: 1 to 64 of A-Z, 0-9 and '_' (so no separator slips in).
func validCode(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !('A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// parseMillis reads Unix milliseconds written as millis writes them (no
// sign other than '-', no leading zeros), so a text has one spelling.
func parseMillis(s string) (time.Time, error) {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(ms, 10) != s {
		return time.Time{}, fmt.Errorf("not Unix milliseconds: %q", s)
	}
	return time.UnixMilli(ms).UTC(), nil
}
