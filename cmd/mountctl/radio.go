package main

import (
	"fmt"
	"strings"

	"github.com/mountd/mountd/core"
)

// openRadio opens the BLE radio named by spec.
func openRadio(spec string) (core.Radio, func(), error) {
	switch {
	case strings.HasPrefix(spec, "sim://"):
		return nil, nil, fmt.Errorf("simulated radio: not yet wired")
	case spec == "bluez":
		return nil, nil, fmt.Errorf("bluez: not yet wired")
	}
	return nil, nil, fmt.Errorf("--ble must be sim://HOST:PORT or bluez, not %q", spec)
}
