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
