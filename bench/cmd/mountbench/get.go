package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// runGet drives GET {base}/api/v1/mounts/{uid} open loop: request i is due
// at start + i/rate whatever happened to earlier ones, and a free client
// sends it. Latency counts from the due time, so time spent waiting for a
// free client or a late dispatcher is part of it (no coordinated omission);
// service time (from the actual send) and the send lag are kept beside it.
func (b *bench) runGet(ctx context.Context, target, base string, d time.Duration) phase {
	return b.runGetAt(ctx, target, base, d, b.cfg.Rate)
}

// runGetAt is runGet at the given rate; rate 0 is a closed loop: each
// client sends its next request as soon as it has the answer, and latency
// is the service time.
func (b *bench) runGetAt(ctx context.Context, target, base string, d time.Duration, rate float64) phase {
	closed := rate <= 0
	token := b.token
	if t, ok := b.tokens[base]; ok {
		token = t
	}
	ph := phase{Target: target, LoadAvg: loadAvg(), Statuses: map[string]int{}}
	paths := make([]string, len(b.uids))
	for i, uid := range b.uids {
		paths[i] = "/api/v1/mounts/" + uid
	}
	u, err := url.Parse(base)
	if err != nil {
		ph.FirstError = err.Error()
		return ph
	}
	host := u.Host
	due := make(chan time.Time, b.cfg.Clients)
	var (
		mu                  sync.Mutex
		lats, service, lags []time.Duration
		seq                 atomic.Int64
		wg                  sync.WaitGroup
	)
	cpu0 := b.cpu.sample()
	start := time.Now()
	go func() {
		defer close(due)
		if closed {
			for ctx.Err() == nil && time.Since(start) < d {
				due <- time.Time{}
			}
			return
		}
		interval := float64(time.Second) / rate
		for i := 0; ; i++ {
			at := start.Add(time.Duration(float64(i) * interval))
			if at.Sub(start) >= d || ctx.Err() != nil {
				return
			}
			if wait := time.Until(at); wait > 0 {
				time.Sleep(wait)
			}
			due <- at
		}
	}()
	for range b.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local, localService, localLag []time.Duration
			statuses := map[string]int{}
			var firstErr string
			conn := &getConn{addr: host, timeout: b.cfg.Timeout}
			defer conn.close()
			for at := range due {
				if closed {
					at = time.Now()
				}
				path := paths[(seq.Add(1)-1)%int64(len(paths))]
				sent := time.Now()
				status, err := conn.get(path, token)
				done := time.Now()
				local = append(local, done.Sub(at))
				localService = append(localService, done.Sub(sent))
				localLag = append(localLag, sent.Sub(at))
				if err != nil {
					statuses[status]++
					if firstErr == "" {
						firstErr = err.Error()
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lats = append(lats, local...)
			service = append(service, localService...)
			lags = append(lags, localLag...)
			for k, v := range statuses {
				ph.Statuses[k] += v
				ph.Errors += v
			}
			if ph.FirstError == "" {
				ph.FirstError = firstErr
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ph.CPU = cpuSpan(cpu0, b.cpu.sample(), elapsed)
	ph.Seconds = round(elapsed.Seconds(), 3)
	ph.Requests = len(lats)
	ph.RequestsPerSec = round(float64(ph.Requests)/elapsed.Seconds(), 1)
	ph.Latency = summarize(lats)
	s, l := summarize(service), summarize(lags)
	ph.Service, ph.SendLag = &s, &l
	return ph
}

// getConn is one client's keep-alive connection. It writes the request and
// reads the answer in the calling goroutine: net/http's client hands every
// request to two goroutines of its connection, and on two shared cores those
// wake-ups made the load generator cost nearly as much CPU as the server it
// measured (39–40 % of a core at 2,000 GET/s against mountd, 29 % this way).
type getConn struct {
	addr    string
	timeout time.Duration
	conn    net.Conn
	br      *bufio.Reader
	req     []byte
}

// get sends GET path and reads the whole answer; any failure drops the
// connection, so the next request dials a fresh one.
func (c *getConn) get(path, token string) (string, error) {
	if c.conn == nil {
		conn, err := net.DialTimeout("tcp", c.addr, c.timeout)
		if err != nil {
			return "transport", err
		}
		c.conn, c.br = conn, bufio.NewReader(conn)
	}
	_ = c.conn.SetDeadline(time.Now().Add(c.timeout))
	c.req = append(c.req[:0], "GET "...)
	c.req = append(c.req, path...)
	c.req = append(c.req, " HTTP/1.1\r\nHost: "...)
	c.req = append(c.req, c.addr...)
	c.req = append(c.req, "\r\nAccess-Key: "...)
	c.req = append(c.req, token...)
	c.req = append(c.req, "\r\n\r\n"...)
	if _, err := c.conn.Write(c.req); err != nil {
		c.close()
		return "transport", err
	}
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.close()
		return "transport", err
	}
	_, err = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if err != nil {
		c.close()
		return "transport", err
	}
	if res.Close {
		c.close()
	}
	if res.StatusCode != http.StatusOK {
		return strconv.Itoa(res.StatusCode), fmt.Errorf("GET %s: %d", path, res.StatusCode)
	}
	return "", nil
}

func (c *getConn) close() {
	if c.conn != nil {
		_ = c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// getScenario measures GET /api/v1/mounts/{uid} on mountd and on a bare
// net/http handler answering the same bytes, with the identical schedule.
func (b *bench) getScenario(ctx context.Context) (*getReport, error) {
	rep := &getReport{Rate: b.cfg.Rate, Clients: b.cfg.Clients, TargetP99Ms: 5}
	bodies, size, err := b.answers(ctx)
	if err != nil {
		return nil, err
	}
	rep.BodyBytes = size
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		b.runGet(ctx, "mountd (warm-up)", b.cfg.Base, b.cfg.Warmup)
	}
	b.logf("get: measuring mountd at %.0f/s for %s (load %v)", b.cfg.Rate, b.cfg.Duration, loadAvg())
	rep.Server = b.runGet(ctx, "mountd GET /api/v1/mounts/{uid}", b.cfg.Base, b.cfg.Duration)
	rep.Pass = rep.Server.Errors == 0 && rep.Server.Latency.P99 <= rep.TargetP99Ms &&
		rep.Server.RequestsPerSec >= 0.98*b.cfg.Rate
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if !b.cfg.Baseline {
		return rep, nil
	}
	base, stop, err := bareServer(bodies)
	if err != nil {
		return nil, err
	}
	defer stop()
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		b.runGet(ctx, "baseline (warm-up)", base, b.cfg.Warmup)
	}
	b.logf("get: measuring the bare net/http baseline at %.0f/s for %s (load %v)", b.cfg.Rate, b.cfg.Duration, loadAvg())
	ph := b.runGet(ctx, "baseline: bare net/http handler on "+base, base, b.cfg.Duration)
	rep.Baseline = &ph
	if ph.Latency.P50 > 0 {
		rep.P50Ratio = round(rep.Server.Latency.P50/ph.Latency.P50, 2)
		rep.P99Ratio = round(rep.Server.Latency.P99/ph.Latency.P99, 2)
		rep.P999Ratio = round(rep.Server.Latency.P999/ph.Latency.P999, 2)
	}
	return rep, ctx.Err()
}
