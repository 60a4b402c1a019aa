package storetest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// readAudit reads all of one account's audit log ("" the installation's).
func readAudit(t *testing.T, store Store, q core.AuditQuery) []core.AuditEntry {
	t.Helper()
	q.Limit = core.MaxEventPage
	entries, err := store.ReadAudit(context.Background(), q)
	if err != nil {
		t.Fatalf("ReadAudit: %v", err)
	}
	return entries
}

// settledAudit reads the entries of q once want of them are there, or
// what is there after untilSettled's wait.
func settledAudit(t *testing.T, store Store, q core.AuditQuery, want int) []core.AuditEntry {
	t.Helper()
	var entries []core.AuditEntry
	untilSettled(func() bool { entries = readAudit(t, store, q); return len(entries) >= want })
	return entries
}

// untilSettled calls done until it reports true, for up to 5 s: on
// PostgreSQL an audit entry or an event is read only once every
// transaction older than its own has ended, and other tests' transactions
// share the cluster.
func untilSettled(done func() bool) {
	for deadline := time.Now().Add(5 * time.Second); !done() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
}

// auditLog: every store method that makes an audited change records the
// entry its context carries, in the change's transaction and only when
// the change happens; reads keep accounts apart, filter, page and prune.
func auditLog(t *testing.T, store Store) {
	ctx := context.Background()
	at := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	n := 0
	entry := func(account string, action core.AuditAction, target string) core.AuditEntry {
		n++
		return core.AuditEntry{At: at.Add(time.Duration(n) * time.Second), AccountID: account,
			Actor:  core.Actor{Type: core.ActorUser, ID: "usr_1", Name: "ana"},
			Action: action, Target: target, SourceAddress: "192.0.2.7", Details: map[string]any{"n": float64(n), "list": []any{"x"}}}
	}
	acc := core.Account{ID: "acc_a", Name: "A", CreatedAt: at}
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	name, color := "Front", "#00FF00"
	fw := core.FirmwareVersion{ModelNumber: "M", SoftwareRevision: "1.0.0", AvailableSince: at, SHA256: "s", Size: 1, BlobKey: "b"}
	changes := []struct {
		name    string
		entry   core.AuditEntry
		change  func(ctx context.Context) error
		changed bool
	}{
		{"CreateAccount", entry("", core.AuditAccountCreate, "account:acc_a"), func(ctx context.Context) error {
			return store.CreateAccount(ctx, acc, core.APIClient{ClientID: "cli_a", AccountID: "acc_a", SecretHash: "h", CreatedAt: at})
		}, true},
		{"CreateAccount, taken", entry("", core.AuditAccountCreate, "account:acc_a"), func(ctx context.Context) error {
			return store.CreateAccount(ctx, acc, core.APIClient{ClientID: "cli_a2", AccountID: "acc_a", SecretHash: "h", CreatedAt: at})
		}, false},
		{"ReplaceClientSecrets", entry("acc_a", core.AuditAccountRotateSecret, "account:acc_a"), func(ctx context.Context) error {
			_, err := store.ReplaceClientSecrets(ctx, "acc_a", "h2")
			return err
		}, true},
		{"ReplaceClientSecrets, no clients", entry("acc_a", core.AuditAccountRotateSecret, "account:acc_x"), func(ctx context.Context) error {
			_, err := store.ReplaceClientSecrets(ctx, "acc_x", "h2")
			return err
		}, false},
		{"CreateUser", entry("acc_a", core.AuditUserCreate, "user:usr_1"), func(ctx context.Context) error {
			return store.CreateUser(ctx, core.User{ID: "usr_1", Username: "ana", AccountID: "acc_a", Role: core.RoleOwner,
				MountUIDs: []string{}, PasswordHash: "h", CreatedAt: at})
		}, true},
		{"CreateUser, taken", entry("acc_a", core.AuditUserCreate, "user:usr_2"), func(ctx context.Context) error {
			return store.CreateUser(ctx, core.User{ID: "usr_2", Username: "ana", AccountID: "acc_a", Role: core.RoleOwner,
				MountUIDs: []string{}, PasswordHash: "h", CreatedAt: at})
		}, false},
		{"SetUserPassword", entry("acc_a", core.AuditUserSetPassword, "user:usr_1"), func(ctx context.Context) error {
			return store.SetUserPassword(ctx, "ana", "h3")
		}, true},
		{"SetUserPassword, no user", entry("acc_a", core.AuditUserSetPassword, "user:usr_9"), func(ctx context.Context) error {
			return store.SetUserPassword(ctx, "bob", "h3")
		}, false},
		{"ClaimMount", entry("acc_a", core.AuditMountRequest, "mount:A1"), func(ctx context.Context) error {
			// With its event, as the service calls it (PostgreSQL writes
			// both in one statement).
			_, err := store.ClaimMount(ctx, core.Claim{UID: "A1", AccountID: "acc_a", Key: key, Now: at, Deadline: at.Add(time.Hour)},
				&core.Event{Type: core.EventAssociationRequested, UID: "A1", AccountID: "acc_a", OccurredAt: at})
			return err
		}, true},
		{"ConfirmAssociation", entry("acc_a", core.AuditMountConfirm, "mount:A1"), func(ctx context.Context) error {
			_, ok, err := store.ConfirmAssociation(ctx, "A1", "acc_a", at,
				&core.Event{Type: core.EventAssociationConfirmed, UID: "A1", AccountID: "acc_a", OccurredAt: at})
			if err == nil && !ok {
				err = fmt.Errorf("not confirmed")
			}
			return err
		}, true},
		{"ConfirmAssociation, not pending", entry("acc_a", core.AuditMountConfirm, "mount:A1"), func(ctx context.Context) error {
			_, ok, err := store.ConfirmAssociation(ctx, "A1", "acc_a", at, nil)
			if err == nil && !ok {
				err = fmt.Errorf("not confirmed")
			}
			return err
		}, false},
		{"UpdateMount", entry("acc_a", core.AuditMountUpdate, "mount:A1"), func(ctx context.Context) error {
			_, err := store.UpdateMount(ctx, "A1", "acc_a", core.MountUpdate{Name: &name}, at)
			return err
		}, true},
		{"UpdateMount, another account's", entry("acc_b", core.AuditMountUpdate, "mount:A1"), func(ctx context.Context) error {
			_, err := store.UpdateMount(ctx, "A1", "acc_b", core.MountUpdate{Name: &name}, at)
			return err
		}, false},
		{"RekeyMount", entry("", core.AuditKeysRotate, "mount:A1"), func(ctx context.Context) error {
			_, err := store.RekeyMount(ctx, "A1", "acc_a", key, at)
			return err
		}, true},
		{"SyncTags", entry("acc_a", core.AuditNfcTagsSync, "mount:A1"), func(ctx context.Context) error {
			_, _, err := store.SyncTags(ctx, "acc_a", "A1", []string{"04A1B2C3"}, at, nil)
			return err
		}, true},
		{"UpdateTag", entry("acc_a", core.AuditNfcTagUpdate, "nfc-tag:04A1B2C3"), func(ctx context.Context) error {
			_, err := store.UpdateTag(ctx, "acc_a", "04A1B2C3", core.NfcTagUpdate{Color: &color}, at)
			return err
		}, true},
		{"UpdateTag, unknown", entry("acc_a", core.AuditNfcTagUpdate, "nfc-tag:04FFFFFF"), func(ctx context.Context) error {
			_, err := store.UpdateTag(ctx, "acc_a", "04FFFFFF", core.NfcTagUpdate{Color: &color}, at)
			return err
		}, false},
		{"CreateWebhook", entry("acc_a", core.AuditWebhookCreate, "webhook:wh_1"), func(ctx context.Context) error {
			return store.CreateWebhook(ctx, hook("wh_1", "acc_a", at), 1)
		}, true},
		{"CreateWebhook, over the limit", entry("acc_a", core.AuditWebhookCreate, "webhook:wh_2"), func(ctx context.Context) error {
			return store.CreateWebhook(ctx, hook("wh_2", "acc_a", at), 1)
		}, false},
		{"UpdateWebhook", entry("acc_a", core.AuditWebhookUpdate, "webhook:wh_1"), func(ctx context.Context) error {
			return store.UpdateWebhook(ctx, hook("wh_1", "acc_a", at))
		}, true},
		{"UpdateWebhook, unknown", entry("acc_a", core.AuditWebhookRotateSecret, "webhook:wh_9"), func(ctx context.Context) error {
			return store.UpdateWebhook(ctx, hook("wh_9", "acc_a", at))
		}, false},
		{"DeleteWebhook", entry("acc_a", core.AuditWebhookDelete, "webhook:wh_1"), func(ctx context.Context) error {
			return store.DeleteWebhook(ctx, "acc_a", "wh_1")
		}, true},
		{"DeleteWebhook, gone", entry("acc_a", core.AuditWebhookDelete, "webhook:wh_1"), func(ctx context.Context) error {
			return store.DeleteWebhook(ctx, "acc_a", "wh_1")
		}, false},
		{"InsertFirmware", entry("", core.AuditFirmwarePublish, "firmware:M@1.0.0"), func(ctx context.Context) error {
			return store.InsertFirmware(ctx, fw)
		}, true},
		{"InsertFirmware, taken", entry("", core.AuditFirmwarePublish, "firmware:M@1.0.0"), func(ctx context.Context) error {
			return store.InsertFirmware(ctx, fw)
		}, false},
		{"DeprecateFirmware", entry("", core.AuditFirmwareDeprecate, "firmware:M@1.0.0"), func(ctx context.Context) error {
			_, err := store.DeprecateFirmware(ctx, "M", "1.0.0")
			return err
		}, true},
		{"DeprecateFirmware, unknown", entry("", core.AuditFirmwareDeprecate, "firmware:M@9.0.0"), func(ctx context.Context) error {
			_, err := store.DeprecateFirmware(ctx, "M", "9.0.0")
			return err
		}, false},
		{"AbandonMount", entry("acc_a", core.AuditMountAbandon, "mount:A1"), func(ctx context.Context) error {
			_, err := store.AbandonMount(ctx, "A1", "acc_a", at, nil)
			return err
		}, true},
		{"AbandonMount, not owned", entry("acc_a", core.AuditMountAbandon, "mount:A1"), func(ctx context.Context) error {
			_, err := store.AbandonMount(ctx, "A1", "acc_a", at, nil)
			return err
		}, false},
		{"ClaimMount, after the abandon", entry("acc_a", core.AuditMountRequest, "mount:A1"), func(ctx context.Context) error {
			_, err := store.ClaimMount(ctx, core.Claim{UID: "A1", AccountID: "acc_a", Key: key, Now: at, Deadline: at.Add(time.Hour)}, nil)
			return err
		}, true},
		{"DeleteMount", entry("acc_a", core.AuditMountDelete, "mount:A1"), func(ctx context.Context) error {
			_, err := store.DeleteMount(ctx, "A1", "acc_a", nil)
			return err
		}, true},
		{"DeleteMount, gone", entry("acc_a", core.AuditMountDelete, "mount:A1"), func(ctx context.Context) error {
			_, err := store.DeleteMount(ctx, "A1", "acc_a", nil)
			return err
		}, false},
		{"DeleteUser", entry("acc_a", core.AuditUserDelete, "user:usr_1"), func(ctx context.Context) error {
			return store.DeleteUser(ctx, "ana")
		}, true},
		{"DeleteUser, gone", entry("acc_a", core.AuditUserDelete, "user:usr_1"), func(ctx context.Context) error {
			return store.DeleteUser(ctx, "ana")
		}, false},
	}
	for _, c := range changes {
		before := readAudit(t, store, core.AuditQuery{AccountID: c.entry.AccountID})
		err := c.change(core.WithAudit(ctx, c.entry))
		if c.changed != (err == nil) {
			t.Fatalf("%s: err %v, want a change %v", c.name, err, c.changed)
		}
		count := len(before)
		if c.changed {
			count++
		}
		// On a busy cluster an entry shows a moment after its commit.
		after := settledAudit(t, store, core.AuditQuery{AccountID: c.entry.AccountID}, count)
		if !c.changed {
			if len(after) != len(before) {
				t.Fatalf("%s failed and recorded %+v", c.name, after[len(after)-1])
			}
			continue
		}
		if len(after) != len(before)+1 {
			t.Fatalf("%s: %d entries after, %d before; want one more", c.name, len(after), len(before))
		}
		got, want := after[len(after)-1], c.entry
		if got.Position == (core.Cursor{}) {
			t.Fatalf("%s recorded no position: %+v", c.name, got)
		}
		want.Position = got.Position
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s recorded\n%+v\nwant\n%+v", c.name, got, want)
		}
	}

	// A change without an entry records none.
	if err := store.CreateAccount(ctx, core.Account{ID: "acc_b", Name: "B", CreatedAt: at},
		core.APIClient{ClientID: "cli_b", AccountID: "acc_b", SecretHash: "h", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	installation := readAudit(t, store, core.AuditQuery{})
	if len(installation) != 4 {
		t.Fatalf("installation entries %+v: want account.create, keys.rotate, firmware.publish and .deprecate", installation)
	}
	for _, e := range installation {
		if e.AccountID != "" {
			t.Fatalf("an account's entry among the installation's: %+v", e)
		}
	}

	// Another account reads none of acc_a's.
	if err := store.CreateWebhook(core.WithAudit(ctx, entry("acc_b", core.AuditWebhookCreate, "webhook:wh_b")), hook("wh_b", "acc_b", at), 5); err != nil {
		t.Fatal(err)
	}
	if got := readAudit(t, store, core.AuditQuery{AccountID: "acc_b"}); len(got) != 1 || got[0].Target != "webhook:wh_b" {
		t.Fatalf("acc_b reads %+v", got)
	}

	// Oldest first; filters; pages continue after the last entry read.
	all := readAudit(t, store, core.AuditQuery{AccountID: "acc_a"})
	for i := 1; i < len(all); i++ {
		if !all[i-1].Position.Before(all[i].Position) || all[i].At.Before(all[i-1].At) {
			t.Fatalf("entries out of order: %+v then %+v", all[i-1], all[i])
		}
	}
	for _, tt := range []struct {
		name string
		q    core.AuditQuery
		want int
	}{
		{"by action", core.AuditQuery{AccountID: "acc_a", Action: string(core.AuditMountUpdate)}, 1},
		{"by target", core.AuditQuery{AccountID: "acc_a", Target: "mount:A1"}, 7},
		{"by actor", core.AuditQuery{AccountID: "acc_a", Actor: "usr_1"}, len(all)},
		{"by another actor", core.AuditQuery{AccountID: "acc_a", Actor: "usr_2"}, 0},
		{"after the third", core.AuditQuery{AccountID: "acc_a", After: &all[2].Position}, len(all) - 3},
		{"after the last", core.AuditQuery{AccountID: "acc_a", After: &all[len(all)-1].Position}, 0},
	} {
		if got := readAudit(t, store, tt.q); len(got) != tt.want {
			t.Fatalf("%s: %d entries, want %d: %+v", tt.name, len(got), tt.want, got)
		}
	}
	page, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_a", Limit: 2})
	if err != nil || len(page) != 2 || page[1].Position != all[1].Position {
		t.Fatalf("a page of 2: %+v, %v", page, err)
	}

	// Tail: the last Limit entries selected, oldest first.
	tail, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_a", Limit: 2, Tail: true})
	if err != nil || len(tail) != 2 || tail[0].Position != all[len(all)-2].Position || tail[1].Position != all[len(all)-1].Position {
		t.Fatalf("the last 2: %+v, %v", tail, err)
	}
	tail, err = store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_a", Limit: 1, Tail: true, Target: "webhook:wh_1"})
	if err != nil || len(tail) != 1 || tail[0].Action != core.AuditWebhookDelete {
		t.Fatalf("the last of webhook:wh_1: %+v, %v", tail, err)
	}
	if tail, err = store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_a", Limit: 1000, Tail: true}); err != nil || len(tail) != len(all) ||
		tail[0].Position != all[0].Position {
		t.Fatalf("a tail longer than the log: %d entries, %v", len(tail), err)
	}
	if tail, err = store.ReadAudit(ctx, core.AuditQuery{Limit: 1, Tail: true}); err != nil || len(tail) != 1 || tail[0].Action != core.AuditFirmwareDeprecate {
		t.Fatalf("the installation's last: %+v, %v", tail, err)
	}

	// Retention removes what was recorded before the cut, in batches.
	cut := all[3].At
	removed := 0
	for {
		k, err := store.PruneAudit(ctx, cut, 2)
		if err != nil {
			t.Fatal(err)
		}
		removed += k
		if k < 2 {
			break
		}
	}
	left := readAudit(t, store, core.AuditQuery{AccountID: "acc_a"})
	for _, e := range left {
		if e.At.Before(cut) {
			t.Fatalf("an entry before the cut survived: %+v", e)
		}
	}
	if len(left) != len(all)-3 {
		t.Fatalf("%d left of %d after pruning before the fourth", len(left), len(all))
	}
	if removed < 3 {
		t.Fatalf("pruned %d", removed)
	}
}
