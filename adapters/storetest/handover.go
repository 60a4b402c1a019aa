package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// handoverKeys: every claim keeps its key among the uid's hand-over keys,
// a confirmation keeps its key first and drops those before it, and the
// keys outlive abandon, expiry, the record's deletion and the accounts
// (docs/api.md, "Commands": the hand-over).
func handoverKeys(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_x", "acc_y", "acc_z")
	now := time.Now().UTC().Truncate(time.Millisecond)
	n := 0
	newKey := func() core.MountKey {
		n++
		return core.MountKey{ID: fmt.Sprintf("k%d", n), PublicKey: []byte(fmt.Sprintf("%032d", n)), SealedPrivateKey: fmt.Sprintf("sealed-%d", n)}
	}
	event := func(typ core.EventType, account string) *core.Event {
		return &core.Event{Type: typ, UID: "H1", AccountID: account, OccurredAt: now}
	}
	claim := func(account string) (core.MountKey, error) {
		t.Helper()
		k := newKey()
		_, err := store.ClaimMount(ctx, core.Claim{UID: "H1", AccountID: account, Key: k, Now: now, Deadline: now.Add(time.Minute)},
			event(core.EventAssociationRequested, account))
		return k, err
	}
	mustClaim := func(account string) core.MountKey {
		t.Helper()
		k, err := claim(account)
		if err != nil {
			t.Fatalf("%s's claim: %v", account, err)
		}
		return k
	}
	confirm := func(account string) {
		t.Helper()
		if _, ok, err := store.ConfirmAssociation(ctx, "H1", account, now, event(core.EventAssociationConfirmed, account)); !ok || err != nil {
			t.Fatalf("%s's confirmation: %v, %v", account, ok, err)
		}
	}
	want := func(step string, keys ...core.MountKey) {
		t.Helper()
		got, err := store.HandoverKeys(ctx, "H1")
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		ids := func(ks []core.MountKey) []string {
			var out []string
			for _, k := range ks {
				out = append(out, k.ID)
			}
			return out
		}
		if !slices.Equal(ids(got), ids(keys)) {
			t.Fatalf("%s: hand-over keys %v, want %v", step, ids(got), ids(keys))
		}
		for i := range got {
			if string(got[i].PublicKey) != string(keys[i].PublicKey) || got[i].SealedPrivateKey != keys[i].SealedPrivateKey {
				t.Fatalf("%s: key %d is %+v, want %+v", step, i, got[i], keys[i])
			}
		}
	}

	want("never claimed")
	k1 := mustClaim("acc_y")
	want("first claim", k1)
	k2 := mustClaim("acc_y") // IDLE again: either may reach the mount
	want("claimed again while IDLE", k1, k2)
	confirm("acc_y")
	want("confirmed", k2)
	if _, err := store.AbandonMount(ctx, "H1", "acc_y", now, event(core.EventAbandoned, "acc_y")); err != nil {
		t.Fatal(err)
	}
	want("abandoned", k2)

	// Another account's association that lapses IDLE: its key may have
	// reached the mount.
	k3 := mustClaim("acc_x")
	want("another account's claim", k2, k3)
	if _, err := claim("acc_z"); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("claim of another account's mount: %v", err)
	}
	want("a refused claim keeps nothing", k2, k3)
	now = now.Add(time.Minute)
	if _, ok, err := store.ExpireAssociation(ctx, "H1", now, event(core.EventAssociationExpired, "acc_x")); !ok || err != nil {
		t.Fatalf("expire: %v, %v", ok, err)
	}
	want("lapsed", k2, k3)
	k4 := mustClaim("acc_z")
	want("after a lapsed association", k2, k3, k4)
	confirm("acc_z")
	want("confirmed by a third account", k4)
	k5 := mustClaim("acc_z") // POST /mounts while ASSOCIATED
	want("claimed again while ASSOCIATED", k4, k5)

	// The record's deletion leaves the keys: the mount still holds one.
	if _, err := store.DeleteMount(ctx, "H1", "acc_z", event(core.EventDeleted, "acc_z")); err != nil {
		t.Fatal(err)
	}
	want("deleted", k4, k5)
	k6 := mustClaim("acc_x") // a new record
	want("claimed after the deletion", k4, k5, k6)

	// Bounded: the confirmed key and the newest of the later ones.
	later := []core.MountKey{k5, k6}
	for range core.MaxHandoverKeys + 3 {
		later = append(later, mustClaim("acc_x"))
	}
	want("many claims", append([]core.MountKey{k4}, later[len(later)-(core.MaxHandoverKeys-1):]...)...)
	confirm("acc_x")
	want("confirmed at last", later[len(later)-1])
}
