// Command fanoutbench measures mountd's subscription fan-out against a
// running server: N graphql-transport-ws subscribers to one mount's
// mountStateChanged, the server's memory per idle subscriber, and the time
// from each POST /states response to its delivery at every subscriber. In
// the same run it sends the same payload through NATS and MQTT (Mosquitto)
// to as many subscribers, one connection each, and prints mountd's figures
// as ratios to theirs. Every target must be on 127.0.0.1.
//
//	fanoutbench --base http://127.0.0.1:8080 --mountd-pid $PID \
//	    --mountd-bin bin/mountd --data-dir ./data
//
// cmd/fanoutbench/run.sh builds and starts mountd and runs it; the figures
// are in bench/fanout.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/internal/version"
)

type config struct {
	base                     string
	mountdBin                string
	dataDir, databaseURL     string
	masterKey                string
	clientID, clientSecret   string
	mountdPid                int
	gcURL                    string
	label                    string
	subscribers, reports     int
	interval, drain, settle  time.Duration
	primeTimeout, timeout    time.Duration
	concurrency              int
	systems                  []string
	natsURL, mqttURL         string
	natsPid, mqttPid         int
	payloadBytes             int
	query                    string
	distinct                 bool
	distinctSelections       bool
	jsonOut                  string
	targetP99Ms, targetIdleK float64
	loadMax                  float64
	loadWait                 time.Duration
	retries                  int
	maxOtherCPU              float64
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	var systems string
	fs := flag.NewFlagSet("fanoutbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&c.base, "base", "http://127.0.0.1:8080", "base URL of the running mountd (loopback only)")
	fs.StringVar(&c.mountdBin, "mountd-bin", "", "mountd binary to run `accounts create` with (needs the server's --data-dir/--database-url)")
	fs.StringVar(&c.dataDir, "data-dir", "", "the server's --data-dir, passed to `mountd accounts create`")
	fs.StringVar(&c.databaseURL, "database-url", "", "the server's --database-url, passed to `mountd accounts create`")
	fs.StringVar(&c.masterKey, "master-key", "", "the server's --master-key, passed to `mountd accounts create` (default: the one in the data dir)")
	fs.StringVar(&c.clientID, "client-id", "", "client id of an existing account (instead of --mountd-bin)")
	fs.StringVar(&c.clientSecret, "client-secret", "", "its client secret")
	fs.IntVar(&c.mountdPid, "mountd-pid", 0, "pid of the mountd process, for VmRSS and CPU time (0: memory not measured)")
	fs.StringVar(&c.gcURL, "gc-url", "", "GET before each memory reading of mountd so that it counts only what is live (a build with -tags pprof: http://MOUNTD_PPROF_LISTEN/debug/freeosmemory)")
	fs.StringVar(&c.label, "label", "", "name of the server configuration, for the report (embedded, postgres+redis)")
	fs.IntVar(&c.subscribers, "subscribers", 1000, "concurrent subscribers, one socket each (1..20000)")
	fs.IntVar(&c.reports, "reports", 200, "measured messages (state reports), sent one at a time (1..10000)")
	fs.DurationVar(&c.interval, "interval", 20*time.Millisecond, "spacing of the measured messages (start to start)")
	fs.DurationVar(&c.drain, "drain", 10*time.Second, "how long to wait for late deliveries after the last message")
	fs.DurationVar(&c.settle, "settle", 5*time.Second, "idle time between the last subscription and the memory reading")
	fs.DurationVar(&c.primeTimeout, "prime-timeout", 60*time.Second, "limit for every subscriber to receive a priming message")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Minute, "limit for the whole run, waits for --load-max included")
	fs.IntVar(&c.concurrency, "connect-concurrency", 32, "sockets opened at once")
	fs.StringVar(&systems, "systems", "mountd,nats,mqtt", "what to measure, in order: mountd, nats, mqtt")
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server to compare with")
	fs.StringVar(&c.mqttURL, "mqtt-url", "tcp://127.0.0.1:1883", "MQTT broker (Mosquitto) to compare with")
	fs.IntVar(&c.natsPid, "nats-pid", 0, "pid of nats-server for its memory (0: the process named nats-server, if any)")
	fs.IntVar(&c.mqttPid, "mqtt-pid", 0, "pid of the MQTT broker for its memory (0: the process named mosquitto, if any)")
	fs.IntVar(&c.payloadBytes, "payload-bytes", 600, "broker payload size when mountd is not measured (otherwise mountd's own `next` message)")
	fs.StringVar(&c.query, "query", defaultQuery, "subscription document; its first occurredAt must be states[0].occurredAt")
	fs.BoolVar(&c.distinct, "distinct", false, "give every subscriber its own operation text (a comment): mountd shares one execution per selection, so they still share")
	fs.BoolVar(&c.distinctSelections, "distinct-selections", false, "give every subscriber a selection of its own (an aliased __typename), so mountd cannot share executions: the worst case")
	fs.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to this file")
	fs.Float64Var(&c.loadMax, "load-max", 0, "before each system, wait until the 1-min load average is below this and the CPUs are ≥ 75% idle over 2s (0: do not wait)")
	fs.DurationVar(&c.loadWait, "load-wait", 10*time.Minute, "longest wait for --load-max, in 10s steps; then measure anyway")
	fs.IntVar(&c.retries, "retries", 2, "send the measured messages again, at most this often, when other processes disturbed them")
	fs.Float64Var(&c.maxOtherCPU, "max-other-cpu", 0.25, "disturbed: other processes used more than this many CPUs on average during the messages")
	fs.Float64Var(&c.targetP99Ms, "target-p99-ms", 50, "goal for mountd's p99 from the POST response, milliseconds")
	fs.Float64Var(&c.targetIdleK, "target-idle-kib", 64, "goal for mountd's memory per idle subscriber, KiB")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, "fanoutbench version", version.String())
		return c, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for _, s := range strings.Split(systems, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case "mountd", "nats", "mqtt":
			c.systems = append(c.systems, s)
		case "":
		default:
			return c, fmt.Errorf("--systems: unknown %q (mountd, nats, mqtt)", s)
		}
	}
	switch {
	case c.subscribers < 1 || c.subscribers > 20000:
		return c, errors.New("--subscribers must be 1..20000")
	case c.reports < 1 || c.reports > 10000:
		return c, errors.New("--reports must be 1..10000")
	case c.interval < time.Millisecond || c.interval > 10*time.Second:
		return c, errors.New("--interval must be 1ms..10s")
	case c.loadWait > time.Hour || c.loadMax < 0 || c.retries < 0 || c.retries > 10:
		return c, errors.New("--load-wait ≤ 1h, --load-max ≥ 0, --retries 0..10")
	case c.drain > time.Minute || c.settle > 5*time.Minute || c.primeTimeout > 5*time.Minute || c.timeout > 2*time.Hour:
		return c, errors.New("--drain ≤ 1m, --settle ≤ 5m, --prime-timeout ≤ 5m, --timeout ≤ 2h")
	case c.concurrency < 1 || c.concurrency > 512:
		return c, errors.New("--connect-concurrency must be 1..512")
	case c.payloadBytes < 64 || c.payloadBytes > 1<<20:
		return c, errors.New("--payload-bytes must be 64..1MiB")
	}
	for _, u := range []string{c.base, c.natsURL, c.mqttURL} {
		if err := mustLoopback(u); err != nil {
			return c, err
		}
	}
	c.base = strings.TrimRight(c.base, "/")
	if slices.Contains(c.systems, "mountd") && c.clientID == "" && c.mountdBin == "" {
		return c, errors.New("give --mountd-bin (with --data-dir/--database-url) or --client-id and --client-secret")
	}
	return c, nil
}

// system is one fan-out under test.
type system interface {
	Name() string
	// Connect opens n subscribers, one connection each, that pass every
	// message with its arrival time to deliver; it returns once each has
	// asked for its subscription.
	Connect(ctx context.Context, n int, deliver func(sub int, msg []byte, at int64), now func() int64) error
	// Publish sends the message whose key is ms and returns on the
	// publisher's acknowledgement.
	Publish(ctx context.Context, ms int64) error
	// Ended counts subscribers the server disconnected or ended.
	Ended() int
	LastError() string
	Close()
}

// Memory is a process's memory before the subscribers connect and once
// they are all subscribed and idle.
type Memory struct {
	Pid                int     `json:"pid"`
	RSSBefore          int64   `json:"rssBeforeBytes"`
	RSSIdle            int64   `json:"rssIdleBytes"`
	PerSubscriberBytes float64 `json:"perSubscriberBytes"`
	// RSSAfter is read after the measured messages, the subscribers still
	// connected: buffers the traffic touched are resident by then.
	RSSAfter                int64   `json:"rssAfterTrafficBytes"`
	AfterPerSubscriberBytes float64 `json:"afterTrafficPerSubscriberBytes"`
	// Go runtime gauges from /metrics (mountd only): before, idle, and the
	// difference per subscriber.
	Runtime map[string][3]float64 `json:"runtime,omitempty"`
	// RuntimeAfter: the same gauges after the measured messages.
	RuntimeAfter []string `json:"runtimeAfterTraffic,omitempty"`
}

// Phase is the measurement of one system.
type Phase struct {
	System         string  `json:"system"`
	Target         string  `json:"target"`
	PayloadBytes   int     `json:"payloadBytes"`
	ConnectSeconds float64 `json:"connectSeconds"`
	PrimeMessages  int     `json:"primeMessages"`
	Memory         *Memory `json:"memory,omitempty"`
	// CPU time during the measured messages (and the drain).
	ServerCPUSeconds float64 `json:"serverCpuSeconds"`
	ClientCPUSeconds float64 `json:"clientCpuSeconds"`
	// OtherCPUSeconds is what every other process on the machine used in
	// the window: interference from the shared machine.
	OtherCPUSeconds float64 `json:"otherCpuSeconds"`
	// OtherProcesses are the busiest of them (for postgres+redis, the
	// database and Redis of the server under test are among them).
	OtherProcesses []ProcCPU `json:"otherProcesses,omitempty"`
	WindowSeconds  float64   `json:"windowSeconds"`
	// QuietWaitSeconds is how long the phase waited for a quiet machine.
	QuietWaitSeconds float64 `json:"quietWaitSeconds"`
	Latency          Latency `json:"latency"`
	// Attempts lists every sending of the messages; Latency and the CPU
	// figures are the last one's.
	Attempts   []Attempt `json:"attempts"`
	Ended      int       `json:"endedSubscribers"`
	LastError  string    `json:"lastError,omitempty"`
	LoadBefore string    `json:"loadBefore"`
	LoadAfter  string    `json:"loadAfter"`
	Error      string    `json:"error,omitempty"`
}

// Ratio is mountd's figure divided by a broker's.
type Ratio struct {
	Broker         string  `json:"broker"`
	P99FromAck     float64 `json:"p99FromAck"`
	P99FromSend    float64 `json:"p99FromSend"`
	P50FromSend    float64 `json:"p50FromSend"`
	IdleMemory     float64 `json:"idleMemoryPerSubscriber,omitempty"`
	CPUPerDelivery float64 `json:"serverCpuPerDelivery,omitempty"`
}

// Result is the whole run.
type Result struct {
	Label       string    `json:"label,omitempty"`
	Started     time.Time `json:"started"`
	Host        string    `json:"host"`
	CPUs        int       `json:"cpus"`
	Subscribers int       `json:"subscribers"`
	Reports     int       `json:"reports"`
	Interval    string    `json:"interval"`
	Query       string    `json:"query"`
	// Operations says how the subscribers' operations differ: "shared"
	// (all equal), "distinct-texts" (--distinct), "distinct-selections".
	Operations   string  `json:"operations"`
	LoadAtStart  string  `json:"loadAtStart"`
	LoadAtEnd    string  `json:"loadAtEnd"`
	Phases       []Phase `json:"phases"`
	Ratios       []Ratio `json:"ratios"`
	MeetsP99     *bool   `json:"meetsP99Target,omitempty"`
	MeetsMemory  *bool   `json:"meetsMemoryTarget,omitempty"`
	TargetP99Ms  float64 `json:"targetP99Ms"`
	TargetIdleKB float64 `json:"targetIdleKiB"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanoutbench:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	res, err := run(ctx, cfg, os.Stdout)
	if cfg.jsonOut != "" && res != nil {
		raw, _ := json.MarshalIndent(res, "", "  ")
		if werr := os.WriteFile(cfg.jsonOut, append(raw, '\n'), 0o644); werr != nil {
			fmt.Fprintln(os.Stderr, "fanoutbench:", werr)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fanoutbench:", err)
		os.Exit(1)
	}
}

func logf(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// keyBase is the key of a phase's message 0: two minutes ago to the
// millisecond, so that every key (priming ones below it, measured ones
// above) is a valid, unique, non-future occurredAt for mountd.
func keyBase() int64 { return time.Now().Add(-2 * time.Minute).Truncate(time.Second).UnixMilli() }

// operations names how the subscribers' operations differ.
func (c config) operations() string {
	switch {
	case c.distinctSelections:
		return "distinct-selections"
	case c.distinct:
		return "distinct-texts"
	}
	return "shared"
}

func run(ctx context.Context, cfg config, out io.Writer) (*Result, error) {
	host, _ := os.Hostname()
	res := &Result{Label: cfg.label, Started: time.Now().UTC(), Host: host, CPUs: cpuCount(),
		Subscribers: cfg.subscribers, Reports: cfg.reports, Interval: cfg.interval.String(), Query: cfg.query, Operations: cfg.operations(),
		LoadAtStart: loadAvg(), TargetP99Ms: cfg.targetP99Ms, TargetIdleKB: cfg.targetIdleK}
	logf(out, "fanoutbench: %d subscribers, %d messages every %s; load average %s; %d CPUs",
		cfg.subscribers, cfg.reports, cfg.interval, res.LoadAtStart, res.CPUs)

	var tpl payloadTemplate
	runID := time.Now().UnixNano()
	var ws *wsSystem
	if slices.Contains(cfg.systems, "mountd") {
		api := &mountdClient{base: cfg.base, http: &http.Client{Timeout: 30 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, uid: fmt.Sprintf("fanout-%d", runID)}
		creds := credentials{ClientID: cfg.clientID, ClientSecret: cfg.clientSecret}
		if creds.ClientID == "" {
			var global []string
			for _, f := range [][2]string{{"--data-dir", cfg.dataDir}, {"--database-url", cfg.databaseURL}, {"--master-key", cfg.masterKey}} {
				if f[1] != "" {
					global = append(global, f[0], f[1])
				}
			}
			global = append(global, "--log-level", "warn")
			c, err := createAccount(ctx, cfg.mountdBin, global, fmt.Sprintf("fanoutbench %d", runID))
			if err != nil {
				return res, err
			}
			creds = c
		}
		// One more socket than subscribers: the warm-up's.
		if err := api.fetchTokens(ctx, creds, cfg.subscribers+1); err != nil {
			return res, err
		}
		if err := api.createMount(ctx); err != nil {
			return res, err
		}
		ws = newWSSystem(api, cfg.query, cfg.concurrency, cfg.distinct, cfg.distinctSelections)
		// Warm-up: one subscription and one event, so the server's lazy
		// start-up (schema, query cache, pools) is not counted per subscriber.
		raw, err := ws.captureTemplate(ctx, keyBase()-60_000)
		if err != nil {
			return res, fmt.Errorf("warm-up subscription: %w", err)
		}
		if tpl, err = newTemplate(raw); err != nil {
			return res, err
		}
		logf(out, "mount %s; a `next` message is %d bytes: %s", api.uid, len(raw), truncate(raw, 240))
		if err := benchstat.Sleep(ctx, 2*time.Second); err != nil {
			return res, err
		}
	} else {
		var err error
		if tpl, err = syntheticTemplate(cfg.payloadBytes); err != nil {
			return res, err
		}
	}

	var firstErr error
	for _, name := range cfg.systems {
		var sys system
		var target string
		pid := 0
		switch name {
		case "mountd":
			sys, target, pid = ws, cfg.base, cfg.mountdPid
		case "nats":
			sys, target = &natsSystem{url: cfg.natsURL, subject: fmt.Sprintf("fanoutbench.%d.mount", runID), tpl: tpl,
				concurrency: cfg.concurrency}, cfg.natsURL
			pid = cfg.natsPid
			if pid == 0 {
				pid = findPid("nats-server")
			}
		case "mqtt":
			sys, target = &mqttSystem{url: cfg.mqttURL, topic: fmt.Sprintf("fanoutbench/%d/mount", runID),
				clientPrefix: fmt.Sprintf("fob-%d-", runID), tpl: tpl, concurrency: cfg.concurrency}, cfg.mqttURL
			pid = cfg.mqttPid
			if pid == 0 {
				pid = findPid("mosquitto")
			}
		}
		metricsURL := ""
		if name == "mountd" {
			metricsURL = cfg.base + "/metrics"
		}
		waited := waitQuiet(ctx, cfg, out)
		logf(out, "%s (%s): connecting %d subscribers; load average %s", name, target, cfg.subscribers, loadAvg())
		ph, err := measure(ctx, cfg, sys, pid, metricsURL, out)
		ph.QuietWaitSeconds += waited // measure adds its own waits
		ph.Target, ph.PayloadBytes = target, len(tpl.raw)
		if err != nil {
			ph.Error = err.Error()
			logf(out, "%s: %v", name, err)
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", name, err)
			}
		}
		res.Phases = append(res.Phases, ph)
		printPhase(out, ph)
		if ctx.Err() != nil {
			break
		}
		// Let the closed sockets' work finish before the next system.
		_ = benchstat.Sleep(ctx, 2*time.Second)
	}
	res.LoadAtEnd = loadAvg()
	summarise(res, cfg, out)
	return res, firstErr
}

// measure runs one system: connect, prime, idle memory, measured messages.
func measure(ctx context.Context, cfg config, sys system, pid int, metricsURL string, out io.Writer) (ph Phase, err error) {
	ph = Phase{System: sys.Name(), LoadBefore: loadAvg()}
	defer func() { ph.LoadAfter = loadAvg() }()
	n, m := cfg.subscribers, cfg.reports
	baseMs := keyBase()
	rec := newRecorder(n, m, baseMs)
	var cur atomic.Pointer[recorder]
	cur.Store(rec)
	deliver := func(sub int, msg []byte, at int64) { cur.Load().deliver(sub, msg, at) }
	metricsClient := &http.Client{Timeout: 10 * time.Second}
	gauges := []string{"go_memstats_heap_inuse_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines",
		"go_memstats_sys_bytes", "go_memstats_heap_objects", "process_resident_memory_bytes"}
	var before map[string]float64
	collect := func() {
		if cfg.gcURL == "" || metricsURL == "" { // only mountd has both
			return
		}
		if resp, err := metricsClient.Get(cfg.gcURL); err == nil {
			resp.Body.Close()
		}
	}
	if pid > 0 {
		ph.Memory = &Memory{Pid: pid}
		collect()
		if metricsURL != "" {
			before, _ = promSample(ctx, metricsClient, metricsURL, gauges...)
		}
		rss, err := rssBytes(pid)
		if err != nil {
			return ph, err
		}
		ph.Memory.RSSBefore = rss
	}

	t0 := time.Now()
	err = sys.Connect(ctx, n, deliver, now)
	defer sys.Close()
	ph.ConnectSeconds = round3(time.Since(t0).Seconds())
	if err != nil {
		return ph, fmt.Errorf("connect: %w", err)
	}
	logf(out, "%s: %d sockets open in %.1fs; priming", sys.Name(), n, ph.ConnectSeconds)

	// Priming: publish below-base keys until every subscriber got one, so
	// that every subscription is live on the server before anything counts.
	deadline := time.Now().Add(cfg.primeTimeout)
	for k := int64(1); rec.primedCount.Load() < int64(n); k++ {
		if time.Now().After(deadline) {
			return ph, fmt.Errorf("after %s only %d of %d subscribers received a priming message (ended %d: %s)",
				cfg.primeTimeout, rec.primedCount.Load(), n, sys.Ended(), sys.LastError())
		}
		if err := sys.Publish(ctx, baseMs-k); err != nil {
			return ph, fmt.Errorf("priming: %w", err)
		}
		ph.PrimeMessages++
		for w := 0; w < 50 && rec.primedCount.Load() < int64(n); w++ {
			if err := benchstat.Sleep(ctx, 10*time.Millisecond); err != nil {
				return ph, err
			}
		}
	}
	logf(out, "%s: all %d subscribed (%d priming messages); idle for %s", sys.Name(), n, ph.PrimeMessages, cfg.settle)
	if err := benchstat.Sleep(ctx, cfg.settle); err != nil {
		return ph, err
	}
	if ph.Memory != nil {
		collect()
		rss, err := rssBytes(pid)
		if err != nil {
			return ph, err
		}
		ph.Memory.RSSIdle = rss
		ph.Memory.PerSubscriberBytes = math.Round(float64(rss-ph.Memory.RSSBefore) / float64(n))
		if before != nil {
			if idle, err := promSample(ctx, metricsClient, metricsURL, gauges...); err == nil {
				ph.Memory.Runtime = map[string][3]float64{}
				for _, g := range gauges {
					b, ok1 := before[g]
					a, ok2 := idle[g]
					if ok1 && ok2 {
						ph.Memory.Runtime[g] = [3]float64{b, a, math.Round((a-b)/float64(n)*10) / 10}
					}
				}
			}
		}
	}

	// The measured messages; when other processes took more than
	// --max-other-cpu of the machine meanwhile, wait for quiet and send
	// them again (the subscribers stay connected).
	for attempt := 1; ; attempt++ {
		ph.QuietWaitSeconds += waitQuiet(ctx, cfg, out)
		if ctx.Err() != nil {
			return ph, ctx.Err()
		}
		baseMs = max(keyBase(), baseMs+int64(m)+1000)
		rec = newRecorder(n, m, baseMs)
		cur.Store(rec)
		att, err := window(ctx, cfg, sys, rec, pid, out)
		ph.Attempts = append(ph.Attempts, att)
		ph.WindowSeconds, ph.ServerCPUSeconds, ph.ClientCPUSeconds = att.WindowSeconds, att.ServerCPUSeconds, att.ClientCPUSeconds
		ph.OtherCPUSeconds, ph.OtherProcesses = att.OtherCPUSeconds, att.OtherProcesses
		if err != nil {
			ph.Latency = rec.latency()
			return ph, err
		}
		if !att.Disturbed || attempt > cfg.retries {
			break
		}
		logf(out, "%s: other processes used %.1f CPU-s in the %.1fs window (%s): sending the messages again",
			sys.Name(), att.OtherCPUSeconds, att.WindowSeconds, procList(att.OtherProcesses))
	}
	ph.Latency = rec.latency()
	ph.Ended, ph.LastError = sys.Ended(), sys.LastError()
	if ph.Memory != nil {
		if rss, err := rssBytes(pid); err == nil {
			ph.Memory.RSSAfter = rss
			ph.Memory.AfterPerSubscriberBytes = math.Round(float64(rss-ph.Memory.RSSBefore) / float64(n))
		}
		if metricsURL != "" && ph.Memory.Runtime != nil {
			if after, err := promSample(ctx, metricsClient, metricsURL, gauges...); err == nil {
				for g, v := range ph.Memory.Runtime {
					if a, ok := after[g]; ok {
						ph.Memory.RuntimeAfter = append(ph.Memory.RuntimeAfter, fmt.Sprintf("%s %.0f (%.1f per subscriber over before)", g, a, (a-v[0])/float64(n)))
					}
				}
				slices.Sort(ph.Memory.RuntimeAfter)
			}
		}
	}
	return ph, nil
}

// Attempt is one sending of the measured messages.
type Attempt struct {
	WindowSeconds    float64   `json:"windowSeconds"`
	ServerCPUSeconds float64   `json:"serverCpuSeconds"`
	ClientCPUSeconds float64   `json:"clientCpuSeconds"`
	OtherCPUSeconds  float64   `json:"otherCpuSeconds"`
	OtherProcesses   []ProcCPU `json:"otherProcesses,omitempty"`
	LoadBefore       string    `json:"loadBefore"`
	P99FromAckMs     float64   `json:"p99FromAckMs"`
	Lost             int       `json:"lost"`
	// Disturbed: other processes used more than --max-other-cpu.
	Disturbed bool `json:"disturbed"`
}

// window sends the measured messages, spaced by --interval, and waits for
// their deliveries (at most --drain after the last).
func window(ctx context.Context, cfg config, sys system, rec *recorder, pid int, out io.Writer) (Attempt, error) {
	att := Attempt{LoadBefore: loadAvg()}
	n, m := rec.n, rec.m
	cpuServer0, _ := cpuSeconds(pid)
	cpuSelf0, _ := cpuSeconds(0)
	cpuAll0, _ := benchstat.MachineCPU()
	procs0 := snapshotProcs()
	w0 := time.Now()
	logf(out, "%s: sending %d messages; load average %s", sys.Name(), m, att.LoadBefore)
	var pubErr error
	for i := 0; i < m; i++ {
		if d := time.Until(w0.Add(time.Duration(i) * cfg.interval)); d > 0 {
			if err := benchstat.Sleep(ctx, d); err != nil {
				pubErr = err
				break
			}
		}
		rec.sendAt[i] = now()
		if err := sys.Publish(ctx, rec.baseMs+int64(i)); err != nil {
			pubErr = fmt.Errorf("message %d: %w", i, err)
			break
		}
		rec.ackAt[i] = now()
	}
	published := 0
	for _, a := range rec.ackAt {
		if a != 0 {
			published++
		}
	}
	drainEnd := time.Now().Add(cfg.drain)
	for rec.received() < published*n && time.Now().Before(drainEnd) {
		if benchstat.Sleep(ctx, 20*time.Millisecond) != nil {
			break
		}
	}
	att.WindowSeconds = round3(time.Since(w0).Seconds())
	if pid > 0 {
		if c, err := cpuSeconds(pid); err == nil {
			att.ServerCPUSeconds = round3(c - cpuServer0)
		}
	}
	if c, err := cpuSeconds(0); err == nil {
		att.ClientCPUSeconds = round3(c - cpuSelf0)
	}
	if c, err := benchstat.MachineCPU(); err == nil {
		att.OtherCPUSeconds = round3(max(0, c.Busy-cpuAll0.Busy-att.ServerCPUSeconds-att.ClientCPUSeconds))
	}
	att.OtherProcesses = busiest(procs0, snapshotProcs(), 6, pid, os.Getpid())
	att.Disturbed = att.OtherCPUSeconds > cfg.maxOtherCPU*att.WindowSeconds
	l := rec.latency()
	att.P99FromAckMs, att.Lost = l.FromAck.P99, l.Lost
	return att, pubErr
}

func procList(ps []ProcCPU) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = fmt.Sprintf("%s[%d] %.2fs", p.Comm, p.Pid, p.Seconds)
	}
	return strings.Join(parts, ", ")
}

// waitQuiet waits, at most --load-wait, until the 1-min load average is
// below --load-max and the machine's CPUs are at least 75% idle; it returns
// the seconds waited.
func waitQuiet(ctx context.Context, cfg config, out io.Writer) float64 {
	q := benchstat.Quiet{MaxLoad: cfg.loadMax, MaxBusy: 0.25, Timeout: cfg.loadWait}
	waited := q.Wait(ctx, func(format string, args ...any) { logf(out, format, args...) })
	return round3(waited.Seconds())
}

func summarise(res *Result, cfg config, out io.Writer) {
	var ours *Phase
	for i := range res.Phases {
		if res.Phases[i].System == "mountd" && res.Phases[i].Error == "" {
			ours = &res.Phases[i]
		}
	}
	if ours == nil {
		return
	}
	ok := ours.Latency.FromAck.P99 <= cfg.targetP99Ms && ours.Latency.Lost == 0
	res.MeetsP99 = &ok
	if ours.Memory != nil {
		okm := ours.Memory.PerSubscriberBytes <= cfg.targetIdleK*1024
		res.MeetsMemory = &okm
	}
	for _, b := range res.Phases {
		if b.System == "mountd" || b.Error != "" {
			continue
		}
		r := Ratio{Broker: b.System,
			P99FromAck:  ratio(ours.Latency.FromAck.P99, b.Latency.FromAck.P99),
			P99FromSend: ratio(ours.Latency.FromSend.P99, b.Latency.FromSend.P99),
			P50FromSend: ratio(ours.Latency.FromSend.P50, b.Latency.FromSend.P50)}
		// A long-running broker reuses memory earlier clients freed, so a
		// near-zero or negative ΔRSS says nothing per subscriber.
		if ours.Memory != nil && b.Memory != nil && b.Memory.PerSubscriberBytes >= 1024 {
			r.IdleMemory = ratio(ours.Memory.PerSubscriberBytes, b.Memory.PerSubscriberBytes)
		}
		if ours.ServerCPUSeconds > 0 && b.ServerCPUSeconds > 0 {
			r.CPUPerDelivery = ratio(ours.ServerCPUSeconds/float64(max(1, ours.Latency.Delivered)),
				b.ServerCPUSeconds/float64(max(1, b.Latency.Delivered)))
		}
		res.Ratios = append(res.Ratios, r)
	}
	fmt.Fprintf(out, "\n== mountd%s: %d subscribers, load %s → %s\n", labelSuffix(res.Label), res.Subscribers, res.LoadAtStart, res.LoadAtEnd)
	fmt.Fprintf(out, "p99 POST response → delivery: %.1f ms (goal ≤ %.0f ms, lost %d): %s\n",
		ours.Latency.FromAck.P99, cfg.targetP99Ms, ours.Latency.Lost, verdict(ok))
	if ours.Memory != nil {
		fmt.Fprintf(out, "memory per idle subscriber: %.1f KiB RSS (goal ≤ %.0f KiB): %s\n",
			ours.Memory.PerSubscriberBytes/1024, cfg.targetIdleK, verdict(*res.MeetsMemory))
	}
	x := func(v float64) string {
		if v == 0 {
			return "n/a"
		}
		return fmt.Sprintf("×%.1f", v)
	}
	for _, r := range res.Ratios {
		fmt.Fprintf(out, "vs %-5s p99 from ack %s, p99 from send %s, p50 from send %s, idle memory %s, server CPU per delivery %s\n",
			r.Broker, x(r.P99FromAck), x(r.P99FromSend), x(r.P50FromSend), x(r.IdleMemory), x(r.CPUPerDelivery))
	}
}

func printPhase(out io.Writer, ph Phase) {
	l := ph.Latency
	fmt.Fprintf(out, "\n-- %s (%s), payload %d B, connect %.1fs, load %s → %s\n", ph.System, ph.Target, ph.PayloadBytes, ph.ConnectSeconds, ph.LoadBefore, ph.LoadAfter)
	fmt.Fprintf(out, "   deliveries %d/%d, lost %d, duplicates %d, strays %d, ended subscribers %d %s\n",
		l.Delivered, l.Expected, l.Lost, l.Duplicates, l.Strays, ph.Ended, ph.LastError)
	row := func(name string, d Dist) {
		fmt.Fprintf(out, "   %-22s p50 %8.2f  p90 %8.2f  p99 %8.2f  p99.9 %8.2f  max %8.2f  min %8.2f ms (n=%d)\n",
			name, d.P50, d.P90, d.P99, d.P999, d.Max, d.Min, d.Count)
	}
	row("ack → delivery", l.FromAck)
	row("send → delivery", l.FromSend)
	row("send → ack (publish)", l.Publish)
	row("ack → last of fan-out", l.LastFromAck)
	fmt.Fprintf(out, "   deliveries before the ack: %d; CPU in %.1fs window: server %.2fs, bench client %.2fs, other processes %.2fs\n",
		l.EarlyDeliveries, ph.WindowSeconds, ph.ServerCPUSeconds, ph.ClientCPUSeconds, ph.OtherCPUSeconds)
	if len(ph.OtherProcesses) > 0 {
		fmt.Fprintf(out, "   busiest other processes: %s\n", procList(ph.OtherProcesses))
	}
	if len(ph.Attempts) > 1 {
		for i, a := range ph.Attempts {
			fmt.Fprintf(out, "   attempt %d: load %s, other processes %.1f CPU-s in %.1fs, p99 from ack %.1f ms, lost %d\n",
				i+1, a.LoadBefore, a.OtherCPUSeconds, a.WindowSeconds, a.P99FromAckMs, a.Lost)
		}
	}
	if mem := ph.Memory; mem != nil {
		fmt.Fprintf(out, "   RSS pid %d: %.1f MiB → %.1f MiB idle: %.1f KiB per subscriber; after the messages %.1f MiB: %.1f KiB per subscriber\n",
			mem.Pid, float64(mem.RSSBefore)/(1<<20), float64(mem.RSSIdle)/(1<<20), mem.PerSubscriberBytes/1024,
			float64(mem.RSSAfter)/(1<<20), mem.AfterPerSubscriberBytes/1024)
		if ph.System != "mountd" {
			fmt.Fprintf(out, "   (a long-running broker reuses memory that earlier clients freed: its ΔRSS is a lower bound, valid only when it starts from a low RSS)\n")
		}
		keys := make([]string, 0, len(mem.Runtime))
		for k := range mem.Runtime {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v := mem.Runtime[k]
			fmt.Fprintf(out, "   %-32s %14.0f → %14.0f  (%.1f per subscriber)\n", k, v[0], v[1], v[2])
		}
		for _, a := range mem.RuntimeAfter {
			fmt.Fprintf(out, "   after the messages: %s\n", a)
		}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return math.Round(a/b*100) / 100
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func verdict(ok bool) string {
	if ok {
		return "MET"
	}
	return "MISSED"
}

func labelSuffix(l string) string {
	if l == "" {
		return ""
	}
	return " (" + l + ")"
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}

// cpuCount is the CPUs this process may run on.
func cpuCount() int { return runtime.NumCPU() }
