// Command soak runs mountd as an operator past one machine would, and
// breaks things while a fleet works (issue 41, CONTRACT §22): three `mountd
// serve` replicas on PostgreSQL and a Redis Cluster behind nginx (the
// shipped deploy/nginx/mountd.conf with three upstreams); two mountsim
// fleets (--mounts in all: one reporting, one smaller whose phones pass
// often and run a job and a firmware rollout with a short healthWindow,
// created at --job-at and --rollout-at of the run, before the Redis and
// PostgreSQL faults);
// the tool's own mounts reporting through nginx, whose acknowledged
// entries it keeps; --subscribers consoles on mountEvents over
// graphql-transport-ws that resume after their last event when their
// socket drops, and --followers long polls of GET /events; two webhook receivers checking Standard Webhooks
// signatures; and an alarm rule that the own mounts trip and clear.
//
// Faults, for --duration: every --kill-every one replica is SIGKILLed and
// started again at once (in turn); at --redis-at of the run a Redis
// master fails over (SIGKILL of its process, or a manual failover); at
// --pg-at PostgreSQL restarts (pg_ctl restart of the primary).
//
// Then it reconciles from outside, through the API: every acknowledged
// report's entries in the mount's history and in one STATES_REPORTED of
// the feed; every feed event once in each subscription, none missing;
// every webhook event delivered at least once; the job and the rollout
// finished; no alarm raised twice for one episode and each own mount's
// alarm state matching its battery; no command ISSUED past its TTL; no
// 500 answered. It prints a table (or --json) and exits 1 when a count
// that must be 0 is not.
//
// run.sh builds mountd, mountsim and soak from this checkout and runs it
// under scripts/test-services.sh.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mountd/mountd/client"
)

type config struct {
	Root, Mountd, Mountsim, Dir                string
	Duration, KillEvery, HealthWindow, Settle  time.Duration
	Mounts, RolloutMounts, OwnMounts           int
	Phones, RolloutPhones                      int
	PassEvery, RolloutPassEvery                time.Duration
	ReportInterval, OwnInterval                time.Duration
	Subscribers, FullSubscribers, Watch        int
	Followers                                  int
	RedisAt, PGAt, JobAt, RolloutAt            float64
	RedisFault, PGMode                         string
	ReadReplica                                bool
	JSON                                       bool
	adminURL, clusterURL, nginx, pgBin, pgData string
	readURL                                    string
}

func main() {
	var cfg config
	root, _ := filepath.Abs(filepath.Join(filepath.Dir(os.Args[0]), ".."))
	flag.StringVar(&cfg.Root, "root", root, "the mountd checkout (for deploy/nginx/mountd.conf)")
	flag.StringVar(&cfg.Mountd, "mountd", "mountd", "the mountd binary")
	flag.StringVar(&cfg.Mountsim, "mountsim", "mountsim", "the mountsim binary")
	flag.StringVar(&cfg.Dir, "dir", filepath.Join(os.TempDir(), "soak"), "where the run's logs go (a directory per run)")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Minute, "how long the load and the faults run")
	flag.DurationVar(&cfg.KillEvery, "kill-every", 0, "SIGKILL a replica this often (0: a tenth of --duration, at least 15s)")
	flag.DurationVar(&cfg.HealthWindow, "health-window", 0, "the rollout's healthWindow (0: a thirtieth of --duration, at least 5s)")
	flag.DurationVar(&cfg.Settle, "settle", 3*time.Minute, "after the load, wait this long at most for deliveries, the job and the rollout")
	flag.IntVar(&cfg.Mounts, "mounts", 2000, "mountsim mounts in all")
	flag.IntVar(&cfg.RolloutMounts, "rollout-mounts", 100, "of them, the fleet the job and the rollout target (its own model and phones)")
	flag.IntVar(&cfg.OwnMounts, "own-mounts", 200, "mounts the tool reports for itself, keeping what was acknowledged")
	flag.IntVar(&cfg.Phones, "phones", 5, "phones passing the reporting fleet")
	flag.IntVar(&cfg.RolloutPhones, "rollout-phones", 10, "phones passing the job's and rollout's fleet")
	flag.DurationVar(&cfg.PassEvery, "pass-every", 5*time.Second, "mean time between two passes of a phone of the reporting fleet")
	flag.DurationVar(&cfg.RolloutPassEvery, "rollout-pass-every", time.Second, "mean time between two passes of a phone of the rollout fleet")
	flag.DurationVar(&cfg.ReportInterval, "report-interval", 30*time.Second, "mountsim's --report-interval")
	flag.DurationVar(&cfg.OwnInterval, "own-interval", 10*time.Second, "time between two reports of an own mount")
	flag.IntVar(&cfg.Subscribers, "subscribers", 200, "GraphQL subscribers (consoles)")
	flag.IntVar(&cfg.FullSubscribers, "full-subscribers", 10, "of them, those on every mount (mountEvents without uids); the others watch --watch mounts each")
	flag.IntVar(&cfg.Watch, "watch", 20, "mounts a partial subscriber watches (own and simulated mounts)")
	flag.IntVar(&cfg.Followers, "followers", 2, "clients following GET /events with long polls")
	flag.Float64Var(&cfg.RedisAt, "redis-at", 0.4, "when in the run (0 to 1) a Redis master fails over; negative: never")
	flag.Float64Var(&cfg.PGAt, "pg-at", 0.7, "when in the run (0 to 1) PostgreSQL restarts; negative: never")
	flag.Float64Var(&cfg.JobAt, "job-at", 0.35, "when in the run (0 to 1) the job is created")
	flag.Float64Var(&cfg.RolloutAt, "rollout-at", 0.6, "when in the run (0 to 1) the rollout is created")
	flag.StringVar(&cfg.RedisFault, "redis-fault", "kill", "kill (SIGKILL the master) or failover (CLUSTER FAILOVER on its replica)")
	flag.StringVar(&cfg.PGMode, "pg-mode", "fast", "pg_ctl restart's shutdown mode: fast or immediate (a crash and recovery)")
	flag.BoolVar(&cfg.ReadReplica, "read-replica", os.Getenv("MOUNTD_TEST_DATABASE_READ_URL") != "",
		"give the replicas MOUNTD_DATABASE_READ_URL (the run's database on MOUNTD_TEST_DATABASE_READ_URL's server)")
	flag.BoolVar(&cfg.JSON, "json", false, "print the summary as JSON")
	flag.Parse()
	cfg.adminURL, cfg.clusterURL = os.Getenv("MOUNTD_TEST_DATABASE_URL"), os.Getenv("MOUNTD_TEST_REDIS_CLUSTER_URL")
	cfg.nginx, cfg.pgBin, cfg.pgData = os.Getenv("MOUNTD_TEST_NGINX"), os.Getenv("MOUNTD_TEST_PG_BIN"), os.Getenv("MOUNTD_TEST_PG_DATA")
	cfg.readURL = os.Getenv("MOUNTD_TEST_DATABASE_READ_URL")
	if cfg.KillEvery == 0 {
		cfg.KillEvery = max(cfg.Duration/10, 15*time.Second)
	}
	if cfg.HealthWindow == 0 {
		cfg.HealthWindow = max(cfg.Duration/30, 5*time.Second).Round(time.Second)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak %s: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func (cfg config) check() error {
	switch {
	case cfg.adminURL == "" || cfg.clusterURL == "" || cfg.nginx == "":
		return errors.New("MOUNTD_TEST_DATABASE_URL, MOUNTD_TEST_REDIS_CLUSTER_URL and MOUNTD_TEST_NGINX: run it under scripts/test-services.sh (run.sh does)")
	case cfg.PGAt >= 0 && (cfg.pgBin == "" || cfg.pgData == ""):
		return errors.New("MOUNTD_TEST_PG_DATA and MOUNTD_TEST_PG_BIN (scripts/test-services.sh), or --pg-at -1")
	case cfg.ReadReplica && cfg.readURL == "":
		return errors.New("--read-replica needs MOUNTD_TEST_DATABASE_READ_URL")
	case cfg.Duration < 30*time.Second:
		return errors.New("--duration at least 30s")
	case cfg.Mounts <= cfg.RolloutMounts || cfg.RolloutMounts < 10 || cfg.Mounts > 60000:
		return errors.New("--rollout-mounts at least 10, below --mounts (at most 60,000)")
	case cfg.OwnMounts < 1 || cfg.OwnMounts > 1000:
		return errors.New("--own-mounts 1 to 1,000 (the alarm rule names them)")
	case cfg.Subscribers < 0 || cfg.FullSubscribers > cfg.Subscribers || cfg.Watch < 1 || cfg.Followers < 0:
		return errors.New("--subscribers at least --full-subscribers, --watch at least 1, --followers at least 0")
	case cfg.JobAt < 0 || cfg.JobAt >= 1 || cfg.RolloutAt < 0 || cfg.RolloutAt >= 1:
		return errors.New("--job-at and --rollout-at from 0 to below 1")
	case cfg.PGMode != "fast" && cfg.PGMode != "immediate":
		return errors.New("--pg-mode fast or immediate")
	}
	return nil
}

// deployment is what run starts.
type deployment struct {
	cfg        config
	dir        string
	base       string // nginx's https address
	certFile   string
	hc         *http.Client
	api        *client.Client
	replicas   []*replica
	env        []string // the replicas' (and the admin commands') settings
	clientID   string
	secret     string
	statuses   statusCounts
	faults     []faultRow
	faultsMu   sync.Mutex
	modelB     string
	uidsA      []string
	uidsB      []string
	uidsOwn    []string
	readerNote string
}

// faultRow is one fault as it happened.
type faultRow struct {
	AtSeconds float64 `json:"atSeconds"`
	What      string  `json:"what"`
	Seconds   float64 `json:"seconds"` // until the replica was ready again, the replica master, PostgreSQL up
	Error     string  `json:"error,omitempty"`
}

func (d *deployment) fault(at time.Duration, what string, took time.Duration, err error) {
	row := faultRow{AtSeconds: at.Round(100 * time.Millisecond).Seconds(), What: what, Seconds: took.Round(10 * time.Millisecond).Seconds()}
	if err != nil {
		row.Error = err.Error()
	}
	logf("fault at %.0f s: %s (%.1f s)%s", row.AtSeconds, what, row.Seconds, map[bool]string{true: ": " + row.Error}[err != nil])
	d.faultsMu.Lock()
	d.faults = append(d.faults, row)
	d.faultsMu.Unlock()
}

func run(ctx context.Context, cfg config, out io.Writer) (bool, error) {
	if err := cfg.check(); err != nil {
		return false, err
	}
	runID := strconv.FormatInt(time.Now().Unix()%1e8, 36)
	d := &deployment{cfg: cfg, dir: filepath.Join(cfg.Dir, runID)}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return false, err
	}
	logf("run %s: logs in %s", runID, d.dir)
	dbName := "soak_" + runID
	dbURL, err := createDatabase(ctx, cfg.adminURL, dbName)
	if err != nil {
		return false, err
	}

	// nginx first: the replicas' public URL (token issuer, download links) is its.
	certFile, keyFile, pool, err := selfSigned(d.dir, 24*time.Hour)
	if err != nil {
		return false, err
	}
	d.certFile = certFile
	addrs := make([]string, 5)
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return false, err
		}
	}
	httpsAddr, httpAddr := addrs[3], addrs[4]
	conf, err := nginxConf(cfg.Root, addrs[:3], httpAddr, httpsAddr, certFile, keyFile)
	if err != nil {
		return false, err
	}
	nginxDir := filepath.Join(d.dir, "nginx")
	if err := os.MkdirAll(nginxDir, 0o755); err != nil {
		return false, err
	}
	nginx, err := startNginx(ctx, cfg.nginx, nginxDir, conf, httpsAddr)
	if err != nil {
		return false, err
	}
	defer stopNginx(nginx)
	d.base = "https://" + httpsAddr

	d.env = []string{"MOUNTD_DATABASE_URL=" + dbURL, "MOUNTD_REDIS_CLUSTER_URL=" + cfg.clusterURL, "MOUNTD_REDIS_PREFIX=soak" + runID + ":",
		"MOUNTD_MASTER_KEY=" + strings.Repeat("5a", 32), "MOUNTD_PUBLIC_URL=" + d.base, "MOUNTD_PROJECT_ID=mountd", "MOUNTD_IDP_NAME=mountd",
		"MOUNTD_LOG_LEVEL=warn", "MOUNTD_DATA_DIR=" + filepath.Join(d.dir, "data"), "MOUNTD_TRUSTED_PROXIES=127.0.0.1",
		"MOUNTD_RATE_LIMIT=1000000/m", "MOUNTD_TOKEN_TTL=12h", "MOUNTD_WEBHOOK_ALLOW_PRIVATE=true"}
	if cfg.ReadReplica {
		readURL, err := withDatabase(cfg.readURL, dbName)
		if err != nil {
			return false, err
		}
		d.env = append(d.env, "MOUNTD_DATABASE_READ_URL="+readURL)
		d.readerNote = "replicas read from " + readURL
	}
	// The replicas share one data directory: the firmware images published
	// to the local disk are then served by any of them.
	if err := os.MkdirAll(filepath.Join(d.dir, "data"), 0o700); err != nil {
		return false, err
	}
	for i := range 3 {
		d.replicas = append(d.replicas, &replica{n: i, bin: cfg.Mountd, addr: addrs[i], env: d.env,
			logPath: filepath.Join(d.dir, fmt.Sprintf("mountd-%d.log", i))})
	}
	// The first migrates the new database alone; then the others.
	for i, r := range d.replicas {
		if err := r.start(); err != nil {
			return false, err
		}
		if i == 0 {
			if err := r.ready(ctx, 2*time.Minute); err != nil {
				return false, err
			}
		}
	}
	superCtx, stopSupervisors := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		stopSupervisors()
		for _, r := range d.replicas {
			r.stop()
		}
	}()
	for _, r := range d.replicas {
		if err := r.ready(ctx, 2*time.Minute); err != nil {
			return false, err
		}
		go r.supervise(superCtx)
	}
	logf("3 replicas on %v behind nginx %s; %s", addrs[:3], d.base, d.readerNote)

	var acct struct {
		ClientID     string `json:"clientId"`
		ClientSecret string `json:"clientSecret"`
	}
	raw, err := d.admin(ctx, "accounts", "create", "--name", "soak "+runID, "--json")
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(raw, &acct); err != nil {
		return false, fmt.Errorf("accounts create: %w: %s", err, raw)
	}
	d.clientID, d.secret = acct.ClientID, acct.ClientSecret
	// HTTP/1.1 only: the WebSockets share the client.
	d.hc = &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: 256}}
	d.api = d.newClient()

	rep, err := d.soak(ctx, runID)
	if err != nil {
		return false, err
	}
	rep.Command = strings.Join(os.Args, " ")
	rep.LogDir = d.dir
	failed := rep.failed()
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return failed, enc.Encode(rep)
	}
	rep.print(out)
	return failed, nil
}

// newClient is an API client through nginx with a token of its own (a
// token may hold 10 sockets: each console has its own, as people do).
func (d *deployment) newClient() *client.Client {
	return client.New(d.base, client.CredentialsSource(client.ClientCredentials(d.base, d.clientID, d.secret,
		[]string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}), d.hc), client.Options{HTTPClient: d.hc})
}

// admin runs a mountd admin command with the replicas' settings.
func (d *deployment) admin(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.cfg.Mountd, args...)
	cmd.Env = append(os.Environ(), d.env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("mountd %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out, nil
}
