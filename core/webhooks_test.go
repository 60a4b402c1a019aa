package core_test

import (
	"context"
	"log/slog"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/core"
)

type allowAll struct{}

func (allowAll) Check(context.Context, *url.URL) error { return nil }

// failingSender answers 503 to every attempt and counts them.
type failingSender struct {
	now      func() time.Time
	mu       sync.Mutex
	attempts []core.Delivery
}

func (f *failingSender) Send(_ context.Context, _, secret string, d core.Delivery) core.DeliveryResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts = append(f.attempts, d)
	return core.DeliveryResult{ResponseStatus: 503, AttemptedAt: f.now().UTC().Truncate(time.Millisecond), Duration: time.Millisecond}
}

// TestWebhookRetries: a receiver that always fails gets the first attempt
// and one per configured delay, each PENDING attempt due that delay after
// the failure before it; then the last stays FAILED. Rights: a rider may
// not manage webhooks, another account cannot see them.
func TestWebhookRetries(t *testing.T) {
	f := newLapseFixture(t)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sender := &failingSender{now: f.clock.Now}
	delays := core.WebhookRetryDelays{time.Millisecond, 3 * time.Millisecond, 5 * time.Millisecond}
	svc := core.NewWebhookService(core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
		Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker, RetryDelays: delays,
		Logger: slog.New(slog.DiscardHandler)})
	svc.SetClock(f.clock.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunDeliveries(ctx) }()
	defer func() { cancel(); <-done }()

	u := "https://example.com/hook"
	rider := f.a
	rider.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"H1"}, Scopes: []string{}}
	if _, _, err := svc.CreateWebhook(ctx, rider, core.WebhookInput{URL: &u}); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("a rider creates a webhook: %v", err)
	}
	hook, secret, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u})
	if err != nil || len(secret) < 40 {
		t.Fatalf("create: %v", err)
	}
	if _, err := svc.Webhook(ctx, f.b, hook.ID); core.ErrorCode(err) != core.CodeWebhookNotFound {
		t.Fatalf("another account reads it: %v", err)
	}
	// The event happens after the webhook exists (the fixture's clock).
	f.clock.Advance(time.Second)
	mustOK(t, f.requestErr(ctx, "H1"))

	var ds []core.Delivery
	deadline := time.Now().Add(10 * time.Second)
	for {
		ds, _, err = svc.Deliveries(ctx, f.a, hook.ID, core.Page{CurrentPage: 1, PageSize: 20})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == len(delays)+1 && ds[0].Status == core.DeliveryFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("attempts after 10s: %+v", ds)
		}
		f.clock.Advance(10 * time.Millisecond) // retries come due; the worker polls
		time.Sleep(20 * time.Millisecond)
	}
	// Newest first: attempt 4, 3, 2, 1, all failed, each due its delay
	// after the one before.
	for i, d := range ds {
		if d.Attempt != len(ds)-i || d.Status != core.DeliveryFailed || d.ResponseStatus != 503 || !d.NextAttemptAt.IsZero() {
			t.Fatalf("attempt %d: %+v", i, d)
		}
	}
	sender.mu.Lock()
	defer sender.mu.Unlock()
	if len(sender.attempts) != len(delays)+1 {
		t.Fatalf("%d attempts sent, want %d", len(sender.attempts), len(delays)+1)
	}
	for i := 1; i < len(sender.attempts); i++ {
		prev, next := ds[len(ds)-i], sender.attempts[i]
		if got := next.NextAttemptAt.Sub(prev.AttemptedAt); got != delays[i-1] {
			t.Errorf("attempt %d was due %v after attempt %d failed, want %v", i+1, got, i, delays[i-1])
		}
	}
}
