// Package s3 keeps firmware binaries in an S3-compatible bucket and hands
// out presigned GET URLs (AWS Signature V4) as download links, so that a
// download needs no token and the storage checks signature and expiry.
package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/mountd/mountd/core"
)

var _ core.BlobStore = (*Store)(nil)

const (
	// PartSize is the part size of the streaming multipart upload of Put:
	// one buffer of this size is held per running Put, and an object may
	// have up to 10,000 parts (so at most 160 GiB).
	PartSize = 16 << 20
	// MaxLinkTTL is the longest lifetime S3 allows a presigned URL.
	MaxLinkTTL = 7 * 24 * time.Hour
	// DefaultRegion is used when the URL names none. A region is always
	// set so that presigning never asks the server for the bucket location.
	DefaultRegion = "us-east-1"
)

// Config is a parsed MOUNTD_BLOB_URL.
type Config struct {
	Bucket    string
	Endpoint  string // host or host:port, no scheme
	Region    string
	Secure    bool // https
	PathStyle *bool
	AccessKey string
	SecretKey string
	Token     string // optional session token (AWS_SESSION_TOKEN)
}

// Store is a bucket of blobs.
type Store struct {
	client *minio.Client
	bucket string
}

// knownParams are the query parameters of a blob URL.
var knownParams = map[string]bool{
	"endpoint": true, "region": true, "secure": true, "path_style": true,
	"access_key": true, "secret_key": true,
}

// ParseURL parses
//
//	s3://bucket?endpoint=host:port&region=us-east-1&secure=false&path_style=true&access_key=...&secret_key=...
//
// endpoint defaults to s3.amazonaws.com, region to us-east-1, secure to true
// (an endpoint given as http://host:port or https://host:port sets it too),
// path_style to the client's choice (path style for IPs and non-AWS hosts).
// Without access_key and secret_key the keys come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN, when set). Errors never
// repeat the secret key.
func ParseURL(blobURL string) (Config, error) {
	u, err := url.Parse(blobURL)
	if err != nil {
		// url.Error repeats the whole URL, secret and all: say less.
		return Config{}, errors.New("blob URL: not a URL of the form s3://bucket?endpoint=host:port")
	}
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("blob URL: scheme must be s3 (s3://bucket?endpoint=host:port), not %q", u.Scheme)
	}
	if u.User != nil {
		return Config{}, errors.New("blob URL: put credentials in access_key and secret_key parameters, not before the bucket")
	}
	if u.Host == "" {
		return Config{}, errors.New("blob URL: missing bucket (s3://bucket?endpoint=host:port)")
	}
	if u.Path != "" && u.Path != "/" {
		return Config{}, fmt.Errorf("blob URL: unexpected path %q after the bucket (a key prefix is not supported)", u.Path)
	}
	if u.Fragment != "" {
		return Config{}, errors.New("blob URL: unexpected #fragment")
	}
	cfg := Config{Bucket: u.Host, Endpoint: "s3.amazonaws.com", Region: DefaultRegion, Secure: true}
	if err := s3utils.CheckValidBucketNameStrict(cfg.Bucket); err != nil {
		return Config{}, fmt.Errorf("blob URL: bucket %q: %w", cfg.Bucket, err)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, errors.New("blob URL: malformed query string")
	}
	for k, vs := range q {
		if !knownParams[k] {
			return Config{}, fmt.Errorf("blob URL: unknown parameter %q (known: endpoint, region, secure, path_style, access_key, secret_key)", k)
		}
		if len(vs) != 1 {
			return Config{}, fmt.Errorf("blob URL: parameter %q given %d times", k, len(vs))
		}
	}
	secureSet := false
	if v := q.Get("endpoint"); q.Has("endpoint") {
		ep, scheme, err := parseEndpoint(v)
		if err != nil {
			return Config{}, fmt.Errorf("blob URL: bad endpoint %q: %w", v, err)
		}
		cfg.Endpoint = ep
		if scheme != "" {
			cfg.Secure, secureSet = scheme == "https", true
		}
	}
	if q.Has("secure") {
		b, err := strconv.ParseBool(q.Get("secure"))
		if err != nil {
			return Config{}, fmt.Errorf("blob URL: secure must be true or false, not %q", q.Get("secure"))
		}
		if secureSet && b != cfg.Secure {
			return Config{}, errors.New("blob URL: secure contradicts the endpoint's scheme")
		}
		cfg.Secure = b
	}
	if q.Has("path_style") {
		b, err := strconv.ParseBool(q.Get("path_style"))
		if err != nil {
			return Config{}, fmt.Errorf("blob URL: path_style must be true or false, not %q", q.Get("path_style"))
		}
		cfg.PathStyle = &b
	}
	if q.Has("region") {
		cfg.Region = q.Get("region")
		if cfg.Region == "" || strings.ContainsAny(cfg.Region, " /?#&") {
			return Config{}, fmt.Errorf("blob URL: bad region %q", cfg.Region)
		}
	}
	switch {
	case q.Has("access_key") || q.Has("secret_key"):
		cfg.AccessKey, cfg.SecretKey = q.Get("access_key"), q.Get("secret_key")
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return Config{}, errors.New("blob URL: access_key and secret_key must be given together, both non-empty")
		}
	default:
		cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		cfg.Token = os.Getenv("AWS_SESSION_TOKEN")
		if cfg.AccessKey == "" || cfg.SecretKey == "" {
			return Config{}, errors.New("blob URL: no credentials: give access_key and secret_key parameters or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
		}
	}
	return cfg, nil
}

// parseEndpoint checks host[:port] (or http(s)://host[:port]) and returns
// host[:port] and the scheme given, if any.
func parseEndpoint(v string) (endpoint, scheme string, err error) {
	if v == "" {
		return "", "", errors.New("empty (want host:port)")
	}
	if i := strings.Index(v, "://"); i >= 0 {
		scheme = strings.ToLower(v[:i])
		if scheme != "http" && scheme != "https" {
			return "", "", fmt.Errorf("scheme must be http or https, not %q", v[:i])
		}
		v = strings.TrimSuffix(v[i+3:], "/")
	}
	if strings.ContainsAny(v, "/?#@ ") {
		return "", "", errors.New("want host or host:port, without path, query or credentials")
	}
	host, port := v, ""
	if h, p, err := net.SplitHostPort(v); err == nil {
		host, port = h, p
	} else if strings.Count(v, ":") == 1 || strings.HasPrefix(v, "[") {
		return "", "", errors.New("want host or host:port")
	}
	if host == "" {
		return "", "", errors.New("missing host")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return "", "", fmt.Errorf("port %q is not a number from 1 to 65535", port)
		}
	}
	if net.ParseIP(strings.Trim(host, "[]")) == nil {
		for _, label := range strings.Split(host, ".") {
			if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
				return "", "", fmt.Errorf("host %q is not a valid host name or IP address", host)
			}
		}
	}
	return v, scheme, nil
}

// New parses blobURL (see ParseURL), connects, and checks that the bucket
// exists, creating it when it is missing.
func New(ctx context.Context, blobURL string) (*Store, error) {
	cfg, err := ParseURL(blobURL)
	if err != nil {
		return nil, err
	}
	return Open(ctx, cfg)
}

// Open is New for a parsed Config.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := newStore(cfg)
	if err != nil {
		return nil, err
	}
	ok, err := s.client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		hint := ""
		if minio.ToErrorResponse(err).StatusCode == http.StatusForbidden {
			hint = " (check the access and secret keys and the region)"
		}
		return nil, fmt.Errorf("s3 blob store: check bucket %q at %s%s: %w", cfg.Bucket, cfg.Endpoint, hint, err)
	}
	if ok {
		return s, nil
	}
	if err := s.client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
		// Another instance may have created it meanwhile.
		code := minio.ToErrorResponse(err).Code
		if code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
			return nil, fmt.Errorf("s3 blob store: bucket %q does not exist and creating it failed: %w", cfg.Bucket, err)
		}
	}
	return s, nil
}

// newStore makes the client; it sends no request.
func newStore(cfg Config) (*Store, error) {
	opts := &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, cfg.Token),
		Secure: cfg.Secure,
		Region: cfg.Region,
	}
	if cfg.PathStyle != nil {
		opts.BucketLookup = minio.BucketLookupDNS
		if *cfg.PathStyle {
			opts.BucketLookup = minio.BucketLookupPath
		}
	}
	client, err := minio.New(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("s3 blob store: endpoint %q: %w", cfg.Endpoint, err)
	}
	return &Store{client: client, bucket: cfg.Bucket}, nil
}

// countingHash hashes and counts what is written to it.
type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

// Put implements core.BlobStore: r is streamed to the bucket as a multipart
// upload of PartSize parts (unknown length, so never buffered whole), and
// hashed on the way. The object appears only once the upload completes; a
// failed upload is aborted.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) (int64, string, error) {
	if err := s3utils.CheckValidObjectName(key); err != nil {
		return 0, "", fmt.Errorf("s3 blob store: key %q: %w", key, err)
	}
	ch := &countingHash{h: sha256.New()}
	info, err := s.client.PutObject(ctx, s.bucket, key, io.TeeReader(r, ch), -1, minio.PutObjectOptions{
		PartSize:    PartSize,
		ContentType: "application/octet-stream",
	})
	if err != nil {
		return 0, "", fmt.Errorf("s3 blob store: put %q: %w", key, err)
	}
	if info.Size != ch.n {
		return 0, "", fmt.Errorf("s3 blob store: put %q: stored %d bytes but read %d", key, info.Size, ch.n)
	}
	return ch.n, hex.EncodeToString(ch.h.Sum(nil)), nil
}

// Delete implements core.BlobStore; deleting a missing key succeeds.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{}); err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil
		}
		return fmt.Errorf("s3 blob store: delete %q: %w", key, err)
	}
	return nil
}

// Link implements core.BlobStore with a presigned GET URL. Its lifetime is
// time.Until(expires) rounded up to whole seconds (at least 1s), so a link
// for a whole-second expires stops working exactly then; past MaxLinkTTL
// it is an error. Presigning is local: it makes no request.
func (s *Store) Link(ctx context.Context, key string, expires time.Time) (string, error) {
	ttl := linkTTL(time.Until(expires))
	if ttl > MaxLinkTTL {
		return "", fmt.Errorf("s3 blob store: link lifetime %s exceeds the S3 maximum of 7 days", ttl)
	}
	u, err := s.client.PresignedGetObject(ctx, s.bucket, key, ttl, nil)
	if err != nil {
		return "", fmt.Errorf("s3 blob store: presign %q: %w", key, err)
	}
	return u.String(), nil
}

// linkTTL rounds d up to whole seconds, at least one.
func linkTTL(d time.Duration) time.Duration {
	if d <= time.Second {
		return time.Second
	}
	if d > MaxLinkTTL {
		return d
	}
	return (d + time.Second - 1).Truncate(time.Second)
}
