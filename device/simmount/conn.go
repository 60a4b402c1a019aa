package simmount

import (
	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
)

var _ sim.Peripheral = (*Mount)(nil)

// outbox bounds the messages waiting for one central. A central that reads
// nothing for that long loses the oldest news, not the mount's attention.
const outbox = 32

// peer is one connected central. Messages leave through one goroutine, so
// the frames of two messages never interleave and the mount never waits on
// a slow phone.
type peer struct {
	conn sim.PeripheralConn
	out  chan []byte // state characteristic messages; nil: hang up once what came before left
	acks chan []byte // firmware characteristic notifications
}

// hangUp drops the link once the messages queued before it left (the
// mount restarting after its receipt).
func (p *peer) hangUp() { p.send(nil) }

// ack queues a firmware acknowledgement; when the queue is full the
// oldest gives way (the phone reads the offset to resume anyway).
func (p *peer) ack(a protocol.FirmwareAck) {
	v := a.Encode()
	for {
		select {
		case p.acks <- v:
			return
		default:
		}
		select {
		case <-p.acks:
		default:
		}
	}
}

// send queues a message; when the queue is full the oldest gives way.
func (p *peer) send(msg []byte) {
	for {
		select {
		case p.out <- msg:
			return
		default:
		}
		select {
		case <-p.out:
		default:
		}
	}
}

func (p *peer) write() {
	for {
		select {
		case <-p.conn.Done():
			return
		case v := <-p.acks:
			if p.conn.NotifyFirmware(v) != nil {
				return
			}
		case msg := <-p.out:
			if msg == nil {
				p.conn.Close()
				return
			}
			for _, f := range protocol.SplitFrames(msg, p.conn.MTU()) {
				if p.conn.Notify(f) != nil {
					return
				}
			}
		}
	}
}

// Connected implements sim.Peripheral: the mount notifies its states once
// the central is there, then answers every command written.
func (m *Mount) Connected(conn sim.PeripheralConn) {
	p := &peer{conn: conn, out: make(chan []byte, outbox), acks: make(chan []byte, outbox)}
	m.mu.Lock()
	if m.silent {
		m.mu.Unlock()
		conn.Close()
		return
	}
	m.peers[p] = struct{}{}
	p.send(encode(m.statesMessageLocked()))
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.peers, p)
		m.mu.Unlock()
	}()
	go p.write()

	var r protocol.Reassembler
	for {
		select {
		case <-conn.Done():
			return
		case frame := <-conn.FirmwareFrames():
			ack, ok, receipt, restart := m.firmwareFrame(frame)
			if ok {
				p.ack(ack)
			}
			if receipt != nil {
				p.send(encode(*receipt))
			}
			if restart {
				m.restart()
				return
			}
		case frame := <-conn.Frames():
			raw, done, err := r.Add(frame)
			if err != nil {
				m.countRefused()
				p.send(encode(protocol.BLEMessage{Type: protocol.BLEMessageResult, Reason: ReasonBadFrame}))
				continue
			}
			if !done {
				continue
			}
			res, lockChanged, notify := m.handle(raw)
			p.send(encode(res)) // the result before the states it may cause
			m.announce(lockChanged, notify)
		}
	}
}
