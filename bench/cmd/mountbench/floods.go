package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/core"
)

// floodKind is one flood scenario: what its clients send, what it sets up
// first and what it measures after the flood beside latency and memory.
type floodKind struct {
	name    string
	attack  string
	request func(host string) []byte
	prepare func(ctx context.Context, rep *floodReport) error
	finish  func(ctx context.Context, rep *floodReport) error
	pass    func(rep *floodReport) bool
}

// floodScenarios are the scenarios that measure a flood: each one a way
// found to hurt the server from outside, measured as its cost to a valid
// client's GET and to mountd's memory.
var floodScenarios = []string{"tokenflood", "graphqlflood", "headerflood", "methodflood", "authorizeflood", "rateflood"}

func (b *bench) floodKind(name string) *floodKind {
	switch name {
	case "tokenflood":
		return &floodKind{name: name, attack: "wrong-secret token requests", request: tokenRequest}
	case "graphqlflood":
		return b.graphqlFlood()
	case "headerflood":
		return b.headerFlood()
	case "methodflood":
		return b.methodFlood()
	case "authorizeflood":
		return b.authorizeFlood()
	case "rateflood":
		return b.rateFlood()
	}
	return nil
}

// graphqlFlood: a rider's token asks for its mount's event log twenty times
// in one query (aliases), over reports of 500 entries each: one request
// that would build an answer of about 136 MB if the server let it.
func (b *bench) graphqlFlood() *floodKind {
	k := &floodKind{name: "graphqlflood", attack: "GraphQL queries of 20 aliased events(limit: 1000) with a restricted token"}
	var (
		rider string
		body  []byte
	)
	var q strings.Builder
	q.WriteString("{")
	for i := range 20 {
		fmt.Fprintf(&q, " a%d: events(limit: 1000) { events { id type occurredAt states { code value occurredAt receivedAt } } next }", i)
	}
	q.WriteString(" }")
	body, _ = json.Marshal(map[string]string{"query": q.String()})
	k.prepare = func(ctx context.Context, rep *floodReport) error {
		uid := b.uids[0]
		g := newGenerator(500, time.Now().Add(-time.Hour))
		var buf []byte
		for range 20 {
			buf = g.appendBody(buf[:0], g.next(0))
			if status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/mounts/"+uid+"/states", buf); err != nil || status != http.StatusOK {
				return fmt.Errorf("report of 500 entries: %d %s %v", status, raw, err)
			}
		}
		var err error
		rider, err = b.fetchTokenScope(ctx, b.clientID, b.clientSecret, b.cfg.Scope+" role:restricted mount:"+uid)
		if err != nil {
			return err
		}
		// One request alone first: what a single such query costs.
		start := time.Now()
		status, n, err := b.rawOnce(ctx, k.request(strings.TrimPrefix(b.cfg.Base, "http://")))
		if err != nil {
			return err
		}
		rep.Figures["oneQueryStatus"] = float64(status)
		rep.Figures["oneQueryAnswerBytes"] = float64(n)
		rep.Figures["oneQuerySeconds"] = round(time.Since(start).Seconds(), 3)
		return nil
	}
	k.request = func(host string) []byte {
		return []byte("POST /graphql HTTP/1.1\r\nHost: " + host + "\r\nAccess-Key: " + rider +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
	}
	return k
}

// headerFlood: the account's 20 webhooks point at a receiver that answers
// every delivery with 9 MiB of short header lines, while the flood clients
// report states (each report is 20 deliveries). Needs the server started
// with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true, since the receiver is on loopback.
func (b *bench) headerFlood() *floodKind {
	k := &floodKind{name: "headerflood", attack: "state reports fanned out to 20 webhooks whose receiver answers with 9 MiB of headers"}
	var (
		mu   sync.Mutex
		seq  int
		gen  = newGenerator(1, time.Now().Add(-time.Hour))
		stop func()
	)
	k.prepare = func(ctx context.Context, rep *floodReport) error {
		addr, closeReceiver, err := hostileReceiver(9 << 20)
		if err != nil {
			return err
		}
		stop = closeReceiver
		for i := range 20 {
			in, _ := json.Marshal(map[string]any{"url": "http://" + addr + "/hook/" + strconv.Itoa(i), "eventTypes": []string{"STATES_REPORTED"}})
			status, raw, err := b.api(ctx, http.MethodPost, "/api/v1/webhooks", in)
			if err != nil {
				return err
			}
			if status != http.StatusOK {
				return fmt.Errorf("POST /api/v1/webhooks: %d %s (start mountd with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true)", status, raw)
			}
		}
		return nil
	}
	k.request = func(host string) []byte {
		mu.Lock()
		seq++
		i := seq
		mu.Unlock()
		body := gen.appendBody(nil, gen.next(i))
		return []byte("POST /api/v1/mounts/" + b.uids[i%len(b.uids)] + "/states HTTP/1.1\r\nHost: " + host + "\r\nAccess-Key: " + b.token +
			"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + string(body))
	}
	k.finish = func(ctx context.Context, rep *floodReport) error {
		stop()
		return nil
	}
	return k
}

// hostileReceiver answers every request with headerBytes of short header
// lines and then closes the connection.
func hostileReceiver(headerBytes int) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	line := "X-Pad: a\r\n"
	answer := []byte("HTTP/1.1 200 OK\r\n" + strings.Repeat(line, headerBytes/len(line)) + "Content-Length: 0\r\nConnection: close\r\n\r\n")
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
				req, err := http.ReadRequest(bufio.NewReader(conn))
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, req.Body)
				_, _ = conn.Write(answer)
			}()
		}
	}()
	return ln.Addr().String(), func() { ln.Close() }, nil
}

// methodFlood: unauthenticated requests, each with a method name never
// seen before. Afterwards it scrapes /metrics once and reports its size.
func (b *bench) methodFlood() *floodKind {
	k := &floodKind{name: "methodflood", attack: "unauthenticated requests with invented HTTP methods"}
	k.request = func(host string) []byte {
		var id [6]byte
		_, _ = rand.Read(id[:])
		return []byte("M" + strings.ToUpper(hex.EncodeToString(id[:])) + " /api/v1/mounts HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
	}
	k.finish = func(ctx context.Context, rep *floodReport) error {
		start := time.Now()
		res, err := b.client.Get(b.cfg.Base + "/metrics")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		raw, err := io.ReadAll(res.Body)
		if err != nil {
			return err
		}
		series := 0
		for _, l := range strings.Split(string(raw), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				series++
			}
		}
		rep.Figures["metricsBytes"] = float64(len(raw))
		rep.Figures["metricsSeries"] = float64(series)
		rep.Figures["metricsScrapeSeconds"] = round(time.Since(start).Seconds(), 3)
		return nil
	}
	return k
}

// authorizeFlood: unauthenticated sign-ins started and never finished,
// each with a 60 KB state. It reports how much the database grew.
func (b *bench) authorizeFlood() *floodKind {
	k := &floodKind{name: "authorizeflood", attack: "unfinished sign-ins (GET /oauth/v2/authorize) with a 60 KB state"}
	state := strings.Repeat("s", 60_000)
	challenge := strings.Repeat("c", 43)
	var before int64
	dbSize := func(ctx context.Context) (int64, error) {
		var n int64
		err := b.db.QueryRowContext(ctx, "SELECT pg_database_size(current_database())").Scan(&n)
		return n, err
	}
	k.prepare = func(ctx context.Context, rep *floodReport) (err error) {
		before, err = dbSize(ctx)
		return err
	}
	// Every request is the same: built once, so that the flood's own
	// cost stays on the server's side of the machine.
	q := url.Values{"client_id": {"mountd-console"}, "redirect_uri": {b.cfg.Base + "/console/"}, "response_type": {"code"},
		"scope": {"openid"}, "code_challenge": {challenge}, "code_challenge_method": {"S256"}, "state": {state}}
	req := []byte("GET /oauth/v2/authorize?" + q.Encode() + " HTTP/1.1\r\nHost: " + strings.TrimPrefix(b.cfg.Base, "http://") + "\r\n\r\n")
	k.request = func(string) []byte { return req }
	k.finish = func(ctx context.Context, rep *floodReport) error {
		after, err := dbSize(ctx)
		if err != nil {
			return err
		}
		rep.Figures["databaseGrowthMiB"] = round(float64(after-before)/(1<<20), 1)
		return nil
	}
	return k
}

// rateFlood: with MOUNTD_RATE_LIMIT set (e.g. 1200/m), the valid client's
// GETs at --rate (below the limit: 15/s is 900 a minute) must all be
// admitted while a second account floods past its own limit; then the
// valid account sends 50 requests at once, which its limit still holds.
func (b *bench) rateFlood() *floodKind {
	k := &floodKind{name: "rateflood", attack: "another account's requests past its rate limit"}
	var other string
	k.prepare = func(ctx context.Context, rep *floodReport) error {
		store, closeStore, err := bunstore.Open(ctx, b.cfg.DatabaseURL)
		if err != nil {
			return err
		}
		acc, err := core.NewAccountService(store, nil).Create(ctx, "mountbench flood "+b.runID)
		closeStore()
		if err != nil {
			return err
		}
		other, err = b.fetchTokenScope(ctx, acc.ClientID, acc.ClientSecret, b.cfg.Scope)
		return err
	}
	k.request = func(host string) []byte {
		return []byte("GET /api/v1/mounts?pageSize=1 HTTP/1.1\r\nHost: " + host + "\r\nAccess-Key: " + other + "\r\n\r\n")
	}
	k.finish = func(ctx context.Context, rep *floodReport) error {
		limited, remaining := 0, -1
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, b.cfg.Base+"/api/v1/mounts/"+b.uids[0], nil)
				req.Header.Set("Access-Key", b.token)
				res, err := b.client.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				if res.StatusCode == http.StatusTooManyRequests {
					limited++
				}
				if r, err := strconv.Atoi(res.Header.Get("X-RateLimit-Remaining")); err == nil && (remaining < 0 || r < remaining) {
					remaining = r
				}
			}()
		}
		wg.Wait()
		if remaining < 0 {
			return errors.New("no X-RateLimit-Remaining in the answers: start mountd with MOUNTD_RATE_LIMIT (e.g. 1200/m)")
		}
		rep.Figures["burstOf50Refused"] = float64(limited)
		rep.Figures["burstOf50LowestRemaining"] = float64(remaining)
		return nil
	}
	k.pass = func(rep *floodReport) bool { return rep.Baseline.Errors == 0 && rep.Figures["burstOf50Refused"] == 0 }
	return k
}

// rawOnce sends one raw request on a fresh connection and returns the
// answer's status and its body's size.
func (b *bench) rawOnce(ctx context.Context, req []byte) (int, int64, error) {
	u, _ := url.Parse(b.cfg.Base)
	conn, err := (&net.Dialer{Timeout: b.cfg.Timeout}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := conn.Write(req); err != nil {
		return 0, 0, err
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	n, err := io.Copy(io.Discard, res.Body)
	return res.StatusCode, n, err
}
