// Command exportbench measures the exports (GET /api/v1/exports/mounts and
// /exports/states) of a running mountd on PostgreSQL: their speed against
// the database's own COPY … TO STDOUT of the same rows, and mountd's peak
// resident memory against an empty export's. It seeds its own account
// straight into the database (the API would take an hour for a million
// entries). run.sh starts the throw-away services and mountd.
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

type config struct {
	Base, DatabaseURL string
	Pid               int
	Mounts, States    int
	Runs              int
	MaxLoad           float64
	JSON              bool
}

// result is one export's measurement.
type result struct {
	Export      string  `json:"export"`
	Format      string  `json:"format"`
	Rows        int     `json:"rows"`
	Bytes       int64   `json:"bytes"`
	Seconds     float64 `json:"seconds"` // median of the runs
	CopySeconds float64 `json:"copySeconds"`
	Ratio       float64 `json:"ratio"` // COPY's time / the export's: the export's speed as a share of COPY's
	PeakRSS     int64   `json:"peakRssBytes"`
	EmptyRSS    int64   `json:"emptyExportPeakRssBytes"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Base, "base", "http://127.0.0.1:8080", "mountd's base URL")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "mountd's PostgreSQL (postgres://…)")
	flag.IntVar(&cfg.Pid, "pid", 0, "mountd's process id, for its peak RSS (0: not measured)")
	flag.IntVar(&cfg.Mounts, "mounts", 100_000, "mounts in the fleet export")
	flag.IntVar(&cfg.States, "states", 1_000_000, "history entries in the states export")
	flag.IntVar(&cfg.Runs, "runs", 3, "runs of each measurement (the median is reported)")
	flag.Float64Var(&cfg.MaxLoad, "max-load", 0, "before each run, wait (up to a minute) for the 1-minute load average to fall below this (0: do not wait)")
	flag.BoolVar(&cfg.JSON, "json", false, "print the results as JSON")
	flag.Parse()
	if err := run(context.Background(), cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "exportbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "exportbench: "+format+"\n", args...) }

func run(ctx context.Context, cfg config, out io.Writer) error {
	// Seeding a million rows takes longer than the driver's default read
	// timeout (10 s).
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
		return errors.New("--database-url must be PostgreSQL (the baseline is its COPY)")
	}
	db := store.DB()
	// COPY needs pgdriver's own connection; the store's are wrapped to
	// cancel statements on the server (adapters/bunstore/pgcancel.go).
	copyDB := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(cfg.DatabaseURL+sep+"read_timeout=600s"))), pgdialect.New())
	defer copyDB.Close()
	accounts := core.NewAccountService(store, nil)
	acc, err := accounts.Create(ctx, "exportbench")
	if err != nil {
		return err
	}
	empty, err := accounts.Create(ctx, "exportbench empty")
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := seed(ctx, db, acc.AccountID, cfg.Mounts, cfg.States); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	logf("seeded %d mounts and %d history entries in %s", cfg.Mounts, cfg.States, time.Since(t0).Round(time.Millisecond))
	token, err := ownerToken(ctx, cfg.Base, acc)
	if err != nil {
		return err
	}
	emptyToken, err := ownerToken(ctx, cfg.Base, empty)
	if err != nil {
		return err
	}

	type export struct {
		name, path, emptyPath, token, emptyToken, copySQL string
		rows                                              int
	}
	// The baseline is the export's own statement (bunstore's EachMount),
	// as COPY sends it.
	cols, joins := "", ""
	for i, code := range core.StateCodes {
		cols += fmt.Sprintf(", l%d.value, l%d.occurred_at", i, i)
		joins += fmt.Sprintf(" LEFT JOIN mount_latest_states AS l%d ON l%d.mount_uid = m.uid AND l%d.account_id = m.owner_account_id AND l%d.code = '%s'", i, i, i, i, code)
	}
	mountsCopy := `COPY (SELECT m.uid, m.name, m.serial_number, m.mac_address, m.firmware_revision, m.software_revision,
		m.model_number, m.association_state, m.associated_at` + cols + ` FROM mounts AS m` + joins + `
		WHERE m.owner_account_id = '` + acc.AccountID + `' AND m.association_state = 'ASSOCIATED' ORDER BY m.uid) TO STDOUT WITH (FORMAT csv)`
	statesCopy := `COPY (SELECT mount_uid, code, value, occurred_at, received_at FROM mount_states
		WHERE mount_uid = 'xb-history' AND account_id = '` + acc.AccountID + `' ORDER BY occurred_at, code, value) TO STDOUT WITH (FORMAT csv)`
	exports := []export{
		{"mounts", "/api/v1/exports/mounts", "/api/v1/exports/mounts", token, emptyToken, mountsCopy, cfg.Mounts + 2}, // with xb-history and xb-empty
		{"states", "/api/v1/exports/states?mountUid=xb-history", "/api/v1/exports/states?mountUid=xb-empty", token, token, statesCopy, cfg.States},
	}
	httpc := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	var results []result
	for _, e := range exports {
		for _, format := range []string{"csv", "ndjson"} {
			sep := "?"
			if strings.Contains(e.path, "?") {
				sep = "&"
			}
			r := result{Export: e.name, Format: format}
			// One unmeasured run of each warms the caches, and brings mountd
			// to the memory it keeps between requests (the sign-in's hashing
			// before it leaves more).
			if _, _, err := get(ctx, httpc, cfg.Base+e.path+sep+"format="+format, e.token); err != nil {
				return err
			}
			if _, err := copyTime(ctx, copyDB, e.copySQL); err != nil {
				return err
			}
			resetPeak(cfg.Pid)
			if _, _, err := get(ctx, httpc, cfg.Base+e.emptyPath+sep+"format="+format, e.emptyToken); err != nil {
				return err
			}
			r.EmptyRSS = peakRSS(cfg.Pid)
			var times, copies []float64
			resetPeak(cfg.Pid)
			for i := 0; i < cfg.Runs; i++ {
				benchstat.Quiet{MaxLoad: cfg.MaxLoad, Timeout: time.Minute}.Wait(ctx, logf)
				start := time.Now()
				lines, n, err := get(ctx, httpc, cfg.Base+e.path+sep+"format="+format, e.token)
				if err != nil {
					return err
				}
				times = append(times, time.Since(start).Seconds())
				r.Bytes = n
				r.Rows = lines
				if format == "csv" {
					r.Rows-- // the header line
				}
				if r.Rows != e.rows {
					return fmt.Errorf("%s %s: %d rows, want %d", e.name, format, r.Rows, e.rows)
				}
				c, err := copyTime(ctx, copyDB, e.copySQL)
				if err != nil {
					return err
				}
				copies = append(copies, c)
			}
			r.PeakRSS = peakRSS(cfg.Pid)
			r.Seconds, r.CopySeconds = median(times), median(copies)
			r.Ratio = r.CopySeconds / r.Seconds
			logf("%s %s: %d rows, %d bytes in %.3fs; COPY %.3fs; ratio %.2f; peak RSS %d MiB (empty export %d MiB)",
				r.Export, r.Format, r.Rows, r.Bytes, r.Seconds, r.CopySeconds, r.Ratio, r.PeakRSS>>20, r.EmptyRSS>>20)
			results = append(results, r)
		}
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	fmt.Fprintln(out, "| export | format | rows | bytes | export s | COPY s | ratio | peak RSS MiB | empty export peak RSS MiB |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range results {
		fmt.Fprintf(out, "| %s | %s | %d | %d | %.3f | %.3f | %.2f | %d | %d |\n", r.Export, r.Format, r.Rows, r.Bytes,
			r.Seconds, r.CopySeconds, r.Ratio, r.PeakRSS>>20, r.EmptyRSS>>20)
	}
	return nil
}

// seed gives the account n associated mounts with a latest value per code,
// and the mount xb-history states history entries (xb-empty has none).
func seed(ctx context.Context, db *bun.DB, accountID string, mounts, states int) error {
	now := time.Now().UnixMilli()
	for _, q := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO mounts (uid, name, serial_number, mac_address, firmware_revision, software_revision, model_number,
			association_state, owner_account_id, associated_at, created_at, updated_at)
			SELECT 'xb-' || lpad(i::text, 6, '0'), 'Mount ' || i, 'SN' || i, 'AA:BB:CC:00:00:00', '1.4.2', '1.4.2', 'MX-1',
			'ASSOCIATED', ?, ?, ?, ? FROM generate_series(1, ?) AS i`, []any{accountID, now, now, now, mounts}},
		{`INSERT INTO mount_latest_states (mount_uid, account_id, code, occurred_at, value)
			SELECT m.uid, ?, c.code, ?, c.value FROM mounts AS m,
			(VALUES ('BATTERY_LEVEL', '81'), ('CPU_TEMPERATURE', '41.3'), ('MOUNT_LOCKED', '1'), ('HELMET_MOUNTED', '0')) AS c(code, value)
			WHERE m.owner_account_id = ?`, []any{accountID, now, accountID}},
		{`INSERT INTO mounts (uid, association_state, owner_account_id, associated_at, created_at, updated_at)
			VALUES ('xb-history', 'ASSOCIATED', ?, ?, ?, ?), ('xb-empty', 'ASSOCIATED', ?, ?, ?, ?)`,
			[]any{accountID, now, now, now, accountID, now, now, now}},
		// Entries of the last days (inside the partitions that exist), one
		// every 100 ms per code.
		{`INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at)
			SELECT 'xb-history', ?, (ARRAY['BATTERY_LEVEL','CPU_TEMPERATURE','MOUNT_LOCKED','HELMET_MOUNTED'])[i % 4 + 1],
			? - 86400000 + (i / 4) * 100, (i % 100)::text, ? - 86400000 + (i / 4) * 100 + 250 FROM generate_series(0, ? - 1) AS i`,
			[]any{accountID, now, now, states}},
		// Set the hint bits and the visibility map now, or the first
		// measured read pays for the insert's work.
		{`VACUUM (ANALYZE) mounts, mount_latest_states, mount_states`, nil},
	} {
		if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
			return err
		}
	}
	return nil
}

func ownerToken(ctx context.Context, base string, acc core.NewAccount) (string, error) {
	tok, err := client.ClientCredentials(base, acc.ClientID, acc.ClientSecret, []string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}).Token(ctx)
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return tok.AccessToken, nil
}

// get reads an export to its end, counting lines and bytes.
func get(ctx context.Context, c *http.Client, url, token string) (lines int, n int64, err error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Access-Key", token)
	res, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(res.Body)
		return 0, 0, fmt.Errorf("GET %s: %d %s", url, res.StatusCode, body)
	}
	r := bufio.NewReaderSize(res.Body, 1<<16)
	buf := make([]byte, 1<<16)
	for {
		k, err := r.Read(buf)
		n += int64(k)
		lines += bytes.Count(buf[:k], []byte{'\n'})
		if err == io.EOF {
			return lines, n, nil
		}
		if err != nil {
			return 0, 0, err // an aborted export ends in an unexpected EOF
		}
	}
}

// copyTime is how long PostgreSQL takes to send query's COPY to a reader
// that counts its lines, as get does.
func copyTime(ctx context.Context, db *bun.DB, query string) (float64, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	w := &lineCounter{}
	start := time.Now()
	if _, err := pgdriver.CopyTo(ctx, conn, w, query); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

type lineCounter struct{ lines int }

func (l *lineCounter) Write(p []byte) (int, error) {
	l.lines += bytes.Count(p, []byte{'\n'})
	return len(p), nil
}

// resetPeak resets the process's peak RSS (VmHWM) to its current RSS.
func resetPeak(pid int) {
	if pid > 0 {
		_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
	}
}

// peakRSS reads VmHWM.
func peakRSS(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
