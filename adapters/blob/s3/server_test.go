package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
)

// The tests below run against a real S3-compatible server with SigV4
// checking: versitygw (posix backend), pinned in tools/s3server and built by
//
//	bash tools/s3server/build.sh
//
// into $(go env GOCACHE)/../mountd-s3server/versitygw, where these tests
// find it; MOUNTD_TEST_S3_SERVER names another binary (and, when set, a
// missing binary fails the tests instead of skipping them).

const (
	testAccess   = "MOUNTDTESTACCESS"
	testSecretS3 = "mountd-test-secret-key-0123456789"
)

// serverBinary finds the S3 server or skips the test.
func serverBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MOUNTD_TEST_S3_SERVER"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("MOUNTD_TEST_S3_SERVER: %v", err)
		}
		return p
	}
	out, err := exec.Command("go", "env", "GOCACHE").Output()
	if err == nil {
		p := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "mountd-s3server", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Skip("no S3 server: run `bash tools/s3server/build.sh` or set MOUNTD_TEST_S3_SERVER")
	return ""
}

// testServer is a running versitygw over a temp dir.
type testServer struct {
	addr string // 127.0.0.1:port
	dir  string // the posix backend's root: one directory per bucket
}

var portMu sync.Mutex

// startServer starts the server on a free loopback port and stops it when
// the test ends.
func startServer(t *testing.T) *testServer {
	t.Helper()
	bin := serverBinary(t)
	dir := t.TempDir()
	portMu.Lock()
	defer portMu.Unlock()
	for attempt := 0; ; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		var logs bytes.Buffer
		cmd := exec.Command(bin, "--access", testAccess, "--secret", testSecretS3,
			"--region", DefaultRegion, "--port", addr, "--quiet", "posix", dir)
		cmd.Stdout, cmd.Stderr = &logs, &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		stop := func() {
			cmd.Process.Kill()
			<-exited
		}
		if err := waitListening(addr, exited); err != nil {
			stop()
			if attempt < 2 {
				continue // the port was taken meanwhile
			}
			t.Fatalf("S3 server did not start: %v\n%s", err, logs.String())
		}
		t.Cleanup(func() {
			stop()
			if t.Failed() {
				t.Logf("S3 server output:\n%s", logs.String())
			}
		})
		return &testServer{addr: addr, dir: dir}
	}
}

func waitListening(addr string, exited <-chan struct{}) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("exited")
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("not listening after 15s")
}

func (ts *testServer) url(bucket string) string {
	return fmt.Sprintf("s3://%s?endpoint=%s&secure=false&access_key=%s&secret_key=%s",
		bucket, ts.addr, testAccess, testSecretS3)
}

func (ts *testServer) store(t *testing.T, bucket string) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := New(ctx, ts.url(bucket))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// onlyReader hides every method but Read, so Put cannot learn the size or
// seek: it has to stream.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16)})
	r.Read(b)
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// get fetches a link with a plain client, as a device would.
func get(t *testing.T, link string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// withQuery returns link with one query parameter replaced.
func withQuery(t *testing.T, link, name string, f func(string) string) string {
	t.Helper()
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(name, f(q.Get(name)))
	u.RawQuery = q.Encode()
	return u.String()
}

func TestServerBucket(t *testing.T) {
	ts := startServer(t)
	// New creates a missing bucket ...
	ts.store(t, "mountd-new")
	if st, err := os.Stat(filepath.Join(ts.dir, "mountd-new")); err != nil || !st.IsDir() {
		t.Fatalf("bucket not created: %v", err)
	}
	// ... and accepts an existing one.
	ts.store(t, "mountd-new")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := strings.Replace(ts.url("mountd-new"), testSecretS3, "wrong-secret-key-wrong-secret-key", 1)
	_, err := New(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), `check bucket "mountd-new" at `+ts.addr+` (check the access and secret keys`) {
		t.Fatalf("wrong secret: err = %v", err)
	}
	if code := minio.ToErrorResponse(errors.Unwrap(err)).StatusCode; code != http.StatusForbidden {
		t.Errorf("wrong secret: status %d, want 403 (err %v)", code, err)
	}
}

// TestServerRoundTrip: Put streams objects (empty, small, and over one part
// so the upload has several parts) and the presigned GET returns the same
// bytes, size and SHA-256.
func TestServerRoundTrip(t *testing.T) {
	ts := startServer(t)
	s := ts.store(t, "mountd-firmware")
	ctx := context.Background()
	for _, n := range []int{0, 1, 1 << 20, PartSize + 123457} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			data := randomBytes(n)
			key := fmt.Sprintf("firmware/MNT-1/1.0.%d-abc123.bin", n)
			size, sum, err := s.Put(ctx, key, onlyReader{bytes.NewReader(data)})
			if err != nil {
				t.Fatal(err)
			}
			if size != int64(n) || sum != sha(data) {
				t.Fatalf("Put = %d, %s; want %d, %s", size, sum, n, sha(data))
			}
			onDisk, err := os.ReadFile(filepath.Join(ts.dir, "mountd-firmware", filepath.FromSlash(key)))
			if err != nil || !bytes.Equal(onDisk, data) {
				t.Fatalf("stored file differs (err %v)", err)
			}
			link, err := s.Link(ctx, key, time.Now().Add(15*time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			code, body := get(t, link)
			if code != http.StatusOK {
				t.Fatalf("GET = %d: %s", code, body)
			}
			if int64(len(body)) != size || sha(body) != sum {
				t.Fatalf("GET returned %d bytes, sha256 %s; want %d, %s", len(body), sha(body), size, sum)
			}
		})
	}
}

// TestServerLinkRefused: the server checks the signature: any change to
// the signature, the expiry or the key is refused with 403, and so is a
// link whose time is up.
func TestServerLinkRefused(t *testing.T) {
	ts := startServer(t)
	s := ts.store(t, "mountd-firmware")
	ctx := context.Background()
	data := randomBytes(4096)
	key := "firmware/MNT-1/2.0.0-abc123.bin"
	if _, _, err := s.Put(ctx, key, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Put(ctx, key+".other", bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	link, err := s.Link(ctx, key, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, link); code != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("untouched link: %d", code)
	}
	flip := func(sig string) string {
		b := []byte(sig)
		if b[len(b)-1] == '0' {
			b[len(b)-1] = '1'
		} else {
			b[len(b)-1] = '0'
		}
		return string(b)
	}
	u, _ := url.Parse(link)
	u.Path += ".other"
	for name, bad := range map[string]string{
		"tampered signature": withQuery(t, link, "X-Amz-Signature", flip),
		"longer expiry":      withQuery(t, link, "X-Amz-Expires", func(string) string { return "7200" }),
		"other key":          u.String(),
	} {
		if code, body := get(t, bad); code != http.StatusForbidden {
			t.Errorf("%s: GET = %d, want 403: %s", name, code, body)
		} else if bytes.Contains(body, data[:64]) {
			t.Errorf("%s: body carries the blob", name)
		}
	}
	// Without a signature it is no presigned request at all, and an unknown
	// access key is no user (versitygw: 400 and 404; AWS: 403 for both).
	for name, bad := range map[string]string{
		"no signature":     withQuery(t, link, "X-Amz-Signature", func(string) string { return "" }),
		"other access key": withQuery(t, link, "X-Amz-Credential", func(c string) string { return strings.Replace(c, testAccess, "OTHERACCESSKEY", 1) }),
	} {
		if code, body := get(t, bad); code < 400 || code > 499 || bytes.Contains(body, data[:64]) {
			t.Errorf("%s: GET = %d: %s", name, code, body)
		}
	}

	// The shortest link (1s; the server counts whole seconds passed) is
	// good at once and refused once its time is up.
	short, err := s.Link(ctx, key, time.Now().Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, short); code != http.StatusOK {
		t.Fatalf("fresh short link: GET = %d", code)
	}
	time.Sleep(3100 * time.Millisecond)
	code, body := get(t, short)
	if code != http.StatusForbidden {
		t.Fatalf("expired link: GET = %d, want 403: %s", code, body)
	}
	if !bytes.Contains(body, []byte("expired")) {
		t.Errorf("expired link: body %s does not say expired", body)
	}
}

// TestServerDelete: Delete removes the object (its link then finds
// nothing) and deleting again, or a key never stored, succeeds.
func TestServerDelete(t *testing.T) {
	ts := startServer(t)
	s := ts.store(t, "mountd-firmware")
	ctx := context.Background()
	key := "firmware/MNT-1/3.0.0-abc123.bin"
	if _, _, err := s.Put(ctx, key, bytes.NewReader(randomBytes(1000))); err != nil {
		t.Fatal(err)
	}
	link, err := s.Link(ctx, key, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, link); code != http.StatusOK {
		t.Fatalf("before Delete: GET = %d", code)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, link); code != http.StatusNotFound {
		t.Fatalf("after Delete: GET = %d, want 404: %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(ts.dir, "mountd-firmware", filepath.FromSlash(key))); !os.IsNotExist(err) {
		t.Fatalf("file still there: %v", err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if err := s.Delete(ctx, "firmware/never/stored.bin"); err != nil {
		t.Fatalf("Delete of a missing key: %v", err)
	}
}

// failingReader yields n bytes and then an error.
type failingReader struct {
	n   int
	err error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n == 0 {
		return 0, f.err
	}
	k := min(len(p), f.n)
	clear(p[:k])
	f.n -= k
	return k, nil
}

// TestServerPutFails: a reader that fails midway, in the first part or a
// later one, fails Put with its error and leaves no object behind.
func TestServerPutFails(t *testing.T) {
	ts := startServer(t)
	s := ts.store(t, "mountd-firmware")
	ctx := context.Background()
	boom := errors.New("upload stream broke")
	for _, n := range []int{1000, PartSize + 1000} {
		key := fmt.Sprintf("firmware/MNT-1/4.0.%d-abc123.bin", n)
		_, _, err := s.Put(ctx, key, &failingReader{n: n, err: boom})
		if !errors.Is(err, boom) {
			t.Fatalf("%d bytes then error: Put err = %v, want %v", n, err, boom)
		}
		if _, err := s.client.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{}); minio.ToErrorResponse(err).Code != "NoSuchKey" {
			t.Errorf("%d bytes then error: object exists after failed Put (stat err %v)", n, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Put(cctx, "firmware/MNT-1/5.0.0-abc123.bin", bytes.NewReader([]byte("x"))); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled context: Put err = %v", err)
	}
}

// TestServerConcurrentPuts: the Store is safe for concurrent use.
func TestServerConcurrentPuts(t *testing.T) {
	ts := startServer(t)
	s := ts.store(t, "mountd-firmware")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			data := randomBytes(100_000 + i)
			key := fmt.Sprintf("firmware/MNT-%d/1.0.0-abc123.bin", i)
			size, sum, err := s.Put(ctx, key, bytes.NewReader(data))
			if err != nil || size != int64(len(data)) || sum != sha(data) {
				t.Errorf("Put %d: %d %s %v", i, size, sum, err)
				return
			}
			link, err := s.Link(ctx, key, time.Now().Add(time.Minute))
			if err != nil {
				t.Error(err)
				return
			}
			resp, err := http.Get(link)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, data) {
				t.Errorf("GET %d: %d, %d bytes", i, resp.StatusCode, len(body))
			}
		})
	}
	wg.Wait()
}
