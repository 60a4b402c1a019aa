// Package simmount is simulated mount firmware on the simulated radio: it
// advertises, answers the info read, takes framed commands, verifies them
// as a real mount must (docs/api.md, "Commands") and notifies results and states, as
// docs/ble.md describes. mountsim runs fleets of them; end-to-end tests put
// them on an in-process sim.Air.
package simmount

import (
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Refusal reasons in result messages.
const (
	ReasonMalformed     = "malformed"
	ReasonBadFrame      = "bad frame"
	ReasonNoOwner       = "no owner key"
	ReasonBadSignature  = "bad signature"
	ReasonBadHandover   = "bad handover" // ASSOCIATE_OWNER to a mount holding an owner key, no hand-over by it
	ReasonWrongMount    = "wrong mount"
	ReasonCodeMismatch  = "code mismatch"
	ReasonStale         = "stale command"
	ReasonReplayed      = "replayed nonce"
	ReasonUnknown       = "unknown command"
	ReasonBadParameters = "bad parameters"
	// ReasonStorage: the mount could not persist what the command needs
	// (its replay memory, its effect, a counter): nothing happened, and
	// the result is unsigned.
	ReasonStorage = "storage failure"
	// ReasonBusy: an INSTALL_FIRMWARE for another image while a transfer
	// is under way.
	ReasonBusy = "busy"
	// ReasonBadImage: the image received does not match the size or the
	// SHA-256 of the INSTALL_FIRMWARE.
	ReasonBadImage = "bad image"
)

// Failure modes after an update (Config.FirmwareFailure).
const (
	// FailSilent: after the restart the mount reports nothing more: it
	// neither advertises nor answers.
	FailSilent = "silent"
	// FailRollback: the mount reports once on the new revision, then rolls
	// back to the old one at its next report.
	FailRollback = "rollback"
)

// maxNonces bounds the replay memory. A mount sees far fewer commands in
// five minutes; past the bound the oldest are forgotten and everything as
// old as they were is refused, so no replay slips through.
const maxNonces = 1024

// counterBlock is how many counters one write to the store reserves: a
// restarted mount goes on above the reservation, so a counter is never
// used twice, and the store is written once every counterBlock messages.
const counterBlock = 64

// Config describes one mount. Zero values take defaults.
type Config struct {
	UID              string // required
	SerialNumber     string
	MACAddress       string // also the BLE address; required to go on the air
	ModelNumber      string // default "MNT-SIM"
	FirmwareRevision string // default "1.0.0"
	SoftwareRevision string // default "1.0.0"

	Battery      float64 // starting level in percent (default 100)
	BatteryDrain float64 // percent per hour (default 1); negative: none
	Temperature  float64 // starting CPU temperature in °C (default 30)
	RSSI         int     // advertised strength in dBm; 0: the air picks

	// Legacy is older firmware: no device key, no devicePublicKey in the
	// info, nothing signed (states and results as before signed messages).
	Legacy bool
	// Store keeps the mount's state (device key, counter, owner, replay
	// memory, ...) across restarts; default: a MemoryStore of its own.
	// Opening a mount again with the same Store and UID is the mount
	// restarted (after a power loss: what was not saved is lost, and the
	// mount saves before anything that depends on it leaves).
	Store Store

	// FirmwareFailure is how the mount fails after an installed update
	// (docs/ble.md, "Firmware"): "" none, FailSilent or FailRollback.
	FirmwareFailure string

	// Now is the mount's clock (default time.Now); tests move it.
	Now func() time.Time
	// Seed makes the temperature drift repeatable (default: from UID).
	Seed uint64
	// OnChange runs after the lock or helmet changed, outside any lock:
	// mountsim reports such changes at once instead of waiting its turn.
	OnChange func(*Mount)
	// OnUse, when set, runs after each offline use the mount answered
	// (docs/ble.md, "Offline access"), outside any lock: res is what the
	// mount answered (an offline message when it signed a receipt, else an
	// unsigned refusal), took how long the mount's checks, signing and
	// saving took. mountsim measures and counts uses with it.
	OnUse func(m *Mount, res protocol.BLEMessage, took time.Duration)
}

// Settings are what configuration commands stored.
type Settings struct {
	AlarmMode        string   `json:"alarmMode,omitempty"`
	AlarmSensitivity string   `json:"alarmSensitivity,omitempty"`
	AlarmVolume      string   `json:"alarmVolume,omitempty"`
	RFIDMode         string   `json:"rfidMode,omitempty"`
	Tags             []string `json:"tags"`
}

// Status is a snapshot of the mount, for tests and tools.
type Status struct {
	Locked           bool
	HelmetMounted    bool
	Battery          float64
	Temperature      float64
	OwnerKey         ed25519.PublicKey // nil until associated
	AccountID        string
	Settings         Settings
	Accepted         int // commands accepted since boot
	Refused          int
	DevicePublicKey  string // hex; empty for Legacy
	SoftwareRevision string // the revision it runs
	Restarts         int    // restarts after an update since boot
	Silent           bool   // failed silent after an update
	Counter          uint64 // the last counter signed with
	StoreErrors      int    // saves that failed since boot
}

// Mount is one simulated mount. Safe for concurrent use.
type Mount struct {
	cfg    Config
	bootAt time.Time

	mu          sync.Mutex
	locked      bool
	helmet      bool
	lockAt      time.Time // when the lock last changed: re-reports are duplicates
	helmetAt    time.Time
	temp        float64
	tempAt      time.Time
	rng         *rand.Rand
	owner       ed25519.PublicKey
	accountID   string
	settings    Settings
	tags        map[string]bool
	nonces      map[string]int64 // nonce → payload time (ms)
	floor       int64            // commands at or before this time are refused
	seed        string           // the device key's seed as stored (kept by Legacy firmware too)
	deviceKey   ed25519.PrivateKey
	counter     uint64 // the last counter used
	reserved    uint64 // the counter reservation the store holds
	accepted    int
	refused     int
	storeErrors int
	peers       map[*peer]struct{}

	revision   string    // the software revision it runs
	xfer       *transfer // the firmware transfer under way, if any
	silent     bool      // failed silent after an update
	rollbackTo string    // failing by rollback: the revision it goes back to
	newReports int       // states signed on the new revision while rollbackTo is set
	restarts   int

	// Offline access (offline.go).
	clock      trustedClock
	challenges map[string]time.Time // challenge given out → m when it was
	revVersion int64                // the newest revocation list's version
	revEpoch   int64                // the highest epoch seen
	revoked    map[string]bool      // its grant ids
	offlineLog []OfflineEntry       // unacknowledged offline receipts, oldest first
}

// New boots a mount (Open) whose Store cannot fail to load, such as the
// default MemoryStore; it panics on a store error.
func New(cfg Config) *Mount {
	m, err := Open(cfg)
	if err != nil {
		panic(err)
	}
	return m
}

// Open boots a mount from its Store: on the first start it is locked with
// the helmet in place and no owner, and makes its device key (unless
// Legacy); later it resumes from what it saved.
func Open(cfg Config) (*Mount, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ModelNumber == "" {
		cfg.ModelNumber = "MNT-SIM"
	}
	if cfg.FirmwareRevision == "" {
		cfg.FirmwareRevision = "1.0.0"
	}
	if cfg.SoftwareRevision == "" {
		cfg.SoftwareRevision = "1.0.0"
	}
	if cfg.Battery == 0 {
		cfg.Battery = 100
	}
	if cfg.BatteryDrain == 0 {
		cfg.BatteryDrain = 1
	}
	if cfg.Temperature == 0 {
		cfg.Temperature = 30
	}
	if cfg.Seed == 0 {
		h := fnv.New64a()
		h.Write([]byte(cfg.UID))
		cfg.Seed = h.Sum64()
	}
	if cfg.Store == nil {
		cfg.Store = NewMemoryStore()
	}
	now := cfg.Now()
	m := &Mount{
		cfg: cfg, bootAt: now,
		locked: true, helmet: true, lockAt: now, helmetAt: now,
		temp: cfg.Temperature, tempAt: now,
		rng:      rand.New(rand.NewPCG(cfg.Seed, 0x6d6e7464)),
		tags:     map[string]bool{},
		nonces:   map[string]int64{},
		peers:    map[*peer]struct{}{},
		revision: cfg.SoftwareRevision,

		challenges: map[string]time.Time{},
		revoked:    map[string]bool{},
	}
	// The trusted clock starts from the factory-set clock (the host's) on
	// the firmware's first start, which counts as trusted time; a
	// restarted mount goes on from the T it saved last and waits for
	// trusted time again.
	m.clock = trustedClock{f: now, mf: now, trusted: true, savedM: now}
	st, found, err := cfg.Store.Load(cfg.UID)
	if err != nil {
		return nil, fmt.Errorf("simmount: load %s: %w", cfg.UID, err)
	}
	if found {
		if err := m.applyLocked(st); err != nil {
			return nil, fmt.Errorf("simmount: state of %s: %w", cfg.UID, err)
		}
		m.counter, m.reserved = st.CounterReserved, st.CounterReserved
		m.restartClockLocked(st)
	}
	if m.seed == "" && !cfg.Legacy {
		// The firmware's first start (or its first with device keys).
		_, key, err := ed25519.GenerateKey(nil)
		if err != nil {
			return nil, err
		}
		m.seed = hex.EncodeToString(key.Seed())
		found = false
	}
	if !cfg.Legacy {
		seed, err := hex.DecodeString(m.seed)
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("simmount: state of %s: bad device key", cfg.UID)
		}
		m.deviceKey = ed25519.NewKeyFromSeed(seed)
	}
	if !found {
		if err := m.saveLocked(m.reserved); err != nil {
			return nil, fmt.Errorf("simmount: save %s: %w", cfg.UID, err)
		}
	}
	return m, nil
}

// persistedLocked is the mount's State; the maps are shared, not copied.
func (m *Mount) persistedLocked() State {
	s := State{
		DeviceKey: m.seed, CounterReserved: m.reserved,
		AccountID: m.accountID, Settings: m.settings,
		Locked: m.locked, HelmetMounted: m.helmet, LockAt: m.lockAt, HelmetAt: m.helmetAt,
		Nonces: m.nonces, Floor: m.floor,
		SoftwareRevision: m.revision, Silent: m.silent, RollbackTo: m.rollbackTo, NewReports: m.newReports,
		Clock: m.clockToSaveLocked(), RevocationVersion: m.revVersion, Epoch: m.revEpoch,
		Revoked: slices.Sorted(maps.Keys(m.revoked)), OfflineLog: m.offlineLog,
	}
	if m.owner != nil {
		s.OwnerKey = hex.EncodeToString(m.owner)
	}
	s.Settings.Tags = m.tagListLocked()
	return s
}

// applyLocked takes the state back, all but the counter.
func (m *Mount) applyLocked(s State) error {
	var owner ed25519.PublicKey
	if s.OwnerKey != "" {
		key, err := hex.DecodeString(s.OwnerKey)
		if err != nil || len(key) != ed25519.PublicKeySize {
			return fmt.Errorf("bad owner key")
		}
		owner = key
	}
	m.seed, m.owner, m.accountID = s.DeviceKey, owner, s.AccountID
	m.settings = s.Settings
	m.settings.Tags = nil
	m.tags = map[string]bool{}
	for _, t := range s.Settings.Tags {
		m.tags[t] = true
	}
	m.locked, m.helmet, m.lockAt, m.helmetAt = s.Locked, s.HelmetMounted, s.LockAt, s.HelmetAt
	m.nonces = maps.Clone(s.Nonces)
	if m.nonces == nil {
		m.nonces = map[string]int64{}
	}
	m.floor = s.Floor
	if s.SoftwareRevision != "" {
		m.revision = s.SoftwareRevision
	}
	m.silent, m.rollbackTo, m.newReports = s.Silent, s.RollbackTo, s.NewReports
	m.restoreOfflineLocked(s)
	return nil
}

// saveLocked saves the state with a counter reservation.
func (m *Mount) saveLocked(reserved uint64) error {
	s := m.persistedLocked()
	s.CounterReserved = reserved
	if err := m.cfg.Store.Save(m.cfg.UID, s); err != nil {
		m.storeErrors++
		return err
	}
	m.reserved = reserved
	m.clock.savedT, m.clock.savedM = s.Clock, m.cfg.Now()
	return nil
}

// nextCounterLocked takes the next counter, saving a new reservation
// first when the stored one is used up; false when that save failed (the
// message then leaves unsigned: a counter the store does not cover could
// repeat after a power loss).
func (m *Mount) nextCounterLocked() (uint64, bool) {
	if m.counter >= m.reserved {
		if m.saveLocked(m.counter+counterBlock) != nil {
			return 0, false
		}
	}
	m.counter++
	return m.counter, true
}

// UID is the mount's uid.
func (m *Mount) UID() string { return m.cfg.UID }

// BLEInfo is what the info characteristic holds, without a challenge
// (reading the characteristic, Info, gives one out).
func (m *Mount) BLEInfo() protocol.BLEInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.infoLocked()
}

func (m *Mount) infoLocked() protocol.BLEInfo {
	info := protocol.BLEInfo{
		UID: m.cfg.UID, SerialNumber: m.cfg.SerialNumber, MACAddress: m.cfg.MACAddress,
		FirmwareRevision: m.cfg.FirmwareRevision, SoftwareRevision: m.revision,
		ModelNumber: m.cfg.ModelNumber, DevicePublicKey: m.devicePublicKey(),
	}
	if m.deviceKey != nil { // offline access needs the device key
		info.RevocationVersion, info.Epoch = m.revVersion, m.revEpoch
		info.LogPending, info.TimeTrusted = len(m.offlineLog), m.clock.trusted
	}
	return info
}

// devicePublicKey is the device key's public half as hex; empty for Legacy.
func (m *Mount) devicePublicKey() string {
	if m.deviceKey == nil {
		return ""
	}
	return hex.EncodeToString(m.deviceKey.Public().(ed25519.PublicKey))
}

// Advertisement implements sim.Peripheral.
func (m *Mount) Advertisement() protocol.BLEDevice {
	return protocol.BLEDevice{Address: m.cfg.MACAddress, Name: protocol.BLENamePrefix + m.cfg.UID, MountUID: m.cfg.UID, RSSI: m.cfg.RSSI}
}

// Info implements sim.Peripheral: the info characteristic's JSON, with a
// fresh challenge at every read.
func (m *Mount) Info() []byte {
	m.mu.Lock()
	info := m.infoLocked()
	info.Challenge = m.challengeLocked()
	m.mu.Unlock()
	raw, _ := json.Marshal(info)
	return raw
}

// Report is the states message the mount notifies now: its four states,
// signed with the next counter (unless Legacy). A phone relays its fields
// unchanged in POST /mounts/{uid}/states.
func (m *Mount) Report() protocol.BLEMessage {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statesMessageLocked()
}

func (m *Mount) statesMessageLocked() protocol.BLEMessage {
	msg := protocol.BLEMessage{Type: protocol.BLEMessageStates, States: m.statesLocked()}
	if m.deviceKey == nil {
		return msg
	}
	if m.rollbackTo != "" {
		// Failing by rollback: one report on the new revision, then back.
		if m.newReports >= 1 {
			m.revision, m.rollbackTo, m.newReports = m.rollbackTo, "", 0
		} else {
			m.newReports++
		}
		_ = m.saveLocked(m.reserved) // best effort, as the firmware that rolls back
	}
	counter, ok := m.nextCounterLocked()
	if !ok {
		return msg
	}
	r := protocol.Report{UID: m.cfg.UID, Counter: counter, SoftwareRevision: m.revision}
	for _, e := range msg.States {
		// The text covers the instant as the message states it (ms), so
		// the server, parsing occurredAt, rebuilds the same text.
		at, _ := time.Parse(protocol.TimeLayout, e.OccurredAt)
		r.Entries = append(r.Entries, protocol.ReportEntry{Code: protocol.StateCode(e.Code), Value: e.Value, OccurredAt: at})
	}
	msg.Counter, msg.SoftwareRevision = &counter, m.revision
	msg.Signature = protocol.Sign(m.deviceKey, protocol.BuildReportText(r))
	return msg
}

// States returns the four states as the mount reports them now. The lock
// and helmet carry the time they last changed, so reporting them again is
// idempotent at the API; battery and temperature are measured now.
func (m *Mount) States() []protocol.BLEStateEntry {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statesLocked()
}

func (m *Mount) statesLocked() []protocol.BLEStateEntry {
	now, t := m.nowLocked()
	at := protocol.FormatTime(t)
	return []protocol.BLEStateEntry{
		{Code: string(protocol.StateBatteryLevel), Value: strconv.Itoa(int(math.Round(m.batteryLocked(now)))), OccurredAt: at},
		{Code: string(protocol.StateCPUTemperature), Value: strconv.FormatFloat(m.temperatureLocked(now), 'f', 1, 64), OccurredAt: at},
		{Code: string(protocol.StateMountLocked), Value: bit(m.locked), OccurredAt: protocol.FormatTime(m.lockAt)},
		{Code: string(protocol.StateHelmetMounted), Value: bit(m.helmet), OccurredAt: protocol.FormatTime(m.helmetAt)},
	}
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (m *Mount) batteryLocked(now time.Time) float64 {
	drain := max(m.cfg.BatteryDrain, 0) * now.Sub(m.bootAt).Hours()
	return max(0, min(100, m.cfg.Battery-drain))
}

// temperatureLocked drifts the CPU temperature: a random walk pulled back
// towards the starting value, scaled by the time since the last reading.
func (m *Mount) temperatureLocked(now time.Time) float64 {
	minutes := min(now.Sub(m.tempAt).Minutes(), 60)
	if minutes > 0 {
		pull := min(1, 0.05*minutes) * (m.cfg.Temperature - m.temp)
		m.temp += pull + m.rng.NormFloat64()*0.4*math.Sqrt(minutes)
		m.temp = max(-60, min(150, m.temp))
		m.tempAt = now
	}
	return math.Round(m.temp*10) / 10
}

// Status returns a snapshot of the mount.
func (m *Mount) Status() Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.cfg.Now()
	s := Status{
		Locked: m.locked, HelmetMounted: m.helmet,
		Battery: m.batteryLocked(now), Temperature: m.temperatureLocked(now),
		OwnerKey: slices.Clone(m.owner), AccountID: m.accountID,
		Settings: m.settings, Accepted: m.accepted, Refused: m.refused,
		DevicePublicKey: m.devicePublicKey(), Counter: m.counter, StoreErrors: m.storeErrors,
		SoftwareRevision: m.revision, Restarts: m.restarts, Silent: m.silent,
	}
	s.Settings.Tags = m.tagListLocked()
	return s
}

func (m *Mount) tagListLocked() []string {
	tags := make([]string, 0, len(m.tags))
	for t := range m.tags {
		tags = append(tags, t)
	}
	slices.Sort(tags)
	return tags
}

// ResetOwner is the physical reset (a button inside the housing on real
// hardware): the mount forgets its owner key, account, NFC tags and
// settings, and takes the next ASSOCIATE_OWNER without a hand-over. Its
// device key, counter and replay memory stay.
func (m *Mount) ResetOwner() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.persistedLocked().clone()
	m.owner, m.accountID, m.tags, m.settings = nil, "", map[string]bool{}, Settings{}
	if err := m.saveLocked(m.reserved); err != nil {
		_ = m.applyLocked(before)
		return err
	}
	return nil
}

// ReturnHelmet is a rider putting the helmet back: it is mounted and
// locked again, and connected centrals are told.
func (m *Mount) ReturnHelmet() {
	m.mu.Lock()
	_, now := m.nowLocked()
	changed := !m.locked || !m.helmet
	if !m.helmet {
		m.helmet, m.helmetAt = true, now
	}
	if !m.locked {
		m.locked, m.lockAt = true, now
	}
	if changed {
		_ = m.saveLocked(m.reserved) // best effort: the helmet is back whatever the flash says
	}
	m.mu.Unlock()
	if changed {
		m.changed()
	}
}

// changed tells every connected central the new states and calls OnChange.
func (m *Mount) changed() {
	m.broadcastStates()
	if m.cfg.OnChange != nil {
		m.cfg.OnChange(m)
	}
}

func (m *Mount) broadcastStates() {
	m.mu.Lock()
	msg := encode(m.statesMessageLocked())
	peers := make([]*peer, 0, len(m.peers))
	for p := range m.peers {
		peers = append(peers, p)
	}
	m.mu.Unlock()
	for _, p := range peers {
		p.send(msg, false)
	}
}

// encode renders a message for the state characteristic.
func encode(msg protocol.BLEMessage) []byte {
	raw, _ := json.Marshal(msg)
	return raw
}

// Handle runs one command (the JSON written to the command characteristic)
// and returns its result. Centrals connected get the new states when they
// changed. mountsim uses it to deliver ASSOCIATE_OWNER without a phone.
func (m *Mount) Handle(raw []byte) protocol.BLEMessage {
	res, lockChanged, notify := m.handle(raw, nil)
	m.announce(lockChanged, notify)
	return res
}

// announce tells connected centrals what a command changed: a lock or
// helmet change runs the full change path, otherwise the states are sent
// when the command asked for it.
func (m *Mount) announce(lockChanged, notify bool) {
	if lockChanged {
		m.changed()
	} else if notify {
		m.broadcastStates()
	}
}

// handle verifies and executes a command. It reports whether the lock or
// helmet changed and whether the states are due to centrals anyway. The
// result of a command that passed the signature check (and of an
// ASSOCIATE_OWNER, which has none to pass) is a receipt: signed, unless
// Legacy, after the state it changed was saved.
//
// from is the link the command came on (nil: Handle); an INSTALL_FIRMWARE
// ties its transfer to it.
func (m *Mount) handle(raw []byte, from *peer) (res protocol.BLEMessage, lockChanged, notify bool) {
	if typ := offlineWrite(raw); typ != "" && m.deviceKey != nil {
		return m.handleOffline(raw, typ)
	}
	res = protocol.BLEMessage{Type: protocol.BLEMessageResult}
	var cmd protocol.BLECommand
	if err := json.Unmarshal(raw, &cmd); err != nil {
		res.Reason = ReasonMalformed
		m.countRefused()
		return res, false, false
	}
	res.Code = cmd.Code
	p, ok := protocol.ParsePayload(cmd.Payload)
	if !ok {
		res.Reason = ReasonMalformed
		m.countRefused()
		return res, false, false
	}
	res.Nonce = p.Nonce

	m.mu.Lock()
	defer m.mu.Unlock()
	now, t := m.nowLocked()
	before, clockBefore := m.persistedLocked().clone(), m.clock
	xferBefore := m.xfer
	reason, verified, lockChanged, notify := m.executeLocked(cmd, p, now, t, from)
	// An accepted INSTALL_FIRMWARE opened a transfer: its receipt comes at
	// the end of it.
	deferred := verified && reason == "" && protocol.CommandCode(cmd.Code) == protocol.CmdInstallFirmware
	if verified {
		// The replay memory and the effect are saved before the result
		// leaves, with the counter reservation the receipt needs.
		if m.saveForReceiptLocked() != nil {
			_ = m.applyLocked(before)
			m.xfer, m.clock = xferBefore, clockBefore
			reason, verified, lockChanged, notify, deferred = ReasonStorage, false, false, false, false
		}
	}
	res.Reason, res.Accepted = reason, reason == ""
	if res.Accepted {
		m.accepted++
	} else {
		m.refused++
	}
	if verified && !deferred {
		m.signReceiptLocked(&res)
	}
	return res, lockChanged, notify
}

// saveForReceiptLocked saves the state with the counter reservation the
// receipt about to be signed needs.
func (m *Mount) saveForReceiptLocked() error {
	reserved := m.reserved
	if m.deviceKey != nil && m.counter >= m.reserved {
		reserved = m.counter + counterBlock
	}
	return m.saveLocked(reserved)
}

// signReceiptLocked makes res (its nonce and reason set, the state saved
// by saveForReceiptLocked) a signed receipt with the next counter, dated
// by the trusted clock; nothing without a device key (Legacy).
func (m *Mount) signReceiptLocked(res *protocol.BLEMessage) {
	if m.deviceKey == nil {
		return
	}
	m.counter++
	at := protocol.FormatTime(m.trustedLocked(m.cfg.Now()))
	atTime, _ := time.Parse(protocol.TimeLayout, at)
	rc := protocol.Receipt{UID: m.cfg.UID, Nonce: res.Nonce, Outcome: protocol.OutcomeExecuted, Reason: res.Reason, Counter: m.counter, At: atTime}
	if res.Reason != "" {
		rc.Outcome = protocol.OutcomeRefused
	}
	counter := m.counter
	res.Outcome, res.Counter, res.At = rc.Outcome, &counter, at
	res.Signature = protocol.Sign(m.deviceKey, protocol.BuildReceiptText(rc))
}

// executeLocked runs the checks of docs/ble.md and, when they pass, the
// command. reason is empty when it ran; verified tells a command that
// passed the signature check (its result is a receipt). now is the
// monotonic clock (transfers' timeouts), t the trusted clock (the
// command's time, the effects' instants).
func (m *Mount) executeLocked(cmd protocol.BLECommand, p protocol.Payload, now, t time.Time, from *peer) (reason string, verified, lockChanged, notify bool) {
	if protocol.CommandCode(cmd.Code) == protocol.CmdAssociateOwner {
		// Unsigned by design: it brings the key everything else is checked
		// with. A mount that holds an owner key takes a new one only from
		// its owner: the hand-over, signed by the key it holds (docs/ble.md,
		// "Hand-over"); anyone else's is refused unsigned, as a bad
		// signature.
		if m.owner != nil {
			handover, _ := cmd.Data["handover"].(string)
			if !protocol.VerifyHandover(m.owner, cmd.Payload, handover) {
				return ReasonBadHandover, false, false, false
			}
		}
		switch {
		case p.MountUID != m.cfg.UID:
			return ReasonWrongMount, true, false, false
		case string(p.Code) != cmd.Code:
			return ReasonCodeMismatch, true, false, false
		}
		key, account, ok := ownerOf(cmd, p)
		if !ok {
			return ReasonMalformed, false, false, false
		}
		if account != m.accountID {
			m.tags = map[string]bool{} // another account's tags are no longer authorised
			m.settings = Settings{}
		}
		m.owner, m.accountID = key, account
		return "", true, false, true
	}

	sig, err := hex.DecodeString(deref(cmd.SignedToken))
	switch {
	case m.owner == nil:
		return ReasonNoOwner, false, false, false
	case err != nil || len(sig) != ed25519.SignatureSize || !ed25519.Verify(m.owner, []byte(cmd.Payload), sig):
		return ReasonBadSignature, false, false, false
	case p.MountUID != m.cfg.UID:
		return ReasonWrongMount, true, false, false
	case string(p.Code) != cmd.Code:
		return ReasonCodeMismatch, true, false, false
	case m.staleLocked(p.GeneratedAt, t):
		return ReasonStale, true, false, false
	case m.seenLocked(p.Nonce, p.GeneratedAt.UnixMilli()):
		return ReasonReplayed, true, false, false
	}
	m.rememberLocked(p.Nonce, p.GeneratedAt.UnixMilli(), t)
	// An owner-signed time: trusted time (saved with the command's effect).
	m.trustLocked(p.GeneratedAt, now)

	// Parameters come from the signed payload, never from the unsigned data.
	code := protocol.CommandCode(cmd.Code)
	switch code {
	case protocol.CmdReleaseHelmet:
		lockChanged = m.releaseLocked(t)
		notify = true // the confirmation the phone waits for, even if unchanged
	case protocol.CmdConfigureAlarm:
		mode, sens, vol := p.Params["alarmMode"], p.Params["alarmSensitivity"], p.Params["alarmVolume"]
		if !protocol.ValidCommandParam(code, "alarmMode", mode) || !protocol.ValidCommandParam(code, "alarmSensitivity", sens) ||
			!protocol.ValidCommandParam(code, "alarmVolume", vol) {
			return ReasonBadParameters, true, false, false
		}
		m.settings.AlarmMode, m.settings.AlarmSensitivity, m.settings.AlarmVolume = mode, sens, vol
	case protocol.CmdSetRFIDMode:
		mode := p.Params["rfidMode"]
		if !protocol.ValidCommandParam(code, "rfidMode", mode) {
			return ReasonBadParameters, true, false, false
		}
		m.settings.RFIDMode = mode
	case protocol.CmdAddNfcTag, protocol.CmdRemoveNfcTag:
		tag := p.Params["tagUid"]
		if !protocol.ValidTagUID(tag) {
			return ReasonBadParameters, true, false, false
		}
		if code == protocol.CmdAddNfcTag {
			m.tags[protocol.NormalizeTagUID(tag)] = true
		} else {
			delete(m.tags, protocol.NormalizeTagUID(tag))
		}
	case protocol.CmdSyncNfcTags:
		list, present := p.Params["tagUids"]
		if !present {
			return ReasonBadParameters, true, false, false
		}
		next := map[string]bool{}
		for _, tag := range protocol.ListParam(list) {
			if !protocol.ValidTagUID(tag) {
				return ReasonBadParameters, true, false, false
			}
			next[protocol.NormalizeTagUID(tag)] = true
		}
		m.tags = next
	case protocol.CmdInstallFirmware:
		return m.installLocked(p, now, from), true, false, false
	default:
		return ReasonUnknown, true, false, false
	}
	return "", true, lockChanged, notify
}

func (m *Mount) countRefused() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refused++
}

// seenLocked reports a nonce already used, or a command too old to tell.
func (m *Mount) seenLocked(nonce string, millis int64) bool {
	_, seen := m.nonces[nonce]
	return seen || millis <= m.floor
}

// rememberLocked keeps a nonce for as long as its command could pass the
// time check, within maxNonces.
func (m *Mount) rememberLocked(nonce string, millis int64, now time.Time) {
	m.nonces[nonce] = millis
	if len(m.nonces) <= maxNonces {
		return
	}
	horizon := now.Add(-protocol.CommandLifetime).UnixMilli()
	for n, at := range m.nonces {
		if at < horizon {
			delete(m.nonces, n)
		}
	}
	for len(m.nonces) > maxNonces {
		oldest, at := "", int64(math.MaxInt64)
		for n, t := range m.nonces {
			if t < at {
				oldest, at = n, t
			}
		}
		delete(m.nonces, oldest)
		m.floor = max(m.floor, at)
	}
}

// ownerOf reads ASSOCIATE_OWNER's key and account; the data and the
// payload's parameters must agree.
func ownerOf(cmd protocol.BLECommand, p protocol.Payload) (ed25519.PublicKey, string, bool) {
	keyHex, _ := cmd.Data["publicKey"].(string)
	account, _ := cmd.Data["accountId"].(string)
	key, err := hex.DecodeString(keyHex)
	if err != nil || len(key) != ed25519.PublicKeySize || account == "" ||
		p.Params["publicKey"] != keyHex || p.Params["accountId"] != account {
		return nil, "", false
	}
	return key, account, true
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
