package bunstore_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/core"
)

// TestAssociationScope: tag links, states, latest values, commands and the
// name belong to the association's account; another account's claim sees
// none of them, and the former owner's rows stay stored for it alone.
func TestAssociationScope(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
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
				Key: core.MountKey{ID: "k-" + account, PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}); err != nil {
				t.Fatalf("claim by %s: %v", account, err)
			}
		}
		claim(a.AccountID, core.MountFields{Name: &name})
		if _, ok, err := store.ConfirmAssociation(ctx, "MX", a.AccountID, now); err != nil || !ok {
			t.Fatalf("confirm: %v %v", ok, err)
		}
		if _, _, err := store.SyncTags(ctx, a.AccountID, "MX", []string{"11223344", "AABBCCDDEEFF00"}, now); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.InsertStates(ctx, "MX", a.AccountID, []core.StateEntry{{Code: core.StateBatteryLevel, Value: "80", OccurredAt: now, ReceivedAt: now}}); err != nil {
			t.Fatal(err)
		}
		if err := store.InsertCommand(ctx, core.Command{ID: "c-a", MountUID: "MX", AccountID: a.AccountID, Code: core.CommandCode("LOCK_MOUNT"), GeneratedAt: now, IssuedBy: a.ClientID}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.AbandonMount(ctx, "MX", a.AccountID, now); err != nil {
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
	})
}

// TestCommandOrderWithinMillisecond: commands of one millisecond list newest
// first in the order they were stored, on every page.
func TestCommandOrderWithinMillisecond(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		ctx := context.Background()
		acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "CO", AccountID: acc.AccountID, Now: now, Deadline: now.Add(time.Hour),
			Key: core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}); err != nil {
			t.Fatal(err)
		}
		const n = 40
		for i := 0; i < n; i++ {
			// ids in reverse byte order, so neither the id nor chance gives the right order
			if err := store.InsertCommand(ctx, core.Command{ID: fmt.Sprintf("z%03d", n-i), MountUID: "CO", AccountID: acc.AccountID,
				Code: core.CommandCode("LOCK_MOUNT"), GeneratedAt: now, Data: map[string]any{"i": i}}); err != nil {
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
	})
}
