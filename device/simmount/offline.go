package simmount

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Offline access (docs/ble.md, "Offline access"; CONTRACT §21): the
// mount's trusted clock, its challenges, revocation list and log of
// offline receipts, and the uses, time tokens, lists and acks written to
// it.

// Refusals of the offline writes other than the use's own
// (protocol.Reason*): all unsigned.
const (
	// ReasonUnknownChallenge: a time token for a nonce the mount did not
	// give out in the last minute, or gave out and saw used already.
	ReasonUnknownChallenge = "unknown challenge"
	// ReasonOlderList: a revocation list older (by version) than the one
	// the mount holds; it keeps its own.
	ReasonOlderList = "older list"
)

const (
	// maxChallenges bounds the challenges outstanding: reading the info
	// characteristic gives one out, and anyone may read it; past the
	// bound the oldest is forgotten.
	maxChallenges = 16
	// maxRefusedLog bounds the REFUSED receipts of the log (at most one
	// per grant and reason is kept anyway); past it a refusal is still
	// answered signed, but not kept.
	maxRefusedLog = 256
	// clockSaveEvery: the trusted clock is persisted at least this often
	// while the mount is in use, and at every change of F.
	clockSaveEvery = 10 * time.Minute
)

// trustedClock is T = F + (m − m_F): F the last trusted time, m the
// mount's monotonic clock (Config.Now), m_F its reading when F was set.
type trustedClock struct {
	f, mf   time.Time
	trusted bool      // trusted time arrived since this start
	savedT  int64     // T (Unix ms) as last persisted
	savedM  time.Time // m when it was
}

// trustedLocked is T at the monotonic reading mono, in milliseconds (the
// precision it is signed and persisted with).
func (m *Mount) trustedLocked(mono time.Time) time.Time {
	return m.clock.f.Add(mono.Sub(m.clock.mf)).Truncate(time.Millisecond)
}

// nowLocked reads the clocks: m and T. It persists T when that was last
// done clockSaveEvery ago (best effort: the next use tries again).
func (m *Mount) nowLocked() (mono, t time.Time) {
	mono = m.cfg.Now()
	if mono.Sub(m.clock.savedM) >= clockSaveEvery {
		_ = m.saveLocked(m.reserved)
	}
	return mono, m.trustedLocked(mono)
}

// clockToSaveLocked is the T to persist: never below what was saved.
func (m *Mount) clockToSaveLocked() int64 {
	return max(m.clock.savedT, m.trustedLocked(m.cfg.Now()).UnixMilli())
}

// restartClockLocked is the clock of a mount started again from st: T
// goes on from the T it saved, and trusted time is awaited again; the
// challenges given out before are gone.
func (m *Mount) restartClockLocked(st State) {
	now := m.cfg.Now()
	m.clock.trusted, m.clock.mf, m.clock.savedM = false, now, now
	if st.Clock != 0 {
		m.clock.f, m.clock.savedT = time.UnixMilli(st.Clock).UTC(), st.Clock
	}
	m.challenges = map[string]time.Time{}
}

// trustLocked takes a trusted time (a verified time token, an accepted
// signed command): F moves to it when it is later than T; either way
// trusted time has arrived since this start.
func (m *Mount) trustLocked(at, mono time.Time) {
	if at.After(m.trustedLocked(mono)) {
		m.clock.f, m.clock.mf = at, mono
	}
	m.clock.trusted = true
}

// staleLocked judges a signed command's time against T: within 5 minutes
// either way once trusted time arrived since this start; before that only
// a command older than T − 5 minutes is stale (the clock may lag after a
// restart, never run ahead).
func (m *Mount) staleLocked(generated, t time.Time) bool {
	age := t.Sub(generated)
	return age > protocol.CommandLifetime || (m.clock.trusted && -age > protocol.CommandLifetime)
}

// Challenge gives out a fresh challenge, as a read of the info
// characteristic does; empty on firmware without offline access (Legacy).
func (m *Mount) Challenge() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.challengeLocked()
}

func (m *Mount) challengeLocked() string {
	if m.deviceKey == nil {
		return ""
	}
	mono, _ := m.nowLocked()
	for n, at := range m.challenges {
		if mono.Sub(at) >= protocol.ChallengeLifetime {
			delete(m.challenges, n)
		}
	}
	for len(m.challenges) >= maxChallenges {
		oldest := ""
		for n, at := range m.challenges {
			if oldest == "" || at.Before(m.challenges[oldest]) {
				oldest = n
			}
		}
		delete(m.challenges, oldest)
	}
	nonce := protocol.NewNonce()
	m.challenges[nonce] = mono
	return nonce
}

// liveChallengeLocked reports whether nonce was given out less than
// ChallengeLifetime ago and not used since.
func (m *Mount) liveChallengeLocked(nonce string, mono time.Time) bool {
	at, ok := m.challenges[nonce]
	return ok && mono.Sub(at) < protocol.ChallengeLifetime
}

// Offline is the mount's offline-access status, for tests and tools.
type Offline struct {
	Time              time.Time // T
	TimeTrusted       bool
	RevocationVersion int64
	Epoch             int64
	Revoked           []string
	Log               []protocol.BLEMessage // unacknowledged receipts, oldest first
}

// Offline returns the mount's offline-access status.
func (m *Mount) Offline() Offline {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, t := m.nowLocked()
	o := Offline{Time: t, TimeTrusted: m.clock.trusted, RevocationVersion: m.revVersion, Epoch: m.revEpoch,
		Revoked: slices.Sorted(maps.Keys(m.revoked))}
	for _, e := range m.offlineLog {
		o.Log = append(o.Log, e.message())
	}
	return o
}

// message is the offline message of a log entry.
func (e OfflineEntry) message() protocol.BLEMessage {
	counter := e.Counter
	return protocol.BLEMessage{Type: protocol.BLEMessageOffline, GrantID: e.GrantID, Code: e.Code, Nonce: e.Nonce,
		Accepted: e.Outcome == protocol.OutcomeExecuted, Outcome: e.Outcome, Reason: e.Reason, Counter: &counter,
		At: e.At, Signature: e.Signature}
}

// nextLogMessage is the first log entry with a counter above after and at
// most upTo, encoded; ok false when none is left.
func (m *Mount) nextLogMessage(after, upTo uint64) (msg []byte, counter uint64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range m.offlineLog { // oldest first: counters ascend
		if e.Counter > after && e.Counter <= upTo {
			return encode(e.message()), e.Counter, true
		}
	}
	return nil, 0, false
}

// logHeadLocked is the counter of the newest log entry (0: empty).
func (m *Mount) logHeadLocked() uint64 {
	if len(m.offlineLog) == 0 {
		return 0
	}
	return m.offlineLog[len(m.offlineLog)-1].Counter
}

// offlineWrite is the type of an offline write; "" for a command.
func offlineWrite(raw []byte) string {
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(raw, &probe) != nil {
		return ""
	}
	return probe.Type
}

// handleOffline answers an offline write (typ is its type). Like handle it
// reports whether the lock or helmet changed and whether the states are
// due to centrals.
func (m *Mount) handleOffline(raw []byte, typ string) (res protocol.BLEMessage, lockChanged, notify bool) {
	if typ == protocol.BLEWriteUse {
		m.mu.Lock()
		start := time.Now()
		res, lockChanged, notify = m.useLocked(raw)
		took := time.Since(start)
		m.mu.Unlock()
		if m.cfg.OnUse != nil {
			m.cfg.OnUse(m, res, took)
		}
		return res, lockChanged, notify
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	res = protocol.BLEMessage{Type: protocol.BLEMessageResult, Code: typ}
	var w protocol.BLESignedText
	if err := json.Unmarshal(raw, &w); err != nil {
		res.Reason = ReasonMalformed
		m.refused++
		return res, false, false
	}
	var reason string
	switch typ {
	case protocol.BLEWriteTime:
		reason = m.timeTokenLocked(w)
	case protocol.BLEWriteRevocations:
		reason = m.revocationsLocked(w)
	case protocol.BLEWriteAck:
		reason = m.ackLocked(w)
	default:
		reason = ReasonMalformed
	}
	res.Reason, res.Accepted = reason, reason == ""
	if res.Accepted {
		m.accepted++
	} else {
		m.refused++
	}
	return res, false, false
}

// ownerText checks what an owner-signed write has in common: an owner
// key, a text of its kind (verify: a protocol.Verify… function), the
// signature, the uid. reason is empty when it passed.
func ownerText[T any](m *Mount, w protocol.BLESignedText, verify func(ed25519.PublicKey, string, string) (T, error),
	uid func(T) string) (v T, reason string) {
	if m.owner == nil {
		return v, ReasonNoOwner
	}
	v, err := verify(m.owner, w.Text, w.Signature)
	switch {
	case errors.Is(err, protocol.ErrBadSignature):
		return v, ReasonBadSignature
	case err != nil:
		return v, ReasonMalformed
	case uid(v) != m.cfg.UID:
		return v, ReasonWrongMount
	}
	return v, ""
}

// commitLocked saves what an offline write changed; on failure it puts
// back the state before (and the clock) and answers storage failure.
func (m *Mount) commitLocked(before State, clockBefore trustedClock) string {
	if m.saveLocked(m.reserved) != nil {
		_ = m.applyLocked(before)
		m.clock = clockBefore
		return ReasonStorage
	}
	return ""
}

func (m *Mount) timeTokenLocked(w protocol.BLESignedText) string {
	tt, reason := ownerText(m, w, protocol.VerifyTimeText, func(t protocol.TimeToken) string { return t.UID })
	if reason != "" {
		return reason
	}
	mono, _ := m.nowLocked()
	if !m.liveChallengeLocked(tt.Nonce, mono) {
		return ReasonUnknownChallenge
	}
	before, clockBefore := m.persistedLocked().clone(), m.clock
	m.trustLocked(tt.At, mono)
	if reason := m.commitLocked(before, clockBefore); reason != "" {
		return reason
	}
	delete(m.challenges, tt.Nonce)
	return ""
}

func (m *Mount) revocationsLocked(w protocol.BLESignedText) string {
	list, reason := ownerText(m, w, protocol.VerifyRevocations, func(r protocol.Revocations) string { return r.UID })
	if reason != "" {
		return reason
	}
	if list.Version < m.revVersion {
		return ReasonOlderList
	}
	before, clockBefore := m.persistedLocked().clone(), m.clock
	m.revVersion, m.revEpoch = list.Version, max(m.revEpoch, list.Epoch)
	m.revoked = map[string]bool{}
	for _, id := range list.GrantIDs {
		m.revoked[id] = true
	}
	return m.commitLocked(before, clockBefore)
}

func (m *Mount) ackLocked(w protocol.BLESignedText) string {
	ack, reason := ownerText(m, w, protocol.VerifyAck, func(a protocol.Ack) string { return a.UID })
	if reason != "" {
		return reason
	}
	acked := map[string]bool{}
	for _, n := range ack.Nonces {
		acked[n] = true
	}
	before, clockBefore := m.persistedLocked().clone(), m.clock
	m.offlineLog = slices.DeleteFunc(m.offlineLog, func(e OfflineEntry) bool { return acked[e.Nonce] })
	return m.commitLocked(before, clockBefore)
}

// useLocked runs the six checks of a use in §21's order and, from the
// revocation check on, signs an offline receipt, logs it and executes on
// success.
func (m *Mount) useLocked(raw []byte) (res protocol.BLEMessage, lockChanged, notify bool) {
	res = protocol.BLEMessage{Type: protocol.BLEMessageResult}
	var use protocol.BLEUse
	if err := json.Unmarshal(raw, &use); err != nil || !protocol.ValidNonce(use.Nonce) {
		res.Reason = ReasonMalformed
		m.refused++
		return res, false, false
	}
	res.Code, res.Nonce = use.Code, use.Nonce
	mono, t := m.nowLocked()
	// (1)–(3): answered unsigned, nothing kept, the challenge not used up
	// (a stranger cannot spend a rider's challenge).
	executed := 0
	for _, e := range m.offlineLog {
		if e.Outcome == protocol.OutcomeExecuted {
			executed++
		}
	}
	var grant protocol.Grant
	var grantErr error
	if m.owner != nil {
		grant, grantErr = protocol.VerifyGrant(m.owner, use.Grant, use.GrantSignature)
	}
	rider, riderErr := protocol.ParseRiderKey(grant.RiderKey)
	switch {
	case executed >= protocol.MaxOfflineLog:
		res.Reason = protocol.ReasonLogFull
	case m.owner == nil || grantErr != nil || grant.UID != m.cfg.UID || riderErr != nil:
		res.Reason = protocol.ReasonBadGrant
	case !m.liveChallengeLocked(use.Nonce, mono) ||
		!protocol.VerifyRider(rider, protocol.BuildUseText(m.cfg.UID, grant.ID, use.Code, use.Nonce), use.Proof):
		res.Reason = protocol.ReasonBadProof
	}
	if res.Reason != "" {
		m.refused++
		return res, false, false
	}

	// (4)–(6): a signed receipt either way.
	var reason string
	switch {
	case m.revoked[grant.ID] || grant.Epoch < m.revEpoch:
		reason = protocol.ReasonRevoked
	case !grant.HasRight(use.Code) || use.Code != string(protocol.CmdReleaseHelmet):
		// RELEASE_HELMET is the one right a mount runs offline (it needs
		// no parameters).
		reason = protocol.ReasonNotGranted
	case !m.clock.trusted && (t.Before(grant.NotBefore) || t.After(grant.NotAfter)):
		reason = protocol.ReasonNoTrustedTime
	case t.Before(grant.NotBefore):
		reason = protocol.ReasonNotYetValid
	case t.After(grant.NotAfter):
		reason = protocol.ReasonExpired
	}
	before, clockBefore := m.persistedLocked().clone(), m.clock
	counter, ok := m.nextCounterLocked()
	if !ok {
		res.Reason = ReasonStorage
		m.refused++
		return res, false, false
	}
	rc := protocol.OfflineReceipt{UID: m.cfg.UID, GrantID: grant.ID, Code: use.Code, Nonce: use.Nonce,
		Outcome: protocol.OutcomeExecuted, Reason: reason, Counter: counter, At: t}
	if reason != "" {
		rc.Outcome = protocol.OutcomeRefused
	}
	entry := OfflineEntry{GrantID: rc.GrantID, Code: rc.Code, Nonce: rc.Nonce, Outcome: rc.Outcome, Reason: reason,
		Counter: counter, At: protocol.FormatTime(t), Signature: protocol.Sign(m.deviceKey, protocol.BuildOfflineReceiptText(rc))}
	if m.keepInLogLocked(entry) {
		m.offlineLog = append(m.offlineLog, entry)
	}
	if reason == "" {
		lockChanged = m.releaseLocked(t)
	}
	if storage := m.commitLocked(before, clockBefore); storage != "" {
		res.Reason = storage
		m.refused++
		return res, false, false
	}
	delete(m.challenges, use.Nonce)
	if reason == "" {
		m.accepted++
	} else {
		m.refused++
	}
	return entry.message(), lockChanged, reason == ""
}

// keepInLogLocked reports whether a new receipt goes into the log: every
// EXECUTED one (the use check keeps their number bounded), a REFUSED one
// unless one for the same grant and reason waits already, within
// maxRefusedLog.
func (m *Mount) keepInLogLocked(e OfflineEntry) bool {
	if e.Outcome == protocol.OutcomeExecuted {
		return true
	}
	refused := 0
	for _, old := range m.offlineLog {
		if old.Outcome != protocol.OutcomeRefused {
			continue
		}
		if old.GrantID == e.GrantID && old.Reason == e.Reason {
			return false
		}
		refused++
	}
	return refused < maxRefusedLog
}

// releaseLocked unlocks and gives the helmet, as an accepted
// RELEASE_HELMET does; it reports whether anything changed.
func (m *Mount) releaseLocked(t time.Time) (changed bool) {
	if m.locked {
		m.locked, m.lockAt, changed = false, t, true
	}
	if m.helmet {
		m.helmet, m.helmetAt, changed = false, t, true
	}
	return changed
}

// restoreOfflineLocked takes the offline part of a saved state back, for
// applyLocked.
func (m *Mount) restoreOfflineLocked(s State) {
	m.revVersion, m.revEpoch = s.RevocationVersion, s.Epoch
	m.revoked = map[string]bool{}
	for _, id := range s.Revoked {
		m.revoked[id] = true
	}
	m.offlineLog = slices.Clone(s.OfflineLog)
}
