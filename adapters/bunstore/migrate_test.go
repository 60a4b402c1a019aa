package bunstore_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun/migrate"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/migrations"
)

// TestUpgradeScopesHistory: upgrading a database written before history was
// scoped to associations keeps every row, gives it to the mount's owner (or
// the owner whose window lapsed), keeps the command order, and drops tag
// links an association left behind.
func TestUpgradeScopesHistory(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261124000004") // the schema before history was scoped
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1), ('acc_b', 'B', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, expired_owner_id, created_at, updated_at) VALUES
					('M_OWNED', 'ASSOCIATED', 'acc_a', NULL, 1, 1),
					('M_EXPIRED', 'INACTIVE', NULL, 'acc_b', 1, 1),
					('M_ABANDONED', 'INACTIVE', NULL, NULL, 1, 1)`,
				`INSERT INTO mount_states (mount_uid, code, occurred_at, value, received_at) VALUES
					('M_OWNED', 'BATTERY_LEVEL', 10, '80', 11), ('M_EXPIRED', 'BATTERY_LEVEL', 10, '70', 11), ('M_ABANDONED', 'BATTERY_LEVEL', 10, '60', 11)`,
				`INSERT INTO mount_latest_states (mount_uid, code, occurred_at, value) VALUES ('M_OWNED', 'BATTERY_LEVEL', 10, '80')`,
				`INSERT INTO commands (id, mount_uid, account_id, code, payload, data, generated_at, issued_by) VALUES
					('c2', 'M_OWNED', 'acc_a', 'LOCK_MOUNT', 'p', '{}', 20, 'cli_a'), ('c1', 'M_OWNED', 'acc_a', 'LOCK_MOUNT', 'p', '{}', 10, 'cli_a')`,
				`INSERT INTO nfc_tags (account_id, uid, name, color, icon_name, created_at, updated_at) VALUES
					('acc_a', '11223344', '', '', '', 1, 1), ('acc_b', 'AABBCCDD', '', '', '', 1, 1)`,
				`INSERT INTO nfc_tag_mounts (account_id, tag_uid, mount_uid, linked_at) VALUES
					('acc_a', '11223344', 'M_OWNED', 1), ('acc_b', 'AABBCCDD', 'M_EXPIRED', 1)`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}

			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			for _, tc := range []struct {
				uid, account string
				states       int
			}{
				{"M_OWNED", "acc_a", 1},
				{"M_EXPIRED", "acc_b", 1},
				{"M_ABANDONED", "", 1},
			} {
				_, total, err := store.ListStates(ctx, tc.uid, tc.account, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
				if err != nil || total != tc.states {
					t.Fatalf("%s states of %q: %d, %v", tc.uid, tc.account, total, err)
				}
			}
			if latest, err := store.LatestStates(ctx, "M_OWNED", "acc_a"); err != nil || len(latest) != 1 || latest[0].Value != "80" {
				t.Fatalf("latest %v %v", latest, err)
			}
			cmds, _, err := store.ListCommands(ctx, "M_OWNED", "acc_a", core.Page{CurrentPage: 1, PageSize: 10})
			if err != nil || len(cmds) != 2 || cmds[0].ID != "c2" || cmds[1].ID != "c1" {
				t.Fatalf("commands %+v %v", cmds, err)
			}
			if tags, err := store.MountTagUIDs(ctx, "acc_a", "M_OWNED"); err != nil || len(tags) != 1 {
				t.Fatalf("the owner's link went: %v %v", tags, err)
			}
			if tags, err := store.MountTagUIDs(ctx, "acc_b", "M_EXPIRED"); err != nil || len(tags) != 0 {
				t.Fatalf("a lapsed association's link stayed: %v %v", tags, err)
			}
		})
	}
}

// TestUpgradePartitionsHistory: upgrading a database written before
// retention keeps every state entry, from long ago to minutes ahead; on
// PostgreSQL the history becomes a partitioned table that takes new entries
// and prunes old ones.
func TestUpgradePartitionsHistory(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261126000008") // the schema before retention
			now := time.Now().UTC().Truncate(time.Millisecond)
			day := 24 * time.Hour
			at := []time.Time{time.UnixMilli(10).UTC(), now.Add(-400 * day), now.Add(-time.Hour), now.Add(4 * time.Minute)}
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at) VALUES ('M1', 'ASSOCIATED', 'acc_a', 1, 1)`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			for i, a := range at {
				if _, err := db.ExecContext(ctx, `INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at)
					VALUES ('M1', 'acc_a', 'BATTERY_LEVEL', ?, ?, ?)`, a.UnixMilli(), fmt.Sprint(50+i), now.UnixMilli()); err != nil {
					t.Fatal(err)
				}
			}

			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			history := func() int {
				t.Helper()
				_, total, err := store.ListStates(ctx, "M1", "acc_a", core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
				if err != nil {
					t.Fatal(err)
				}
				return total
			}
			if got := history(); got != len(at) {
				t.Fatalf("after the upgrade the history holds %d of %d entries", got, len(at))
			}
			if store.Postgres() {
				var kind string
				if err := db.NewRaw(`SELECT relkind FROM pg_class WHERE relname = 'mount_states' AND relnamespace = current_schema()::regnamespace`).Scan(ctx, &kind); err != nil || kind != "p" {
					t.Fatalf("mount_states relkind %q (%v), want a partitioned table", kind, err)
				}
			}
			// New entries, days ahead included, and retention work on the
			// upgraded table.
			if err := store.PrepareStates(ctx, now.Add(7*day)); err != nil {
				t.Fatal(err)
			}
			if _, stored, err := store.InsertStates(ctx, "M1", "acc_a", []core.StateEntry{
				{Code: core.StateBatteryLevel, Value: "40", OccurredAt: now.Add(2 * day), ReceivedAt: now}}, nil); err != nil || len(stored) != 1 {
				t.Fatalf("insert after the upgrade: %d %v", len(stored), err)
			}
			for {
				n, err := store.PruneStates(ctx, now.Add(-90*day), 1)
				if err != nil {
					t.Fatal(err)
				}
				if n < 1 {
					break
				}
			}
			if got := history(); got != 3 {
				t.Fatalf("after pruning 90 days the history holds %d entries, want 3", got)
			}
		})
	}
}

// TestUpgradeStoresWebhookBodiesOnce: upgrading a database whose attempts
// each held their body keeps one body per event, byte for byte; pending
// attempts are delivered with it, and pruning the attempts lets it go.
func TestUpgradeStoresWebhookBodiesOnce(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261127000009") // the schema before bodies were stored once
			e1, e2 := core.Cursor{Seq: 1}.Internal(), core.Cursor{Seq: 2}.Internal()
			body1, body2 := `{"type":"DELETED","data":{"uid":"M1","x":"é\u003c"}}`, `{"type":"ABANDONED"}`
			for _, q := range []struct {
				sql  string
				args []any
			}{
				{`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1)`, nil},
				{`INSERT INTO webhooks (id, account_id, url, event_types, mount_uids, description, enabled, sealed_secret, created_at, updated_at)
					VALUES ('wh_1', 'acc_a', 'https://example.com/1', '[]', '[]', '', TRUE, 's', 1, 1),
					       ('wh_2', 'acc_a', 'https://example.com/2', '[]', '[]', '', TRUE, 's', 1, 1)`, nil},
				{`INSERT INTO webhook_deliveries (id, webhook_id, account_id, event_id, event_type, attempt, status, attempted_at, next_attempt_at, payload)
					VALUES ('whd_1', 'wh_1', 'acc_a', ?, 'DELETED', 1, 'PENDING', NULL, 10, ?),
					       ('whd_2', 'wh_2', 'acc_a', ?, 'DELETED', 1, 'FAILED', 10, NULL, ?),
					       ('whd_3', 'wh_2', 'acc_a', ?, 'DELETED', 2, 'PENDING', NULL, 10, ?),
					       ('whd_4', 'wh_1', 'acc_a', ?, 'ABANDONED', 1, 'SUCCEEDED', 10, NULL, ?)`,
					[]any{e1, body1, e1, body1, e1, body1, e2, body2}},
			} {
				if _, err := db.ExecContext(ctx, q.sql, q.args...); err != nil {
					t.Fatalf("%s: %v", q.sql, err)
				}
			}

			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			if n, _, err := store.WebhookBodyStats(ctx); err != nil || n != 2 {
				t.Fatalf("after the upgrade: %d bodies, %v; want 2", n, err)
			}
			claimed, err := store.ClaimDeliveries(ctx, time.UnixMilli(20), time.Minute, 10, nil, nil)
			if err != nil || len(claimed) != 2 {
				t.Fatalf("claim after the upgrade: %+v, %v", claimed, err)
			}
			for _, d := range claimed {
				if string(d.Payload) != body1 || d.EventID.Internal() != e1 {
					t.Fatalf("attempt %s carries %q", d.ID, d.Payload)
				}
			}
			if _, total, err := store.ListDeliveries(ctx, "acc_a", "wh_2", core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 2 {
				t.Fatalf("wh_2's attempts: %d, %v", total, err)
			}
			// Pruning the finished attempts lets E2's body go; E1's
			// pending attempts keep theirs.
			if n, err := store.PruneDeliveries(ctx, time.UnixMilli(1000), 100); err != nil || n != 2 {
				t.Fatalf("prune: %d, %v", n, err)
			}
			if n, _, err := store.WebhookBodyStats(ctx); err != nil || n != 1 {
				t.Fatalf("after pruning: %d bodies, %v; want 1", n, err)
			}
		})
	}
}

// TestUpgradeCommandLifecycle: commands issued before the lifecycle take
// their payload's nonce as id and count as UNCONFIRMED from their expiry,
// without an event; the sweep then finds nothing to do.
func TestUpgradeCommandLifecycle(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261127000014")
			const nonce = "0123456789abcdef0123456789abcdef"
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at) VALUES ('M1', 'ASSOCIATED', 'acc_a', 1, 1)`,
				`INSERT INTO commands (id, mount_uid, account_id, code, payload, data, generated_at, issued_by) VALUES
					('cmd_old', 'M1', 'acc_a', 'RELEASE_HELMET', '1000;RELEASE_HELMET;M1;;` + nonce + `', '{}', 1000, 'cli_a')`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			cmds, err := store.CommandsByID(ctx, "M1", "acc_a", []string{nonce})
			if err != nil || len(cmds) != 1 {
				t.Fatalf("command by its nonce: %+v %v", cmds, err)
			}
			c := cmds[0]
			if c.Status != core.CommandUnconfirmed || c.ExpiresAt.UnixMilli() != 1000+300000 || c.StatusAt.UnixMilli() != 301000 {
				t.Fatalf("upgraded command %+v", c)
			}
			events, err := store.UnconfirmCommands(ctx, time.Now(), 10, func(c core.Command) *core.Event {
				return &core.Event{Type: core.EventCommandUnconfirmed, UID: c.MountUID, AccountID: c.AccountID, OccurredAt: time.Now()}
			})
			if err != nil || len(events) != 0 {
				t.Fatalf("sweep after the upgrade: %d events, %v", len(events), err)
			}
			if got, err := store.Mount(ctx, "M1"); err != nil || got.DevicePublicKey != "" {
				t.Fatalf("mount %+v %v", got, err)
			}
		})
	}
}

// TestUpgradeKeepsHandoverKeys: the upgrade keeps the keys of mounts IDLE
// or ASSOCIATED at the time as hand-over keys (an ASSOCIATED mount's as
// confirmed), so their next ASSOCIATE_OWNER carries a hand-over.
func TestUpgradeKeepsHandoverKeys(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261129014500")
			pub := strings.Repeat("ab", 32)
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, associated_at, key_id, public_key, sealed_private_key, created_at, updated_at)
					VALUES ('M1', 'ASSOCIATED', 'acc_a', 5, 'k1', '` + pub + `', 'sealed-1', 1, 6)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, idle_deadline, key_id, public_key, sealed_private_key, created_at, updated_at)
					VALUES ('M2', 'IDLE', 'acc_a', 9999999999999, 'k2', '` + pub + `', 'sealed-2', 1, 6)`,
				`INSERT INTO mounts (uid, association_state, created_at, updated_at) VALUES ('M3', 'INACTIVE', 1, 6)`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			for uid, want := range map[string]string{"M1": "k1", "M2": "k2", "M3": ""} {
				keys, err := store.HandoverKeys(ctx, uid)
				if err != nil || want == "" && len(keys) != 0 || want != "" && (len(keys) != 1 || keys[0].ID != want || keys[0].SealedPrivateKey != "sealed-"+want[1:]) {
					t.Fatalf("%s: hand-over keys %+v, %v; want %q", uid, keys, err, want)
				}
			}
			// M1's key counts as confirmed: a claim after it keeps it first.
			now := time.Now()
			if _, err := store.AbandonMount(ctx, "M1", "acc_a", now, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := store.ClaimMount(ctx, core.Claim{UID: "M1", AccountID: "acc_a", Key: core.MountKey{ID: "k9", PublicKey: make([]byte, 32), SealedPrivateKey: "s"},
				Now: now, Deadline: now.Add(time.Minute)}, nil); err != nil {
				t.Fatal(err)
			}
			if keys, err := store.HandoverKeys(ctx, "M1"); err != nil || len(keys) != 2 || keys[0].ID != "k1" || keys[1].ID != "k9" {
				t.Fatalf("M1 after a claim: %+v, %v", keys, err)
			}
		})
	}
}

// TestUpgradeNamesClients (issue 38 item 4): the upgrade names every
// existing client after its account (+ " API client"), and shows that name
// where a client's id stood for it: alarms it acknowledged, audit entries
// it made. A person's acknowledgement gets the username.
func TestUpgradeNamesClients(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261129021500")
			alarm := func(id, by string) string {
				return `INSERT INTO alarms (id, account_id, rule_id, rule_name, rule_revision, mount_uid, severity, state, since, due_at,
					raised_at, acknowledged_at, acknowledged_by, alarm_values)
					VALUES ('` + id + `', 'acc_a', 'alr_1', 'low', 1, 'M` + id + `', 'WARNING', 'ACTIVE', 1, 1, 2, 3, '` + by + `', '{}')`
			}
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'Dispatch', 1)`,
				`INSERT INTO api_clients (client_id, account_id, secret_hash, created_at) VALUES ('cli_a', 'acc_a', 'h', 1)`,
				`INSERT INTO users (id, username, account_id, role, mount_uids, password_hash, created_at)
					VALUES ('usr_1', 'ana', 'acc_a', 'owner', '[]', 'h', 1)`,
				alarm("1", "cli_a"), alarm("2", "usr_1"), alarm("3", "cli_gone"),
				`INSERT INTO audit_log (account_id, at, actor_type, actor_id, actor_name, action, target, source_address, details)
					VALUES ('acc_a', 1, 'client', 'cli_a', 'cli_a', 'mount.update', 'mount:M1', '', '{}')`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			if c, err := store.APIClient(ctx, "cli_a"); err != nil || c.Name != "Dispatch API client" {
				t.Fatalf("the client after the upgrade: %+v, %v", c, err)
			}
			alarms, _, err := store.ListAlarms(ctx, "acc_a", core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
			if err != nil || len(alarms) != 3 {
				t.Fatalf("alarms %+v, %v", alarms, err)
			}
			names := map[string]string{}
			for _, a := range alarms {
				names[a.AcknowledgedBy] = a.AcknowledgedByName
			}
			if want := map[string]string{"cli_a": "Dispatch API client", "usr_1": "ana", "cli_gone": "cli_gone"}; !maps.Equal(names, want) {
				t.Fatalf("acknowledged by %v, want %v", names, want)
			}
			entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_a", Limit: 10})
			if err != nil || len(entries) != 1 || entries[0].Actor.Name != "Dispatch API client" {
				t.Fatalf("audit entries %+v, %v", entries, err)
			}
		})
	}
}

// migrateBefore migrates store's database to the schema before the
// migration named first (the schema an upgrade starts from).
func migrateBefore(t *testing.T, store *bunstore.Store, first string) {
	t.Helper()
	ctx := context.Background()
	old := migrate.NewMigrations()
	for _, m := range migrations.Migrations.Sorted() {
		if m.Name < first {
			old.Add(m)
		}
	}
	m := migrate.NewMigrator(store.DB(), old, migrate.WithMarkAppliedOnSuccess(true),
		migrate.WithTemplateData(map[string]bool{"Postgres": store.Postgres()}))
	if err := m.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatalf("migrate to the old schema: %v", err)
	}
}

// TestUpgradeNamesCommandIssuers (issue 38 item 4): the upgrade gives the
// commands issued before it their issuer's name: the client's, a person's
// username; an empty name (the API shows the id) when neither is known.
func TestUpgradeNamesCommandIssuers(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261129024500")
			command := func(id, by string) string {
				return `INSERT INTO commands (id, mount_uid, account_id, code, payload, data, generated_at, issued_by, status, status_at, expires_at)
					VALUES ('` + id + `', 'M1', 'acc_a', 'RELEASE_HELMET', 'p', '{}', 1, '` + by + `', 'ISSUED', 1, 2)`
			}
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'Dispatch', 1)`,
				`INSERT INTO api_clients (client_id, account_id, name, secret_hash, created_at) VALUES ('cli_a', 'acc_a', 'Night shift', 'h', 1)`,
				`INSERT INTO users (id, username, account_id, role, mount_uids, password_hash, created_at)
					VALUES ('usr_1', 'ana', 'acc_a', 'owner', '[]', 'h', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at) VALUES ('M1', 'ASSOCIATED', 'acc_a', 1, 1)`,
				command("c1", "cli_a"), command("c2", "usr_1"), command("c3", "cli_gone"),
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			var rows []struct {
				IssuedBy     string `bun:"issued_by"`
				IssuedByName string `bun:"issued_by_name"`
			}
			if err := db.NewRaw(`SELECT issued_by, issued_by_name FROM commands`).Scan(ctx, &rows); err != nil {
				t.Fatal(err)
			}
			names := map[string]string{}
			for _, r := range rows {
				names[r.IssuedBy] = r.IssuedByName
			}
			if want := map[string]string{"cli_a": "Night shift", "usr_1": "ana", "cli_gone": ""}; !maps.Equal(names, want) {
				t.Fatalf("issued by %v, want %v", names, want)
			}
		})
	}
}

// TestUpgradeCopiesLatestValues (issue 40): the upgrade copies each owned
// mount's latest values of its owner into the mount's row, where the fleet
// filter reads them; another account's rows (a former owner's) stay out.
func TestUpgradeCopiesLatestValues(t *testing.T) {
	for name, newURL := range testenv.Databases(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := MustOpen(t, newURL(t))
			db := store.DB()
			migrateBefore(t, store, "20261129070000")
			for _, q := range []string{
				`INSERT INTO accounts (id, name, created_at) VALUES ('acc_a', 'A', 1), ('acc_b', 'B', 1)`,
				`INSERT INTO mounts (uid, association_state, owner_account_id, created_at, updated_at) VALUES
					('M1', 'ASSOCIATED', 'acc_a', 1, 1), ('M2', 'ASSOCIATED', 'acc_a', 1, 1)`,
				`INSERT INTO mount_latest_states (mount_uid, account_id, code, occurred_at, value) VALUES
					('M1', 'acc_a', 'BATTERY_LEVEL', 1, '15.5'), ('M1', 'acc_a', 'MOUNT_LOCKED', 1, '1'),
					('M1', 'acc_a', 'HELMET_MOUNTED', 1, '0'), ('M2', 'acc_b', 'BATTERY_LEVEL', 1, '90'),
					('M2', 'acc_a', 'CPU_TEMPERATURE', 1, '61')`,
			} {
				if _, err := db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if _, err := store.Migrate(ctx); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			for _, c := range []struct{ filter, want string }{
				{`batteryLevel = 15.5 AND mountLocked = true AND helmetMounted = false`, "M1"},
				{`batteryLevel > 50`, ""},
				{`cpuTemperature > 60`, "M2"},
				{`NOT batteryLevel < 100`, "M2"},
			} {
				f := core.MountFilter{Expression: c.filter}
				if err := core.ParseMountFilter(aipfilter.New(), &f, time.Minute, time.Now()); err != nil {
					t.Fatal(err)
				}
				mounts, _, err := store.ListMounts(ctx, "acc_a", f, core.Page{CurrentPage: 1, PageSize: 10}, time.Now())
				var uids []string
				for _, m := range mounts {
					uids = append(uids, m.UID)
				}
				if err != nil || strings.Join(uids, ",") != c.want {
					t.Errorf("%s: %v, %v; want %s", c.filter, uids, err, c.want)
				}
			}
		})
	}
}
