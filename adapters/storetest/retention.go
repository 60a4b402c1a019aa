package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// drainPrune calls prune in batches of 2 until a batch comes back short.
func drainPrune(t *testing.T, prune func(limit int) (int, error)) {
	t.Helper()
	for range 1000 {
		n, err := prune(2)
		if err != nil {
			t.Fatalf("prune: %v", err)
		}
		if n < 2 {
			return
		}
	}
	t.Fatal("prune never finished")
}

func retention(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_r")
	now := time.Now().UTC().Truncate(time.Millisecond)
	day := 24 * time.Hour
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "R1", AccountID: "acc_r", Now: now, Deadline: now.Add(time.Hour), Key: key}, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := store.ConfirmAssociation(ctx, "R1", "acc_r", now, nil); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	report := func(at ...time.Time) {
		t.Helper()
		entries := make([]core.StateEntry, len(at))
		for i, a := range at {
			entries[i] = core.StateEntry{Code: core.StateBatteryLevel, Value: "50", OccurredAt: a, ReceivedAt: now}
		}
		if _, stored, err := store.InsertStates(ctx, "R1", "acc_r", entries, nil); err != nil || len(stored) != len(at) {
			t.Fatalf("insert %v: stored %d, %v", at, len(stored), err)
		}
	}
	history := func() []time.Time {
		t.Helper()
		entries, _, err := store.ListStates(ctx, "R1", "acc_r", core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		var at []time.Time
		for _, e := range entries {
			at = append(at, e.OccurredAt)
		}
		slices.SortFunc(at, time.Time.Compare)
		return at
	}
	want := func(what string, at ...time.Time) {
		t.Helper()
		if got := history(); !slices.EqualFunc(got, at, time.Time.Equal) {
			t.Fatalf("%s: history %v, want %v", what, got, at)
		}
	}

	// Entries from long ago to days ahead, the latter stored before the
	// store was prepared for them.
	nextDay := now.Truncate(day).Add(3 * day) // a day boundary: the cut below is exact everywhere
	report(now.Add(-200*day), now.Add(-91*day), now.Add(-89*day), now.Add(-time.Hour), nextDay.Add(time.Hour))
	if err := store.PrepareStates(ctx, now.Add(7*day)); err != nil {
		t.Fatal(err)
	}
	report(now.Add(6 * day))

	// Past a 90-day retention.
	drainPrune(t, func(limit int) (int, error) { return store.PruneStates(ctx, now.Add(-90*day), limit) })
	want("after pruning 90 days", now.Add(-89*day), now.Add(-time.Hour), nextDay.Add(time.Hour), now.Add(6*day))

	// Everything before a day boundary (on PostgreSQL whole partitions go).
	drainPrune(t, func(limit int) (int, error) { return store.PruneStates(ctx, nextDay, limit) })
	want("after pruning to a day boundary", nextDay.Add(time.Hour), now.Add(6*day))

	// Old entries still have a place (on PostgreSQL also on a day whose
	// partition was dropped), and go at the next prune.
	report(now.Add(-300*day), now.Add(-time.Minute), nextDay.Add(-time.Hour))
	want("old entries after pruning", now.Add(-300*day), now.Add(-time.Minute), nextDay.Add(-time.Hour), nextDay.Add(time.Hour), now.Add(6*day))
	drainPrune(t, func(limit int) (int, error) { return store.PruneStates(ctx, nextDay, limit) })
	want("after pruning again", nextDay.Add(time.Hour), now.Add(6*day))

	// Webhook attempts: finished ones past retention go, pending ones stay.
	if err := store.CreateWebhook(ctx, hook("wh_r", "acc_r", now), 20); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		uid := []string{"RD0", "RD1", "RD2"}[i]
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: "acc_r", Now: now, Deadline: now.Add(time.Hour), Key: key},
			&core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: "acc_r", OccurredAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if n := enqueueAll(t, store, now, "whd_r"); n != 3 {
		t.Fatalf("%d attempts planned, want 3", n)
	}
	claimed, err := store.ClaimDeliveries(ctx, now, time.Minute, 2, nil, nil)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	var done []core.FinishedDelivery
	for i, d := range claimed {
		d.Status, d.ResponseStatus, d.AttemptedAt = core.DeliverySucceeded, 200, now.Add(-time.Duration(40-30*i)*day) // 40 and 10 days ago
		done = append(done, core.FinishedDelivery{Delivery: d})
	}
	if err := store.FinishDeliveries(ctx, done); err != nil {
		t.Fatal(err)
	}
	drainPrune(t, func(limit int) (int, error) { return store.PruneDeliveries(ctx, now.Add(-30*day), limit) })
	left, total, err := store.ListDeliveries(ctx, "acc_r", "wh_r", core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || total != 2 || !slices.ContainsFunc(left, func(d core.Delivery) bool { return d.Status == core.DeliveryPending }) ||
		!slices.ContainsFunc(left, func(d core.Delivery) bool { return d.ID == claimed[1].ID }) {
		t.Fatalf("deliveries after pruning: %d %+v %v", total, left, err)
	}

	// Sign-ins: requests begun long ago and expired refresh tokens go.
	if err := store.CreateUser(ctx, core.User{ID: "usr_r", Username: "rita", AccountID: "acc_r", Role: core.RoleOwner, MountUIDs: []string{},
		PasswordHash: "h", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []core.AuthRequest{{ID: "ar_old", CreatedAt: now.Add(-2 * time.Hour)}, {ID: "ar_new", CreatedAt: now}} {
		r.ClientID, r.Scopes = "c", []string{"openid"}
		if err := store.CreateAuthRequest(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, tok := range []core.RefreshToken{{Hash: "rt_old", ExpiresAt: now.Add(-time.Minute)}, {Hash: "rt_new", ExpiresAt: now.Add(time.Hour)}} {
		tok.Family, tok.UserID, tok.ClientID, tok.Scopes, tok.AuthTime, tok.CreatedAt = "f", "usr_r", "c", []string{"openid"}, now, now.Add(-time.Hour)
		if err := store.CreateRefreshToken(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	drainPrune(t, func(limit int) (int, error) { return store.PruneSignIns(ctx, now.Add(-time.Hour), now, limit) })
	for id, gone := range map[string]bool{"ar_old": true, "ar_new": false} {
		if _, err := store.AuthRequest(ctx, id); (core.ErrorCode(err) == core.CodeNotFound) != gone {
			t.Errorf("auth request %s after pruning: %v", id, err)
		}
	}
	for hash, gone := range map[string]bool{"rt_old": true, "rt_new": false} {
		if _, err := store.RefreshToken(ctx, hash); (core.ErrorCode(err) == core.CodeNotFound) != gone {
			t.Errorf("refresh token %s after pruning: %v", hash, err)
		}
	}
}
