package sdk

import (
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
)

// EngineEvent is an event of the global BLE engine state stream.
type EngineEvent interface{ engineEvent() }

// ScanStarted: a scan began.
type ScanStarted struct{ At time.Time }

// ScanResultEvent carries every mount found so far in the current scan; one
// is emitted each time a new mount is found.
type ScanResultEvent struct {
	Devices []protocol.BLEDevice
	At      time.Time
}

// ScanStopped: the scan ended, with what it found.
type ScanStopped struct {
	Devices []protocol.BLEDevice
	At      time.Time
}

// Connected: a connection to a mount is open.
type Connected struct {
	UID  string
	Info protocol.BLEInfo
	At   time.Time
}

// Disconnected: the connection to a mount closed.
type Disconnected struct {
	UID string
	At  time.Time
}

// ErrorEvent: something failed in the engine (UID set when it concerns one mount).
type ErrorEvent struct {
	UID string
	Err error
	At  time.Time
}

func (ScanStarted) engineEvent()     {}
func (ScanResultEvent) engineEvent() {}
func (ScanStopped) engineEvent()     {}
func (Connected) engineEvent()       {}
func (Disconnected) engineEvent()    {}
func (ErrorEvent) engineEvent()      {}

// DeviceEvent is an event of one mount's device state stream: either the
// mount's states (States set) or a command outcome (Result set).
type DeviceEvent struct {
	UID    string
	States []protocol.BLEStateEntry
	Result *CommandResult
	At     time.Time
}

// CommandResult is a mount's answer to a command.
type CommandResult struct {
	Code     string
	Nonce    string
	Accepted bool
	Reason   string
	// Receipt is the mount's signed account of the command (EXECUTED or
	// REFUSED), as uploaded to the API; nil when the mount did not sign
	// its answer (older firmware, or a command refused before its
	// signature verified).
	Receipt *protocol.UploadReceipt
}

func resultOf(m protocol.BLEMessage) CommandResult {
	return CommandResult{Code: m.Code, Nonce: m.Nonce, Accepted: m.Accepted, Reason: m.Reason, Receipt: receiptOf(m)}
}

// broadcaster fans events out to subscribers through bounded buffers; a
// subscriber that falls behind misses events, so the BLE reader never waits.
// With retain set, the latest event it accepts is kept and queued first for
// every new subscriber, under the same lock as publishing, so a subscriber
// never starts from an older event than the ones it is sent.
type broadcaster[T any] struct {
	retain func(T) bool

	mu     sync.Mutex
	subs   []chan T
	closed bool
	last   *T
}

const streamBuffer = 64

func newBroadcaster[T any](retain func(T) bool) *broadcaster[T] {
	return &broadcaster[T]{retain: retain}
}

func (b *broadcaster[T]) subscribe() <-chan T {
	b.mu.Lock()
	defer b.mu.Unlock()
	ch := make(chan T, streamBuffer)
	if b.last != nil {
		ch <- *b.last
	}
	if b.closed {
		close(ch)
		return ch
	}
	b.subs = append(b.subs, ch)
	return ch
}

func (b *broadcaster[T]) publish(v T) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.retain != nil && b.retain(v) {
		b.last = &v
	}
	for _, ch := range b.subs {
		select {
		case ch <- v:
		default:
		}
	}
}

func (b *broadcaster[T]) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for _, ch := range b.subs {
		close(ch)
	}
	b.subs = nil
}
