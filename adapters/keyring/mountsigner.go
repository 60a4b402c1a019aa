package keyring

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"

	"github.com/mountd/mountd/core"
)

var _ core.Signer = (*MountSigner)(nil)

// MountSigner creates per-association Ed25519 keys and signs commands. The
// private key is sealed with the mount uid and key id as additional data, so
// a sealed key copied to another mount's row does not open.
type MountSigner struct {
	sealer *Sealer
}

// NewMountSigner returns a signer sealing keys with sealer.
func NewMountSigner(sealer *Sealer) *MountSigner { return &MountSigner{sealer: sealer} }

func mountAAD(uid, keyID string) []byte { return []byte("mount:" + uid + ":" + keyID) }

// NewKey implements core.Signer.
func (s *MountSigner) NewKey(_ context.Context, uid string) (core.MountKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return core.MountKey{}, err
	}
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return core.MountKey{}, err
	}
	keyID := hex.EncodeToString(id)
	sealed, err := s.sealer.Seal(priv.Seed(), mountAAD(uid, keyID))
	if err != nil {
		return core.MountKey{}, err
	}
	return core.MountKey{ID: keyID, PublicKey: pub, SealedPrivateKey: sealed}, nil
}

// Sign implements core.Signer.
func (s *MountSigner) Sign(_ context.Context, uid string, key core.MountKey, payload []byte) ([]byte, error) {
	if key.SealedPrivateKey == "" {
		return nil, errors.New("mount has no key")
	}
	seed, err := s.sealer.Open(key.SealedPrivateKey, mountAAD(uid, key.ID))
	if err != nil {
		return nil, err
	}
	if len(seed) != ed25519.SeedSize {
		return nil, errors.New("sealed mount key has the wrong size")
	}
	return ed25519.Sign(ed25519.NewKeyFromSeed(seed), payload), nil
}
