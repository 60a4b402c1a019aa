package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

// floodReport is one flood scenario (floods.go names them): GET
// /api/v1/mounts/{uid} open loop at --rate, once alone (the baseline) and
// once while --flood-clients send the scenario's hostile requests in a
// closed loop, each from its own loopback source address (so per-address
// limits see many callers), with mountd's resident memory sampled
// throughout.
type floodReport struct {
	Kind         string             `json:"kind"`
	Attack       string             `json:"attack"`
	Rate         float64            `json:"rate"`
	FloodClients int                `json:"floodClients"`
	Sources      int                `json:"sourceAddresses"`
	Baseline     phase              `json:"baseline"`
	Server       phase              `json:"underFlood"`
	Flood        floodCounts        `json:"flood"`
	RSSBeforeMiB float64            `json:"rssBeforeMiB"`
	RSSPeakMiB   float64            `json:"rssPeakMiB"`
	RSSAfterMiB  float64            `json:"rssAfterMiB"`
	P99Ratio     float64            `json:"p99Ratio,omitempty"`
	Figures      map[string]float64 `json:"figures,omitempty"`
	TargetP99Ms  float64            `json:"targetP99Ms"`
	TargetRSSMiB float64            `json:"targetRssMiB"`
	Pass         bool               `json:"pass"`
}

// floodCounts are the flood's requests by answer.
type floodCounts struct {
	Requests int            `json:"requests"`
	PerSec   float64        `json:"requestsPerSec"`
	ByStatus map[string]int `json:"byStatus"`
}

func (b *bench) floodScenario(ctx context.Context, kind *floodKind) (*floodReport, error) {
	rep := &floodReport{Kind: kind.name, Attack: kind.attack, Rate: b.cfg.Rate, FloodClients: b.cfg.FloodClients,
		Sources: b.cfg.FloodSources, TargetP99Ms: 20, TargetRSSMiB: 200, Figures: map[string]float64{}}
	pid := 0
	for _, p := range b.cpu.procs {
		if p.name == "mountd" {
			pid = p.pid
		}
	}
	if pid == 0 {
		return nil, fmt.Errorf("%s needs --watch mountd=PID to read its resident memory", kind.name)
	}
	if kind.prepare != nil {
		if err := kind.prepare(ctx, rep); err != nil {
			return nil, fmt.Errorf("%s: %w", kind.name, err)
		}
	}
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		b.runGet(ctx, "mountd (warm-up)", b.cfg.Base, b.cfg.Warmup)
	}
	b.logf("%s: GET alone at %.0f/s for %s", kind.name, b.cfg.Rate, b.cfg.Duration)
	rep.Baseline = b.runGet(ctx, "baseline: GET /api/v1/mounts/{uid} without the flood", b.cfg.Base, b.cfg.Duration)
	rep.RSSBeforeMiB = rssMiB(pid)

	floodCtx, stopFlood := context.WithCancel(ctx)
	var peak atomic.Uint64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if v := uint64(rssMiB(pid) * 1024); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-floodCtx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	counts := make(chan map[string]int, b.cfg.FloodClients)
	floodStart := time.Now()
	var wg sync.WaitGroup
	for i := range b.cfg.FloodClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts <- b.rawFlood(floodCtx, i%b.cfg.FloodSources, kind.request)
		}()
	}
	time.Sleep(time.Second) // let the flood reach its steady state
	b.logf("%s: GET at %.0f/s for %s under %d flood clients (%s)", kind.name, b.cfg.Rate, b.cfg.Duration, b.cfg.FloodClients, kind.attack)
	rep.Server = b.runGet(ctx, "mountd GET /api/v1/mounts/{uid} under the flood", b.cfg.Base, b.cfg.Duration)
	stopFlood()
	wg.Wait()
	<-sampled
	close(counts)
	rep.Flood.ByStatus = map[string]int{}
	for c := range counts {
		for k, v := range c {
			rep.Flood.ByStatus[k] += v
			rep.Flood.Requests += v
		}
	}
	rep.Flood.PerSec = round(float64(rep.Flood.Requests)/time.Since(floodStart).Seconds(), 1)
	rep.RSSPeakMiB = round(float64(peak.Load())/1024, 1)
	time.Sleep(2 * time.Second)
	rep.RSSAfterMiB = rssMiB(pid)
	if rep.Baseline.Latency.P99 > 0 {
		rep.P99Ratio = round(rep.Server.Latency.P99/rep.Baseline.Latency.P99, 2)
	}
	if kind.finish != nil {
		if err := kind.finish(ctx, rep); err != nil {
			return nil, fmt.Errorf("%s: %w", kind.name, err)
		}
	}
	rep.Pass = rep.Server.Errors == 0 && rep.Server.Latency.P99 <= rep.TargetP99Ms && rep.RSSPeakMiB < rep.TargetRSSMiB
	if kind.pass != nil {
		rep.Pass = rep.Pass && kind.pass(rep)
	}
	return rep, ctx.Err()
}

// rawFlood sends the requests that build makes, over one keep-alive
// connection at a time from 127.0.1.(source+1), until ctx ends, and counts
// the answers by status ("transport" for a connection that failed). Raw
// bytes, because some floods (invented methods, huge URLs) are not requests
// net/http's client would send.
func (b *bench) rawFlood(ctx context.Context, source int, build func(host string) []byte) map[string]int {
	counts := map[string]int{}
	u, _ := url.Parse(b.cfg.Base)
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(source%250+1))}
	dialer := net.Dialer{LocalAddr: local, Timeout: b.cfg.Timeout}
	var (
		conn net.Conn
		br   *bufio.Reader
	)
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for ctx.Err() == nil {
		if conn == nil {
			c, err := dialer.DialContext(ctx, "tcp", u.Host)
			if err != nil {
				counts["dial"]++
				time.Sleep(10 * time.Millisecond)
				continue
			}
			conn, br = c, bufio.NewReader(c)
		}
		_ = conn.SetDeadline(time.Now().Add(b.cfg.Timeout))
		if _, err := conn.Write(build(u.Host)); err != nil {
			counts["transport"]++
			conn.Close()
			conn = nil
			continue
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			if ctx.Err() == nil {
				counts["transport"]++
			}
			conn.Close()
			conn = nil
			continue
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		counts[strconv.Itoa(res.StatusCode)]++
		if res.Close {
			conn.Close()
			conn = nil
		}
	}
	return counts
}

// tokenRequest is a wrong-secret token request for a made-up client id
// (which costs the server what a wrong secret does).
func tokenRequest(host string) []byte {
	var id [6]byte
	_, _ = rand.Read(id[:])
	form := "grant_type=client_credentials&client_id=cli_flood_" + hex.EncodeToString(id[:]) + "&client_secret=wrong-secret"
	return []byte("POST /oauth/v2/token HTTP/1.1\r\nHost: " + host + "\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
		strconv.Itoa(len(form)) + "\r\n\r\n" + form)
}

// rssMiB reads a process's resident set size.
func rssMiB(pid int) float64 {
	b, err := benchstat.RSS(pid)
	if err != nil {
		return 0
	}
	return round(float64(b)/(1<<20), 1)
}

func (r *floodReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nFLOOD %s  %d clients of %s from %d loopback addresses; GET /api/v1/mounts/{uid} open loop at %.0f/s\n",
		r.Kind, r.FloodClients, r.Attack, r.Sources, r.Rate)
	header(w, "req/s")
	row(w, r.Baseline, r.Baseline.RequestsPerSec)
	row(w, r.Server, r.Server.RequestsPerSec)
	fmt.Fprintf(w, "  GET p99 under the flood / alone: %.2fx\n", r.P99Ratio)
	fmt.Fprintf(w, "  flood: %d requests (%.0f/s) by status %v\n", r.Flood.Requests, r.Flood.PerSec, r.Flood.ByStatus)
	fmt.Fprintf(w, "  mountd RSS: before %.1f MiB, peak %.1f MiB, 2 s after %.1f MiB\n", r.RSSBeforeMiB, r.RSSPeakMiB, r.RSSAfterMiB)
	names := make([]string, 0, len(r.Figures))
	for n := range r.Figures {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %s: %s\n", n, strconv.FormatFloat(r.Figures[n], 'f', -1, 64))
	}
	fmt.Fprintf(w, "  target GET p99 <= %.0f ms, no error, RSS < %.0f MiB: %s\n", r.TargetP99Ms, r.TargetRSSMiB, passText(r.Pass))
}
