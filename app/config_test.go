package app

import (
	"io"
	"testing"
	"time"

	"github.com/mountd/mountd/internal/clitest"
)

// TestCommandSettings: MOUNTD_COMMAND_TTL is positive and at most the
// mount's own 5 minutes (0: the default); MOUNTD_RECEIPT_GRACE is not
// negative (0: the default).
func TestCommandSettings(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ttl, grace   time.Duration
		ok           bool
		wantTTL, wgr time.Duration
	}{
		{"defaults", 0, 0, true, 5 * time.Minute, 24 * time.Hour},
		{"shorter ttl, longer grace", 90 * time.Second, 72 * time.Hour, true, 90 * time.Second, 72 * time.Hour},
		{"the most", 5 * time.Minute, time.Second, true, 5 * time.Minute, time.Second},
		{"ttl over 5m", 5*time.Minute + time.Millisecond, 0, false, 0, 0},
		{"negative ttl", -time.Second, 0, false, 0, 0},
		{"negative grace", time.Minute, -time.Second, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{TokenTTL: time.Hour, AssociationWindow: time.Minute, CommandTTL: tc.ttl, ReceiptGrace: tc.grace}
			err := cfg.resolve("127.0.0.1:1")
			if (err == nil) != tc.ok {
				t.Fatalf("resolve: %v, want ok %v", err, tc.ok)
			}
			if tc.ok && (cfg.CommandTTL != tc.wantTTL || cfg.ReceiptGrace != tc.wgr) {
				t.Fatalf("ttl %s, grace %s", cfg.CommandTTL, cfg.ReceiptGrace)
			}
		})
	}
}

// TestOfflineAfterSetting: MOUNTD_OFFLINE_AFTER defaults to 15m and must lie
// within 1s and 168h.
func TestOfflineAfterSetting(t *testing.T) {
	for _, tc := range []struct {
		in, want time.Duration
		ok       bool
	}{
		{0, 15 * time.Minute, true},
		{time.Minute, time.Minute, true},
		{time.Second, time.Second, true},
		{168 * time.Hour, 168 * time.Hour, true},
		{-time.Minute, 0, false},
		{time.Millisecond, 0, false},
		{169 * time.Hour, 0, false},
	} {
		cfg := Config{TokenTTL: time.Hour, AssociationWindow: time.Minute, OfflineAfter: tc.in}
		err := cfg.resolve("127.0.0.1:1")
		if (err == nil) != tc.ok || tc.ok && cfg.OfflineAfter != tc.want {
			t.Errorf("%s: %v, %s", tc.in, err, cfg.OfflineAfter)
		}
	}
}

// TestRedisSettings: MOUNTD_REDIS_URL and MOUNTD_REDIS_CLUSTER_URL exclude
// each other; on a cluster the prefix holds no braces, which would make a
// hash tag of their own.
func TestRedisSettings(t *testing.T) {
	const single, cluster = "redis://127.0.0.1:6379/0", "redis://127.0.0.1:7000?addr=127.0.0.1:7001"
	for _, tc := range []struct {
		name                 string
		url, clusterURL, pfx string
		ok                   bool
	}{
		{"none", "", "", "", true},
		{"one redis", single, "", "", true},
		{"a cluster", "", cluster, "", true},
		{"a cluster with a prefix", "", cluster, "fleet-a:", true},
		{"both", single, cluster, "", false},
		{"a cluster with braces in the prefix", "", cluster, "{fleet}:", false},
		{"one redis with braces in the prefix", single, "", "{fleet}:", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{TokenTTL: time.Hour, AssociationWindow: time.Minute, RedisURL: tc.url, RedisClusterURL: tc.clusterURL, RedisPrefix: tc.pfx}
			if err := cfg.resolve("127.0.0.1:1"); (err == nil) != tc.ok {
				t.Fatalf("resolve: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestReadReplicaSettings: read replicas need PostgreSQL, postgres://
// URLs and a positive lag.
func TestReadReplicaSettings(t *testing.T) {
	const pg, replica = "postgres://db:5432/mountd", "postgres://replica:5432/mountd"
	for _, tc := range []struct {
		name     string
		db, read string
		maxLag   time.Duration
		ok       bool
	}{
		{"none", pg, "", 0, true},
		{"one", pg, replica, time.Second, true},
		{"two", pg, replica + ", postgres://replica2:5432/mountd", time.Second, true},
		{"on SQLite", "sqlite:///tmp/m.db", replica, time.Second, false},
		{"on the default SQLite", "", replica, time.Second, false},
		{"not postgres", pg, "mysql://replica/mountd", time.Second, false},
		{"no lag", pg, replica, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{TokenTTL: time.Hour, AssociationWindow: time.Minute, DatabaseURL: tc.db, DatabaseReadURL: tc.read, ReadMaxLag: tc.maxLag}
			if err := cfg.resolve("127.0.0.1:1"); (err == nil) != tc.ok {
				t.Fatalf("resolve: %v, want ok %v", err, tc.ok)
			}
		})
	}
}

// TestHelpSaysDefaultsOnce: no flag's help says "default" twice (a usage
// stating its default while cli appends "(default: …)" for the value).
func TestHelpSaysDefaultsOnce(t *testing.T) {
	for _, doubled := range clitest.DoubledDefaults(NewCommand(io.Discard, io.Discard)) {
		t.Error(doubled)
	}
}
