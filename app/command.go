// Package app is the mountd program: its command line, its configuration,
// and the composition that wires the core to its adapters and puts the
// transports on one listener. cmd/mountd runs it; the end-to-end tests (e2e/)
// run it in-process.
package app

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/proxies"
	"github.com/mountd/mountd/internal/telemetry"
	"github.com/mountd/mountd/internal/version"
)

// NewCommand builds the CLI. Output goes to stdout and stderr as given, so
// tests can run it in-process.
func NewCommand(stdout, stderr io.Writer) *cli.Command {
	return NewCommandWithInput(os.Stdin, stdout, stderr)
}

// NewCommandWithInput is NewCommand reading passwords from stdin as given.
func NewCommandWithInput(stdin io.Reader, stdout, stderr io.Writer) *cli.Command {
	cfg := &Config{}
	flags := configFlags(cfg)
	logger := func() *slog.Logger { return newLogger(stderr, cfg.LogLevel, cfg.LogFormat) }
	return &cli.Command{
		Name:      "mountd",
		Version:   version.String(),
		Usage:     "Mount Management Service: mounts, states, signed commands, NFC tags and firmware",
		Writer:    stdout,
		ErrWriter: stderr,
		Flags:     flags,
		// Every change a command makes is the operator's in the audit log.
		Before: withOperator,
		Commands: []*cli.Command{
			{
				Name:  "serve",
				Usage: "run the HTTP API (REST, GraphQL, embedded identity provider)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "allow-generated-master-key", Usage: "on PostgreSQL, start without MOUNTD_MASTER_KEY, with a key generated into the data dir (one replica only: the others could not read what it seals)",
						Destination: &cfg.AllowGeneratedMasterKey},
				},
				Action: func(ctx context.Context, _ *cli.Command) error {
					log := logger()
					// Libraries that log through slog's default (zitadel's
					// OAuth errors) write where mountd does.
					slog.SetDefault(log)
					return Serve(ctx, *cfg, log, nil)
				},
			},
			{
				Name:  "migrate",
				Usage: "apply pending database migrations and exit",
				Action: func(ctx context.Context, _ *cli.Command) error {
					_, cleanup, err := adminService(ctx, cfg, logger(), newAccountService)
					if err != nil {
						return err
					}
					cleanup()
					fmt.Fprintln(stdout, "migrations are up to date")
					return nil
				},
			},
			{
				Name:  "firmware",
				Usage: "administer the firmware catalogue",
				Commands: []*cli.Command{
					{
						Name:  "publish",
						Usage: "store a firmware binary and add it to the catalogue",
						Flags: []cli.Flag{
							&cli.StringFlag{Name: "model", Usage: "model number", Required: true},
							&cli.StringFlag{Name: "revision", Usage: "software revision, a semantic version (1.4.0)", Required: true},
							&cli.StringFlag{Name: "file", Usage: "the firmware binary", Required: true},
							&cli.StringFlag{Name: "available-since", Usage: "RFC 3339 time from which it is offered (default now)"},
							&cli.BoolFlag{Name: "mandatory", Usage: "devices below it must update"},
							&cli.BoolFlag{Name: "local-blobs", Usage: "on PostgreSQL without MOUNTD_BLOB_URL, store the file on this machine's disk anyway (only this machine's replica can serve it)"},
							&cli.BoolFlag{Name: "json", Usage: "print JSON"},
						},
						Action: func(ctx context.Context, cmd *cli.Command) error {
							if err := cfg.resolve(""); err != nil {
								return err
							}
							if problem := localBlobsProblem(*cfg); problem != "" {
								if !cmd.Bool("local-blobs") {
									return errors.New(problem + "; set MOUNTD_BLOB_URL to S3-compatible storage, or pass --local-blobs to store it on this disk anyway (one replica serving downloads)")
								}
								logger().Warn(problem + "; set MOUNTD_BLOB_URL to S3-compatible storage")
							}
							var since *time.Time
							if s := cmd.String("available-since"); s != "" {
								t, err := time.Parse(time.RFC3339Nano, s)
								if err != nil {
									return fmt.Errorf("--available-since must be an RFC 3339 time: %w", err)
								}
								since = &t
							}
							f, err := os.Open(cmd.String("file"))
							if err != nil {
								return err
							}
							defer f.Close()
							fw, cleanup, err := adminService(ctx, cfg, logger(), newFirmwareService)
							if err != nil {
								return err
							}
							defer cleanup()
							v, err := fw.Publish(ctx, cmd.String("model"), cmd.String("revision"), since, cmd.Bool("mandatory"), f)
							if err != nil {
								return cliError(err)
							}
							return printFirmware(stdout, v, cmd.Bool("json"))
						},
					},
					{
						Name:  "deprecate",
						Usage: "mark a firmware version deprecated",
						Flags: []cli.Flag{
							&cli.StringFlag{Name: "model", Usage: "model number", Required: true},
							&cli.StringFlag{Name: "revision", Usage: "software revision", Required: true},
							&cli.BoolFlag{Name: "json", Usage: "print JSON"},
						},
						Action: func(ctx context.Context, cmd *cli.Command) error {
							fw, cleanup, err := adminService(ctx, cfg, logger(), newFirmwareService)
							if err != nil {
								return err
							}
							defer cleanup()
							v, paused, err := fw.Deprecate(ctx, cmd.String("model"), cmd.String("revision"))
							for _, r := range paused {
								// Beside --json's document, not in it.
								fmt.Fprintf(stderr, "paused rollout %s of account %s: a deprecated version is offered to no further mount\n", r.ID, r.AccountID)
							}
							if err != nil {
								return cliError(err)
							}
							return printFirmware(stdout, v, cmd.Bool("json"))
						},
					},
				},
			},
			{
				Name:  "keys",
				Usage: "administer signing keys",
				Commands: []*cli.Command{{
					Name:  "rotate",
					Usage: "give a mount's association a new key pair; the next ASSOCIATE_OWNER carries it",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "mount", Usage: "mount uid", Required: true},
						&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					},
					Action: func(ctx context.Context, cmd *cli.Command) error {
						mounts, cleanup, err := adminService(ctx, cfg, logger(), newMountService)
						if err != nil {
							return err
						}
						defer cleanup()
						m, err := mounts.RotateKey(ctx, cmd.String("mount"))
						if err != nil {
							return err
						}
						pub := hex.EncodeToString(m.Key.PublicKey)
						if cmd.Bool("json") {
							return json.NewEncoder(stdout).Encode(map[string]string{"mountUid": m.UID, "keyId": m.Key.ID, "publicKey": pub})
						}
						fmt.Fprintf(stdout, "mount %s has a new key %s (public key %s)\n", m.UID, m.Key.ID, pub)
						return nil
					},
				}},
			},
			{
				Name:  "accounts",
				Usage: "administer operator accounts",
				Commands: []*cli.Command{{
					Name:  "create",
					Usage: "create an account and its client credentials (the secret is shown once)",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "name", Usage: "account name", Required: true},
						&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					},
					Action: func(ctx context.Context, cmd *cli.Command) error {
						accounts, cleanup, err := adminService(ctx, cfg, logger(), newAccountService)
						if err != nil {
							return err
						}
						defer cleanup()
						created, err := accounts.Create(ctx, cmd.String("name"))
						if err != nil {
							return err
						}
						if cmd.Bool("json") {
							return json.NewEncoder(stdout).Encode(created)
						}
						printCredentials(stdout, created)
						return nil
					},
				}, {
					Name:  "list",
					Usage: "list the accounts",
					Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print JSON"}},
					Action: func(ctx context.Context, cmd *cli.Command) error {
						accounts, cleanup, err := adminService(ctx, cfg, logger(), newAccountService)
						if err != nil {
							return err
						}
						defer cleanup()
						list, err := accounts.List(ctx)
						if err != nil {
							return err
						}
						return printAccounts(stdout, list, cmd.Bool("json"))
					},
				}, {
					Name:  "rotate-secret",
					Usage: "give the account's client a new secret; the old one stops working at once (the new one is shown once)",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "account", Usage: "account id", Required: true},
						&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					},
					Action: func(ctx context.Context, cmd *cli.Command) error {
						accounts, cleanup, err := adminService(ctx, cfg, logger(), newAccountService)
						if err != nil {
							return err
						}
						defer cleanup()
						rotated, err := accounts.RotateSecret(ctx, cmd.String("account"))
						if err != nil {
							return err
						}
						if cmd.Bool("json") {
							return json.NewEncoder(stdout).Encode(rotated)
						}
						printCredentials(stdout, rotated)
						return nil
					},
				}, {
					Name: "rename-client",
					Usage: "name the account's client as the audit log and alarms show it (default: the account's name + \" API client\"); " +
						"entries already recorded keep their name",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "account", Usage: "account id", Required: true},
						&cli.StringFlag{Name: "name", Usage: "the client's name, 1 to 100 characters", Required: true},
						&cli.BoolFlag{Name: "json", Usage: "print JSON"},
					},
					Action: func(ctx context.Context, cmd *cli.Command) error {
						accounts, cleanup, err := adminService(ctx, cfg, logger(), newAccountService)
						if err != nil {
							return err
						}
						defer cleanup()
						ids, err := accounts.RenameClient(ctx, cmd.String("account"), cmd.String("name"))
						if err != nil {
							return err
						}
						name := strings.TrimSpace(cmd.String("name"))
						if cmd.Bool("json") {
							return json.NewEncoder(stdout).Encode(map[string]any{"accountId": cmd.String("account"), "clientIds": ids, "name": name})
						}
						fmt.Fprintf(stdout, "client %s of account %s is now named %q\n", strings.Join(ids, ", "), cmd.String("account"), name)
						return nil
					},
				}},
			},
			usersCommand(cfg, stdin, stdout, logger),
			auditCommand(cfg, stdout, logger),
		},
	}
}

func configFlags(cfg *Config) []cli.Flag {
	str := func(name, env, value, usage string, dst *string) cli.Flag {
		return &cli.StringFlag{Name: name, Value: value, Usage: usage, Sources: cli.EnvVars(env), Destination: dst}
	}
	dur := func(name, env string, value time.Duration, usage string, dst *time.Duration) cli.Flag {
		return &cli.DurationFlag{Name: name, Value: value, Usage: usage, Sources: cli.EnvVars(env), Destination: dst}
	}
	return []cli.Flag{
		str("listen", "MOUNTD_LISTEN", "127.0.0.1:8080", "HTTP listener (REST, GraphQL, embedded identity provider)", &cfg.Listen),
		str("public-url", "MOUNTD_PUBLIC_URL", "", "external base address, used as issuer and in download links (default http://<listen>)", &cfg.PublicURL),
		str("data-dir", "MOUNTD_DATA_DIR", "./data", "embedded database, local firmware blobs, generated keys", &cfg.DataDir),
		str("database-url", "MOUNTD_DATABASE_URL", "", "postgres://... or sqlite://PATH (default sqlite://<data dir>/mountd.db)", &cfg.DatabaseURL),
		str("database-read-url", "MOUNTD_DATABASE_READ_URL", "", "PostgreSQL read replicas (postgres://..., comma-separated) for lists, filters, counts, exports and GraphQL queries", &cfg.DatabaseReadURL),
		dur("read-max-lag", "MOUNTD_READ_MAX_LAG", time.Second, "the most replay lag a read replica may have to serve reads; a client's reads this long after its write go to the primary", &cfg.ReadMaxLag),
		str("redis-url", "MOUNTD_REDIS_URL", "", "redis://host:port/db; empty: in-process cache, scheduler and event bus", &cfg.RedisURL),
		str("redis-cluster-url", "MOUNTD_REDIS_CLUSTER_URL", "", "a Redis Cluster instead of --redis-url: redis://host1:port1?addr=host2:port2&addr=host3:port3 (seed nodes)", &cfg.RedisClusterURL),
		str("redis-prefix", "MOUNTD_REDIS_PREFIX", "mountd:", "prefix of every Redis key and channel, to share one Redis between installations", &cfg.RedisPrefix),
		str("trusted-proxies", "MOUNTD_TRUSTED_PROXIES", "", "reverse proxies (addresses or CIDR prefixes, comma-separated) whose X-Forwarded-For names the client", &cfg.TrustedProxies),
		str("rate-limit", "MOUNTD_RATE_LIMIT", "", "API requests per account, e.g. 1200/m (count per s, m or h); empty: no limit", &cfg.RateLimit),
		str("issuer", "MOUNTD_ISSUER", "", "external OIDC issuer; empty: the embedded identity provider", &cfg.Issuer),
		str("console-client-id", "MOUNTD_CONSOLE_CLIENT_ID", core.ConsoleClientID, "with --issuer: the console's public client there (code flow with PKCE)", &cfg.ConsoleClientID),
		str("account-claim", "MOUNTD_ACCOUNT_CLAIM", "account_id", "with --issuer: the token claim holding the account id", &cfg.AccountClaim),
		str("scope-claim", "MOUNTD_SCOPE_CLAIM", "scope", "with --issuer: the token claim holding the scope items (a string or an array)", &cfg.ScopeClaim),
		str("project-id", "MOUNTD_PROJECT_ID", "mountd", "project id in the audience scope item and the token's aud", &cfg.ProjectID),
		str("idp-name", "MOUNTD_IDP_NAME", "mountd", "the <idp> in urn:<idp>:iam:org:project:id:<project_id>:aud", &cfg.IDPName),
		str("master-key", "MOUNTD_MASTER_KEY", "", "32-byte key (hex or base64) sealing signing keys; default: generated into the data dir", &cfg.MasterKey),
		dur("association-window", "MOUNTD_ASSOCIATION_WINDOW", 10*time.Minute, "time to confirm an association", &cfg.AssociationWindow),
		dur("command-ttl", "MOUNTD_COMMAND_TTL", core.DefaultCommandTTL, "how long a command can run after it is issued (at most 5m); then it is UNCONFIRMED without a receipt", &cfg.CommandTTL),
		dur("receipt-grace", "MOUNTD_RECEIPT_GRACE", core.DefaultReceiptGrace, "how long after a command expires its receipts are still accepted", &cfg.ReceiptGrace),
		dur("offline-after", "MOUNTD_OFFLINE_AFTER", core.DefaultOfflineAfter, "how long after it was last heard a mount counts as OFFLINE (MOUNT_OFFLINE, presence conditions of alarm rules)", &cfg.OfflineAfter),
		dur("token-ttl", "MOUNTD_TOKEN_TTL", time.Hour, "lifetime of tokens from the embedded identity provider", &cfg.TokenTTL),
		dur("download-ttl", "MOUNTD_DOWNLOAD_TTL", 15*time.Minute, "lifetime of firmware download links", &cfg.DownloadTTL),
		dur("event-retention", "MOUNTD_EVENT_RETENTION", core.DefaultEventRetention, "how long the event log keeps events", &cfg.EventRetention),
		dur("state-retention", "MOUNTD_STATE_RETENTION", core.DefaultStateRetention, "how long the state history keeps entries (by occurredAt); 0 keeps all", &cfg.StateRetention),
		dur("audit-retention", "MOUNTD_AUDIT_RETENTION", core.DefaultAuditRetention, "how long the audit log keeps entries; 0 keeps all", &cfg.AuditRetention),
		dur("webhook-delivery-retention", "MOUNTD_WEBHOOK_DELIVERY_RETENTION", core.DefaultDeliveryRetention, "how long finished webhook attempts are kept; 0 keeps all", &cfg.DeliveryRetention),
		str("webhook-retry-delays", "MOUNTD_WEBHOOK_RETRY_DELAYS", "", "waits before each webhook retry, comma-separated (default 5s,30s,2m,10m,30m,1h,2h,4h,8h)", &cfg.WebhookRetryDelays),
		&cli.BoolFlag{Name: "webhook-allow-private", Usage: "let webhooks reach loopback, private and link-local addresses",
			Sources: cli.EnvVars("MOUNTD_WEBHOOK_ALLOW_PRIVATE"), Destination: &cfg.WebhookAllowPrivate},
		dur("grant-max-ttl", "MOUNTD_GRANT_MAX_TTL", core.DefaultGrantMaxTTL, "longest rider grant a restricted token may ask for (offline access)", &cfg.GrantMaxTTL),
		dur("request-timeout", "MOUNTD_REQUEST_TIMEOUT", core.DefaultRequestTimeout, "how long a request may work before it answers 503 UNAVAILABLE and its database statement is cancelled (exports, WebSockets and firmware files excepted; long polls get their wait on top; revoking a rider at least 50 s)", &cfg.RequestTimeout),
		&cli.IntFlag{Name: "max-exports", Usage: "exports one replica runs at once, below the database pool (0: half the pool: 4 on SQLite, 16 on PostgreSQL); past it 503 with Retry-After",
			Sources: cli.EnvVars("MOUNTD_MAX_EXPORTS"), Destination: &cfg.MaxExports},
		dur("export-write-timeout", "MOUNTD_EXPORT_WRITE_TIMEOUT", 30*time.Second, "how long an export waits for a client that reads nothing before it cuts the connection", &cfg.ExportWriteTimeout),
		dur("body-timeout", "MOUNTD_BODY_TIMEOUT", DefaultBodyTimeout, "how long a request body may take to arrive", &cfg.BodyTimeout),
		str("blob-url", "MOUNTD_BLOB_URL", "", "s3://bucket?endpoint=... for S3-compatible firmware storage; empty: the data dir", &cfg.BlobURL),
		str("log-level", "MOUNTD_LOG_LEVEL", "info", "debug, info, warn or error", &cfg.LogLevel),
		str("log-format", "MOUNTD_LOG_FORMAT", "text", "text or json", &cfg.LogFormat),
	}
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: lv}
	if strings.EqualFold(format, "json") {
		return slog.New(telemetry.LogHandler{Handler: slog.NewJSONHandler(w, opts)})
	}
	return slog.New(telemetry.LogHandler{Handler: slog.NewTextHandler(w, opts)})
}

// MaxHeaderBytes bounds a request's header lines (431 beyond): a token and
// the usual headers take a few kilobytes.
const MaxHeaderBytes = 64 << 10

// localBlobsProblem is what to tell an operator whose firmware files go to
// this machine's disk while the catalogue is in a database that other
// replicas share: they would offer the files and answer their links 404.
// serve warns; firmware publish refuses unless --local-blobs
// (docs/operations.md, "Configuration that matters in production").
func localBlobsProblem(cfg Config) string {
	if cfg.BlobURL != "" || !cfg.OnPostgres() {
		return ""
	}
	return "firmware files would be stored on this machine's disk (" + filepath.Join(cfg.DataDir, "blobs") +
		") while the catalogue is in PostgreSQL: other replicas could not serve them"
}

// generatedKeyProblem refuses to serve on PostgreSQL with a master key
// generated into the data dir (docs/operations.md, "The master key"): it
// is this machine's alone, so another replica could not open what it seals
// (mount keys, the identity key, webhook secrets). --allow-generated-master-key takes one anyway.
func generatedKeyProblem(cfg Config) error {
	if cfg.MasterKey != "" || !cfg.OnPostgres() || cfg.AllowGeneratedMasterKey {
		return nil
	}
	path := filepath.Join(cfg.DataDir, keyring.MasterKeyFile)
	const how = "set MOUNTD_MASTER_KEY (64 hex characters from `openssl rand -hex 32`, the same on every replica and backed up), " +
		"or pass `mountd serve --allow-generated-master-key` to run one replica with a key kept in the data dir"
	if _, err := os.Stat(path); err == nil {
		return fmt.Errorf("no MOUNTD_MASTER_KEY on PostgreSQL: %s holds the key generated on this machine, which other replicas cannot read; "+
			"set MOUNTD_MASTER_KEY to its contents on every replica, or pass `mountd serve --allow-generated-master-key` to keep using the file", path)
	}
	return fmt.Errorf("no MOUNTD_MASTER_KEY on PostgreSQL: a key generated into %s would be this machine's alone and other replicas could not read what it seals; %s",
		cfg.DataDir, how)
}

// Serve runs the server until ctx ends, then shuts down gracefully. When
// ready is not nil it receives the bound address once requests are served.
func Serve(ctx context.Context, cfg Config, logger *slog.Logger, ready chan<- string) error {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	defer ln.Close()
	if err := cfg.resolve(ln.Addr().String()); err != nil {
		return err
	}
	if err := generatedKeyProblem(cfg); err != nil {
		return err
	}
	stopTracing, err := telemetry.Setup(ctx, version.String())
	if err != nil {
		return fmt.Errorf("set up tracing: %w", err)
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			logger.Warn("flush traces failed", "err", err)
		}
	}()
	a, cleanup, err := newServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer cleanup()
	if problem := localBlobsProblem(cfg); problem != "" {
		logger.Warn(problem + "; set MOUNTD_BLOB_URL to S3-compatible storage")
	}
	workerCtx, stopWorkers := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	workers.Go(func() {
		if err := a.Mounts.RunExpiry(workerCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("expiry worker stopped", "err", err)
		}
	})
	workers.Go(func() {
		if err := a.Feed.Run(workerCtx); err != nil {
			logger.Error("event feed stopped", "err", err)
		}
	})
	workers.Go(func() { a.Events.RunRetention(workerCtx, cfg.EventRetention, time.Minute) })
	workers.Go(func() { a.Retention.Run(workerCtx, 10*time.Minute) })
	workers.Go(func() {
		if err := a.Jobs.Run(workerCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("job expiry stopped", "err", err)
		}
	})
	workers.Go(func() {
		if err := a.Rollouts.Run(workerCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("rollout sweep stopped", "err", err)
		}
	})
	workers.Go(func() {
		if cfg.HoldDeliveries != nil {
			select {
			case <-cfg.HoldDeliveries:
			case <-workerCtx.Done():
				return
			}
		}
		if err := a.Webhooks.RunDeliveries(workerCtx); err != nil {
			logger.Error("webhook deliveries stopped", "err", err)
		}
	})
	defer func() { stopWorkers(); workers.Wait() }()
	trusted, _ := proxies.Parse(cfg.TrustedProxies) // checked by resolve
	handler := proxies.ClientAddress(a.Handler, trusted)

	srv := &http.Server{
		Handler:           handler,
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("mountd serving", "listen", ln.Addr().String(), "public_url", cfg.PublicURL,
		"issuer", cfg.issuer(), "database", redactURL(cfg.DatabaseURL), "redis", cfg.RedisURL != "", "redis_cluster", cfg.RedisClusterURL != "")
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	a.Events.StopWaiting() // long polls answer now rather than hold the shutdown
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	// Shutdown does not track WebSockets (hijacked connections): close
	// them with 1001, once the listener no longer takes new ones, so that
	// clients reconnect and resubscribe rather than see their
	// subscriptions complete; then the deferred cleanup closes the bus.
	goingAway, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	a.WebSockets.GoingAway(goingAway)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// redactURL hides a password in a connection URL for the log.
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		if at := strings.LastIndex(raw, "@"); at > i {
			return raw[:i+3] + "***" + raw[at:]
		}
	}
	return raw
}

// printFirmware prints a version as the API shows it.
func printFirmware(w io.Writer, v core.FirmwareVersion, asJSON bool) error {
	out := map[string]any{"softwareRevision": v.SoftwareRevision, "modelNumber": v.ModelNumber,
		"availableSince": core.FormatTime(v.AvailableSince), "deprecated": v.Deprecated, "mandatory": v.Mandatory,
		"sha256": v.SHA256, "size": v.Size}
	if asJSON {
		return json.NewEncoder(w).Encode(out)
	}
	_, err := fmt.Fprintf(w, "%s %s: %d bytes, sha256 %s, available since %s, deprecated %v, mandatory %v\n",
		v.ModelNumber, v.SoftwareRevision, v.Size, v.SHA256, core.FormatTime(v.AvailableSince), v.Deprecated, v.Mandatory)
	return err
}

// cliError shows a coded error with the fields it names.
// printCredentials shows a client secret, the one time it is shown.
func printCredentials(w io.Writer, c core.NewAccount) {
	fmt.Fprintf(w, "account id:     %s\nclient id:      %s\nclient secret:  %s\n\nThe secret is shown only now: keep it in a password manager or an environment variable.\n",
		c.AccountID, c.ClientID, c.ClientSecret)
}

// accountView is what `mountd accounts list --json` prints per account.
type accountView struct {
	AccountID string    `json:"accountId"`
	Name      string    `json:"name"`
	Clients   int       `json:"clients"`
	CreatedAt time.Time `json:"createdAt"`
}

func printAccounts(w io.Writer, list []core.AccountSummary, asJSON bool) error {
	views := make([]accountView, len(list))
	for i, a := range list {
		views[i] = accountView{AccountID: a.ID, Name: a.Name, Clients: a.Clients, CreatedAt: a.CreatedAt.UTC()}
	}
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"accounts": views})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT ID\tNAME\tCLIENTS\tCREATED")
	for _, v := range views {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", v.AccountID, v.Name, v.Clients, v.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func cliError(err error) error {
	var ce *core.Error
	if errors.As(err, &ce) && len(ce.Fields) > 0 {
		parts := make([]string, len(ce.Fields))
		for i, f := range ce.Fields {
			parts[i] = f.Field + " " + f.Message
		}
		return fmt.Errorf("%s: %s", ce.Message, strings.Join(parts, "; "))
	}
	return err
}

// adminService builds what an admin command needs on the configured
// database, applying pending migrations on the way.
func adminService[T any](ctx context.Context, cfg *Config, logger *slog.Logger,
	build func(context.Context, Config, *slog.Logger) (T, func(), error)) (T, func(), error) {
	var zero T
	if err := cfg.resolve(""); err != nil {
		return zero, nil, err
	}
	return build(ctx, *cfg, logger)
}
