package app

import (
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/proxies"
)

// Config is every setting of mountd; each has a flag and an environment
// variable (docs/guide.md, "Configuration").
type Config struct {
	Listen      string
	PublicURL   string
	DataDir     string
	DatabaseURL string
	RedisURL    string
	// RedisClusterURL is MOUNTD_REDIS_CLUSTER_URL: a Redis Cluster instead
	// of RedisURL (go-redis's cluster URL, seed nodes in addr parameters).
	RedisClusterURL string
	RedisPrefix     string
	// DatabaseReadURL is MOUNTD_DATABASE_READ_URL: PostgreSQL read replicas,
	// comma-separated; ReadMaxLag is MOUNTD_READ_MAX_LAG, the most lag a
	// replica may have to serve reads.
	DatabaseReadURL string
	ReadMaxLag      time.Duration
	Issuer          string
	// StateRetention and DeliveryRetention bound the state history and
	// finished webhook attempts; zero keeps all.
	StateRetention    time.Duration
	DeliveryRetention time.Duration
	// AuditRetention is MOUNTD_AUDIT_RETENTION; zero keeps all.
	AuditRetention time.Duration
	// TrustedProxies is MOUNTD_TRUSTED_PROXIES: the reverse proxies whose
	// X-Forwarded-For names the client.
	TrustedProxies string
	// RateLimit is MOUNTD_RATE_LIMIT, e.g. "1200/m"; empty: no API rate limit.
	RateLimit string
	// ConsoleClientID, AccountClaim and ScopeClaim apply with an external
	// issuer: the console's client there and where its tokens carry the
	// account and the scope items.
	ConsoleClientID string
	AccountClaim    string
	ScopeClaim      string
	ProjectID       string
	IDPName         string
	MasterKey       string
	// AllowGeneratedMasterKey is serve's --allow-generated-master-key: on
	// PostgreSQL, start without MasterKey anyway (one replica).
	AllowGeneratedMasterKey bool
	AssociationWindow       time.Duration
	// CommandTTL is MOUNTD_COMMAND_TTL: how long a command can run after
	// it is issued (0: 5m, at most 5m); ReceiptGrace is
	// MOUNTD_RECEIPT_GRACE: how long after that its receipts are still
	// accepted (0: 24h).
	CommandTTL   time.Duration
	ReceiptGrace time.Duration
	// OfflineAfter is MOUNTD_OFFLINE_AFTER: how long after lastSeenAt a
	// mount turns OFFLINE (0: 15m; at most 168h).
	OfflineAfter time.Duration
	// GrantMaxTTL is MOUNTD_GRANT_MAX_TTL: how far ahead a restricted
	// token's rider grant may end (0: 12h).
	GrantMaxTTL time.Duration
	TokenTTL    time.Duration
	DownloadTTL time.Duration
	BodyTimeout time.Duration
	// RequestTimeout is MOUNTD_REQUEST_TIMEOUT: how long a request may
	// work before it answers 503 and its statement is cancelled (0: 10s).
	RequestTimeout time.Duration
	// MaxExports is MOUNTD_MAX_EXPORTS: the exports one replica runs at
	// once (0: half the database pool); ExportWriteTimeout is
	// MOUNTD_EXPORT_WRITE_TIMEOUT: how long an export waits for a client
	// that reads nothing before it cuts it (0: 30s).
	MaxExports         int
	ExportWriteTimeout time.Duration
	EventRetention     time.Duration
	// WebhookRetryDelays is MOUNTD_WEBHOOK_RETRY_DELAYS as given.
	WebhookRetryDelays  string
	WebhookAllowPrivate bool
	BlobURL             string
	LogLevel            string
	LogFormat           string
	// HoldDeliveries, when set (benchmarks only), keeps the webhook
	// dispatcher from starting until it is closed, so that a backlog of
	// events can be measured apart from how fast it was ingested.
	HoldDeliveries <-chan struct{}
}

// OnPostgres says whether the database is PostgreSQL, which replicas share.
func (c Config) OnPostgres() bool {
	return strings.HasPrefix(c.DatabaseURL, "postgres")
}

// resolve fills the defaults that derive from other settings. listenAddr is
// the address actually bound, which differs from Listen when its port is 0.
func (c *Config) resolve(listenAddr string) error {
	if c.DataDir == "" {
		c.DataDir = "./data"
	}
	if c.RedisPrefix == "" {
		c.RedisPrefix = "mountd:"
	}
	if c.RedisURL != "" && c.RedisClusterURL != "" {
		return fmt.Errorf("redis url and redis cluster url are exclusive: give one")
	}
	// The keys' hash tags follow the prefix; braces in it would make its own
	// tag, and put every key in one cluster slot.
	if c.RedisClusterURL != "" && strings.ContainsAny(c.RedisPrefix, "{}") {
		return fmt.Errorf("redis prefix %q must not hold { or } on a Redis Cluster", c.RedisPrefix)
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = "sqlite://" + filepath.Join(c.DataDir, "mountd.db")
	}
	if c.DatabaseReadURL != "" {
		if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
			return fmt.Errorf("database read url needs a PostgreSQL database url (SQLite has no read replicas)")
		}
		for _, u := range c.readURLs() {
			if !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
				return fmt.Errorf("database read url %q must start with postgres://", redactURL(u))
			}
		}
		if c.ReadMaxLag <= 0 {
			return fmt.Errorf("read max lag must be positive")
		}
	}
	if c.PublicURL == "" && listenAddr != "" {
		c.PublicURL = "http://" + listenAddr
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	c.Issuer = strings.TrimRight(c.Issuer, "/")
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("public url %q must be an absolute http(s) URL", c.PublicURL)
		}
	}
	if c.TokenTTL <= 0 {
		return fmt.Errorf("token ttl must be positive")
	}
	if c.AssociationWindow <= 0 {
		return fmt.Errorf("association window must be positive")
	}
	if c.CommandTTL == 0 {
		c.CommandTTL = core.DefaultCommandTTL
	}
	if c.CommandTTL < 0 || c.CommandTTL > core.MaxCommandTTL {
		return fmt.Errorf("command ttl must be positive and at most %s (the mount's own window)", core.MaxCommandTTL)
	}
	if c.ReceiptGrace == 0 {
		c.ReceiptGrace = core.DefaultReceiptGrace
	}
	if c.ReceiptGrace < 0 {
		return fmt.Errorf("receipt grace must be positive")
	}
	if c.OfflineAfter == 0 {
		c.OfflineAfter = core.DefaultOfflineAfter
	}
	if c.OfflineAfter < time.Second || c.OfflineAfter > 168*time.Hour {
		return fmt.Errorf("offline after must be from 1s to 168h")
	}
	if c.EventRetention == 0 {
		c.EventRetention = core.DefaultEventRetention
	}
	if c.EventRetention < 0 {
		return fmt.Errorf("event retention must be positive")
	}
	if c.WebhookRetryDelays != "" {
		if _, err := core.ParseRetryDelays(c.WebhookRetryDelays); err != nil {
			return err
		}
	}
	if c.StateRetention < 0 || c.DeliveryRetention < 0 {
		return fmt.Errorf("state and webhook delivery retention must not be negative (0 keeps all)")
	}
	if c.AuditRetention < 0 {
		return fmt.Errorf("audit retention must not be negative (0 keeps all)")
	}
	if _, err := proxies.Parse(c.TrustedProxies); err != nil {
		return err
	}
	if c.RateLimit != "" {
		if _, err := core.ParseRate(c.RateLimit); err != nil {
			return err
		}
	}
	return nil
}

// retryDelays are the webhook retry delays; nil: the default.
func (c *Config) retryDelays() core.WebhookRetryDelays {
	if c.WebhookRetryDelays == "" {
		return nil
	}
	d, _ := core.ParseRetryDelays(c.WebhookRetryDelays) // checked by resolve
	return d
}

// consoleClientID is the console's client at the issuer that signs people in.
func (c *Config) consoleClientID() string {
	if c.Issuer != "" && c.ConsoleClientID != "" {
		return c.ConsoleClientID
	}
	return core.ConsoleClientID
}

// issuer is the external issuer, or ourselves.
func (c *Config) issuer() string {
	if c.Issuer != "" {
		return c.Issuer
	}
	return c.PublicURL
}

// readURLs are the read replicas' URLs of DatabaseReadURL.
func (c *Config) readURLs() []string {
	var urls []string
	for _, u := range strings.Split(c.DatabaseReadURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	return urls
}
