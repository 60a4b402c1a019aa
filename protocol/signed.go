package protocol

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What a mount signs with its device key (docs/ble.md, "Signed messages"):
// its state reports and the receipts of the commands it ran or refused.
// The server verifies them; the phone only carries them, unchanged.

// Outcomes a receipt states.
const (
	OutcomeExecuted = "EXECUTED"
	OutcomeRefused  = "REFUSED"
)

// ErrSignedText is returned for a text not in the shape its Build function
// makes.
var ErrSignedText = errors.New("protocol: malformed signed text")

// ReportEntry is one state entry as a signed report covers it.
type ReportEntry struct {
	Code       StateCode
	Value      string
	OccurredAt time.Time
}

// Report is a signed states message taken apart.
type Report struct {
	UID              string
	Counter          uint64
	SoftwareRevision string
	Entries          []ReportEntry
}

// BuildReportText renders what a report's signature covers:
// `report;<uid>;<counter>;<softwareRevision>;<entries>`, entries as
// `<code>=<value>@<occurredAt as Unix ms>` joined by ',' in message order.
func BuildReportText(r Report) string {
	var b strings.Builder
	b.WriteString("report;")
	b.WriteString(r.UID)
	b.WriteByte(';')
	b.WriteString(strconv.FormatUint(r.Counter, 10))
	b.WriteByte(';')
	b.WriteString(r.SoftwareRevision)
	b.WriteByte(';')
	for i, e := range r.Entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(e.Code))
		b.WriteByte('=')
		b.WriteString(e.Value)
		b.WriteByte('@')
		b.WriteString(strconv.FormatInt(e.OccurredAt.UnixMilli(), 10))
	}
	return b.String()
}

// ParseReportText takes apart what BuildReportText joined.
func ParseReportText(s string) (Report, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 || parts[0] != "report" || parts[1] == "" {
		return Report{}, fmt.Errorf("%w: want report;<uid>;<counter>;<softwareRevision>;<entries>", ErrSignedText)
	}
	counter, err := strconv.ParseUint(parts[2], 10, 64)
	if err != nil {
		return Report{}, fmt.Errorf("%w: counter %q", ErrSignedText, parts[2])
	}
	r := Report{UID: parts[1], Counter: counter, SoftwareRevision: parts[3]}
	if parts[4] == "" {
		return r, nil
	}
	for _, item := range strings.Split(parts[4], ",") {
		code, rest, ok1 := strings.Cut(item, "=")
		value, at, ok2 := strings.Cut(rest, "@")
		ms, err := strconv.ParseInt(at, 10, 64)
		if !ok1 || !ok2 || code == "" || err != nil {
			return Report{}, fmt.Errorf("%w: entry %q", ErrSignedText, item)
		}
		r.Entries = append(r.Entries, ReportEntry{Code: StateCode(code), Value: value, OccurredAt: time.UnixMilli(ms).UTC()})
	}
	return r, nil
}

// Receipt is a signed result message taken apart: what the mount did with
// the command whose payload carried Nonce.
type Receipt struct {
	UID     string
	Nonce   string
	Outcome string // OutcomeExecuted or OutcomeRefused
	Reason  string // empty for OutcomeExecuted
	Counter uint64
	At      time.Time // the mount's clock
}

// BuildReceiptText renders what a receipt's signature covers:
// `result;<uid>;<nonce>;<EXECUTED|REFUSED>;<reason>;<counter>;<at as Unix ms>`.
func BuildReceiptText(r Receipt) string {
	return "result;" + r.UID + ";" + r.Nonce + ";" + r.Outcome + ";" + r.Reason + ";" +
		strconv.FormatUint(r.Counter, 10) + ";" + strconv.FormatInt(r.At.UnixMilli(), 10)
}

// ParseReceiptText takes apart what BuildReceiptText joined.
func ParseReceiptText(s string) (Receipt, error) {
	parts := strings.Split(s, ";")
	if len(parts) != 7 || parts[0] != "result" || parts[1] == "" || !ValidNonce(parts[2]) ||
		(parts[3] != OutcomeExecuted && parts[3] != OutcomeRefused) || (parts[3] == OutcomeExecuted) != (parts[4] == "") {
		return Receipt{}, fmt.Errorf("%w: want result;<uid>;<nonce>;<outcome>;<reason>;<counter>;<at>", ErrSignedText)
	}
	counter, err1 := strconv.ParseUint(parts[5], 10, 64)
	ms, err2 := strconv.ParseInt(parts[6], 10, 64)
	if err1 != nil || err2 != nil {
		return Receipt{}, fmt.Errorf("%w: counter or time", ErrSignedText)
	}
	return Receipt{UID: parts[1], Nonce: parts[2], Outcome: parts[3], Reason: parts[4], Counter: counter,
		At: time.UnixMilli(ms).UTC()}, nil
}

// Sign returns the lowercase hex Ed25519 signature of text.
func Sign(key ed25519.PrivateKey, text string) string {
	return hex.EncodeToString(ed25519.Sign(key, []byte(text)))
}

// Verify reports whether signature (lowercase hex) is the Ed25519
// signature of text by publicKey (64 lowercase hex characters).
func Verify(publicKey, text, signature string) bool {
	pub, err := hex.DecodeString(publicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize || !lowerHex(publicKey) {
		return false
	}
	return VerifyKey(ed25519.PublicKey(pub), text, signature)
}

// ValidPublicKey reports whether s is an Ed25519 public key as 64
// lowercase hex characters.
func ValidPublicKey(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == ed25519.PublicKeySize && lowerHex(s)
}

func lowerHex(s string) bool {
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
