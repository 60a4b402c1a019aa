package s3

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
)

const testSecret = "s3cr3t-DO-NOT-PRINT"

func TestParseURL(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SESSION_TOKEN", "")
	good := "&access_key=AK&secret_key=" + testSecret
	cfg, err := ParseURL("s3://firmware?endpoint=127.0.0.1:9000&region=eu-west-1&secure=false" + good)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Bucket != "firmware" || cfg.Endpoint != "127.0.0.1:9000" || cfg.Region != "eu-west-1" ||
		cfg.Secure || cfg.PathStyle != nil || cfg.AccessKey != "AK" || cfg.SecretKey != testSecret {
		t.Fatalf("cfg = %+v", cfg)
	}

	cfg, err = ParseURL("s3://firmware?" + good[1:])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Endpoint != "s3.amazonaws.com" || cfg.Region != DefaultRegion || !cfg.Secure {
		t.Fatalf("defaults: cfg = %+v", cfg)
	}

	for _, tc := range []struct {
		url      string
		endpoint string
		secure   bool
		path     *bool
	}{
		{"s3://bkt?endpoint=http://minio.internal:9000", "minio.internal:9000", false, nil},
		{"s3://bkt?endpoint=https://minio.internal", "minio.internal", true, nil},
		{"s3://bkt?endpoint=https://minio.internal/&secure=true", "minio.internal", true, nil},
		{"s3://bkt?endpoint=[::1]:9000&secure=0", "[::1]:9000", false, nil},
		{"s3://bkt?endpoint=localhost:9000&path_style=true", "localhost:9000", true, ptr(true)},
		{"s3://b.with.dots?endpoint=s3.example.com&path_style=false", "s3.example.com", true, ptr(false)},
	} {
		cfg, err := ParseURL(tc.url + good)
		if err != nil {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if cfg.Endpoint != tc.endpoint || cfg.Secure != tc.secure || (cfg.PathStyle == nil) != (tc.path == nil) ||
			(tc.path != nil && *cfg.PathStyle != *tc.path) {
			t.Errorf("%s: cfg = %+v", tc.url, cfg)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseURLErrors(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	creds := "&access_key=AK&secret_key=" + testSecret
	for _, tc := range []struct{ url, want string }{
		{"", "scheme must be s3"},
		{"http://bucket?endpoint=h:1" + creds, "scheme must be s3"},
		{"s3://?endpoint=h:1" + creds, "missing bucket"},
		{"s3:///?endpoint=h:1" + creds, "missing bucket"},
		{"s3://?" + creds[1:], "missing bucket"},
		{"s3://Bad_Bucket?endpoint=h:1" + creds, `bucket "Bad_Bucket"`},
		{"s3://ab?endpoint=h:1" + creds, `bucket "ab"`},
		{"s3://bucket/prefix?endpoint=h:1" + creds, "unexpected path"},
		{"s3://AK:" + testSecret + "@bucket?endpoint=h:1", "access_key and secret_key parameters"},
		{"s3://bucket?endpoint=" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=h:0" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=h:99999" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=h:port" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=:9000" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=h:9000/path" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=ftp://h:9000" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=bad%20host:9000" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=bad$host" + creds, "bad endpoint"},
		{"s3://bucket?endpoint=http://h:1&secure=true" + creds, "contradicts"},
		{"s3://bucket?endpoint=h:1&secure=maybe" + creds, "secure must be true or false"},
		{"s3://bucket?endpoint=h:1&path_style=maybe" + creds, "path_style must be true or false"},
		{"s3://bucket?endpoint=h:1&region=" + creds, "bad region"},
		{"s3://bucket?endpoint=h:1&endpoint=h:2" + creds, "given 2 times"},
		{"s3://bucket?endpoint=h:1&acces_key=AK" + creds, `unknown parameter "acces_key"`},
		{"s3://bucket?endpoint=h:1&access_key=AK", "given together"},
		{"s3://bucket?endpoint=h:1&secret_key=" + testSecret, "given together"},
		{"s3://bucket?endpoint=h:1", "no credentials"},
		{"s3://bucket?endpoint=h:1" + creds + "%zz", "malformed query"},
		{"s3://bucket\x7f?secret_key=" + testSecret, "not a URL"},
	} {
		_, err := ParseURL(tc.url)
		if err == nil {
			t.Errorf("%q: no error, want %q", tc.url, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %q, want it to contain %q", tc.url, err, tc.want)
		}
		if strings.Contains(err.Error(), testSecret) {
			t.Errorf("%q: error %q repeats the secret key", tc.url, err)
		}
	}
}

func TestParseURLEnvCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "ENVAK")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
	t.Setenv("AWS_SESSION_TOKEN", "tok")
	cfg, err := ParseURL("s3://bucket?endpoint=h:1")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AccessKey != "ENVAK" || cfg.SecretKey != "envsecret" || cfg.Token != "tok" {
		t.Fatalf("cfg = %+v", cfg)
	}
	// Parameters win over the environment.
	cfg, err = ParseURL("s3://bucket?endpoint=h:1&access_key=AK&secret_key=SK")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AccessKey != "AK" || cfg.SecretKey != "SK" || cfg.Token != "" {
		t.Fatalf("cfg = %+v", cfg)
	}
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := ParseURL("s3://bucket?endpoint=h:1"); err == nil || !strings.Contains(err.Error(), "no credentials") {
		t.Fatalf("err = %v", err)
	}
}

// TestNewUnreachable: a server that is not there is a clear error, not a hang.
func TestNewUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = New(ctx, "s3://bucket?secure=false&access_key=AK&secret_key="+testSecret+"&endpoint="+addr)
	if err == nil || !strings.Contains(err.Error(), `check bucket "bucket" at `+addr) {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), testSecret) {
		t.Fatalf("error repeats the secret: %v", err)
	}
	if _, err := New(ctx, "s3://bucket?endpoint=h:99999&access_key=AK&secret_key=SK"); err == nil ||
		!strings.Contains(err.Error(), "bad endpoint") {
		t.Fatalf("err = %v", err)
	}
}

func TestLinkTTL(t *testing.T) {
	for _, tc := range []struct{ in, want time.Duration }{
		{-time.Hour, time.Second},
		{0, time.Second},
		{time.Millisecond, time.Second},
		{time.Second, time.Second},
		{time.Second + time.Nanosecond, 2 * time.Second},
		{899*time.Second + 700*time.Millisecond, 900 * time.Second},
		{900 * time.Second, 900 * time.Second},
		{MaxLinkTTL, MaxLinkTTL},
		{1<<63 - 1, 1<<63 - 1},
	} {
		if got := linkTTL(tc.in); got != tc.want {
			t.Errorf("linkTTL(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// offlineStore is a Store whose server is never asked anything: presigning
// with a region set is local.
func offlineStore(t *testing.T) *Store {
	t.Helper()
	cfg, err := ParseURL("s3://firmware?endpoint=127.0.0.1:1&secure=false&region=eu-central-1&access_key=AKIDTEST&secret_key=" + testSecret)
	if err != nil {
		t.Fatal(err)
	}
	s, err := newStore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLinkPresignedParams checks the presigned URL itself: path-style
// bucket and key, SigV4 algorithm, credential scope, date, expiry equal to
// the requested lifetime, and a signature; no secret in it.
func TestLinkPresignedParams(t *testing.T) {
	s := offlineStore(t)
	key := "firmware/MNT-1/1.4.0-abcdef.bin"
	expires := time.Now().UTC().Truncate(time.Second).Add(15 * time.Minute)
	link, err := s.Link(context.Background(), key, expires)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(link, testSecret) {
		t.Fatalf("link contains the secret key: %s", link)
	}
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "http" || u.Host != "127.0.0.1:1" || u.Path != "/firmware/"+key {
		t.Fatalf("link = %s", link)
	}
	q := u.Query()
	if got := q.Get("X-Amz-Algorithm"); got != "AWS4-HMAC-SHA256" {
		t.Errorf("X-Amz-Algorithm = %q", got)
	}
	date, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	if err != nil {
		t.Fatalf("X-Amz-Date: %v", err)
	}
	if d := time.Since(date); d < -time.Second || d > time.Minute {
		t.Errorf("X-Amz-Date %s is not now", date)
	}
	wantCred := "AKIDTEST/" + date.Format("20060102") + "/eu-central-1/s3/aws4_request"
	if got := q.Get("X-Amz-Credential"); got != wantCred {
		t.Errorf("X-Amz-Credential = %q, want %q", got, wantCred)
	}
	secs, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil {
		t.Fatalf("X-Amz-Expires = %q", q.Get("X-Amz-Expires"))
	}
	// The lifetime is rounded up to whole seconds from the signing time,
	// so the link dies at expires (one second later if the clock ticked
	// between Link's reading of it and the signing).
	if secs < 890 || secs > 900 {
		t.Errorf("X-Amz-Expires = %d, want about 900", secs)
	}
	if end := date.Add(time.Duration(secs) * time.Second); end.Before(expires) || end.After(expires.Add(time.Second)) {
		t.Errorf("link dies at %s, want %s", end, expires)
	}
	if got := q.Get("X-Amz-SignedHeaders"); got != "host" {
		t.Errorf("X-Amz-SignedHeaders = %q", got)
	}
	if sig := q.Get("X-Amz-Signature"); len(sig) != 64 || strings.Trim(sig, "0123456789abcdef") != "" {
		t.Errorf("X-Amz-Signature = %q, want 64 hex digits", sig)
	}

	// A link for a time already past still gets the least lifetime, 1s.
	link, err = s.Link(context.Background(), key, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := url.Parse(link); u.Query().Get("X-Amz-Expires") != "1" {
		t.Errorf("past expiry: %s", link)
	}
	// Exactly 7 days is the S3 maximum; longer is an error.
	if _, err := s.Link(context.Background(), key, time.Now().Add(MaxLinkTTL)); err != nil {
		t.Errorf("7 days: %v", err)
	}
	if _, err := s.Link(context.Background(), key, time.Now().Add(MaxLinkTTL+time.Minute)); err == nil ||
		!strings.Contains(err.Error(), "7 days") {
		t.Errorf("over 7 days: err = %v", err)
	}
}

// TestLinkBucketLookup: path_style chooses where the bucket goes in links.
func TestLinkBucketLookup(t *testing.T) {
	for _, tc := range []struct{ params, host, path string }{
		{"endpoint=s3.example.com&path_style=false", "firmware.s3.example.com", "/k.bin"},
		{"endpoint=s3.example.com&path_style=true", "s3.example.com", "/firmware/k.bin"},
		{"endpoint=127.0.0.1:9000", "127.0.0.1:9000", "/firmware/k.bin"},
	} {
		cfg, err := ParseURL("s3://firmware?access_key=AK&secret_key=SK&" + tc.params)
		if err != nil {
			t.Fatal(err)
		}
		s, err := newStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		link, err := s.Link(context.Background(), "k.bin", time.Now().Add(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(link)
		if u.Scheme != "https" && cfg.Secure || u.Host != tc.host || u.Path != tc.path {
			t.Errorf("%s: link %s", tc.params, link)
		}
	}
}

func TestPutBadKey(t *testing.T) {
	s := offlineStore(t)
	if _, _, err := s.Put(context.Background(), "", strings.NewReader("x")); err == nil || !strings.Contains(err.Error(), "key") {
		t.Fatalf("err = %v", err)
	}
}
