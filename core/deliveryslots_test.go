package core

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func slotDelivery(account string, hook int) Delivery {
	return Delivery{ID: fmt.Sprintf("whd_%s_%d", account, hook), AccountID: account, WebhookID: fmt.Sprintf("wh_%s_%d", account, hook)}
}

// fill starts attempts of account's webhooks 0..hooks-1 in turn until the
// rule refuses one, and returns how many started.
func fill(p *deliverySlots, account string, hooks int) int {
	n := 0
	for i := 0; ; i++ {
		if !p.start(slotDelivery(account, i%hooks)) {
			return n
		}
		n++
	}
}

// TestDeliverySlotsHealthyAccountServed: whatever the number of accounts
// whose receivers hang (each holding all it may), an account with nothing
// in flight may start an attempt at once, and a claim asks for its due
// attempts past the stuck accounts; the caps per webhook and per account
// hold, and the stuck accounts' attempts never take more than the shared
// workers plus one each.
func TestDeliverySlotsHealthyAccountServed(t *testing.T) {
	for _, stuck := range []int{1, 4, 5, 20, maxDeliveriesInFlight - DeliveryWorkers - 1} {
		t.Run(fmt.Sprint(stuck), func(t *testing.T) {
			p := newDeliverySlots()
			held := 0
			for i := range stuck {
				n := fill(p, fmt.Sprintf("stuck%d", i), MaxWebhooksPerAccount)
				if n > deliveriesPerAccount || n < 1 {
					t.Fatalf("stuck account %d started %d attempts; want 1..%d", i, n, deliveriesPerAccount)
				}
				held += n
			}
			if held > DeliveryWorkers+stuck || p.shared() > DeliveryWorkers {
				t.Fatalf("%d stuck accounts hold %d attempts (%d shared), over %d shared workers plus one each",
					stuck, held, p.shared(), DeliveryWorkers)
			}
			limit, _, skipAccounts, ok := p.claimQuery()
			if !ok || limit < 1 {
				t.Fatalf("no claim with %d stuck accounts: %d, %v", stuck, limit, ok)
			}
			for i := range stuck {
				if acc := fmt.Sprintf("stuck%d", i); (p.shared() >= DeliveryWorkers || p.byAccount[acc] >= deliveriesPerAccount) &&
					!slices.Contains(skipAccounts, acc) {
					t.Fatalf("the claim does not skip %s (%d in flight, %d shared)", acc, p.byAccount[acc], p.shared())
				}
			}
			if !p.start(slotDelivery("healthy", 0)) {
				t.Fatalf("the healthy account's attempt cannot start beside %d stuck accounts", stuck)
			}
			p.finish(slotDelivery("healthy", 0))
			if !p.start(slotDelivery("healthy", 0)) {
				t.Fatal("its next attempt cannot start once the first finished")
			}
		})
	}
}

// TestDeliverySlotsCaps: at most deliveriesPerWebhook attempts to one
// webhook, deliveriesPerAccount to one account, DeliveryWorkers shared,
// maxDeliveriesInFlight in all.
func TestDeliverySlotsCaps(t *testing.T) {
	p := newDeliverySlots()
	if n := fill(p, "a", 1); n != deliveriesPerWebhook {
		t.Fatalf("one webhook: %d in flight, want %d", n, deliveriesPerWebhook)
	}
	p = newDeliverySlots()
	if n := fill(p, "a", MaxWebhooksPerAccount); n != deliveriesPerAccount {
		t.Fatalf("one account: %d in flight, want %d", n, deliveriesPerAccount)
	}
	// Accounts of one attempt each use their own workers only; beyond
	// maxDeliveriesInFlight nothing starts.
	p = newDeliverySlots()
	for i := range maxDeliveriesInFlight {
		if !p.start(slotDelivery(fmt.Sprint(i), 0)) {
			t.Fatalf("account %d's first attempt refused", i)
		}
	}
	if p.shared() != 0 || p.start(slotDelivery("one more", 0)) {
		t.Fatalf("past %d in flight: %d shared, one more started", maxDeliveriesInFlight, p.shared())
	}
	if _, _, _, ok := p.claimQuery(); ok {
		t.Fatal("a claim with no room left")
	}
}

// TestDeliverySlotsHold: what a claim brings beyond the caps waits for a
// slot, starts when one frees, and is dropped after deliveryHold (its
// lease lapses and it is claimed again); held attempts count against the
// next claim. The clock is the caller's.
func TestDeliverySlotsHold(t *testing.T) {
	p := newDeliverySlots()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	fill(p, "a", 1)
	extra := []Delivery{slotDelivery("a", 0), slotDelivery("a", 0)}
	for _, d := range extra {
		if p.start(d) {
			t.Fatal("an attempt past the cap of one webhook started")
		}
		p.hold(d, t0)
	}
	if _, skipWebhooks, _, _ := p.claimQuery(); !slices.Contains(skipWebhooks, "wh_a_0") {
		t.Fatalf("the claim does not skip a webhook at its cap: %v", skipWebhooks)
	}
	if started := p.startWaiting(t0.Add(time.Second)); len(started) != 0 {
		t.Fatalf("started with no slot free: %v", started)
	}
	p.finish(slotDelivery("a", 0))
	if started := p.startWaiting(t0.Add(2 * time.Second)); len(started) != 1 || len(p.waiting) != 1 {
		t.Fatalf("a slot freed: %d started, %d waiting", len(started), len(p.waiting))
	}
	p.finish(slotDelivery("a", 0))
	if started := p.startWaiting(t0.Add(deliveryHold + time.Millisecond)); len(started) != 0 || len(p.waiting) != 0 {
		t.Fatalf("held past deliveryHold: %d started, %d waiting", len(started), len(p.waiting))
	}
	// Shared workers all taken: the claim asks for idle accounts only,
	// skipping every account in flight or held, and stops asking once
	// as many attempts are held as there are shared workers.
	p = newDeliverySlots()
	for i := range 5 {
		fill(p, fmt.Sprint(i), MaxWebhooksPerAccount)
	}
	p.hold(slotDelivery("held", 0), t0)
	limit, _, skipAccounts, ok := p.claimQuery()
	if !ok || limit != idleClaimBatch || len(skipAccounts) != 6 || !slices.Contains(skipAccounts, "held") {
		t.Fatalf("claim with the shared workers taken: %d %v %v", limit, skipAccounts, ok)
	}
	for i := range DeliveryWorkers {
		p.hold(slotDelivery(fmt.Sprint("h", i), 0), t0)
	}
	if _, _, _, ok := p.claimQuery(); ok {
		t.Fatal("a claim with the shared workers' worth of attempts held")
	}
}
