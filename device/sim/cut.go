package sim

import (
	"context"
	"sync/atomic"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// CuttingRadio is a central whose links to a mount are cut midway
// through a firmware transfer, from the air's side (Air.Drop), as a rider
// walking out of range: each link is cut as its After-th firmware frame
// is written. Links without the firmware characteristic pass through.
type CuttingRadio struct {
	sdk.Radio
	Air *Air
	// After is asked once per link: the firmware frame at which to cut it
	// (counted from 1 on that link); 0 or less: never.
	After func() int64
	// Cut, when set, is called for each link cut, with the offset of the
	// frame the cut stopped.
	Cut func(address string, offset int64)
	// FirstFrame, when set, is called with the offset of each link's first
	// firmware frame: after a cut, above 0 when the transfer resumed.
	FirstFrame func(address string, offset int64)
	// Frames, when set, counts the firmware frames written on all links.
	Frames *atomic.Int64
}

// Connect implements sdk.Radio.
func (r CuttingRadio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := r.Radio.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	fl, ok := l.(sdk.FirmwareLink)
	if !ok {
		return l, nil
	}
	return &cuttingLink{FirmwareLink: fl, r: r, address: address, after: r.After()}, nil
}

type cuttingLink struct {
	sdk.FirmwareLink
	r       CuttingRadio
	address string
	after   int64
	written atomic.Int64
}

func (l *cuttingLink) WriteFirmware(ctx context.Context, frame []byte) error {
	if l.r.Frames != nil {
		l.r.Frames.Add(1)
	}
	offset, _, _ := protocol.ParseFirmwareFrame(frame)
	n := l.written.Add(1)
	if n == 1 && l.r.FirstFrame != nil {
		l.r.FirstFrame(l.address, offset)
	}
	if n == l.after && l.r.Air.Drop(l.address) > 0 && l.r.Cut != nil {
		l.r.Cut(l.address, offset)
	}
	return l.FirmwareLink.WriteFirmware(ctx, frame)
}
