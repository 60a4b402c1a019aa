package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mountd test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	_ = os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	_ = os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// startNginx runs Debian's nginx with deploy/nginx/mountd.conf as shipped,
// but for its addresses: the replicas, loopback ports and a test
// certificate. It returns the HTTPS and HTTP base addresses and its access
// log, one line per request: the URI, the upstream addresses tried
// (comma-separated when nginx passed the request on), their statuses and
// times, and the answer's status.
func startNginx(t *testing.T, replicas []string, certFile, keyFile string) (base, plain, accessLog string) {
	t.Helper()
	httpAddr, httpsAddr := freeAddr(t), freeAddr(t)
	conf := shippedNginx(t, "mountd.conf", map[string]string{
		"server 127.0.0.1:8081 ":                "server " + replicas[0] + " ",
		"server 127.0.0.1:8082 ":                "server " + replicas[1] + " ",
		"listen 80;":                            "listen " + httpAddr + ";",
		"listen 443 ssl http2;":                 "listen " + httpsAddr + " ssl http2;",
		"listen [::]:80;":                       "",
		"listen [::]:443 ssl http2;":            "",
		"/etc/ssl/mountd/fullchain.pem":         certFile,
		"/etc/ssl/mountd/privkey.pem":           keyFile,
		"return 301 https://$host$request_uri;": "return 301 https://" + httpsAddr + "$request_uri;",
	})
	dir := runNginx(t, conf, httpsAddr)
	return "https://" + httpsAddr, "http://" + httpAddr, filepath.Join(dir, "access.log")
}

// shippedNginx is the configuration deploy/nginx/<name> with each key of
// repl replaced by its value (each must be there).
func shippedNginx(t *testing.T, name string, repl map[string]string) string {
	t.Helper()
	shipped, err := os.ReadFile(filepath.Join("../deploy/nginx", name))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(shipped)
	for old, r := range repl {
		if !strings.Contains(conf, old) {
			t.Fatalf("deploy/nginx/%s no longer has %q", name, old)
		}
		conf = strings.ReplaceAll(conf, old, r)
	}
	return conf
}

// runNginx runs Debian's nginx with conf (an http-level snippet) until the
// test ends, waits until it listens at addr, and returns its directory
// (access.log: see startNginx).
func runNginx(t *testing.T, conf, addr string) (dir string) {
	t.Helper()
	bin := testenv.Nginx(t)
	dir = t.TempDir()
	site := filepath.Join(dir, "mountd.conf")
	main := filepath.Join(dir, "nginx.conf")
	_ = os.WriteFile(site, []byte(conf), 0o644)
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // the workers read the test's files
	}
	_ = os.WriteFile(main, []byte(fmt.Sprintf(`%s
daemon off;
worker_processes 1;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 1024; }
http {
    log_format upstreams '$request_uri|$upstream_addr|$upstream_status|$upstream_response_time|$status';
    access_log %[2]s/access.log upstreams;
    client_body_temp_path %[2]s/body;
    proxy_temp_path %[2]s/proxy;
    fastcgi_temp_path %[2]s/fastcgi;
    uwsgi_temp_path %[2]s/uwsgi;
    scgi_temp_path %[2]s/scgi;
    include %[3]s;
}
`, user, dir, site)), 0o644)
	if out, err := exec.Command(bin, "-t", "-c", main, "-p", dir).CombinedOutput(); err != nil {
		t.Fatalf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-c", main, "-p", dir)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			logs, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx error log:\n%s%s", logs, out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return dir
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx did not listen:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisServer is a Redis of the test's own, which it may kill.
type redisServer struct {
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T, addr string) *redisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("MOUNTD_TEST_REQUIRE_SERVICES") != "" {
			t.Fatal("redis-server is not installed although the test servers are required")
		}
		t.Skip("redis-server not installed: run `make test`")
	}
	_, port, _ := net.SplitHostPort(addr)
	r := &redisServer{addr: addr, cmd: exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.kill)
	waitListening(t, addr)
	return r
}

func (r *redisServer) kill() {
	if r.cmd.ProcessState == nil {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		_ = r.cmd.Wait()
	}
}

// receiver is an operator's webhook endpoint: it verifies every request
// with the current secret and keeps what it accepted.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	secret   string
	failures int // answer 500 to this many requests first
	hang     chan struct{}
	got      []webhookCall
	bad      int
}

type webhookCall struct {
	ID   string
	Type string `json:"type"`
	Data struct {
		ID        string `json:"id"`
		Type      string `json:"type"`
		UID       string `json:"uid"`
		WebhookID string `json:"webhookId"` // a test delivery's
		Command   struct {
			ID string `json:"id"`
		} `json:"command"`
		States []struct {
			Value      string `json:"value"`
			OccurredAt string `json:"occurredAt"`
		} `json:"states"`
		Alarm *client.Alarm `json:"alarm"`
		Mount struct {
			Presence string `json:"presence"`
		} `json:"mount"`
	} `json:"data"`
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		hang := r.hang
		wh, err := standardwebhooks.NewWebhook(r.secret)
		if err != nil || wh.Verify(body, req.Header) != nil {
			r.bad++
			r.mu.Unlock()
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.failures > 0 {
			r.failures--
			r.mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		var c webhookCall
		_ = json.Unmarshal(body, &c)
		c.ID = req.Header.Get("webhook-id")
		r.got = append(r.got, c)
		r.mu.Unlock()
		if hang != nil {
			<-hang
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) setSecret(s string) { r.mu.Lock(); r.secret = s; r.mu.Unlock() }

// waitFor waits until the receiver has accepted calls that pass, then
// returns them.
func (r *receiver) waitFor(t *testing.T, what string, pass func([]webhookCall) bool) []webhookCall {
	t.Helper()
	// Beyond the delivery lease (15 s): an attempt a killed replica had
	// leased is made again once its lease lapses.
	deadline := time.Now().Add(30 * time.Second)
	for {
		r.mu.Lock()
		got := slices.Clone(r.got)
		bad := r.bad
		r.mu.Unlock()
		if bad > 0 {
			t.Fatalf("%d requests did not verify with the secret", bad)
		}
		if pass(got) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the receiver has %+v", what, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func types(calls []webhookCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Type+" "+c.Data.UID)
	}
	return out
}

// deliveryRun is what deliveryReceiver.run measured.
type deliveryRun struct {
	rate    float64       // deliveries per second, first to last
	p99     float64       // ms from a report's acknowledgement to its delivery
	lastLag time.Duration // from the report of the delivery that came last to it
	last    time.Time     // when the last delivery came
}

// deliveryReceiver records when each report's delivery arrived, by the
// entry's occurredAt (unique per report).
type deliveryReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	received map[int64]time.Time
}

func newDeliveryReceiver() *deliveryReceiver {
	r := &deliveryReceiver{received: map[int64]time.Time{}}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var c webhookCall
		_ = json.Unmarshal(body, &c)
		now := time.Now()
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, s := range c.Data.States {
			if at, err := time.Parse(time.RFC3339Nano, s.OccurredAt); err == nil {
				r.received[at.UnixMilli()] = now
			}
		}
	}))
	return r
}

// run posts n reports, 8 at a time, perSecond of them a second (0: as fast
// as they are answered), waits for their deliveries and returns the
// delivery rate (first to last delivery) and the p99 from acknowledgement
// to delivery in milliseconds.
func (r *deliveryReceiver) run(b *testing.B, api *client.Client, uid string, base time.Time, n, perSecond int) deliveryRun {
	b.Helper()
	return r.collect(b, base, r.post(b, api, uid, base, n, perSecond))
}

// post posts n reports as run says and returns when each was acknowledged.
func (r *deliveryReceiver) post(b *testing.B, api *client.Client, uid string, base time.Time, n, perSecond int) []time.Time {
	b.Helper()
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	acked := make([]time.Time, n)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{
					map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(i % 101), "occurredAt": at(i).Format(time.RFC3339Nano)}}}, nil); err != nil {
					b.Error(err)
				}
				acked[i] = time.Now()
			}
		})
	}
	began := time.Now()
	for i := range n {
		if perSecond > 0 {
			time.Sleep(time.Until(began.Add(time.Duration(i) * time.Second / time.Duration(perSecond))))
		}
		work <- i
	}
	close(work)
	wg.Wait()
	return acked
}

// collect waits for the deliveries of the reports post acknowledged at
// acked and measures them.
func (r *deliveryReceiver) collect(b *testing.B, base time.Time, acked []time.Time) deliveryRun {
	b.Helper()
	n := len(acked)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
	deadline := time.Now().Add(60 * time.Second)
	for {
		r.mu.Lock()
		got := 0
		for i := range n {
			if _, ok := r.received[at(i).UnixMilli()]; ok {
				got++
			}
		}
		r.mu.Unlock()
		if got == n || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var first, last time.Time
	var lastLag time.Duration
	lat := make([]time.Duration, 0, n)
	for i := range n {
		got, ok := r.received[at(i).UnixMilli()]
		if !ok {
			b.Fatalf("report %d was not delivered", i)
		}
		if first.IsZero() || got.Before(first) {
			first = got
		}
		if got.After(last) {
			last, lastLag = got, got.Sub(acked[i])
		}
		lat = append(lat, max(0, got.Sub(acked[i])))
	}
	slices.Sort(lat)
	return deliveryRun{rate: float64(n) / last.Sub(first).Seconds(), p99: float64(lat[len(lat)*99/100].Microseconds()) / 1000,
		lastLag: lastLag, last: last}
}

// freeAddr is a loopback address with a port nothing listens on yet.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitListening waits up to 10 s until something accepts connections on addr.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("nothing listens on %s", addr)
}
