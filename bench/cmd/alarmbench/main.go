// Command alarmbench measures presence and alarms (docs/api.md, "Presence
// and alarms") on a running mountd:
//
//   - silent: --mounts mounts each report once, then go silent; every
//     MOUNT_OFFLINE must come within 30 s of its lapse (lastSeenAt +
//     MOUNTD_OFFLINE_AFTER, the event's occurredAt) and none twice. It
//     reports the lag of each event from its lapse (p50, p99, the last).
//   - flaps: one rule (BATTERY_LEVEL < 20, held 0 s) and --flaps cycles of
//     a report below and one above it; every cycle must raise one alarm
//     and clear it, and none may stay ACTIVE.
//
// The server's MOUNTD_OFFLINE_AFTER must equal --offline-after; run.sh
// starts the throw-away services and mountd with it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

type config struct {
	Base, DatabaseURL string
	OfflineAfter      time.Duration
	Mounts, Flaps     int
	Clients           int
	Scenario          string
	JSON              bool
}

// silentResult is what the silent scenario measured.
type silentResult struct {
	Mounts      int     `json:"mounts"`
	Onboarded   float64 `json:"onboardSeconds"`
	Offline     int     `json:"offlineEvents"` // distinct mounts announced
	Twice       int     `json:"announcedTwice"`
	Missing     int     `json:"missing"`
	LagP50      float64 `json:"lagP50Seconds"` // from the lapse to the event read
	LagP99      float64 `json:"lagP99Seconds"`
	LagMax      float64 `json:"lagMaxSeconds"`
	LastAfter   float64 `json:"lastAfterLastLapseSeconds"`
	BoundSecond float64 `json:"boundSeconds"`
	Pass        bool    `json:"pass"`
}

// flapResult is what the flaps scenario measured.
type flapResult struct {
	Cycles   int     `json:"cycles"`
	Raised   int     `json:"raised"`
	Cleared  int     `json:"cleared"`
	Active   int     `json:"activeAtEnd"`
	Seconds  float64 `json:"seconds"`
	PerCycle float64 `json:"msPerCycle"`
	Pass     bool    `json:"pass"`
}

type report struct {
	Started time.Time     `json:"started"`
	Load    [3]float64    `json:"loadAverageStart"`
	Silent  *silentResult `json:"silent,omitempty"`
	Flaps   *flapResult   `json:"flaps,omitempty"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Base, "base", "http://127.0.0.1:8080", "mountd's base URL")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "mountd's database (postgres://…), to create the accounts")
	flag.DurationVar(&cfg.OfflineAfter, "offline-after", time.Minute, "the server's MOUNTD_OFFLINE_AFTER")
	flag.IntVar(&cfg.Mounts, "mounts", 10_000, "mounts going silent at once (silent)")
	flag.IntVar(&cfg.Flaps, "flaps", 1000, "flap cycles (flaps)")
	flag.IntVar(&cfg.Clients, "clients", 32, "parallel clients while onboarding")
	flag.StringVar(&cfg.Scenario, "scenario", "silent,flaps", "silent, flaps, or both (comma-separated)")
	flag.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "alarmbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "alarmbench: "+format+"\n", args...) }

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.Mounts < 1 || cfg.Mounts > 100_000 || cfg.Flaps < 1 || cfg.Flaps > 100_000 || cfg.Clients < 1 || cfg.Clients > 256 {
		return errors.New("--mounts and --flaps must be 1 to 100000, --clients 1 to 256")
	}
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	accounts := core.NewAccountService(store, nil)
	newAPI := func(name string) (*client.Client, error) {
		acc, err := accounts.Create(ctx, name)
		if err != nil {
			return nil, err
		}
		tok, err := client.ClientCredentials(cfg.Base, acc.ClientID, acc.ClientSecret,
			[]string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}).Token(ctx)
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		return client.New(cfg.Base, client.StaticToken(tok.AccessToken), client.Options{HTTPClient: &http.Client{
			Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}), nil
	}
	rep := report{Started: time.Now().UTC(), Load: benchstat.LoadAvg()}
	runID := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for _, sc := range []string{"silent", "flaps"} {
		if !slices.Contains(strings.Split(cfg.Scenario, ","), sc) {
			continue
		}
		api, err := newAPI("alarmbench " + sc + " " + runID)
		if err != nil {
			closeStore()
			return err
		}
		switch sc {
		case "silent":
			rep.Silent, err = silent(ctx, cfg, api, "ab-"+runID)
		case "flaps":
			rep.Flaps, err = flaps(ctx, cfg, api, "af-"+runID)
		}
		if err != nil {
			closeStore()
			return err
		}
	}
	closeStore()
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if s := rep.Silent; s != nil {
		fmt.Fprintf(out, "SILENT  %d mounts onboarded in %.1f s, then silent; MOUNTD_OFFLINE_AFTER %s\n", s.Mounts, s.Onboarded, cfg.OfflineAfter)
		fmt.Fprintf(out, "  MOUNT_OFFLINE for %d mounts, %d twice, %d missing; lag from the lapse p50 %.2f s, p99 %.2f s, max %.2f s; the last came %.2f s after the last lapse (bound %.0f s): %s\n",
			s.Offline, s.Twice, s.Missing, s.LagP50, s.LagP99, s.LagMax, s.LastAfter, s.BoundSecond, pass(s.Pass))
	}
	if f := rep.Flaps; f != nil {
		fmt.Fprintf(out, "FLAPS  %d cycles in %.1f s (%.1f ms a cycle): %d raised, %d cleared, %d ACTIVE at the end: %s\n",
			f.Cycles, f.Seconds, f.PerCycle, f.Raised, f.Cleared, f.Active, pass(f.Pass))
	}
	return nil
}

func pass(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// parallel runs do(i) for i < n on clients goroutines; the first error
// stops the rest.
func parallel(n, clients int, do func(i int) error) error {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

func state(code, value string, at time.Time) map[string]any {
	return map[string]any{"code": code, "value": value, "occurredAt": at.UTC().Format(time.RFC3339Nano)}
}

// event is the part of an event of GET /api/v1/events read here.
type event struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	UID        string `json:"uid"`
	OccurredAt string `json:"occurredAt"`
	Alarm      *struct {
		ID string `json:"id"`
	} `json:"alarm"`
}

type eventPage struct {
	Events []event `json:"events"`
	Next   string  `json:"next"`
}

// silent onboards the mounts, each with one report, then follows the event
// log until every mount was announced OFFLINE or the bound passed.
func silent(ctx context.Context, cfg config, api *client.Client, prefix string) (*silentResult, error) {
	res := &silentResult{Mounts: cfg.Mounts, BoundSecond: 30}
	var start eventPage
	if err := api.Do(ctx, http.MethodGet, "/events?limit=1", nil, &start); err != nil {
		return nil, err
	}
	uid := func(i int) string { return fmt.Sprintf("%s-%05d", prefix, i) }
	t0 := time.Now()
	err := parallel(cfg.Mounts, cfg.Clients, func(i int) error {
		if err := api.Do(ctx, http.MethodPost, "/mounts", map[string]any{"uid": uid(i)}, nil); err != nil {
			return err
		}
		if err := api.Do(ctx, http.MethodPost, "/mounts/"+uid(i)+"/confirm-association", nil, nil); err != nil {
			return err
		}
		return api.Do(ctx, http.MethodPost, "/mounts/"+uid(i)+"/states",
			map[string]any{"states": []any{state("BATTERY_LEVEL", "80", time.Now().Add(-time.Second))}}, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("onboard: %w", err)
	}
	res.Onboarded = time.Since(t0).Seconds()
	lastReport := time.Now()
	logf("silent: %d mounts reported once in %.1f s; following MOUNT_OFFLINE", cfg.Mounts, res.Onboarded)

	seen := map[string]int{}
	var lags []time.Duration
	var lastLapse, lastArrival time.Time
	after := start.Next
	deadline := lastReport.Add(cfg.OfflineAfter + 30*time.Second + 30*time.Second)
	for len(seen) < cfg.Mounts && time.Now().Before(deadline) {
		var page eventPage
		q := url.Values{"after": {after}, "limit": {"1000"}, "types": {"MOUNT_OFFLINE"}, "wait": {"5"}}
		if err := api.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		now := time.Now()
		for _, e := range page.Events {
			seen[e.UID]++
			at, err := time.Parse(time.RFC3339Nano, e.OccurredAt)
			if err != nil {
				return nil, fmt.Errorf("event occurredAt %q: %w", e.OccurredAt, err)
			}
			lags = append(lags, now.Sub(at))
			if at.After(lastLapse) {
				lastLapse = at
			}
			lastArrival = now
		}
		after = page.Next
	}
	for _, n := range seen {
		if n > 1 {
			res.Twice++
		}
	}
	res.Offline = len(seen)
	res.Missing = cfg.Mounts - len(seen)
	slices.Sort(lags)
	if len(lags) > 0 {
		res.LagP50 = round(lags[len(lags)/2].Seconds())
		res.LagP99 = round(lags[len(lags)*99/100].Seconds())
		res.LagMax = round(lags[len(lags)-1].Seconds())
		res.LastAfter = round(lastArrival.Sub(lastLapse).Seconds())
	}
	res.Pass = res.Missing == 0 && res.Twice == 0 && res.LagMax <= res.BoundSecond
	return res, nil
}

// flaps makes one condition true and false cycles times.
func flaps(ctx context.Context, cfg config, api *client.Client, uid string) (*flapResult, error) {
	res := &flapResult{Cycles: cfg.Flaps}
	if err := api.Do(ctx, http.MethodPost, "/mounts", map[string]any{"uid": uid}, nil); err != nil {
		return nil, err
	}
	if err := api.Do(ctx, http.MethodPost, "/mounts/"+uid+"/confirm-association", nil, nil); err != nil {
		return nil, err
	}
	var rule struct {
		ID string `json:"id"`
	}
	if err := api.Do(ctx, http.MethodPost, "/alarm-rules", map[string]any{"name": "battery low (alarmbench)", "severity": "WARNING",
		"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}, "forSeconds": 0, "mountUids": []string{uid}}, &rule); err != nil {
		return nil, err
	}
	var start eventPage
	if err := api.Do(ctx, http.MethodGet, "/events?limit=1", nil, &start); err != nil {
		return nil, err
	}
	base := time.Now().Add(-time.Hour)
	t0 := time.Now()
	for i := range cfg.Flaps {
		for j, v := range []string{"10", "50"} {
			at := base.Add(time.Duration(2*i+j) * time.Millisecond)
			if err := api.Do(ctx, http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{state("BATTERY_LEVEL", v, at)}}, nil); err != nil {
				return nil, fmt.Errorf("cycle %d: %w", i, err)
			}
		}
	}
	res.Seconds = round(time.Since(t0).Seconds())
	res.PerCycle = round(time.Since(t0).Seconds() * 1000 / float64(cfg.Flaps))
	after := start.Next
	for {
		var page eventPage
		q := url.Values{"after": {after}, "limit": {"1000"}, "types": {"ALARM_RAISED,ALARM_CLEARED"}, "mountUid": {uid}}
		if err := api.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		for _, e := range page.Events {
			switch e.Type {
			case "ALARM_RAISED":
				res.Raised++
			case "ALARM_CLEARED":
				res.Cleared++
			}
		}
		after = page.Next
		if len(page.Events) == 0 {
			break
		}
	}
	var active struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	if err := api.Do(ctx, http.MethodGet, "/alarms?state=ACTIVE&mountUid="+uid, nil, &active); err != nil {
		return nil, err
	}
	res.Active = active.Pagination.TotalItems
	res.Pass = res.Raised == cfg.Flaps && res.Cleared == cfg.Flaps && res.Active == 0
	return res, nil
}

func round(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
