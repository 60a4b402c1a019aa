package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// TestWebhooks covers docs/api.md, "Webhooks", on both backends with real
// receivers: signatures, retries on the configured delays with every
// attempt recorded, filters, rotation, rights, bad input, and a receiver
// that never answers not delaying another.
func TestWebhooks(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receivers listen on loopback
			cfg.WebhookRetryDelays = "50ms,100ms,100ms"
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")

			flaky := newReceiver(t)
			flaky.failures = 2
			res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": flaky.URL + "/hooks", "description": "ops"})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, body)
			}
			hook := decode[webhookView](t, body)
			if !strings.HasPrefix(hook.Secret, "whsec_") || !hook.Enabled || len(hook.EventTypes) != 0 {
				t.Fatalf("created %+v", hook)
			}
			flaky.setSecret(hook.Secret)
			deletes := newReceiver(t)
			res, body = a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": deletes.URL, "eventTypes": []string{"DELETED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create filtered: %d %s", res.StatusCode, body)
			}
			deletes.setSecret(decode[webhookView](t, body).Secret)
			if strings.Contains(string(a.ok(t, http.MethodGet, "/api/v1/webhooks/"+hook.ID, nil)), "whsec_") {
				t.Fatal("a read shows the secret")
			}

			uid := uniqueUID("W")
			a.associate(t, uid, nil)
			a.report(t, uid, entry("BATTERY_LEVEL", "61", time.Now().Add(-time.Minute)))
			a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid, nil)
			want := []string{"ASSOCIATION_REQUESTED " + uid, "STATES_REPORTED " + uid, "DELETED " + uid}
			got := flaky.waitFor(t, "every event after two failures", func(c []webhookCall) bool {
				seen := types(c)
				for _, w := range want {
					if !slices.Contains(seen, w) {
						return false
					}
				}
				return true
			})
			for _, c := range got {
				if c.ID != c.Data.ID {
					t.Fatalf("webhook-id %s is not the event's id %s", c.ID, c.Data.ID)
				}
			}
			deletes.waitFor(t, "the DELETED filter", func(c []webhookCall) bool { return slices.Equal(types(c), []string{"DELETED " + uid}) })

			// Every attempt is recorded: two failures, then successes.
			var ds []deliveryView
			deadline := time.Now().Add(10 * time.Second)
			for {
				page := decode[struct{ Deliveries []deliveryView }](t, a.ok(t, http.MethodGet, "/api/v1/webhooks/"+hook.ID+"/deliveries", nil))
				ds = page.Deliveries
				succeeded, failed := 0, 0
				for _, d := range ds {
					switch d.Status {
					case "SUCCEEDED":
						succeeded++
					case "FAILED":
						failed++
						if d.ResponseStatus == nil || *d.ResponseStatus != 500 || d.Error == nil {
							t.Fatalf("a failed attempt: %+v", d)
						}
					}
				}
				if succeeded >= 3 && failed == 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("deliveries: %+v", ds)
				}
				time.Sleep(50 * time.Millisecond)
			}

			// Rotation: later deliveries verify with the new secret only.
			secret := decode[map[string]string](t, a.ok(t, http.MethodPost, "/api/v1/webhooks/"+hook.ID+"/rotate-secret", nil))["secret"]
			if secret == hook.Secret || !strings.HasPrefix(secret, "whsec_") {
				t.Fatalf("rotated secret %q", secret)
			}
			flaky.setSecret(secret)
			uid2 := uniqueUID("W")
			a.associate(t, uid2, nil)
			flaky.waitFor(t, "a delivery after rotation", func(c []webhookCall) bool { return slices.Contains(types(c), "ASSOCIATION_REQUESTED "+uid2) })

			// A receiver that never answers holds its own deliveries only.
			flaky.mu.Lock()
			flaky.hang = make(chan struct{})
			flaky.mu.Unlock()
			defer close(flaky.hang)
			patched := decode[webhookView](t, a.ok(t, http.MethodPatch, "/api/v1/webhooks/"+hook.ID, map[string]any{"description": "ops, hanging"}))
			if patched.Description != "ops, hanging" || patched.URL != hook.URL || patched.Secret != "" {
				t.Fatalf("patched %+v", patched)
			}
			uid3 := uniqueUID("W")
			a.associate(t, uid3, nil)
			start := time.Now()
			a.noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid3, nil)
			deletes.waitFor(t, "a delivery beside a hanging receiver", func(c []webhookCall) bool { return slices.Contains(types(c), "DELETED "+uid3) })
			// Behind the hanging receiver it would wait for the attempt's
			// timeout (10 s); anything less, however loaded the machine,
			// means it did not.
			if waited := time.Since(start); waited >= core.WebhookTimeout {
				t.Fatalf("the healthy receiver waited %v behind the hanging one", waited)
			}

			// Rights and input.
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)}
			for _, c := range []struct {
				who          fleet
				method, path string
				body         any
				status       int
				code         string
			}{
				{rider, http.MethodGet, "/api/v1/webhooks", nil, 403, "FORBIDDEN"},
				{rider, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com"}, 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/webhooks/" + hook.ID + "/deliveries", nil, 403, "FORBIDDEN"},
				{b, http.MethodGet, "/api/v1/webhooks/" + hook.ID, nil, 404, "WEBHOOK_NOT_FOUND"},
				{b, http.MethodPatch, "/api/v1/webhooks/" + hook.ID, map[string]any{"enabled": false}, 404, "WEBHOOK_NOT_FOUND"},
				{b, http.MethodDelete, "/api/v1/webhooks/" + hook.ID, nil, 404, "WEBHOOK_NOT_FOUND"},
				{b, http.MethodPost, "/api/v1/webhooks/" + hook.ID + "/rotate-secret", nil, 404, "WEBHOOK_NOT_FOUND"},
				{b, http.MethodGet, "/api/v1/webhooks/" + hook.ID + "/deliveries", nil, 404, "WEBHOOK_NOT_FOUND"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "ftp://example.com/x"}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "/relative"}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://u:p@example.com"}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com", "eventTypes": []string{"X"}}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com", "colour": "red"}, 400, "VALIDATION_FAILED"},
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com", "enabled": false}, 400, "VALIDATION_FAILED"}, // a new webhook is enabled; PATCH turns it off
				{a, http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com/" + strings.Repeat("x", 3000)}, 400, "VALIDATION_FAILED"},
			} {
				res, body := c.who.call(c.method, c.path, c.body)
				wantProblem(t, res, body, c.status, c.code)
			}

			// A description is free text without control characters, as
			// everywhere (they would reach terminals through mountctl).
			for _, d := range []string{"ops\x1b[2J", "ops\nforged"} {
				res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://example.com", "description": d})
				if p := wantProblem(t, res, body, 400, "VALIDATION_FAILED"); len(p.Errors) != 1 || p.Errors[0].Field != "description" {
					t.Errorf("description %q: errors %+v", d, p.Errors)
				}
				res, body = a.call(http.MethodPatch, "/api/v1/webhooks/"+hook.ID, map[string]any{"description": d})
				if p := wantProblem(t, res, body, 400, "VALIDATION_FAILED"); len(p.Errors) != 1 || p.Errors[0].Field != "description" {
					t.Errorf("PATCH description %q: errors %+v", d, p.Errors)
				}
				r := a.gql(t, `mutation($d: String!) { createWebhook(input: {url: "https://example.com", description: $d}) { secret } }`, map[string]any{"d": d})
				if r.code() != "VALIDATION_FAILED" || !strings.Contains(string(mustJSON(t, r.Errors[0].Extensions)), `"description"`) {
					t.Errorf("GraphQL description %q: %+v", d, r.Errors)
				}
			}

			// GraphQL mirrors it, with the same rights.
			r := a.gql(t, `{ webhooks { webhooks { id url } pagination { totalItems } } }`, nil)
			if r.code() != "" || !strings.Contains(string(r.Data), hook.ID) {
				t.Fatalf("GraphQL webhooks: %s %+v", r.Data, r.Errors)
			}
			r = a.gql(t, `mutation($u: String!) { createWebhook(input: {url: $u, eventTypes: [ABANDONED]}) { secret webhook { id eventTypes } } }`,
				map[string]any{"u": deletes.URL + "/gql"})
			if r.code() != "" || !strings.Contains(string(r.Data), "whsec_") {
				t.Fatalf("GraphQL createWebhook: %s %+v", r.Data, r.Errors)
			}
			if r := rider.gql(t, `{ webhooks { webhooks { id } } }`, nil); r.code() != "FORBIDDEN" {
				t.Fatalf("a rider's GraphQL webhooks: %+v", r.Errors)
			}
			if r := b.gql(t, `query($id: ID!) { webhookDeliveries(id: $id) { deliveries { id } } }`, map[string]any{"id": hook.ID}); r.code() != "WEBHOOK_NOT_FOUND" {
				t.Fatalf("another account's deliveries over GraphQL: %+v", r.Errors)
			}
		})
	}
}

// TestWebhookTargetsRefused: without MOUNTD_WEBHOOK_ALLOW_PRIVATE, targets
// inside the network are refused (field url), the message naming the
// setting; so are ports outside 1–65535.
func TestWebhookTargetsRefused(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	for _, target := range []string{"http://127.0.0.1:9/x", "http://localhost/x", "http://169.254.169.254/latest", "http://[::1]/x", "http://10.0.0.1/x"} {
		res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": target})
		p := wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED")
		if !strings.Contains(string(body), `"url"`) || !strings.Contains(string(body), "MOUNTD_WEBHOOK_ALLOW_PRIVATE") {
			t.Fatalf("%s: %+v", target, p)
		}
	}
	// A port outside 1–65535 is refused too.
	for _, target := range []string{"https://example.com:0/x", "https://example.com:99999/x", "https://example.com:65536/x"} {
		res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": target})
		p := wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED")
		if !strings.Contains(string(body), `"url"`) || !strings.Contains(string(body), "65535") {
			t.Fatalf("%s: %+v", target, p)
		}
	}
}

// TestWebhookResponseHeadersBounded: a receiver that answers with a
// megabyte of headers (mountd read up to 10 MiB of them, per attempt)
// makes a failed attempt that says why, retried as usual.
func TestWebhookResponseHeadersBounded(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receiver listens on loopback
			cfg.WebhookRetryDelays = "1h"
			in := start(t, cfg)
			a := newFleet(in, "A")
			res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": testenv.HeaderFloodReceiver(t, 1<<20)})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, body)
			}
			hook := decode[webhookView](t, body)
			a.associate(t, uniqueUID("H"), nil)
			var ds []deliveryView
			for deadline := time.Now().Add(30 * time.Second); ; {
				ds = decode[struct{ Deliveries []deliveryView }](t, a.ok(t, http.MethodGet, "/api/v1/webhooks/"+hook.ID+"/deliveries", nil)).Deliveries
				if len(ds) == 2 || len(ds) == 1 && ds[0].Status == "SUCCEEDED" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("deliveries: %+v", ds)
				}
				time.Sleep(50 * time.Millisecond)
			}
			failed, next := ds[1], ds[0]
			if failed.Status != "FAILED" || failed.ResponseStatus != nil || failed.Error == nil ||
				!strings.Contains(*failed.Error, "headers") || next.Status != "PENDING" || next.Attempt != 2 {
				t.Fatalf("the attempt against a megabyte of headers: %+v, then %+v", failed, next)
			}
		})
	}
}

// hangingServer never answers until the test ends; it counts the
// requests in flight and those the sender gave up on.
type hangingServer struct {
	*httptest.Server
	mu                  sync.Mutex
	inFlight, abandoned int
}

func newHangingServer(t *testing.T) *hangingServer {
	h := &hangingServer{}
	release := make(chan struct{})
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read through, the server watches the connection and ends the
		// request's context when the sender gives up.
		_, _ = io.Copy(io.Discard, r.Body)
		h.mu.Lock()
		h.inFlight++
		h.mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
			h.mu.Lock()
			h.abandoned++
			h.mu.Unlock()
		}
		h.mu.Lock()
		h.inFlight--
		h.mu.Unlock()
	}))
	t.Cleanup(h.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handlers
	return h
}

func (h *hangingServer) counts() (inFlight, abandoned int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.inFlight, h.abandoned
}

// TestWebhookHangingAccountsLeaveOthersServed: six accounts whose 20
// receivers each never answer, each with more due attempts than it may
// have in flight (four such accounts took every delivery worker, and
// another account's delivery waited a minute), do not keep a healthy
// account waiting: its delivery arrives while every hanging attempt is
// still waiting for its answer, before the first of them times out.
func TestWebhookHangingAccountsLeaveOthersServed(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receivers listen on loopback
			in := start(t, cfg)
			hang := newHangingServer(t)
			const accounts, hooksEach, eventsEach = 6, 20, 2
			for i := range accounts {
				f := newFleet(in, fmt.Sprint("Hanging", i))
				for j := range hooksEach {
					res, body := f.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": fmt.Sprintf("%s/%d/%d", hang.URL, i, j)})
					if res.StatusCode != http.StatusCreated {
						t.Fatalf("create: %d %s", res.StatusCode, body)
					}
				}
				for range eventsEach {
					f.associate(t, uniqueUID("H"), nil)
				}
			}
			// The hanging accounts take at least every shared worker.
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				n, abandoned := hang.counts()
				if abandoned > 0 {
					t.Fatalf("a hanging attempt timed out before the healthy account's event was made (machine too slow?)")
				}
				if n >= core.DeliveryWorkers {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d hanging attempts in flight", n)
				}
			}
			ok := newFleet(in, "Healthy")
			healthy := newReceiver(t)
			res, body := ok.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": healthy.URL})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, body)
			}
			healthy.setSecret(decode[webhookView](t, body).Secret)
			uid := uniqueUID("OK")
			ok.associate(t, uid, nil)
			healthy.waitFor(t, "the healthy account's delivery", func(c []webhookCall) bool { return slices.Contains(types(c), "ASSOCIATION_REQUESTED "+uid) })
			n, abandoned := hang.counts()
			t.Logf("healthy delivery arrived with %d hanging attempts in flight, %d abandoned", n, abandoned)
			if abandoned > 0 {
				t.Fatalf("the healthy delivery arrived after %d hanging attempts timed out (%d in flight): it waited for their workers", abandoned, n)
			}
		})
	}
}

// webhookTestView is the answer of POST /api/v1/webhooks/{id}/test.
type webhookTestView struct {
	Status         string  `json:"status"`
	ResponseStatus *int    `json:"responseStatus"`
	Error          *string `json:"error"`
	DurationMs     *int64  `json:"durationMs"`
}

// TestWebhookTestDelivery covers the test delivery (docs/api.md,
// "Webhooks") on both backends: one attempt, signed
// as deliveries are (the receiver verifies it with the Standard Webhooks
// library), answered synchronously, neither listed among the deliveries
// nor logged as an event; once per webhook per few seconds; owners only;
// the same over GraphQL.
func TestWebhookTestDelivery(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receivers listen on loopback
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")
			create := func(r *receiver) webhookView {
				t.Helper()
				res, body := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": r.URL + "/hooks"})
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("create: %d %s", res.StatusCode, body)
				}
				hook := decode[webhookView](t, body)
				r.setSecret(hook.Secret)
				return hook
			}

			ok := newReceiver(t)
			hook := create(ok)
			got := decode[webhookTestView](t, a.ok(t, http.MethodPost, "/api/v1/webhooks/"+hook.ID+"/test", nil))
			if got.Status != "SUCCEEDED" || got.ResponseStatus == nil || *got.ResponseStatus != 200 || got.Error != nil || got.DurationMs == nil {
				t.Fatalf("test of a healthy receiver: %+v", got)
			}
			// The answer comes after the attempt: the receiver has it.
			calls := ok.waitFor(t, "the test delivery", func(c []webhookCall) bool { return len(c) == 1 })
			if c := calls[0]; c.Type != "WEBHOOK_TEST" || c.Data.WebhookID != hook.ID || !strings.HasPrefix(c.ID, "msg_test_") {
				t.Fatalf("the receiver got %+v", c)
			}

			// Once per webhook per few seconds.
			res, body := a.call(http.MethodPost, "/api/v1/webhooks/"+hook.ID+"/test", nil)
			wantProblem(t, res, body, http.StatusTooManyRequests, "RATE_LIMITED")
			if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || s < 1 || s > 5 {
				t.Fatalf("Retry-After %q", res.Header.Get("Retry-After"))
			}
			ok.mu.Lock()
			reached := len(ok.got)
			ok.mu.Unlock()
			if reached != 1 {
				t.Fatalf("a refused test reached the receiver (%d calls)", reached)
			}

			// Neither a delivery nor an event.
			if ds := decode[struct{ Deliveries []deliveryView }](t, a.ok(t, http.MethodGet, "/api/v1/webhooks/"+hook.ID+"/deliveries", nil)); len(ds.Deliveries) != 0 {
				t.Fatalf("the test is listed among the deliveries: %+v", ds.Deliveries)
			}
			if events := a.events(t, nil); len(events.Events) != 0 {
				t.Fatalf("the test was logged: %+v", events.Events)
			}

			// A disabled webhook is tested too (before turning it on); a
			// receiver's refusal is a FAILED attempt, answered 200.
			failing := newReceiver(t)
			failing.failures = 1
			off := create(failing)
			a.ok(t, http.MethodPatch, "/api/v1/webhooks/"+off.ID, map[string]any{"enabled": false})
			got = decode[webhookTestView](t, a.ok(t, http.MethodPost, "/api/v1/webhooks/"+off.ID+"/test", nil))
			if got.Status != "FAILED" || got.ResponseStatus == nil || *got.ResponseStatus != 500 || got.Error == nil || !strings.Contains(*got.Error, "500") {
				t.Fatalf("test of a failing receiver: %+v", got)
			}
			// A receiver that cannot be reached.
			gone := newReceiver(t)
			closed := create(gone)
			gone.Close()
			got = decode[webhookTestView](t, a.ok(t, http.MethodPost, "/api/v1/webhooks/"+closed.ID+"/test", nil))
			if got.Status != "FAILED" || got.ResponseStatus != nil || got.Error == nil || !strings.Contains(*got.Error, "connect") {
				t.Fatalf("test of a closed receiver: %+v", got)
			}

			// Rights.
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uniqueUID("T"))}
			res, body = b.call(http.MethodPost, "/api/v1/webhooks/"+hook.ID+"/test", nil)
			wantProblem(t, res, body, http.StatusNotFound, "WEBHOOK_NOT_FOUND")
			res, body = rider.call(http.MethodPost, "/api/v1/webhooks/"+hook.ID+"/test", nil)
			wantProblem(t, res, body, http.StatusForbidden, "FORBIDDEN")
			res, body = a.call(http.MethodPost, "/api/v1/webhooks/wh_000000000000000000000000/test", nil)
			wantProblem(t, res, body, http.StatusNotFound, "WEBHOOK_NOT_FOUND")

			// GraphQL mirrors it.
			viaGQL := newReceiver(t)
			gh := create(viaGQL)
			const mutation = `mutation($id: ID!) { testWebhook(id: $id) { status responseStatus error durationMs } }`
			r := a.gql(t, mutation, map[string]any{"id": gh.ID})
			if r.code() != "" || !strings.Contains(string(r.Data), `"status":"SUCCEEDED"`) || !strings.Contains(string(r.Data), `"responseStatus":200`) {
				t.Fatalf("GraphQL testWebhook: %s %+v", r.Data, r.Errors)
			}
			viaGQL.waitFor(t, "the GraphQL test delivery", func(c []webhookCall) bool { return len(c) == 1 && c[0].Type == "WEBHOOK_TEST" })
			r = a.gql(t, mutation, map[string]any{"id": gh.ID})
			if r.code() != "RATE_LIMITED" || r.Errors[0].Extensions["retryAfter"] == nil {
				t.Fatalf("a second GraphQL test at once: %+v", r.Errors)
			}
			if r := b.gql(t, mutation, map[string]any{"id": gh.ID}); r.code() != "WEBHOOK_NOT_FOUND" {
				t.Fatalf("another account's GraphQL testWebhook: %+v", r.Errors)
			}
			if r := rider.gql(t, mutation, map[string]any{"id": gh.ID}); r.code() != "FORBIDDEN" {
				t.Fatalf("a rider's GraphQL testWebhook: %+v", r.Errors)
			}
		})
	}
}
