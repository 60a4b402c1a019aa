package core

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// argon2id parameters: OWASP's minimum recommendation (19 MiB, 2 passes),
// which keeps a token request near 20 ms on a small server.
const (
	argonTime    = 2
	argonMemory  = 19 * 1024
	argonThreads = 1
	argonKeyLen  = 32
)

// dummySecretHash is verified against when a client id is unknown, so that the
// response time does not reveal which client ids exist.
var dummySecretHash = func() string {
	h, _ := HashSecret("unknown-client")
	return h
}()

// dummyKeyedHash is what an unknown client id is checked against under a
// ClientSecretKey: an HMAC costs the same whatever it is compared with.
var dummyKeyedHash = clientSecretPrefix + base64.RawStdEncoding.EncodeToString(make([]byte, sha256.Size))

// HashSecret hashes a secret with argon2id into PHC string form: people's
// passwords, and client secrets where no ClientSecretKey is at hand.
func HashSecret(secret string) (string, error) {
	salt := make([]byte, 16)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(secret), salt, argonTime, argonMemory, argonThreads, argonKeyLen)
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, argonMemory, argonTime, argonThreads, enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// VerifySecret reports whether secret matches a hash made by HashSecret,
// comparing in constant time.
func VerifySecret(hash, secret string) bool {
	parts := strings.Split(hash, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return false
	}
	var version int
	var memory, time uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &time, &threads); err != nil {
		return false
	}
	enc := base64.RawStdEncoding
	salt, err := enc.DecodeString(parts[4])
	if err != nil {
		return false
	}
	want, err := enc.DecodeString(parts[5])
	if err != nil {
		return false
	}
	got := argon2.IDKey([]byte(secret), salt, time, memory, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1
}

// ClientSecretKey keys the HMAC-SHA-256 that generated client secrets are
// stored as, derived from the master key. A generated secret has 256
// random bits: nothing can be guessed faster than the key itself, so it
// needs neither salt nor stretching, and a check costs a microsecond
// instead of argon2id's 19 MiB and tens of milliseconds. The key keeps a
// stolen table of hashes from being checked offline at all.
type ClientSecretKey [32]byte

// clientSecretPrefix marks a client secret stored as HMAC-SHA-256: the
// next field is the version of the scheme, then the MAC in unpadded
// base64. An argon2id hash starts "$argon2id$".
const clientSecretPrefix = "$hmac-sha256$v=1$"

// Hash returns the stored form of a generated client secret.
func (k *ClientSecretKey) Hash(secret string) string {
	return clientSecretPrefix + base64.RawStdEncoding.EncodeToString(k.mac(secret))
}

func (k *ClientSecretKey) mac(secret string) []byte {
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte(secret))
	return m.Sum(nil)
}

// Verify reports whether secret matches a hash made by Hash, comparing in
// constant time. Any other hash (argon2id, or one made under another key)
// does not match.
func (k *ClientSecretKey) Verify(hash, secret string) bool {
	enc, ok := strings.CutPrefix(hash, clientSecretPrefix)
	if !ok {
		return false
	}
	want, err := base64.RawStdEncoding.DecodeString(enc)
	if err != nil {
		return false
	}
	return hmac.Equal(k.mac(secret), want)
}

// IsKeyedSecretHash reports whether a stored hash is a client secret's
// HMAC (ClientSecretKey.Hash) rather than argon2id.
func IsKeyedSecretHash(hash string) bool { return strings.HasPrefix(hash, clientSecretPrefix) }
