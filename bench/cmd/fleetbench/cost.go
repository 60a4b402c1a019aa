package main

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
)

// The --cost mode measures what one operation costs the machine, for the
// capacity model of docs/scaling.md: the CPU time mountd, PostgreSQL (the
// postmaster and all its children) and Redis spend per report, per read,
// per webhook delivery and per subscription push, and PostgreSQL's WAL and
// written bytes per operation. CPU seconds per operation are far less
// disturbed by other work on a shared machine than latencies are. Each phase
// runs one kind of operation open loop at a fixed rate; the machine's
// background (sweeps, metrics) measured in an idle phase is taken off.

// costPhase is one phase's operations and what they cost.
type costPhase struct {
	Name    string  `json:"name"`
	Rate    float64 `json:"ratePerSec"`
	Seconds float64 `json:"seconds"`
	Ops     int     `json:"ops"`
	Errors  int     `json:"errors"`
	// CPUSeconds per process over the phase, the idle background taken off
	// (machine and steal: the whole machine, as measured).
	CPUSeconds map[string]float64 `json:"cpuSeconds"`
	// CPUMsPerOp is CPUSeconds per operation, in milliseconds.
	CPUMsPerOp        map[string]float64 `json:"cpuMsPerOp"`
	WALBytesPerOp     float64            `json:"walBytesPerOp"`
	CommitsPerOp      float64            `json:"commitsPerOp"`
	PGWriteBytesPerOp float64            `json:"pgWriteBytesPerOp"`
	// Note says how Ops was counted, or what was taken off.
	Note string `json:"note,omitempty"`
}

// costReport is the --cost run.
type costReport struct {
	Mounts int         `json:"mounts"`
	Phases []costPhase `json:"phases"`
	// Storage is what the database keeps per stored row, at the end.
	Storage []costStorage `json:"storage"`
	// RedisBytesPerMount is what Redis's used memory grew by while the
	// report phases ran, per mount that reported; RedisKeys its keys then.
	RedisBytesPerMount float64 `json:"redisBytesPerReportingMount"`
	RedisKeys          int64   `json:"redisKeys"`
	// RedisCallsPerReport is Redis's commands per report in the report
	// phase, by command (INFO commandstats).
	RedisCallsPerReport map[string]float64 `json:"redisCallsPerReport,omitempty"`
	// LoadAvg is the machine's load average at the end: other work.
	LoadAvg [3]float64 `json:"loadAvgEnd"`
}

// costStorage is a table's rows and size (its partitions', indexes and
// TOAST included).
type costStorage struct {
	Table       string  `json:"table"`
	Rows        int64   `json:"rows"`
	Bytes       int64   `json:"bytes"`
	BytesPerRow float64 `json:"bytesPerRow"`
}

// storage measures the tables that grow with reports and deliveries.
func storage(ctx context.Context, db *sql.DB) []costStorage {
	var out []costStorage
	for _, t := range []string{"mount_states", "events", "webhook_deliveries", "webhook_bodies", "mounts"} {
		c := costStorage{Table: t}
		err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM `+t+`),
			pg_total_relation_size($1::regclass) + coalesce((SELECT sum(pg_total_relation_size(inhrelid)) FROM pg_inherits WHERE inhparent = $1::regclass), 0)`, t).Scan(&c.Rows, &c.Bytes)
		if err != nil {
			logf("cost: size of %s: %v", t, err)
			continue
		}
		if c.Rows > 0 {
			c.BytesPerRow = round(float64(c.Bytes)/float64(c.Rows), 0)
		}
		out = append(out, c)
	}
	return out
}

// costWatch samples the CPU seconds of mountd, of PostgreSQL's server (the
// postmaster, its exited children and its live ones) and of Redis, the
// machine's busy and stolen time, PostgreSQL's WAL position and the bytes
// its processes wrote.
type costWatch struct {
	db                   *sql.DB
	mountd, postmaster   int
	redis                int
	machineOK, redisSeen bool
}

type costSample struct {
	at       time.Time
	cpu      map[string]float64
	wal      float64
	pgWrites float64
	commits  float64
}

func newCostWatch(ctx context.Context, cfg config, db *sql.DB) (*costWatch, error) {
	w := &costWatch{db: db, mountd: cfg.Pid}
	var backend int
	if err := db.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, err
	}
	st, err := benchstat.ReadStat(backend)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL must run on this machine: %w", err)
	}
	w.postmaster = st.PPid
	if raw := os.Getenv("MOUNTD_TEST_REDIS_URL"); raw != "" {
		if pid, err := redisPid(raw); err == nil {
			w.redis = pid
		} else {
			logf("cost: Redis's CPU not measured: %v", err)
		}
	}
	return w, nil
}

// redisInfo asks the Redis at rawURL for a section of INFO, as fields.
func redisInfo(rawURL, section string) (map[string]string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "INFO "+section+"\r\n"); err != nil {
		return nil, err
	}
	// The answer is one bulk string: "$<length>\r\n<text>\r\n".
	br := bufio.NewReader(c)
	head, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "$")))
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %q", section, head)
	}
	text := make([]byte, n)
	if _, err := io.ReadFull(br, text); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(text), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// redisCalls is the Redis's calls so far by command (0 commands when
// unknown).
func redisCalls() map[string]float64 {
	out := map[string]float64{}
	raw := os.Getenv("MOUNTD_TEST_REDIS_URL")
	if raw == "" {
		return out
	}
	info, err := redisInfo(raw, "commandstats")
	if err != nil {
		return out
	}
	for k, v := range info {
		// cmdstat_publish:calls=12,usec=34,...
		name, ok := strings.CutPrefix(k, "cmdstat_")
		calls, ok2 := strings.CutPrefix(v, "calls=")
		if ok && ok2 {
			n, _ := strconv.ParseFloat(strings.SplitN(calls, ",", 2)[0], 64)
			out[name] = n
		}
	}
	return out
}

// redisPid is the Redis's process id.
func redisPid(rawURL string) (int, error) {
	info, err := redisInfo(rawURL, "server")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(info["process_id"])
}

// redisMemory is the Redis's used_memory and its keys (0, 0 when unknown).
func redisMemory() (used, keys int64) {
	raw := os.Getenv("MOUNTD_TEST_REDIS_URL")
	if raw == "" {
		return 0, 0
	}
	if info, err := redisInfo(raw, "memory"); err == nil {
		used, _ = strconv.ParseInt(info["used_memory"], 10, 64)
	}
	if info, err := redisInfo(raw, "keyspace"); err == nil {
		for _, v := range info {
			// db0:keys=12,expires=3,avg_ttl=...
			if k, ok := strings.CutPrefix(v, "keys="); ok {
				n, _ := strconv.ParseInt(strings.SplitN(k, ",", 2)[0], 10, 64)
				keys += n
			}
		}
	}
	return used, keys
}

func (w *costWatch) sample(ctx context.Context) costSample {
	s := costSample{at: time.Now(), cpu: map[string]float64{}}
	if m, err := benchstat.MachineCPU(); err == nil {
		s.cpu["machine"], s.cpu["steal"] = m.Busy, m.Steal
	}
	if st, err := benchstat.ReadStat(w.mountd); err == nil && w.mountd > 0 {
		s.cpu["mountd"] = st.CPUSeconds()
	}
	if st, err := benchstat.ReadStat(w.redis); err == nil && w.redis > 0 {
		s.cpu["redis"] = st.CPUSeconds()
	}
	if st, err := benchstat.ReadStat(w.postmaster); err == nil {
		s.cpu["postgres"] = float64(st.UTime+st.STime+st.CUTime+st.CSTime) / benchstat.ClockTicks
		s.pgWrites = writeBytes(w.postmaster)
	}
	for _, pid := range benchstat.Pids() {
		if st, err := benchstat.ReadStat(pid); err == nil && st.PPid == w.postmaster {
			s.cpu["postgres"] += st.CPUSeconds()
			if clientBackend(pid) {
				s.cpu["pg-backends"] += st.CPUSeconds()
			}
			s.pgWrites += writeBytes(pid)
		}
	}
	var wal, commits int64
	// Statistics reach pg_stat_database within a second or so: a phase
	// of 20 s makes that small.
	if err := w.db.QueryRowContext(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint,
		(SELECT sum(xact_commit)::bigint FROM pg_stat_database)`).Scan(&wal, &commits); err == nil {
		s.wal, s.commits = float64(wal), float64(commits)
	}
	return s
}

// clientBackend tells a backend serving a connection ("postgres: user db
// 127.0.0.1(port) idle") from the server's own processes (checkpointer,
// WAL writer, autovacuum), whose work is the background's.
func clientBackend(pid int) bool {
	raw, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.Contains(string(raw), "(") || strings.Contains(string(raw), "[local]")
}

// writeBytes is what a process caused to be written to storage
// (/proc/<pid>/io write_bytes; 0 when unreadable).
func writeBytes(pid int) float64 {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n
		}
	}
	return 0
}

// costPhaseOf is what happened between two samples, with idle's CPU a
// second (per process) taken off and the totals divided by ops.
func costPhaseOf(name string, rate float64, a, b costSample, ops, errs int, idle map[string]float64) costPhase {
	secs := b.at.Sub(a.at).Seconds()
	p := costPhase{Name: name, Rate: rate, Seconds: round(secs, 1), Ops: ops, Errors: errs,
		CPUSeconds: map[string]float64{}, CPUMsPerOp: map[string]float64{}}
	for k, v := range b.cpu {
		d := v - a.cpu[k]
		if k != "machine" && k != "steal" {
			d = max(0, d-idle[k]*secs)
		}
		p.CPUSeconds[k] = round(d, 3)
		if ops > 0 {
			p.CPUMsPerOp[k] = round(d*1000/float64(ops), 4)
		}
	}
	if ops > 0 {
		p.WALBytesPerOp = round((b.wal-a.wal)/float64(ops), 0)
		p.CommitsPerOp = round((b.commits-a.commits)/float64(ops), 2)
		p.PGWriteBytesPerOp = round((b.pgWrites-a.pgWrites)/float64(ops), 0)
	}
	return p
}

// costCounter counts an open loop's answers.
type costCounter struct{ ok, failed atomic.Int64 }

// openLoop sends op rate times a second until ctx ends, each in a goroutine
// of its own, at most 256 outstanding (a slot due beyond that is skipped
// and counted as failed).
func openLoop(ctx context.Context, rate float64, op func(ctx context.Context, slot int) error, c *costCounter) *sync.WaitGroup {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 256)
	wg.Go(func() {
		start := time.Now()
		for j := 0; ; j++ {
			if benchstat.Sleep(ctx, time.Until(start.Add(time.Duration(float64(j)/rate*float64(time.Second))))) != nil {
				return
			}
			select {
			case sem <- struct{}{}:
			default:
				c.failed.Add(1)
				continue
			}
			wg.Go(func() {
				defer func() { <-sem }()
				if err := op(context.WithoutCancel(ctx), j); err != nil {
					c.failed.Add(1)
					return
				}
				c.ok.Add(1)
			})
		}
	})
	return &wg
}

// costRun holds what the phases share.
type costRun struct {
	cfg       config
	watch     *costWatch
	api       *client.Client
	newTokens func() *client.Credentials
	hc        *http.Client
	n         int
	idle      map[string]float64
	rep       costReport
}

// measured runs op at rate for the phase's duration and records the phase.
func (r *costRun) measured(ctx context.Context, name string, rate float64, op func(ctx context.Context, slot int) error) costPhase {
	// Unmeasured first: connections, caches, the token.
	for j := range 5 {
		_ = op(ctx, j)
	}
	var c costCounter
	a := r.watch.sample(ctx)
	pctx, stop := context.WithTimeout(ctx, r.cfg.CostDuration)
	wg := openLoop(pctx, rate, op, &c)
	wg.Wait()
	stop()
	b := r.watch.sample(ctx)
	p := costPhaseOf(name, rate, a, b, int(c.ok.Load()), int(c.failed.Load()), r.idle)
	r.add(p)
	return p
}

func (r *costRun) add(p costPhase) {
	r.rep.Phases = append(r.rep.Phases, p)
	logf("cost: %s: %d ops (%d errors) in %.1f s; CPU ms/op %v; WAL %.0f B/op", p.Name, p.Ops, p.Errors, p.Seconds, p.CPUMsPerOp, p.WALBytesPerOp)
}

// consoleSubscription is what the console's fleet view subscribes to
// (console/static/app.js), the same text for every subscriber.
const consoleSubscription = `subscription($after: ID) { mountEvents(after: $after) { id type uid occurredAt states { code value occurredAt } mount { uid name modelNumber serialNumber firmwareRevision softwareRevision associationState mountLocked helmetMounted batteryLevel cpuTemperature lastReportAt associationDeadline unverifiedStates lastSeenAt presence } } }`

// runCost measures the phases. newTokens gives a token source of its own
// (another token): each console subscriber is a person with a token.
func runCost(ctx context.Context, cfg config, newTokens func() *client.Credentials, out io.Writer) error {
	tokens := newTokens()
	db, err := openDB(cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer db.Close()
	watch, err := newCostWatch(ctx, cfg, db)
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}
	r := &costRun{cfg: cfg, watch: watch, newTokens: newTokens, hc: hc, n: cfg.Mounts, rep: costReport{Mounts: cfg.Mounts},
		api: client.New(cfg.Base, tokens, client.Options{HTTPClient: hc})}
	if _, err := tokens.Token(); err != nil {
		return err
	}

	// The background: what mountd, PostgreSQL and Redis spend with nothing asked.
	a := watch.sample(ctx)
	_ = benchstat.Sleep(ctx, cfg.CostDuration)
	b := watch.sample(ctx)
	idle := costPhaseOf("idle", 0, a, b, 0, 0, nil)
	r.idle = map[string]float64{}
	for k, v := range idle.CPUSeconds {
		r.idle[k] = v / idle.Seconds
	}
	idle.Note = "CPU seconds with nothing asked; a second of it is taken off every other phase's"
	r.add(idle)

	r.measured(ctx, "get-mount", cfg.CostGetRate, func(ctx context.Context, _ int) error {
		return r.api.Do(ctx, http.MethodGet, "/mounts/"+uidOf(rand.IntN(r.n)), nil, nil)
	})
	probes := fleetProbes(r.n)
	r.measured(ctx, "filter-page", cfg.CostPageRate, func(ctx context.Context, j int) error {
		q := url.Values{"pageSize": {"100"}}
		if f := probes[j%len(probes)].Filter; f != "" {
			q.Set("filter", f)
		}
		return r.api.Do(ctx, http.MethodGet, "/mounts?"+q.Encode(), nil, nil)
	})
	overview := overviewQuery(overviewCounts(time.Now()))
	r.measured(ctx, "overview", cfg.CostOverviewRate, func(ctx context.Context, _ int) error {
		_, err := graphql(ctx, hc, cfg.Base, tokens, overview)
		return err
	})
	if err := r.reportPhases(ctx); err != nil {
		return err
	}
	r.rep.Storage = storage(ctx, db)
	r.rep.LoadAvg = benchstat.LoadAvg()
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(r.rep)
	}
	printCost(out, r.rep)
	return nil
}

// reportPhases run a steady stream of reports (each mount of a slice of the
// fleet reporting every 10 s, its four codes) and measure it alone, with a
// webhook taking every report's event, and with console subscribers
// receiving every event. The stream runs across the three, so the mounts
// stay ONLINE; its first pass (each mount's first report after the settled
// fleet went OFFLINE) is not measured.
func (r *costRun) reportPhases(ctx context.Context) error {
	rate := r.cfg.CostIngestRate
	slice := min(r.n, max(1, int(rate*10)))
	mem0, _ := redisMemory()
	defer func() {
		mem1, keys := redisMemory()
		r.rep.RedisBytesPerMount, r.rep.RedisKeys = round(float64(mem1-mem0)/float64(slice), 0), keys
	}()
	var reports costCounter
	sctx, stop := context.WithCancel(ctx)
	stream := openLoop(sctx, rate, func(ctx context.Context, j int) error {
		i := j % slice
		return r.api.Do(ctx, http.MethodPost, "/mounts/"+uidOf(i)+"/states", json.RawMessage(valuesOf(i).report(time.Now())), nil)
	}, &reports)
	defer func() {
		stop()
		stream.Wait()
	}()
	_ = benchstat.Sleep(ctx, 12*time.Second)

	// span measures the stream for the phase's duration; added is what
	// counted grew by meanwhile (deliveries, pushes).
	span := func(name string, counted func() int64) (p costPhase, added int) {
		ok0, bad0, n0 := reports.ok.Load(), reports.failed.Load(), counted()
		a := r.watch.sample(ctx)
		_ = benchstat.Sleep(ctx, r.cfg.CostDuration)
		b := r.watch.sample(ctx)
		p = costPhaseOf(name, rate, a, b, int(reports.ok.Load()-ok0), int(reports.failed.Load()-bad0), r.idle)
		return p, int(counted() - n0)
	}
	calls0 := redisCalls()
	ingest, _ := span("report", func() int64 { return 0 })
	if ingest.Ops > 0 {
		r.rep.RedisCallsPerReport = map[string]float64{}
		for k, v := range redisCalls() {
			if d := v - calls0[k]; d > 0 {
				r.rep.RedisCallsPerReport[k] = round(d/float64(ingest.Ops), 3)
			}
		}
	}
	ingest.Note = "a POST /mounts/{uid}/states of four codes, each mount every 10 s"
	r.add(ingest)

	// A webhook taking every report's event, to a receiver here.
	var delivered atomic.Int64
	rcv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}), ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = rcv.Serve(ln) }()
	defer rcv.Close()
	var hook struct {
		ID string `json:"id"`
	}
	if err := r.api.Do(ctx, http.MethodPost, "/webhooks", map[string]any{"url": "http://" + ln.Addr().String() + "/hook",
		"eventTypes": []string{"STATES_REPORTED"}}, &hook); err != nil {
		return fmt.Errorf("POST /webhooks (start mountd with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true): %w", err)
	}
	_ = benchstat.Sleep(ctx, 3*time.Second)
	withHook, deliveries := span("report+webhook", delivered.Load)
	r.add(withHook)
	_ = r.api.Do(context.WithoutCancel(ctx), http.MethodDelete, "/webhooks/"+hook.ID, nil, nil)
	// The reports alone again after each phase that adds to them: the
	// reference of a phase is the mean of the two around it, so that a
	// drift of the machine moves the reference with it.
	_ = benchstat.Sleep(ctx, 3*time.Second)
	between, _ := span("report", func() int64 { return 0 })
	between.Note = "the reports alone again, between the webhook and the subscribers"
	r.add(between)
	r.add(derived("webhook-delivery", withHook, meanPhase(ingest, between), deliveries))

	// Console subscribers, each receiving every event of the account.
	var pushed, ended atomic.Int64
	subs, err := r.subscribe(ctx, r.cfg.CostSubscribers, &pushed, &ended)
	if err != nil {
		return err
	}
	_ = benchstat.Sleep(ctx, 3*time.Second)
	withSubs, pushes := span(fmt.Sprintf("report+%d subscribers", len(subs)), pushed.Load)
	for _, c := range subs {
		c.Close(websocket.StatusNormalClosure, "")
	}
	if n := ended.Load(); n > 0 {
		withSubs.Note = fmt.Sprintf("the server ended %d of the %d subscriptions (a subscriber falling behind is dropped)", n, len(subs))
	}
	r.add(withSubs)
	_ = benchstat.Sleep(ctx, 3*time.Second)
	after, _ := span("report", func() int64 { return 0 })
	after.Note = "the reports alone again, after the subscribers"
	r.add(after)
	r.add(derived("subscription-push", withSubs, meanPhase(between, after), pushes))
	return nil
}

// meanPhase is the per-operation mean of two phases of the same operation.
func meanPhase(a, b costPhase) costPhase {
	m := costPhase{Name: a.Name, CPUMsPerOp: map[string]float64{},
		WALBytesPerOp:     (a.WALBytesPerOp + b.WALBytesPerOp) / 2,
		CommitsPerOp:      (a.CommitsPerOp + b.CommitsPerOp) / 2,
		PGWriteBytesPerOp: (a.PGWriteBytesPerOp + b.PGWriteBytesPerOp) / 2}
	for k, v := range a.CPUMsPerOp {
		m.CPUMsPerOp[k] = (v + b.CPUMsPerOp[k]) / 2
	}
	return m
}

// derived is the cost of what a phase added to the report stream (a
// delivery, a push): the phase's CPU less its reports' cost at the stream's
// own per report, divided by what it added.
func derived(name string, with, ingest costPhase, added int) costPhase {
	reports := with.Ops
	p := costPhase{Name: name, Seconds: with.Seconds, Ops: added, CPUSeconds: map[string]float64{}, CPUMsPerOp: map[string]float64{},
		Note: fmt.Sprintf("phase %q less its %d reports at the cost per report of the report phases around it, over %d", with.Name, reports, added)}
	for k, v := range with.CPUSeconds {
		if k == "machine" || k == "steal" {
			continue
		}
		d := v - ingest.CPUMsPerOp[k]/1000*float64(reports)
		p.CPUSeconds[k] = round(d, 3)
		if added > 0 {
			p.CPUMsPerOp[k] = round(d*1000/float64(added), 4)
		}
	}
	if added > 0 {
		p.WALBytesPerOp = round((with.WALBytesPerOp-ingest.WALBytesPerOp)*float64(reports)/float64(added), 0)
		p.CommitsPerOp = round((with.CommitsPerOp-ingest.CommitsPerOp)*float64(reports)/float64(added), 2)
		p.PGWriteBytesPerOp = round((with.PGWriteBytesPerOp-ingest.PGWriteBytesPerOp)*float64(reports)/float64(added), 0)
	}
	return p
}

// subscribe opens n GraphQL subscriptions of the console's fleet view,
// each with a token of its own, counting the events they receive into
// pushed.
func (r *costRun) subscribe(ctx context.Context, n int, pushed, ended *atomic.Int64) ([]*websocket.Conn, error) {
	wsURL := "ws" + strings.TrimPrefix(r.cfg.Base, "http") + "/graphql"
	sub, _ := json.Marshal(map[string]any{"id": "1", "type": "subscribe", "payload": map[string]any{"query": consoleSubscription}})
	var conns []*websocket.Conn
	for range n {
		tok, err := r.newTokens().Token()
		if err != nil {
			return nil, err
		}
		init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Access-Key": tok.AccessToken}})
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, _, err := websocket.Dial(dctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
		if err == nil {
			c.SetReadLimit(1 << 20)
			err = c.Write(dctx, websocket.MessageText, init)
		}
		if err == nil {
			var ack []byte
			_, ack, err = c.Read(dctx)
			if err == nil && !strings.Contains(string(ack), "connection_ack") {
				err = fmt.Errorf("no connection_ack: %.200s", ack)
			}
		}
		if err == nil {
			err = c.Write(dctx, websocket.MessageText, sub)
		}
		cancel()
		if err != nil {
			for _, c := range conns {
				c.CloseNow()
			}
			return nil, fmt.Errorf("subscription %d: %w", len(conns)+1, err)
		}
		conns = append(conns, c)
		go func() {
			// Only the envelope's start is read; the rest is discarded
			// unparsed, so that the readers cost this machine little.
			head := make([]byte, 24)
			for {
				_, rd, err := c.Reader(ctx)
				if err != nil {
					return
				}
				k, _ := io.ReadFull(rd, head)
				kind := msgKind(head[:k])
				if kind == "" {
					// Not mountd's envelope (gqlgen's error, say): read it whole.
					rest, _ := io.ReadAll(io.LimitReader(rd, 4096))
					kind = msgKind(append(head[:k:k], rest...))
				}
				_, _ = io.Copy(io.Discard, rd)
				switch kind {
				case "next":
					pushed.Add(1)
				case "ping":
					_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
				case "pong", "ka":
				default:
					if ended.Add(1) == 1 {
						logf("cost: the server ended a subscription: %q (others may follow)", kind)
					}
					return
				}
			}
		}()
	}
	return conns, nil
}

// msgKind is a graphql-transport-ws message's type: mountd writes the
// envelope's "type" first, gqlgen last (after the payload's own "type").
func msgKind(data []byte) string {
	s := string(data)
	i := strings.Index(s, `"type":"`)
	if i < 0 || i > 2 {
		i = strings.LastIndex(s, `"type":"`)
	}
	if i < 0 {
		return ""
	}
	s = s[i+len(`"type":"`):]
	if j := strings.IndexByte(s, '"'); j >= 0 {
		return s[:j]
	}
	return ""
}

// printCost writes the phases as a Markdown table.
func printCost(w io.Writer, rep costReport) {
	fmt.Fprintf(w, "cost per operation, fleet of %d mounts; load average at the end %v\n\n", rep.Mounts, rep.LoadAvg)
	fmt.Fprintf(w, "| phase | rate/s | s | ops | errors | mountd ms/op | PostgreSQL ms/op | of it backends | Redis ms/op | WAL B/op | commits/op | PG written B/op | mountd CPU-s | PostgreSQL CPU-s | machine CPU-s | steal CPU-s |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range rep.Phases {
		fmt.Fprintf(w, "| %s | %.0f | %.1f | %d | %d | %.3f | %.3f | %.3f | %.3f | %.0f | %.2f | %.0f | %.2f | %.2f | %.1f | %.1f |\n", p.Name, p.Rate, p.Seconds, p.Ops, p.Errors,
			p.CPUMsPerOp["mountd"], p.CPUMsPerOp["postgres"], p.CPUMsPerOp["pg-backends"], p.CPUMsPerOp["redis"], p.WALBytesPerOp, p.CommitsPerOp, p.PGWriteBytesPerOp,
			p.CPUSeconds["mountd"], p.CPUSeconds["postgres"], p.CPUSeconds["machine"], p.CPUSeconds["steal"])
	}
	fmt.Fprintf(w, "\nRedis: %.0f bytes of used memory per mount that reported, %d keys at the end; commands per report %v\n", rep.RedisBytesPerMount, rep.RedisKeys, rep.RedisCallsPerReport)
	fmt.Fprintf(w, "\n| table | rows | bytes | bytes a row |\n|---|---|---|---|\n")
	for _, t := range rep.Storage {
		fmt.Fprintf(w, "| %s | %d | %d | %.0f |\n", t.Table, t.Rows, t.Bytes, t.BytesPerRow)
	}
	fmt.Fprintln(w)
	for _, p := range rep.Phases {
		if p.Note != "" {
			fmt.Fprintf(w, "- %s: %s\n", p.Name, p.Note)
		}
	}
}
