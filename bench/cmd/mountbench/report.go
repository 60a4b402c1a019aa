package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// phase is one measured run against one target.
type phase struct {
	Target         string             `json:"target"`
	LoadAvg        [3]float64         `json:"loadAvgBefore"`
	Seconds        float64            `json:"seconds"`
	Requests       int                `json:"requests"`
	Errors         int                `json:"errors"`
	Statuses       map[string]int     `json:"failures,omitempty"`
	FirstError     string             `json:"firstError,omitempty"`
	RequestsPerSec float64            `json:"requestsPerSec"`
	EntriesPerSec  float64            `json:"entriesPerSec,omitempty"`
	Accepted       int64              `json:"accepted,omitempty"`
	Duplicates     int64              `json:"duplicates,omitempty"`
	Latency        latency            `json:"latency"`
	Service        *latency           `json:"serviceTime,omitempty"`
	SendLag        *latency           `json:"sendLag,omitempty"`
	CPU            map[string]float64 `json:"cpuPercentOfOneCore"`
	// Rounds is how many alternating rounds the phase was measured in.
	Rounds int `json:"rounds,omitempty"`
	// lats are the raw latencies, for merging rounds.
	lats []time.Duration
}

// mergePhases joins the rounds of one target into one phase: counts add
// up, rates and latencies are over all of them, CPU shares are weighted by
// each round's time. perAccepted: the rate is of accepted items (onboard).
func mergePhases(rounds []phase, perAccepted bool) phase {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := phase{Target: rounds[0].Target, LoadAvg: rounds[0].LoadAvg, Statuses: map[string]int{}, CPU: map[string]float64{}, Rounds: len(rounds)}
	var lats []time.Duration
	for _, r := range rounds {
		out.Seconds += r.Seconds
		out.Requests += r.Requests
		out.Errors += r.Errors
		out.Accepted += r.Accepted
		out.Duplicates += r.Duplicates
		for k, v := range r.Statuses {
			out.Statuses[k] += v
		}
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		for k, v := range r.CPU {
			out.CPU[k] += v * r.Seconds
		}
		lats = append(lats, r.lats...)
	}
	for k, v := range out.CPU {
		out.CPU[k] = round(v/out.Seconds, 1)
	}
	out.Seconds = round(out.Seconds, 3)
	out.RequestsPerSec = round(float64(out.Requests)/out.Seconds, 1)
	out.EntriesPerSec = round(float64(out.Accepted)/out.Seconds, 1)
	if perAccepted { // onboard: the rate is of onboarded mounts
		out.RequestsPerSec, out.EntriesPerSec = out.EntriesPerSec, 0
	}
	out.Latency = summarize(lats)
	out.lats = lats
	return out
}

type ingestReport struct {
	Batch               int             `json:"batch"`
	Clients             int             `json:"clients"`
	Server              phase           `json:"server"`
	Expected            int64           `json:"expected"`
	Counted             int64           `json:"counted"`
	Lost                int64           `json:"lost"`
	Extra               int64           `json:"extra"`
	Duplicates          int64           `json:"duplicates"`
	Baseline            *ingestBaseline `json:"baseline,omitempty"`
	ThroughputRatio     float64         `json:"throughputRatio,omitempty"`
	P50Ratio            float64         `json:"p50Ratio,omitempty"`
	P99Ratio            float64         `json:"p99Ratio,omitempty"`
	TargetEntriesPerSec float64         `json:"targetEntriesPerSec"`
	Pass                bool            `json:"pass"`
}

type ingestBaseline struct {
	Table    string `json:"table"`
	Phase    phase  `json:"phase"`
	Expected int64  `json:"expected"`
	Counted  int64  `json:"counted"`
	Lost     int64  `json:"lost"`
}

type getReport struct {
	Rate        float64 `json:"rate"`
	Clients     int     `json:"clients"`
	BodyBytes   int     `json:"bodyBytes"`
	Server      phase   `json:"server"`
	Baseline    *phase  `json:"baseline,omitempty"`
	P50Ratio    float64 `json:"p50Ratio,omitempty"`
	P99Ratio    float64 `json:"p99Ratio,omitempty"`
	P999Ratio   float64 `json:"p999Ratio,omitempty"`
	TargetP99Ms float64 `json:"targetP99Ms"`
	Pass        bool    `json:"pass"`
}

type report struct {
	Started      time.Time      `json:"started"`
	Base         string         `json:"base"`
	Scenario     string         `json:"scenario"`
	Clients      int            `json:"clients"`
	Duration     string         `json:"duration"`
	Warmup       string         `json:"warmup"`
	Mounts       int            `json:"mounts"`
	CPUs         int            `json:"cpus"`
	GoVersion    string         `json:"goVersion"`
	Kernel       string         `json:"kernel,omitempty"`
	LoadAvgStart [3]float64     `json:"loadAvgStart"`
	LoadAvgEnd   [3]float64     `json:"loadAvgEnd"`
	Watched      []string       `json:"watched"`
	Ingest       *ingestReport  `json:"ingest,omitempty"`
	Signed       *signedReport  `json:"signed,omitempty"`
	Rules        *rulesReport   `json:"rules,omitempty"`
	Get          *getReport     `json:"get,omitempty"`
	Onboard      *onboardReport `json:"onboard,omitempty"`
	GetMax       *getMaxReport  `json:"getMax,omitempty"`
	Flood        *floodReport   `json:"flood,omitempty"`
	Webhooks     *webhookReport `json:"webhooks,omitempty"`
	Tokens       *tokensReport  `json:"tokens,omitempty"`
}

func (b *bench) run(ctx context.Context) (*report, error) {
	rep := &report{Started: time.Now().UTC(), Base: b.cfg.Base, Scenario: b.cfg.Scenario, Clients: b.cfg.Clients,
		Duration: b.cfg.Duration.String(), Warmup: b.cfg.Warmup.String(), Mounts: b.cfg.Mounts,
		CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), LoadAvgStart: loadAvg()}
	if raw, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		rep.Kernel = strings.TrimSpace(string(raw))
	}
	for _, p := range b.cpu.procs {
		rep.Watched = append(rep.Watched, fmt.Sprintf("%s=%d", p.name, p.pid))
	}
	if err := b.setup(ctx); err != nil {
		return nil, err
	}
	var err error
	if b.cfg.runs("ingest") {
		if rep.Ingest, err = b.ingestScenario(ctx); err != nil {
			return nil, err
		}
	} else if err := b.seed(ctx); err != nil {
		return nil, err
	}
	if b.cfg.runs("signed") {
		if rep.Signed, err = b.signedScenario(ctx); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("rules") {
		if rep.Rules, err = b.rulesScenario(ctx); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("get") {
		if rep.Get, err = b.getScenario(ctx); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("onboard") {
		if rep.Onboard, err = b.onboardScenario(ctx); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("getmax") {
		if rep.GetMax, err = b.getMaxScenario(ctx); err != nil {
			return nil, err
		}
	}
	if slices.ContainsFunc(webhookScenarios, b.cfg.runs) {
		if rep.Webhooks, err = b.webhookScenario(ctx); err != nil {
			return nil, err
		}
	}
	if b.cfg.runs("tokens") {
		if rep.Tokens, err = b.tokensScenario(ctx); err != nil {
			return nil, err
		}
	}
	if kind := b.floodKind(b.cfg.Scenario); kind != nil {
		if rep.Flood, err = b.floodScenario(ctx, kind); err != nil {
			return nil, err
		}
	}
	rep.LoadAvgEnd = loadAvg()
	return rep, nil
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func passText(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "mountbench %s  base=%s  clients=%d  duration=%s (+%s warm-up)  mounts=%d\n",
		r.Started.Format(time.RFC3339), r.Base, r.Clients, r.Duration, r.Warmup, r.Mounts)
	fmt.Fprintf(w, "machine: %d CPUs, %s, kernel %s; load average at start %.2f %.2f %.2f, at end %.2f %.2f %.2f\n",
		r.CPUs, r.GoVersion, r.Kernel, r.LoadAvgStart[0], r.LoadAvgStart[1], r.LoadAvgStart[2],
		r.LoadAvgEnd[0], r.LoadAvgEnd[1], r.LoadAvgEnd[2])
	if in := r.Ingest; in != nil {
		fmt.Fprintf(w, "\nINGEST  closed loop, %d clients, batches of %d entries\n", in.Clients, in.Batch)
		header(w, "entries/s")
		row(w, in.Server, in.Server.EntriesPerSec)
		if in.Baseline != nil {
			row(w, in.Baseline.Phase, in.Baseline.Phase.EntriesPerSec)
			fmt.Fprintf(w, "  ratio mountd/baseline: throughput %.3f, p50 %.2fx, p99 %.2fx\n", in.ThroughputRatio, in.P50Ratio, in.P99Ratio)
			fmt.Fprintf(w, "  baseline rows: inserted %d, counted %d, lost %d\n", in.Baseline.Expected, in.Baseline.Counted, in.Baseline.Lost)
		}
		fmt.Fprintf(w, "  mountd entries (warm-up included): accepted %d, counted in mount_states %d, lost %d, extra %d, duplicates %d\n",
			in.Expected, in.Counted, in.Lost, in.Extra, in.Duplicates)
		fmt.Fprintf(w, "  target >= %.0f entries/s, no error, none lost: %s\n", in.TargetEntriesPerSec, passText(in.Pass))
	}
	if sg := r.Signed; sg != nil {
		fmt.Fprintf(w, "\nSIGNED  closed loop, %d clients, batches of %d entries: unsigned and signed reports in alternating rounds\n", sg.Clients, sg.Batch)
		header(w, "entries/s")
		row(w, sg.Unsigned, sg.Unsigned.EntriesPerSec)
		row(w, sg.Signed, sg.Signed.EntriesPerSec)
		fmt.Fprintf(w, "  ratio signed/unsigned %.3f (target >= %.1f); entries stored verified %d (signed accepted %d, warm-up excluded)\n",
			sg.Ratio, sg.Target, sg.Verified, sg.Signed.Accepted)
		fmt.Fprintf(w, "  %s\n", passText(sg.Pass))
	}
	if rl := r.Rules; rl != nil {
		values := "every code sweeping its range (rules raise and clear all the time)"
		if rl.Steady {
			values = "values in a band (no rule's state changes)"
		}
		fmt.Fprintf(w, "\nRULES  closed loop, %d clients, batches of %d entries, %s: without and with %d enabled alarm rules in alternating rounds\n", rl.Clients, rl.Batch, values, rl.Rules)
		header(w, "entries/s")
		row(w, rl.None, rl.None.EntriesPerSec)
		row(w, rl.With, rl.With.EntriesPerSec)
		fmt.Fprintf(w, "  ratio with/without %.3f (target >= %.1f): %s\n", rl.Ratio, rl.Target, passText(rl.Pass))
	}
	if g := r.Get; g != nil {
		fmt.Fprintf(w, "\nGET /api/v1/mounts/{uid}  open loop at %.0f/s, %d clients, %d-byte answers; latency from the due time\n", g.Rate, g.Clients, g.BodyBytes)
		header(w, "req/s")
		row(w, g.Server, g.Server.RequestsPerSec)
		if g.Baseline != nil {
			row(w, *g.Baseline, g.Baseline.RequestsPerSec)
			fmt.Fprintf(w, "  ratio mountd/baseline: p50 %.2fx, p99 %.2fx, p999 %.2fx\n", g.P50Ratio, g.P99Ratio, g.P999Ratio)
		}
		for _, p := range []*phase{&g.Server, g.Baseline} {
			if p != nil && p.Service != nil {
				fmt.Fprintf(w, "  %-8s service time p50 %.2f p99 %.2f ms; send lag p99 %.2f max %.2f ms\n",
					shortName(*p), p.Service.P50, p.Service.P99, p.SendLag.P99, p.SendLag.Max)
			}
		}
		fmt.Fprintf(w, "  target p99 <= %.0f ms at %.0f/s, no error: %s\n", g.TargetP99Ms, g.Rate, passText(g.Pass))
	}
	if o := r.Onboard; o != nil {
		fmt.Fprintf(w, "\nONBOARD  closed loop, %d clients: POST /mounts, confirm-association, first report (4 entries) per new mount\n", o.Clients)
		header(w, "mounts/s")
		row(w, o.Server, o.Server.RequestsPerSec)
		if o.Baseline != nil {
			row(w, *o.Baseline, o.Baseline.RequestsPerSec)
			fmt.Fprintf(w, "  ratio mountd/store alone: throughput %.3f\n", o.Ratio)
		}
		fmt.Fprintf(w, "  mountd (warm-up included): acknowledged %d, associated %d, entries stored %d, lost %d\n",
			o.Acknowledged, o.Associated, o.Stored, o.Lost)
		fmt.Fprintf(w, "  target >= %.0f mounts/s, no error, none lost: %s\n", o.TargetPerSec, passText(o.Pass))
	}
	if r.GetMax != nil {
		r.GetMax.print(w)
	}
	if r.Flood != nil {
		r.Flood.print(w)
	}
	if r.Webhooks != nil {
		r.Webhooks.print(w)
	}
	if r.Tokens != nil {
		r.Tokens.print(w)
	}
}

func header(w io.Writer, unit string) {
	fmt.Fprintf(w, "  %-9s %10s %8s %8s %8s %8s %8s %6s  %-6s %s\n", "target", unit, "req/s", "p50 ms", "p99 ms", "p999 ms", "max ms", "errors", "load", "CPU % of one core")
}

func row(w io.Writer, p phase, rate float64) {
	names := make([]string, 0, len(p.CPU))
	for n := range p.CPU {
		if n != machineKey && n != "other" && n != stealKey {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	names = append(names, "other", stealKey, machineKey)
	var cpu []string
	for _, n := range names {
		if v, ok := p.CPU[n]; ok {
			cpu = append(cpu, fmt.Sprintf("%s %.0f", n, v))
		}
	}
	fmt.Fprintf(w, "  %-9s %10.1f %8.1f %8.2f %8.2f %8.2f %8.2f %6d  %-6.2f %s\n", shortName(p), rate, p.RequestsPerSec,
		p.Latency.P50, p.Latency.P99, p.Latency.P999, p.Latency.Max, p.Errors, p.LoadAvg[0], strings.Join(cpu, ", "))
	if p.Errors > 0 {
		fmt.Fprintf(w, "            failures %v; first: %s\n", p.Statuses, p.FirstError)
	}
}

func shortName(p phase) string {
	if strings.HasPrefix(p.Target, "baseline") {
		return "baseline"
	}
	if strings.HasPrefix(p.Target, "mountd-b") {
		return "mountd-b"
	}
	return "mountd"
}
