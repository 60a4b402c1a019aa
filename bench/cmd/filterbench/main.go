// Command filterbench measures the fleet filter (GET /api/v1/mounts?filter=)
// of a running mountd on PostgreSQL: p50 and p99 of a page of 20 for a few
// representative filters over a fleet of 100,000 mounts with latest
// values, against the same listing without a filter in the same run. It
// seeds its own account straight into the database. With --explain it
// prints PostgreSQL's EXPLAIN ANALYZE of each filter's statements, as
// bunstore builds them; with --without-indexes it drops the fleet filter's
// indexes (migrations 20261128000017 and 20261129070000) first, to show what they are for.
// With --overview N it measures the console's overview instead (overview.go).
// run.sh starts the throw-away services and mountd.
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
	"strings"
	"sync"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

type config struct {
	Base, DatabaseURL string
	Mounts            int
	Clients           int
	Requests          int
	OfflineAfter      time.Duration
	Explain           bool
	WithoutIndexes    bool
	MaxLoad           float64
	JSON              bool
	OverviewRounds    int
}

// result is one filter's measurement.
type result struct {
	Name    string            `json:"name"`
	Filter  string            `json:"filter"`
	Matches int               `json:"matches"`
	Latency benchstat.Latency `json:"latency"`
	// Ratio is the filter's p99 over the unfiltered listing's.
	Ratio float64 `json:"ratioToBaselineP99"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Base, "base", "http://127.0.0.1:8080", "mountd's base URL")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "mountd's PostgreSQL (postgres://…)")
	flag.IntVar(&cfg.Mounts, "mounts", 100_000, "mounts in the fleet")
	flag.IntVar(&cfg.Clients, "clients", 4, "concurrent clients")
	flag.IntVar(&cfg.Requests, "requests", 400, "measured requests per filter (spread over the clients)")
	flag.DurationVar(&cfg.OfflineAfter, "offline-after", core.DefaultOfflineAfter, "mountd's MOUNTD_OFFLINE_AFTER (for --explain's presence)")
	flag.BoolVar(&cfg.Explain, "explain", false, "print EXPLAIN (ANALYZE, BUFFERS) of each filter's statements")
	flag.BoolVar(&cfg.WithoutIndexes, "without-indexes", false, "drop the fleet filter's indexes before measuring")
	flag.Float64Var(&cfg.MaxLoad, "max-load", 0, "before each filter, wait (up to a minute) for the 1-minute load average to fall below this (0: do not wait)")
	flag.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	flag.IntVar(&cfg.OverviewRounds, "overview", 0, "measure the console's overview this many rounds (server counts against every page read), instead of the filters")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "filterbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "filterbench: "+format+"\n", args...) }

func run(ctx context.Context, cfg config, out io.Writer) error {
	if u, err := url.Parse(cfg.Base); err != nil || !benchstat.Loopback(u.Hostname()) {
		return errors.New("--base must be a loopback address")
	}
	sep := "?"
	if strings.Contains(cfg.DatabaseURL, "?") {
		sep = "&"
	}
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL+sep+"read_timeout=600s")
	if err != nil {
		return err
	}
	defer closeStore()
	if !store.Postgres() {
		return errors.New("--database-url must be PostgreSQL")
	}
	db := store.DB()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "filterbench")
	if err != nil {
		return err
	}
	now := time.Now()
	t0 := time.Now()
	if err := seed(ctx, db, acc.AccountID, cfg.Mounts, now); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	logf("seeded %d mounts with latest values in %s", cfg.Mounts, time.Since(t0).Round(time.Millisecond))
	if cfg.WithoutIndexes {
		for _, name := range []string{"mounts_owner_battery", "mounts_owner_temperature", "mounts_owner_flags", "mounts_owner_last_seen", "mounts_owner_model"} {
			if _, err := db.ExecContext(ctx, "DROP INDEX IF EXISTS "+name); err != nil {
				return err
			}
		}
		logf("dropped the fleet filter's indexes")
	}
	token, err := ownerToken(ctx, cfg.Base, acc)
	if err != nil {
		return err
	}
	// lastSeenAt spreads over the last two hours (see seed).
	from, to := now.Add(-50*time.Minute).UTC().Format(time.RFC3339), now.Add(-40*time.Minute).UTC().Format(time.RFC3339)
	filters := []struct{ name, filter string }{
		{"no filter (baseline)", ""},
		{"AND of three", `batteryLevel < 20 AND presence = "OFFLINE" AND modelNumber = "HM-1"`},
		{"OR", `cpuTemperature >= 69.5 OR mountLocked = false`},
		{"NOT", `NOT batteryLevel < 95`},
		{"lastSeenAt range", `lastSeenAt >= "` + from + `" AND lastSeenAt < "` + to + `"`},
		{"presence ONLINE", `presence = "ONLINE"`},
		{"rare value", `batteryLevel = 99.9 AND helmetMounted = true`},
		// The four expressions of the fleet read at 100,000 mounts (bench/cmd/fleetbench).
		{"low battery", `batteryLevel < 20`},
		{"low battery, offline", `batteryLevel < 20 AND presence = "OFFLINE"`},
		{"model and hot", `modelNumber = "HM-1" AND cpuTemperature > 60`},
		{"unlocked, helmet out", `mountLocked = false AND helmetMounted = false`},
	}
	if cfg.Explain {
		if err := explain(ctx, store, acc.AccountID, cfg, filters, out); err != nil {
			return err
		}
	}
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Clients}}
	if cfg.OverviewRounds > 0 {
		return measureOverview(ctx, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 6}}, cfg.Base, token, cfg.OverviewRounds, cfg.Mounts/seedSeenSeconds+1, out)
	}
	var results []result
	for _, f := range filters {
		path := "/api/v1/mounts?pageSize=20"
		if f.filter != "" {
			path += "&filter=" + url.QueryEscape(f.filter)
		}
		// Unmeasured requests warm the caches and the connections.
		matches := 0
		for range cfg.Clients {
			if matches, err = get(ctx, httpc, cfg.Base+path, token); err != nil {
				return err
			}
		}
		benchstat.Quiet{MaxLoad: cfg.MaxLoad, Timeout: time.Minute}.Wait(ctx, logf)
		latencies := make([]time.Duration, 0, cfg.Requests)
		var (
			mu       sync.Mutex
			wg       sync.WaitGroup
			firstErr error
		)
		for c := range cfg.Clients {
			n := cfg.Requests / cfg.Clients
			if c < cfg.Requests%cfg.Clients {
				n++
			}
			wg.Go(func() {
				for range n {
					start := time.Now()
					_, err := get(ctx, httpc, cfg.Base+path, token)
					d := time.Since(start)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					latencies = append(latencies, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if firstErr != nil {
			return firstErr
		}
		r := result{Name: f.name, Filter: f.filter, Matches: matches, Latency: benchstat.Summarize(latencies)}
		if len(results) > 0 && results[0].Latency.P99 > 0 {
			r.Ratio = r.Latency.P99 / results[0].Latency.P99
		} else {
			r.Ratio = 1
		}
		logf("%s: %d matches, p50 %.1f ms, p99 %.1f ms", r.Name, r.Matches, r.Latency.P50, r.Latency.P99)
		results = append(results, r)
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	fmt.Fprintf(out, "| filter | matches | p50 ms | p99 ms | p99 / baseline p99 |\n|---|---|---|---|---|\n")
	for _, r := range results {
		shown := "(none)"
		if r.Filter != "" {
			shown = "`" + r.Filter + "`"
		}
		fmt.Fprintf(out, "| %s | %d | %.1f | %.1f | %.2f |\n", shown, r.Matches, r.Latency.P50, r.Latency.P99, r.Ratio)
	}
	return nil
}

// seedSeenSeconds is how far back the seed spreads lastSeenAt.
const seedSeenSeconds = 7200

// seed gives the account n ASSOCIATED mounts of five models, lastSeenAt
// one per second over the last two hours (every tenth never seen), and
// latest values: battery 0–99.9 (every twentieth missing), temperature
// 20–69.9, the two flags alternating.
func seed(ctx context.Context, db *bun.DB, accountID string, n int, now time.Time) error {
	ms := now.UnixMilli()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO mounts (uid, name, serial_number, mac_address, firmware_revision, software_revision, model_number,
			association_state, owner_account_id, associated_at, created_at, updated_at, last_seen_at)
			SELECT 'fb-' || lpad(i::text, 6, '0'), 'Mount ' || i, 'SN' || i, '', '1.4.2', '1.4.2', 'HM-' || (i % 5 + 1),
			'ASSOCIATED', ?, ?, ?, ?, CASE WHEN i % 10 = 0 THEN NULL ELSE ? - (i % ?) * 1000 END
			FROM generate_series(1, ?) AS i`, []any{accountID, ms, ms, ms, ms, seedSeenSeconds, n}},
		{`INSERT INTO mount_latest_states (mount_uid, account_id, code, occurred_at, value)
			SELECT m.uid, ?, c.code, ?, c.value FROM
			(SELECT uid, substr(uid, 4)::int AS i FROM mounts WHERE owner_account_id = ?) AS m,
			LATERAL (VALUES
				('BATTERY_LEVEL', CASE WHEN m.i % 20 = 0 THEN NULL ELSE trim_scale(((m.i * 37) % 1000) / 10.0)::text END),
				('CPU_TEMPERATURE', trim_scale(20 + (m.i % 500) / 10.0)::text),
				('MOUNT_LOCKED', (m.i % 2)::text),
				('HELMET_MOUNTED', ((m.i / 2) % 2)::text)) AS c(code, value)
			WHERE c.value IS NOT NULL`, []any{accountID, ms, accountID}},
		// The mounts' copies of their latest values, as a report writes them.
		{`UPDATE mounts AS m SET battery_level = CAST(l.battery AS DOUBLE PRECISION), cpu_temperature = CAST(l.cpu AS DOUBLE PRECISION),
				mount_locked = CAST(l.locked AS DOUBLE PRECISION), helmet_mounted = CAST(l.helmet AS DOUBLE PRECISION)
			FROM (SELECT mount_uid, max(value) FILTER (WHERE code = 'BATTERY_LEVEL') AS battery,
				max(value) FILTER (WHERE code = 'CPU_TEMPERATURE') AS cpu, max(value) FILTER (WHERE code = 'MOUNT_LOCKED') AS locked,
				max(value) FILTER (WHERE code = 'HELMET_MOUNTED') AS helmet
				FROM mount_latest_states WHERE account_id = ? GROUP BY mount_uid) AS l
			WHERE m.uid = l.mount_uid`, []any{accountID}},
		// Set the hint bits, the visibility map and the statistics now, or
		// the first measured reads pay for the inserts' work.
		{`VACUUM (ANALYZE) mounts, mount_latest_states`, nil},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return nil
}

// explain runs each filter's listing through bunstore in this process,
// catches its statements and prints PostgreSQL's plan of each.
func explain(ctx context.Context, store *bunstore.Store, accountID string, cfg config, filters []struct{ name, filter string }, out io.Writer) error {
	catcher := &statements{}
	store.DB().AddQueryHook(catcher)
	parser := aipfilter.New()
	now := time.Now()
	for _, f := range filters {
		mf := core.MountFilter{Expression: f.filter}
		if err := core.ParseMountFilter(parser, &mf, cfg.OfflineAfter, now); err != nil {
			return err
		}
		catcher.take()
		if _, _, err := store.ListMounts(ctx, accountID, mf, core.Page{CurrentPage: 1, PageSize: 20}, now); err != nil {
			return err
		}
		for _, q := range catcher.take() {
			if !strings.Contains(q, "FROM \"mounts\"") {
				continue // the page's latest values: a primary-key lookup
			}
			var plan []string
			if err := store.DB().NewRaw("EXPLAIN (ANALYZE, BUFFERS) "+q).Scan(ctx, &plan); err != nil {
				return fmt.Errorf("explain %s: %w", q, err)
			}
			fmt.Fprintf(out, "### %s\n\n```\n%s\n\n%s\n```\n\n", f.name, q, strings.Join(plan, "\n"))
		}
	}
	return nil
}

// statements is a query hook that keeps the statements run.
type statements struct {
	mu   sync.Mutex
	seen []string
}

func (s *statements) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context { return ctx }
func (s *statements) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	s.mu.Lock()
	s.seen = append(s.seen, e.Query)
	s.mu.Unlock()
}

func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.seen
	s.seen = nil
	return out
}

func ownerToken(ctx context.Context, base string, acc core.NewAccount) (string, error) {
	tok, err := client.ClientCredentials(base, acc.ClientID, acc.ClientSecret, []string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}).Token(ctx)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.AccessToken, nil
}

// get reads a page of mounts and returns the listing's total.
func get(ctx context.Context, c *http.Client, url, token string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Access-Key", token)
	res, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return 0, err
	}
	if res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", url, res.StatusCode, body)
	}
	var page struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		return 0, err
	}
	return page.Pagination.TotalItems, nil
}
