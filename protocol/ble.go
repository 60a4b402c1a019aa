// Package protocol is what a mount and the phone that talks to it share:
// the GATT layout, the framing of messages over characteristics, the JSON
// they carry, and the text a command's signature covers. The server (core),
// the SDK and the simulated firmware all speak it. It also holds the facts of
// the API that its clients (the SDK, mountctl, mountsim) share with the
// server: command and state codes and their values, error codes, the
// audience scope item, how a rollout's phases divide its targets; clients
// import it rather than core (client/imports_test.go keeps them apart).
package protocol

import (
	"errors"
	"fmt"
	"time"
)

// The GATT layout every mount and both radio adapters follow (docs/ble.md).
const (
	// BLEServiceUUID is the mount service, advertised by every mount.
	BLEServiceUUID = "6d6e7464-0001-4d6f-756e-742053657276"
	// BLEInfoUUID is read: the mount's identity as JSON (BLEInfo).
	BLEInfoUUID = "6d6e7464-0002-4d6f-756e-742053657276"
	// BLECommandUUID is written (with response): framed command JSON.
	BLECommandUUID = "6d6e7464-0003-4d6f-756e-742053657276"
	// BLEStateUUID notifies: framed state and result JSON (BLEMessage).
	BLEStateUUID = "6d6e7464-0004-4d6f-756e-742053657276"
	// BLEFirmwareUUID carries a firmware image after INSTALL_FIRMWARE:
	// written in frames with offsets, read for the offset to resume from,
	// notifying progress (docs/ble.md, "Firmware").
	BLEFirmwareUUID = "6d6e7464-0005-4d6f-756e-742053657276"
	// BLENamePrefix starts the advertised local name; the mount uid follows.
	BLENamePrefix = "MNT-"
	// BLEDefaultMTU is the ATT MTU assumed until negotiated; frames fit in it.
	BLEDefaultMTU = 23
	// BLEMaxAttrValue is the largest attribute value ATT allows (long reads
	// included): the info characteristic's JSON fits in it.
	BLEMaxAttrValue = 512
)

// BLEDevice is a mount seen in a scan.
type BLEDevice struct {
	Address  string `json:"address"`
	Name     string `json:"name"`
	MountUID string `json:"mountUid"`
	RSSI     int    `json:"rssi"`
}

// BLEInfo is the content of the info characteristic.
type BLEInfo struct {
	UID              string `json:"uid"`
	SerialNumber     string `json:"serialNumber"`
	MACAddress       string `json:"macAddress"`
	FirmwareRevision string `json:"firmwareRevision"`
	SoftwareRevision string `json:"softwareRevision"`
	ModelNumber      string `json:"modelNumber"`
	// DevicePublicKey is the mount's own Ed25519 key (64 lowercase hex),
	// which signs its reports and receipts; empty on older firmware.
	DevicePublicKey string `json:"devicePublicKey,omitempty"`
	// Offline access (docs/ble.md, "Offline access"), on firmware that
	// has it; absent means 0 or false. Challenge is fresh at every read of
	// the characteristic (never in BLEInfo values a mount hands out
	// otherwise): a nonce for one use or one time token, valid
	// ChallengeLifetime.
	Challenge         string `json:"challenge,omitempty"`
	RevocationVersion int64  `json:"revocationVersion,omitempty"` // of the newest list the mount took; 0: none
	Epoch             int64  `json:"epoch,omitempty"`             // the highest epoch it has seen; 0: none
	LogPending        int    `json:"logPending,omitempty"`        // offline receipts not yet acknowledged
	TimeTrusted       bool   `json:"timeTrusted,omitempty"`       // trusted time arrived since its last start
}

// BLECommand is what is written to the command characteristic: the
// API's Command, as the API returned it. It has no "type"; the offline
// writes (BLEUse, BLESignedText) have one.
type BLECommand struct {
	Code        string         `json:"code"`
	Data        map[string]any `json:"data"`
	GeneratedAt string         `json:"generatedAt"`
	Payload     string         `json:"payload"`
	SignedToken *string        `json:"signedToken"`
}

// BLEStateEntry is one state a mount notifies.
type BLEStateEntry struct {
	Code       string `json:"code"`
	Value      string `json:"value"`
	OccurredAt string `json:"occurredAt"`
}

// Types of BLEMessage.
const (
	BLEMessageStates = "states"
	BLEMessageResult = "result"
	// BLEMessageOffline is a signed offline receipt: the answer to a use
	// judged from the revocation check on, and each entry of the mount's
	// log, sent one per message to every central that connects.
	BLEMessageOffline = "offline"
)

// Types of the offline writes to the command characteristic (docs/ble.md,
// "Offline access"). The mount answers each with a BLEMessage: a "result"
// whose code is the write's type (time, revocations, ack) or the use's
// code, or an "offline" receipt for a use.
const (
	BLEWriteUse         = "use"
	BLEWriteTime        = "time"
	BLEWriteRevocations = "revocations"
	BLEWriteAck         = "ack"
)

// BLEUse is a rider's use of a grant, written to the command
// characteristic: the grant as the API returned it (text and signature),
// the code to run, the challenge it answers (from the info
// characteristic), and the proof: SignRider over
// BuildUseText(uid, grant id, code, nonce).
type BLEUse struct {
	Type           string `json:"type"` // BLEWriteUse
	Grant          string `json:"grant"`
	GrantSignature string `json:"grantSignature"`
	Code           string `json:"code"`
	Nonce          string `json:"nonce"`
	Proof          string `json:"proof"`
}

// BLESignedText is a text the server signed with the owner key, written to
// the command characteristic: a time token (Type BLEWriteTime), a
// revocation list (BLEWriteRevocations) or an ack (BLEWriteAck). Text and
// Signature are the API's answer unchanged.
type BLESignedText struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

// SignedText is the API's answer for a time token, a revocation list or
// an ack: a text and its owner-key signature (lowercase hex).
type SignedText struct {
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

// BLEMessage is what the state characteristic notifies: either the mount's
// current states (Type BLEMessageStates) or the outcome of a command (Type
// BLEMessageResult).
type BLEMessage struct {
	Type   string          `json:"type"`
	States []BLEStateEntry `json:"states,omitempty"`
	// For results: the command code, the payload's nonce, and whether the
	// mount accepted it (with the reason when it did not).
	Code     string `json:"code,omitempty"`
	Nonce    string `json:"nonce,omitempty"`
	Accepted bool   `json:"accepted,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Signed messages (a mount with a device key): Counter and Signature
	// on both types; SoftwareRevision on states; Outcome and At on the
	// results of commands whose signature verified (receipts).
	Counter          *uint64 `json:"counter,omitempty"`
	SoftwareRevision string  `json:"softwareRevision,omitempty"`
	Outcome          string  `json:"outcome,omitempty"`
	At               string  `json:"at,omitempty"`
	Signature        string  `json:"signature,omitempty"`
	// GrantID: on offline receipts (Type BLEMessageOffline), the grant
	// used; Nonce is then the challenge the use answered.
	GrantID string `json:"grantId,omitempty"`
}

// OfflineReceipt takes an offline message's signed fields back into the
// text they cover (uid is the mount's).
func (m BLEMessage) OfflineReceipt(uid string) (OfflineReceipt, error) {
	if m.Type != BLEMessageOffline || m.Counter == nil {
		return OfflineReceipt{}, fmt.Errorf("%w: not an offline receipt", ErrSignedText)
	}
	at, err := time.Parse(TimeLayout, m.At)
	if err != nil {
		return OfflineReceipt{}, fmt.Errorf("%w: at %q", ErrSignedText, m.At)
	}
	r := OfflineReceipt{UID: uid, GrantID: m.GrantID, Code: m.Code, Nonce: m.Nonce, Outcome: m.Outcome, Reason: m.Reason,
		Counter: *m.Counter, At: at.UTC()}
	if _, err := ParseOfflineReceiptText(BuildOfflineReceiptText(r)); err != nil {
		return OfflineReceipt{}, err
	}
	return r, nil
}

// UploadOfflineReceipt is one receipt in POST /mounts/{uid}/offline-receipts:
// an offline message's fields, unchanged (a command receipt's, plus the
// grant and the code).
type UploadOfflineReceipt struct {
	GrantID string `json:"grantId"`
	Code    string `json:"code"`
	UploadReceipt
}

// SignedStates is the body of POST /mounts/{uid}/states carrying a
// mount's signed states message unchanged.
type SignedStates struct {
	States           []BLEStateEntry `json:"states"`
	Counter          *uint64         `json:"counter,omitempty"`
	SoftwareRevision string          `json:"softwareRevision,omitempty"`
	Signature        string          `json:"signature,omitempty"`
}

// UploadReceipt is one receipt in POST /mounts/{uid}/commands/receipts:
// the result message's fields, unchanged.
type UploadReceipt struct {
	Nonce     string `json:"nonce"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason"`
	Counter   uint64 `json:"counter"`
	At        string `json:"at"`
	Signature string `json:"signature"`
}

// Frames split a message for characteristics whose value is limited by the
// ATT MTU: each frame is one header byte, then up to MTU-4 bytes (3 bytes of
// ATT header). Header bit 7 marks the last frame of a message; bits 0-6
// count frames within the message, from 0, wrapping at 128.
const (
	frameLast    = 0x80
	frameSeqMask = 0x7f
	attOverhead  = 3
)

// ErrFrame is returned for a frame out of sequence or a message too large.
var ErrFrame = errors.New("ble: bad frame")

// MaxBLEMessage bounds a reassembled message (a command is well under 1 KiB).
const MaxBLEMessage = 16 << 10

// FrameFits reports whether a frame can be written in one ATT write at mtu:
// not empty, and at most the MTU less the ATT header.
func FrameFits(frame []byte, mtu int) bool {
	return len(frame) > 0 && len(frame) <= mtu-attOverhead
}

// SplitFrames cuts msg into frames for an ATT MTU.
func SplitFrames(msg []byte, mtu int) [][]byte {
	chunk := mtu - attOverhead - 1
	if chunk < 1 {
		chunk = BLEDefaultMTU - attOverhead - 1
	}
	var frames [][]byte
	for seq := 0; ; seq++ {
		n := min(chunk, len(msg))
		header := byte(seq & frameSeqMask)
		if n == len(msg) {
			header |= frameLast
		}
		frames = append(frames, append([]byte{header}, msg[:n]...))
		msg = msg[n:]
		if header&frameLast != 0 {
			return frames
		}
	}
}

// Reassembler joins frames back into messages.
type Reassembler struct {
	buf  []byte
	next int
}

// Add takes one frame; it returns the message when the frame completes one.
// A frame out of sequence discards the partial message and is an error.
func (r *Reassembler) Add(frame []byte) (msg []byte, done bool, err error) {
	if len(frame) == 0 {
		return nil, false, fmt.Errorf("%w: empty frame", ErrFrame)
	}
	seq := int(frame[0] & frameSeqMask)
	if seq != r.next&frameSeqMask {
		r.buf, r.next = nil, 0
		if seq != 0 {
			return nil, false, fmt.Errorf("%w: frame %d out of sequence", ErrFrame, seq)
		}
	}
	r.buf = append(r.buf, frame[1:]...)
	r.next++
	if len(r.buf) > MaxBLEMessage {
		r.buf, r.next = nil, 0
		return nil, false, fmt.Errorf("%w: message over %d bytes", ErrFrame, MaxBLEMessage)
	}
	if frame[0]&frameLast == 0 {
		return nil, false, nil
	}
	msg, r.buf, r.next = r.buf, nil, 0
	return msg, true, nil
}
