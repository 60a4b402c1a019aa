package sdk

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
)

// device is an open connection to one mount: it reassembles notifications,
// publishes them on the mount's stream and hands them to waiting actions.
type device struct {
	uid    string
	info   protocol.BLEInfo
	link   BLELink
	events *broadcaster[DeviceEvent]

	mu      sync.Mutex
	waiters []chan protocol.BLEMessage
	last    *protocol.BLEMessage // the latest states message, as notified
	offline []heard              // offline receipts notified (the log, use answers), oldest first
	acks    chan protocol.FirmwareAck
	writeMu sync.Mutex // one request (command, firmware read or frame) on the link at a time
	once    sync.Once
	done    chan struct{}
}

func newDevice(uid string, info protocol.BLEInfo, link BLELink, onClose func()) *device {
	// The latest states are replayed to a new subscriber of the device
	// stream, so it never misses the report a mount makes right after
	// connecting.
	hasStates := func(e DeviceEvent) bool { return e.States != nil }
	d := &device{uid: uid, info: info, link: link, events: newBroadcaster(hasStates), done: make(chan struct{}),
		acks: make(chan protocol.FirmwareAck, 64)}
	if fl, ok := link.(FirmwareLink); ok {
		go d.readAcks(fl)
	}
	go d.read(onClose)
	return d
}

func (d *device) read(onClose func()) {
	defer func() {
		d.once.Do(func() { close(d.done) })
		d.events.close()
		onClose()
	}()
	var r protocol.Reassembler
	for frame := range d.link.Frames() {
		raw, complete, err := r.Add(frame)
		if err != nil || !complete {
			continue
		}
		var msg protocol.BLEMessage
		if json.Unmarshal(raw, &msg) != nil {
			continue
		}
		ev := DeviceEvent{UID: d.uid, At: time.Now()}
		switch msg.Type {
		case protocol.BLEMessageStates:
			ev.States = msg.States
			d.mu.Lock()
			d.last = &msg
			d.mu.Unlock()
		case protocol.BLEMessageResult:
			r := resultOf(msg)
			ev.Result = &r
		case protocol.BLEMessageOffline:
			d.hear(msg)
		default:
			continue
		}
		if msg.Type != protocol.BLEMessageOffline {
			d.events.publish(ev)
		}
		d.mu.Lock()
		for _, w := range d.waiters {
			select {
			case w <- msg:
			default:
			}
		}
		d.mu.Unlock()
	}
}

// readAcks keeps the firmware characteristic's latest acknowledgements
// for an install; the oldest give way when nobody reads them.
func (d *device) readAcks(fl FirmwareLink) {
	for v := range fl.FirmwareAcks() {
		a, ok := protocol.ParseFirmwareAck(v)
		if !ok {
			continue
		}
		for {
			select {
			case d.acks <- a:
			default:
				select {
				case <-d.acks:
				default:
				}
				continue
			}
			break
		}
	}
}

// heard is an offline receipt the mount notified on this connection.
type heard struct {
	msg     protocol.BLEMessage
	carried bool // handed to the uploader (sent or queued)
	acked   bool // an ack naming it was written to the mount
}

// maxHeard bounds the offline receipts kept per connection: a mount's log
// holds at most protocol.MaxOfflineLog EXECUTED and as many REFUSED ones.
const maxHeard = 2 * protocol.MaxOfflineLog

// hear keeps an offline receipt (once per nonce); past maxHeard the
// oldest gives way.
func (d *device) hear(m protocol.BLEMessage) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.offline {
		if h.msg.Nonce == m.Nonce {
			return
		}
	}
	if len(d.offline) >= maxHeard {
		d.offline = d.offline[1:]
	}
	d.offline = append(d.offline, heard{msg: m})
}

// lastStates is the latest states message the mount notified, nil if none.
func (d *device) lastStates() *protocol.BLEMessage {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// watch returns the mount's messages from now on until stop is called.
func (d *device) watch() (<-chan protocol.BLEMessage, func()) {
	ch := make(chan protocol.BLEMessage, streamBuffer)
	d.mu.Lock()
	d.waiters = append(d.waiters, ch)
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		for i, w := range d.waiters {
			if w == ch {
				d.waiters = append(d.waiters[:i], d.waiters[i+1:]...)
				return
			}
		}
	}
}

// readFirmware reads the firmware characteristic, one request on the
// link at a time like every other action's.
func (d *device) readFirmware(ctx context.Context, fl FirmwareLink) ([]byte, error) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	return fl.ReadFirmware(ctx)
}

// writeFirmware writes one firmware frame, one request on the link at a
// time like every other action's.
func (d *device) writeFirmware(ctx context.Context, fl FirmwareLink, frame []byte) error {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	return fl.WriteFirmware(ctx, frame)
}

// send writes a message over the link in MTU-sized frames.
func (d *device) send(ctx context.Context, msg []byte) error {
	for _, f := range protocol.SplitFrames(msg, d.link.MTU()) {
		if err := d.link.WriteFrame(ctx, f); err != nil {
			return err
		}
	}
	return nil
}

func (d *device) close() error {
	err := d.link.Close()
	return err
}

// subscribe returns the device stream, starting with the latest states.
func (d *device) subscribe() <-chan DeviceEvent { return d.events.subscribe() }
