package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// getMaxReport is the getmax scenario: the most GET /api/v1/mounts/{uid}
// answered per second in a closed loop, by mountd, by a second mountd
// (--base-b, an A/B of two builds) and by the bare handler, in alternating
// rounds, so that a drift of the shared machine falls on all alike.
type getMaxReport struct {
	Clients   int      `json:"clients"`
	Rounds    int      `json:"rounds"`
	BodyBytes int      `json:"bodyBytes"`
	Server    phase    `json:"server"`
	B         *phase   `json:"b,omitempty"`
	Baseline  phase    `json:"baseline"`
	Ratio     float64  `json:"ratio"`
	RatioB    float64  `json:"ratioB,omitempty"`
	PerRound  []string `json:"perRound"`
}

// getMaxScenario runs --rounds rounds of mountd, B and the bare handler,
// each --duration/--rounds long, in an order that rotates each round.
func (b *bench) getMaxScenario(ctx context.Context) (*getMaxReport, error) {
	bodies, size, err := b.answers(ctx)
	if err != nil {
		return nil, err
	}
	bare, stop, err := bareServer(bodies)
	if err != nil {
		return nil, err
	}
	defer stop()
	rep := &getMaxReport{Clients: b.cfg.Clients, Rounds: b.cfg.roundsOr(6), BodyBytes: size}
	type arm struct {
		name, base string
		sum        *phase
	}
	arms := []arm{{"mountd", b.cfg.Base, &rep.Server}, {"baseline", bare, &rep.Baseline}}
	if b.cfg.BaseB != "" {
		tok, err := b.fetchTokenAt(ctx, b.cfg.BaseB, b.clientID, b.clientSecret, b.cfg.Scope)
		if err != nil {
			return nil, fmt.Errorf("--base-b: %w", err)
		}
		b.tokens = map[string]string{b.cfg.BaseB: tok}
		rep.B = &phase{}
		arms = append(arms, arm{"mountd-b", b.cfg.BaseB, rep.B})
	}
	for _, a := range arms {
		a.sum.Target = a.name + " " + a.base
		a.sum.Statuses = map[string]int{}
	}
	each := b.cfg.Duration / time.Duration(b.cfg.roundsOr(6))
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		for _, a := range arms {
			b.runGetAt(ctx, a.name+" (warm-up)", a.base, b.cfg.Warmup, 0)
		}
	}
	for round := range b.cfg.roundsOr(6) {
		line := fmt.Sprintf("round %d:", round+1)
		for i := range arms {
			a := arms[(i+round)%len(arms)]
			ph := b.runGetAt(ctx, a.name, a.base, each, 0)
			merge(a.sum, ph)
			line += fmt.Sprintf(" %s %.0f/s", a.name, ph.RequestsPerSec)
		}
		rep.PerRound = append(rep.PerRound, line)
		b.logf("getmax: %s", line)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for _, a := range arms {
		a.sum.RequestsPerSec = round(float64(a.sum.Requests)/a.sum.Seconds, 1)
	}
	if rep.Baseline.RequestsPerSec > 0 {
		rep.Ratio = round(rep.Server.RequestsPerSec/rep.Baseline.RequestsPerSec, 3)
		if rep.B != nil {
			rep.RatioB = round(rep.B.RequestsPerSec/rep.Baseline.RequestsPerSec, 3)
		}
	}
	return rep, nil
}

// merge adds a round's counts to an arm's sum; latency and CPU are those of
// the round with the median throughput so far (the last one kept wins ties).
func merge(sum *phase, ph phase) {
	sum.Seconds = round(sum.Seconds+ph.Seconds, 3)
	sum.Requests += ph.Requests
	sum.Errors += ph.Errors
	for k, v := range ph.Statuses {
		sum.Statuses[k] += v
	}
	if sum.FirstError == "" {
		sum.FirstError = ph.FirstError
	}
	sum.LoadAvg = ph.LoadAvg
	sum.Latency = ph.Latency
	sum.CPU = ph.CPU
}

// answers fetches each mount's answer from mountd: the bytes the bare
// handler serves.
func (b *bench) answers(ctx context.Context) (map[string][]byte, int, error) {
	bodies := make(map[string][]byte, len(b.uids))
	size := 0
	for _, uid := range b.uids {
		status, body, err := b.api(ctx, http.MethodGet, "/api/v1/mounts/"+uid, nil)
		if err != nil || status != http.StatusOK {
			return nil, 0, fmt.Errorf("GET /api/v1/mounts/%s: %d %s %v", uid, status, body, err)
		}
		bodies[uid] = body
		size = len(body)
	}
	return bodies, size, nil
}

func (r *getMaxReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nGET /api/v1/mounts/{uid}  closed loop, %d clients, %d-byte answers, %d alternating rounds\n", r.Clients, r.BodyBytes, r.Rounds)
	header(w, "req/s")
	row(w, r.Server, r.Server.RequestsPerSec)
	if r.B != nil {
		row(w, *r.B, r.B.RequestsPerSec)
	}
	row(w, r.Baseline, r.Baseline.RequestsPerSec)
	for _, l := range r.PerRound {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "  ratio mountd/baseline: %.3f", r.Ratio)
	if r.B != nil {
		fmt.Fprintf(w, "; mountd-b/baseline: %.3f", r.RatioB)
	}
	fmt.Fprintln(w)
}
