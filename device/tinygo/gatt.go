// Package tinygo is the real BLE radio: sdk.Radio and sdk.BLELink over
// tinygo.org/x/bluetooth, which on Linux drives BlueZ through D-Bus (no
// cgo). It follows docs/ble.md exactly as the simulated radio does: scan
// filtered on the mount service, connect, discover the
// characteristics (the firmware one when the mount has it), read info, write command frames with response, take
// state frames as notifications.
package tinygo

import (
	"strings"

	"tinygo.org/x/bluetooth"

	"github.com/mountd/mountd/protocol"
)

// The GATT layout in the library's form, parsed once from core's text.
var (
	serviceUUID = mustUUID(protocol.BLEServiceUUID)
	infoUUID    = mustUUID(protocol.BLEInfoUUID)
	commandUUID = mustUUID(protocol.BLECommandUUID)
	stateUUID   = mustUUID(protocol.BLEStateUUID)
	// firmwareUUID is discovered on its own: older firmware lacks it.
	firmwareUUID = mustUUID(protocol.BLEFirmwareUUID)
)

func mustUUID(s string) bluetooth.UUID {
	u, err := bluetooth.ParseUUID(s)
	if err != nil {
		panic("tinygo: bad UUID " + s + ": " + err.Error())
	}
	return u
}

// MountUID reads the mount uid from an advertised local name, MNT-<uid>.
func MountUID(localName string) (string, bool) {
	uid, ok := strings.CutPrefix(localName, protocol.BLENamePrefix)
	if !ok || uid == "" {
		return "", false
	}
	return uid, true
}
