package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/sdk"
)

// A phone scans for nearby mounts. Here the radio is the simulated one with
// one mount on the air; on a phone it is the real BLE adapter.
func ExampleClient_Scan() {
	air := sim.NewAir(sim.Config{AdvertisingInterval: 10 * time.Millisecond})
	_ = air.Register(simmount.New(simmount.Config{UID: "M-0001", MACAddress: "02:00:00:00:00:01"}))

	client, _ := sdk.New(sdk.Config{
		BaseURL: "http://127.0.0.1:8080/api/v1",
		Token:   "<a role:restricted mount:M-0001 token from the operator's server>",
		Radio:   air.Central(),
	})
	defer client.Close()

	events := client.EngineEvents()
	devices, _ := client.Scan(context.Background(), 500*time.Millisecond)
	for _, d := range devices {
		fmt.Println("found", d.MountUID)
	}
	for ev := range events {
		if r, ok := ev.(sdk.ScanResultEvent); ok {
			fmt.Println("scan result event with", len(r.Devices), "device")
		}
		if _, ok := ev.(sdk.ScanStopped); ok {
			break
		}
	}
	// Output:
	// found M-0001
	// scan result event with 1 device
}

// Connecting reads the mount's identity; its states then arrive on the
// device state stream.
func ExampleClient_Connect() {
	air := sim.NewAir(sim.Config{AdvertisingInterval: 10 * time.Millisecond})
	_ = air.Register(simmount.New(simmount.Config{UID: "M-0001", MACAddress: "02:00:00:00:00:01", SerialNumber: "SN-1"}))
	client, _ := sdk.New(sdk.Config{BaseURL: "http://127.0.0.1:8080/api/v1", Token: "<token>", Radio: air.Central()})
	defer client.Close()

	info, err := client.Connect(context.Background(), "M-0001")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("connected to", info.UID, info.SerialNumber)
	states, _ := client.DeviceStates("M-0001")
	ev := <-states // the stream starts with the states the mount reported on connecting
	for _, s := range ev.States {
		if s.Code == "MOUNT_LOCKED" || s.Code == "HELMET_MOUNTED" {
			fmt.Println(s.Code, s.Value)
		}
	}
	// Unordered output:
	// connected to M-0001 SN-1
	// MOUNT_LOCKED 1
	// HELMET_MOUNTED 1
}

// Actions check the token with the identity provider before anything goes
// over BLE, fetch the signed command from the API, write it to the mount,
// wait for the mount to confirm, and upload its signed receipt and states
// to the API (through the upload queue when the app names one).
// (Compiled, not run: it needs a running mountd; e2e's
// TestOperatorFlow runs the whole flow.)
func ExampleClient_ReleaseHelmet() {
	client, _ := sdk.New(sdk.Config{
		BaseURL: "http://127.0.0.1:8080/api/v1",
		Token:   "<a role:restricted mount:M-0001 token>",
		Radio:   sim.Dial("sim://127.0.0.1:7390"), // mountsim's fleet
		// What the mount said waits here when the API cannot be reached,
		// and goes up when it can, also after the app restarts.
		QueueDir: "/data/app/mountd-uploads",
	})
	defer client.Close()
	ctx := context.Background()
	if _, err := client.Connect(ctx, "M-0001"); err != nil {
		fmt.Println(err)
		return
	}
	outcome, err := client.ReleaseHelmet(ctx, "M-0001")
	var refused *sdk.RefusedError
	switch {
	case errors.Is(err, sdk.ErrMountNotAllowed):
		fmt.Println("this token is for another mount")
	case errors.Is(err, sdk.ErrTokenRejected):
		fmt.Println("ask the operator's server for a new token")
	case errors.As(err, &refused):
		fmt.Println("the mount refused:", refused.Reason)
	case err != nil:
		fmt.Println(err)
	case outcome.Pending > 0:
		fmt.Println("released; the mount's receipt and report wait for the network")
	default:
		fmt.Println("released; the mount reports", outcome.States)
	}
}
