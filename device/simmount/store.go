package simmount

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"
)

// State is what a mount keeps across restarts and power loss: its device
// key, how far its counter is reserved, its owner, settings and tags, the
// lock and helmet, and its replay memory.
type State struct {
	// DeviceKey is the Ed25519 seed of the device key (hex); empty for
	// older firmware (Config.Legacy).
	DeviceKey string `json:"deviceKey,omitempty"`
	// CounterReserved is the highest counter the mount may have used: it
	// is persisted before a message signed with a counter above the one
	// stored before leaves, and a restarted mount goes on above it.
	CounterReserved uint64 `json:"counterReserved"`

	OwnerKey      string           `json:"ownerKey,omitempty"` // hex
	AccountID     string           `json:"accountId,omitempty"`
	Settings      Settings         `json:"settings"`
	Locked        bool             `json:"locked"`
	HelmetMounted bool             `json:"helmetMounted"`
	LockAt        time.Time        `json:"lockAt"`
	HelmetAt      time.Time        `json:"helmetAt"`
	Nonces        map[string]int64 `json:"nonces"` // accepted nonce → payload time (Unix ms)
	Floor         int64            `json:"floor"`  // commands generated at or before this (Unix ms) are refused

	// SoftwareRevision is the revision an installed update brought; empty:
	// the configured one.
	SoftwareRevision string `json:"softwareRevision,omitempty"`
	// Silent, RollbackTo and NewReports keep a failing update's course
	// (Config.FirmwareFailure) across restarts.
	Silent     bool   `json:"silent,omitempty"`
	RollbackTo string `json:"rollbackTo,omitempty"`
	NewReports int    `json:"newReports,omitempty"`

	// Offline access (docs/ble.md, "Offline access"). Clock is the
	// trusted clock T when saved (Unix ms), never lower than the value
	// saved before: a restarted mount goes on from it. RevocationVersion,
	// Epoch and Revoked are the newest revocation list taken; OfflineLog
	// the offline receipts not yet acknowledged, oldest first.
	Clock             int64          `json:"clock,omitempty"`
	RevocationVersion int64          `json:"revocationVersion,omitempty"`
	Epoch             int64          `json:"epoch,omitempty"`
	Revoked           []string       `json:"revoked,omitempty"`
	OfflineLog        []OfflineEntry `json:"offlineLog,omitempty"`
}

// OfflineEntry is one signed offline receipt of the log, its fields as the
// offline message carries them.
type OfflineEntry struct {
	GrantID   string `json:"grantId"`
	Code      string `json:"code"`
	Nonce     string `json:"nonce"`
	Outcome   string `json:"outcome"`
	Reason    string `json:"reason,omitempty"`
	Counter   uint64 `json:"counter"`
	At        string `json:"at"`
	Signature string `json:"signature"`
}

func (s State) clone() State {
	s.Settings.Tags = slices.Clone(s.Settings.Tags)
	s.Nonces = maps.Clone(s.Nonces)
	s.Revoked = slices.Clone(s.Revoked)
	s.OfflineLog = slices.Clone(s.OfflineLog)
	return s
}

// Store keeps mounts' State. Save must be durable when it returns: the
// mount lets a signed message or a command's effect out only after it.
type Store interface {
	// Load returns the state saved for uid; found is false when there is
	// none (the firmware's first start).
	Load(uid string) (s State, found bool, err error)
	Save(uid string, s State) error
}

var (
	_ Store = (*MemoryStore)(nil)
	_ Store = DirStore{}
)

// MemoryStore keeps states in memory: a mount restarted with the same
// store (New with it again) resumes where it was. Safe for concurrent use.
type MemoryStore struct {
	mu     sync.Mutex
	states map[string]State
	fail   error
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{states: map[string]State{}} }

// Load implements Store.
func (s *MemoryStore) Load(uid string) (State, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.states[uid]
	return st.clone(), ok, nil
}

// Save implements Store.
func (s *MemoryStore) Save(uid string, st State) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.states[uid] = st.clone()
	return nil
}

// SetFail makes every later Save fail with err (nil: succeed again), as
// a full or broken flash would.
func (s *MemoryStore) SetFail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// DirStore keeps each mount's state as a JSON file <uid>.json in a
// directory, replaced atomically (a temporary file, fsync, rename, fsync
// of the directory), so a power loss leaves the old state or the new one.
type DirStore struct {
	Dir string
}

// fileUID is what a uid must look like to name a file.
var fileUID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// maxStateFile bounds what Load reads (1024 nonces are about 60 KiB).
const maxStateFile = 1 << 20

func (d DirStore) path(uid string) (string, error) {
	if !fileUID.MatchString(uid) {
		return "", fmt.Errorf("simmount: uid %q cannot name a state file", uid)
	}
	return filepath.Join(d.Dir, uid+".json"), nil
}

// Load implements Store.
func (d DirStore) Load(uid string) (State, bool, error) {
	p, err := d.path(uid)
	if err != nil {
		return State{}, false, err
	}
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return State{}, false, nil
	} else if err != nil {
		return State{}, false, err
	}
	defer f.Close()
	var st State
	if fi, err := f.Stat(); err != nil || fi.Size() > maxStateFile {
		return State{}, false, fmt.Errorf("simmount: state file %s: too large or unreadable", p)
	}
	if err := json.NewDecoder(f).Decode(&st); err != nil {
		return State{}, false, fmt.Errorf("simmount: state file %s: %w", p, err)
	}
	return st, true, nil
}

// Save implements Store.
func (d DirStore) Save(uid string, st State) error {
	p, err := d.path(uid)
	if err != nil {
		return err
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(d.Dir, "."+uid+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone after the rename; removes a failed attempt's file
	if _, err := tmp.Write(raw); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), p); err != nil {
		return err
	}
	dir, err := os.Open(d.Dir)
	if err != nil {
		return err
	}
	defer dir.Close()
	return dir.Sync()
}
