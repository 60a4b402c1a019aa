package simmount

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strconv"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
)

var (
	_ sim.FirmwarePeripheral = (*Mount)(nil)
	_ sim.QuietPeripheral    = (*Mount)(nil)
)

// transfer is a firmware image on its way in (docs/ble.md, "Firmware").
// It is forgotten protocol.FirmwareIdleTimeout after its command or its
// last frame.
// The mount keeps no image: it hashes the bytes as they come, in order, so
// memory stays bounded whatever the size. A transfer lives in memory only:
// a mount restarted (power loss) mid-transfer has forgotten it.
type transfer struct {
	nonce    string
	revision string
	sha256   string
	size     int64
	offset   int64
	hash     hash.Hash
	expires  time.Time
	// owner is the link whose command opened or took over the transfer
	// (nil: none, as through Handle): only its frames count while it
	// lives; once it is gone, the next link to write a frame adopts it
	// (a phone resuming on a new link).
	owner *peer
}

// installLocked opens (or takes over) a transfer for a verified
// INSTALL_FIRMWARE that came on link from; its reason is a refusal, empty
// when the mount now waits for the image (the result is then no receipt).
func (m *Mount) installLocked(p protocol.Payload, now time.Time, from *peer) string {
	code := protocol.CmdInstallFirmware
	rev, sum, sizeText := p.Params["revision"], p.Params["sha256"], p.Params["size"]
	size, err := strconv.ParseInt(sizeText, 10, 64)
	if !protocol.ValidCommandParam(code, "revision", rev) || !protocol.ValidCommandParam(code, "sha256", sum) ||
		!protocol.ValidCommandParam(code, "size", sizeText) || err != nil || size > protocol.FirmwareMaxSize {
		return ReasonBadParameters
	}
	// The nonce is used up now; the transfer lives while frames come.
	expires := now.Add(protocol.FirmwareIdleTimeout)
	if x := m.liveTransferLocked(now); x != nil {
		if x.sha256 != sum || x.size != size {
			return ReasonBusy
		}
		// The same image under a fresh command (the first one expired, or
		// another phone carries on): the bytes received are kept.
		// A copy: a command that cannot be saved leaves the old one as it was.
		taken := *x
		taken.nonce, taken.revision, taken.expires, taken.owner = p.Nonce, rev, expires, from
		m.xfer = &taken
	} else {
		m.xfer = &transfer{nonce: p.Nonce, revision: rev, sha256: sum, size: size, hash: sha256.New(), expires: expires, owner: from}
	}
	return ""
}

// liveTransferLocked is the transfer under way, forgetting an expired one.
func (m *Mount) liveTransferLocked(now time.Time) *transfer {
	if m.xfer != nil && !now.Before(m.xfer.expires) {
		m.xfer = nil
	}
	return m.xfer
}

// FirmwareStatus implements sim.FirmwarePeripheral: the firmware
// characteristic's value, a protocol.FirmwareStatus.
func (m *Mount) FirmwareStatus() []byte {
	m.mu.Lock()
	st := protocol.FirmwareStatus{State: protocol.FirmwareIdle}
	if x := m.liveTransferLocked(m.cfg.Now()); x != nil {
		st = protocol.FirmwareStatus{Nonce: x.nonce, Revision: x.revision, Offset: x.offset, Size: x.size,
			State: protocol.FirmwareReceiving}
	}
	m.mu.Unlock()
	raw, _ := json.Marshal(st)
	return raw
}

// Advertising implements sim.QuietPeripheral: a mount failed silent after
// an update advertises nothing.
func (m *Mount) Advertising() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.silent
}

// Silent reports whether the mount failed silent after an update: it
// reports nothing more (mountsim skips its reports).
func (m *Mount) Silent() bool { return !m.Advertising() }

// firmwareFrame takes one write of the firmware characteristic. It
// returns the acknowledgement to notify (ok false: none), the receipt
// when the transfer ended, and whether the mount restarts after it.
func (m *Mount) firmwareFrame(frame []byte, from *peer) (ack protocol.FirmwareAck, ok bool, receipt *protocol.BLEMessage, restart bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	expired := m.xfer != nil && !now.Before(m.xfer.expires)
	x := m.liveTransferLocked(now)
	switch {
	case expired:
		return protocol.FirmwareAck{Kind: protocol.AckExpired}, true, nil, false
	case x == nil, x.owner != nil && x.owner != from && x.owner.alive():
		// None, or another link's while that link lives.
		return protocol.FirmwareAck{Kind: protocol.AckNoTransfer}, true, nil, false
	}
	x.owner = from
	x.expires = now.Add(protocol.FirmwareIdleTimeout) // a frame: the link is alive
	offset, data, parsed := protocol.ParseFirmwareFrame(frame)
	if parsed && offset < x.offset {
		// Bytes held already (a phone resending after a late
		// acknowledgement): ignored without a word, so a resend never
		// causes more resends; a frame overlapping the offset gives its tail.
		if offset+int64(len(data)) <= x.offset {
			return protocol.FirmwareAck{}, false, nil, false
		}
		data, offset = data[x.offset-offset:], x.offset
	}
	if !parsed || offset != x.offset {
		// A gap ahead: a frame was lost on the way.
		return protocol.FirmwareAck{Kind: protocol.AckWrongOffset, Offset: x.offset}, true, nil, false
	}
	if x.offset+int64(len(data)) > x.size {
		m.xfer = nil
		res := m.finishLocked(x, ReasonBadImage)
		return protocol.FirmwareAck{Kind: protocol.AckBadImage, Offset: x.offset}, true, &res, false
	}
	before := x.offset
	x.hash.Write(data)
	x.offset += int64(len(data))
	if x.offset < x.size {
		if before/protocol.FirmwareAckEvery != x.offset/protocol.FirmwareAckEvery {
			return protocol.FirmwareAck{Kind: protocol.AckProgress, Offset: x.offset}, true, nil, false
		}
		return protocol.FirmwareAck{}, false, nil, false
	}
	m.xfer = nil
	if hex.EncodeToString(x.hash.Sum(nil)) != x.sha256 {
		res := m.finishLocked(x, ReasonBadImage)
		return protocol.FirmwareAck{Kind: protocol.AckBadImage, Offset: x.offset}, true, &res, false
	}
	res := m.finishLocked(x, "")
	return protocol.FirmwareAck{Kind: protocol.AckComplete, Offset: x.offset}, true, &res, res.Accepted
}

// finishLocked ends a transfer: the receipt for its command, executed
// (reason empty: the new revision is saved first) or refused.
func (m *Mount) finishLocked(x *transfer, reason string) protocol.BLEMessage {
	res := protocol.BLEMessage{Type: protocol.BLEMessageResult, Code: string(protocol.CmdInstallFirmware), Nonce: x.nonce}
	before := m.persistedLocked().clone()
	if reason == "" {
		switch m.cfg.FirmwareFailure {
		case FailSilent:
			m.silent = true
		case FailRollback:
			m.rollbackTo, m.newReports = m.revision, 0
		}
		m.revision = x.revision
	}
	if m.saveForReceiptLocked() != nil {
		_ = m.applyLocked(before)
		m.refused++
		res.Reason = ReasonStorage
		return res
	}
	res.Reason, res.Accepted = reason, reason == ""
	if res.Accepted {
		m.accepted++
	} else {
		m.refused++
	}
	m.signReceiptLocked(&res)
	return res
}

// restart is the mount rebooting into what it installed: every link
// drops once what was queued for it left, and the mount comes back from
// its store (device key, counter reservation, replay memory, revision).
func (m *Mount) restart() {
	m.mu.Lock()
	peers := make([]*peer, 0, len(m.peers))
	for p := range m.peers {
		peers = append(peers, p)
	}
	m.restarts++
	if st, found, err := m.cfg.Store.Load(m.cfg.UID); err == nil && found {
		if m.applyLocked(st) == nil {
			m.counter, m.reserved = st.CounterReserved, st.CounterReserved
			m.restartClockLocked(st)
		}
	}
	m.xfer = nil
	m.mu.Unlock()
	for _, p := range peers {
		p.hangUp()
	}
}
