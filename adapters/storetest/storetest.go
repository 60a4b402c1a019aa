// Package storetest is the contract suite of core's storage ports. Every
// implementation runs it (PostgreSQL and SQLite through bunstore, and the
// in-memory store), so they cannot drift apart: the conditional semantics
// that make transitions race-free are the same everywhere.
package storetest

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// Store is every storage port of core.
type Store interface {
	core.AccountStore
	core.MountStore
	core.StateStore
	core.CommandStore
	core.TagStore
	core.FirmwareStore
	core.EventLog
	core.WebhookStore
	core.UserStore
	core.SessionStore
	core.Housekeeping
	core.ExportStore
	core.AuditLog
	core.AlarmStore
	core.JobStore
	core.RolloutStore
	// WebhookBodyStats says how many webhook bodies the store holds and
	// their total length: the suite's view of what deliveries cost.
	WebhookBodyStats(ctx context.Context) (count int, size int64, err error)
}

// Run runs the suite; newStore gives each case a fresh, empty store.
func Run(t *testing.T, newStore func(t *testing.T) Store) {
	for _, c := range []struct {
		name string
		fn   func(t *testing.T, store Store)
	}{
		{"Accounts", accounts},
		{"AccountService", accountService},
		{"InsertStates", insertStates},
		{"AssociationScope", associationScope},
		{"CommandOrder", commandOrder},
		{"Lifecycle", lifecycle},
		{"ReportsRacingDelete", reportsRacingDelete},
		{"Tags", tags},
		{"EventLog", eventLog},
		{"ClaimCommand", claimCommand},
		{"ClaimLapsed", claimLapsed},
		{"HandoverKeys", handoverKeys},
		{"EventRetention", eventRetention},
		{"EventAccountHorizons", eventAccountHorizons},
		{"EventAccountHead", eventAccountHead},
		{"EventAccountNewest", eventAccountNewest},
		{"Webhooks", webhooks},
		{"WebhookDeliveries", webhookDeliveries},
		{"WebhookClaimSkipsAccounts", webhookClaimSkipsAccounts},
		{"WebhookBodiesOnce", webhookBodiesOnce},
		{"Users", users},
		{"Sessions", sessions},
		{"OpenSignIns", openSignIns},
		{"TrimRefreshTokens", trimRefreshTokens},
		{"Retention", retention},
		{"Exports", exports},
		{"AuditLog", auditLog},
		{"DeviceKeys", deviceKeys},
		{"Receipts", receipts},
		{"UnconfirmCommands", unconfirmCommands},
		{"ConcurrentSweeps", concurrentSweeps},
		{"SignedReports", signedReports},
		{"SignedRevision", signedRevision},
		{"VerifiedLatest", verifiedLatest},
		{"AlarmRules", alarmRules},
		{"PresenceAndAlarms", presenceAndAlarms},
		{"RacingAlarmSweeps", racingSweeps},
		{"AlarmListing", alarmListing},
		{"RacingAlarmReports", racingReports},
		{"StaleRuleCache", staleRuleCache},
		{"AlarmsLeaveWithTheMount", alarmsLeaveWithTheMount},
		{"AlarmProperty", alarmProperty},
		{"FleetFilter", fleetFilter},
		{"FleetFilterProperty", fleetFilterProperty},
		{"FleetFilterAcrossOwners", fleetFilterAcrossOwners},
		{"JobCreation", jobCreation},
		{"JobProgress", jobProgress},
		{"JobExpiry", jobExpiry},
		{"JobCancel", jobCancel},
		{"PendingJobs", pendingJobs},
		{"RacingJobReceipts", racingJobReceipts},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

func accounts(t *testing.T, store Store) {
	ctx := context.Background()
	created := time.Date(2026, 11, 22, 1, 40, 13, 123_000_000, time.UTC)
	acc := core.Account{ID: "acc_1", Name: "Fleet One", CreatedAt: created}
	cl := core.APIClient{ClientID: "cli_1", AccountID: "acc_1", Name: "Fleet One API client", SecretHash: "$argon2id$x", CreatedAt: created}
	if err := store.CreateAccount(ctx, acc, cl); err != nil {
		t.Fatalf("CreateAccount: %v", err)
	}

	gotAcc, err := store.Account(ctx, "acc_1")
	if err != nil || gotAcc != acc {
		t.Fatalf("Account = %+v, %v; want %+v", gotAcc, err, acc)
	}
	gotCl, err := store.APIClient(ctx, "cli_1")
	if err != nil || gotCl != cl {
		t.Fatalf("APIClient = %+v, %v; want %+v", gotCl, err, cl)
	}

	// RenameClients names the account's clients, audited; the audit log
	// records a client's changes under its name from then on (a client
	// this installation does not know keeps the name given).
	renamed := core.AuditEntry{At: created, AccountID: "acc_1", Actor: core.CLIActor("root"), Action: core.AuditAccountRenameClient,
		Target: "account:acc_1", Details: map[string]any{"name": "Night shift"}}
	if ids, err := store.RenameClients(core.WithAudit(ctx, renamed), "acc_1", "Night shift"); err != nil || len(ids) != 1 || ids[0] != "cli_1" {
		t.Fatalf("RenameClients = %v, %v", ids, err)
	}
	if got, err := store.APIClient(ctx, "cli_1"); err != nil || got.Name != "Night shift" || got.SecretHash != cl.SecretHash {
		t.Fatalf("the renamed client = %+v, %v", got, err)
	}
	if _, err := store.RenameClients(ctx, "acc_x", "X"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("RenameClients of an account without clients: %v", err)
	}
	byClient := core.AuditEntry{At: created, AccountID: "acc_1", Actor: core.Actor{Type: core.ActorClient, ID: "cli_1", Name: "cli_1"},
		Action: core.AuditAccountRotateSecret, Target: "account:acc_1"}
	if _, err := store.ReplaceClientSecrets(core.WithAudit(ctx, byClient), "acc_1", cl.SecretHash); err != nil {
		t.Fatal(err)
	}
	foreign := byClient
	foreign.Actor = core.Actor{Type: core.ActorClient, ID: "ext-client", Name: "ext-client"}
	if _, err := store.ReplaceClientSecrets(core.WithAudit(ctx, foreign), "acc_1", cl.SecretHash); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range settledAudit(t, store, core.AuditQuery{AccountID: "acc_1"}, 3) {
		names = append(names, string(e.Action)+" by "+e.Actor.Name)
	}
	if want := []string{"account.rename-client by root", "account.rotate-secret by Night shift", "account.rotate-secret by ext-client"}; !slices.Equal(names, want) {
		t.Fatalf("audit entries %v, want %v", names, want)
	}

	tests := []struct {
		name string
		call func() error
		want core.Code
	}{
		{"unknown account", func() error { _, err := store.Account(ctx, "acc_x"); return err }, core.CodeNotFound},
		{"unknown client", func() error { _, err := store.APIClient(ctx, "cli_x"); return err }, core.CodeNotFound},
		{"duplicate account", func() error {
			return store.CreateAccount(ctx, acc, core.APIClient{ClientID: "cli_2", AccountID: "acc_1", CreatedAt: created})
		}, core.CodeConflict},
		{"duplicate client id", func() error {
			return store.CreateAccount(ctx, core.Account{ID: "acc_2", Name: "Two", CreatedAt: created}, cl)
		}, core.CodeConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := core.ErrorCode(tt.call()); got != tt.want {
				t.Fatalf("code = %s, want %s", got, tt.want)
			}
		})
	}

	// EnsureAccount adds an account once and never changes one.
	ext := core.Account{ID: "tenant-7", Name: "tenant-7", CreatedAt: created}
	for _, a := range []core.Account{ext, {ID: "tenant-7", Name: "renamed", CreatedAt: created.Add(time.Hour)}, {ID: "acc_1", Name: "taken", CreatedAt: created}} {
		if err := store.EnsureAccount(ctx, a); err != nil {
			t.Fatalf("EnsureAccount %+v: %v", a, err)
		}
	}
	if got, err := store.Account(ctx, "tenant-7"); err != nil || got != ext {
		t.Fatalf("ensured account = %+v, %v; want %+v", got, err, ext)
	}
	if got, err := store.Account(ctx, "acc_1"); err != nil || got != acc {
		t.Fatalf("EnsureAccount changed an account: %+v, %v", got, err)
	}

	// Accounts lists both, oldest first, with their client counts.
	list, err := store.Accounts(ctx)
	if err != nil || len(list) != 2 || list[0].Account != acc || list[0].Clients != 1 || list[1].Account != ext || list[1].Clients != 0 {
		t.Fatalf("Accounts = %+v, %v", list, err)
	}

	// ReplaceClientSecrets changes the account's client and nothing else.
	ids, err := store.ReplaceClientSecrets(ctx, "acc_1", "$argon2id$new")
	if err != nil || len(ids) != 1 || ids[0] != "cli_1" {
		t.Fatalf("ReplaceClientSecrets = %v, %v", ids, err)
	}
	if got, err := store.APIClient(ctx, "cli_1"); err != nil || got.SecretHash != "$argon2id$new" || got.AccountID != "acc_1" {
		t.Fatalf("client after rotation = %+v, %v", got, err)
	}
	for _, id := range []string{"tenant-7", "acc_x"} {
		if _, err := store.ReplaceClientSecrets(ctx, id, "h"); core.ErrorCode(err) != core.CodeNotFound {
			t.Fatalf("ReplaceClientSecrets(%s): %v, want not found", id, err)
		}
	}

	// RehashClientSecret replaces only the hash it was given: once the
	// secret is rotated, a rehash of the old one changes nothing, and of
	// two rehashes of one hash only the first does.
	for _, tc := range []struct {
		name             string
		client, old, new string
		want             bool
		stored           string
	}{
		{"the hash of a rotated secret", "cli_1", "$argon2id$x", "$hmac-sha256$v=1$old", false, "$argon2id$new"},
		{"the stored hash", "cli_1", "$argon2id$new", "$hmac-sha256$v=1$new", true, "$hmac-sha256$v=1$new"},
		{"the same hash again", "cli_1", "$argon2id$new", "$hmac-sha256$v=1$again", false, "$hmac-sha256$v=1$new"},
		{"an unknown client", "cli_x", "$argon2id$new", "$hmac-sha256$v=1$x", false, ""},
	} {
		t.Run("RehashClientSecret/"+tc.name, func(t *testing.T) {
			ok, err := store.RehashClientSecret(ctx, tc.client, tc.old, tc.new)
			if err != nil || ok != tc.want {
				t.Fatalf("RehashClientSecret = %v, %v; want %v", ok, err, tc.want)
			}
			if tc.stored == "" {
				return
			}
			if got, err := store.APIClient(ctx, tc.client); err != nil || got.SecretHash != tc.stored {
				t.Fatalf("stored hash %q, %v; want %q", got.SecretHash, err, tc.stored)
			}
		})
	}

	// A failed CreateAccount is all-or-nothing: the account whose client
	// clashed must not exist.
	if _, err := store.Account(ctx, "acc_2"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("acc_2 after failed create: err = %v, want not found", err)
	}
}

func accountService(t *testing.T, store Store) {
	ctx := context.Background()
	svc := core.NewAccountService(store, nil)
	created, err := svc.Create(ctx, "Fleet")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := store.APIClient(ctx, created.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if cl.SecretHash == created.ClientSecret || len(cl.SecretHash) < 60 {
		t.Fatalf("secret stored as %q: want an argon2id hash", cl.SecretHash)
	}
	if _, err := svc.Authenticate(ctx, created.ClientID, created.ClientSecret, "test"); err != nil {
		t.Fatalf("Authenticate with the right secret: %v", err)
	}
	if _, err := svc.Authenticate(ctx, created.ClientID, created.ClientSecret+"x", "test"); core.ErrorCode(err) != core.CodeUnauthenticated {
		t.Fatalf("Authenticate with a wrong secret: %v", err)
	}
}

// InsertStates on both databases: ownership, duplicates, all or nothing,
// and the latest value per code moving forward only, ties broken by the
// value in byte order as core.Newer does.
func insertStates(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	owner, err := accounts.Create(ctx, "Owner")
	if err != nil {
		t.Fatal(err)
	}
	other, err := accounts.Create(ctx, "Other")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "S1", AccountID: owner.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}, nil); err != nil {
		t.Fatal(err)
	}
	base := now.Add(-time.Hour)
	at := func(d time.Duration) time.Time { return base.Add(d) }
	e := func(code core.StateCode, value string, occurred time.Time) core.StateEntry {
		return core.StateEntry{Code: code, Value: value, OccurredAt: occurred, ReceivedAt: now}
	}
	// A mount without states reads with empty computed fields.
	if m, err := store.MountWithLatest(ctx, "S1"); err != nil || m.UID != "S1" || !reflect.DeepEqual(m.Latest, core.ComputeLatest(nil)) {
		t.Fatalf("MountWithLatest before any state = %+v, %v", m, err)
	}
	if _, err := store.MountWithLatest(ctx, "nope"); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("MountWithLatest(unknown) = %v, want %s", err, core.CodeMountNotFound)
	}
	latest := func() map[core.StateCode]string {
		t.Helper()
		entries, err := store.LatestStates(ctx, "S1", owner.AccountID)
		if err != nil {
			t.Fatal(err)
		}
		// The one-statement read agrees with the latest rows.
		m, err := store.MountWithLatest(ctx, "S1")
		if err != nil || m.UID != "S1" || m.OwnerID != owner.AccountID {
			t.Fatalf("MountWithLatest = %+v, %v", m, err)
		}
		if want := core.ComputeLatest(entries); !reflect.DeepEqual(m.Latest, want) {
			t.Fatalf("MountWithLatest computed %+v, want %+v", m.Latest, want)
		}
		out := map[core.StateCode]string{}
		for _, x := range entries {
			out[x.Code] = x.Value
		}
		return out
	}

	for _, tc := range []struct {
		name       string
		uid        string
		account    string
		entries    []core.StateEntry
		wantErr    core.Code
		wantStored int
		wantLatest map[core.StateCode]string
	}{
		{"first batch", "S1", owner.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "80", at(0)), e(core.StateCPUTemperature, "10.0", at(0)), e(core.StateBatteryLevel, "79", at(time.Second))},
			"", 3, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		{"duplicates only", "S1", owner.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "80", at(0))},
			"", 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		{"late entry kept, latest unchanged", "S1", owner.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "50", at(-time.Minute))},
			"", 1, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		// "10.0" > "-5.0" in byte order ('1' > '-'), not under a
		// language collation that ignores the sign.
		{"tie on the instant: byte order decides", "S1", owner.AccountID,
			[]core.StateEntry{e(core.StateCPUTemperature, "-5.0", at(0))},
			"", 1, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		{"another account's mount", "S1", other.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "1", at(time.Hour))},
			core.CodeMountNotFound, 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		{"unknown mount", "nope", owner.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "1", at(time.Hour))},
			core.CodeMountNotFound, 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
		{"newer entries move the latest", "S1", owner.AccountID,
			[]core.StateEntry{e(core.StateBatteryLevel, "60", at(time.Minute)), e(core.StateMountLocked, "1", at(time.Minute))},
			"", 2, map[core.StateCode]string{core.StateBatteryLevel: "60", core.StateCPUTemperature: "10.0", core.StateMountLocked: "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mount, stored, err := store.InsertStates(ctx, tc.uid, tc.account, tc.entries, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("InsertStates: %v", err)
			case tc.wantErr != "" && core.ErrorCode(err) != tc.wantErr:
				t.Fatalf("InsertStates: %v, want %s", err, tc.wantErr)
			case tc.wantErr == "" && (mount.UID != tc.uid || mount.OwnerID != tc.account || mount.State != core.StateIdle):
				t.Fatalf("InsertStates returned mount %+v, want %s owned by %s", mount, tc.uid, tc.account)
			}
			if len(stored) != tc.wantStored {
				t.Fatalf("stored %d entries %v, want %d", len(stored), stored, tc.wantStored)
			}
			if got := latest(); len(got) != len(tc.wantLatest) || func() bool {
				for k, v := range tc.wantLatest {
					if got[k] != v {
						return true
					}
				}
				return false
			}() {
				t.Fatalf("latest %v, want %v", got, tc.wantLatest)
			}
		})
	}
	history, total, err := store.ListStates(ctx, "S1", owner.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil || total != 7 || len(history) != 7 {
		t.Fatalf("history: %d of %d, %v; want 7 entries", len(history), total, err)
	}
}

// associationScope: tag links, states, latest values, commands and the
// name belong to the association's account; another account's claim sees
// none of them, and the former owner's rows stay stored for it alone.
func associationScope(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	a, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	name := "A's front"
	claim := func(account string, fields core.MountFields) {
		t.Helper()
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "MX", AccountID: account, Now: now, Deadline: now.Add(time.Hour), Fields: fields,
			Key: core.MountKey{ID: "k-" + account, PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}, nil); err != nil {
			t.Fatalf("claim by %s: %v", account, err)
		}
	}
	claim(a.AccountID, core.MountFields{Name: &name})
	if _, ok, err := store.ConfirmAssociation(ctx, "MX", a.AccountID, now, nil); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	if _, _, err := store.SyncTags(ctx, a.AccountID, "MX", []string{"11223344", "AABBCCDDEEFF00"}, now, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.InsertStates(ctx, "MX", a.AccountID, []core.StateEntry{{Code: core.StateBatteryLevel, Value: "80", OccurredAt: now, ReceivedAt: now}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := store.InsertCommand(ctx, core.Command{ID: "c-a", MountUID: "MX", AccountID: a.AccountID, Code: core.CommandCode("LOCK_MOUNT"), GeneratedAt: now, IssuedBy: a.ClientID}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.AbandonMount(ctx, "MX", a.AccountID, now, nil); err != nil {
		t.Fatal(err)
	}
	claim(b.AccountID, core.MountFields{})

	m, err := store.MountWithLatest(ctx, "MX")
	if err != nil || m.OwnerID != b.AccountID || m.Name != "" || !reflect.DeepEqual(m.Latest, core.ComputeLatest(nil)) {
		t.Fatalf("B's mount = %+v, %v; want no name and no latest values", m, err)
	}
	for _, tc := range []struct {
		account string
		tags    []string
		states  int
		cmds    int
	}{
		{b.AccountID, []string{}, 0, 0},
		{a.AccountID, []string{}, 1, 1}, // A's links left with the mount; its history stays A's
	} {
		t.Run(tc.account, func(t *testing.T) {
			tags, err := store.MountTagUIDs(ctx, tc.account, "MX")
			if err != nil || !reflect.DeepEqual(tags, tc.tags) {
				t.Fatalf("MountTagUIDs = %v, %v; want %v", tags, err, tc.tags)
			}
			latest, err := store.LatestStates(ctx, "MX", tc.account)
			if err != nil || len(latest) != tc.states {
				t.Fatalf("LatestStates = %v, %v; want %d", latest, err, tc.states)
			}
			_, total, err := store.ListStates(ctx, "MX", tc.account, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
			if err != nil || total != tc.states {
				t.Fatalf("ListStates total = %d, %v; want %d", total, err, tc.states)
			}
			_, total, err = store.ListCommands(ctx, "MX", tc.account, core.Page{CurrentPage: 1, PageSize: 10})
			if err != nil || total != tc.cmds {
				t.Fatalf("ListCommands total = %d, %v; want %d", total, err, tc.cmds)
			}
		})
	}
}

// commandOrder: commands of one millisecond list newest
// first in the order they were stored, on every page.
func commandOrder(t *testing.T, store Store) {
	ctx := context.Background()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "CO", AccountID: acc.AccountID, Now: now, Deadline: now.Add(time.Hour),
		Key: core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}, nil); err != nil {
		t.Fatal(err)
	}
	const n = 40
	for i := 0; i < n; i++ {
		// ids in reverse byte order, so neither the id nor chance gives the right order
		if err := store.InsertCommand(ctx, core.Command{ID: fmt.Sprintf("z%03d", n-i), MountUID: "CO", AccountID: acc.AccountID,
			Code: core.CommandCode("LOCK_MOUNT"), GeneratedAt: now, Data: map[string]any{"i": i}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for page := 1; page <= 4; page++ {
		cmds, _, err := store.ListCommands(ctx, "CO", acc.AccountID, core.Page{CurrentPage: page, PageSize: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			got = append(got, c.ID)
		}
	}
	for i, id := range got {
		if want := fmt.Sprintf("z%03d", i+1); id != want {
			t.Fatalf("position %d: %s, want %s (all: %v)", i, id, want, got)
		}
	}
}

// lifecycle: every transition is one conditional change that decides by
// itself, so that concurrent callers and replicas agree.
func lifecycle(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	a, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	window := 10 * time.Minute
	key := func(id string) core.MountKey {
		return core.MountKey{ID: id, PublicKey: make([]byte, 32), SealedPrivateKey: "sealed-" + id}
	}
	claim := func(account string, at time.Time, f core.MountFields) (core.Mount, error) {
		return store.ClaimMount(ctx, core.Claim{UID: "L1", AccountID: account, Fields: f, Key: key(account + at.String()), Now: at, Deadline: at.Add(window)}, nil)
	}
	name := "Front"

	m, err := claim(a.AccountID, t0, core.MountFields{Name: &name})
	if err != nil || m.State != core.StateIdle || m.OwnerID != a.AccountID || !m.IdleDeadline.Equal(t0.Add(window)) || m.Name != "Front" {
		t.Fatalf("claim of an unknown uid: %+v %v", m, err)
	}
	if _, err := claim(b.AccountID, t0, core.MountFields{}); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("another account's claim of an IDLE mount: %v", err)
	}
	// Re-claim by the owner restarts the window and keeps the name.
	m, err = claim(a.AccountID, t0.Add(time.Minute), core.MountFields{})
	if err != nil || m.State != core.StateIdle || !m.IdleDeadline.Equal(t0.Add(time.Minute+window)) || m.Name != "Front" {
		t.Fatalf("owner's re-claim: %+v %v", m, err)
	}
	if _, ok, err := store.ConfirmAssociation(ctx, "L1", b.AccountID, t0.Add(2*time.Minute), nil); ok || err != nil {
		t.Fatalf("another account confirms: %v %v", ok, err)
	}
	if _, ok, err := store.ExpireAssociation(ctx, "L1", t0.Add(window), nil); ok || err != nil {
		t.Fatalf("expiry inside the window: %v %v", ok, err)
	}
	m, ok, err := store.ConfirmAssociation(ctx, "L1", a.AccountID, t0.Add(2*time.Minute), nil)
	if !ok || err != nil || m.State != core.StateAssociated || !m.AssociatedAt.Equal(t0.Add(2*time.Minute)) || !m.IdleDeadline.IsZero() {
		t.Fatalf("confirm inside the window: %+v %v %v", m, ok, err)
	}
	if _, ok, _ := store.ConfirmAssociation(ctx, "L1", a.AccountID, t0.Add(3*time.Minute), nil); ok {
		t.Fatal("a second confirm changed the mount")
	}
	// ASSOCIATED, owner re-claims: stays ASSOCIATED with a new key.
	m, err = claim(a.AccountID, t0.Add(4*time.Minute), core.MountFields{})
	if err != nil || m.State != core.StateAssociated || !m.AssociatedAt.Equal(t0.Add(2*time.Minute)) || m.Key.ID != key(a.AccountID+t0.Add(4*time.Minute).String()).ID {
		t.Fatalf("owner's re-claim of an ASSOCIATED mount: %+v %v", m, err)
	}
	if _, err := store.AbandonMount(ctx, "L1", b.AccountID, t0.Add(5*time.Minute), nil); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("another account abandons: %v", err)
	}
	m, err = store.AbandonMount(ctx, "L1", a.AccountID, t0.Add(5*time.Minute), nil)
	if err != nil || m.State != core.StateInactive || m.OwnerID != "" || m.Key.ID != "" || m.ExpiredOwnerID != "" {
		t.Fatalf("abandon: %+v %v", m, err)
	}
	// INACTIVE: another account claims; the former name goes.
	m, err = claim(b.AccountID, t0.Add(6*time.Minute), core.MountFields{})
	if err != nil || m.State != core.StateIdle || m.OwnerID != b.AccountID || m.Name != "" {
		t.Fatalf("claim of an INACTIVE mount: %+v %v", m, err)
	}
	// The window lapses: expiry keeps who lost it; the lapsed row is not
	// listed, and owner operations treat it as gone.
	lapsed := t0.Add(6*time.Minute + window)
	if mounts, total, err := store.ListMounts(ctx, b.AccountID, core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 10}, lapsed); err != nil || total != 0 || len(mounts) != 0 {
		t.Fatalf("a lapsed IDLE mount is listed: %d %v", total, err)
	}
	if _, err := store.UpdateMount(ctx, "L1", b.AccountID, core.MountUpdate{Name: &name}, lapsed); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("update of a lapsed mount: %v", err)
	}
	if uids, err := store.LapsedIdle(ctx, lapsed, 10); err != nil || len(uids) != 1 || uids[0] != "L1" {
		t.Fatalf("LapsedIdle: %v %v", uids, err)
	}
	if _, ok, _ := store.ConfirmAssociation(ctx, "L1", b.AccountID, lapsed, nil); ok {
		t.Fatal("confirm at the deadline went through")
	}
	m, ok, err = store.ExpireAssociation(ctx, "L1", lapsed, nil)
	if !ok || err != nil || m.State != core.StateInactive || m.ExpiredOwnerID != b.AccountID || m.OwnerID != "" {
		t.Fatalf("expiry: %+v %v %v", m, ok, err)
	}
	if _, ok, _ := store.ExpireAssociation(ctx, "L1", lapsed, nil); ok {
		t.Fatal("a second expiry changed the mount")
	}
	if _, err := store.DeleteMount(ctx, "L1", b.AccountID, nil); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("delete by the account whose window lapsed: %v", err)
	}
	// Claim again, report, then delete: everything of it goes, its
	// history too (a foreign key on SQLite, a trigger on PostgreSQL).
	if _, err := claim(a.AccountID, lapsed, core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	report := []core.StateEntry{{Code: core.StateBatteryLevel, Value: "80", OccurredAt: lapsed, ReceivedAt: lapsed}}
	if _, stored, err := store.InsertStates(ctx, "L1", a.AccountID, report, nil); err != nil || len(stored) != 1 {
		t.Fatalf("report: %v %v", stored, err)
	}
	if _, err := store.DeleteMount(ctx, "L1", a.AccountID, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := store.Mount(ctx, "L1"); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("a deleted mount: %v", err)
	}
	if _, err := claim(a.AccountID, lapsed, core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if history, _, err := store.ListStates(ctx, "L1", a.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); err != nil || len(history) != 0 {
		t.Fatalf("history of a deleted mount: %v %v", history, err)
	}
}

// tags: a sync makes the mount's set exactly the given tags, creating
// tags as needed; unlinked tags stay in the account.
func tags(t *testing.T, store Store) {
	ctx := context.Background()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	for _, uid := range []string{"T1", "T2"} {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: acc.AccountID, Now: now, Deadline: now.Add(time.Hour),
			Key: core.MountKey{ID: uid, PublicKey: make([]byte, 32), SealedPrivateKey: "s"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.SyncTags(ctx, acc.AccountID, "T1", []string{"04A2B3C4"}, now, nil); core.ErrorCode(err) != core.CodeMountNotAssociated {
		t.Fatalf("sync on an IDLE mount: %v", err)
	}
	for _, uid := range []string{"T1", "T2"} {
		if _, ok, err := store.ConfirmAssociation(ctx, uid, acc.AccountID, now, nil); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	for _, tc := range []struct {
		mount          string
		tags           []string
		added, removed int
	}{
		{"T1", []string{"04A2B3C4", "04A2B3C4D5E6F7"}, 2, 0},
		{"T2", []string{"04A2B3C4"}, 1, 0},
		{"T1", []string{"04A2B3C4D5E6F7", "0102030405060708090A"}, 1, 1},
		{"T1", []string{"04A2B3C4D5E6F7", "0102030405060708090A"}, 0, 0},
	} {
		added, removed, err := store.SyncTags(ctx, acc.AccountID, tc.mount, tc.tags, now, nil)
		if err != nil || added != tc.added || removed != tc.removed {
			t.Fatalf("sync %s %v: added %d removed %d %v; want %d %d", tc.mount, tc.tags, added, removed, err, tc.added, tc.removed)
		}
	}
	if uids, err := store.MountTagUIDs(ctx, acc.AccountID, "T1"); err != nil || fmt.Sprint(uids) != "[0102030405060708090A 04A2B3C4D5E6F7]" {
		t.Fatalf("MountTagUIDs: %v %v", uids, err)
	}
	list, total, err := store.ListTags(ctx, acc.AccountID, nil, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || total != 3 || len(list) != 3 || list[0].UID != "0102030405060708090A" || fmt.Sprint(list[1].MountUIDs) != "[T2]" {
		t.Fatalf("ListTags: %+v %d %v", list, total, err)
	}
	only, total, err := store.ListTags(ctx, acc.AccountID, []string{"T2"}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || total != 1 || only[0].UID != "04A2B3C4" {
		t.Fatalf("ListTags of T2: %+v %v", only, err)
	}
	color := "#aabbcc"
	tag, err := store.UpdateTag(ctx, acc.AccountID, "04A2B3C4", core.NfcTagUpdate{Color: &color}, now.Add(time.Minute))
	if err != nil || tag.Color != "#AABBCC" || !tag.UpdatedAt.Equal(now.Add(time.Minute)) || fmt.Sprint(tag.MountUIDs) != "[T2]" {
		t.Fatalf("UpdateTag: %+v %v", tag, err)
	}
	if _, err := store.UpdateTag(ctx, acc.AccountID, "FFFFFFFF", core.NfcTagUpdate{Color: &color}, now); core.ErrorCode(err) != core.CodeNfcTagNotFound {
		t.Fatalf("UpdateTag of an unknown tag: %v", err)
	}
	byMount, err := store.TagsOfMounts(ctx, acc.AccountID, []string{"T1", "T2"})
	if err != nil || len(byMount["T1"]) != 2 || len(byMount["T2"]) != 1 {
		t.Fatalf("TagsOfMounts: %+v %v", byMount, err)
	}
	// Everything of the account: nothing of another.
	other, err := core.NewAccountService(store, nil).Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	if list, total, err := store.ListTags(ctx, other.AccountID, nil, core.Page{CurrentPage: 1, PageSize: 10}); err != nil || total != 0 || len(list) != 0 {
		t.Fatalf("another account's tags: %+v %v", list, err)
	}
	if _, _, err := store.SyncTags(ctx, other.AccountID, "T1", nil, now, nil); core.ErrorCode(err) != core.CodeMountNotFound {
		t.Fatalf("another account syncs: %v", err)
	}
}

// reportsRacingDelete: reports that race their mount's deletion either
// land before it, and go with the mount, or find no mount; none is left
// behind for the mount's next association (PostgreSQL has no foreign key
// from the history to the mount: the report's statement locks the mount).
func reportsRacingDelete(t *testing.T, store Store) {
	ctx := context.Background()
	acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	claim := func() {
		t.Helper()
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "RD1", AccountID: acc.AccountID, Now: now, Deadline: now.Add(time.Hour),
			Key: core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "s"}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	claim()
	var (
		wg       sync.WaitGroup
		reported atomic.Int64
		failed   atomic.Value
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 25 {
				at := now.Add(-time.Duration(w*100+i) * time.Second)
				entries := []core.StateEntry{{Code: core.StateBatteryLevel, Value: "50", OccurredAt: at, ReceivedAt: now}}
				ev := &core.Event{Type: core.EventStatesReported, UID: "RD1", AccountID: acc.AccountID, OccurredAt: now}
				switch _, _, err := store.InsertStates(ctx, "RD1", acc.AccountID, entries, ev); {
				case err == nil:
					reported.Add(1)
				case core.ErrorCode(err) == core.CodeMountNotFound:
					return
				default:
					failed.Store(err)
					return
				}
			}
		})
	}
	for reported.Load() < 8 && failed.Load() == nil {
		runtime.Gosched()
	}
	if _, err := store.DeleteMount(ctx, "RD1", acc.AccountID, nil); err != nil {
		t.Fatalf("delete: %v", err)
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		t.Fatalf("a report: %v", err)
	}
	claim()
	if history, _, err := store.ListStates(ctx, "RD1", acc.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); err != nil || len(history) != 0 {
		t.Fatalf("history left by reports that raced the deletion: %d entries, %v", len(history), err)
	}
}
