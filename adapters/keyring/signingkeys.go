package keyring

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"
)

// PurposeIdentityProvider names the embedded identity provider's token key.
const PurposeIdentityProvider = "idp"

// StoredKey is a signing key as stored: public half in the clear, private
// half sealed.
type StoredKey struct {
	ID               string
	Purpose          string
	Algorithm        string
	PublicKey        string
	SealedPrivateKey string
	CreatedAt        time.Time
}

// SigningKeyStore persists service signing keys.
type SigningKeyStore interface {
	// SigningKey returns the key for purpose; found is false when none exists.
	SigningKey(ctx context.Context, purpose string) (k StoredKey, found bool, err error)
	// InsertSigningKeyIfAbsent stores k unless its purpose already has a key.
	InsertSigningKeyIfAbsent(ctx context.Context, k StoredKey) error
}

// IdentityKey returns the identity provider's RSA key, creating it once. It
// lives in the database (sealed), so every replica signs with the same key
// and tokens survive restarts.
func IdentityKey(ctx context.Context, store SigningKeyStore, sealer *Sealer) (id string, key *rsa.PrivateKey, err error) {
	stored, found, err := store.SigningKey(ctx, PurposeIdentityProvider)
	if err != nil {
		return "", nil, err
	}
	if !found {
		fresh, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			return "", nil, err
		}
		kid := make([]byte, 8)
		_, _ = rand.Read(kid)
		k := StoredKey{ID: hex.EncodeToString(kid), Purpose: PurposeIdentityProvider, Algorithm: "RS256", CreatedAt: time.Now().UTC()}
		pub, err := x509.MarshalPKIXPublicKey(&fresh.PublicKey)
		if err != nil {
			return "", nil, err
		}
		k.PublicKey = base64.StdEncoding.EncodeToString(pub)
		k.SealedPrivateKey, err = sealer.Seal(x509.MarshalPKCS1PrivateKey(fresh), []byte(k.ID))
		if err != nil {
			return "", nil, err
		}
		if err := store.InsertSigningKeyIfAbsent(ctx, k); err != nil {
			return "", nil, err
		}
		// Read back: another replica may have won the insert.
		if stored, found, err = store.SigningKey(ctx, PurposeIdentityProvider); err != nil || !found {
			return "", nil, fmt.Errorf("identity key vanished after insert: %v", err)
		}
	}
	der, err := sealer.Open(stored.SealedPrivateKey, []byte(stored.ID))
	if err != nil {
		return "", nil, fmt.Errorf("identity provider key: %w", err)
	}
	key, err = x509.ParsePKCS1PrivateKey(der)
	if err != nil {
		return "", nil, fmt.Errorf("identity provider key: %w", err)
	}
	return stored.ID, key, nil
}
