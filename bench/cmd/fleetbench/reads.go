package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
)

// figures summarise one kind of read. Latency counts every request sent,
// failed ones at the time they failed (a timeout at the client's timeout).
type figures struct {
	Requests   int               `json:"requests"`
	Errors     int               `json:"errors"`
	ErrorKinds map[string]int    `json:"errorKinds,omitempty"`
	FirstError string            `json:"firstError,omitempty"`
	Latency    benchstat.Latency `json:"latency"`
	// TotalItems is the total of the last answer (-1: none answered).
	TotalItems int `json:"totalItems"`
}

// expressionFigures are one fleet read's figures.
type expressionFigures struct {
	Name   string `json:"name"`
	Filter string `json:"filter"`
	figures
}

// readsReport is the fleet reads against the mountUid= baseline, in
// alternating rounds of one run.
type readsReport struct {
	Rate           float64             `json:"ratePerSec"`
	Clients        int                 `json:"clients"`
	Rounds         int                 `json:"rounds"`
	PhaseSeconds   float64             `json:"phaseSeconds"`
	TimeoutSeconds float64             `json:"timeoutSeconds"`
	Baseline       figures             `json:"baseline"`
	Fleet          figures             `json:"fleet"`
	Expressions    []expressionFigures `json:"expressions"`
	// P99Ms and P50Ms are the fleet reads'; P99Ratio is P99Ms over the
	// baseline's p99.
	P50Ms         float64 `json:"p50Ms"`
	P99Ms         float64 `json:"p99Ms"`
	BaselineP50Ms float64 `json:"baselineP50Ms"`
	BaselineP99Ms float64 `json:"baselineP99Ms"`
	P99Ratio      float64 `json:"p99Ratio"`
	// TotalsErrors counts answers whose pagination.totalItems was wrong
	// (not the seeded fleet's, or not the same as before).
	TotalsErrors     int        `json:"totalsErrors"`
	FirstTotalsError string     `json:"firstTotalsError,omitempty"`
	LoadBefore       [3]float64 `json:"loadAvgBefore"`
	LoadAfter        [3]float64 `json:"loadAvgAfter"`
}

// collector gathers samples by read name, checking totals as they come.
type collector struct {
	ingest  bool
	lats    map[string][]time.Duration
	figs    map[string]*figures
	first   map[string]int
	errors  int
	firstTE string
}

func newCollector(ingest bool) *collector {
	return &collector{ingest: ingest, lats: map[string][]time.Duration{}, figs: map[string]*figures{}, first: map[string]int{}}
}

// add records sample s of probe p under the names given (a fleet read
// counts under its own name and under "fleet").
func (c *collector) add(p probe, s sample, names ...string) {
	for _, name := range names {
		f := c.figs[name]
		if f == nil {
			f = &figures{TotalItems: -1}
			c.figs[name] = f
		}
		f.Requests++
		c.lats[name] = append(c.lats[name], s.Latency)
		if s.Kind != "" {
			f.Errors++
			if f.ErrorKinds == nil {
				f.ErrorKinds = map[string]int{}
			}
			f.ErrorKinds[s.Kind]++
			if f.FirstError == "" {
				f.FirstError = s.Kind + ": " + s.Detail
			}
			continue
		}
		f.TotalItems = s.Total
	}
	if s.Kind != "" {
		return
	}
	first, seen := c.first[p.Name]
	if !seen {
		first = -1
		c.first[p.Name] = s.Total
	}
	if msg := p.check(s.Total, first, c.ingest); msg != "" {
		c.errors++
		if c.firstTE == "" {
			c.firstTE = msg
		}
	}
}

// addAll records the samples of a phase in the order they were due.
func (c *collector) addAll(samples []sample, probeOf func(slot int) probe, names func(p probe) []string) {
	samples = slices.Clone(samples)
	slices.SortFunc(samples, func(a, b sample) int { return a.Slot - b.Slot })
	for _, s := range samples {
		p := probeOf(s.Slot)
		c.add(p, s, names(p)...)
	}
}

func (c *collector) figures(name string) figures {
	f := c.figs[name]
	if f == nil {
		return figures{TotalItems: -1}
	}
	out := *f
	out.Latency = benchstat.Summarize(slices.Clone(c.lats[name]))
	return out
}

// report summarises what was collected.
func (c *collector) report(probes []probe) readsReport {
	r := readsReport{Baseline: c.figures("baseline"), Fleet: c.figures("fleet"), TotalsErrors: c.errors, FirstTotalsError: c.firstTE}
	for _, p := range probes {
		r.Expressions = append(r.Expressions, expressionFigures{Name: p.Name, Filter: p.Filter, figures: c.figures(p.Name)})
	}
	r.P50Ms, r.P99Ms = r.Fleet.Latency.P50, r.Fleet.Latency.P99
	r.BaselineP50Ms, r.BaselineP99Ms = r.Baseline.Latency.P50, r.Baseline.Latency.P99
	if r.BaselineP99Ms > 0 {
		r.P99Ratio = round(r.P99Ms/r.BaselineP99Ms, 3)
	}
	return r
}

// reader sends the reads: one API client per schedule client, each on its
// own connections.
type reader struct {
	apis  []*client.Client
	n     int
	probe []probe
}

func newReader(cfg config, tokens *client.Credentials, n int) *reader {
	r := &reader{n: n, probe: fleetProbes(n)}
	for range cfg.Clients {
		hc := &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
		r.apis = append(r.apis, client.New(cfg.Base, tokens, client.Options{HTTPClient: hc}))
	}
	return r
}

// list reads a page and returns its outcome.
func list(ctx context.Context, api *client.Client, query url.Values) outcome {
	var page struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	err := api.Do(ctx, http.MethodGet, "/mounts?"+query.Encode(), nil, &page)
	if err != nil {
		return failure(err)
	}
	return outcome{Total: page.Pagination.TotalItems}
}

// failure names an error: a timeout, an answer's status, or transport.
func failure(err error) outcome {
	var ne net.Error
	var ce *client.Error
	switch {
	case errors.As(err, &ce):
		return outcome{Kind: "status " + strconv.Itoa(ce.Status), Detail: err.Error()}
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return outcome{Kind: "timeout", Detail: err.Error()}
	}
	return outcome{Kind: "transport", Detail: err.Error()}
}

var baselineProbe = probe{Name: "baseline", expected: 1, atMost: -1}

// baseline is GET /mounts?mountUid= of a random mount of the fleet.
func (r *reader) baseline(ctx context.Context, c, _ int) outcome {
	return list(ctx, r.apis[c], url.Values{"mountUid": {uidOf(rand.IntN(r.n))}})
}

// fleetProbe is the fleet read of slot j: the probes rotate.
func (r *reader) fleetProbe(j int) probe { return r.probe[j%len(r.probe)] }

func (r *reader) fleet(ctx context.Context, c, j int) outcome {
	q := url.Values{"pageSize": {"100"}}
	if f := r.fleetProbe(j).Filter; f != "" {
		q.Set("filter", f)
	}
	return list(ctx, r.apis[c], q)
}

// measureReads alternates the baseline and the fleet reads in rounds (the
// first of the two alternating too, so that a drift of the machine favours
// neither).
func measureReads(ctx context.Context, cfg config, r *reader, ingest bool) readsReport {
	s := schedule{Rate: cfg.Rate, Clients: cfg.Clients, Duration: cfg.Duration}
	c := newCollector(ingest)
	load0 := benchstat.LoadAvg()
	baseline := func() {
		c.addAll(s.run(ctx, 0, r.baseline), func(int) probe { return baselineProbe },
			func(probe) []string { return []string{"baseline"} })
	}
	fleet := func() {
		c.addAll(s.run(ctx, 0, r.fleet), r.fleetProbe, func(p probe) []string { return []string{"fleet", p.Name} })
	}
	for round := range cfg.Rounds {
		benchstat.Quiet{MaxLoad: cfg.MaxLoad, Timeout: 5 * time.Minute}.Wait(ctx, logf)
		logf("round %d of %d (load average %v)", round+1, cfg.Rounds, benchstat.LoadAvg())
		if round%2 == 0 {
			baseline()
			fleet()
		} else {
			fleet()
			baseline()
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep := c.report(r.probe)
	rep.Rate, rep.Clients, rep.Rounds = cfg.Rate, cfg.Clients, cfg.Rounds
	rep.PhaseSeconds, rep.TimeoutSeconds = cfg.Duration.Seconds(), cfg.Timeout.Seconds()
	rep.LoadBefore, rep.LoadAfter = load0, benchstat.LoadAvg()
	return rep
}

// warmUp sends each read a few times unmeasured: the connections, the
// token and PostgreSQL's caches.
func warmUp(ctx context.Context, r *reader) {
	for j := range 2 * len(r.probe) {
		r.fleet(ctx, j%len(r.apis), j)
		r.baseline(ctx, j%len(r.apis), j)
	}
}
