// Command jobbench measures how a job spreads through a fleet that only
// phones passing by can reach (docs/api.md, "Jobs"): it
// starts mountsim with --mounts mounts (associated, reporting) and
// --phones phones, each passing a random mount every --pass-every on
// average (exponentially distributed) and running the mount's pending
// commands with the SDK's Sync; it creates one job over every mount of the
// fleet and prints the share of targets EXECUTED every --every, for
// --duration. Between rows it polls the job every --poll and also records
// when the share first reached 50, 90, 99 and 100 %.
//
// The expected curve: with P phones passing every D, a mount is passed
// P/(D·N) times a second, so the share after t is about 1 − exp(−P·t/(D·N)).
// The default (10 phones every 6 s on 1,000 mounts, each mount passed
// about 6 times an hour: a busy city's docks) gives 63 % after ten
// minutes, 95 % after thirty and 99.75 % after the hour.
//
// run.sh starts the throw-away PostgreSQL and mountd on it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

type config struct {
	Base, DatabaseURL, Mountsim string
	Mounts, Phones              int
	PassEvery, Every, Poll      time.Duration
	Duration, ReportInterval    time.Duration
	Code, Params, Filter        string
	Seed                        uint64
	JSON                        bool
}

// row is the job's progress at one instant.
type row struct {
	Minutes    float64 `json:"minutes"`
	Targets    int     `json:"targets"`
	Executed   int     `json:"executed"`
	Refused    int     `json:"refused"`
	Issued     int     `json:"issued"`
	Pending    int     `json:"pending"`
	Share      float64 `json:"shareExecuted"` // executed / targets, in %
	JobState   string  `json:"state"`
	LoadAvg1   float64 `json:"loadAverage1"`
	ElapsedSec float64 `json:"seconds"`
}

type report struct {
	Started   time.Time          `json:"started"`
	Mounts    int                `json:"mounts"`
	Phones    int                `json:"phones"`
	PassEvery string             `json:"passEvery"`
	Onboard   float64            `json:"onboardSeconds"`
	Rows      []row              `json:"rows"`
	Reached   map[string]float64 `json:"reachedMinutes"` // "50", "90", "99", "100" → minutes after the job's creation
	Mountsim  json.RawMessage    `json:"mountsim,omitempty"`
}

// jobCounts is the part of a Job read here.
type jobCounts struct {
	ID      string `json:"id"`
	State   string `json:"state"`
	Targets int    `json:"targets"`
	Counts  struct {
		Pending, Issued, Executed, Refused, Unconfirmed int
	} `json:"counts"`
}

func main() {
	var cfg config
	flag.StringVar(&cfg.Base, "base", "http://127.0.0.1:8080", "mountd's base URL")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "mountd's database (postgres://…), to create the account")
	flag.StringVar(&cfg.Mountsim, "mountsim", "mountsim", "the mountsim binary")
	flag.IntVar(&cfg.Mounts, "mounts", 1000, "mounts in the fleet")
	flag.IntVar(&cfg.Phones, "phones", 10, "phones passing mounts")
	flag.DurationVar(&cfg.PassEvery, "pass-every", 6*time.Second, "mean time between two passes of one phone")
	flag.DurationVar(&cfg.Every, "every", 10*time.Minute, "time between two printed rows")
	flag.DurationVar(&cfg.Duration, "duration", time.Hour, "how long to measure after the job's creation")
	flag.DurationVar(&cfg.Poll, "poll", 5*time.Second, "time between two reads of the job (for the thresholds)")
	flag.DurationVar(&cfg.ReportInterval, "report-interval", time.Minute, "mountsim's --report-interval")
	flag.StringVar(&cfg.Code, "code", "SET_RFID_MODE", "the job's command")
	flag.StringVar(&cfg.Params, "params", `{"rfidMode":"NORMAL"}`, "the job's params (JSON)")
	flag.StringVar(&cfg.Filter, "filter", "", "the job's filter; empty: the fleet's uids as mountUids")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "mountsim's --seed (the phones' choices)")
	flag.BoolVar(&cfg.JSON, "json", false, "print the report as JSON at the end")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "jobbench %s: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.Mounts < 1 || cfg.Mounts > 65535 || cfg.Phones < 1 || cfg.Phones > 1000 || cfg.PassEvery <= 0 || cfg.Every <= 0 || cfg.Poll <= 0 {
		return errors.New("--mounts 1 to 65535, --phones 1 to 1000, durations positive")
	}
	var params map[string]string
	if err := json.Unmarshal([]byte(cfg.Params), &params); err != nil {
		return fmt.Errorf("--params: %w", err)
	}
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	acc, err := core.NewAccountService(store, nil).Create(ctx, "jobbench "+runID)
	closeStore()
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	api := client.New(cfg.Base, client.CredentialsSource(client.ClientCredentials(cfg.Base, acc.ClientID, acc.ClientSecret,
		[]string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}), hc), client.Options{HTTPClient: hc})
	rep := report{Started: time.Now().UTC(), Mounts: cfg.Mounts, Phones: cfg.Phones, PassEvery: cfg.PassEvery.String(), Reached: map[string]float64{}}

	// mountsim: the fleet and its phones, until this run ends.
	prefix := "JB" + strings.ToUpper(runID)
	simCtx, simCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer simCancel()
	sim := exec.CommandContext(simCtx, cfg.Mountsim, "--mounts", strconv.Itoa(cfg.Mounts), "--prefix", prefix, "--air", "",
		"--api", cfg.Base, "--associate", "--report-interval", cfg.ReportInterval.String(), "--phones", strconv.Itoa(cfg.Phones),
		"--pass-every", cfg.PassEvery.String(), "--seed", strconv.FormatUint(cfg.Seed, 10), "--concurrency", "16", "--json", "--log-level", "info")
	sim.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+acc.ClientID, "MOUNTSIM_CLIENT_SECRET="+acc.ClientSecret)
	sim.Cancel = func() error { return sim.Process.Signal(syscall.SIGTERM) }
	sim.WaitDelay = time.Minute
	var simOut bytes.Buffer
	sim.Stdout = &simOut
	simErr, err := sim.StderrPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := sim.Start(); err != nil {
		return fmt.Errorf("mountsim: %w", err)
	}
	associated := make(chan struct{})
	go func() {
		// mountsim's log goes on to ours; its "association done" line
		// tells the fleet is associated.
		sc := bufio.NewScanner(simErr)
		once := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(os.Stderr, "mountsim:", line)
			if !once && strings.Contains(line, "association done") {
				once = true
				close(associated)
			}
		}
	}()
	simDone := make(chan error, 1)
	go func() { simDone <- sim.Wait() }()
	select {
	case <-associated:
	case err := <-simDone:
		return fmt.Errorf("mountsim ended before associating the fleet: %v", err)
	case <-ctx.Done():
		return ctx.Err()
	}
	rep.Onboard = time.Since(start).Seconds()
	logf("%d mounts associated in %.1f s; %d phones, one pass each every %s on average", cfg.Mounts, rep.Onboard, cfg.Phones, cfg.PassEvery)

	body := map[string]any{"code": cfg.Code, "params": params, "description": "jobbench " + runID}
	if cfg.Filter != "" {
		body["filter"] = cfg.Filter
	} else {
		uids := make([]string, cfg.Mounts)
		for i := range uids {
			uids[i] = fmt.Sprintf("%s-%04d", prefix, i+1)
		}
		body["mountUids"] = uids
	}
	var job jobCounts
	if err := api.Do(ctx, http.MethodPost, "/jobs", body, &job); err != nil {
		return fmt.Errorf("create the job: %w", err)
	}
	created := time.Now()
	logf("job %s created over %d targets", job.ID, job.Targets)
	if !cfg.JSON {
		fmt.Fprintf(out, "jobbench: %d mounts, %d phones passing a random mount every %s on average (seed %d), job %s %s over %d targets\n",
			cfg.Mounts, cfg.Phones, cfg.PassEvery, cfg.Seed, job.ID, cfg.Code, job.Targets)
		fmt.Fprintf(out, "%8s %8s %9s %8s %8s %8s %10s %9s\n", "minutes", "targets", "executed", "refused", "issued", "pending", "executed%", "load1")
	}
	thresholds := []float64{50, 90, 99, 100}
	nextRow := created.Add(cfg.Every)
	end := created.Add(cfg.Duration)
	tick := time.NewTicker(cfg.Poll)
	defer tick.Stop()
	for {
		var j jobCounts
		err := api.Do(context.WithoutCancel(ctx), http.MethodGet, "/jobs/"+job.ID, nil, &j)
		now := time.Now()
		if err == nil && j.Targets > 0 {
			share := 100 * float64(j.Counts.Executed) / float64(j.Targets)
			for _, th := range thresholds {
				k := strconv.FormatFloat(th, 'f', -1, 64)
				if _, done := rep.Reached[k]; !done && share >= th {
					rep.Reached[k] = now.Sub(created).Minutes()
					logf("%s %% executed after %.1f min", k, rep.Reached[k])
				}
			}
			if !now.Before(nextRow) || !now.Before(end) {
				r := row{Minutes: now.Sub(created).Minutes(), Targets: j.Targets, Executed: j.Counts.Executed, Refused: j.Counts.Refused,
					Issued: j.Counts.Issued, Pending: j.Counts.Pending, Share: share, JobState: j.State,
					LoadAvg1: benchstat.LoadAvg()[0], ElapsedSec: now.Sub(created).Seconds()}
				rep.Rows = append(rep.Rows, r)
				if !cfg.JSON {
					fmt.Fprintf(out, "%8.1f %8d %9d %8d %8d %8d %9.2f%% %9.2f\n", r.Minutes, r.Targets, r.Executed, r.Refused, r.Issued, r.Pending, r.Share, r.LoadAvg1)
				}
				for !nextRow.After(now) {
					nextRow = nextRow.Add(cfg.Every)
				}
			}
		} else if err != nil {
			logf("read the job: %v", err)
		}
		if !now.Before(end) {
			break
		}
		select {
		case <-ctx.Done():
			end = now // a row for where it stood, then stop
		case err := <-simDone:
			return fmt.Errorf("mountsim ended early: %v", err)
		case <-tick.C:
		}
	}
	simCancel()
	<-simDone
	rep.Mountsim = bytes.TrimSpace(simOut.Bytes())
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	for _, th := range thresholds {
		k := strconv.FormatFloat(th, 'f', -1, 64)
		if m, ok := rep.Reached[k]; ok {
			fmt.Fprintf(out, "%s %% executed after %.1f min\n", k, m)
		} else {
			fmt.Fprintf(out, "%s %% not reached\n", k)
		}
	}
	fmt.Fprintf(out, "mountsim: %s\n", rep.Mountsim)
	return nil
}
