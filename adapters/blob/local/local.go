// Package local keeps firmware binaries as files under the data dir and
// serves them through links signed with HMAC-SHA256 over method, path and
// expiry, so that a download needs no token and cannot be altered.
package local

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.BlobStore = (*Store)(nil)

// BlobPath is where the REST transport serves blobs.
const BlobPath = "/api/v1/firmware/blobs/"

// Store is a directory of blobs.
type Store struct {
	dir       string
	publicURL string
	secret    []byte
	now       func() time.Time
}

// New returns a Store under dir whose links start with publicURL and are
// signed with secret.
func New(dir, publicURL string, secret [32]byte) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create blob dir: %w", err)
	}
	return &Store{dir: dir, publicURL: strings.TrimRight(publicURL, "/"), secret: secret[:], now: time.Now}, nil
}

// path maps a key to a file, refusing keys that would leave the directory.
func (s *Store) path(key string) (string, error) {
	clean := filepath.Clean("/" + key)
	if key == "" || clean != "/"+key || strings.Contains(key, "\\") {
		return "", core.Errorf(core.CodeNotFound, "no such blob")
	}
	return filepath.Join(s.dir, filepath.FromSlash(clean)), nil
}

// Put implements core.BlobStore: the file appears under its name only once
// completely written (temp file, fsync, rename).
func (s *Store) Put(_ context.Context, key string, r io.Reader) (int64, string, error) {
	path, err := s.path(key)
	if err != nil {
		return 0, "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return 0, "", err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".upload-*")
	if err != nil {
		return 0, "", err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, "", err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

// Delete implements core.BlobStore.
func (s *Store) Delete(_ context.Context, key string) error {
	path, err := s.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (s *Store) sign(urlPath string, expires int64) string {
	mac := hmac.New(sha256.New, s.secret)
	fmt.Fprintf(mac, "GET\n%s\n%d", urlPath, expires)
	return hex.EncodeToString(mac.Sum(nil))
}

// Link implements core.BlobStore.
func (s *Store) Link(_ context.Context, key string, expires time.Time) (string, error) {
	if _, err := s.path(key); err != nil {
		return "", err
	}
	urlPath := BlobPath + key
	exp := expires.Unix()
	q := url.Values{"expires": {strconv.FormatInt(exp, 10)}, "signature": {s.sign(urlPath, exp)}}
	return s.publicURL + (&url.URL{Path: urlPath}).EscapedPath() + "?" + q.Encode(), nil
}

// Blob is an opened blob with what HTTP caching needs.
type Blob = core.OpenedBlob

// Open checks a link's signature and expiry and opens its blob. Any change
// to path, expiry or signature, and an expired link, is FORBIDDEN.
func (s *Store) Open(urlPath, expires, signature string) (*Blob, error) {
	exp, err := strconv.ParseInt(expires, 10, 64)
	if err != nil {
		return nil, core.Errorf(core.CodeForbidden, "the download link is invalid")
	}
	want := s.sign(urlPath, exp)
	if !hmac.Equal([]byte(want), []byte(strings.ToLower(signature))) || len(signature) != len(want) {
		return nil, core.Errorf(core.CodeForbidden, "the download link is invalid")
	}
	if s.now().Unix() > exp {
		return nil, core.Errorf(core.CodeForbidden, "the download link has expired")
	}
	path, err := s.path(strings.TrimPrefix(urlPath, BlobPath))
	if err != nil {
		return nil, core.Errorf(core.CodeForbidden, "the download link is invalid")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, core.Errorf(core.CodeFirmwareNotFound, "the firmware file is gone")
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Keys are never reused (each publish has a random suffix), so the key
	// identifies the content and makes a strong ETag.
	sum := sha256.Sum256([]byte(urlPath))
	return &Blob{ReadSeekCloser: f, ModTime: st.ModTime(), ETag: `"` + hex.EncodeToString(sum[:16]) + `"`}, nil
}
