package main

import (
	"fmt"
	"strings"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/tinygo"
	"github.com/mountd/mountd/sdk"
)

// openRadio opens the BLE radio named by spec: mountsim's simulated radio,
// or this machine's adapter through BlueZ.
func openRadio(spec string) (sdk.Radio, func(), error) {
	switch {
	case strings.HasPrefix(spec, "sim://"):
		return sim.Dial(spec), func() {}, nil
	case spec == "bluez":
		r, err := tinygo.New()
		if err != nil {
			return nil, nil, fmt.Errorf("BLE adapter: %w", err)
		}
		return r, func() {}, nil
	}
	return nil, nil, fmt.Errorf("--ble must be sim://HOST:PORT or bluez, not %q", spec)
}
