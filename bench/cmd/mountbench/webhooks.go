package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/core"
)

// The webhook scenarios (docs/performance.md, "Webhooks: a fleet's
// deliveries"): one loopback receiver answering 200 at once, single-entry
// reports, each recognised at the receiver by its occurredAt.
//
//   - burst: --webhook-reports reports from --webhook-writers writers over
//     --mounts mounts, as fast as they are answered, one webhook;
//   - drain: the same reports posted while the tool holds the dispatch row
//     (as a replica that plans would), so that they wait in the log; once it
//     lets go the dispatcher plans and sends the whole backlog;
//   - steady: reports at --webhook-rate a second for --duration, open loop;
//   - fair: the burst over 20 accounts, one webhook and one mount each.
//
// The baseline is the same number of POSTs of a delivery's size sent
// straight to the receiver, 8 at a time.
var webhookScenarios = []string{"webhook-burst", "webhook-drain", "webhook-steady", "webhook-fair"}

// webhookFairAccounts is how many accounts the fair phase spreads over.
const webhookFairAccounts = 20

// webhookReport is every webhook phase that ran, beside the baseline.
type webhookReport struct {
	Reports       int           `json:"reports"`
	Writers       int           `json:"writers"`
	PlainPostsSec float64       `json:"plainPostsPerSec"`
	Burst         *deliveryRun  `json:"burst,omitempty"`
	Drain         *deliveryRun  `json:"drain,omitempty"`
	Steady        *deliveryRun  `json:"steady,omitempty"`
	Fair          *deliveryRun  `json:"fair,omitempty"`
	Targets       webhookTarget `json:"targets"`
	Pass          bool          `json:"pass"`
}

// webhookTarget are issue 40's targets for the phases.
type webhookTarget struct {
	DrainPerSec   float64 `json:"drainPerSec"`
	SteadyP99Ms   float64 `json:"steadyP99Ms"`
	BurstP99Ms    float64 `json:"burstP99Ms"`
	FairP99Ms     float64 `json:"fairP99Ms"`
	LostOrDoubled int     `json:"lostOrDoubled"`
}

// deliveryRun is one phase: reports posted, their deliveries, and the lag
// from each report's answer to its delivery's arrival.
type deliveryRun struct {
	LoadAvg    [3]float64 `json:"loadAvgBefore"`
	Reports    int        `json:"reports"`
	PostErrors int        `json:"postErrors"`
	FirstError string     `json:"firstError,omitempty"`
	PostedSec  float64    `json:"postedPerSec"`
	Delivered  int        `json:"delivered"`
	Lost       int        `json:"lost"`
	Doubled    int        `json:"doubled"`
	PerSec     float64    `json:"deliveriesPerSec"`
	Ratio      float64    `json:"ratioToPlainPosts"`
	// KeepUp is the delivery rate over the rate the reports were posted
	// at: 1 when the deliveries kept up (burst, steady, fair).
	KeepUp     float64            `json:"keepUpRatio"`
	DrainedSec float64            `json:"drainedSeconds,omitempty"`
	Lag        latency            `json:"lag"`
	Report     latency            `json:"reportLatency"`
	CPU        map[string]float64 `json:"cpuPercentOfOneCore"`
	// PerAccountP99Ms is each account's lag p99 (fair): min and max.
	PerAccountP99Ms *[2]float64 `json:"perAccountP99Ms,omitempty"`
}

// webhookAccount is an account with mounts and the webhook it listens with.
type webhookAccount struct {
	token, webhookID string
	uids             []string
}

// receiver takes deliveries and remembers when each report's first came.
type receiver struct {
	srv  *http.Server
	addr string
	mu   sync.Mutex
	got  map[int64]time.Time
	dups int
}

func newReceiver() (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{addr: ln.Addr().String(), got: map[int64]time.Time{}}
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	now := time.Now()
	var call struct {
		Data struct {
			States []struct {
				OccurredAt time.Time `json:"occurredAt"`
			} `json:"states"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &call) == nil && len(call.Data.States) == 1 {
		key := call.Data.States[0].OccurredAt.UnixMilli()
		r.mu.Lock()
		if _, ok := r.got[key]; ok {
			r.dups++
		} else {
			r.got[key] = now
		}
		r.mu.Unlock()
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *receiver) close() { _ = r.srv.Close() }

// webhookScenario runs the webhook phases --scenario names.
func (b *bench) webhookScenario(ctx context.Context) (*webhookReport, error) {
	n := b.cfg.WebhookReports
	rep := &webhookReport{Reports: n, Writers: b.cfg.WebhookWriters, Targets: webhookTarget{DrainPerSec: 3000, SteadyP99Ms: 1000,
		BurstP99Ms: 2000, FairP99Ms: 2000}}
	b.quiet(ctx)
	plain, err := plainPosts(ctx, n)
	if err != nil {
		return nil, err
	}
	rep.PlainPostsSec = round(plain, 1)
	b.logf("baseline: %d plain POSTs to the receiver, %.0f/s", n, plain)
	main := []webhookAccount{{token: b.token, uids: b.uids}}
	// Each phase's reports have occurredAt of their own: base + i ms.
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	phase := func(name string, accounts []webhookAccount, hold bool, rate float64, count int) (*deliveryRun, error) {
		b.quiet(ctx)
		b.logf("%s: %d reports", name, count)
		run, err := b.deliveryPhase(ctx, accounts, base, hold, rate, count)
		base = base.Add(time.Duration(count+1000) * time.Millisecond)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		run.Ratio = round(run.PerSec/plain, 4)
		if run.PostedSec > 0 {
			run.KeepUp = round(run.PerSec/run.PostedSec, 3)
		}
		b.logf("%s: %.0f deliveries/s, lag p50 %.0f ms p99 %.0f ms, lost %d, doubled %d", name, run.PerSec, run.Lag.P50, run.Lag.P99, run.Lost, run.Doubled)
		return run, nil
	}
	if b.cfg.runs("webhook-burst") {
		if rep.Burst, err = phase("burst", main, false, 0, n); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("webhook-drain") {
		if rep.Drain, err = phase("drain", main, true, 0, n); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("webhook-steady") {
		if rep.Steady, err = phase("steady", main, false, b.cfg.WebhookRate, int(b.cfg.WebhookRate*b.cfg.Duration.Seconds())); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("webhook-fair") {
		accounts, err := b.webhookAccounts(ctx, webhookFairAccounts)
		if err != nil {
			return nil, err
		}
		if rep.Fair, err = phase("fair", accounts, false, 0, n); err != nil {
			return nil, err
		}
	}
	rep.Pass = true
	for _, r := range []struct {
		run   *deliveryRun
		ok    func(*deliveryRun) bool
		label string
	}{
		{rep.Burst, func(r *deliveryRun) bool { return r.Lag.P99 <= rep.Targets.BurstP99Ms }, "burst"},
		{rep.Drain, func(r *deliveryRun) bool { return r.PerSec >= rep.Targets.DrainPerSec }, "drain"},
		{rep.Steady, func(r *deliveryRun) bool { return r.Lag.P99 <= rep.Targets.SteadyP99Ms }, "steady"},
		{rep.Fair, func(r *deliveryRun) bool { return r.Lag.P99 <= rep.Targets.FairP99Ms }, "fair"},
	} {
		if r.run != nil && (!r.ok(r.run) || r.run.Lost+r.run.Doubled > 0 || r.run.PostErrors > 0) {
			rep.Pass = false
		}
	}
	return rep, nil
}

// webhookAccounts creates n accounts with one mount each.
func (b *bench) webhookAccounts(ctx context.Context, n int) ([]webhookAccount, error) {
	out := make([]webhookAccount, n)
	for i := range out {
		acc, err := core.NewAccountService(b.store, nil).Create(ctx, fmt.Sprintf("mountbench %s webhooks %d", b.runID, i))
		if err != nil {
			return nil, fmt.Errorf("create account: %w", err)
		}
		tok, err := b.fetchToken(ctx, acc.ClientID, acc.ClientSecret)
		if err != nil {
			return nil, err
		}
		uid := fmt.Sprintf("mbw-%s-%02d", b.runID, i)
		out[i] = webhookAccount{token: tok, uids: []string{uid}}
		if err := b.withToken(tok).associate(ctx, uid); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// withToken is b acting for another account.
func (b *bench) withToken(token string) *bench {
	c := *b
	c.token = token
	return &c
}

// deliveryPhase gives each account a webhook to a fresh receiver, posts
// count reports (rate a second, 0: as fast as the writers are answered)
// round-robin over the accounts' mounts, waits for their deliveries (at
// most a minute after the last answer), and deletes the webhooks. hold
// keeps the dispatcher from planning while the reports are posted.
func (b *bench) deliveryPhase(ctx context.Context, accounts []webhookAccount, base time.Time, hold bool, rate float64, count int) (*deliveryRun, error) {
	rcv, err := newReceiver()
	if err != nil {
		return nil, err
	}
	defer rcv.close()
	for i := range accounts {
		a := b.withToken(accounts[i].token)
		in, _ := json.Marshal(map[string]any{"url": "http://" + rcv.addr + "/hook/" + strconv.Itoa(i), "eventTypes": []string{"STATES_REPORTED"}})
		status, raw, err := a.api(ctx, http.MethodPost, "/api/v1/webhooks", in)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("POST /api/v1/webhooks: %d %s (start mountd with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true)", status, raw)
		}
		var w struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(raw, &w)
		accounts[i].webhookID = w.ID
	}
	defer func() {
		for _, acc := range accounts {
			_, _, _ = b.withToken(acc.token).api(context.WithoutCancel(ctx), http.MethodDelete, "/api/v1/webhooks/"+acc.webhookID, nil)
		}
	}()
	var release func() error
	if hold {
		// The dispatch row locked as a planning replica holds it: the
		// dispatcher's plan skips it (SKIP LOCKED) and the reports wait.
		tx, err := b.db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `SELECT 1 FROM webhook_dispatch WHERE singleton = 1 FOR UPDATE`); err != nil {
			return nil, err
		}
		release = tx.Commit
	}
	run := &deliveryRun{LoadAvg: loadAvg(), Reports: count}
	cpu0 := b.cpu.sample()
	start := time.Now()
	acked, lats := b.postReports(ctx, accounts, base, rate, count, run)
	posted := time.Since(start)
	run.PostedSec = round(float64(count-run.PostErrors)/posted.Seconds(), 1)
	run.Report = summarize(lats)
	released := time.Now()
	if release != nil {
		if err := release(); err != nil {
			return nil, err
		}
		released = time.Now()
	}
	want := count - run.PostErrors
	for deadline := time.Now().Add(time.Minute); rcv.count() < want && time.Now().Before(deadline) && ctx.Err() == nil; {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // late doubles
	run.CPU = cpuSpan(cpu0, b.cpu.sample(), time.Since(start))
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	run.Doubled = rcv.dups
	var first, last time.Time
	lag := make([]time.Duration, 0, count)
	perAccount := make([][]time.Duration, len(accounts))
	for i, at := range acked {
		if at.IsZero() {
			continue // not accepted
		}
		got, ok := rcv.got[base.Add(time.Duration(i)*time.Millisecond).UnixMilli()]
		if !ok {
			run.Lost++
			continue
		}
		run.Delivered++
		if first.IsZero() || got.Before(first) {
			first = got
		}
		if got.After(last) {
			last = got
		}
		l := max(0, got.Sub(at))
		lag = append(lag, l)
		perAccount[i%len(accounts)] = append(perAccount[i%len(accounts)], l)
	}
	if run.Delivered > 1 {
		run.PerSec = round(float64(run.Delivered)/last.Sub(first).Seconds(), 1)
	}
	if hold {
		run.DrainedSec = round(last.Sub(released).Seconds(), 3)
	}
	run.Lag = summarize(lag)
	if len(accounts) > 1 {
		p99s := make([]float64, 0, len(accounts))
		for _, l := range perAccount {
			p99s = append(p99s, summarize(l).P99)
		}
		run.PerAccountP99Ms = &[2]float64{slices.Min(p99s), slices.Max(p99s)}
	}
	return run, nil
}

// postReports posts count single-entry reports, report i with occurredAt
// base + i ms to mount i of the accounts' mounts in turn, and returns when
// each was answered (zero: refused) and the answers' latencies.
func (b *bench) postReports(ctx context.Context, accounts []webhookAccount, base time.Time, rate float64, count int, run *deliveryRun) ([]time.Time, []time.Duration) {
	type target struct{ url, token string }
	var targets []target
	for i := 0; len(targets) < max(len(accounts), len(accounts[0].uids)); i++ {
		a := accounts[i%len(accounts)]
		targets = append(targets, target{b.cfg.Base + "/api/v1/mounts/" + a.uids[(i/len(accounts))%len(a.uids)] + "/states", a.token})
	}
	acked := make([]time.Time, count)
	lats := make([]time.Duration, count)
	writers := b.cfg.WebhookWriters
	if rate > 0 {
		writers *= 4 // open loop: enough writers that a slow answer does not hold the schedule
	}
	client := newHTTPClient(writers, b.cfg.Timeout)
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	work := make(chan int, 1024)
	for range writers {
		wg.Go(func() {
			var body bytes.Buffer
			for i := range work {
				t := targets[i%len(targets)]
				body.Reset()
				fmt.Fprintf(&body, `{"states":[{"code":"BATTERY_LEVEL","value":"%d","occurredAt":"%s"}]}`, i%101,
					base.Add(time.Duration(i)*time.Millisecond).UTC().Format(time.RFC3339Nano))
				t0 := time.Now()
				err := postOne(ctx, client, t.url, t.token, body.Bytes())
				now := time.Now()
				lats[i] = now.Sub(t0)
				if err != nil {
					mu.Lock()
					run.PostErrors++
					if run.FirstError == "" {
						run.FirstError = err.Error()
					}
					mu.Unlock()
					continue
				}
				acked[i] = now
			}
		})
	}
	began := time.Now()
	for i := range count {
		if rate > 0 {
			time.Sleep(time.Until(began.Add(time.Duration(float64(i) * float64(time.Second) / rate))))
		}
		work <- i
	}
	close(work)
	wg.Wait()
	return acked, lats
}

// postOne posts one report with token and reads the answer.
func postOne(ctx context.Context, client *http.Client, url, token string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Access-Key", token)
	res, err := client.Do(req)
	if err != nil {
		return err
	}
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %.200s", url, res.StatusCode, raw)
	}
	return nil
}

// plainPosts is the baseline: n POSTs of a delivery's size to a fresh
// receiver, 8 at a time over keep-alive connections, per second.
func plainPosts(ctx context.Context, n int) (float64, error) {
	rcv, err := newReceiver()
	if err != nil {
		return 0, err
	}
	defer rcv.close()
	c := newHTTPClient(8, 10*time.Second)
	body := []byte(`{"type":"STATES_REPORTED","timestamp":"2026-01-01T00:00:00Z","data":{"pad":"` + strings.Repeat("x", 600) + `"}}`)
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for range work {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+rcv.addr+"/", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				if res, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, res.Body)
					res.Body.Close()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return float64(n) / time.Since(began).Seconds(), ctx.Err()
}

func (r *webhookReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nwebhooks: %d single-entry reports from %d writers; baseline %.0f plain POSTs/s to the receiver\n", r.Reports, r.Writers, r.PlainPostsSec)
	fmt.Fprintf(w, "%-8s %9s %11s %8s %8s %8s %8s %8s %6s %7s %s\n", "phase", "posted/s", "delivered/s", "ratio", "lag p50", "lag p99", "lag max", "drained", "lost", "doubled", "cpu")
	for _, p := range []struct {
		name string
		r    *deliveryRun
	}{{"burst", r.Burst}, {"drain", r.Drain}, {"steady", r.Steady}, {"fair", r.Fair}} {
		if p.r == nil {
			continue
		}
		cpu := []string{}
		for _, k := range slices.Sorted(maps.Keys(p.r.CPU)) {
			cpu = append(cpu, fmt.Sprintf("%s %.0f%%", k, p.r.CPU[k]))
		}
		fmt.Fprintf(w, "%-8s %9.0f %11.0f %8.4f %6.0fms %6.0fms %6.0fms %7.2fs %6d %7d %s\n", p.name, p.r.PostedSec, p.r.PerSec, p.r.Ratio,
			p.r.Lag.P50, p.r.Lag.P99, p.r.Lag.Max, p.r.DrainedSec, p.r.Lost, p.r.Doubled, strings.Join(cpu, ", "))
		if p.r.PerAccountP99Ms != nil {
			fmt.Fprintf(w, "         per account lag p99: %.0f to %.0f ms\n", p.r.PerAccountP99Ms[0], p.r.PerAccountP99Ms[1])
		}
		if p.r.PostErrors > 0 {
			fmt.Fprintf(w, "         %d reports refused: %s\n", p.r.PostErrors, p.r.FirstError)
		}
	}
	fmt.Fprintf(w, "targets: drain >= %.0f/s, steady p99 <= %.0f ms, burst and fair p99 <= %.0f ms, nothing lost or doubled: %s\n",
		r.Targets.DrainPerSec, r.Targets.SteadyP99Ms, r.Targets.BurstP99Ms, passText(r.Pass))
}
