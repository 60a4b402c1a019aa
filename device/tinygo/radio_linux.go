//go:build linux

package tinygo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"tinygo.org/x/bluetooth"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// ErrClosed is returned on a link that is gone.
var ErrClosed = errors.New("tinygo: link closed")

// Radio is the machine's BLE adapter as a central. BlueZ runs one scan per
// adapter at a time, so scans are serialised.
type Radio struct {
	adapter *bluetooth.Adapter
	scanMu  sync.Mutex
}

var _ sdk.Radio = (*Radio)(nil)

// One Radio per adapter, so that its scans are serialised whoever opens it.
var (
	openMu sync.Mutex
	opened = map[string]*Radio{}
)

// New enables the default adapter (hci0) through BlueZ.
func New() (*Radio, error) { return Open("hci0") }

// Open enables the named adapter (hci0, hci1, ...). Opening an adapter
// again returns the same Radio.
func Open(id string) (*Radio, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if r, ok := opened[id]; ok {
		return r, nil
	}
	a := bluetooth.DefaultAdapter
	if id != "hci0" {
		a = bluetooth.NewAdapter(id)
	}
	if err := a.Enable(); err != nil {
		return nil, fmt.Errorf("tinygo: enable %s (is bluetoothd running and the adapter powered?): %w", id, err)
	}
	r := &Radio{adapter: a}
	opened[id] = r
	return r, nil
}

// Scan reports mounts (advertising the mount service with a MNT-<uid>
// name) until ctx ends, then returns nil. BlueZ reports a device again
// whenever its properties (RSSI, name) change.
func (r *Radio) Scan(ctx context.Context, found func(protocol.BLEDevice)) error {
	r.scanMu.Lock()
	defer r.scanMu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	// StopScan only works once the scan has begun, so it is retried until
	// the scan returns.
	returned := make(chan struct{})
	go func() {
		select {
		case <-returned:
			return
		case <-ctx.Done():
		}
		for r.adapter.StopScan() != nil {
			select {
			case <-returned:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	err := r.adapter.Scan(func(_ *bluetooth.Adapter, res bluetooth.ScanResult) {
		if ctx.Err() != nil || !res.HasServiceUUID(serviceUUID) {
			return
		}
		name := res.LocalName()
		uid, ok := MountUID(name)
		if !ok {
			return // the name comes in the scan response: a later report has it
		}
		found(protocol.BLEDevice{Address: res.Address.String(), Name: name, MountUID: uid, RSSI: int(res.RSSI)})
	})
	close(returned)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// await runs a blocking D-Bus call within ctx; when ctx ends first, the
// call is left to finish and undo is applied to its result.
func await[T any](ctx context.Context, call func() (T, error), undo func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := call()
		ch <- result{v, err}
	}()
	select {
	case res := <-ch:
		return res.v, res.err
	case <-ctx.Done():
		go func() {
			if res := <-ch; res.err == nil && undo != nil {
				undo(res.v)
			}
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// Connect connects to the mount at address (its MAC), discovers the mount
// service and its characteristics, and subscribes to the state
// characteristic.
func (r *Radio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	mac, err := bluetooth.ParseMAC(address)
	if err != nil {
		return nil, fmt.Errorf("tinygo: address %q: %w", address, err)
	}
	dev, err := await(ctx, func() (bluetooth.Device, error) {
		return r.adapter.Connect(bluetooth.Address{MACAddress: bluetooth.MACAddress{MAC: mac}}, bluetooth.ConnectionParams{})
	}, func(d bluetooth.Device) { _ = d.Disconnect() })
	if err != nil {
		return nil, fmt.Errorf("tinygo: connect %s: %w", address, err)
	}
	l, err := await(ctx, func() (*link, error) { return discover(dev) }, func(l *link) { l.Close() })
	if err != nil {
		_ = dev.Disconnect()
		return nil, fmt.Errorf("tinygo: %s: %w", address, err)
	}
	go l.watch()
	return l, nil
}

func discover(dev bluetooth.Device) (*link, error) {
	services, err := dev.DiscoverServices([]bluetooth.UUID{serviceUUID})
	if err != nil {
		return nil, fmt.Errorf("no mount service: %w", err)
	}
	chars, err := services[0].DiscoverCharacteristics([]bluetooth.UUID{infoUUID, commandUUID, stateUUID})
	if err != nil {
		return nil, fmt.Errorf("mount characteristics: %w", err)
	}
	l := &link{dev: dev, info: chars[0], command: chars[1], state: chars[2],
		mtu: protocol.BLEDefaultMTU, frames: make(chan []byte, 256), acks: make(chan []byte, 256), done: make(chan struct{})}
	// BlueZ negotiates the MTU on connection; the characteristic reports it.
	if mtu, err := l.state.GetMTU(); err == nil && mtu >= protocol.BLEDefaultMTU {
		l.mtu = int(mtu)
	}
	if err := l.state.EnableNotifications(l.deliver); err != nil {
		return nil, fmt.Errorf("enable notifications: %w", err)
	}
	// The firmware characteristic (docs/ble.md, "Firmware"): optional, as
	// older firmware has none; its acknowledgements are notified.
	if fw, err := services[0].DiscoverCharacteristics([]bluetooth.UUID{firmwareUUID}); err == nil && len(fw) == 1 {
		l.firmware, l.hasFirmware = fw[0], true
		if err := l.firmware.EnableNotifications(l.deliverAck); err != nil {
			return nil, fmt.Errorf("enable firmware notifications: %w", err)
		}
	}
	return l, nil
}

// link is a GATT connection to one mount.
type link struct {
	dev                  bluetooth.Device
	info, command, state bluetooth.DeviceCharacteristic
	firmware             bluetooth.DeviceCharacteristic
	hasFirmware          bool
	mtu                  int

	frames   chan []byte
	acks     chan []byte // firmware characteristic notifications
	done     chan struct{}
	notifyMu sync.RWMutex // guards closing frames against deliver
	closed   bool
	once     sync.Once
}

// deliver takes one notification from BlueZ's signal goroutine.
func (l *link) deliver(value []byte) {
	l.notifyMu.RLock()
	defer l.notifyMu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.frames <- append([]byte(nil), value...):
	case <-l.done:
	}
}

// deliverAck takes one firmware acknowledgement from BlueZ.
func (l *link) deliverAck(value []byte) {
	l.notifyMu.RLock()
	defer l.notifyMu.RUnlock()
	if l.closed {
		return
	}
	select {
	case l.acks <- append([]byte(nil), value...):
	case <-l.done:
	}
}

// ErrNoFirmware is returned by the firmware calls on a mount without the
// firmware characteristic (older firmware).
var ErrNoFirmware = errors.New("tinygo: the mount has no firmware characteristic")

var _ sdk.FirmwareLink = (*link)(nil)

func (l *link) ReadFirmware(ctx context.Context) ([]byte, error) {
	if !l.hasFirmware {
		return nil, ErrNoFirmware
	}
	if l.isClosed() {
		return nil, ErrClosed
	}
	return await(ctx, func() ([]byte, error) {
		buf := make([]byte, protocol.BLEMaxAttrValue)
		n, err := l.firmware.Read(buf)
		return buf[:min(n, len(buf))], err
	}, nil)
}

func (l *link) WriteFirmware(ctx context.Context, frame []byte) error {
	if !l.hasFirmware {
		return ErrNoFirmware
	}
	if !protocol.FrameFits(frame, l.mtu) {
		return fmt.Errorf("tinygo: firmware frame of %d bytes at MTU %d", len(frame), l.mtu)
	}
	if l.isClosed() {
		return ErrClosed
	}
	_, err := await(ctx, func() (int, error) { return l.firmware.Write(frame) }, nil)
	return err
}

func (l *link) FirmwareAcks() <-chan []byte { return l.acks }

// watch notices the mount going away: BlueZ tells the library's connect
// handler only about disconnections asked for here, so it polls.
func (l *link) watch() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-l.done:
			return
		case <-t.C:
			if up, err := l.dev.Connected(); err != nil || !up {
				l.Close()
				return
			}
		}
	}
}

func (l *link) ReadInfo(ctx context.Context) ([]byte, error) {
	if l.isClosed() {
		return nil, ErrClosed
	}
	return await(ctx, func() ([]byte, error) {
		// BlueZ reads long values (Read Blob) by itself, so the info JSON
		// may exceed one MTU.
		buf := make([]byte, protocol.BLEMaxAttrValue)
		n, err := l.info.Read(buf)
		return buf[:min(n, len(buf))], err
	}, nil)
}

func (l *link) WriteFrame(ctx context.Context, frame []byte) error {
	if !protocol.FrameFits(frame, l.mtu) {
		return fmt.Errorf("tinygo: frame of %d bytes at MTU %d", len(frame), l.mtu)
	}
	if l.isClosed() {
		return ErrClosed
	}
	_, err := await(ctx, func() (int, error) { return l.command.Write(frame) }, nil)
	return err
}

func (l *link) Frames() <-chan []byte { return l.frames }
func (l *link) MTU() int              { return l.mtu }

func (l *link) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// Close unsubscribes, disconnects and closes Frames.
func (l *link) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		_ = l.state.EnableNotifications(nil)
		if l.hasFirmware {
			_ = l.firmware.EnableNotifications(nil)
		}
		err = l.dev.Disconnect()
		l.notifyMu.Lock()
		l.closed = true
		close(l.frames)
		close(l.acks)
		l.notifyMu.Unlock()
	})
	return err
}
