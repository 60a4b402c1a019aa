package simmount

import (
	"sync"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
)

var _ sim.Peripheral = (*Mount)(nil)

// outbox bounds the news waiting for one central (states notifications,
// progress acknowledgements): a central that reads nothing for that long
// loses the oldest news, not the mount's attention. Results (receipts),
// the final acknowledgements and the hang-up are never dropped; a central
// that lets keptMax of them pile up unread is cut off.
const (
	outbox  = 32
	keptMax = 4 * outbox
)

// item is one thing queued for a central, in the order the mount made it.
type item struct {
	firmware bool   // a notification of the firmware characteristic (else the state characteristic's message)
	data     []byte // nil on the state characteristic: hang up
	keep     bool   // never dropped: a result, a final acknowledgement, the hang-up
}

// peer is one connected central. What it is sent leaves through one
// goroutine in one ordered queue (a "complete" acknowledgement before the
// receipt that follows it, the receipt before the hang-up), so the frames
// of two messages never interleave and the mount never waits on a slow
// phone.
type peer struct {
	conn sim.PeripheralConn

	mu    sync.Mutex
	queue []item
	ready chan struct{} // signalled when the queue grew

	// The mount's log of offline receipts as it stood at connection, sent
	// one receipt per message whenever nothing else waits: entries with a
	// counter above logAfter and at most logUpTo (acknowledged ones are
	// skipped). Only the writing goroutine touches logAfter.
	nextLog  func(after, upTo uint64) ([]byte, uint64, bool)
	logAfter uint64
	logUpTo  uint64
}

func newPeer(conn sim.PeripheralConn) *peer {
	return &peer{conn: conn, ready: make(chan struct{}, 1)}
}

// hangUp drops the link once what was queued before it left (the mount
// restarting after its receipt).
func (p *peer) hangUp() { p.push(item{keep: true}) }

// ack queues a firmware acknowledgement: progress and wrong offset are
// news (the phone reads the status anyway); the others are kept.
func (p *peer) ack(a protocol.FirmwareAck) {
	keep := a.Kind != protocol.AckProgress && a.Kind != protocol.AckWrongOffset
	p.push(item{firmware: true, data: a.Encode(), keep: keep})
}

// send queues a message of the state characteristic: a result is kept,
// states are news.
func (p *peer) send(msg []byte, keep bool) { p.push(item{data: msg, keep: keep}) }

func (p *peer) push(it item) {
	p.mu.Lock()
	if !it.keep && p.news() >= outbox {
		for i, q := range p.queue { // the oldest news gives way
			if !q.keep {
				p.queue = append(p.queue[:i], p.queue[i+1:]...)
				break
			}
		}
	}
	p.queue = append(p.queue, it)
	cut := len(p.queue) > keptMax+outbox
	p.mu.Unlock()
	if cut {
		p.conn.Close() // it reads nothing: flow control would stall it anyway
		return
	}
	select {
	case p.ready <- struct{}{}:
	default:
	}
}

// news counts the droppable items queued; p.mu held.
func (p *peer) news() int {
	n := 0
	for _, q := range p.queue {
		if !q.keep {
			n++
		}
	}
	return n
}

func (p *peer) pop() (item, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		return item{}, false
	}
	it := p.queue[0]
	p.queue = p.queue[1:]
	return it, true
}

func (p *peer) write() {
	for {
		it, ok := p.pop()
		if !ok && p.nextLog != nil {
			if msg, counter, more := p.nextLog(p.logAfter, p.logUpTo); more {
				p.logAfter = counter
				it, ok = item{data: msg, keep: true}, true
			}
		}
		if !ok {
			select {
			case <-p.conn.Done():
				return
			case <-p.ready:
			}
			continue
		}
		switch {
		case it.firmware:
			if p.conn.NotifyFirmware(it.data) != nil {
				return
			}
		case it.data == nil:
			p.conn.Close()
			return
		default:
			for _, f := range protocol.SplitFrames(it.data, p.conn.MTU()) {
				if p.conn.Notify(f) != nil {
					return
				}
			}
		}
	}
}

// Connected implements sim.Peripheral: the mount notifies its states once
// the central is there, then its log of offline receipts, and answers
// every command (and offline write) written.
func (m *Mount) Connected(conn sim.PeripheralConn) {
	p := newPeer(conn)
	m.mu.Lock()
	if m.silent {
		m.mu.Unlock()
		conn.Close()
		return
	}
	m.peers[p] = struct{}{}
	p.send(encode(m.statesMessageLocked()), false)
	p.nextLog, p.logUpTo = m.nextLogMessage, m.logHeadLocked()
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
			ack, ok, receipt, restart := m.firmwareFrame(frame, p)
			if ok {
				p.ack(ack)
			}
			if receipt != nil {
				p.send(encode(*receipt), true)
			}
			if restart {
				m.restart()
				return
			}
		case frame := <-conn.Frames():
			raw, done, err := r.Add(frame)
			if err != nil {
				m.countRefused()
				p.send(encode(protocol.BLEMessage{Type: protocol.BLEMessageResult, Reason: ReasonBadFrame}), true)
				continue
			}
			if !done {
				continue
			}
			res, lockChanged, notify := m.handle(raw, p)
			p.send(encode(res), true) // the result before the states it may cause
			m.announce(lockChanged, notify)
		}
	}
}

// alive reports whether the link is still up.
func (p *peer) alive() bool {
	select {
	case <-p.conn.Done():
		return false
	default:
		return true
	}
}
