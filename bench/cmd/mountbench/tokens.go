package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/core"
)

// tokensReport is the tokens scenario: --token-clients clients, each from
// a loopback address of its own (127.0.2.x), renew a client-credentials
// token every --renew-every on a schedule spread evenly over the period
// (open loop: latency from the due time), while wrong secrets arrive at
// --wrong-rate a second from other addresses (127.0.1.x), half naming the
// clients' ids and half made-up ones. With --base-b the other build gets
// the same load in alternating rounds, each build with clients of its
// own: secrets are written straight into the database as argon2id, as an
// older version stored them, and a build that rehashes them must not
// change the other's.
type tokensReport struct {
	Clients     int          `json:"clients"`
	RenewEvery  string       `json:"renewEvery"`
	WrongPerSec float64      `json:"wrongPerSec"`
	Rounds      int          `json:"rounds"`
	Arms        []*tokensArm `json:"arms"`
	PerRound    []string     `json:"perRound"`
	Pass        bool         `json:"pass"`
}

// tokensArm is one build's share of the scenario.
type tokensArm struct {
	Name string `json:"name"`
	Base string `json:"base"`
	// Honest are the clients' renewals; Refused those answered 503 or 429.
	Honest  phase `json:"honest"`
	Refused int   `json:"honestRefused"`
	// Wrong counts the wrong secrets' answers by status.
	Wrong map[string]int `json:"wrongByStatus"`
	// StoredHMAC is how many of the arm's clients have their secret stored
	// as HMAC after the run.
	StoredHMAC int `json:"storedAsHmac"`
	// Steady are the renewals of rounds that began with every secret of the
	// arm stored as HMAC (after the upgrade's rehashing); SteadyRefused
	// those refused.
	Steady        phase `json:"steady"`
	SteadyRounds  int   `json:"steadyRounds"`
	SteadyRefused int   `json:"steadyRefused"`

	clients []core.NewAccount
	honest  []*http.Client
	wrong   []*http.Client
	// clock is how much of the renewal schedule earlier rounds covered.
	clock time.Duration
}

// tokenClient is an HTTP client whose connections come from 127.0.last.(i%250+1).
func tokenClient(last byte, i int, timeout time.Duration) *http.Client {
	local := &net.TCPAddr{IP: net.IPv4(127, 0, last, byte(i%250+1))}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     2 * time.Minute,
		DialContext:         (&net.Dialer{LocalAddr: local, Timeout: 5 * time.Second}).DialContext,
	}}
}

func (b *bench) tokensScenario(ctx context.Context) (*tokensReport, error) {
	rep := &tokensReport{Clients: b.cfg.TokenClients, RenewEvery: b.cfg.RenewEvery.String(), WrongPerSec: b.cfg.WrongRate, Rounds: b.cfg.roundsOr(3)}
	bases := []struct{ name, base string }{{"mountd", b.cfg.Base}}
	if b.cfg.BaseB != "" {
		bases = append(bases, struct{ name, base string }{"mountd-b", b.cfg.BaseB})
	}
	accounts := core.NewAccountService(b.store, nil) // argon2id, as an older version stored secrets
	for _, s := range bases {
		arm := &tokensArm{Name: s.name, Base: s.base, Wrong: map[string]int{}}
		arm.Honest = phase{Target: s.name + " " + s.base, Statuses: map[string]int{}}
		arm.Steady = phase{Target: s.name + " " + s.base, Statuses: map[string]int{}}
		start := time.Now()
		created := make([]core.NewAccount, b.cfg.TokenClients)
		errs := make(chan error, len(created))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 2)
		for i := range created {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				acc, err := accounts.Create(ctx, fmt.Sprintf("mountbench tokens %s %s %d", b.runID, s.name, i))
				created[i] = acc
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return nil, fmt.Errorf("create accounts: %w", err)
			}
		}
		arm.clients = created
		for i := range created {
			arm.honest = append(arm.honest, tokenClient(2, i, b.cfg.Timeout))
		}
		for i := range b.cfg.FloodSources {
			arm.wrong = append(arm.wrong, tokenClient(1, i, b.cfg.Timeout))
		}
		b.logf("tokens: %d accounts for %s created in %s", len(created), s.name, time.Since(start).Round(time.Millisecond))
		rep.Arms = append(rep.Arms, arm)
	}
	each := b.cfg.Duration / time.Duration(rep.Rounds)
	for round := range rep.Rounds {
		line := fmt.Sprintf("round %d:", round+1)
		for i := range rep.Arms {
			arm := rep.Arms[(i+round)%len(rep.Arms)]
			b.quiet(ctx)
			keyed, err := b.storedHMAC(ctx, arm)
			if err != nil {
				return nil, err
			}
			ph, refused, wrong := b.tokensRound(ctx, arm, each)
			if keyed == len(arm.clients) {
				merge(&arm.Steady, ph)
				arm.Steady.lats = append(arm.Steady.lats, ph.lats...)
				arm.SteadyRounds++
				arm.SteadyRefused += refused
			}
			merge(&arm.Honest, ph)
			arm.Honest.lats = append(arm.Honest.lats, ph.lats...)
			arm.Refused += refused
			for k, v := range wrong {
				arm.Wrong[k] += v
			}
			line += fmt.Sprintf(" %s %d renewals p50 %.1f p99 %.1f ms, refused %d, wrong %v (load %.2f);",
				arm.Name, ph.Requests, ph.Latency.P50, ph.Latency.P99, refused, wrong, ph.LoadAvg[0])
		}
		rep.PerRound = append(rep.PerRound, strings.TrimSuffix(line, ";"))
		b.logf("tokens: %s", rep.PerRound[len(rep.PerRound)-1])
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.Pass = true
	for _, arm := range rep.Arms {
		arm.Honest.Latency = summarize(arm.Honest.lats)
		arm.Honest.RequestsPerSec = round(float64(arm.Honest.Requests)/arm.Honest.Seconds, 2)
		if arm.SteadyRounds > 0 {
			arm.Steady.Latency = summarize(arm.Steady.lats)
			arm.Steady.RequestsPerSec = round(float64(arm.Steady.Requests)/arm.Steady.Seconds, 2)
		}
		var err error
		if arm.StoredHMAC, err = b.storedHMAC(ctx, arm); err != nil {
			return nil, err
		}
		if arm.Name == "mountd" {
			rep.Pass = arm.SteadyRounds > 0 && arm.SteadyRefused == 0 && arm.Steady.Errors == 0
		}
	}
	return rep, nil
}

// storedHMAC counts the arm's clients whose secret is stored as HMAC.
func (b *bench) storedHMAC(ctx context.Context, arm *tokensArm) (int, error) {
	ids := make([]string, len(arm.clients))
	for i, c := range arm.clients {
		ids[i] = c.ClientID
	}
	var n int
	err := b.db.NewRaw("SELECT count(*) FROM api_clients WHERE client_id IN (?) AND secret_hash LIKE ?",
		bun.In(ids), "$hmac-sha256$%").Scan(ctx, &n)
	return n, err
}

// tokensRound runs one round of d against arm: the renewals due in this
// stretch of the arm's schedule, and wrong secrets at --wrong-rate. It
// returns the renewals, how many were refused (503, 429) and the wrong
// secrets' answers by status.
func (b *bench) tokensRound(ctx context.Context, arm *tokensArm, d time.Duration) (phase, int, map[string]int) {
	ph := phase{Target: arm.Honest.Target, LoadAvg: loadAvg(), Statuses: map[string]int{}}
	var (
		mu      sync.Mutex
		refused int
		wrong   = map[string]int{}
		wg      sync.WaitGroup
	)
	before := b.cpu.sample()
	start := time.Now()
	from, to := arm.clock, arm.clock+d
	arm.clock = to
	period := b.cfg.RenewEvery
	for i, c := range arm.clients {
		offset := period * time.Duration(i) / time.Duration(len(arm.clients))
		first := offset
		if from > offset {
			first = offset + (from-offset+period-1)/period*period
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for at := first; at < to; at += period {
				due := start.Add(at - from)
				if !sleepUntil(ctx, due) {
					return
				}
				status, err := tokenPost(ctx, arm.honest[i], arm.Base, c.ClientID, c.ClientSecret, b.cfg.Scope)
				lat := time.Since(due)
				mu.Lock()
				ph.Requests++
				ph.lats = append(ph.lats, lat)
				if status != http.StatusOK {
					ph.Errors++
					key := strconv.Itoa(status)
					if err != nil {
						key = "transport"
						if ph.FirstError == "" {
							ph.FirstError = err.Error()
						}
					}
					ph.Statuses[key]++
					if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
						refused++
					}
				}
				mu.Unlock()
			}
		}()
	}
	// Wrong secrets, open loop: each on a goroutine of its own, at most
	// 512 in flight (beyond, counted as "skipped": the server is not
	// keeping up and the tool does not pile up more).
	inFlight := make(chan struct{}, 512)
	interval := time.Duration(float64(time.Second) / b.cfg.WrongRate)
	for n := 0; ; n++ {
		due := start.Add(time.Duration(n) * interval)
		if due.Sub(start) >= d || !sleepUntil(ctx, due) {
			break
		}
		select {
		case inFlight <- struct{}{}:
		default:
			mu.Lock()
			wrong["skipped"]++
			mu.Unlock()
			continue
		}
		clientID := arm.clients[n%len(arm.clients)].ClientID
		if n%2 == 1 {
			clientID = "cli_" + randomHexText(12)
		}
		cl := arm.wrong[n%len(arm.wrong)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-inFlight }()
			status, err := tokenPost(ctx, cl, arm.Base, clientID, randomHexText(32), b.cfg.Scope)
			key := strconv.Itoa(status)
			if err != nil {
				key = "transport"
			}
			mu.Lock()
			wrong[key]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ph.Seconds = round(elapsed.Seconds(), 3)
	ph.RequestsPerSec = round(float64(ph.Requests)/elapsed.Seconds(), 2)
	ph.CPU = cpuSpan(before, b.cpu.sample(), elapsed)
	ph.Latency = summarize(append([]time.Duration(nil), ph.lats...))
	return ph, refused, wrong
}

// tokenPost asks base for a client-credentials token and returns the status
// (0 with the error when there was no answer).
func tokenPost(ctx context.Context, cl *http.Client, base, clientID, secret, scope string) (int, error) {
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {clientID}, "client_secret": {secret}, "scope": {scope}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/oauth/v2/token", strings.NewReader(form.Encode()))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, res.Body)
		return res.StatusCode, nil
	}
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(res.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		return 0, fmt.Errorf("200 without a token: %v", err)
	}
	return http.StatusOK, nil
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	return benchstat.Sleep(ctx, time.Until(t)) == nil && ctx.Err() == nil
}

func randomHexText(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *tokensReport) print(w io.Writer) {
	fmt.Fprintf(w, "\nTOKENS  %d clients each renewing every %s (open loop, own loopback addresses), %.0f wrong secrets/s from %s; %d alternating rounds\n",
		r.Clients, r.RenewEvery, r.WrongPerSec, "other addresses", r.Rounds)
	header(w, "renew/s")
	for _, a := range r.Arms {
		row(w, a.Honest, a.Honest.RequestsPerSec)
	}
	for _, a := range r.Arms {
		fmt.Fprintf(w, "  %-8s renewals refused (503/429) %d of %d; wrong secrets by status %v; secrets stored as HMAC after the run %d of %d\n",
			a.Name, a.Refused, a.Honest.Requests, a.Wrong, a.StoredHMAC, r.Clients)
		if a.SteadyRounds > 0 {
			fmt.Fprintf(w, "  %-8s %d rounds begun with every secret as HMAC: refused %d of %d, p50 %.2f ms, p99 %.2f ms\n",
				a.Name, a.SteadyRounds, a.SteadyRefused, a.Steady.Requests, a.Steady.Latency.P50, a.Steady.Latency.P99)
		}
	}
	for _, l := range r.PerRound {
		fmt.Fprintf(w, "  %s\n", l)
	}
	fmt.Fprintf(w, "  target: once every secret is HMAC, no renewal of mountd refused: %s\n", passText(r.Pass))
}
