package protocol

import (
	"encoding/binary"
	"fmt"
)

// The firmware characteristic (BLEFirmwareUUID, docs/ble.md "Firmware"):
// after the mount accepted a signed INSTALL_FIRMWARE on the command
// characteristic, the phone writes the image to it in frames, each a
// 4-byte big-endian offset followed by data; the mount takes a frame only
// at its current offset, notifies acknowledgements (FirmwareAck), and a read
// returns where the transfer stands (FirmwareStatus).
const (
	// FirmwareMaxSize bounds an image: a larger INSTALL_FIRMWARE size is
	// refused as "bad parameters".
	FirmwareMaxSize = 16 << 20
	// FirmwareAckEvery is how many bytes the mount receives between two
	// progress acknowledgements (it also acknowledges the last byte).
	FirmwareAckEvery = 4096
	// firmwareHeader is the offset before a frame's data.
	firmwareHeader = 4
)

// Transfer states a read of the firmware characteristic reports.
const (
	FirmwareIdle      = "idle"      // no transfer: an INSTALL_FIRMWARE is needed
	FirmwareReceiving = "receiving" // a transfer waits for bytes from Offset on
)

// FirmwareStatus is the JSON value a read of the firmware characteristic
// returns (at most 512 bytes, read whole like the info characteristic).
// Idle: Nonce and Revision are empty and Offset and Size 0.
type FirmwareStatus struct {
	Nonce    string `json:"nonce"`
	Revision string `json:"revision"`
	Offset   int64  `json:"offset"`
	Size     int64  `json:"size"`
	State    string `json:"state"`
}

// FirmwareAckKind says what an acknowledgement notified on the firmware
// characteristic means.
type FirmwareAckKind byte

// The acknowledgements. Each is 5 bytes: the kind, then an offset as 4
// bytes big-endian.
const (
	// AckProgress: the mount holds the image up to Offset (every
	// FirmwareAckEvery bytes).
	AckProgress FirmwareAckKind = 0x01
	// AckComplete: the whole image (Offset = size) arrived; the receipt
	// (EXECUTED, or REFUSED "bad image") follows on the state characteristic.
	AckComplete FirmwareAckKind = 0x02
	// AckWrongOffset: a frame at another offset than the mount's was
	// ignored; Offset is where the mount expects the next frame.
	AckWrongOffset FirmwareAckKind = 0x03
	// AckNoTransfer: a frame without a transfer under way (none, or another
	// command's); Offset 0.
	AckNoTransfer FirmwareAckKind = 0x04
	// AckExpired: the transfer's command expired; it is forgotten; Offset 0.
	AckExpired FirmwareAckKind = 0x05
	// AckBadImage: more bytes than the command's size, or a SHA-256 that
	// does not match: the transfer ends, the REFUSED receipt follows.
	AckBadImage FirmwareAckKind = 0x06
)

// String names a kind as docs/ble.md does.
func (k FirmwareAckKind) String() string {
	switch k {
	case AckProgress:
		return "progress"
	case AckComplete:
		return "complete"
	case AckWrongOffset:
		return "wrong offset"
	case AckNoTransfer:
		return "no transfer"
	case AckExpired:
		return "transfer expired"
	case AckBadImage:
		return "bad image"
	}
	return fmt.Sprintf("ack 0x%02x", byte(k))
}

// FirmwareAck is one notification of the firmware characteristic.
type FirmwareAck struct {
	Kind   FirmwareAckKind
	Offset int64
}

// Encode renders the 5-byte notification.
func (a FirmwareAck) Encode() []byte {
	b := []byte{byte(a.Kind), 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(a.Offset))
	return b
}

// ParseFirmwareAck reads a notification of the firmware characteristic.
func ParseFirmwareAck(b []byte) (FirmwareAck, bool) {
	if len(b) != 5 || b[0] < byte(AckProgress) || b[0] > byte(AckBadImage) {
		return FirmwareAck{}, false
	}
	return FirmwareAck{Kind: FirmwareAckKind(b[0]), Offset: int64(binary.BigEndian.Uint32(b[1:]))}, true
}

// FirmwareChunk is how many image bytes one frame carries at mtu: the
// ATT header (3 bytes) and the offset (4) leave MTU-7.
func FirmwareChunk(mtu int) int {
	if mtu < BLEDefaultMTU {
		mtu = BLEDefaultMTU
	}
	return mtu - attOverhead - firmwareHeader
}

// FirmwareFrame renders one write of the firmware characteristic.
func FirmwareFrame(offset int64, data []byte) []byte {
	b := make([]byte, firmwareHeader+len(data))
	binary.BigEndian.PutUint32(b, uint32(offset))
	copy(b[firmwareHeader:], data)
	return b
}

// ParseFirmwareFrame takes a write of the firmware characteristic apart;
// false when it is shorter than its offset or carries no data.
func ParseFirmwareFrame(b []byte) (offset int64, data []byte, ok bool) {
	if len(b) <= firmwareHeader {
		return 0, nil, false
	}
	return int64(binary.BigEndian.Uint32(b)), b[firmwareHeader:], true
}
