package e2e

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
)

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
