package core_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
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

// stuckSender never answers the receivers of account A's webhooks (their
// URLs hold "/a/") until released, and answers the others at once.
type stuckSender struct {
	release chan struct{}
	sentB   chan struct{}
	mu      sync.Mutex
	stuck   int // A's attempts in flight
	most    int
	sent    int
}

func (s *stuckSender) Send(ctx context.Context, target, _ string, _ core.Delivery) core.DeliveryResult {
	res := core.DeliveryResult{ResponseStatus: 204, AttemptedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if !strings.Contains(target, "/a/") {
		s.sentB <- struct{}{}
		return res
	}
	s.mu.Lock()
	s.stuck++
	s.most = max(s.most, s.stuck)
	s.mu.Unlock()
	select {
	case <-s.release:
	case <-ctx.Done():
		res = core.DeliveryResult{Error: "stopped", AttemptedAt: res.AttemptedAt}
	}
	s.mu.Lock()
	s.stuck--
	s.sent++
	s.mu.Unlock()
	return res
}

// TestWebhookAccountsShareWorkers: account A's 20 receivers never answer
// and its events make more attempts than there are workers; account B's
// one healthy receiver still gets its event while A's are stuck, and A
// never has more than its cap in flight. Released, A's all go through.
func TestWebhookAccountsShareWorkers(t *testing.T) {
	f := newLapseFixture(t)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sender := &stuckSender{release: make(chan struct{}), sentB: make(chan struct{}, 1)}
	svc := core.NewWebhookService(core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
		Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker,
		Logger: slog.New(slog.DiscardHandler)})
	svc.SetClock(f.clock.Now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunDeliveries(ctx) }()
	released := false
	defer func() {
		if !released {
			close(sender.release)
		}
		cancel()
		<-done
	}()

	for i := range core.MaxWebhooksPerAccount {
		u := fmt.Sprintf("https://example.com/a/%d", i)
		if _, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u}); err != nil {
			t.Fatal(err)
		}
	}
	u := "https://example.com/b"
	hookB, _, err := svc.CreateWebhook(ctx, f.b, core.WebhookInput{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	// 4 events × 20 webhooks: 80 attempts, more than the workers, all
	// due before B's.
	const eventsA = 4
	for i := range eventsA {
		mustOK(t, f.requestErr(ctx, fmt.Sprintf("A%d", i)))
	}
	if _, err := f.svc.RequestAssociation(ctx, f.b, "B1", core.MountFields{}); err != nil {
		t.Fatal(err)
	}

	select {
	case <-sender.sentB:
	case <-time.After(10 * time.Second):
		sender.mu.Lock()
		defer sender.mu.Unlock()
		t.Fatalf("B's delivery not made in 10s; A has %d attempts stuck", sender.stuck)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		sender.mu.Lock()
		stuck := sender.stuck
		sender.mu.Unlock()
		if stuck == core.DeliveriesPerAccount {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A has %d attempts in flight, want its cap %d", stuck, core.DeliveriesPerAccount)
		}
		time.Sleep(5 * time.Millisecond)
	}
	ds, _, err := svc.Deliveries(ctx, f.b, hookB.ID, core.Page{CurrentPage: 1, PageSize: 20})
	for err == nil && (len(ds) != 1 || ds[0].Status != core.DeliverySucceeded) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		ds, _, err = svc.Deliveries(ctx, f.b, hookB.ID, core.Page{CurrentPage: 1, PageSize: 20})
	}
	if err != nil || len(ds) != 1 || ds[0].Status != core.DeliverySucceeded {
		t.Fatalf("B's deliveries while A's are stuck: %+v, %v", ds, err)
	}

	close(sender.release)
	released = true
	deadline = time.Now().Add(10 * time.Second)
	for {
		sender.mu.Lock()
		sent, most := sender.sent, sender.most
		sender.mu.Unlock()
		if most > core.DeliveriesPerAccount {
			t.Fatalf("A had %d attempts in flight, over its cap %d", most, core.DeliveriesPerAccount)
		}
		if sent == eventsA*core.MaxWebhooksPerAccount {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of A's attempts made after the release, want %d", sent, eventsA*core.MaxWebhooksPerAccount)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWebhookMountFilterTooLong: a mountUids list over the limit is
// refused as it stands, without being read through (de-duplicating 200,000
// distinct ids took seconds), at creation and update alike.
func TestWebhookMountFilterTooLong(t *testing.T) {
	f := newLapseFixture(t)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	svc := core.NewWebhookService(core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{},
		Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	uids := make([]string, 200_000)
	for i := range uids {
		uids[i] = "M" + strconv.Itoa(i)
	}
	u := "https://example.com/hook"
	if _, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u, MountUIDs: &uids}); core.ErrorCode(err) != core.CodeValidation {
		t.Fatalf("create with %d mount uids: %v, want VALIDATION_FAILED", len(uids), err)
	}
	hook, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.UpdateWebhook(ctx, f.a, hook.ID, core.WebhookInput{MountUIDs: &uids}); core.ErrorCode(err) != core.CodeValidation {
		t.Fatalf("update with %d mount uids: %v, want VALIDATION_FAILED", len(uids), err)
	}
	limit := uids[:100]
	if w, err := svc.UpdateWebhook(ctx, f.a, hook.ID, core.WebhookInput{MountUIDs: &limit}); err != nil || len(w.MountUIDs) != 100 {
		t.Fatalf("update with 100 mount uids: %d, %v", len(w.MountUIDs), err)
	}
}

// blockingSender answers nothing until the attempt's context ends.
type blockingSender struct{ sending chan struct{} }

func (s blockingSender) Send(ctx context.Context, _, _ string, _ core.Delivery) core.DeliveryResult {
	at := time.Now().UTC().Truncate(time.Millisecond)
	s.sending <- struct{}{}
	<-ctx.Done()
	return core.DeliveryResult{Error: ctx.Err().Error(), AttemptedAt: at}
}

// TestWebhookAttemptsRecorded: an attempt cut short by shutdown, and one
// whose secret cannot be opened (the webhook was sealed under another
// master key), are recorded as failed attempts, each with the next one
// pending: due at once after a shutdown, after the first delay otherwise.
func TestWebhookAttemptsRecorded(t *testing.T) {
	for _, tc := range []struct {
		name      string
		otherKey  bool // deliveries run with another master key than creation
		wantError string
		wantDelay time.Duration
	}{
		{"interrupted by shutdown", false, "interrupted", 0},
		{"secret sealed under another key", true, "secret cannot be opened", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newLapseFixture(t)
			sealer, _ := keyring.NewSealer(make([]byte, 32))
			deliverSealer := sealer
			if tc.otherKey {
				deliverSealer, _ = keyring.NewSealer(append(make([]byte, 31), 1))
			}
			sender := blockingSender{sending: make(chan struct{}, 1)}
			deps := core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
				Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker,
				RetryDelays: core.WebhookRetryDelays{time.Hour}, Logger: slog.New(slog.DiscardHandler)}
			manage := core.NewWebhookService(deps)
			deps.Sealer = deliverSealer
			deliver := core.NewWebhookService(deps)
			manage.SetClock(f.clock.Now)
			deliver.SetClock(f.clock.Now)
			ctx := context.Background()
			u := "https://example.com/hook"
			hook, _, err := manage.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u})
			if err != nil {
				t.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() { defer close(done); _ = deliver.RunDeliveries(runCtx) }()
			f.clock.Advance(time.Second)
			mustOK(t, f.requestErr(ctx, "R1"))
			list := func() []core.Delivery {
				ds, _, err := manage.Deliveries(ctx, f.a, hook.ID, core.Page{CurrentPage: 1, PageSize: 20})
				if err != nil {
					t.Fatal(err)
				}
				return ds
			}
			var ds []core.Delivery
			if tc.otherKey {
				for deadline := time.Now().Add(10 * time.Second); len(ds) < 2; ds = list() {
					if time.Now().After(deadline) {
						t.Fatalf("deliveries after 10s: %+v", ds)
					}
					time.Sleep(10 * time.Millisecond)
				}
				stop()
				<-done
			} else {
				select {
				case <-sender.sending:
				case <-time.After(10 * time.Second):
					t.Fatal("no attempt made")
				}
				stop()
				<-done
				ds = list()
			}
			if len(ds) != 2 {
				t.Fatalf("deliveries %+v, want the failed attempt and the next", ds)
			}
			next, failed := ds[0], ds[1]
			if failed.Attempt != 1 || failed.Status != core.DeliveryFailed || !strings.Contains(failed.Error, tc.wantError) {
				t.Fatalf("the attempt: %+v, want FAILED with %q", failed, tc.wantError)
			}
			if next.Attempt != 2 || next.Status != core.DeliveryPending || next.NextAttemptAt.Sub(failed.AttemptedAt) != tc.wantDelay {
				t.Fatalf("the next attempt: %+v, want PENDING due %v after %v", next, tc.wantDelay, failed.AttemptedAt)
			}
		})
	}
}

// TestWebhookFieldsChecked: at creation and update, a port outside
// 1–65535 is refused (field url), the ends of the range accepted; a
// description is text like every other free text of the API, at most 500
// characters without control characters, which would reach terminals
// through mountctl (field description).
func TestWebhookFieldsChecked(t *testing.T) {
	f := newLapseFixture(t)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	svc := core.NewWebhookService(core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{},
		Logger: slog.New(slog.DiscardHandler)})
	ctx := context.Background()
	ok := "https://example.com/hook"
	hook, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &ok})
	if err != nil {
		t.Fatal(err)
	}
	url := func(u string) core.WebhookInput { return core.WebhookInput{URL: &u} }
	described := func(d string) core.WebhookInput { return core.WebhookInput{URL: &ok, Description: &d} }
	for _, tc := range []struct {
		name  string
		in    core.WebhookInput
		field string // "" when accepted
	}{
		{"port 0", url("http://example.com:0/x"), "url"},
		{"port 99999", url("http://example.com:99999/x"), "url"},
		{"port 65536", url("http://example.com:65536/x"), "url"},
		{"port 80 padded", url("http://example.com:00000000000000000000080/x"), "url"},
		{"IPv6 port 0", url("http://[2001:db8::1]:0/x"), "url"},
		{"empty port", url("http://example.com:/x"), "url"},
		{"port x", url("http://example.com:x/x"), "url"},
		{"port 1", url("http://example.com:1/x"), ""},
		{"port 65535", url("https://example.com:65535/x"), ""},
		{"IPv6 port 8443", url("https://[2001:db8::1]:8443/x"), ""},
		{"description", described("ops – alarms to the on-call pager"), ""},
		{"empty description", described(""), ""},
		{"description of 500 characters", described(strings.Repeat("é", 500)), ""},
		{"description of 501 characters", described(strings.Repeat("x", 501)), "description"},
		{"description with an escape sequence", described("ops\x1b]0;owned\x07"), "description"},
		{"description with a newline", described("ops\nINFO forged line"), "description"},
		{"description with a carriage return", described("ops\rX"), "description"},
		{"description with NUL", described("ops\x00"), "description"},
		{"description with DEL", described("ops\x7f"), "description"},
		{"description with a C1 control", described("ops\u009b31m"), "description"},
		{"description not UTF-8", described("ops\xff"), "description"},
	} {
		for name, call := range map[string]func() error{
			"create": func() error { _, _, err := svc.CreateWebhook(ctx, f.a, tc.in); return err },
			"update": func() error { _, err := svc.UpdateWebhook(ctx, f.a, hook.ID, tc.in); return err },
		} {
			err := call()
			var ce *core.Error
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("%s, %s: %v", tc.name, name, err)
			case tc.field != "" && (!errors.As(err, &ce) || ce.Code != core.CodeValidation || len(ce.Fields) != 1 || ce.Fields[0].Field != tc.field):
				t.Errorf("%s, %s: %v, want VALIDATION_FAILED on %s", tc.name, name, err, tc.field)
			}
		}
	}
}

// hangingSender never answers the receivers whose URLs hold "/hang/"
// until released, and answers the others at once.
type hangingSender struct {
	release chan struct{}
	healthy chan string // the URLs answered
	mu      sync.Mutex
	hanging int // attempts in flight to hanging receivers
}

func (s *hangingSender) Send(ctx context.Context, target, _ string, _ core.Delivery) core.DeliveryResult {
	res := core.DeliveryResult{ResponseStatus: 204, AttemptedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if !strings.Contains(target, "/hang/") {
		s.healthy <- target
		return res
	}
	s.mu.Lock()
	s.hanging++
	s.mu.Unlock()
	defer func() { s.mu.Lock(); s.hanging--; s.mu.Unlock() }()
	select {
	case <-s.release:
	case <-ctx.Done():
		res = core.DeliveryResult{Error: "stopped", AttemptedAt: res.AttemptedAt}
	}
	return res
}

// TestWebhookHangingAccountsLeaveOthersServed: six accounts whose
// receivers never answer, each with more due attempts than its cap (four
// such accounts took every worker), do not keep a healthy account's
// delivery waiting: it is made while every hanging attempt is still in
// flight, and again for a second event.
func TestWebhookHangingAccountsLeaveOthersServed(t *testing.T) {
	f := newLapseFixture(t)
	ctx := context.Background()
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sender := &hangingSender{release: make(chan struct{}), healthy: make(chan string, 16)}
	svc := core.NewWebhookService(core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
		Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker,
		Logger: slog.New(slog.DiscardHandler)})
	svc.SetClock(f.clock.Now)
	owner := func(name string) core.Principal {
		acc, err := f.accounts.Create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
			Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	}
	const hangingAccounts, hooksEach, eventsEach = 6, 4, 5
	var hanging []core.Principal
	for i := range hangingAccounts {
		p := owner(fmt.Sprint("hanging", i))
		hanging = append(hanging, p)
		for j := range hooksEach {
			u := fmt.Sprintf("https://example.com/hang/%d/%d", i, j)
			if _, _, err := svc.CreateWebhook(ctx, p, core.WebhookInput{URL: &u}); err != nil {
				t.Fatal(err)
			}
		}
	}
	healthy := "https://example.com/healthy"
	if _, _, err := svc.CreateWebhook(ctx, f.b, core.WebhookInput{URL: &healthy}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	for i, p := range hanging {
		for j := range eventsEach {
			if _, err := f.svc.RequestAssociation(ctx, p, fmt.Sprintf("H%d-%d", i, j), core.MountFields{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunDeliveries(runCtx) }()
	defer func() { close(sender.release); cancel(); <-done }()
	// The hanging accounts take most of the workers (all they may soon
	// after; before, they took every one).
	inFlight := func() int { sender.mu.Lock(); defer sender.mu.Unlock(); return sender.hanging }
	want := core.DeliveryWorkers * 3 / 4
	for deadline := time.Now().Add(10 * time.Second); inFlight() < want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d hanging attempts in flight, want %d", inFlight(), want)
		}
	}
	for i := range 2 {
		if _, err := f.svc.RequestAssociation(ctx, f.b, fmt.Sprint("OK", i), core.MountFields{}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sender.healthy:
		case <-time.After(10 * time.Second): // a liveness bound, not a measure
			t.Fatalf("event %d: the healthy account's delivery not made while %d attempts hang", i, inFlight())
		}
	}
	if n, most := inFlight(), min(hangingAccounts*core.DeliveriesPerAccount, core.DeliveryWorkers+hangingAccounts); n > most {
		t.Fatalf("%d hanging attempts in flight, over %d (the shared workers and one per account)", n, most)
	}
}

// brokenLimiter cannot answer, as Redis down.
type brokenLimiter struct{}

func (brokenLimiter) Allow(context.Context, string, core.Rate) (core.RateDecision, error) {
	return core.RateDecision{}, errors.New("redis: connection refused")
}

// TestWebhookTest: a test is one attempt with a WEBHOOK_TEST body and a
// webhook-id of its own, answered and not recorded; a second one within
// WebhookTestRate is refused with the wait, one after it goes through; a
// limiter that cannot answer refuses tests (fails closed).
func TestWebhookTest(t *testing.T) {
	f := newLapseFixture(t)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sender := &failingSender{now: f.clock.Now}
	deps := core.WebhookDeps{Store: f.store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
		Limiter: memory.NewRateLimiter().WithClock(f.clock.Now), Logger: slog.New(slog.DiscardHandler)}
	svc := core.NewWebhookService(deps)
	svc.SetClock(f.clock.Now)
	ctx := context.Background()
	u := "https://example.com/hook"
	hook, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u})
	mustOK(t, err)

	d, err := svc.TestWebhook(ctx, f.a, hook.ID)
	if err != nil || d.Status != core.DeliveryFailed || d.ResponseStatus != 503 || d.Error != "the receiver answered 503" {
		t.Fatalf("test: %+v, %v", d, err)
	}
	if len(sender.attempts) != 1 || !strings.HasPrefix(sender.attempts[0].MessageID, "msg_test_") ||
		!strings.Contains(string(sender.attempts[0].Payload), `"type":"WEBHOOK_TEST"`) || !strings.Contains(string(sender.attempts[0].Payload), hook.ID) {
		t.Fatalf("sent %+v", sender.attempts)
	}
	if ds, _, err := svc.Deliveries(ctx, f.a, hook.ID, core.Page{CurrentPage: 1, PageSize: 20}); err != nil || len(ds) != 0 {
		t.Fatalf("deliveries after a test: %+v, %v", ds, err)
	}

	_, err = svc.TestWebhook(ctx, f.a, hook.ID)
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != core.CodeRateLimited || ce.RetryAfter <= 0 || ce.RetryAfter > core.WebhookTestRate.Period {
		t.Fatalf("a second test at once: %v", err)
	}
	f.clock.Advance(core.WebhookTestRate.Period)
	if _, err := svc.TestWebhook(ctx, f.a, hook.ID); err != nil || len(sender.attempts) != 2 {
		t.Fatalf("a test after the wait: %v (%d attempts)", err, len(sender.attempts))
	}
	if _, err := svc.TestWebhook(ctx, f.b, hook.ID); core.ErrorCode(err) != core.CodeWebhookNotFound {
		t.Fatalf("another account's test: %v", err)
	}

	deps.Limiter = brokenLimiter{}
	broken := core.NewWebhookService(deps)
	if _, err := broken.TestWebhook(ctx, f.a, hook.ID); core.ErrorCode(err) != core.CodeUnavailable || len(sender.attempts) != 2 {
		t.Fatalf("a test while the limiter is down: %v (%d attempts)", err, len(sender.attempts))
	}
}

// claimCountingStore counts the claims that found nothing and the attempts
// recorded.
type claimCountingStore struct {
	*memory.Store
	mu          sync.Mutex
	emptyClaims int
	recorded    int
}

func (s *claimCountingStore) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int, skipWebhooks, skipAccounts []string) ([]core.Delivery, error) {
	got, err := s.Store.ClaimDeliveries(ctx, now, lease, limit, skipWebhooks, skipAccounts)
	if len(got) == 0 {
		s.mu.Lock()
		s.emptyClaims++
		s.mu.Unlock()
	}
	return got, err
}

func (s *claimCountingStore) FinishDeliveries(ctx context.Context, done []core.FinishedDelivery) error {
	s.mu.Lock()
	s.recorded += len(done)
	s.mu.Unlock()
	return s.Store.FinishDeliveries(ctx, done)
}

type okSender struct{}

func (okSender) Send(context.Context, string, string, core.Delivery) core.DeliveryResult {
	return core.DeliveryResult{ResponseStatus: 204, AttemptedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

// TestWebhookBurstToOneWebhook: a burst of events to one webhook, kept at
// its cap of attempts in flight with the rest held, is delivered and
// recorded whole without a claim after each attempt: a claim skipping at
// least what the last one that came back short skipped finds nothing new
// until the next enqueue or poll (before: one empty claim per attempt).
func TestWebhookBurstToOneWebhook(t *testing.T) {
	f := newLapseFixture(t)
	store := &claimCountingStore{Store: f.store}
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	svc := core.NewWebhookService(core.WebhookDeps{Store: store, Sealer: sealer, Targets: allowAll{}, Sender: okSender{},
		Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker, Logger: slog.New(slog.DiscardHandler)})
	svc.SetClock(f.clock.Now)
	ctx := context.Background()
	u := "https://example.com/hook"
	if _, _, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	const n = 300
	for i := range n {
		mustOK(t, f.requestErr(ctx, fmt.Sprintf("BURST-%03d", i)))
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunDeliveries(runCtx) }()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		store.mu.Lock()
		recorded := store.recorded
		store.mu.Unlock()
		if recorded == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d attempts recorded after 20s", recorded, n)
		}
	}
	stop()
	<-done
	store.mu.Lock()
	defer store.mu.Unlock()
	if store.recorded != n {
		t.Fatalf("%d attempts recorded, want %d (each once)", store.recorded, n)
	}
	// The first claim of the burst, and one per poll while it lasted.
	if store.emptyClaims > n/10 {
		t.Fatalf("%d claims found nothing for %d attempts", store.emptyClaims, n)
	}
}

// readCountingStore counts the reads of single webhooks.
type readCountingStore struct {
	*memory.Store
	mu    sync.Mutex
	reads int
}

func (s *readCountingStore) Webhook(ctx context.Context, accountID, id string) (core.Webhook, error) {
	s.mu.Lock()
	s.reads++
	s.mu.Unlock()
	return s.Store.Webhook(ctx, accountID, id)
}

func (s *readCountingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

// secretSender answers 204 and keeps the secret each attempt was signed with.
type secretSender struct {
	mu      sync.Mutex
	secrets []string
}

func (s *secretSender) Send(_ context.Context, _, secret string, _ core.Delivery) core.DeliveryResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secrets = append(s.secrets, secret)
	return core.DeliveryResult{ResponseStatus: 204, AttemptedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

func (s *secretSender) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.secrets)
}

// TestWebhookReadOncePerBurst: a backlog of 40 events to one webhook is
// delivered reading the webhook a few times, not once per attempt; a
// secret rotated on this replica signs the very next attempt.
func TestWebhookReadOncePerBurst(t *testing.T) {
	f := newLapseFixture(t)
	store := &readCountingStore{Store: f.store}
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	sender := &secretSender{}
	svc := core.NewWebhookService(core.WebhookDeps{Store: store, Sealer: sealer, Targets: allowAll{}, Sender: sender,
		Body: func(core.Event) ([]byte, error) { return []byte(`{}`), nil }, Waker: f.waker,
		Logger: slog.New(slog.DiscardHandler)})
	svc.SetClock(f.clock.Now)
	ctx, cancel := context.WithCancel(context.Background())
	u := "https://example.com/hook"
	hook, secret, err := svc.CreateWebhook(ctx, f.a, core.WebhookInput{URL: &u})
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	const n = 40
	for i := range n {
		mustOK(t, f.requestErr(ctx, fmt.Sprintf("RB%d", i)))
	}
	waitSent := func(want int) []string {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if got := sender.sent(); len(got) >= want {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d attempts after 10s, want %d", len(sender.sent()), want)
			}
		}
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.RunDeliveries(ctx) }()
	defer func() { cancel(); <-done }()
	for _, s := range waitSent(n) {
		if s != secret {
			t.Fatalf("an attempt signed with %q, want the webhook's secret", s)
		}
	}
	if reads := store.count(); reads > n/4 {
		t.Errorf("the webhook was read %d times for %d attempts", reads, n)
	}

	rotated, err := svc.RotateSecret(ctx, f.a, hook.ID)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t, f.requestErr(ctx, "RB-after-rotation"))
	if got := waitSent(n + 1); got[n] != rotated {
		t.Fatalf("the attempt after rotation signed with %q, want the new secret", got[n])
	}

}
