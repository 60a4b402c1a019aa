package keyring_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mountd/mountd/adapters/keyring"
)

func TestSealerBindsAdditionalData(t *testing.T) {
	s, err := keyring.NewSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := s.Seal([]byte("secret"), []byte("mount:M1:k1"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.Seal([]byte("secret"), []byte("mount:M1:k1"))
	if sealed == again {
		t.Fatal("two seals are equal: the nonce is not random")
	}
	if pt, err := s.Open(sealed, []byte("mount:M1:k1")); err != nil || string(pt) != "secret" {
		t.Fatalf("Open = %q, %v", pt, err)
	}
	for name, open := range map[string]func() ([]byte, error){
		"other aad":  func() ([]byte, error) { return s.Open(sealed, []byte("mount:M2:k1")) },
		"tampered":   func() ([]byte, error) { return s.Open(sealed[:len(sealed)-4]+"AAAA", []byte("mount:M1:k1")) },
		"not base64": func() ([]byte, error) { return s.Open("%%%", nil) },
		"too short":  func() ([]byte, error) { return s.Open("AAAA", nil) },
		"other master": func() ([]byte, error) {
			o, _ := keyring.NewSealer(bytes.Repeat([]byte{8}, 32))
			return o.Open(sealed, []byte("mount:M1:k1"))
		},
	} {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if _, err := keyring.NewSealer(make([]byte, 16)); err == nil {
		t.Error("a 16-byte master key was accepted")
	}
}

func TestLoadMasterKey(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	first, err := keyring.LoadMasterKey("", dir, logger)
	if err != nil || len(first) != 32 {
		t.Fatalf("generate: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, keyring.MasterKeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("master key file mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	second, err := keyring.LoadMasterKey("", dir, logger)
	if err != nil || !bytes.Equal(first, second) {
		t.Fatal("the generated key was not reused")
	}
	hexKey := strings.Repeat("0f", 32)
	for _, configured := range []string{hexKey, "Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8="} {
		k, err := keyring.LoadMasterKey(configured, dir, logger)
		if err != nil || !bytes.Equal(k, bytes.Repeat([]byte{0x0f}, 32)) {
			t.Errorf("configured %q: %x, %v", configured, k, err)
		}
	}
	for _, bad := range []string{"short", strings.Repeat("0f", 31), "!!!!"} {
		if _, err := keyring.LoadMasterKey(bad, dir, logger); err == nil {
			t.Errorf("bad key %q accepted", bad)
		}
	}
}

func TestMountSigner(t *testing.T) {
	s, _ := keyring.NewSealer(bytes.Repeat([]byte{1}, 32))
	signer := keyring.NewMountSigner(s)
	ctx := context.Background()
	key, err := signer.NewKey(ctx, "M1")
	// The uid binds the sealing as additional data (checked below, where
	// the key will not open for another mount); it is not in the text, but
	// looking for "M1" in random base64 failed about one run in fifty.
	if err != nil || len(key.PublicKey) != ed25519.PublicKeySize {
		t.Fatalf("NewKey: %+v %v", key, err)
	}
	sig, err := signer.Sign(ctx, "M1", key, []byte("payload"))
	if err != nil || !ed25519.Verify(key.PublicKey, []byte("payload"), sig) {
		t.Fatalf("Sign: %v", err)
	}
	// a sealed key copied to another mount does not open there
	if _, err := signer.Sign(ctx, "M2", key, []byte("payload")); err == nil {
		t.Fatal("M1's key signed for M2")
	}
}
