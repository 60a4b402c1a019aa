package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// createDatabase creates a database of its own for the run on the
// services' PostgreSQL and returns its URL.
func createDatabase(ctx context.Context, adminURL, name string) (string, error) {
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(adminURL)))
	defer db.Close()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return withDatabase(adminURL, name)
}

// withDatabase is u naming database name instead of its own.
func withDatabase(u, name string) (string, error) {
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	p.Path = "/" + name
	return p.String(), nil
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// selfSigned writes a certificate for 127.0.0.1 and its key to dir; the
// tool's clients trust it through a pool, mountsim through SSL_CERT_FILE.
func selfSigned(dir string, lifetime time.Duration) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mountd soak"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(lifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}

// nginxConf is the shipped deploy/nginx/mountd.conf with three upstreams,
// loopback listeners and the run's certificate; each replaced text must be
// there, so that a change of the shipped file shows here.
func nginxConf(root string, replicas []string, httpAddr, httpsAddr, certFile, keyFile string) (string, error) {
	shipped, err := os.ReadFile(filepath.Join(root, "deploy/nginx/mountd.conf"))
	if err != nil {
		return "", err
	}
	conf := string(shipped)
	for _, r := range [][2]string{
		{"server 127.0.0.1:8081 max_fails=3 fail_timeout=10s;", "server " + replicas[0] + " max_fails=3 fail_timeout=10s;"},
		{"server 127.0.0.1:8082 max_fails=3 fail_timeout=10s;", "server " + replicas[1] + " max_fails=3 fail_timeout=10s;\n    server " +
			replicas[2] + " max_fails=3 fail_timeout=10s;"},
		{"listen 80;", "listen " + httpAddr + ";"},
		{"listen 443 ssl http2;", "listen " + httpsAddr + " ssl http2;"},
		{"listen [::]:80;", ""},
		{"listen [::]:443 ssl http2;", ""},
		{"/etc/ssl/mountd/fullchain.pem", certFile},
		{"/etc/ssl/mountd/privkey.pem", keyFile},
		{"return 301 https://$host$request_uri;", "return 301 https://" + httpsAddr + "$request_uri;"},
	} {
		if !strings.Contains(conf, r[0]) {
			return "", fmt.Errorf("deploy/nginx/mountd.conf no longer has %q", r[0])
		}
		conf = strings.ReplaceAll(conf, r[0], r[1])
	}
	return conf, nil
}

// startNginx runs nginx with conf (an http-level snippet) in dir until ctx
// ends; its access log (dir/access.log) has a line per request: the URI,
// the upstreams tried, their statuses and times, and the answer's status.
func startNginx(ctx context.Context, bin, dir, conf, addr string) (*exec.Cmd, error) {
	site, main := filepath.Join(dir, "mountd.conf"), filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(site, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;" // the workers read the run's files
	}
	// Two workers: one would be the bottleneck of 200 sockets and the
	// fleet's reports on a busy machine, which is not what is measured.
	mainConf := fmt.Sprintf(`%s
daemon off;
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
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
`, user, dir, site)
	if err := os.WriteFile(main, []byte(mainConf), 0o644); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, bin, "-t", "-c", main, "-p", dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nginx -t: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-c", main, "-p", dir)
	log, err := os.Create(filepath.Join(dir, "nginx.out"))
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	for range 100 {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return cmd, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("nginx does not listen on %s (see %s)", addr, dir)
}

// stopNginx asks nginx to quit and waits for it.
func stopNginx(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGQUIT)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// replica is one `mountd serve` on addr; its supervisor restarts it
// after any exit the tool did not ask for (and counts those).
type replica struct {
	n       int
	bin     string
	addr    string
	env     []string
	logPath string
	mu      sync.Mutex
	cur     *instance
	killed  atomic.Int64 // SIGKILLs sent by the fault schedule
	crashed atomic.Int64 // exits nobody asked for
}

// instance is one process of a replica.
type instance struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	expected atomic.Bool // the tool ended it (kill, stop)
}

func (r *replica) start() error {
	log, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "--- soak: start %s at %s\n", r.addr, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(r.bin, "serve")
	cmd.Env = append(os.Environ(), append(r.env, "MOUNTD_LISTEN="+r.addr)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return err
	}
	in := &instance{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(in.exited)
	}()
	r.mu.Lock()
	r.cur = in
	r.mu.Unlock()
	return nil
}

func (r *replica) current() *instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// kill SIGKILLs the replica, waits for its exit and starts it again at once.
func (r *replica) kill() error {
	in := r.current()
	in.expected.Store(true)
	r.killed.Add(1)
	_ = in.cmd.Process.Signal(syscall.SIGKILL)
	<-in.exited
	return r.start()
}

// stop ends the replica with SIGTERM (a graceful stop) at the end of the run.
func (r *replica) stop() {
	in := r.current()
	in.expected.Store(true)
	_ = in.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-in.exited:
	case <-time.After(30 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.exited
	}
}

// ready waits until /readyz answers 200 (directly, not through nginx).
func (r *replica) ready(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	hc := &http.Client{Timeout: 2 * time.Second}
	for time.Now().Before(deadline) {
		res, err := hc.Get("http://" + r.addr + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("replica %d (%s) not ready after %s (log %s)", r.n, r.addr, within, r.logPath)
}

// supervise restarts the replica after an exit the tool did not cause (a
// crash, or a stop on a lost database), until ctx ends.
func (r *replica) supervise(ctx context.Context) {
	for {
		in := r.current()
		select {
		case <-ctx.Done():
			return
		case <-in.exited:
		}
		if in.expected.Load() {
			// kill starts the next one: wait for it.
			for r.current() == in && ctx.Err() == nil {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		r.crashed.Add(1)
		logf("replica %d exited on its own (see %s): restarting it", r.n, r.logPath)
		time.Sleep(time.Second)
		if err := r.start(); err != nil {
			logf("replica %d: %v", r.n, err)
			return
		}
	}
}

// clusterNode is a line of CLUSTER NODES.
type clusterNode struct {
	ID, Addr, MasterID string
	Master, Failed     bool
}

// clusterNodes reads CLUSTER NODES from the node on port.
func clusterNodes(ctx context.Context, port string) ([]clusterNode, error) {
	out, err := exec.CommandContext(ctx, "redis-cli", "-p", port, "cluster", "nodes").Output()
	if err != nil {
		return nil, fmt.Errorf("redis-cli -p %s cluster nodes: %w", port, err)
	}
	var nodes []clusterNode
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 {
			continue
		}
		addr := f[1]
		if i := strings.IndexByte(addr, '@'); i >= 0 {
			addr = addr[:i]
		}
		flags := f[2]
		nodes = append(nodes, clusterNode{ID: f[0], Addr: addr, MasterID: f[3],
			Master: strings.Contains(flags, "master"), Failed: strings.Contains(flags, "fail")})
	}
	return nodes, nil
}

// clusterPorts are the ports of the cluster URL's nodes
// (redis://host:port?addr=host:port&...).
func clusterPorts(clusterURL string) ([]string, error) {
	u, err := url.Parse(clusterURL)
	if err != nil {
		return nil, err
	}
	addrs := append([]string{u.Host}, u.Query()["addr"]...)
	var ports []string
	for _, a := range addrs {
		_, p, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		ports = append(ports, p)
	}
	return ports, nil
}

// redisFailover fails one master of the cluster over to its replica: mode
// kill SIGKILLs the master's process (the replica takes over after the
// node timeout), failover asks the replica for a manual failover. It
// returns what happened and how long until the replica was master.
func redisFailover(ctx context.Context, clusterURL, mode string) (string, time.Duration, error) {
	ports, err := clusterPorts(clusterURL)
	if err != nil {
		return "", 0, err
	}
	nodes, err := clusterNodes(ctx, ports[0])
	if err != nil {
		return "", 0, err
	}
	var master, standby clusterNode
	for _, m := range nodes {
		if !m.Master || m.Failed {
			continue
		}
		for _, s := range nodes {
			if !s.Master && !s.Failed && s.MasterID == m.ID {
				master, standby = m, s
			}
		}
		if master.ID != "" {
			break
		}
	}
	if master.ID == "" {
		return "", 0, errors.New("no master with a live replica in the cluster")
	}
	_, masterPort, _ := net.SplitHostPort(master.Addr)
	_, standbyPort, _ := net.SplitHostPort(standby.Addr)
	start := time.Now()
	what := ""
	switch mode {
	case "kill":
		out, err := exec.CommandContext(ctx, "redis-cli", "-p", masterPort, "info", "server").Output()
		if err != nil {
			return "", 0, err
		}
		pid := 0
		for _, line := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
				fmt.Sscan(v, &pid)
			}
		}
		if pid <= 0 {
			return "", 0, fmt.Errorf("no process_id from the master on :%s", masterPort)
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return "", 0, fmt.Errorf("kill the master on :%s (pid %d): %w", masterPort, pid, err)
		}
		what = fmt.Sprintf("master :%s SIGKILLed (pid %d), replica :%s", masterPort, pid, standbyPort)
	case "failover":
		if out, err := exec.CommandContext(ctx, "redis-cli", "-p", standbyPort, "cluster", "failover").CombinedOutput(); err != nil {
			return "", 0, fmt.Errorf("cluster failover on :%s: %v %s", standbyPort, err, out)
		}
		what = fmt.Sprintf("manual failover of master :%s to replica :%s", masterPort, standbyPort)
	default:
		return "", 0, fmt.Errorf("--redis-fault %q: kill or failover", mode)
	}
	for time.Since(start) < time.Minute {
		if nodes, err := clusterNodes(ctx, standbyPort); err == nil {
			for _, n := range nodes {
				if n.ID == standby.ID && n.Master {
					return what, time.Since(start), nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return what, time.Since(start), fmt.Errorf("%s: the replica was not master after a minute", what)
}

// pgRestart restarts the services' PostgreSQL primary with pg_ctl (as the
// postgres user when the tool runs as root: PostgreSQL refuses root).
func pgRestart(ctx context.Context, pgBin, pgData, mode string) (time.Duration, error) {
	if pgBin == "" || pgData == "" {
		return 0, errors.New("no MOUNTD_TEST_PG_DATA/MOUNTD_TEST_PG_BIN (scripts/test-services.sh exports them)")
	}
	args := []string{filepath.Join(pgBin, "pg_ctl"), "-D", pgData, "-l", pgData + ".log", "-w", "-t", "120", "-m", mode, "restart"}
	if os.Geteuid() == 0 {
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	start := time.Now()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return time.Since(start), fmt.Errorf("pg_ctl restart: %v\n%s", err, out)
	}
	return time.Since(start), nil
}
