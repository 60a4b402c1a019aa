package main

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// countingRadio counts, for each rider connection, the BLE bytes of its
// offline part: the time token, revocation list and ack writes with the
// mount's answers, and the log entries the mount notified (frames as on
// the air, their one-byte headers included); and the largest use written.
type countingRadio struct {
	sdk.Radio
	o *offline
}

func (r *countingRadio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := r.Radio.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	c := &countingLink{BLELink: l, o: r.o, frames: make(chan []byte, cap(l.Frames())), done: make(chan struct{})}
	go c.forward()
	return c, nil
}

type countingLink struct {
	sdk.BLELink
	o      *offline
	frames chan []byte
	done   chan struct{} // closed by Close: nobody reads frames any more

	mu               sync.Mutex
	in, out          protocol.Reassembler
	inN, outN        int64 // bytes of the message being reassembled
	time, list, logs int64
	use              string // nonce of the last use written: its answer is not log
	closeOnce        sync.Once
}

func (c *countingLink) Frames() <-chan []byte { return c.frames }

func (c *countingLink) WriteFrame(ctx context.Context, frame []byte) error {
	c.mu.Lock()
	c.outN += int64(len(frame))
	if msg, done, err := c.out.Add(frame); err == nil && done {
		var w protocol.BLEUse
		_ = json.Unmarshal(msg, &w)
		switch w.Type {
		case protocol.BLEWriteTime:
			c.time += c.outN
		case protocol.BLEWriteRevocations:
			c.list += c.outN
		case protocol.BLEWriteAck:
			c.logs += c.outN
		case protocol.BLEWriteUse:
			c.use = w.Nonce
			maxInto(&c.o.useBytes, int64(len(msg)))
		}
		c.outN = 0
	}
	c.mu.Unlock()
	return c.BLELink.WriteFrame(ctx, frame)
}

// forward passes the mount's notifications on, counting them.
func (c *countingLink) forward() {
	defer close(c.frames)
	for frame := range c.BLELink.Frames() {
		c.mu.Lock()
		c.inN += int64(len(frame))
		if msg, done, err := c.in.Add(frame); err == nil && done {
			var m protocol.BLEMessage
			_ = json.Unmarshal(msg, &m)
			switch {
			case m.Type == protocol.BLEMessageResult && m.Code == protocol.BLEWriteTime:
				c.time += c.inN
			case m.Type == protocol.BLEMessageResult && m.Code == protocol.BLEWriteRevocations:
				c.list += c.inN
			case m.Type == protocol.BLEMessageResult && m.Code == protocol.BLEWriteAck:
				c.logs += c.inN
			case m.Type == protocol.BLEMessageOffline && m.Nonce != c.use:
				c.logs += c.inN
			}
			c.inN = 0
		}
		c.mu.Unlock()
		select {
		case c.frames <- frame:
		case <-c.done:
		}
	}
}

func (c *countingLink) Close() error {
	err := c.BLELink.Close()
	c.closeOnce.Do(func() {
		close(c.done)
		c.mu.Lock()
		total := c.time + c.list + c.logs
		c.o.conns.Add(1)
		c.o.connBytes.Add(total)
		c.o.timeBytes.Add(c.time)
		c.o.listBytes.Add(c.list)
		c.o.logBytes.Add(c.logs)
		maxInto(&c.o.connMax, total)
		c.mu.Unlock()
	})
	return err
}
