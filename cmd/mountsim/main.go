// Command mountsim runs a fleet of simulated mounts: firmware behaviour
// (device/simmount) on a simulated BLE radio served on a socket, so
// mountctl and the SDK can scan, connect and release helmets, and state
// reports to mountd over HTTP on a schedule, as the mounts' gateway would.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/internal/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand(os.Stdout, os.Stderr, nil).Run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mountsim:", err)
		os.Exit(1)
	}
}

// newCommand builds the CLI; ready (if set) receives the air's address once
// the fleet is up, so tests can run it in process.
func newCommand(stdout, stderr io.Writer, ready chan<- string) *cli.Command {
	cfg := Config{}
	str := func(name, env, value, usage string, dst *string) cli.Flag {
		return &cli.StringFlag{Name: name, Value: value, Usage: usage, Sources: cli.EnvVars(env), Destination: dst}
	}
	dur := func(name, env string, value time.Duration, usage string, dst *time.Duration) cli.Flag {
		return &cli.DurationFlag{Name: name, Value: value, Usage: usage, Sources: cli.EnvVars(env), Destination: dst}
	}
	num := func(name, env string, value int, usage string, dst *int) cli.Flag {
		return &cli.IntFlag{Name: name, Value: value, Usage: usage, Sources: cli.EnvVars(env), Destination: dst}
	}
	return &cli.Command{
		Name:      "mountsim",
		Version:   version.String(),
		Usage:     "a fleet of simulated mounts on a simulated BLE radio, reporting their states to mountd",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags: []cli.Flag{
			num("mounts", "MOUNTSIM_MOUNTS", 10, "number of mounts", &cfg.Mounts),
			str("prefix", "MOUNTSIM_PREFIX", "SIM", "uid prefix: PREFIX-0001, PREFIX-0002, ...", &cfg.Prefix),
			str("air", "MOUNTSIM_AIR", "127.0.0.1:7390", "where the simulated radio is served: HOST:PORT or a Unix socket path; empty: not served", &cfg.Air),
			str("api", "MOUNTSIM_API", "http://127.0.0.1:8080", "mountd's address (and its identity provider's); the only address mountsim calls", &cfg.API),
			str("client-id", "MOUNTSIM_CLIENT_ID", "", "account client id; without credentials nothing is reported", &cfg.ClientID),
			str("client-secret", "MOUNTSIM_CLIENT_SECRET", "", "account client secret", &cfg.ClientSecret),
			str("project-id", "MOUNTSIM_PROJECT_ID", "mountd", "project id in the audience scope item", &cfg.ProjectID),
			str("idp-name", "MOUNTSIM_IDP_NAME", "mountd", "the <idp> in urn:<idp>:iam:org:project:id:<project_id>:aud", &cfg.IDPName),
			dur("report-interval", "MOUNTSIM_REPORT_INTERVAL", 10*time.Second, "time between two reports of a mount (±20% jitter); state changes are reported at once", &cfg.ReportInterval),
			&cli.BoolFlag{Name: "associate", Usage: "associate and confirm every mount with an owner token, delivering ASSOCIATE_OWNER to it directly", Sources: cli.EnvVars("MOUNTSIM_ASSOCIATE"), Destination: &cfg.Associate},
			dur("return-after", "MOUNTSIM_RETURN_AFTER", 0, "a released helmet comes back (mounted and locked) after this long; 0: never", &cfg.ReturnAfter),
			num("concurrency", "MOUNTSIM_CONCURRENCY", 16, "HTTP requests in flight at most", &cfg.Concurrency),
			dur("duration", "MOUNTSIM_DURATION", 0, "stop after this long; 0: until SIGINT or SIGTERM", &cfg.Duration),
			num("mtu", "MOUNTSIM_MTU", 23, "ATT MTU of every link", &cfg.MTU),
			dur("adv-interval", "MOUNTSIM_ADV_INTERVAL", 100*time.Millisecond, "advertising interval", &cfg.AdvInterval),
			dur("conn-interval", "MOUNTSIM_CONN_INTERVAL", 0, "simulated time of each ATT exchange (e.g. 30ms); 0: none", &cfg.ConnInterval),
			num("max-links", "MOUNTSIM_MAX_LINKS", 1, "centrals a mount accepts at once", &cfg.MaxLinks),
			&cli.FloatFlag{Name: "battery-drain", Value: 1, Usage: "battery percent lost per hour", Sources: cli.EnvVars("MOUNTSIM_BATTERY_DRAIN"), Destination: &cfg.BatteryDrain},
			str("model", "MOUNTSIM_MODEL", "MNT-SIM", "model number of the mounts", &cfg.Model),
			str("firmware-revision", "MOUNTSIM_FIRMWARE_REVISION", "1.0.0", "firmware revision of the mounts", &cfg.FirmwareRevision),
			str("software-revision", "MOUNTSIM_SOFTWARE_REVISION", "1.0.0", "software revision of the mounts", &cfg.SoftwareRevision),
			num("legacy", "MOUNTSIM_LEGACY", 0, "the last N mounts of the fleet run older firmware: no device key, nothing signed", &cfg.Legacy),
			&cli.BoolFlag{Name: "reset-owners", Usage: "reset every mount first (its physical reset: owner key, account, tags and settings forgotten), so that mounts kept in --state-dir for another server take its ASSOCIATE_OWNER without a hand-over", Sources: cli.EnvVars("MOUNTSIM_RESET_OWNERS"), Destination: &cfg.ResetOwners},
			str("state-dir", "MOUNTSIM_STATE_DIR", "", "directory keeping each mount's state (device key, counter, owner, replay memory) as <uid>.json across runs; empty: memory only, new device keys every run", &cfg.StateDir),
			&cli.BoolFlag{Name: "forge", Usage: "after each report of a mount with a device key, a forging phone reports altered states for it (they must be refused); counted in the summary", Sources: cli.EnvVars("MOUNTSIM_FORGE"), Destination: &cfg.Forge},
			num("phones", "MOUNTSIM_PHONES", 0, "phones passing mounts at random: at each pass the phone connects and runs the mount's pending commands (jobs) with the SDK's Sync, uploading the receipts; needs credentials", &cfg.Phones),
			dur("pass-every", "MOUNTSIM_PASS_EVERY", 10*time.Second, "mean time between two passes of one phone (exponentially distributed); each pass picks a random associated mount", &cfg.PassEvery),
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the phones' choices of mounts and times (0: random) and of the mounts --firmware-failure-rate picks", Sources: cli.EnvVars("MOUNTSIM_SEED"), Destination: &cfg.Seed},
			&cli.FloatFlag{Name: "firmware-failure-rate", Usage: "share of mounts (0 to 1, picked from --seed by uid) that fail after a firmware install, as --firmware-failure says", Sources: cli.EnvVars("MOUNTSIM_FIRMWARE_FAILURE_RATE"), Destination: &cfg.FirmwareFailureRate},
			str("firmware-failure", "MOUNTSIM_FIRMWARE_FAILURE", "rollback", "how those mounts fail: rollback (one report on the new revision, then back to the old one) or silent (nothing more: no reports, no advertising)", &cfg.FirmwareFailure),
			&cli.FloatFlag{Name: "drop-link-rate", Usage: "share of the phones' firmware links (0 to 1) cut midway through a transfer; the phone reconnects and resumes", Sources: cli.EnvVars("MOUNTSIM_DROP_LINK_RATE"), Destination: &cfg.DropLinkRate},
			num("riders", "MOUNTSIM_RIDERS", 0, "riders, each with a phone (an SDK client with its own grant keeper and upload queue) holding a grant on --mounts-per-rider mounts, requested online with the owner token; each passes one of its mounts every --pass-every (mean) and releases the helmet there; needs --associate", &cfg.Riders),
			num("mounts-per-rider", "MOUNTSIM_MOUNTS_PER_RIDER", 3, "mounts each rider uses, a grant on each", &cfg.MountsPerRider),
			&cli.FloatFlag{Name: "offline", Usage: "share of the riders (0 to 1, picked from --seed) whose phone has no network at the mounts: its HTTP transport fails there, so the SDK uses the stored grant; network comes back between mounts", Sources: cli.EnvVars("MOUNTSIM_OFFLINE"), Destination: &cfg.Offline},
			&cli.FloatFlag{Name: "revoke", Usage: "share of the riders' grants (0 to 1) the owner revokes over REST during the run, spread over its first two thirds; the rider then tries the revoked grant offline, its phone keeping the grant and no list", Sources: cli.EnvVars("MOUNTSIM_REVOKE"), Destination: &cfg.Revoke},
			dur("restart-every", "MOUNTSIM_RESTART_EVERY", 0, "restart a random mount this often (off the air, opened again from its persisted state: clock, list and log must survive); 0: never", &cfg.RestartEvery),
			&cli.FloatFlag{Name: "kill-uploads", Usage: "share of the riders' offline-receipt uploads (0 to 1) during which the phone dies: the server gets the request, the phone not the answer; a new client on the same state directory carries on", Sources: cli.EnvVars("MOUNTSIM_KILL_UPLOADS"), Destination: &cfg.KillUploads},
			str("log-level", "MOUNTSIM_LOG_LEVEL", "info", "debug, info, warn or error", &cfg.LogLevel),
			&cli.BoolFlag{Name: "json", Usage: "print the summary as JSON", Destination: &cfg.JSON},
		},
		Action: func(ctx context.Context, _ *cli.Command) error {
			return run(ctx, cfg, stdout, stderr, ready)
		},
	}
}
