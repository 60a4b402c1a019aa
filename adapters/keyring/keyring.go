// Package keyring holds the master key of a mountd installation and the keys
// sealed under it: AES-256-GCM with a random nonce per seal, and the owner of
// the key (its id, a mount uid) as additional data so that a sealed value
// copied to another row does not open.
package keyring

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// MasterKeyFile is where a generated master key is kept in the data dir.
const MasterKeyFile = "master.key"

// Sealer encrypts small secrets (private keys) at rest.
type Sealer struct {
	aead cipher.AEAD
	raw  [32]byte
}

// NewSealer returns a Sealer for a 32-byte master key.
func NewSealer(masterKey []byte) (*Sealer, error) {
	if len(masterKey) != 32 {
		return nil, fmt.Errorf("master key must be 32 bytes, got %d", len(masterKey))
	}
	block, err := aes.NewCipher(masterKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	s := &Sealer{aead: aead}
	copy(s.raw[:], masterKey)
	return s, nil
}

// Seal encrypts plaintext bound to aad and returns base64 text.
func (s *Sealer) Seal(plaintext, aad []byte) (string, error) {
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := s.aead.Seal(nonce, nonce, plaintext, aad)
	return base64.StdEncoding.EncodeToString(out), nil
}

// Open decrypts text made by Seal with the same aad.
func (s *Sealer) Open(sealed string, aad []byte) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("sealed value is not base64: %w", err)
	}
	n := s.aead.NonceSize()
	if len(raw) < n {
		return nil, errors.New("sealed value is too short")
	}
	pt, err := s.aead.Open(nil, raw[:n], raw[n:], aad)
	if err != nil {
		return nil, errors.New("sealed value does not open with this master key")
	}
	return pt, nil
}

// DerivedKey returns a 32-byte key for another purpose, derived from the
// master key with HKDF so that one secret protects the installation.
func (s *Sealer) DerivedKey(purpose string) [32]byte {
	var out [32]byte
	k, err := hkdf.Key(sha256.New, s.raw[:], nil, "mountd "+purpose, 32)
	if err != nil {
		panic(err) // only for lengths HKDF cannot produce; 32 is fine
	}
	copy(out[:], k)
	return out
}

// LoadMasterKey returns the configured master key (hex or base64 of 32
// bytes) or, when none is configured, the one kept in the data dir,
// generating it on first use.
func LoadMasterKey(configured, dataDir string, logger *slog.Logger) ([]byte, error) {
	if configured != "" {
		return parseKey(configured)
	}
	path := filepath.Join(dataDir, MasterKeyFile)
	if b, err := os.ReadFile(path); err == nil {
		return parseKey(string(b))
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read master key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	// O_EXCL: when two processes start on a fresh data dir, one writes and
	// the other reads what it wrote.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		return parseKey(string(b))
	}
	if err != nil {
		return nil, fmt.Errorf("write master key: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
		return nil, err
	}
	logger.Warn("no MOUNTD_MASTER_KEY configured: generated one; back it up, without it sealed keys cannot be read", "path", path)
	return key, nil
}

func parseKey(text string) ([]byte, error) {
	text = strings.TrimSpace(text)
	if b, err := hex.DecodeString(text); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(text); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("master key must be 32 bytes as hex (64 characters) or base64")
}
