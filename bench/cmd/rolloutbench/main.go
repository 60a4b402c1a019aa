// Command rolloutbench measures health-gated firmware rollouts
// (docs/api.md, "Rollouts") over a fleet that only phones passing by can
// reach. For each --rates entry it starts mountsim with --mounts mounts
// (associated, reporting, each on --from) and --phones phones that pass a
// random mount every --pass-every on average and run its pending commands
// with the SDK's Sync (installing firmware among them), with that
// --firmware-failure-rate; it creates one rollout of --to over the fleet
// (--phases, --min-sample, --failure-threshold, --health-window) and
// follows it until it COMPLETED, or PAUSED and its installs under way
// were decided. Then it checks the gates from outside, through the API:
//
//   - offeredOutside: targets given an INSTALL_FIRMWARE signed before
//     their phase's ROLLOUT_PHASE_OPENED, or whose phase never opened
//     (must be 0);
//   - healthyUnproven: HEALTHY targets whose mount is not on the new
//     revision or has no verified state entry since its install began
//     (must be 0);
//
// and reports the phase it paused in and the counts, or the time each
// phase took (from the events' times).
//
// run.sh starts the throw-away PostgreSQL and mountd on it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

type config struct {
	Base, DatabaseURL, Mountsim, Mountd string
	Mounts, Phones                      int
	PassEvery, ReportInterval           time.Duration
	Rates                               []float64
	FailureMode                         string
	Phases                              []int
	MinSample, FailureThreshold         int
	HealthWindow                        string
	RequireIdle                         bool
	ImageSize                           int
	Timeout                             time.Duration
	Seed                                uint64
	JSON                                bool
}

// rolloutView is the part of a Rollout read here.
type rolloutView struct {
	ID           string  `json:"id"`
	State        string  `json:"state"`
	PausedReason *string `json:"pausedReason"`
	Phases       []int   `json:"phases"`
	OpenPhase    int     `json:"openPhase"`
	Targets      int     `json:"targets"`
	Counts       counts  `json:"counts"`
	CreatedAt    string  `json:"createdAt"`
	EndedAt      *string `json:"endedAt"`
}

type counts struct {
	Pending    int `json:"pending"`
	Eligible   int `json:"eligible"`
	Installing int `json:"installing"`
	Healthy    int `json:"healthy"`
	Failed     int `json:"failed"`
}

type targetView struct {
	UID             string  `json:"uid"`
	State           string  `json:"state"`
	Phase           int     `json:"phase"`
	CommandID       *string `json:"commandId"`
	InstallingSince *string `json:"installingSince"`
	Reason          *string `json:"reason"`
}

type eventView struct {
	Type       string       `json:"type"`
	OccurredAt time.Time    `json:"occurredAt"`
	Rollout    *rolloutView `json:"rollout"`
}

// phaseRow is one phase of a run: when it opened and how long it took
// (to the next phase's opening, the completion or the pause).
type phaseRow struct {
	Phase       int     `json:"phase"`
	Percent     int     `json:"percent"`
	Targets     int     `json:"targets"`
	OpenedAfter float64 `json:"openedAfterSeconds"` // after the rollout's creation
	Seconds     float64 `json:"seconds"`
	EndedBy     string  `json:"endedBy"` // the next ROLLOUT_PHASE_OPENED, ROLLOUT_COMPLETED, ROLLOUT_PAUSED, or "" (the run ended)
	// Expected is what the pass rate alone allows for a phase that ends
	// with its last target decided: its k targets are first passed after
	// (N/λ)·H(k) on average (λ passes a second over N mounts, each pass a
	// random mount: the largest of k exponential times), then the health
	// window, then half a sweep interval on average.
	Expected float64 `json:"expectedSeconds"`
}

// runReport is one rollout.
type runReport struct {
	Rate            float64         `json:"firmwareFailureRate"`
	Mode            string          `json:"firmwareFailure"`
	Rollout         string          `json:"rollout"`
	Onboard         float64         `json:"onboardSeconds"`
	State           string          `json:"state"`
	PausedReason    string          `json:"pausedReason,omitempty"`
	PausedInPhase   *int            `json:"pausedInPhase,omitempty"`
	PausedBeforeEnd bool            `json:"pausedBeforeLastPhase"`
	AtPause         *counts         `json:"countsAtPause,omitempty"`
	Counts          counts          `json:"counts"`
	Targets         int             `json:"targets"`
	Seconds         float64         `json:"seconds"` // creation to COMPLETED or to the pause
	Phases          []phaseRow      `json:"phases"`
	Events          []string        `json:"events"`
	OfferedOutside  int             `json:"offeredOutside"`
	UnopenedOffered int             `json:"unopenedPhaseTargetsOffered"`
	UnopenedTargets int             `json:"unopenedPhaseTargets"`
	HealthyUnproven int             `json:"healthyUnproven"`
	Installs        int             `json:"installCommands"` // INSTALL_FIRMWARE signed over the fleet
	FailedReasons   map[string]int  `json:"failedReasons"`
	LoadAvg1        float64         `json:"loadAverage1"`
	PassesPerSecond float64         `json:"passesPerSecond"` // mountsim's phones, over its whole run
	Mountsim        json.RawMessage `json:"mountsim,omitempty"`
}

type report struct {
	Started      time.Time   `json:"started"`
	Mounts       int         `json:"mounts"`
	Phones       int         `json:"phones"`
	PassEvery    string      `json:"passEvery"`
	Phases       []int       `json:"phases"`
	MinSample    int         `json:"minSample"`
	Threshold    int         `json:"failureThreshold"`
	HealthWindow string      `json:"healthWindow"`
	Runs         []runReport `json:"runs"`
}

func main() {
	var cfg config
	var rates, phases string
	flag.StringVar(&cfg.Base, "base", "http://127.0.0.1:8080", "mountd's base URL")
	flag.StringVar(&cfg.DatabaseURL, "database-url", "", "mountd's database (postgres://…), to create the account")
	flag.StringVar(&cfg.Mountsim, "mountsim", "mountsim", "the mountsim binary")
	flag.StringVar(&cfg.Mountd, "mountd", filepath.Join(os.Getenv("BENCH_DIR"), "mountd"), "the mountd binary, for `mountd firmware publish` (MOUNTD_DATA_DIR, MOUNTD_MASTER_KEY, MOUNTD_DATABASE_URL from the environment)")
	flag.IntVar(&cfg.Mounts, "mounts", 1000, "mounts in the fleet")
	flag.IntVar(&cfg.Phones, "phones", 20, "phones passing mounts")
	flag.DurationVar(&cfg.PassEvery, "pass-every", 100*time.Millisecond, "mean time between two passes of one phone")
	flag.DurationVar(&cfg.ReportInterval, "report-interval", 10*time.Second, "mountsim's --report-interval")
	flag.StringVar(&rates, "rates", "0.08,0", "one rollout per --firmware-failure-rate, in order")
	flag.StringVar(&cfg.FailureMode, "firmware-failure", "rollback", "mountsim's --firmware-failure: rollback or silent")
	flag.StringVar(&phases, "phases", "1,10,50,100", "the rollout's phases")
	flag.IntVar(&cfg.MinSample, "min-sample", 10, "the rollout's minSample")
	flag.IntVar(&cfg.FailureThreshold, "failure-threshold", 5, "the rollout's failureThreshold (percent)")
	flag.StringVar(&cfg.HealthWindow, "health-window", "10s", "the rollout's healthWindow")
	flag.BoolVar(&cfg.RequireIdle, "require-idle", true, "the rollout's requireIdle")
	flag.IntVar(&cfg.ImageSize, "image-size", 16<<10, "bytes of the published firmware image")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "give a rollout up after this long")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "mountsim's --seed")
	flag.BoolVar(&cfg.JSON, "json", false, "print the report as JSON at the end")
	flag.Parse()
	for _, s := range strings.Split(rates, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || f < 0 || f > 1 {
			fmt.Fprintln(os.Stderr, "rolloutbench: --rates: numbers from 0 to 1")
			os.Exit(2)
		}
		cfg.Rates = append(cfg.Rates, f)
	}
	for _, s := range strings.Split(phases, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "rolloutbench: --phases: integers")
			os.Exit(2)
		}
		cfg.Phases = append(cfg.Phases, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "rolloutbench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rolloutbench %s: "+format+"\n", append([]any{time.Now().UTC().Format("15:04:05")}, args...)...)
}

func run(ctx context.Context, cfg config, out io.Writer) error {
	if cfg.Mounts < 1 || cfg.Mounts > 65535 || cfg.Phones < 1 || cfg.Phones > 1000 || cfg.PassEvery <= 0 || len(cfg.Rates) == 0 {
		return errors.New("--mounts 1 to 65535, --phones 1 to 1000, --pass-every positive, at least one rate")
	}
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	acc, err := core.NewAccountService(store, nil).Create(ctx, "rolloutbench "+runID)
	closeStore()
	if err != nil {
		return err
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	api := client.New(cfg.Base, client.CredentialsSource(client.ClientCredentials(cfg.Base, acc.ClientID, acc.ClientSecret,
		[]string{"openid", "sub", "urn:mountd:iam:org:project:id:mountd:aud"}), hc), client.Options{HTTPClient: hc})
	rep := report{Started: time.Now().UTC(), Mounts: cfg.Mounts, Phones: cfg.Phones, PassEvery: cfg.PassEvery.String(),
		Phases: cfg.Phases, MinSample: cfg.MinSample, Threshold: cfg.FailureThreshold, HealthWindow: cfg.HealthWindow}
	for i, rate := range cfg.Rates {
		// Each run has a model and a fleet of its own.
		tag := strings.ToUpper(runID) + strconv.Itoa(i)
		r, err := runOne(ctx, cfg, api, acc.ClientID, acc.ClientSecret, tag, rate)
		if err != nil {
			return fmt.Errorf("rate %g: %w", rate, err)
		}
		rep.Runs = append(rep.Runs, r)
		if !cfg.JSON {
			printRun(out, cfg, r)
		}
	}
	if cfg.JSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return nil
}

// publish puts a random image of size bytes in the catalogue as model's
// revision, visible an hour ago.
func publish(ctx context.Context, cfg config, model, revision string) error {
	data := make([]byte, cfg.ImageSize)
	_, _ = rand.Read(data)
	f, err := os.CreateTemp("", "rolloutbench-*.bin")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		return err
	}
	f.Close()
	// One server on PostgreSQL: its own disk serves every download.
	cmd := exec.CommandContext(ctx, cfg.Mountd, "firmware", "publish", "--local-blobs", "--model", model, "--revision", revision, "--file", f.Name(),
		"--available-since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--json")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mountd firmware publish %s %s: %v\n%s", model, revision, err, out)
	}
	return nil
}

const (
	fromRevision = "1.0.0"
	toRevision   = "2.0.0"
)

func runOne(ctx context.Context, cfg config, api *client.Client, clientID, secret, tag string, rate float64) (runReport, error) {
	rr := runReport{Rate: rate, Mode: cfg.FailureMode, FailedReasons: map[string]int{}}
	model, prefix := "RB-"+tag, "RB"+tag
	for _, rev := range []string{fromRevision, toRevision} {
		if err := publish(ctx, cfg, model, rev); err != nil {
			return rr, err
		}
	}

	simCtx, simCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer simCancel()
	args := []string{"--mounts", strconv.Itoa(cfg.Mounts), "--prefix", prefix, "--model", model, "--software-revision", fromRevision,
		"--air", "", "--api", cfg.Base, "--associate", "--report-interval", cfg.ReportInterval.String(), "--battery-drain", "0",
		"--phones", strconv.Itoa(cfg.Phones), "--pass-every", cfg.PassEvery.String(), "--seed", strconv.FormatUint(cfg.Seed, 10),
		"--concurrency", "16", "--json", "--log-level", "info"}
	if rate > 0 {
		args = append(args, "--firmware-failure-rate", strconv.FormatFloat(rate, 'f', -1, 64), "--firmware-failure", cfg.FailureMode)
	}
	sim := exec.CommandContext(simCtx, cfg.Mountsim, args...)
	sim.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+clientID, "MOUNTSIM_CLIENT_SECRET="+secret)
	sim.Cancel = func() error { return sim.Process.Signal(syscall.SIGTERM) }
	sim.WaitDelay = time.Minute
	var simOut bytes.Buffer
	sim.Stdout = &simOut
	simErr, err := sim.StderrPipe()
	if err != nil {
		return rr, err
	}
	start := time.Now()
	if err := sim.Start(); err != nil {
		return rr, fmt.Errorf("mountsim: %w", err)
	}
	associated := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(simErr)
		once := false
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "level=INFO") && !strings.Contains(line, "association done") && !strings.Contains(line, "fleet up") {
				continue // mountsim's per-pass lines: too many to echo
			}
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
		return rr, fmt.Errorf("mountsim ended before associating the fleet: %v", err)
	case <-ctx.Done():
		return rr, ctx.Err()
	}
	// Every mount reported (requireIdle reads the latest lock and helmet).
	filter := fmt.Sprintf(`modelNumber = "%s" AND batteryLevel > 0`, model)
	for {
		var page struct {
			Pagination struct {
				TotalItems int `json:"totalItems"`
			} `json:"pagination"`
		}
		if err := api.Do(ctx, http.MethodGet, "/mounts?pageSize=1&filter="+url.QueryEscape(filter), nil, &page); err != nil {
			return rr, err
		}
		if page.Pagination.TotalItems == cfg.Mounts {
			break
		}
		select {
		case <-ctx.Done():
			return rr, ctx.Err()
		case err := <-simDone:
			return rr, fmt.Errorf("mountsim ended early: %v", err)
		case <-time.After(time.Second):
		}
	}
	rr.Onboard = time.Since(start).Seconds()
	logf("rate %g: %d mounts associated and reporting in %.1f s", rate, cfg.Mounts, rr.Onboard)

	body := map[string]any{"modelNumber": model, "softwareRevision": toRevision, "phases": cfg.Phases, "minSample": cfg.MinSample,
		"failureThreshold": cfg.FailureThreshold, "healthWindow": cfg.HealthWindow, "requireIdle": cfg.RequireIdle}
	var ro rolloutView
	if err := api.Do(ctx, http.MethodPost, "/rollouts", body, &ro); err != nil {
		return rr, fmt.Errorf("create the rollout: %w", err)
	}
	created := time.Now()
	rr.Rollout, rr.Targets = ro.ID, ro.Targets
	logf("rollout %s over %d targets", ro.ID, ro.Targets)
	deadline := created.Add(cfg.Timeout)
	last := ""
	for {
		if err := api.Do(context.WithoutCancel(ctx), http.MethodGet, "/rollouts/"+ro.ID, nil, &ro); err != nil {
			logf("read the rollout: %v", err)
		} else {
			line := fmt.Sprintf("%s phase %d: pending %d eligible %d installing %d healthy %d failed %d", ro.State, ro.OpenPhase,
				ro.Counts.Pending, ro.Counts.Eligible, ro.Counts.Installing, ro.Counts.Healthy, ro.Counts.Failed)
			if line != last {
				logf("%.0f s: %s", time.Since(created).Seconds(), line)
				last = line
			}
			if ro.State == "PAUSED" && rr.AtPause == nil {
				c := ro.Counts
				rr.AtPause = &c
				rr.Seconds = time.Since(created).Seconds()
				p := ro.OpenPhase
				rr.PausedInPhase = &p
				rr.PausedBeforeEnd = ro.OpenPhase < len(ro.Phases)-1
				if ro.PausedReason != nil {
					rr.PausedReason = *ro.PausedReason
				}
			}
			if ro.State == "COMPLETED" || ro.State == "CANCELED" || (ro.State == "PAUSED" && ro.Counts.Installing == 0) {
				break
			}
		}
		if time.Now().After(deadline) {
			logf("gave up after %s", cfg.Timeout)
			break
		}
		select {
		case <-ctx.Done():
			deadline = time.Now() // read once more, then stop
		case err := <-simDone:
			return rr, fmt.Errorf("mountsim ended early: %v", err)
		case <-time.After(time.Second):
		}
	}
	if ro.State == "COMPLETED" {
		rr.Seconds = time.Since(created).Seconds()
	}
	rr.State, rr.Counts, rr.LoadAvg1 = ro.State, ro.Counts, benchstat.LoadAvg()[0]
	simCancel()
	<-simDone
	rr.Mountsim = bytes.TrimSpace(simOut.Bytes())
	var simSum struct {
		Passes  float64 `json:"passes"`
		Seconds float64 `json:"seconds"`
	}
	if json.Unmarshal(rr.Mountsim, &simSum) == nil && simSum.Seconds > 0 {
		rr.PassesPerSecond = simSum.Passes / simSum.Seconds
	}

	if err := audit(ctx, api, &rr, ro, created, cfg.HealthWindow); err != nil {
		return rr, err
	}
	return rr, nil
}

// audit checks the rollout from outside once it stopped moving: the
// events' phase times, each target's INSTALL_FIRMWARE commands against
// its phase's opening, and each HEALTHY target's proof.
func audit(ctx context.Context, api *client.Client, rr *runReport, ro rolloutView, created time.Time, cfgHealthWindow string) error {
	// The events, for the phases' opening times.
	var events []eventView
	q := url.Values{"limit": {"1000"}, "types": {"ROLLOUT_PHASE_OPENED,ROLLOUT_PAUSED,ROLLOUT_COMPLETED"}}
	for {
		var page struct {
			Events []eventView `json:"events"`
			Next   string      `json:"next"`
		}
		if err := api.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		for _, e := range page.Events {
			if e.Rollout != nil && e.Rollout.ID == ro.ID {
				events = append(events, e)
			}
		}
		if len(page.Events) == 0 || page.Next == "" {
			break
		}
		q.Set("after", page.Next)
	}
	opened := map[int]time.Time{}
	for i, e := range events {
		rr.Events = append(rr.Events, fmt.Sprintf("%s(%d)", e.Type, e.Rollout.OpenPhase))
		if e.Type == "ROLLOUT_PHASE_OPENED" {
			opened[e.Rollout.OpenPhase] = e.OccurredAt
			row := phaseRow{Phase: e.Rollout.OpenPhase, Percent: ro.Phases[e.Rollout.OpenPhase], OpenedAfter: e.OccurredAt.Sub(created).Seconds()}
			for _, next := range events[i+1:] {
				if next.Type == "ROLLOUT_PHASE_OPENED" || next.Type == "ROLLOUT_COMPLETED" || next.Type == "ROLLOUT_PAUSED" {
					row.Seconds, row.EndedBy = next.OccurredAt.Sub(e.OccurredAt).Seconds(), next.Type
					break
				}
			}
			rr.Phases = append(rr.Phases, row)
		}
	}

	// The targets.
	var targets []targetView
	for page := 1; ; page++ {
		var p struct {
			Mounts     []targetView `json:"mounts"`
			Pagination struct {
				TotalPages int `json:"totalPages"`
			} `json:"pagination"`
		}
		if err := api.Do(ctx, http.MethodGet, fmt.Sprintf("/rollouts/%s/mounts?pageSize=100&currentPage=%d", ro.ID, page), nil, &p); err != nil {
			return fmt.Errorf("rollout mounts: %w", err)
		}
		targets = append(targets, p.Mounts...)
		if page >= p.Pagination.TotalPages {
			break
		}
	}
	window, _ := time.ParseDuration(cfgHealthWindow)
	for i := range rr.Phases {
		for _, t := range targets {
			if t.Phase == rr.Phases[i].Phase {
				rr.Phases[i].Targets++
			}
		}
		if rr.PassesPerSecond > 0 {
			h := 0.0
			for k := 1; k <= rr.Phases[i].Targets; k++ {
				h += 1 / float64(k)
			}
			rr.Phases[i].Expected = float64(len(targets))/rr.PassesPerSecond*h + window.Seconds() + core.RolloutSweepEvery.Seconds()/2
		}
	}

	// Each target's commands and, for the HEALTHY, the proof: 8 at once.
	var mu sync.Mutex
	var firstErr error
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			outside, installs, unproven, err := checkTarget(ctx, api, t, opened)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			rr.Installs += installs
			if outside {
				rr.OfferedOutside++
			}
			if _, open := opened[t.Phase]; !open {
				rr.UnopenedTargets++
				if installs > 0 {
					rr.UnopenedOffered++
				}
			}
			if unproven {
				rr.HealthyUnproven++
			}
			if t.State == "FAILED" && t.Reason != nil {
				rr.FailedReasons[*t.Reason]++
			}
		})
	}
	wg.Wait()
	return firstErr
}

// checkTarget reads t's INSTALL_FIRMWARE commands: outside when one was
// signed before its phase opened (or its phase never opened); and, when
// t is HEALTHY, unproven unless its mount is on the new revision with a
// verified state entry since the install began.
func checkTarget(ctx context.Context, api *client.Client, t targetView, opened map[int]time.Time) (outside bool, installs int, unproven bool, err error) {
	at, open := opened[t.Phase]
	for page := 1; ; page++ {
		var p struct {
			Commands []struct {
				Code        string    `json:"code"`
				GeneratedAt time.Time `json:"generatedAt"`
			} `json:"commands"`
			Pagination struct {
				TotalPages int `json:"totalPages"`
			} `json:"pagination"`
		}
		if err := api.Do(ctx, http.MethodGet, fmt.Sprintf("/mounts/%s/commands?pageSize=100&currentPage=%d", t.UID, page), nil, &p); err != nil {
			return false, 0, false, fmt.Errorf("%s commands: %w", t.UID, err)
		}
		for _, c := range p.Commands {
			if c.Code != "INSTALL_FIRMWARE" {
				continue
			}
			installs++
			if !open || c.GeneratedAt.Before(at.Add(-time.Millisecond)) {
				outside = true
			}
		}
		if page >= p.Pagination.TotalPages {
			break
		}
	}
	if t.State != "HEALTHY" {
		return outside, installs, false, nil
	}
	var m []struct { // GET /mounts/{uid} answers a list of one
		SoftwareRevision string `json:"softwareRevision"`
	}
	if err := api.Do(ctx, http.MethodGet, "/mounts/"+t.UID, nil, &m); err != nil {
		return false, 0, false, err
	}
	if len(m) != 1 || m[0].SoftwareRevision != toRevision || t.InstallingSince == nil {
		return outside, installs, true, nil
	}
	var st struct {
		States []struct {
			Verified bool `json:"verified"`
		} `json:"states"`
	}
	q := url.Values{"from": {*t.InstallingSince}, "pageSize": {"100"}}
	if err := api.Do(ctx, http.MethodGet, "/mounts/"+t.UID+"/states?"+q.Encode(), nil, &st); err != nil {
		return false, 0, false, err
	}
	for _, s := range st.States {
		if s.Verified {
			return outside, installs, false, nil
		}
	}
	return outside, installs, true, nil
}

func printRun(out io.Writer, cfg config, r runReport) {
	fmt.Fprintf(out, "rolloutbench: %d mounts, %d phones every %s, phases %v, minSample %d, failureThreshold %d %%, healthWindow %s, firmware failure rate %g (%s)\n",
		cfg.Mounts, cfg.Phones, cfg.PassEvery, cfg.Phases, cfg.MinSample, cfg.FailureThreshold, cfg.HealthWindow, r.Rate, r.Mode)
	fmt.Fprintf(out, "  rollout %s: %s after %.1f s; events %v\n", r.Rollout, r.State, r.Seconds, r.Events)
	if r.AtPause != nil {
		fmt.Fprintf(out, "  paused (%s) in phase %d (%d %%), before the last phase: %v; at the pause healthy %d failed %d installing %d eligible %d pending %d\n",
			r.PausedReason, *r.PausedInPhase, cfg.Phases[*r.PausedInPhase], r.PausedBeforeEnd,
			r.AtPause.Healthy, r.AtPause.Failed, r.AtPause.Installing, r.AtPause.Eligible, r.AtPause.Pending)
	}
	fmt.Fprintf(out, "  counts: healthy %d failed %d installing %d eligible %d pending %d (of %d); failed reasons %v\n",
		r.Counts.Healthy, r.Counts.Failed, r.Counts.Installing, r.Counts.Eligible, r.Counts.Pending, r.Targets, r.FailedReasons)
	fmt.Fprintf(out, "  phones' passes: %.1f a second\n", r.PassesPerSecond)
	fmt.Fprintf(out, "  %8s %8s %8s %14s %10s %10s %7s  %s\n", "phase", "percent", "targets", "opened after s", "seconds", "expected s", "ratio", "ended by")
	for _, p := range r.Phases {
		ratio := 0.0
		if p.Expected > 0 {
			ratio = p.Seconds / p.Expected
		}
		fmt.Fprintf(out, "  %8d %8d %8d %14.1f %10.1f %10.1f %7.2f  %s\n", p.Phase, p.Percent, p.Targets, p.OpenedAfter, p.Seconds, p.Expected, ratio, p.EndedBy)
	}
	fmt.Fprintf(out, "  offered outside their open phase: %d; targets of unopened phases %d, offered %d; HEALTHY without proof: %d; INSTALL_FIRMWARE signed %d\n",
		r.OfferedOutside, r.UnopenedTargets, r.UnopenedOffered, r.HealthyUnproven, r.Installs)
	fmt.Fprintf(out, "  mountsim: %s\n", r.Mountsim)
}
