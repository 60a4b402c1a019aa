package protocol

import (
	"bytes"
	"testing"
)

func TestFirmwareFramesAndAcks(t *testing.T) {
	f := FirmwareFrame(0x01020304, []byte("abc"))
	if !bytes.Equal(f, []byte{1, 2, 3, 4, 'a', 'b', 'c'}) {
		t.Fatalf("frame % x", f)
	}
	off, data, ok := ParseFirmwareFrame(f)
	if !ok || off != 0x01020304 || string(data) != "abc" {
		t.Fatalf("parsed %d %q %v", off, data, ok)
	}
	for _, bad := range [][]byte{nil, {0, 0, 0}, {0, 0, 0, 0}} {
		if _, _, ok := ParseFirmwareFrame(bad); ok {
			t.Errorf("% x parsed", bad)
		}
	}
	// A full frame fits one ATT write at every MTU.
	for _, mtu := range []int{23, 185, 247, 517} {
		frame := FirmwareFrame(0, make([]byte, FirmwareChunk(mtu)))
		if !FrameFits(frame, mtu) || FrameFits(append(frame, 0), mtu) {
			t.Errorf("MTU %d: a full frame of %d bytes does not fit exactly", mtu, len(frame))
		}
	}
	for k := AckProgress; k <= AckBadImage; k++ {
		a := FirmwareAck{Kind: k, Offset: 16 << 20}
		got, ok := ParseFirmwareAck(a.Encode())
		if !ok || got != a || k.String() == "" {
			t.Errorf("%v round trip: %v %v", a, got, ok)
		}
	}
	for _, bad := range [][]byte{{0, 0, 0, 0, 0}, {7, 0, 0, 0, 0}, {1, 0, 0, 0}} {
		if _, ok := ParseFirmwareAck(bad); ok {
			t.Errorf("% x parsed", bad)
		}
	}
}
