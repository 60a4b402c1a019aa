// Package sim is a simulated BLE radio: an Air that simulated peripherals
// (mount firmware) register on, and centrals (phones) that scan and connect
// through sdk.Radio and sdk.BLELink, in process or over a socket
// (Serve, Dial). It follows the GATT layout of docs/ble.md: an info value
// read whole, command frames written with response, state frames notified,
// each frame no longer than one ATT PDU of the link's MTU allows.
package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// Errors a central sees. They survive the socket (Dial) as the same values.
var (
	// ErrNotFound: no peripheral with that address is on the air.
	ErrNotFound = errors.New("sim: no such device")
	// ErrBusy: the peripheral already has as many links as it accepts.
	ErrBusy = errors.New("sim: device busy")
	// ErrClosed: the link is gone (closed by either side).
	ErrClosed = errors.New("sim: link closed")
	// ErrTooLong: a frame larger than one ATT PDU of the link's MTU.
	ErrTooLong = errors.New("sim: frame longer than MTU-3")
	// ErrNoFirmware: the peripheral has no firmware characteristic.
	ErrNoFirmware = errors.New("sim: no firmware characteristic")
)

// Peripheral is the firmware side of a simulated device.
type Peripheral interface {
	// Advertisement is what the device advertises: Address (unique on the
	// air), Name and MountUID. A non-zero RSSI sets how strong it is heard;
	// zero lets the Air pick a level from the address. Called at every
	// advertising event, so changes show in the next one.
	Advertisement() protocol.BLEDevice
	// Info is the value of the info characteristic (at most 512 bytes).
	Info() []byte
	// Connected serves one link for as long as it lasts. The Air calls it
	// on a goroutine of its own for each new link.
	Connected(conn PeripheralConn)
}

// FirmwarePeripheral is a Peripheral with the firmware characteristic
// (docs/ble.md, "Firmware"): reads of it return FirmwareStatus().
type FirmwarePeripheral interface {
	Peripheral
	// FirmwareStatus is the value of the firmware characteristic (at most
	// 512 bytes).
	FirmwareStatus() []byte
}

// QuietPeripheral is a Peripheral that may stop advertising (a mount
// that failed after an update): while Advertising is false it is not
// heard and cannot be connected to (ErrNotFound).
type QuietPeripheral interface {
	Peripheral
	Advertising() bool
}

func advertises(p Peripheral) bool {
	q, ok := p.(QuietPeripheral)
	return !ok || q.Advertising()
}

// PeripheralConn is one link as the peripheral sees it.
type PeripheralConn interface {
	// Frames delivers what the central writes to the command
	// characteristic, one frame each. It is never closed: watch Done.
	Frames() <-chan []byte
	// Notify sends one frame on the state characteristic. It blocks while
	// the central is not reading (link-layer flow control) and fails with
	// ErrClosed once the link is gone. Frames of one message must not be
	// interleaved with another's: callers serialise whole messages.
	Notify(frame []byte) error
	// MTU is the link's ATT MTU.
	MTU() int
	// Done is closed when the link ends.
	Done() <-chan struct{}
	// FirmwareFrames delivers what the central writes to the firmware
	// characteristic, one frame each. Never closed: watch Done.
	FirmwareFrames() <-chan []byte
	// NotifyFirmware sends one notification on the firmware
	// characteristic; as Notify.
	NotifyFirmware(value []byte) error
	// Close drops the link from the peripheral's side.
	Close() error
}

// Config sets how the simulated air behaves. Zero values take defaults.
type Config struct {
	// MTU every link negotiates (default protocol.BLEDefaultMTU, 23; at most 517).
	MTU int
	// AdvertisingInterval between two advertisements of a device (default
	// 100ms); each event is delayed by up to 10ms more, as BLE's advDelay.
	AdvertisingInterval time.Duration
	// ConnectionInterval delays each ATT exchange (a read, a written frame, a
	// notified frame) and the connection itself; default 0 (no delay).
	ConnectionInterval time.Duration
	// MaxLinks a peripheral accepts at once (default 1, as most mount
	// firmware). A peripheral with all its links taken stops advertising.
	MaxLinks int
	// NotifyBuffer is how many notified frames a central may leave unread
	// before Notify blocks (default 256).
	NotifyBuffer int
}

func (c Config) withDefaults() Config {
	if c.MTU <= 0 {
		c.MTU = protocol.BLEDefaultMTU
	}
	c.MTU = max(min(c.MTU, 517), protocol.BLEDefaultMTU)
	if c.AdvertisingInterval <= 0 {
		c.AdvertisingInterval = 100 * time.Millisecond
	}
	if c.MaxLinks <= 0 {
		c.MaxLinks = 1
	}
	if c.NotifyBuffer <= 0 {
		c.NotifyBuffer = 256
	}
	return c
}

// Air is the shared medium: every registered peripheral can be heard and
// connected to by every central. Safe for concurrent use.
type Air struct {
	cfg     Config
	mu      sync.Mutex
	devices map[string]*device
}

type device struct {
	p       Peripheral
	address string
	links   map[*link]struct{}
}

// NewAir returns an empty air.
func NewAir(cfg Config) *Air {
	return &Air{cfg: cfg.withDefaults(), devices: map[string]*device{}}
}

// Config returns the air's settings, defaults filled in.
func (a *Air) Config() Config { return a.cfg }

// Register puts a peripheral on the air under its advertised address.
func (a *Air) Register(p Peripheral) error {
	addr := p.Advertisement().Address
	if addr == "" {
		return errors.New("sim: peripheral advertises no address")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.devices[addr]; dup {
		return fmt.Errorf("sim: address %s already on the air", addr)
	}
	a.devices[addr] = &device{p: p, address: addr, links: map[*link]struct{}{}}
	return nil
}

// Unregister takes the peripheral at address off the air, dropping its links.
func (a *Air) Unregister(address string) {
	a.mu.Lock()
	d := a.devices[address]
	delete(a.devices, address)
	var links []*link
	if d != nil {
		for l := range d.links {
			links = append(links, l)
		}
	}
	a.mu.Unlock()
	for _, l := range links {
		l.close()
	}
}

// Central returns a new central (one phone) on this air.
func (a *Air) Central() *Central { return &Central{air: a} }

// advertising lists the devices that advertise now: those with a free link.
func (a *Air) advertising() []*device {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]*device, 0, len(a.devices))
	for _, d := range a.devices {
		if len(d.links) < a.cfg.MaxLinks && advertises(d.p) {
			out = append(out, d)
		}
	}
	return out
}

// heard is one advertisement of d as a central receives it: the RSSI
// jitters by a few dB around the device's level, as a real one does.
func heard(d *device, rng *rand.Rand) protocol.BLEDevice {
	adv := d.p.Advertisement()
	adv.Address = d.address
	base := adv.RSSI
	if base == 0 {
		h := fnv.New32a()
		h.Write([]byte(d.address))
		base = -45 - int(h.Sum32()%40) // -45 .. -84 dBm
	}
	adv.RSSI = max(-127, min(base+rng.IntN(7)-3, 0))
	return adv
}

// Central is the phone side on the air, in process. It implements sdk.Radio.
type Central struct{ air *Air }

var _ sdk.Radio = (*Central)(nil)

// Scan reports every advertisement heard until ctx ends, then returns nil.
// Each device is first heard at a random point of its advertising interval,
// then once per interval, like a phone's scanner without duplicate filter.
func (c *Central) Scan(ctx context.Context, found func(protocol.BLEDevice)) error {
	cfg := c.air.cfg
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	// A tick bounds the work per advertising event across a large fleet.
	tick := min(cfg.AdvertisingInterval, 10*time.Millisecond)
	next := map[string]time.Time{}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		now := time.Now()
		live := map[string]bool{}
		for _, d := range c.air.advertising() {
			live[d.address] = true
			due, seen := next[d.address]
			if !seen {
				next[d.address] = now.Add(time.Duration(rng.Int64N(int64(cfg.AdvertisingInterval))))
				continue
			}
			if now.Before(due) {
				continue
			}
			found(heard(d, rng))
			next[d.address] = due.Add(cfg.AdvertisingInterval + time.Duration(rng.Int64N(int64(10*time.Millisecond))))
			if next[d.address].Before(now) { // a slow callback: do not burst
				next[d.address] = now.Add(cfg.AdvertisingInterval)
			}
		}
		for addr := range next {
			if !live[addr] {
				delete(next, addr) // gone or connected: heard afresh when back
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Connect opens a link to the device at address.
func (c *Central) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := c.air.connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return centralLink{l}, nil
}

func (a *Air) connect(ctx context.Context, address string) (*link, error) {
	if err := a.pause(ctx); err != nil {
		return nil, err
	}
	a.mu.Lock()
	d := a.devices[address]
	if d == nil || !advertises(d.p) {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrNotFound, address)
	}
	if len(d.links) >= a.cfg.MaxLinks {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrBusy, address)
	}
	l := &link{
		air: a, dev: d, mtu: a.cfg.MTU,
		toPeripheral: make(chan []byte),
		toCentral:    make(chan []byte, a.cfg.NotifyBuffer),
		fwIn:         make(chan []byte),
		fwOut:        make(chan []byte, a.cfg.NotifyBuffer),
		done:         make(chan struct{}),
	}
	d.links[l] = struct{}{}
	a.mu.Unlock()
	go d.p.Connected(peripheralConn{l})
	return l, nil
}

// pause waits one connection interval, the time an ATT exchange takes.
func (a *Air) pause(ctx context.Context) error {
	if a.cfg.ConnectionInterval <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(a.cfg.ConnectionInterval)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// link is one connection; centralLink and peripheralConn are its two ends.
type link struct {
	air          *Air
	dev          *device
	mtu          int
	toPeripheral chan []byte // unbuffered: a write returns once the firmware took it
	toCentral    chan []byte
	fwIn         chan []byte // firmware characteristic writes, unbuffered as toPeripheral
	fwOut        chan []byte // firmware characteristic notifications

	// notifyMu guards closing toCentral against a Notify in flight.
	notifyMu  sync.RWMutex
	closed    bool
	done      chan struct{}
	closeOnce sync.Once
}

func (l *link) close() {
	l.closeOnce.Do(func() {
		close(l.done)
		l.air.mu.Lock()
		delete(l.dev.links, l)
		l.air.mu.Unlock()
		l.notifyMu.Lock()
		l.closed = true
		close(l.toCentral)
		close(l.fwOut)
		l.notifyMu.Unlock()
	})
}

func (l *link) checkFrame(frame []byte) error { return checkFrame(frame, l.mtu) }

// checkFrame refuses a frame that does not fit one write at mtu.
func checkFrame(frame []byte, mtu int) error {
	if !protocol.FrameFits(frame, mtu) {
		return fmt.Errorf("%w: %d bytes at MTU %d", ErrTooLong, len(frame), mtu)
	}
	return nil
}

func (l *link) readInfo(ctx context.Context) ([]byte, error) {
	if err := l.air.pause(ctx); err != nil {
		return nil, err
	}
	select {
	case <-l.done:
		return nil, ErrClosed
	default:
	}
	info := l.dev.p.Info()
	if len(info) > protocol.BLEMaxAttrValue {
		info = info[:protocol.BLEMaxAttrValue]
	}
	return append([]byte(nil), info...), nil
}

func (l *link) write(ctx context.Context, frame []byte) error {
	return l.writeTo(ctx, l.toPeripheral, frame)
}

func (l *link) writeTo(ctx context.Context, ch chan []byte, frame []byte) error {
	if err := l.checkFrame(frame); err != nil {
		return err
	}
	if err := l.air.pause(ctx); err != nil {
		return err
	}
	select {
	case ch <- append([]byte(nil), frame...):
		return nil
	case <-l.done:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *link) notify(frame []byte) error {
	return l.notifyOn(false, frame)
}

func (l *link) notifyOn(firmware bool, frame []byte) error {
	if err := l.checkFrame(frame); err != nil {
		return err
	}
	if err := l.air.pause(context.Background()); err != nil {
		return err
	}
	l.notifyMu.RLock()
	defer l.notifyMu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	ch := l.toCentral
	if firmware {
		ch = l.fwOut
	}
	select {
	case ch <- append([]byte(nil), frame...):
		return nil
	case <-l.done:
		return ErrClosed
	}
}

// readFirmware reads the firmware characteristic; a peripheral without
// one fails as a missing characteristic would.
func (l *link) readFirmware(ctx context.Context) ([]byte, error) {
	if err := l.air.pause(ctx); err != nil {
		return nil, err
	}
	select {
	case <-l.done:
		return nil, ErrClosed
	default:
	}
	fp, ok := l.dev.p.(FirmwarePeripheral)
	if !ok {
		return nil, ErrNoFirmware
	}
	v := fp.FirmwareStatus()
	if len(v) > protocol.BLEMaxAttrValue {
		v = v[:protocol.BLEMaxAttrValue]
	}
	return append([]byte(nil), v...), nil
}

type centralLink struct{ l *link }

var _ sdk.FirmwareLink = centralLink{}

func (c centralLink) ReadFirmware(ctx context.Context) ([]byte, error) { return c.l.readFirmware(ctx) }
func (c centralLink) WriteFirmware(ctx context.Context, frame []byte) error {
	return c.l.writeTo(ctx, c.l.fwIn, frame)
}
func (c centralLink) FirmwareAcks() <-chan []byte { return c.l.fwOut }

func (c centralLink) ReadInfo(ctx context.Context) ([]byte, error) { return c.l.readInfo(ctx) }
func (c centralLink) WriteFrame(ctx context.Context, frame []byte) error {
	return c.l.write(ctx, frame)
}
func (c centralLink) Frames() <-chan []byte { return c.l.toCentral }
func (c centralLink) MTU() int              { return c.l.mtu }
func (c centralLink) Close() error          { c.l.close(); return nil }

type peripheralConn struct{ l *link }

func (p peripheralConn) Frames() <-chan []byte     { return p.l.toPeripheral }
func (p peripheralConn) Notify(frame []byte) error { return p.l.notify(frame) }
func (p peripheralConn) MTU() int                  { return p.l.mtu }
func (p peripheralConn) Done() <-chan struct{}     { return p.l.done }
func (p peripheralConn) Close() error              { p.l.close(); return nil }
func (p peripheralConn) FirmwareFrames() <-chan []byte {
	return p.l.fwIn
}
func (p peripheralConn) NotifyFirmware(value []byte) error { return p.l.notifyOn(true, value) }

// Drop cuts every link of the device at address, as a phone walking out
// of range does (the device stays on the air and advertises again). It
// returns how many links it cut.
func (a *Air) Drop(address string) int {
	a.mu.Lock()
	d := a.devices[address]
	var links []*link
	if d != nil {
		for l := range d.links {
			links = append(links, l)
		}
	}
	a.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}
