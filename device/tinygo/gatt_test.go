package tinygo

import (
	"strings"
	"testing"

	"github.com/mountd/mountd/protocol"
)

// The library's UUIDs must print back as core's, or scans filter out every
// mount and discovery finds nothing.
func TestUUIDs(t *testing.T) {
	for want, got := range map[string]interface{ String() string }{
		protocol.BLEServiceUUID:  serviceUUID,
		protocol.BLEInfoUUID:     infoUUID,
		protocol.BLECommandUUID:  commandUUID,
		protocol.BLEStateUUID:    stateUUID,
		protocol.BLEFirmwareUUID: firmwareUUID,
	} {
		if !strings.EqualFold(got.String(), want) {
			t.Errorf("parsed %s, prints %s", want, got)
		}
	}
	if serviceUUID == infoUUID || infoUUID == commandUUID || commandUUID == stateUUID || stateUUID == firmwareUUID {
		t.Fatal("UUIDs collide")
	}
	if serviceUUID.Is16Bit() || serviceUUID.Is32Bit() {
		t.Fatal("the mount service is a 128-bit UUID")
	}
}

func TestMountUID(t *testing.T) {
	tests := []struct {
		name, uid string
		ok        bool
	}{
		{"MNT-SIM-0001", "SIM-0001", true},
		{"MNT-C1", "C1", true},
		{"MNT-", "", false},
		{"mnt-C1", "", false},
		{"Headphones", "", false},
		{"", "", false},
	}
	for _, tt := range tests {
		uid, ok := MountUID(tt.name)
		if uid != tt.uid || ok != tt.ok {
			t.Errorf("MountUID(%q) = %q, %v", tt.name, uid, ok)
		}
	}
}

func TestBadUUIDPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	mustUUID("not-a-uuid")
}
