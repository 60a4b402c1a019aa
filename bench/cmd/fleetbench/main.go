// Command fleetbench measures mountd's fleet reads at an operator's size
// (issue 40, targets 1 and 7): a fleet of --mounts mounts seeded through
// the API (association, confirmation and one report of the four codes
// each), then, open loop at --rate requests a second over --clients
// clients, GET /api/v1/mounts?pageSize=100&filter=… rotating four filter
// expressions and the unfiltered page, against GET /api/v1/mounts?mountUid=
// of a random mount in alternating rounds of the same run; optionally the
// same with --ingest-rate reports a second running; and the console's
// overview counts as one GraphQL request. Every answer's
// pagination.totalItems is checked against the seeded fleet.
//
// Seeding 100,000 mounts through the API takes minutes, so the seeded
// database is kept as a pg_dump (cache.go) and restored by later runs.
// run.sh starts the throw-away services and mountd (bench/serve.sh) and
// runs --prepare before mountd starts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
)

type config struct {
	Base, DatabaseURL string
	Mountd            string
	Prepare           bool
	StateFile         string
	CacheDir          string
	Dump              string
	Reseed            bool
	Vacuum            bool
	Mounts            int
	SeedClients       int
	OfflineAfter      time.Duration
	Rate              float64
	Clients           int
	Duration          time.Duration
	Rounds            int
	Timeout           time.Duration
	IngestRate        float64
	OverviewRuns      int
	MaxLoad           float64
	Scope             string
	JSON              bool
	// The --cost mode (cost.go).
	Cost             bool
	Pid              int
	CostDuration     time.Duration
	CostGetRate      float64
	CostPageRate     float64
	CostOverviewRate float64
	CostIngestRate   float64
	CostSubscribers  int
}

// report is the run's result; its paths are stable for benchcheck:
// reads.p99Ratio, reads.p99Ms, reads.baselineP99Ms, overview.p99Ms,
// ingest.reads.p99Ms.
type report struct {
	Mounts    int             `json:"mounts"`
	Seed      seedReport      `json:"seed"`
	Reads     readsReport     `json:"reads"`
	Ingest    *ingestReport   `json:"ingest,omitempty"`
	Overview  *overviewReport `json:"overview,omitempty"`
	LoadAvg   [3]float64      `json:"loadAvgEnd"`
	StartedAt time.Time       `json:"startedAt"`
}

// seedReport says where the fleet came from.
type seedReport struct {
	// Source is "api" (seeded in this run) or "dump" (restored).
	Source         string    `json:"source"`
	Dump           string    `json:"dump,omitempty"`
	Migration      string    `json:"migration,omitempty"`
	SeededAt       time.Time `json:"seededAt"`
	SeedSeconds    float64   `json:"seedSeconds"`
	SettleSeconds  float64   `json:"settleSeconds"`
	RestoreSeconds float64   `json:"restoreSeconds,omitempty"`
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	if cfg.Prepare {
		err = prepare(ctx, cfg)
	} else {
		err = run(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("fleetbench", flag.ContinueOnError)
	fs.StringVar(&c.Base, "base", "http://127.0.0.1:8080", "mountd's base URL (loopback)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "mountd's PostgreSQL (postgres://…): for the dump, the restore and the wait for the presence sweep")
	fs.StringVar(&c.Mountd, "mountd", "", "the mountd binary, for `mountd migrate` (--prepare) and `mountd accounts create` (seeding)")
	fs.BoolVar(&c.Prepare, "prepare", false, "before mountd starts: restore the fleet's dump into --database-url when there is one, and write --state")
	fs.StringVar(&c.StateFile, "state", "", "the file --prepare leaves for the run (run.sh gives one)")
	fs.StringVar(&c.CacheDir, "cache", defaultCacheDir(), "where the seeded fleets' dumps are kept ($FLEETBENCH_CACHE)")
	fs.StringVar(&c.Dump, "dump", "", "restore this dump instead of the one named by the fleet's size and mountd's newest migration (an A/B of two builds on the same fleet)")
	fs.BoolVar(&c.Reseed, "reseed", false, "seed through the API even when a dump exists, and replace it")
	fs.BoolVar(&c.Vacuum, "vacuum", true, "VACUUM (ANALYZE) the database before measuring (false: measure a restored dump as pg_restore leaves it, without statistics or visibility map)")
	fs.IntVar(&c.Mounts, "mounts", 100_000, "mounts in the fleet")
	fs.IntVar(&c.SeedClients, "seed-clients", 16, "concurrent onboardings while seeding")
	fs.DurationVar(&c.OfflineAfter, "offline-after", time.Minute, "mountd's MOUNTD_OFFLINE_AFTER (run.sh sets both)")
	fs.Float64Var(&c.Rate, "rate", 10, "reads a second in all, open loop")
	fs.IntVar(&c.Clients, "clients", 4, "clients the reads are spread over")
	fs.DurationVar(&c.Duration, "duration", 30*time.Second, "each measured phase (the baseline's and the fleet reads', per round)")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of baseline and fleet reads, alternating")
	fs.DurationVar(&c.Timeout, "timeout", 10*time.Second, "client timeout of a request (counted as an error)")
	fs.Float64Var(&c.IngestRate, "ingest-rate", 0, "after the reads, measure them again with this many state reports a second running (0: not)")
	fs.IntVar(&c.OverviewRuns, "overview-runs", 10, "times the overview counts are asked (0: not)")
	fs.Float64Var(&c.MaxLoad, "max-load", 0, "before each round, wait (up to 5 minutes) for the 1-minute load average to fall below this (0: do not wait)")
	fs.StringVar(&c.Scope, "scope", "openid sub urn:mountd:iam:org:project:id:mountd:aud", "scope asked for at POST /oauth/v2/token")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&c.Cost, "cost", false, "instead of the reads' rounds: the CPU time (mountd, PostgreSQL, Redis) and WAL bytes per operation, one phase per kind (bench/cost.sh)")
	fs.IntVar(&c.Pid, "pid", 0, "--cost: mountd's pid (serve.sh --pid gives it)")
	fs.DurationVar(&c.CostDuration, "cost-duration", 20*time.Second, "--cost: each measured phase")
	fs.Float64Var(&c.CostGetRate, "cost-get-rate", 200, "--cost: GET /mounts/{uid} a second")
	fs.Float64Var(&c.CostPageRate, "cost-page-rate", 20, "--cost: fleet filter pages a second")
	fs.Float64Var(&c.CostOverviewRate, "cost-overview-rate", 5, "--cost: overviews a second")
	fs.Float64Var(&c.CostIngestRate, "cost-ingest-rate", 200, "--cost: reports a second")
	fs.IntVar(&c.CostSubscribers, "cost-subscribers", 50, "--cost: console subscriptions receiving every report's event")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.Mounts < 1, c.Rate <= 0, c.Clients < 1, c.Rounds < 1, c.SeedClients < 1:
		return c, errors.New("--mounts, --rate, --clients, --rounds and --seed-clients must be positive")
	case c.DatabaseURL == "":
		return c, errors.New("--database-url is required")
	case c.Cost && !c.Prepare && (c.Pid <= 0 || c.CostDuration <= 0 || c.CostGetRate <= 0 || c.CostPageRate <= 0 || c.CostOverviewRate <= 0 || c.CostIngestRate <= 0 || c.CostSubscribers < 1):
		return c, errors.New("--cost needs --pid, and positive --cost-duration, rates and --cost-subscribers")
	}
	return c, nil
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "fleetbench: "+format+"\n", args...) }

func round(v float64, decimals int) float64 {
	p := math.Pow(10, float64(decimals))
	return math.Round(v*p) / p
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if u, err := url.Parse(cfg.Base); err != nil || !benchstat.Loopback(u.Hostname()) {
		return errors.New("--base must be a loopback address")
	}
	rep := report{Mounts: cfg.Mounts, StartedAt: time.Now().UTC()}
	var st runState
	if cfg.StateFile != "" {
		var err error
		if st, err = readState(cfg.StateFile); err != nil {
			return fmt.Errorf("read --state (did --prepare run?): %w", err)
		}
	}
	hc := &http.Client{Timeout: cfg.Timeout}
	var m meta
	if st.Restored {
		var err error
		if m, err = readMeta(st.Dump); err != nil {
			return err
		}
		if m.Mounts != cfg.Mounts {
			return fmt.Errorf("the dump %s holds %d mounts, not --mounts %d", st.Dump, m.Mounts, cfg.Mounts)
		}
		rep.Seed = seedReport{Source: "dump", Dump: st.Dump, Migration: m.Migration, SeededAt: m.SeededAt,
			SeedSeconds: m.SeedSeconds, SettleSeconds: m.SettleSeconds, RestoreSeconds: st.Seconds}
	} else {
		var err error
		if m, err = createAccount(ctx, cfg); err != nil {
			return err
		}
		m.Mounts, m.Migration, m.Model, m.SeededAt = cfg.Mounts, st.Migration, seedModel, time.Now().UTC()
		api := client.New(cfg.Base, tokenSource(cfg, m, hc), client.Options{HTTPClient: hc})
		logf("seeding %d mounts through the API, %d at a time", cfg.Mounts, cfg.SeedClients)
		took, err := seed(ctx, cfg, api)
		if err != nil {
			return fmt.Errorf("seed: %w", err)
		}
		m.SeedSeconds = round(took.Seconds(), 1)
		logf("seeded %d mounts in %.1f s (%.0f/s)", cfg.Mounts, m.SeedSeconds, float64(cfg.Mounts)/took.Seconds())
		rep.Seed = seedReport{Source: "api", Dump: st.Dump, Migration: st.Migration, SeededAt: m.SeededAt, SeedSeconds: m.SeedSeconds}
	}
	settled, err := settle(ctx, cfg)
	if err != nil {
		return err
	}
	if !st.Restored {
		m.SettleSeconds = round(settled.Seconds(), 1)
		rep.Seed.SettleSeconds = m.SettleSeconds
	}
	if !st.Restored && st.Dump != "" {
		if err := saveDump(ctx, cfg, st.Dump, m); err != nil {
			return err
		}
		logf("saved the fleet to %s (remove it, or --reseed, to seed anew)", st.Dump)
	}
	tokens := tokenSource(cfg, m, hc)
	if cfg.Cost {
		return runCost(ctx, cfg, func() *client.Credentials { return tokenSource(cfg, m, hc) }, out)
	}
	r := newReader(cfg, tokens, cfg.Mounts)
	warmUp(ctx, r)
	logf("reads: %.0f/s over %d clients, %d rounds of %s baseline and %s fleet reads", cfg.Rate, cfg.Clients, cfg.Rounds, cfg.Duration, cfg.Duration)
	rep.Reads = measureReads(ctx, cfg, r, false)
	if cfg.OverviewRuns > 0 {
		o := measureOverview(ctx, cfg, tokens, cfg.Mounts)
		rep.Overview = &o
	}
	if cfg.IngestRate > 0 {
		logf("reads again with %.0f reports/s running", cfg.IngestRate)
		in := measureWithIngest(ctx, cfg, r, tokens)
		rep.Ingest = &in
	}
	rep.LoadAvg = benchstat.LoadAvg()
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(out, cfg, rep)
	}
	if rep.Reads.TotalsErrors > 0 {
		return fmt.Errorf("%d answers with a wrong totalItems, the first: %s", rep.Reads.TotalsErrors, rep.Reads.FirstTotalsError)
	}
	return nil
}

// tokenSource gives the account's owner tokens, renewed when they expire.
func tokenSource(cfg config, m meta, hc *http.Client) *client.Credentials {
	return client.CredentialsSource(client.ClientCredentials(cfg.Base, m.ClientID, m.ClientSecret, strings.Fields(cfg.Scope)), hc)
}

// printReport writes the report as Markdown tables.
func printReport(w io.Writer, cfg config, rep report) {
	fmt.Fprintf(w, "fleet of %d mounts (%s", rep.Mounts, rep.Seed.Source)
	if rep.Seed.Dump != "" {
		fmt.Fprintf(w, " %s", filepath.Base(rep.Seed.Dump))
	}
	fmt.Fprintf(w, "; seeded through the API in %.1f s, settled in %.1f s", rep.Seed.SeedSeconds, rep.Seed.SettleSeconds)
	if rep.Seed.Source == "dump" {
		fmt.Fprintf(w, ", restored in %.1f s", rep.Seed.RestoreSeconds)
	}
	fmt.Fprintf(w, ")\n\n")
	printReads(w, "no ingest", rep.Reads)
	if rep.Overview != nil {
		o := rep.Overview
		how := "one request"
		if o.Split {
			how = fmt.Sprintf("%d requests (in one: %s)", len(o.Counts), o.SplitReason)
		}
		fmt.Fprintf(w, "overview counts (%s), %d runs: p50 %.1f ms, p99 %.1f ms, %d errors %s\ncounts %v %s\n\n",
			how, o.Runs, o.P50Ms, o.P99Ms, o.Errors, o.Error, o.Counts, o.CountsError)
	}
	if rep.Ingest != nil {
		in := rep.Ingest
		fmt.Fprintf(w, "ingest: %.0f reports/s asked, %.1f/s accepted, %d errors %v, p50 %.1f ms, p99 %.1f ms\n\n",
			in.RatePerSec, in.AchievedPerSec, in.Errors, in.ErrorKinds, in.Latency.P50, in.Latency.P99)
		printReads(w, fmt.Sprintf("with %.0f reports/s", in.RatePerSec), in.Reads)
	}
	fmt.Fprintf(w, "load average at the end %v\n", rep.LoadAvg)
}

func printReads(w io.Writer, title string, r readsReport) {
	fmt.Fprintf(w, "reads, %s: %.0f/s open loop over %d clients, %d rounds of %.0f s each, timeout %.0f s; load average %v → %v\n\n",
		title, r.Rate, r.Clients, r.Rounds, r.PhaseSeconds, r.TimeoutSeconds, r.LoadBefore, r.LoadAfter)
	fmt.Fprintf(w, "| read | totalItems | requests | errors | p50 ms | p95 ms | p99 ms |\n|---|---|---|---|---|---|---|\n")
	row := func(name string, f figures) {
		errs := fmt.Sprint(f.Errors)
		if f.Errors > 0 {
			errs += fmt.Sprintf(" %v", f.ErrorKinds)
		}
		total := "—"
		if f.TotalItems >= 0 {
			total = fmt.Sprint(f.TotalItems)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.1f | %.1f | %.1f |\n", name, total, f.Requests, errs, f.Latency.P50, f.Latency.P95, f.Latency.P99)
	}
	row("`mountUid=` (baseline)", r.Baseline)
	for _, e := range r.Expressions {
		name := "(unfiltered)"
		if e.Filter != "" {
			name = "`" + e.Filter + "`"
		}
		row(name, e.figures)
	}
	f := r.Fleet
	f.TotalItems = -1
	row("all fleet reads", f)
	fmt.Fprintf(w, "\nfleet p99 / baseline p99: %.2f; totalItems errors: %d %s\n\n", r.P99Ratio, r.TotalsErrors, r.FirstTotalsError)
}
