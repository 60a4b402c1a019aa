// Command mountbench is a load generator for a running mountd. It creates an
// account (directly in the database, through core.AccountService), a token and
// a set of mounts, then drives the server over HTTP with many concurrent
// clients and reports throughput and p50/p99/p999 latency, each beside a
// baseline measured in the same run:
//
//   - ingest: closed loop, --clients workers POST batches of --batch state
//     entries to /api/v1/mounts/{uid}/states; the baseline inserts the same
//     rows (same batch size, same concurrency) with a plain multi-row INSERT
//     through bun into a scratch copy of mount_states. Afterwards the stored
//     entries are counted in the database: lost = accepted - counted.
//   - get: open loop at a fixed arrival rate (--rate) of
//     GET /api/v1/mounts/{uid}; the baseline is a bare net/http handler
//     in a process of its own (this binary again, bare.go) on 127.0.0.1:0
//     that answers the same JSON bytes, driven with the identical load.
//   - getmax: closed loop, the most GET /api/v1/mounts/{uid} per second,
//     mountd (and a second build at --base-b) against the bare handler in
//     alternating rounds.
//   - tokens: --token-clients clients renewing a token every --renew-every
//     from their own loopback addresses while --wrong-rate wrong secrets a
//     second come from others; with --base-b both builds in alternating
//     rounds, each with its own clients (tokens.go).
//   - tokenflood, graphqlflood, headerflood, methodflood, authorizeflood,
//     rateflood: the get loop alone (the baseline), then again while
//     --flood-clients send hostile requests from many loopback addresses
//     (wrong secrets; aliased GraphQL event queries with a rider's token;
//     reports to webhooks whose receiver answers with 9 MiB of headers;
//     invented HTTP methods; unfinished sign-ins with a 60 KB state;
//     another account past its rate limit); reports GET latency under the
//     flood, mountd's peak RSS and what the flood left behind (floods.go).
//
// Every loop ends by --duration and the tool stops by itself. Only loopback
// targets are accepted. Usage: mountbench --help; bench/mountbench.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/internal/version"
)

// config is every flag of mountbench.
type config struct {
	Base        string
	DatabaseURL string
	Scenario    string
	Clients     int
	Duration    time.Duration
	Warmup      time.Duration
	Rate        float64
	Batch       int
	Mounts      int
	Scope       string
	JSON        bool
	Baseline    bool
	Watch       string
	Timeout     time.Duration
	MaxLoad     float64
	MaxBusy     float64
	// Rounds splits --duration of ingest, onboard and getmax into
	// alternating rounds of the server and its baseline (0: the scenario's
	// default).
	Rounds int
	// OnboardClients are the onboard scenario's clients.
	OnboardClients int
	// tokenflood
	FloodClients int
	FloodSources int
	// getmax
	BaseB string
	// Steady makes the rules scenario's values stay in a band.
	Steady bool
	// The webhook scenarios (webhooks.go).
	WebhookReports int
	WebhookWriters int
	WebhookRate    float64
	// tokens
	TokenClients int
	RenewEvery   time.Duration
	WrongRate    float64
}

func main() {
	if os.Getenv(bareServeEnv) != "" {
		if err := serveBare(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "mountbench: baseline server:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "mountbench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("mountbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.StringVar(&c.Base, "base", "", "base address of a running mountd, e.g. http://127.0.0.1:8080 (loopback only)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "postgres://... of that mountd's database (loopback only): account creation, baseline, counting")
	fs.BoolVar(&c.Steady, "steady", false, "rules: report values in a band a fleet at rest reports, so that no rule's state changes (without it every code sweeps its range and rules raise and clear all the time)")
	fs.StringVar(&c.Scenario, "scenario", "all", "ingest, signed (signed against unsigned reports), rules (ingest with 10 alarm rules against none), get, onboard, getmax (closed-loop GET, most requests/s), tokens (token renewals under wrong secrets; with --base-b an A/B), all (ingest then get), webhooks (every webhook scenario) or one of "+strings.Join(webhookScenarios, ", ")+" (start mountd with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true), a comma-separated list of these (run in that order), or a flood: "+strings.Join(floodScenarios, ", "))
	fs.StringVar(&c.BaseB, "base-b", "", "getmax: a second mountd (another build, same database) measured in the same rounds: an A/B in one run")
	fs.IntVar(&c.FloodClients, "flood-clients", 200, "floods: parallel clients sending the flood's requests")
	fs.IntVar(&c.FloodSources, "flood-sources", 200, "floods: loopback source addresses (127.0.1.1 on) the flood comes from, 1-250")
	fs.IntVar(&c.TokenClients, "token-clients", 200, "tokens: clients renewing a token, each from its own loopback address (127.0.2.1 on)")
	fs.DurationVar(&c.RenewEvery, "renew-every", time.Minute, "tokens: how often each client renews its token (spread evenly over the period)")
	fs.Float64Var(&c.WrongRate, "wrong-rate", 20, "tokens: wrong secrets a second, from --flood-sources loopback addresses (127.0.1.1 on)")
	fs.IntVar(&c.Rounds, "rounds", 0, "measure the server and its baseline (getmax: and --base-b) in this many alternating rounds of --duration/rounds each, so that both see the same load of a shared machine (default: 1 for ingest and onboard, 6 for getmax)")
	fs.IntVar(&c.OnboardClients, "onboard-clients", 32, "onboard: concurrent clients, each onboarding one new mount after the other")
	fs.IntVar(&c.Clients, "clients", 32, "concurrent clients (ingest workers; get workers serving the arrival schedule)")
	fs.DurationVar(&c.Duration, "duration", 15*time.Second, "measured time of each phase")
	fs.DurationVar(&c.Warmup, "warmup", 2*time.Second, "unmeasured warm-up before each phase (its ingest entries are still counted)")
	fs.Float64Var(&c.Rate, "rate", 2000, "get: fixed arrival rate in requests per second (open loop)")
	fs.IntVar(&c.Batch, "batch", 50, "ingest: state entries per request (1-500)")
	fs.IntVar(&c.Mounts, "mounts", 200, "mounts to create (POST /api/v1/mounts, then confirm-association)")
	fs.StringVar(&c.Scope, "scope", "openid sub urn:mountd:iam:org:project:id:mountd:aud", "scope asked for at POST /oauth/v2/token")
	fs.IntVar(&c.WebhookReports, "webhook-reports", 5000, "webhook-burst, -drain, -fair: single-entry reports posted")
	fs.IntVar(&c.WebhookWriters, "webhook-writers", 16, "webhook scenarios: concurrent writers posting the reports (webhook-steady: 4 times as many, open loop)")
	fs.Float64Var(&c.WebhookRate, "webhook-rate", 1000, "webhook-steady: reports a second, for --duration")
	fs.BoolVar(&c.JSON, "json", false, "print the report as JSON")
	fs.BoolVar(&c.Baseline, "baseline", true, "also measure the same-run baselines (bun INSERT; bare net/http handler)")
	fs.StringVar(&c.Watch, "watch", "", "name=pid,... processes whose CPU use is reported per phase (children included); PostgreSQL is found by itself")
	fs.DurationVar(&c.Timeout, "timeout", 30*time.Second, "timeout of one HTTP request or database statement")
	fs.Float64Var(&c.MaxLoad, "max-load", 0, "before each measured phase wait (10 s steps, at most 10 min) until the 1-minute load average is below this; 0: do not wait")
	fs.Float64Var(&c.MaxBusy, "max-busy", 0.05, "with --max-load, also wait until the share of all CPUs busy over 2 s is below this (0.05: 5 %; an idle machine here is under 1 %); 0: do not check the CPUs")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: mountbench --base http://127.0.0.1:PORT --database-url postgres://...@127.0.0.1:PORT/DB [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, "mountbench version", version.String())
		return c, flag.ErrHelp
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	c.Base = strings.TrimRight(c.Base, "/")
	if c.Base == "" || c.DatabaseURL == "" {
		return errors.New("--base and --database-url are required")
	}
	u, err := url.Parse(c.Base)
	if err != nil || u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return fmt.Errorf("--base %q must be http://127.0.0.1:PORT", c.Base)
	}
	if !loopback(u.Hostname()) {
		return fmt.Errorf("--base %q: only loopback targets are allowed", c.Base)
	}
	d, err := url.Parse(c.DatabaseURL)
	if err != nil || (d.Scheme != "postgres" && d.Scheme != "postgresql") {
		return errors.New("--database-url must be a postgres:// URL")
	}
	if !loopback(d.Hostname()) {
		return fmt.Errorf("--database-url host %q: only loopback targets are allowed", d.Hostname())
	}
	for _, sc := range strings.Split(c.Scenario, ",") {
		known := append([]string{"ingest", "signed", "rules", "get", "onboard", "getmax", "tokens", "all", "webhooks"}, webhookScenarios...)
		if !slices.Contains(append(known, floodScenarios...), sc) {
			return fmt.Errorf("--scenario %q: want ingest, signed, rules, get, onboard, getmax, tokens, all (ingest and get), webhooks, %s, a list of them, or one of %s", c.Scenario, strings.Join(webhookScenarios, ", "), strings.Join(floodScenarios, ", "))
		}
		if slices.Contains(floodScenarios, sc) && sc != c.Scenario {
			return fmt.Errorf("--scenario %q: a flood runs alone", c.Scenario)
		}
	}
	if c.BaseB != "" {
		b, err := url.Parse(c.BaseB)
		if err != nil || b.Scheme != "http" || !loopback(b.Hostname()) {
			return fmt.Errorf("--base-b %q must be http://127.0.0.1:PORT", c.BaseB)
		}
	}
	if c.FloodClients < 1 || c.FloodClients > 2000 || c.FloodSources < 1 || c.FloodSources > 250 {
		return errors.New("--flood-clients must be 1 to 2000 and --flood-sources 1 to 250")
	}
	switch {
	case c.Clients < 1 || c.Clients > 1024 || c.OnboardClients < 1 || c.OnboardClients > 1024:
		return errors.New("--clients and --onboard-clients must be 1 to 1024")
	case c.Duration <= 0 || c.Duration > time.Hour:
		return errors.New("--duration must be positive and at most 1h")
	case c.Rounds < 0 || c.Rounds > 100:
		return errors.New("--rounds must be 1 to 100")
	case c.Warmup < 0 || c.Warmup > 10*time.Minute:
		return errors.New("--warmup must be 0 to 10m")
	case c.Rate <= 0 || c.Rate > 200000:
		return errors.New("--rate must be positive and at most 200000")
	case c.TokenClients < 1 || c.TokenClients > 10000:
		return errors.New("--token-clients must be 1 to 10000")
	case c.RenewEvery < time.Second || c.RenewEvery > time.Hour:
		return errors.New("--renew-every must be 1s to 1h")
	case c.WrongRate < 0.1 || c.WrongRate > 10000:
		return errors.New("--wrong-rate must be 0.1 to 10000")
	case c.Batch < 1 || c.Batch > 500:
		return errors.New("--batch must be 1 to 500")
	case c.Mounts < 1 || c.Mounts > 100000:
		return errors.New("--mounts must be 1 to 100000")
	case c.WebhookReports < 1 || c.WebhookReports > 1000000 || c.WebhookWriters < 1 || c.WebhookWriters > 256:
		return errors.New("--webhook-reports must be 1 to 1000000 and --webhook-writers 1 to 256")
	case c.WebhookRate <= 0 || c.WebhookRate > 100000:
		return errors.New("--webhook-rate must be positive and at most 100000")
	case c.Timeout <= 0:
		return errors.New("--timeout must be positive")
	case c.MaxLoad < 0:
		return errors.New("--max-load must not be negative")
	case c.MaxBusy < 0 || c.MaxBusy > 1:
		return errors.New("--max-busy must be 0 to 1")
	}
	_, err = parseWatch(c.Watch)
	return err
}

// roundsOr is --rounds, or def when it was not given.
func (c *config) roundsOr(def int) int {
	if c.Rounds == 0 {
		return def
	}
	return c.Rounds
}

// runs reports whether the --scenario list includes name ("all" is ingest
// and get).
func (c *config) runs(name string) bool {
	for _, sc := range strings.Split(c.Scenario, ",") {
		if sc == name || sc == "all" && (name == "ingest" || name == "get") || sc == "webhooks" && slices.Contains(webhookScenarios, name) {
			return true
		}
	}
	return false
}

func loopback(host string) bool { return benchstat.Loopback(host) }

func parseWatch(s string) ([]watched, error) {
	var out []watched
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, pid, ok := strings.Cut(item, "=")
		n, err := strconv.Atoi(pid)
		if !ok || name == "" || err != nil || n <= 0 {
			return nil, fmt.Errorf("--watch %q: want name=pid", item)
		}
		out = append(out, watched{name: name, pid: n})
	}
	return out, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer b.close()
	rep, err := b.run(ctx)
	if err != nil {
		return err
	}
	if cfg.JSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	rep.print(stdout)
	return nil
}
