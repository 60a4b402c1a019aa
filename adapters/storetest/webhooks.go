package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

func hook(id, account string, created time.Time) core.Webhook {
	return core.Webhook{ID: id, AccountID: account, URL: "https://example.com/" + id, EventTypes: []core.EventType{},
		MountUIDs: []string{}, Enabled: true, SealedSecret: "sealed", CreatedAt: created, UpdatedAt: created}
}

// webhooks: creation up to the limit, reads and writes scoped to the
// account, delete with the deliveries.
func webhooks(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i := range 3 {
		if err := store.CreateWebhook(ctx, hook(fmt.Sprintf("wh_%d", i), "acc_a", now.Add(time.Duration(i)*time.Millisecond)), 3); err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	if err := store.CreateWebhook(ctx, hook("wh_x", "acc_a", now), 3); core.ErrorCode(err) != core.CodeConflict {
		t.Fatalf("a fourth webhook with a limit of 3: %v, want CONFLICT", err)
	}
	if err := store.CreateWebhook(ctx, hook("wh_b", "acc_b", now), 3); err != nil {
		t.Fatalf("another account's webhook: %v", err)
	}
	list, total, err := store.ListWebhooks(ctx, "acc_a", core.Page{CurrentPage: 1, PageSize: 2})
	if err != nil || total != 3 || len(list) != 2 || list[0].ID != "wh_0" || list[1].ID != "wh_1" {
		t.Fatalf("list: %d of %d, %+v, %v", len(list), total, list, err)
	}
	w := list[0]
	w.URL, w.EventTypes, w.MountUIDs, w.Enabled = "https://example.org/x", []core.EventType{core.EventDeleted}, []string{"M1"}, false
	if err := store.UpdateWebhook(ctx, w); err != nil {
		t.Fatal(err)
	}
	got, err := store.Webhook(ctx, "acc_a", "wh_0")
	if err != nil || got.URL != w.URL || !slices.Equal(got.EventTypes, w.EventTypes) || !slices.Equal(got.MountUIDs, w.MountUIDs) ||
		got.Enabled || !got.CreatedAt.Equal(now) {
		t.Fatalf("after update: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"read another's", func() error { _, err := store.Webhook(ctx, "acc_a", "wh_b"); return err }},
		{"update another's", func() error { o := hook("wh_b", "acc_a", now); return store.UpdateWebhook(ctx, o) }},
		{"delete another's", func() error { return store.DeleteWebhook(ctx, "acc_a", "wh_b") }},
		{"read none", func() error { _, err := store.Webhook(ctx, "acc_a", "wh_none"); return err }},
	} {
		if err := tc.call(); core.ErrorCode(err) != core.CodeWebhookNotFound {
			t.Errorf("%s: %v, want WEBHOOK_NOT_FOUND", tc.name, err)
		}
	}
	if err := store.DeleteWebhook(ctx, "acc_a", "wh_1"); err != nil {
		t.Fatal(err)
	}
	if _, total, _ := store.ListWebhooks(ctx, "acc_a", core.Page{CurrentPage: 1, PageSize: 20}); total != 2 {
		t.Fatalf("%d webhooks after a delete, want 2", total)
	}
}

// webhookDeliveries: each event is planned once; due attempts are leased
// to one claimer until the lease lapses; only the lease holder records a
// result; a follow-up attempt is stored with it; attempts list newest first.
func webhookDeliveries(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	if err := store.CreateWebhook(ctx, hook("wh_1", "acc_a", now.Add(-time.Hour)), 20); err != nil {
		t.Fatal(err)
	}
	var planned []core.Cursor
	plan := func(e core.Event, hooks []core.Webhook) ([]core.Delivery, error) {
		planned = append(planned, e.ID)
		var out []core.Delivery
		for _, w := range hooks {
			out = append(out, core.Delivery{ID: fmt.Sprintf("whd_%d", len(planned)), WebhookID: w.ID, AccountID: w.AccountID,
				EventID: e.ID, EventType: e.Type, Attempt: 1, Status: core.DeliveryPending, NextAttemptAt: now, Payload: []byte(`{}`)})
		}
		return out, nil
	}
	for i := range 3 {
		uid := fmt.Sprintf("D%d", i)
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: "acc_a", Now: now, Deadline: now.Add(time.Hour), Key: key},
			&core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: "acc_a", OccurredAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		n, err := store.EnqueueDeliveries(ctx, 2, plan)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
	}
	if len(planned) != 3 {
		t.Fatalf("%d events planned, want 3 (each once)", len(planned))
	}
	if n, err := store.EnqueueDeliveries(ctx, 10, plan); err != nil || n != 0 {
		t.Fatalf("enqueue again: %d, %v", n, err)
	}

	first, err := store.ClaimDeliveries(ctx, now, time.Minute, 2, nil, nil)
	if err != nil || len(first) != 2 || first[0].Lease == "" || string(first[0].Payload) != `{}` {
		t.Fatalf("claim: %+v, %v", first, err)
	}
	rest, err := store.ClaimDeliveries(ctx, now, time.Minute, 10, nil, nil)
	if err != nil || len(rest) != 1 {
		t.Fatalf("a second claimer gets the one left: %d, %v", len(rest), err)
	}
	if again, _ := store.ClaimDeliveries(ctx, now, time.Minute, 10, nil, nil); len(again) != 0 {
		t.Fatalf("leased attempts claimed again: %d", len(again))
	}
	if skipped, _ := store.ClaimDeliveries(ctx, now.Add(2*time.Minute), time.Minute, 10, []string{"wh_1"}, nil); len(skipped) != 0 {
		t.Fatalf("a skipped webhook's attempts claimed: %d", len(skipped))
	}
	// The lease lapses: another claimer takes the attempt over.
	taken, err := store.ClaimDeliveries(ctx, now.Add(2*time.Minute), time.Minute, 1, nil, nil)
	if err != nil || len(taken) != 1 || taken[0].Lease == first[0].Lease && taken[0].ID == first[0].ID {
		t.Fatalf("after the lease lapsed: %+v, %v", taken, err)
	}
	stale := first[0]
	for _, d := range first {
		if d.ID == taken[0].ID {
			stale = d
		}
	}
	result := func(d core.Delivery, status core.DeliveryStatus, code int) core.Delivery {
		d.Status, d.ResponseStatus, d.AttemptedAt, d.Duration = status, code, now.Add(3*time.Minute), 15*time.Millisecond
		return d
	}
	// The first claimer's late result is not recorded, nor the retry it
	// planned: the attempt is the new holder's. The holder's result, in
	// the same batch, is recorded with its retry.
	staleNext := core.Delivery{ID: "whd_stale_next", WebhookID: "wh_1", AccountID: "acc_a", EventID: stale.EventID, EventType: stale.EventType,
		Attempt: 2, Status: core.DeliveryPending, NextAttemptAt: now.Add(time.Hour), Payload: []byte(`{}`)}
	next := core.Delivery{ID: "whd_next", WebhookID: "wh_1", AccountID: "acc_a", EventID: taken[0].EventID, EventType: taken[0].EventType,
		Attempt: 2, Status: core.DeliveryPending, NextAttemptAt: now.Add(time.Hour), Payload: []byte(`{}`)}
	unknown := result(stale, core.DeliveryFailed, 0)
	unknown.AttemptedAt = time.Time{} // a batch whose every attempted_at is NULL
	if err := store.FinishDeliveries(ctx, []core.FinishedDelivery{{Delivery: unknown}}); err != nil {
		t.Fatal(err)
	}
	// The same attempt twice in one batch, under its old and its new lease.
	if err := store.FinishDeliveries(ctx, []core.FinishedDelivery{
		{Delivery: result(stale, core.DeliveryFailed, 503), Next: &staleNext},
		{Delivery: result(taken[0], core.DeliveryFailed, 500), Next: &next},
	}); err != nil {
		t.Fatal(err)
	}
	list, total, err := store.ListDeliveries(ctx, "acc_a", "wh_1", core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || total != 4 || list[0].ID != "whd_next" || list[0].Status != core.DeliveryPending || !list[0].NextAttemptAt.Equal(now.Add(time.Hour)) {
		t.Fatalf("deliveries: %d, %+v, %v", total, list, err)
	}
	for _, d := range list {
		if d.ID == taken[0].ID && (d.Status != core.DeliveryFailed || d.ResponseStatus != 500 || d.Duration != 15*time.Millisecond || !d.NextAttemptAt.IsZero()) {
			t.Fatalf("the failed attempt as recorded: %+v", d)
		}
	}
	if none, _, _ := store.ListDeliveries(ctx, "acc_other", "wh_1", core.Page{CurrentPage: 1, PageSize: 10}); len(none) != 0 {
		t.Fatalf("another account lists %d attempts", len(none))
	}
	if err := store.DeleteWebhook(ctx, "acc_a", "wh_1"); err != nil {
		t.Fatal(err)
	}
	if left, _ := store.ClaimDeliveries(ctx, now.Add(24*time.Hour), time.Minute, 10, nil, nil); len(left) != 0 {
		t.Fatalf("attempts of a deleted webhook claimed: %d", len(left))
	}
}

// webhookClaimSkipsAccounts: the attempts of a skipped account stay
// pending, due, while another account's are claimed; skipping a webhook
// and an account together leaves the account's other webhooks out too.
func webhookClaimSkipsAccounts(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a", "acc_b")
	now := time.Now().UTC().Truncate(time.Millisecond)
	for _, w := range []core.Webhook{hook("wh_a1", "acc_a", now.Add(-time.Hour)), hook("wh_a2", "acc_a", now.Add(-time.Hour)),
		hook("wh_b1", "acc_b", now.Add(-time.Hour)), hook("wh_b2", "acc_b", now.Add(-time.Hour))} {
		if err := store.CreateWebhook(ctx, w, 20); err != nil {
			t.Fatal(err)
		}
	}
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	for _, acc := range []string{"acc_a", "acc_b"} {
		uid := "S" + acc[len(acc)-1:]
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: acc, Now: now, Deadline: now.Add(time.Hour), Key: key},
			&core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: acc, OccurredAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	n := enqueueAll(t, store, now, "whd_s")
	if n != 4 {
		t.Fatalf("%d attempts planned, want 4", n)
	}
	// Account A's attempts are stored first (earlier event): skipped, the
	// claim reaches past them to B's.
	got, err := store.ClaimDeliveries(ctx, now, time.Minute, 10, nil, []string{"acc_a"})
	if err != nil || len(got) != 2 {
		t.Fatalf("claim skipping acc_a: %+v, %v", got, err)
	}
	for _, d := range got {
		if d.AccountID != "acc_b" {
			t.Fatalf("a skipped account's attempt claimed: %+v", d)
		}
	}
	if none, _ := store.ClaimDeliveries(ctx, now, time.Minute, 10, []string{"wh_a1"}, []string{"acc_a"}); len(none) != 0 {
		t.Fatalf("attempts of a skipped account claimed: %+v", none)
	}
	rest, err := store.ClaimDeliveries(ctx, now, time.Minute, 10, []string{"wh_a1"}, []string{"acc_b"})
	if err != nil || len(rest) != 1 || rest[0].WebhookID != "wh_a2" {
		t.Fatalf("claim skipping wh_a1 and acc_b: %+v, %v", rest, err)
	}
	if last, err := store.ClaimDeliveries(ctx, now, time.Minute, 10, nil, nil); err != nil || len(last) != 1 || last[0].WebhookID != "wh_a1" {
		t.Fatalf("the skipped attempt stays pending: %+v, %v", last, err)
	}
}

// enqueueAll plans, batch by batch until none is left, one PENDING first
// attempt due at now for each webhook that wants each event, with ids
// idPrefix1, idPrefix2, ...; it returns how many it planned.
func enqueueAll(t *testing.T, store Store, now time.Time, idPrefix string) int {
	t.Helper()
	n := 0
	plan := func(e core.Event, hooks []core.Webhook) ([]core.Delivery, error) {
		var out []core.Delivery
		for _, w := range hooks {
			n++
			out = append(out, core.Delivery{ID: fmt.Sprintf("%s%d", idPrefix, n), WebhookID: w.ID, AccountID: w.AccountID,
				EventID: e.ID, EventType: e.Type, Attempt: 1, Status: core.DeliveryPending, NextAttemptAt: now, Payload: []byte(`{}`)})
		}
		return out, nil
	}
	for {
		k, err := store.EnqueueDeliveries(context.Background(), 10, plan)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			return n
		}
	}
}

// webhookBodiesOnce: an event's body is stored once, whatever the number
// of webhooks that want it and of attempts made; every attempt carries it
// byte for byte; it goes with the last attempt that refers to it (pruned,
// or deleted with its webhook), and not before.
func webhookBodiesOnce(t *testing.T, store Store) {
	ctx := context.Background()
	makeAccounts(t, store, "acc_a")
	now := time.Now().UTC().Truncate(time.Millisecond)
	const hooks = 5
	for i := range hooks {
		if err := store.CreateWebhook(ctx, hook(fmt.Sprintf("wh_%d", i), "acc_a", now.Add(-time.Hour)), 20); err != nil {
			t.Fatal(err)
		}
	}
	key := core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}
	bodies := map[core.Cursor][]byte{}
	n := 0
	plan := func(e core.Event, hooks []core.Webhook) ([]core.Delivery, error) {
		// A body the size of a big report, different per event, with
		// bytes JSON would re-encode (the store must not).
		body := fmt.Appendf(nil, `{"uid":%q,"pad":"%s","x":"\u00e9<>&"}`, e.UID, strings.Repeat("x", 10_000))
		bodies[e.ID] = body
		var out []core.Delivery
		for _, w := range hooks {
			n++
			out = append(out, core.Delivery{ID: fmt.Sprintf("whd_%d", n), WebhookID: w.ID, AccountID: w.AccountID, EventID: e.ID,
				EventType: e.Type, Attempt: 1, Status: core.DeliveryPending, NextAttemptAt: now, Payload: body})
		}
		return out, nil
	}
	event := func(uid string) {
		t.Helper()
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: "acc_a", Now: now, Deadline: now.Add(time.Hour), Key: key},
			&core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: "acc_a", OccurredAt: now}); err != nil {
			t.Fatal(err)
		}
		// Until the event was planned: on a PostgreSQL cluster shared with
		// other databases it is read once every older transaction ended.
		planned := func() bool {
			for id := range bodies {
				if strings.Contains(string(bodies[id]), `"uid":"`+uid+`"`) {
					return true
				}
			}
			return false
		}
		for deadline := time.Now().Add(10 * time.Second); ; {
			k, err := store.EnqueueDeliveries(ctx, 10, plan)
			if err != nil {
				t.Fatal(err)
			}
			if k == 0 && planned() {
				return
			}
			if k == 0 && time.Now().After(deadline) {
				t.Fatalf("the event of %s was never planned", uid)
			}
			if k == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	stats := func(what string, wantCount int) {
		t.Helper()
		count, size, err := store.WebhookBodyStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var want int64
		for _, b := range bodies {
			want += int64(len(b))
		}
		if wantCount == 0 {
			want = 0
		}
		if count != wantCount || wantCount == len(bodies) && size != want || size > int64(wantCount)*10_100 {
			t.Fatalf("%s: %d bodies of %d bytes stored, want %d (%d bytes)", what, count, size, wantCount, want)
		}
	}
	event("B1")
	stats("one event, five webhooks", 1)

	// Three rounds of failed attempts: 20 attempts, one body; each
	// attempt carries it byte for byte.
	at := now
	for round := range 4 {
		claimed, err := store.ClaimDeliveries(ctx, at, time.Minute, 20, nil, nil)
		if err != nil || len(claimed) != hooks {
			t.Fatalf("round %d: %d attempts claimed, %v", round, len(claimed), err)
		}
		var done []core.FinishedDelivery
		for _, d := range claimed {
			if !bytes.Equal(d.Payload, bodies[d.EventID]) {
				t.Fatalf("round %d: attempt %s carries %d bytes, not the planned body", round, d.ID, len(d.Payload))
			}
			d.Status, d.ResponseStatus, d.AttemptedAt = core.DeliveryFailed, 503, at
			var next *core.Delivery
			if round < 3 {
				n++
				nd := core.Delivery{ID: fmt.Sprintf("whd_%d", n), WebhookID: d.WebhookID, AccountID: d.AccountID, EventID: d.EventID,
					EventType: d.EventType, Attempt: d.Attempt + 1, Status: core.DeliveryPending, NextAttemptAt: at.Add(time.Second),
					Payload: d.Payload}
				next = &nd
			}
			done = append(done, core.FinishedDelivery{Delivery: d, Next: next})
		}
		if err := store.FinishDeliveries(ctx, done); err != nil {
			t.Fatal(err)
		}
		at = at.Add(time.Second)
	}
	if _, total, err := store.ListDeliveries(ctx, "acc_a", "wh_0", core.Page{CurrentPage: 1, PageSize: 20}); err != nil || total != 4 {
		t.Fatalf("wh_0 has %d attempts, %v", total, err)
	}
	stats("twenty attempts of one event", 1)

	// A second event; a webhook deleted leaves the bodies the others
	// still refer to.
	event("B2")
	stats("two events", 2)
	if err := store.DeleteWebhook(ctx, "acc_a", "wh_0"); err != nil {
		t.Fatal(err)
	}
	stats("a webhook deleted", 2)
	// Pruning the finished attempts of B1 lets its body go; B2's pending
	// attempts keep theirs.
	for {
		k, err := store.PruneDeliveries(ctx, at.Add(time.Hour), 3)
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			break
		}
	}
	delete(bodies, core.Cursor{})
	for id := range bodies {
		if string(bodies[id][:10]) == `{"uid":"B1` {
			delete(bodies, id)
		}
	}
	stats("B1's attempts pruned", 1)
	claimed, err := store.ClaimDeliveries(ctx, at, time.Minute, 20, nil, nil)
	if err != nil || len(claimed) != hooks-1 {
		t.Fatalf("B2: %d attempts claimed, %v", len(claimed), err)
	}
	for _, d := range claimed {
		if !bytes.Equal(d.Payload, bodies[d.EventID]) {
			t.Fatalf("B2's attempt %s carries %d bytes, not the planned body", d.ID, len(d.Payload))
		}
	}
	// Deleting every webhook leaves no body behind.
	for i := 1; i < hooks; i++ {
		if err := store.DeleteWebhook(ctx, "acc_a", fmt.Sprintf("wh_%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	stats("every webhook deleted", 0)
}
