package sdk

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
)

// StoredGrant is a grant a phone holds (what the API answered, enough to
// use it offline).
type StoredGrant struct {
	ID        string    `json:"id"`
	UID       string    `json:"uid"`
	RiderKey  string    `json:"riderKey"`
	Rights    []string  `json:"rights"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
	Epoch     int64     `json:"epoch"`
	Text      string    `json:"text"`
	Signature string    `json:"signature"`
}

// StoredRevocations is the newest signed revocation list the phone holds
// for a mount.
type StoredRevocations struct {
	UID       string `json:"uid"`
	Version   int64  `json:"version"`
	Epoch     int64  `json:"epoch"`
	Text      string `json:"text"`
	Signature string `json:"signature"`
}

// newer reports whether r is above (epoch, version) o.
func (r StoredRevocations) newer(o StoredRevocations) bool {
	return r.Epoch > o.Epoch || (r.Epoch == o.Epoch && r.Version > o.Version)
}

// GrantKeeper keeps a phone's offline material: its rider key, its grants
// (one per mount) and the newest revocation list of each of their mounts.
// A phone app puts it in secure hardware; NewFileKeeper keeps it in files.
// Implementations are safe for concurrent use.
type GrantKeeper interface {
	// RiderKey is the rider's P-256 key, made and kept on first call.
	RiderKey() (crypto.Signer, error)
	// Grants are the grants held.
	Grants() ([]StoredGrant, error)
	// PutGrant keeps g, one per mount: it replaces the mount's previous
	// grant.
	PutGrant(g StoredGrant) error
	// DeleteGrant forgets the grant id (nothing when not held).
	DeleteGrant(id string) error
	// Revocations is the list held for mount uid; false when none.
	Revocations(uid string) (StoredRevocations, bool, error)
	// PutRevocations keeps r when it is above the list held for its mount
	// by (epoch, version); a lower or equal one changes nothing.
	PutRevocations(r StoredRevocations) error
}

// Bounds of a file keeper: a phone holds a grant for a few mounts.
const (
	maxKeptGrants      = 1000
	maxKeptRevocations = 1000
)

// fileKeeper is NewFileKeeper's GrantKeeper.
type fileKeeper struct {
	dir string

	mu    sync.Mutex
	key   *ecdsa.PrivateKey
	grant []StoredGrant
	revs  map[string]StoredRevocations
}

const (
	riderKeyFile    = "rider-key.pem"
	grantsFile      = "grants.json"
	revocationsFile = "revocations.json"
)

// NewFileKeeper keeps the offline material in dir (made 0700; its files
// 0600, each written to a synced temporary file renamed into place): the
// rider key as PKCS #8 PEM, the grants and the revocation lists as JSON.
func NewFileKeeper(dir string) (GrantKeeper, error) {
	if dir == "" {
		return nil, errors.New("sdk: grant keeper: no directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sdk: grant keeper: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sdk: grant keeper: %w", err)
	}
	k := &fileKeeper{dir: dir, revs: map[string]StoredRevocations{}}
	if err := k.load(grantsFile, &k.grant); err != nil {
		return nil, err
	}
	if err := k.load(revocationsFile, &k.revs); err != nil {
		return nil, err
	}
	if k.revs == nil {
		k.revs = map[string]StoredRevocations{}
	}
	if len(k.grant) > maxKeptGrants || len(k.revs) > maxKeptRevocations {
		return nil, fmt.Errorf("sdk: grant keeper: %s holds more than the %d grants or lists a keeper keeps", dir, maxKeptGrants)
	}
	return k, nil
}

// load reads dir/name into v; a missing file leaves v as it is.
func (k *fileKeeper) load(name string, v any) error {
	raw, err := os.ReadFile(filepath.Join(k.dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		return fmt.Errorf("sdk: grant keeper: %s: %w", name, err)
	}
	return nil
}

func (k *fileKeeper) save(name string, v any) error {
	raw, err := json.Marshal(v)
	if err == nil {
		err = writeAtomic(k.dir, name, raw)
	}
	if err != nil {
		return fmt.Errorf("sdk: grant keeper: %s: %w", name, err)
	}
	return nil
}

func (k *fileKeeper) RiderKey() (crypto.Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key != nil {
		return k.key, nil
	}
	path := filepath.Join(k.dir, riderKeyFile)
	raw, err := os.ReadFile(path)
	switch {
	case err == nil:
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, fmt.Errorf("sdk: grant keeper: %s is no PEM", riderKeyFile)
		}
		parsed, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("sdk: grant keeper: %s: %w", riderKeyFile, err)
		}
		key, ok := parsed.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("sdk: grant keeper: %s holds no ECDSA key", riderKeyFile)
		}
		if _, err := protocol.RiderKeyHex(&key.PublicKey); err != nil {
			return nil, fmt.Errorf("sdk: grant keeper: %s: %w", riderKeyFile, err)
		}
		k.key = key
	case errors.Is(err, os.ErrNotExist):
		key, err := protocol.GenerateRiderKey()
		if err != nil {
			return nil, fmt.Errorf("sdk: grant keeper: %w", err)
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("sdk: grant keeper: %w", err)
		}
		if err := writeAtomic(k.dir, riderKeyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})); err != nil {
			return nil, fmt.Errorf("sdk: grant keeper: %w", err)
		}
		k.key = key
	default:
		return nil, fmt.Errorf("sdk: grant keeper: %w", err)
	}
	return k.key, nil
}

func (k *fileKeeper) Grants() ([]StoredGrant, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.grant), nil
}

func (k *fileKeeper) PutGrant(g StoredGrant) error {
	if g.ID == "" || g.UID == "" {
		return errors.New("sdk: grant keeper: a grant names its id and mount")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(k.grant), func(old StoredGrant) bool { return old.UID == g.UID || old.ID == g.ID })
	if len(next) >= maxKeptGrants {
		return fmt.Errorf("sdk: grant keeper: it holds %d grants already", len(next))
	}
	next = append(next, g)
	if err := k.save(grantsFile, next); err != nil {
		return err
	}
	k.grant = next
	return nil
}

func (k *fileKeeper) DeleteGrant(id string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	next := slices.DeleteFunc(slices.Clone(k.grant), func(old StoredGrant) bool { return old.ID == id })
	if len(next) == len(k.grant) {
		return nil
	}
	if err := k.save(grantsFile, next); err != nil {
		return err
	}
	k.grant = next
	return nil
}

func (k *fileKeeper) Revocations(uid string) (StoredRevocations, bool, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r, ok := k.revs[uid]
	return r, ok, nil
}

func (k *fileKeeper) PutRevocations(r StoredRevocations) error {
	if r.UID == "" {
		return errors.New("sdk: grant keeper: a revocation list names its mount")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	old, ok := k.revs[r.UID]
	if ok && !r.newer(old) {
		return nil
	}
	if !ok && len(k.revs) >= maxKeptRevocations {
		return fmt.Errorf("sdk: grant keeper: it holds %d revocation lists already", len(k.revs))
	}
	next := make(map[string]StoredRevocations, len(k.revs)+1)
	for uid, v := range k.revs {
		next[uid] = v
	}
	next[r.UID] = r
	if err := k.save(revocationsFile, next); err != nil {
		return err
	}
	k.revs = next
	return nil
}

// publicKey is a signer's public half as ECDSA (nil if it is another kind).
func publicKey(s crypto.Signer) *ecdsa.PublicKey {
	pub, _ := s.Public().(*ecdsa.PublicKey)
	return pub
}
