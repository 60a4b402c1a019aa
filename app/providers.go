package app

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	goredis "github.com/redis/go-redis/v9"
	"github.com/uptrace/bun/extra/bunotel"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/adapters/blob/local"
	"github.com/mountd/mountd/adapters/blob/s3"
	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/idp"
	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/metrics"
	"github.com/mountd/mountd/adapters/oidcverify"
	redisadapter "github.com/mountd/mountd/adapters/redis"
	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/adapters/webhook"
	"github.com/mountd/mountd/console"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph"
	"github.com/mountd/mountd/graph/graphiql"
	"github.com/mountd/mountd/graph/wsproto"
	"github.com/mountd/mountd/internal/dbread"
	"github.com/mountd/mountd/internal/httpobs"
	"github.com/mountd/mountd/internal/telemetry"
)

// storeSet provides the database and the core services that need only it.
var storeSet = wire.NewSet(
	provideStore,
	wire.Bind(new(core.AccountStore), new(*bunstore.Store)),
	wire.Bind(new(core.MountStore), new(*bunstore.Store)),
	wire.Bind(new(core.StateStore), new(*bunstore.Store)),
	wire.Bind(new(core.CommandStore), new(*bunstore.Store)),
	wire.Bind(new(core.TagStore), new(*bunstore.Store)),
	wire.Bind(new(core.FirmwareStore), new(*bunstore.Store)),
	wire.Bind(new(core.EventLog), new(*bunstore.Store)),
	wire.Bind(new(core.WebhookStore), new(*bunstore.Store)),
	wire.Bind(new(keyring.SigningKeyStore), new(*bunstore.Store)),
	wire.Bind(new(core.UserStore), new(*bunstore.Store)),
	wire.Bind(new(core.SessionStore), new(*bunstore.Store)),
	wire.Bind(new(core.ExportStore), new(*bunstore.Store)),
	wire.Bind(new(core.AuditLog), new(*bunstore.Store)),
	wire.Bind(new(core.JobStore), new(*bunstore.Store)),
	wire.Bind(new(core.RolloutStore), new(*bunstore.Store)),
	wire.Bind(new(core.GrantStore), new(*bunstore.Store)),
	aipfilter.New,
	wire.Bind(new(core.FilterParser), new(*aipfilter.Parser)),
)

// mountSet provides the mount service with its signer and the cache,
// scheduler and event bus: Redis when configured, in-process otherwise.
var mountSet = wire.NewSet(
	provideSealer,
	provideCursorCodec,
	provideAuditCursors,
	core.NewAuditService,
	keyring.NewMountSigner,
	wire.Bind(new(core.Signer), new(*keyring.MountSigner)),
	provideRedis,
	provideSharedState,
	provideWindow,
	provideCommandTTL,
	provideReceiptGrace,
	wire.FieldsOf(new(sharedState), "Cache", "Scheduler", "Failures", "Rates"),
	provideFleetMeter,
	wire.Bind(new(core.EventWaker), new(*metrics.Fleet)),
	provideAPIRateLimit,
	provideRetention,
	provideGrantMaxTTL,
	wire.Struct(new(core.GrantDeps), "*"),
	core.NewGrantService,
	wire.Bind(new(core.GrantResigner), new(*core.GrantService)),
	wire.Struct(new(core.MountDeps), "*"),
	core.NewMountService,
	core.NewNfcService,
	core.NewEventFeed,
	core.NewEventService,
)

// webhookSet provides the webhook rules and their delivery.
var webhookSet = wire.NewSet(
	provideWebhookDeps,
	core.NewWebhookService,
)

// firmwareSet provides the firmware catalogue and its blob store.
var firmwareSet = wire.NewSet(
	provideLocalBlobs,
	provideBlobStore,
	provideBlobOpener,
	provideDownloadTTL,
	provideBodyTimeout,
	provideRequestTimeout,
	provideExportLimit,
	provideExportWriteTimeout,
	core.NewFirmwareService,
)

// serverSet provides everything `mountd serve` runs.
var serverSet = wire.NewSet(
	storeSet,
	mountSet,
	provideClientSecretKey,
	core.NewKeyedAccountService,
	core.NewUserService,
	core.NewSessionService,
	firmwareSet,
	webhookSet,
	provideScopeRules,
	provideIdentityProvider,
	provideVerifier,
	provideChecks,
	provideReadPolicy,
	provideCollectors,
	provideWebSocketStats,
	provideMountable,
	httpobs.NewMetrics,
	// The transports declare the services they use as interfaces.
	wire.Bind(new(rest.Accounts), new(*core.AccountService)),
	wire.Bind(new(rest.Mounts), new(*core.MountService)),
	wire.Bind(new(rest.NfcTags), new(*core.NfcService)),
	wire.Bind(new(rest.Firmware), new(*core.FirmwareService)),
	wire.Bind(new(graph.Accounts), new(*core.AccountService)),
	wire.Bind(new(graph.Mounts), new(*core.MountService)),
	wire.Bind(new(graph.NfcTags), new(*core.NfcService)),
	wire.Bind(new(graph.Firmware), new(*core.FirmwareService)),
	wire.Bind(new(graph.EventLog), new(*core.EventService)),
	wire.Bind(new(rest.Events), new(*core.EventService)),
	wire.Bind(new(rest.Webhooks), new(*core.WebhookService)),
	core.NewExportService,
	wire.Bind(new(rest.Exports), new(*core.ExportService)),
	wire.Bind(new(graph.Webhooks), new(*core.WebhookService)),
	wire.Bind(new(rest.Audit), new(*core.AuditService)),
	wire.Bind(new(graph.Audit), new(*core.AuditService)),
	provideOfflineAfter,
	wire.Bind(new(core.AlarmStore), new(*bunstore.Store)),
	wire.Struct(new(core.AlarmDeps), "*"),
	core.NewAlarmService,
	wire.Bind(new(rest.Alarms), new(*core.AlarmService)),
	wire.Bind(new(graph.Alarms), new(*core.AlarmService)),
	wire.Struct(new(core.JobDeps), "*"),
	core.NewJobService,
	wire.Bind(new(rest.Jobs), new(*core.JobService)),
	wire.Bind(new(graph.Jobs), new(*core.JobService)),
	wire.Bind(new(rest.Grants), new(*core.GrantService)),
	wire.Bind(new(graph.Grants), new(*core.GrantService)),
	wire.Struct(new(core.RolloutDeps), "*"),
	core.NewRolloutService,
	wire.Bind(new(rest.Rollouts), new(*core.RolloutService)),
	wire.Bind(new(graph.Rollouts), new(*core.RolloutService)),
	wire.Struct(new(graph.Resolver), "*"),
	provideGraphQL,
	provideGraphiQL,
	provideConsole,
	wire.Struct(new(rest.Deps), "*"),
	rest.NewServer,
	wire.Struct(new(ListenerDeps), "*"),
	newListener,
)

// provideStore opens the database and applies pending migrations, so that
// every command starts on the current schema.
func provideStore(ctx context.Context, cfg Config, logger *slog.Logger) (*bunstore.Store, func(), error) {
	store, closeStore, err := bunstore.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	if telemetry.Enabled() {
		// Statements go out with their placeholders, never their values
		// (secret hashes, sealed keys).
		store.DB().AddQueryHook(bunotel.NewQueryHook(bunotel.WithDBName("mountd"), bunotel.WithFormattedQueries(false)))
	}
	applied, err := store.Migrate(ctx)
	if err != nil {
		closeStore()
		return nil, nil, err
	}
	if len(applied) > 0 {
		logger.Info("applied migrations", "migrations", applied)
	}
	if urls := cfg.readURLs(); len(urls) > 0 {
		closeReplicas, err := store.AddReadReplicas(ctx, urls, cfg.ReadMaxLag, logger)
		if err != nil {
			closeStore()
			return nil, nil, err
		}
		return store, func() { closeReplicas(); closeStore() }, nil
	}
	return store, closeStore, nil
}

// provideReadPolicy pins a client's reads to the primary after its writes;
// nil without read replicas (nothing to pin, nothing to mark).
func provideReadPolicy(cfg Config, rdb goredis.UniversalClient, logger *slog.Logger) *dbread.Policy {
	if cfg.DatabaseReadURL == "" {
		return nil
	}
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = core.DefaultRequestTimeout
	}
	var pins dbread.Pins = dbread.NewMemoryPins(nil)
	if rdb != nil {
		pins = redisadapter.NewReadPins(rdb, cfg.RedisPrefix)
	}
	return &dbread.Policy{Pins: pins, MaxLag: cfg.ReadMaxLag, RequestTimeout: timeout, Logger: logger}
}

// provideCursorCodec keys the event log's cursors with the installation's
// master key, so that every replica reads the others' cursors.
func provideCursorCodec(sealer *keyring.Sealer) *core.CursorCodec {
	return core.NewCursorCodec(sealer.DerivedKey("event cursors"))
}

// provideAuditCursors keys the audit log's cursors apart from the event
// log's, so that a cursor of one is never read as a position of the other.
func provideAuditCursors(sealer *keyring.Sealer) *core.AuditCursors {
	return (*core.AuditCursors)(core.NewCursorCodec(sealer.DerivedKey("audit cursors")))
}

// provideClientSecretKey keys the HMAC that client secrets are stored as
// with the installation's master key, so that every replica checks them.
func provideClientSecretKey(sealer *keyring.Sealer) core.ClientSecretKey {
	return core.ClientSecretKey(sealer.DerivedKey("client secrets"))
}

func provideSealer(cfg Config, logger *slog.Logger) (*keyring.Sealer, error) {
	key, err := keyring.LoadMasterKey(cfg.MasterKey, cfg.DataDir, logger)
	if err != nil {
		return nil, err
	}
	return keyring.NewSealer(key)
}

func provideScopeRules(cfg Config) core.ScopeRules {
	return core.ScopeRules{IDPName: cfg.IDPName, ProjectID: cfg.ProjectID}
}

// provideIdentityProvider builds the embedded identity provider, or nil when
// an external issuer is configured.
func provideIdentityProvider(ctx context.Context, cfg Config, store keyring.SigningKeyStore, sealer *keyring.Sealer,
	accounts *core.AccountService, users *core.UserService, sessions *core.SessionService, rules core.ScopeRules,
	logger *slog.Logger) (*idp.Provider, error) {
	if cfg.Issuer != "" {
		return nil, nil
	}
	kid, key, err := keyring.IdentityKey(ctx, store, sealer)
	if err != nil {
		return nil, err
	}
	return idp.New(idp.Config{
		Issuer:    cfg.PublicURL,
		TokenTTL:  cfg.TokenTTL,
		Scopes:    rules,
		CryptoKey: sealer.DerivedKey("oidc op crypto"),
		SignIn:    &idp.SignIn{Users: users, Sessions: sessions},
	}, accounts, idp.SigningKey{ID: kid, Key: key}, logger)
}

func provideVerifier(cfg Config, provider *idp.Provider, accounts core.AccountStore, rules core.ScopeRules, logger *slog.Logger) core.TokenVerifier {
	if provider == nil {
		// The external issuer owns the accounts: mountd records each on its first token.
		return core.NewIssuedAccounts(oidcverify.NewRemote(cfg.Issuer, oidcverify.Claims{Account: cfg.AccountClaim, Scope: cfg.ScopeClaim}, rules, logger), accounts)
	}
	return oidcverify.NewStatic(cfg.issuer(), provider.PublicKeys(), rules, logger)
}

// provideMountable keeps a nil provider a nil interface.
func provideMountable(provider *idp.Provider) Mountable {
	if provider == nil {
		return nil
	}
	return provider
}

// provideRedis connects when a Redis URL or a Redis Cluster URL is
// configured; nil means the in-process adapters.
func provideRedis(ctx context.Context, cfg Config) (goredis.UniversalClient, func(), error) {
	var (
		rdb        goredis.UniversalClient
		closeRedis func()
		err        error
	)
	switch {
	case cfg.RedisClusterURL != "":
		rdb, closeRedis, err = redisadapter.OpenCluster(ctx, cfg.RedisClusterURL)
	case cfg.RedisURL != "":
		rdb, closeRedis, err = redisadapter.Open(ctx, cfg.RedisURL)
	default:
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if telemetry.Enabled() {
		if err := redisotel.InstrumentTracing(rdb, redisotel.WithDBStatement(false)); err != nil { // no keys or values in traces
			closeRedis()
			return nil, nil, err
		}
	}
	return rdb, closeRedis, nil
}

// provideChecks lists what readiness checks. Redis is optional: mountd
// serves without it (the rate limiter lets requests through, the feeds
// poll the log, the sweeps expire), so a Redis or cluster outage shows as
// degraded and does not take every replica out of the load balancer.
func provideChecks(store *bunstore.Store, rdb goredis.UniversalClient) []rest.Checker {
	checks := []rest.Checker{{Name: "database", Check: store.Ping}}
	if rdb != nil {
		checks = append(checks, rest.Checker{Name: "redis", Optional: true, Check: func(ctx context.Context) error {
			return redisadapter.Ping(ctx, rdb)
		}})
	}
	return checks
}

func provideWindow(cfg Config) core.AssociationWindow {
	return core.AssociationWindow(cfg.AssociationWindow)
}

func provideCommandTTL(cfg Config) core.CommandTTL { return core.CommandTTL(cfg.CommandTTL) }

func provideReceiptGrace(cfg Config) core.ReceiptGrace { return core.ReceiptGrace(cfg.ReceiptGrace) }

func provideOfflineAfter(cfg Config) core.OfflineAfter { return core.OfflineAfter(cfg.OfflineAfter) }

func provideGrantMaxTTL(cfg Config) core.GrantMaxTTL { return core.GrantMaxTTL(cfg.GrantMaxTTL) }

// sharedState is what replicas must share: on Redis when configured.
type sharedState struct {
	Cache     core.StateCache
	Scheduler core.ExpiryScheduler
	Waker     core.EventWaker
	// Failures throttles failed authentications across replicas.
	Failures core.FailureLimiter
	// Rates counts API requests for MOUNTD_RATE_LIMIT across replicas.
	Rates core.RateLimiter
}

func provideSharedState(cfg Config, rdb goredis.UniversalClient, logger *slog.Logger) (sharedState, func(), error) {
	if rdb == nil {
		return sharedState{
			Cache:     memory.NewStateCache(),
			Scheduler: memory.NewExpiryScheduler(),
			Waker:     memory.NewWaker(),
			Failures:  memory.NewFailureLimiter(),
			Rates:     memory.NewRateLimiter(),
		}, func() {}, nil
	}
	waker, stopWaker, err := redisadapter.NewWaker(rdb, cfg.RedisPrefix, logger)
	if err != nil {
		return sharedState{}, nil, err
	}
	return sharedState{
		Cache:     redisadapter.NewStateCache(rdb, cfg.RedisPrefix, time.Hour),
		Scheduler: redisadapter.NewExpiryScheduler(rdb, cfg.RedisPrefix, 250*time.Millisecond),
		Waker:     waker,
		Failures:  redisadapter.NewFailureLimiter(rdb, cfg.RedisPrefix),
		Rates:     redisadapter.NewRateLimiter(rdb, cfg.RedisPrefix),
	}, stopWaker, nil
}

// provideAPIRateLimit is MOUNTD_RATE_LIMIT per account; nil when unset.
func provideAPIRateLimit(cfg Config, rates core.RateLimiter, logger *slog.Logger) *core.APIRateLimit {
	if cfg.RateLimit == "" {
		return nil
	}
	rate, _ := core.ParseRate(cfg.RateLimit) // checked by resolve
	return core.NewAPIRateLimit(rates, rate, logger)
}

// server is what `mountd serve` runs: the HTTP handler and the workers.
type server struct {
	Handler *listener
	Mounts  *core.MountService
	// Feed follows the event log; Events prunes it.
	Feed   *core.EventFeed
	Events *core.EventService
	// Webhooks delivers events to operator servers.
	Webhooks *core.WebhookService
	// WebSockets closes the subscription sockets at shutdown.
	WebSockets *wsproto.Stats
	// Retention keeps the state history, webhook attempts and sign-ins
	// bounded.
	Retention *core.Retention
	// Jobs completes expired jobs.
	Jobs *core.JobService
	// Rollouts decides targets at the end of their health window.
	Rollouts *core.RolloutService
}

func provideRetention(cfg Config, store *bunstore.Store, logger *slog.Logger) *core.Retention {
	return core.NewRetention(store, core.RetentionPolicy{States: cfg.StateRetention, Deliveries: cfg.DeliveryRetention,
		Audit: cfg.AuditRetention}, logger)
}

func provideDownloadTTL(cfg Config) core.DownloadTTL { return core.DownloadTTL(cfg.DownloadTTL) }

// provideExportLimit is MOUNTD_MAX_EXPORTS, by default half the pool, and
// always below it: the other connections serve everything else.
func provideExportLimit(cfg Config, store *bunstore.Store) core.ExportLimit {
	pool := store.PoolSize()
	n := cfg.MaxExports
	if n <= 0 {
		n = pool / 2
	}
	if pool > 1 {
		n = min(n, pool-1)
	}
	return core.ExportLimit(max(n, 1))
}

func provideExportWriteTimeout(cfg Config) rest.ExportWriteTimeout {
	return rest.ExportWriteTimeout(cfg.ExportWriteTimeout)
}

func provideRequestTimeout(cfg Config) RequestTimeout {
	return RequestTimeout(cfg.RequestTimeout)
}

func provideBodyTimeout(cfg Config) BodyTimeout {
	return BodyTimeout(cfg.BodyTimeout)
}

// provideLocalBlobs keeps firmware under the data dir unless an S3 URL is
// configured; nil then.
func provideLocalBlobs(cfg Config, sealer *keyring.Sealer) (*local.Store, error) {
	if cfg.BlobURL != "" {
		return nil, nil
	}
	return local.New(filepath.Join(cfg.DataDir, "blobs"), cfg.PublicURL, sealer.DerivedKey("firmware download links"))
}

// provideBlobStore picks the local store or S3 (MOUNTD_BLOB_URL=s3://...).
func provideBlobStore(ctx context.Context, cfg Config, localBlobs *local.Store) (core.BlobStore, error) {
	if localBlobs != nil {
		return localBlobs, nil
	}
	store, err := s3.New(ctx, cfg.BlobURL)
	if err != nil {
		return nil, fmt.Errorf("firmware blob storage: %w", err)
	}
	return store, nil
}

// provideBlobOpener keeps a nil store a nil interface.
func provideBlobOpener(localBlobs *local.Store) rest.BlobOpener {
	if localBlobs == nil {
		return nil
	}
	return localBlobs
}

func provideGraphQL(cfg Config, r *graph.Resolver, verifier core.TokenVerifier, stats *wsproto.Stats, rateLimit *core.APIRateLimit,
	reads *dbread.Policy) GraphQLHandler {
	opts := graph.DefaultOptions
	opts.Reads = reads
	opts.PublicURL = cfg.PublicURL
	opts.WebSocketStats = stats
	opts.RateLimit = rateLimit
	return graph.NewHandler(r, verifier, opts)
}

func provideWebSocketStats() *wsproto.Stats { return &wsproto.Stats{} }

func provideGraphiQL() GraphiQLHandler { return graphiql.Handler() }

// provideConsole serves the web console, signing in at the embedded
// identity provider or at the external issuer.
func provideConsole(cfg Config) (ConsoleHandler, error) {
	return console.New(console.Config{Issuer: cfg.issuer(), ClientID: cfg.consoleClientID()})
}

// provideFleetMeter counts events, commands and webhook attempts on their
// way through the waker every service is told of them by.
func provideFleetMeter(shared sharedState) *metrics.Fleet { return metrics.NewFleet(shared.Waker) }

func provideCollectors(store *bunstore.Store, ws *wsproto.Stats, fleet *metrics.Fleet, feed *core.EventFeed, alarms *core.AlarmService, logger *slog.Logger) []prometheus.Collector {
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	return append(append(fleet.Collectors(store.MountCounts, feed.Lag, logger), metrics.AlarmCollectors(alarms.Counts, logger)...),
		counter("mountd_db_queries_total", "SQL statements sent to the database.",
			func() float64 { return float64(store.Queries()) }),
		replicaCollector{store: store},
		metrics.CachedGauge("mountd_mounts_behind_revocations",
			"Associated mounts with a revocation made whose revocation version, as a phone last told it (Mount.offline), is below the current one (none told counts as behind).",
			store.MountsBehindRevocations, logger),
		gauge("mountd_graphql_ws_connections", "Open graphql-transport-ws connections.",
			func() float64 { return float64(ws.Connections()) }),
		gauge("mountd_graphql_ws_shared_executions", "Running subscription executions shared by equal subscriptions.",
			func() float64 { return float64(ws.SharedExecutions()) }),
		gauge("mountd_graphql_ws_shared_subscribers", "Subscriptions fed by shared executions.",
			func() float64 { return float64(ws.SharedSubscribers()) }),
		counter("mountd_graphql_ws_slow_closes_total", "Connections closed with 1013 because the client fell too far behind.",
			func() float64 { return float64(ws.SlowCloses()) }),
	)
}

// noFailureLimiter serves the admin commands, which authenticate nobody.
func noFailureLimiter() core.FailureLimiter { return nil }

func provideWebhookDeps(cfg Config, store *bunstore.Store, sealer *keyring.Sealer, waker core.EventWaker,
	rates core.RateLimiter, cursors *core.CursorCodec, logger *slog.Logger) core.WebhookDeps {
	return core.WebhookDeps{Store: store, Sealer: sealer, Waker: waker, Limiter: rates, Logger: logger,
		Targets:     webhook.Targets{AllowPrivate: cfg.WebhookAllowPrivate},
		Sender:      webhook.NewSender(cfg.WebhookAllowPrivate, cursors),
		Body:        rest.WebhookBody(cursors, cfg.OfflineAfter),
		RetryDelays: cfg.retryDelays()}
}
