package sdk

import (
	"context"

	"github.com/mountd/mountd/protocol"
)

// Radio is the central side of BLE, as a phone uses it.
type Radio interface {
	// Scan reports mounts advertising the mount service until ctx ends.
	Scan(ctx context.Context, found func(protocol.BLEDevice)) error
	// Connect opens a GATT connection to the mount at address.
	Connect(ctx context.Context, address string) (BLELink, error)
}

// BLELink is a GATT connection to one mount.
type BLELink interface {
	// ReadInfo reads the info characteristic.
	ReadInfo(ctx context.Context) ([]byte, error)
	// WriteFrame writes one frame to the command characteristic.
	WriteFrame(ctx context.Context, frame []byte) error
	// Frames delivers the state characteristic's notifications, one frame
	// each, until the link closes.
	Frames() <-chan []byte
	// MTU is the negotiated ATT MTU.
	MTU() int
	// Close disconnects.
	Close() error
}

// FirmwareLink is a BLELink that also reaches the firmware characteristic
// (docs/ble.md, "Firmware"); both radio adapters' links implement it.
type FirmwareLink interface {
	BLELink
	// ReadFirmware reads the firmware characteristic: a
	// protocol.FirmwareStatus as JSON.
	ReadFirmware(ctx context.Context) ([]byte, error)
	// WriteFirmware writes one frame (protocol.FirmwareFrame) with response.
	WriteFirmware(ctx context.Context, frame []byte) error
	// FirmwareAcks delivers the firmware characteristic's notifications
	// (protocol.FirmwareAck, 5 bytes each) until the link closes.
	FirmwareAcks() <-chan []byte
}
