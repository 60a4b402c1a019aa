package core

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Webhook is an operator server's endpoint that receives the account's
// events (docs/api.md, "Webhooks").
type Webhook struct {
	ID          string
	AccountID   string
	URL         string
	EventTypes  []EventType // empty: every type
	MountUIDs   []string    // empty: every mount of the account
	Description string
	Enabled     bool
	// SealedSecret is the signing secret sealed under the master key; the
	// secret itself is shown once, at creation and rotation.
	SealedSecret string
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Wants reports whether w is to receive e.
func (w Webhook) Wants(e Event) bool {
	return w.Enabled && e.AccountID == w.AccountID && !e.OccurredAt.Before(w.CreatedAt) &&
		(len(w.EventTypes) == 0 || slices.Contains(w.EventTypes, e.Type)) &&
		(len(w.MountUIDs) == 0 || slices.Contains(w.MountUIDs, e.UID))
}

// WebhookInput is a webhook's writable fields; nil leaves one as it is.
type WebhookInput struct {
	URL         *string
	EventTypes  *[]EventType
	MountUIDs   *[]string
	Description *string
	Enabled     *bool
}

// DeliveryStatus is where one attempt stands.
type DeliveryStatus string

// The delivery statuses.
const (
	DeliveryPending   DeliveryStatus = "PENDING"
	DeliverySucceeded DeliveryStatus = "SUCCEEDED"
	DeliveryFailed    DeliveryStatus = "FAILED"
)

// Delivery is one attempt to deliver one event to one webhook. A failed
// attempt with retries left is followed by a PENDING one.
type Delivery struct {
	ID             string
	WebhookID      string
	AccountID      string
	EventID        Cursor
	EventType      EventType
	Attempt        int
	Status         DeliveryStatus
	ResponseStatus int    // 0: no answer
	Error          string // why the attempt failed
	Duration       time.Duration
	AttemptedAt    time.Time // zero while PENDING
	NextAttemptAt  time.Time // when a PENDING attempt is due; zero after
	// Payload is the body to send, rendered once per event when it was
	// enqueued: the store keeps it once for all the event's webhooks and
	// attempts, and returns it with claimed attempts only (nil when the
	// store has lost it).
	Payload []byte
	// MessageID is the webhook-id a test sends; empty: the event's id
	// (never stored).
	MessageID string
	// Lease names the claim of a PENDING attempt: only its holder records
	// the result, so an attempt made twice (a lease that lapsed) is
	// recorded, and retried, once.
	Lease string
}

// DeliveryResult is what one attempt came to.
type DeliveryResult struct {
	ResponseStatus int
	Error          string
	Duration       time.Duration
	AttemptedAt    time.Time
}

// succeeded reports whether the receiver took the attempt: a 2xx.
func (r DeliveryResult) succeeded() bool {
	return r.Error == "" && r.ResponseStatus >= 200 && r.ResponseStatus < 300
}

// WebhookStore persists webhooks and their deliveries.
type WebhookStore interface {
	// CreateWebhook stores w unless its account already has max webhooks
	// (CONFLICT).
	CreateWebhook(ctx context.Context, w Webhook, max int) error
	// Webhook returns one of the account's webhooks; WEBHOOK_NOT_FOUND for
	// another account's or none.
	Webhook(ctx context.Context, accountID, id string) (Webhook, error)
	ListWebhooks(ctx context.Context, accountID string, p Page) ([]Webhook, int, error)
	// UpdateWebhook stores w's fields (WEBHOOK_NOT_FOUND when gone).
	UpdateWebhook(ctx context.Context, w Webhook) error
	// DeleteWebhook removes a webhook with its deliveries.
	DeleteWebhook(ctx context.Context, accountID, id string) error
	// ListDeliveries lists a webhook's attempts, newest first.
	ListDeliveries(ctx context.Context, accountID, webhookID string, p Page) ([]Delivery, int, error)

	// EnqueueDeliveries reads up to limit events of the log after the
	// dispatch cursor the store keeps, asks plan which deliveries each
	// makes (given the enabled webhooks of its account), stores them and
	// moves the cursor, in one transaction: each event is planned exactly
	// once across replicas. The deliveries plan makes for one event carry
	// one body, which the store keeps once, until no attempt refers to it
	// (whatever the event log's retention). It returns how many events it
	// read; 0 also when another replica is dispatching.
	EnqueueDeliveries(ctx context.Context, limit int, plan func(e Event, hooks []Webhook) ([]Delivery, error)) (int, error)
	// ClaimDeliveries leases up to limit PENDING attempts due by now, for
	// lease, skipping those of the webhooks in skipWebhooks and those of
	// the accounts in skipAccounts. An attempt whose lease lapsed (its
	// replica died) is claimed again.
	ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int, skipWebhooks, skipAccounts []string) ([]Delivery, error)
	// FinishDeliveries records each attempt's result (Status SUCCEEDED or
	// FAILED) and stores its Next attempt when not nil, all in one
	// transaction; each only while its Lease is the attempt's claim (else
	// nothing of it: another replica made the attempt again).
	FinishDeliveries(ctx context.Context, done []FinishedDelivery) error
}

// FinishedDelivery is an attempt made, with the one after it (nil: none).
type FinishedDelivery struct {
	Delivery
	Next *Delivery
}

// Sealer seals secrets under the master key; aad binds a sealed text to
// its owner.
type Sealer interface {
	Seal(plaintext, aad []byte) (string, error)
	Open(sealed string, aad []byte) ([]byte, error)
}

// WebhookTargets decides whether a URL's host may be a webhook target:
// loopback, private, link-local and unspecified addresses are refused
// unless the operator allows them.
type WebhookTargets interface {
	Check(ctx context.Context, u *url.URL) error
}

// WebhookSender makes one attempt: it POSTs payload to url signed with
// secret as Standard Webhooks says, and reports how it went.
type WebhookSender interface {
	Send(ctx context.Context, url, secret string, d Delivery) DeliveryResult
}

// WebhookBody renders an event as the body a webhook receives.
type WebhookBody func(e Event) ([]byte, error)

// The limits of docs/api.md, "Webhooks".
const (
	MaxWebhooksPerAccount = 20
	maxWebhookURL         = 2048
	maxWebhookDescription = 500
	maxWebhookFilter      = 100
	// WebhookTimeout is how long a receiver has to answer.
	WebhookTimeout = 10 * time.Second
)

// DefaultWebhookRetryDelays are the waits before each retry.
var DefaultWebhookRetryDelays = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	30 * time.Minute, time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour}

// WebhookDeps are the ports WebhookService uses.
type WebhookDeps struct {
	Store   WebhookStore
	Sealer  Sealer
	Targets WebhookTargets
	Sender  WebhookSender
	Body    WebhookBody
	Waker   EventWaker
	// Limiter bounds test deliveries (TestWebhook), across replicas.
	Limiter RateLimiter
	// RetryDelays are the waits before each retry; nil: the default.
	RetryDelays WebhookRetryDelays
	Logger      *slog.Logger
}

// WebhookRetryDelays is MOUNTD_WEBHOOK_RETRY_DELAYS.
type WebhookRetryDelays []time.Duration

// WebhookService holds the rules of webhooks and runs their deliveries.
type WebhookService struct {
	WebhookDeps
	now   func() time.Time
	hooks webhookCache
}

// NewWebhookService returns a WebhookService over its ports.
func NewWebhookService(d WebhookDeps) *WebhookService {
	if d.RetryDelays == nil {
		d.RetryDelays = DefaultWebhookRetryDelays
	}
	return &WebhookService{WebhookDeps: d, now: time.Now}
}

// SetClock replaces the service's clock (tests).
func (s *WebhookService) SetClock(now func() time.Time) { s.now = now }

func (s *WebhookService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// secretAAD binds a sealed secret to its webhook.
func secretAAD(id string) []byte { return []byte("webhook:" + id) }

func newWebhookSecret() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// apply checks in and applies it to w.
func (s *WebhookService) apply(ctx context.Context, w *Webhook, in WebhookInput, creating bool) error {
	var v Validation
	if in.URL == nil && creating {
		v.Add("url", "is required")
	}
	if in.URL != nil {
		u, err := url.Parse(*in.URL)
		switch {
		case len(*in.URL) > maxWebhookURL:
			v.Add("url", "is longer than %d characters", maxWebhookURL)
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil:
			v.Add("url", "must be an absolute http:// or https:// URL without credentials")
		case !validPort(u):
			v.Add("url", "must have a port from 1 to 65535, or none")
		default:
			if err := s.Targets.Check(ctx, u); err != nil {
				v.Add("url", "%s", err.Error())
			}
			w.URL = *in.URL
		}
	}
	if in.EventTypes != nil {
		types := []EventType{}
		for _, t := range *in.EventTypes {
			if !KnownEventType(t) {
				v.Add("eventTypes", "must name event types of the API")
				break
			}
			if !slices.Contains(types, t) { // types holds known types only: linear
				types = append(types, t)
			}
		}
		w.EventTypes = types
	}
	if in.MountUIDs != nil {
		// Over the limit the list is refused unread: de-duplicating it
		// is quadratic, and a request may carry any number of ids.
		if len(*in.MountUIDs) > maxWebhookFilter {
			v.Add("mountUids", "holds at most %d mounts", maxWebhookFilter)
		} else {
			uids := []string{}
			for _, uid := range *in.MountUIDs {
				if !ValidMountUID(uid) {
					v.Add("mountUids", "must hold mount uids")
					break
				}
				if !slices.Contains(uids, uid) {
					uids = append(uids, uid)
				}
			}
			w.MountUIDs = uids
		}
	}
	if in.Description != nil {
		checkText(&v, "description", in.Description, maxWebhookDescription)
		w.Description = *in.Description
	}
	if in.Enabled != nil {
		w.Enabled = *in.Enabled
	}
	return v.Err()
}

// validPort reports whether u names no port or one from 1 to 65535: the
// parser accepts any run of digits, and an empty one after a colon.
func validPort(u *url.URL) bool {
	p := u.Port()
	if p == "" {
		return !strings.HasSuffix(u.Host, ":")
	}
	n, err := strconv.Atoi(p)
	return err == nil && len(p) <= 5 && n >= 1 && n <= 65535
}

// CreateWebhook adds a webhook and returns it with its secret, which is
// shown only here and at rotation.
func (s *WebhookService) CreateWebhook(ctx context.Context, p Principal, in WebhookInput) (Webhook, string, error) {
	if err := p.Authorize(ActionManageWebhooks); err != nil {
		return Webhook{}, "", err
	}
	now := s.clock()
	w := Webhook{ID: "wh_" + randomHex(12), AccountID: p.AccountID, EventTypes: []EventType{}, MountUIDs: []string{},
		Enabled: true, CreatedAt: now, UpdatedAt: now}
	if err := s.apply(ctx, &w, in, true); err != nil {
		return Webhook{}, "", err
	}
	secret := newWebhookSecret()
	sealed, err := s.Sealer.Seal([]byte(secret), secretAAD(w.ID))
	if err != nil {
		return Webhook{}, "", err
	}
	w.SealedSecret = sealed
	actx := byPrincipal(ctx, p, now, AuditWebhookCreate, AuditTarget("webhook", w.ID), webhookDetails(w, in))
	if err := s.Store.CreateWebhook(actx, w, MaxWebhooksPerAccount); err != nil {
		return Webhook{}, "", err
	}
	return w, secret, nil
}

// Webhook returns one of the account's webhooks.
func (s *WebhookService) Webhook(ctx context.Context, p Principal, id string) (Webhook, error) {
	if err := p.Authorize(ActionManageWebhooks); err != nil {
		return Webhook{}, err
	}
	return s.Store.Webhook(ctx, p.AccountID, id)
}

// ListWebhooks lists the account's webhooks.
func (s *WebhookService) ListWebhooks(ctx context.Context, p Principal, page Page) ([]Webhook, Pagination, error) {
	if err := p.Authorize(ActionManageWebhooks); err != nil {
		return nil, Pagination{}, err
	}
	hooks, total, err := s.Store.ListWebhooks(ctx, p.AccountID, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return hooks, NewPagination(page, total), nil
}

// UpdateWebhook applies in to a webhook.
func (s *WebhookService) UpdateWebhook(ctx context.Context, p Principal, id string, in WebhookInput) (Webhook, error) {
	w, err := s.Webhook(ctx, p, id)
	if err != nil {
		return Webhook{}, err
	}
	if err := s.apply(ctx, &w, in, false); err != nil {
		return Webhook{}, err
	}
	w.UpdatedAt = s.clock()
	defer s.hooks.invalidate()
	return w, s.Store.UpdateWebhook(byPrincipal(ctx, p, w.UpdatedAt, AuditWebhookUpdate, AuditTarget("webhook", w.ID), webhookDetails(w, in)), w)
}

// DeleteWebhook removes a webhook; its pending attempts go with it.
func (s *WebhookService) DeleteWebhook(ctx context.Context, p Principal, id string) error {
	if err := p.Authorize(ActionManageWebhooks); err != nil {
		return err
	}
	defer s.hooks.invalidate()
	return s.Store.DeleteWebhook(byPrincipal(ctx, p, s.clock(), AuditWebhookDelete, AuditTarget("webhook", id), nil), p.AccountID, id)
}

// RotateSecret gives a webhook a new secret and returns it; the old one
// signs nothing from then on.
func (s *WebhookService) RotateSecret(ctx context.Context, p Principal, id string) (string, error) {
	w, err := s.Webhook(ctx, p, id)
	if err != nil {
		return "", err
	}
	secret := newWebhookSecret()
	if w.SealedSecret, err = s.Sealer.Seal([]byte(secret), secretAAD(w.ID)); err != nil {
		return "", err
	}
	w.UpdatedAt = s.clock()
	defer s.hooks.invalidate()
	// The entry says that the secret changed, never what it is.
	return secret, s.Store.UpdateWebhook(byPrincipal(ctx, p, w.UpdatedAt, AuditWebhookRotateSecret, AuditTarget("webhook", w.ID), nil), w)
}

// Deliveries lists a webhook's attempts, newest first.
func (s *WebhookService) Deliveries(ctx context.Context, p Principal, id string, page Page) ([]Delivery, Pagination, error) {
	if _, err := s.Webhook(ctx, p, id); err != nil {
		return nil, Pagination{}, err
	}
	ds, total, err := s.Store.ListDeliveries(ctx, p.AccountID, id, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return ds, NewPagination(page, total), nil
}

// errSecretSealed is an attempt's error when its webhook's secret cannot
// be opened.
const errSecretSealed = "the webhook's secret cannot be opened (is this the master key it was sealed with?)"

// WebhookTestType is the type of the body TestWebhook sends: no event has
// it, so a receiver that switches on the type can tell a test apart.
const WebhookTestType = "WEBHOOK_TEST"

// WebhookTestRate bounds the tests of one webhook: a test is an outbound
// request on demand, which an owner's token must not turn into a flood
// towards a third party.
var WebhookTestRate = Rate{Limit: 1, Period: 5 * time.Second}

// TestWebhook makes one attempt now to a webhook, enabled or not, with a
// body of type WebhookTestType, signed and sent as deliveries are, and
// returns how it went: it is not retried, not recorded among the
// deliveries, and no event is logged. At most WebhookTestRate per webhook
// (RATE_LIMITED with the wait).
func (s *WebhookService) TestWebhook(ctx context.Context, p Principal, id string) (Delivery, error) {
	w, err := s.Webhook(ctx, p, id)
	if err != nil {
		return Delivery{}, err
	}
	decision, err := s.Limiter.Allow(ctx, "webhook-test:"+w.ID, WebhookTestRate)
	if err != nil {
		// Unlike the API limit, this one fails closed: a test is a
		// convenience, and unbounded outbound requests are the harm.
		s.Logger.WarnContext(ctx, "the rate limiter is unavailable; webhook test refused", "err", err)
		return Delivery{}, &Error{Code: CodeUnavailable, Message: "the rate limiter is unavailable; retry shortly", RetryAfter: UnavailableRetry}
	}
	if !decision.Allowed {
		return Delivery{}, &Error{Code: CodeRateLimited, RetryAfter: decision.RetryAfter,
			Message: fmt.Sprintf("a webhook may be tested once every %d seconds; retry later", int(WebhookTestRate.Period/time.Second))}
	}
	now := s.clock()
	body, err := json.Marshal(struct {
		Type      string `json:"type"`
		Timestamp string `json:"timestamp"`
		Data      any    `json:"data"`
	}{WebhookTestType, FormatTime(now), map[string]string{"webhookId": w.ID,
		"message": "a test delivery from mountd: no event happened"}})
	if err != nil {
		return Delivery{}, err
	}
	d := Delivery{ID: "whd_" + randomHex(12), WebhookID: w.ID, AccountID: w.AccountID, EventType: WebhookTestType,
		Attempt: 1, MessageID: "msg_test_" + randomHex(12), Payload: body}
	var res DeliveryResult
	if secret, err := s.Sealer.Open(w.SealedSecret, secretAAD(w.ID)); err != nil {
		s.Logger.ErrorContext(ctx, "open webhook secret failed", "webhook", w.ID, "err", err)
		res = DeliveryResult{Error: errSecretSealed, AttemptedAt: now}
	} else {
		res = s.Sender.Send(ctx, w.URL, string(secret), d)
	}
	d.ResponseStatus, d.Error, d.Duration, d.AttemptedAt = res.ResponseStatus, res.Error, res.Duration, res.AttemptedAt
	d.Status = DeliverySucceeded
	if !res.succeeded() {
		d.Status = DeliveryFailed
		if d.Error == "" {
			d.Error = fmt.Sprintf("the receiver answered %d", d.ResponseStatus)
		}
	}
	return d, nil
}

// Delivery workers: how many attempts a replica makes at once, and at most
// how many of them to one webhook and to one account's webhooks, so that
// slow or dead receivers hold a few workers and never the others'
// deliveries.
const (
	// DeliveryWorkers are the workers all accounts share.
	DeliveryWorkers = 128
	// deliveriesPerWebhook bounds one receiver's concurrent requests. It
	// was 4: on a busy machine an attempt to a receiver that answers at
	// once takes 2–6 ms from start to result (mostly waiting for a
	// core), so one webhook got 700–2,000 deliveries/s, less than a
	// fleet's burst of reports (docs/performance.md, "Webhooks: a fleet's
	// deliveries").
	deliveriesPerWebhook = 16
	// deliveriesPerAccount is a quarter of the shared workers, twice a
	// webhook's cap: one receiver that hangs leaves the account's other
	// webhooks half its width. The cap per webhook alone is not enough:
	// an account's MaxWebhooksPerAccount (20) receivers that never answer
	// would hold every worker, for WebhookTimeout each.
	deliveriesPerAccount = DeliveryWorkers / 4
	// maxDeliveriesInFlight bounds everything a replica has in flight:
	// the shared workers, plus one worker of its own for each account
	// that had nothing in flight (deliverySlots). Four accounts whose
	// receivers hang fill the shared workers; the account's own worker
	// is what serves a healthy account meanwhile, whatever the number of
	// hanging ones, up to 192 of them at once.
	maxDeliveriesInFlight = DeliveryWorkers + 192
	deliveryLease         = WebhookTimeout + 5*time.Second
	// deliveryHold is how long a claimed attempt may wait for a free slot
	// of its webhook or account (one claim may bring more of them than
	// the caps let start): started later it could outlast its lease, so
	// it is dropped instead, and claimed again once the lease lapses.
	deliveryHold = deliveryLease - WebhookTimeout - time.Second
	deliveryPoll = time.Second
	enqueueBatch = 500
	enqueueEvery = 20 * time.Millisecond
	// deliveryClaimBatch bounds one claim. A claim is made when a webhook
	// has fewer than its cap in flight or held, and cost 4–16 ms on a busy
	// machine: with 32 a claim, one webhook's deliveries went at the pace
	// of its claims.
	deliveryClaimBatch = 128
	// idleClaimBatch is how many attempts one claim for accounts with
	// nothing in flight leases, when the shared workers are all taken.
	idleClaimBatch = 8
)

// deliverySlots is the rule of which attempts a replica starts: at most
// deliveriesPerWebhook in flight to one webhook and deliveriesPerAccount
// to one account; an account with nothing in flight may always start one
// (its own worker, up to maxDeliveriesInFlight in all); every other
// attempt takes one of the DeliveryWorkers shared workers. So accounts
// whose receivers hang can take the shared workers, at most
// deliveriesPerAccount each, and never an account's first attempt: a
// healthy account is served at once whatever the number of hanging ones.
// Not safe for concurrent use.
type deliverySlots struct {
	byWebhook map[string]int // in flight
	byAccount map[string]int // in flight
	total     int
	waiting   []heldDelivery // claimed, waiting for a slot
}

type heldDelivery struct {
	d  Delivery
	at time.Time // claimed
}

func newDeliverySlots() *deliverySlots {
	return &deliverySlots{byWebhook: map[string]int{}, byAccount: map[string]int{}}
}

// shared counts the attempts on shared workers: all but each account's
// first.
func (p *deliverySlots) shared() int { return p.total - len(p.byAccount) }

// start takes a slot for d if the rule lets it start now.
func (p *deliverySlots) start(d Delivery) bool {
	n := p.byAccount[d.AccountID]
	if p.byWebhook[d.WebhookID] >= deliveriesPerWebhook || n >= deliveriesPerAccount || p.total >= maxDeliveriesInFlight ||
		n > 0 && p.shared() >= DeliveryWorkers {
		return false
	}
	p.byWebhook[d.WebhookID]++
	p.byAccount[d.AccountID]++
	p.total++
	return true
}

// finish gives d's slot back.
func (p *deliverySlots) finish(d Delivery) {
	if p.byWebhook[d.WebhookID]--; p.byWebhook[d.WebhookID] <= 0 {
		delete(p.byWebhook, d.WebhookID)
	}
	if p.byAccount[d.AccountID]--; p.byAccount[d.AccountID] <= 0 {
		delete(p.byAccount, d.AccountID)
	}
	p.total--
}

// hold keeps d, claimed at now, until a slot frees.
func (p *deliverySlots) hold(d Delivery, now time.Time) {
	p.waiting = append(p.waiting, heldDelivery{d: d, at: now})
}

// startWaiting takes slots for the held attempts that fit, oldest first,
// drops those held longer than deliveryHold (their leases lapse) and
// returns those to start.
func (p *deliverySlots) startWaiting(now time.Time) []Delivery {
	var started []Delivery
	kept := p.waiting[:0]
	for _, h := range p.waiting {
		switch {
		case now.Sub(h.at) > deliveryHold:
		case p.start(h.d):
			started = append(started, h.d)
		default:
			kept = append(kept, h)
		}
	}
	clear(p.waiting[len(kept):])
	p.waiting = kept
	return started
}

// claimQuery says what to lease next: ok false when nothing may be. While
// shared workers are free, up to that many attempts past the webhooks and
// accounts at their cap; once they are all taken, a few attempts of
// accounts with nothing in flight or held, for their own workers.
func (p *deliverySlots) claimQuery() (limit int, skipWebhooks, skipAccounts []string, ok bool) {
	room := maxDeliveriesInFlight - p.total - len(p.waiting)
	hooks, accounts := maps.Clone(p.byWebhook), maps.Clone(p.byAccount)
	for _, h := range p.waiting {
		hooks[h.d.WebhookID]++
		accounts[h.d.AccountID]++
	}
	if free := DeliveryWorkers - p.shared() - len(p.waiting); free > 0 && room > 0 {
		for id, n := range hooks {
			if n >= deliveriesPerWebhook {
				skipWebhooks = append(skipWebhooks, id)
			}
		}
		for id, n := range accounts {
			if n >= deliveriesPerAccount {
				skipAccounts = append(skipAccounts, id)
			}
		}
		return min(free, room, deliveryClaimBatch), skipWebhooks, skipAccounts, true
	}
	// What a claim of idle accounts brings beyond each one's first waits:
	// bounded like the shared workers.
	if room <= 0 || len(p.waiting) >= DeliveryWorkers {
		return 0, nil, nil, false
	}
	return min(room, idleClaimBatch), nil, slices.Collect(maps.Keys(accounts)), true
}

// claimSkips are the webhooks and accounts a claim skipped.
type claimSkips struct{ webhooks, accounts []string }

// covers reports whether a claim skipping webhooks and accounts skips
// everything k skipped (and so finds a part of what k's claim found);
// false for a nil k.
func (k *claimSkips) covers(webhooks, accounts []string) bool {
	if k == nil {
		return false
	}
	for _, id := range k.webhooks {
		if !slices.Contains(webhooks, id) {
			return false
		}
	}
	for _, id := range k.accounts {
		if !slices.Contains(accounts, id) {
			return false
		}
	}
	return true
}

// plan makes the first attempt of e for each webhook that wants it.
func (s *WebhookService) plan(e Event, hooks []Webhook) ([]Delivery, error) {
	var out []Delivery
	var body []byte
	for _, w := range hooks {
		if !w.Wants(e) {
			continue
		}
		if body == nil {
			var err error
			if body, err = s.Body(e); err != nil {
				return nil, err
			}
		}
		out = append(out, Delivery{ID: "whd_" + randomHex(12), WebhookID: w.ID, AccountID: w.AccountID, EventID: e.ID,
			EventType: e.Type, Attempt: 1, Status: DeliveryPending, NextAttemptAt: s.clock(), Payload: body})
	}
	return out, nil
}

// RunDeliveries turns the event log into deliveries and makes them until
// ctx ends. A planner, woken with the event feed (and polling), enqueues
// what the log gained; a claimer leases due attempts and starts them as
// deliverySlots lets them; an attempt that finishes starts the held ones
// that now fit itself. The three run side by side: planning a batch of
// 500 events took 100–200 ms under load, and attempts started only between
// plans and claims, so a burst to one webhook went at the pace of that
// loop rather than of its receiver. An attempt in flight when ctx ends is
// recorded as interrupted, with the next one due at once (at least once).
func (s *WebhookService) RunDeliveries(ctx context.Context) error {
	wakeups, err := s.Waker.Wakeups(ctx)
	if err != nil {
		return err
	}
	var (
		mu    sync.Mutex
		slots = newDeliverySlots()
		wg    sync.WaitGroup
		// claims asks the claimer for a claim: an attempt finished, or
		// the planner stored attempts or polled.
		claims = make(chan struct{}, 1)
		// planned says the planner ran since the claimer last looked.
		planned atomic.Bool
		// Results go to one recorder, which writes those that queued
		// while it wrote the last ones in one statement: a burst to one
		// webhook (then 4 in flight) cost a write per attempt, and its
		// slot was held through it.
		results  = make(chan FinishedDelivery, maxDeliveriesInFlight)
		recorded = make(chan struct{})
		planner  = make(chan struct{})
	)
	poke := func() {
		select {
		case claims <- struct{}{}:
		default:
		}
	}
	go func() { defer close(recorded); s.record(ctx, results) }()
	go func() { defer close(planner); s.planDeliveries(ctx, wakeups, func() { planned.Store(true); poke() }) }()
	defer func() { <-planner; wg.Wait(); close(results); <-recorded }()
	// send makes d on a goroutine of its own; its slot is taken, and given
	// back once the result is queued (a full queue holds it, and so the
	// claims, until the recorder catches up); then the held attempts that
	// fit start at once, without waiting for the claimer.
	var send func(d Delivery)
	send = func(d Delivery) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if f, ok := s.attempt(ctx, d); ok {
				results <- f
			}
			mu.Lock()
			slots.finish(d)
			for _, h := range slots.startWaiting(s.clock()) {
				send(h)
			}
			mu.Unlock()
			poke()
		}()
	}
	// drained is the skip lists of the last claim that found fewer due
	// attempts than it asked for, nil when there was none since the
	// planner last ran: while a claim would skip at least as much, it
	// would find nothing (new attempts come with a plan, due retries and
	// lapsed leases with the planner's poll). A burst to one webhook kept
	// at its cap made a claim that found nothing after every attempt.
	var drained *claimSkips
	// claim starts the held attempts that fit, then leases due ones while
	// the slots have room; what a claim brings beyond the caps is held.
	claim := func() {
		for {
			mu.Lock()
			now := s.clock()
			for _, d := range slots.startWaiting(now) {
				send(d)
			}
			limit, skipWebhooks, skipAccounts, ok := slots.claimQuery()
			mu.Unlock()
			if !ok || drained.covers(skipWebhooks, skipAccounts) {
				break
			}
			claimed, err := s.Store.ClaimDeliveries(ctx, now, deliveryLease, limit, skipWebhooks, skipAccounts)
			if err != nil {
				if ctx.Err() == nil {
					s.Logger.WarnContext(ctx, "claim webhook deliveries failed", "err", err)
				}
				break
			}
			mu.Lock()
			for _, d := range claimed {
				if slots.start(d) {
					send(d)
				} else {
					slots.hold(d, now)
				}
			}
			mu.Unlock()
			if len(claimed) < limit {
				drained = &claimSkips{webhooks: skipWebhooks, accounts: skipAccounts}
				break
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-claims:
		}
		if planned.Swap(false) {
			drained = nil
		}
		claim()
	}
}

// planDeliveries enqueues what the event log gained until ctx ends: at
// once, then every deliveryPoll, and enqueueEvery after a wake-up at the
// soonest; after each round it calls planned, also when nothing was
// planned (due retries and lapsed leases are claimed on the poll).
func (s *WebhookService) planDeliveries(ctx context.Context, wakeups <-chan Cursor, planned func()) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	next := time.Now()
	var lastEnqueue time.Time
	for {
		timer.Reset(time.Until(next))
		select {
		case <-ctx.Done():
			return
		case <-wakeups:
			// Under steady ingest, wake-ups come with every event: plan
			// them in batches, not one write transaction each.
			if due := lastEnqueue.Add(enqueueEvery); due.Before(next) {
				next = due
			}
			continue
		case <-timer.C:
		}
		lastEnqueue = time.Now()
		for {
			n, err := s.Store.EnqueueDeliveries(ctx, enqueueBatch, s.plan)
			if err != nil {
				if ctx.Err() == nil {
					s.Logger.WarnContext(ctx, "enqueue webhook deliveries failed", "err", err)
				}
				break
			}
			// A backlog is planned whole before it is claimed: claims
			// beside its planning slowed the planning more than they
			// brought deliveries forward (a backlog of 5,000 drained in
			// 7.7 and 9.1 s against 6.2 and 5.4 s, 2026-11-29).
			if n < enqueueBatch {
				break
			}
		}
		planned()
		next = time.Now().Add(deliveryPoll)
	}
}

// recordBatch bounds the attempts one FinishDeliveries records.
const recordBatch = 256

// record stores the results it is given until results is closed: each
// time, all that queued while it stored the previous ones, so that a
// single attempt waits for no batch to fill.
func (s *WebhookService) record(ctx context.Context, results <-chan FinishedDelivery) {
	batch := make([]FinishedDelivery, 0, recordBatch)
	for f := range results {
		batch = append(batch[:0], f)
	fill:
		for len(batch) < recordBatch {
			select {
			case f, ok := <-results:
				if !ok {
					break fill
				}
				batch = append(batch, f)
			default:
				break fill
			}
		}
		// Also after ctx ended: an interrupted attempt is recorded so.
		if err := s.Store.FinishDeliveries(context.WithoutCancel(ctx), batch); err != nil {
			s.Logger.WarnContext(ctx, "record webhook attempts failed", "attempts", len(batch), "first", batch[0].ID, "err", err)
		}
		if m, ok := s.Waker.(FleetMeter); ok {
			for _, f := range batch {
				m.DeliveryFinished(f.Status)
			}
		}
	}
}

// attempt makes one attempt and returns its result, with the next one
// when the attempt failed and a retry is left; ok false when no attempt
// was made.
func (s *WebhookService) attempt(ctx context.Context, d Delivery) (f FinishedDelivery, ok bool) {
	h, err := s.hooks.get(d, func() (cachedWebhook, error) {
		w, err := s.Store.Webhook(ctx, d.AccountID, d.WebhookID)
		if err != nil {
			return cachedWebhook{}, err
		}
		secret, err := s.Sealer.Open(w.SealedSecret, secretAAD(w.ID))
		return cachedWebhook{w: w, secret: string(secret), openErr: err}, nil
	})
	if err != nil {
		if ErrorCode(err) != CodeWebhookNotFound && ctx.Err() == nil {
			s.Logger.WarnContext(ctx, "read webhook failed", "webhook", d.WebhookID, "err", err)
		}
		return f, false // deleted: its deliveries went with it; otherwise the lease lapses
	}
	if ctx.Err() != nil {
		return f, false // shutting down before the attempt: the lease lapses, it stays pending
	}
	var res DeliveryResult
	w, secret, err := h.w, h.secret, h.openErr
	retry := w.Enabled
	switch {
	case d.Payload == nil:
		// Cannot happen through the API (a body goes with the event's
		// last attempt); a retry would fail alike.
		s.Logger.ErrorContext(ctx, "webhook body missing", "delivery", d.ID, "event", d.EventID.Internal())
		res, retry = DeliveryResult{Error: "the event's body is no longer stored", AttemptedAt: s.clock()}, false
	case err != nil:
		// Recorded like a failed send, so the operator sees it in the
		// deliveries; the retries come as usual (a restored master key
		// lets a later one through).
		s.Logger.ErrorContext(ctx, "open webhook secret failed", "webhook", w.ID, "err", err)
		res = DeliveryResult{Error: errSecretSealed, AttemptedAt: s.clock()}
	case w.Enabled:
		res = s.Sender.Send(ctx, w.URL, secret, d)
	default:
		res = DeliveryResult{Error: "the webhook is disabled", AttemptedAt: s.clock()}
	}
	// Interrupted by shutdown: recorded as failed, with the next attempt
	// due at once for whichever replica runs next, whatever retries are
	// left (the receiver may never have had the request).
	succeeded := res.succeeded()
	interrupted := ctx.Err() != nil && !succeeded
	if interrupted {
		res.ResponseStatus, res.Error = 0, "interrupted: the server stopped during the attempt"
	}
	d.ResponseStatus, d.Error, d.Duration, d.AttemptedAt = res.ResponseStatus, res.Error, res.Duration, res.AttemptedAt
	d.NextAttemptAt = time.Time{}
	var next *Delivery
	if succeeded {
		d.Status = DeliverySucceeded
	} else {
		d.Status = DeliveryFailed
		if d.Error == "" {
			d.Error = fmt.Sprintf("the receiver answered %d", res.ResponseStatus)
		}
		retryAt := time.Time{}
		switch {
		case interrupted:
			retryAt = res.AttemptedAt
		case d.Attempt <= len(s.RetryDelays) && retry:
			retryAt = res.AttemptedAt.Add(s.RetryDelays[d.Attempt-1])
		}
		if !retryAt.IsZero() {
			n := d
			n.ID, n.Attempt, n.Status = "whd_"+randomHex(12), d.Attempt+1, DeliveryPending
			n.ResponseStatus, n.Error, n.Duration, n.AttemptedAt = 0, "", 0, time.Time{}
			n.NextAttemptAt = retryAt
			next = &n
		}
	}
	return FinishedDelivery{Delivery: d, Next: next}, true
}

// ParseRetryDelays reads MOUNTD_WEBHOOK_RETRY_DELAYS: durations separated
// by commas, each positive.
func ParseRetryDelays(s string) (WebhookRetryDelays, error) {
	var out WebhookRetryDelays
	for _, part := range strings.Split(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("webhook retry delays: %q is not a positive duration", part)
		}
		out = append(out, d)
	}
	return out, nil
}

// webhookDetails are the fields in gave, as w holds them now; the URL
// without its query, which may carry a receiver's token.
func webhookDetails(w Webhook, in WebhookInput) map[string]any {
	d := map[string]any{}
	if in.URL != nil {
		d["url"] = redactURL(w.URL)
	}
	if in.EventTypes != nil {
		d["eventTypes"] = w.EventTypes
	}
	if in.MountUIDs != nil {
		d["mountUids"] = w.MountUIDs
	}
	if in.Description != nil {
		d["description"] = w.Description
	}
	if in.Enabled != nil {
		d["enabled"] = w.Enabled
	}
	return d
}

// webhookFresh is how long the dispatcher uses a webhook it read (URL,
// secret, enabled) before reading it again: a burst to one webhook read it
// once per attempt, a round trip on each attempt's path. A change made on
// this replica is seen by the next attempt (invalidate); one made on
// another replica by attempts started webhookFresh after it at the latest
// (docs/api.md, "Webhooks").
const webhookFresh = 100 * time.Millisecond

// cachedWebhook is a webhook as the dispatcher read it, its secret opened.
type cachedWebhook struct {
	w       Webhook
	secret  string
	openErr error // the secret could not be opened
	gen     uint64
	readAt  time.Time
}

// webhookCache keeps the webhooks attempts were made to for webhookFresh.
// Safe for concurrent use.
type webhookCache struct {
	mu      sync.Mutex
	entries map[string]cachedWebhook
	// gen counts the changes made on this replica: an entry read before
	// one (the read may have begun before the change committed) is stale.
	gen uint64
}

// invalidate forgets every webhook read so far; called once a change is
// stored, before it is acknowledged.
func (c *webhookCache) invalidate() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.entries)
}

// get returns d's webhook, read with read unless one read less than
// webhookFresh ago, with no change on this replica since, is kept.
// Errors are not kept.
func (c *webhookCache) get(d Delivery, read func() (cachedWebhook, error)) (cachedWebhook, error) {
	now := time.Now() // the real clock: tests that fix the service's clock would keep entries for ever
	c.mu.Lock()
	h, ok := c.entries[d.WebhookID]
	gen := c.gen
	c.mu.Unlock()
	if ok && h.gen == gen && now.Sub(h.readAt) < webhookFresh && h.w.AccountID == d.AccountID {
		return h, nil
	}
	h, err := read()
	if err != nil {
		return h, err
	}
	h.gen, h.readAt = gen, now
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= maxDeliveriesInFlight {
		// Bounded by the attempts in flight; an entry that is not in use
		// any more is worth nothing after webhookFresh.
		c.entries = map[string]cachedWebhook{}
	}
	if c.gen == gen {
		c.entries[d.WebhookID] = h
	}
	return h, nil
}
