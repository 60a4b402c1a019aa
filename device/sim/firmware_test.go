package sim_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/sdk"
)

// fwEcho is an echo with the firmware characteristic: a read returns its
// status, a firmware write is notified back as an acknowledgement.
type fwEcho struct{ *echo }

func (e fwEcho) FirmwareStatus() []byte { return []byte(`{"state":"idle"}`) }

func (e fwEcho) Connected(c sim.PeripheralConn) {
	for {
		select {
		case <-c.Done():
			return
		case f := <-c.FirmwareFrames():
			if c.NotifyFirmware(f[:5]) != nil {
				return
			}
		}
	}
}

// The firmware characteristic, in process and over the socket: read,
// write and notification; a peripheral without it answers ErrNoFirmware;
// Air.Drop cuts a link, and the device can be connected again.
func TestFirmwareCharacteristic(t *testing.T) {
	w := newWorld(t, 1, sim.Config{}, "unix")
	fw := fwEcho{newEcho("F09")}
	if err := w.air.Register(fw); err != nil {
		t.Fatal(err)
	}
	for name, r := range radios(w) {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			l, err := r.Connect(ctx, fw.address())
			if err != nil {
				t.Fatal(err)
			}
			fl := l.(sdk.FirmwareLink)
			if v, err := fl.ReadFirmware(ctx); err != nil || string(v) != `{"state":"idle"}` {
				t.Fatalf("read %q, %v", v, err)
			}
			frame := []byte{0, 0, 0, 0, 1, 2, 3}
			if err := fl.WriteFirmware(ctx, frame); err != nil {
				t.Fatal(err)
			}
			select {
			case a := <-fl.FirmwareAcks():
				if !bytes.Equal(a, frame[:5]) {
					t.Fatalf("ack % x", a)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no acknowledgement")
			}
			if err := fl.WriteFirmware(ctx, make([]byte, 21)); !errors.Is(err, sim.ErrTooLong) {
				t.Fatalf("a frame over MTU-3: %v", err)
			}
			if n := w.air.Drop(fw.address()); n != 1 {
				t.Fatalf("Drop cut %d links", n)
			}
			for range fl.FirmwareAcks() { // closes with the link
			}
			if err := fl.WriteFirmware(ctx, frame); err == nil {
				t.Fatal("a write on a cut link")
			}
			l.Close()
			// Back on the air; a device without the characteristic says so.
			l, err = r.Connect(ctx, fw.address())
			if err != nil {
				t.Fatalf("reconnect after Drop: %v", err)
			}
			l.Close()
			plain, err := r.Connect(ctx, w.devices[0].address())
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			if _, err := plain.(sdk.FirmwareLink).ReadFirmware(ctx); !errors.Is(err, sim.ErrNoFirmware) {
				t.Fatalf("read on a device without firmware: %v", err)
			}
		})
	}
}
