package rest

import (
	"net/http"

	"github.com/mountd/mountd/core"
)

// WebhookJSON is a webhook as the API shows it; its secret never is, but
// at creation and rotation.
type WebhookJSON struct {
	ID          string           `json:"id"`
	URL         string           `json:"url"`
	EventTypes  []core.EventType `json:"eventTypes"`
	MountUIDs   []string         `json:"mountUids"`
	Description string           `json:"description"`
	Enabled     bool             `json:"enabled"`
	CreatedAt   Time             `json:"createdAt"`
	UpdatedAt   Time             `json:"updatedAt"`
}

func webhookJSON(w core.Webhook) WebhookJSON {
	return WebhookJSON{ID: w.ID, URL: w.URL, EventTypes: w.EventTypes, MountUIDs: w.MountUIDs, Description: w.Description,
		Enabled: w.Enabled, CreatedAt: Time(w.CreatedAt), UpdatedAt: Time(w.UpdatedAt)}
}

// DeliveryJSON is one attempt.
type DeliveryJSON struct {
	ID             string  `json:"id"`
	EventID        string  `json:"eventId"`
	EventType      string  `json:"eventType"`
	Attempt        int     `json:"attempt"`
	Status         string  `json:"status"`
	ResponseStatus *int    `json:"responseStatus"`
	Error          *string `json:"error"`
	DurationMs     *int64  `json:"durationMs"`
	AttemptedAt    *Time   `json:"attemptedAt"`
	NextAttemptAt  *Time   `json:"nextAttemptAt"`
}

func deliveryJSON(cursors *core.CursorCodec, d core.Delivery) DeliveryJSON {
	out := DeliveryJSON{ID: d.ID, EventID: cursors.Encode(d.EventID), EventType: string(d.EventType), Attempt: d.Attempt, Status: string(d.Status)}
	if d.ResponseStatus != 0 {
		out.ResponseStatus = &d.ResponseStatus
	}
	if d.Error != "" {
		out.Error = &d.Error
	}
	if !d.AttemptedAt.IsZero() {
		ms, at := d.Duration.Milliseconds(), Time(d.AttemptedAt)
		out.DurationMs, out.AttemptedAt = &ms, &at
	}
	if !d.NextAttemptAt.IsZero() {
		next := Time(d.NextAttemptAt)
		out.NextAttemptAt = &next
	}
	return out
}

// newWebhookBody is what creating a webhook takes: a new webhook is
// enabled, so "enabled" is an unknown field here (400), as in the OpenAPI.
type newWebhookBody struct {
	URL         *string           `json:"url"`
	EventTypes  *[]core.EventType `json:"eventTypes"`
	MountUIDs   *[]string         `json:"mountUids"`
	Description *string           `json:"description"`
}

func (b newWebhookBody) input() core.WebhookInput {
	return core.WebhookInput{URL: b.URL, EventTypes: b.EventTypes, MountUIDs: b.MountUIDs, Description: b.Description}
}

// webhookBody is what a PATCH takes.
type webhookBody struct {
	newWebhookBody
	Enabled *bool `json:"enabled"`
}

func (b webhookBody) input() core.WebhookInput {
	in := b.newWebhookBody.input()
	in.Enabled = b.Enabled
	return in
}

// decodeWebhook refuses a token without the right before it reads the body.
func decodeWebhook[B any](s *Server, w http.ResponseWriter, r *http.Request, p core.Principal) (B, bool) {
	var body B
	if err := p.Authorize(core.ActionManageWebhooks); err != nil {
		writeError(w, r, s.Logger, err)
		return body, false
	}
	if err := decodeJSON(r, &body); err != nil {
		writeError(w, r, s.Logger, err)
		return body, false
	}
	return body, true
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request, p core.Principal) {
	body, ok := decodeWebhook[newWebhookBody](s, w, r, p)
	if !ok {
		return
	}
	hook, secret, err := s.Webhooks.CreateWebhook(r.Context(), p, body.input())
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusCreated, struct {
		WebhookJSON
		Secret string `json:"secret"`
	}{webhookJSON(hook), secret})
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	hooks, pagination, err := s.Webhooks.ListWebhooks(r.Context(), p, page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]WebhookJSON, len(hooks))
	for i, h := range hooks {
		out[i] = webhookJSON(h)
	}
	writeJSON(w, http.StatusOK, map[string]any{"webhooks": out, "pagination": pagination})
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request, p core.Principal) {
	hook, err := s.Webhooks.Webhook(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, webhookJSON(hook))
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request, p core.Principal) {
	body, ok := decodeWebhook[webhookBody](s, w, r, p)
	if !ok {
		return
	}
	hook, err := s.Webhooks.UpdateWebhook(r.Context(), p, r.PathValue("id"), body.input())
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, webhookJSON(hook))
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request, p core.Principal) {
	if err := s.Webhooks.DeleteWebhook(r.Context(), p, r.PathValue("id")); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) rotateWebhookSecret(w http.ResponseWriter, r *http.Request, p core.Principal) {
	secret, err := s.Webhooks.RotateSecret(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"secret": secret})
}

// WebhookTestJSON is how a test delivery went (docs/api.md, "Webhooks").
type WebhookTestJSON struct {
	Status         string  `json:"status"`
	ResponseStatus *int    `json:"responseStatus"`
	Error          *string `json:"error"`
	DurationMs     int64   `json:"durationMs"`
}

func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request, p core.Principal) {
	d, err := s.Webhooks.TestWebhook(r.Context(), p, r.PathValue("id"))
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := WebhookTestJSON{Status: string(d.Status), DurationMs: d.Duration.Milliseconds()}
	if d.ResponseStatus != 0 {
		out.ResponseStatus = &d.ResponseStatus
	}
	if d.Error != "" {
		out.Error = &d.Error
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) webhookDeliveries(w http.ResponseWriter, r *http.Request, p core.Principal) {
	q := newQuery(r, "currentPage", "pageSize")
	page := q.page(20)
	if err := q.err(); err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	ds, pagination, err := s.Webhooks.Deliveries(r.Context(), p, r.PathValue("id"), page)
	if err != nil {
		writeError(w, r, s.Logger, err)
		return
	}
	out := make([]DeliveryJSON, len(ds))
	for i, d := range ds {
		out[i] = deliveryJSON(s.Cursors, d)
	}
	writeJSON(w, http.StatusOK, map[string]any{"deliveries": out, "pagination": pagination})
}
