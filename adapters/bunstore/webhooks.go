package bunstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.WebhookStore = (*Store)(nil)

type webhookRow struct {
	bun.BaseModel `bun:"table:webhooks"`
	ID            string `bun:"id,pk"`
	AccountID     string `bun:"account_id"`
	URL           string `bun:"url"`
	EventTypes    string `bun:"event_types"`
	MountUIDs     string `bun:"mount_uids"`
	Description   string `bun:"description"`
	Enabled       bool   `bun:"enabled"`
	SealedSecret  string `bun:"sealed_secret"`
	CreatedAt     int64  `bun:"created_at"`
	UpdatedAt     int64  `bun:"updated_at"`
}

func toWebhookRow(w core.Webhook) (*webhookRow, error) {
	types, err := json.Marshal(w.EventTypes)
	if err != nil {
		return nil, err
	}
	uids, err := json.Marshal(w.MountUIDs)
	if err != nil {
		return nil, err
	}
	return &webhookRow{ID: w.ID, AccountID: w.AccountID, URL: w.URL, EventTypes: string(types), MountUIDs: string(uids),
		Description: w.Description, Enabled: w.Enabled, SealedSecret: w.SealedSecret,
		CreatedAt: millis(w.CreatedAt), UpdatedAt: millis(w.UpdatedAt)}, nil
}

func (r *webhookRow) toWebhook() (core.Webhook, error) {
	w := core.Webhook{ID: r.ID, AccountID: r.AccountID, URL: r.URL, Description: r.Description, Enabled: r.Enabled,
		SealedSecret: r.SealedSecret, CreatedAt: fromMillis(r.CreatedAt), UpdatedAt: fromMillis(r.UpdatedAt)}
	if err := json.Unmarshal([]byte(r.EventTypes), &w.EventTypes); err != nil {
		return w, fmt.Errorf("webhook %s: event types: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(r.MountUIDs), &w.MountUIDs); err != nil {
		return w, fmt.Errorf("webhook %s: mount uids: %w", r.ID, err)
	}
	return w, nil
}

type deliveryRow struct {
	bun.BaseModel  `bun:"table:webhook_deliveries"`
	ID             string         `bun:"id,pk"`
	WebhookID      string         `bun:"webhook_id"`
	AccountID      string         `bun:"account_id"`
	EventID        string         `bun:"event_id"`
	EventType      string         `bun:"event_type"`
	Attempt        int            `bun:"attempt"`
	Status         string         `bun:"status"`
	ResponseStatus int            `bun:"response_status"`
	Error          string         `bun:"error"`
	DurationMs     int64          `bun:"duration_ms"`
	AttemptedAt    sql.NullInt64  `bun:"attempted_at"`
	NextAttemptAt  sql.NullInt64  `bun:"next_attempt_at"`
	Lease          sql.NullString `bun:"lease"`
	LeaseUntil     sql.NullInt64  `bun:"lease_until"`
}

// bodyRow is the body of an event's deliveries, stored once for all its
// webhooks and attempts.
type bodyRow struct {
	bun.BaseModel `bun:"table:webhook_bodies"`
	EventID       string `bun:"event_id,pk"`
	Body          string `bun:"body"`
}

func optNull(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: millis(t), Valid: true}
}

func toDeliveryRow(d core.Delivery) *deliveryRow {
	return &deliveryRow{ID: d.ID, WebhookID: d.WebhookID, AccountID: d.AccountID, EventID: d.EventID.Internal(),
		EventType: string(d.EventType), Attempt: d.Attempt, Status: string(d.Status), ResponseStatus: d.ResponseStatus,
		Error: d.Error, DurationMs: d.Duration.Milliseconds(), AttemptedAt: optNull(d.AttemptedAt),
		NextAttemptAt: optNull(d.NextAttemptAt)}
}

func (r *deliveryRow) toDelivery() core.Delivery {
	eventID, _ := core.ParseInternalCursor(r.EventID)
	d := core.Delivery{ID: r.ID, WebhookID: r.WebhookID, AccountID: r.AccountID, EventID: eventID,
		EventType: core.EventType(r.EventType), Attempt: r.Attempt, Status: core.DeliveryStatus(r.Status),
		ResponseStatus: r.ResponseStatus, Error: r.Error, Duration: time.Duration(r.DurationMs) * time.Millisecond,
		Lease: r.Lease.String}
	if r.AttemptedAt.Valid {
		d.AttemptedAt = fromMillis(r.AttemptedAt.Int64)
	}
	if r.NextAttemptAt.Valid {
		d.NextAttemptAt = fromMillis(r.NextAttemptAt.Int64)
	}
	return d
}

func webhookNotFound(id string) error {
	return core.Errorf(core.CodeWebhookNotFound, "webhook %q not found", id)
}

// CreateWebhook implements core.WebhookStore. Counting and inserting in
// one statement keeps the limit under concurrent creations (SQLite has one
// writer; on PostgreSQL the account row is locked first).
func (s *Store) CreateWebhook(ctx context.Context, w core.Webhook, max int) error {
	row, err := toWebhookRow(w)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if s.postgres {
			if _, err := tx.NewRaw(`SELECT id FROM accounts WHERE id = ? FOR UPDATE`, w.AccountID).Exec(ctx); err != nil {
				return err
			}
		}
		n, err := tx.NewSelect().Model((*webhookRow)(nil)).Where("account_id = ?", w.AccountID).Count(ctx)
		if err != nil {
			return err
		}
		if n >= max {
			return core.Errorf(core.CodeConflict, "an account holds at most %d webhooks", max)
		}
		if _, err = tx.NewInsert().Model(row).Exec(ctx); err != nil {
			return translate(err, core.CodeWebhookNotFound, "webhook")
		}
		return s.recordAudit(ctx, tx)
	})
}

// Webhook implements core.WebhookStore.
func (s *Store) Webhook(ctx context.Context, accountID, id string) (core.Webhook, error) {
	var row webhookRow
	if err := s.db.NewSelect().Model(&row).Where("id = ? AND account_id = ?", id, accountID).Scan(ctx); err != nil {
		if err == sql.ErrNoRows {
			return core.Webhook{}, webhookNotFound(id)
		}
		return core.Webhook{}, err
	}
	return row.toWebhook()
}

// ListWebhooks implements core.WebhookStore: oldest first.
func (s *Store) ListWebhooks(ctx context.Context, accountID string, p core.Page) ([]core.Webhook, int, error) {
	var rows []webhookRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("account_id = ?", accountID).
			Order("created_at", "id").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.Webhook, len(rows))
	for i := range rows {
		if out[i], err = rows[i].toWebhook(); err != nil {
			return nil, 0, err
		}
	}
	return out, total, nil
}

// UpdateWebhook implements core.WebhookStore.
func (s *Store) UpdateWebhook(ctx context.Context, w core.Webhook) error {
	row, err := toWebhookRow(w)
	if err != nil {
		return err
	}
	return s.writeAudited(ctx, func(ctx context.Context, db bun.IDB) error {
		res, err := db.NewUpdate().Model(row).
			Column("url", "event_types", "mount_uids", "description", "enabled", "sealed_secret", "updated_at").
			Where("id = ? AND account_id = ?", w.ID, w.AccountID).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return webhookNotFound(w.ID)
		}
		return nil
	})
}

// DeleteWebhook implements core.WebhookStore; the schema cascades to the
// deliveries. The bodies of its attempts that no other webhook's attempt
// refers to go first, in the same transaction: a cost in proportion to the
// cascade's.
func (s *Store) DeleteWebhook(ctx context.Context, accountID, id string) error {
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		exists, err := tx.NewSelect().Model((*webhookRow)(nil)).Where("id = ? AND account_id = ?", id, accountID).Exists(ctx)
		if err != nil {
			return err
		}
		if !exists {
			return webhookNotFound(id)
		}
		if _, err := tx.NewRaw(`DELETE FROM webhook_bodies
			WHERE event_id IN (SELECT event_id FROM webhook_deliveries WHERE webhook_id = ?)
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = webhook_bodies.event_id AND d.webhook_id <> ?)`,
			id, id).Exec(ctx); err != nil {
			return err
		}
		if _, err = tx.NewDelete().Model((*webhookRow)(nil)).Where("id = ? AND account_id = ?", id, accountID).Exec(ctx); err != nil {
			return err
		}
		return s.recordAudit(ctx, tx)
	})
}

// storedOrder is the order attempts were stored in.
func (s *Store) storedOrder() string {
	if s.postgres {
		return "seq"
	}
	return "rowid"
}

// ListDeliveries implements core.WebhookStore: newest first.
func (s *Store) ListDeliveries(ctx context.Context, accountID, webhookID string, p core.Page) ([]core.Delivery, int, error) {
	var rows []deliveryRow
	total, err := s.readPage(ctx, func(db *bun.DB) *bun.SelectQuery {
		rows = nil
		return db.NewSelect().Model(&rows).Where("webhook_id = ? AND account_id = ?", webhookID, accountID).
			OrderExpr(s.storedOrder() + " DESC").Limit(p.PageSize).Offset(p.Offset())
	})
	if err != nil {
		return nil, 0, err
	}
	out := make([]core.Delivery, len(rows))
	for i := range rows {
		out[i] = rows[i].toDelivery()
	}
	return out, total, nil
}

// EnqueueDeliveries implements core.WebhookStore. The dispatch row is
// taken with SKIP LOCKED on PostgreSQL, so a second replica returns at once
// instead of waiting; SQLite's single writer serialises the same way.
func (s *Store) EnqueueDeliveries(ctx context.Context, limit int, plan func(core.Event, []core.Webhook) ([]core.Delivery, error)) (int, error) {
	read := 0
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var cur struct {
			Tx string `bun:"tx_text"`
			ID int64  `bun:"id"`
		}
		lock := ""
		if s.postgres {
			lock = " FOR UPDATE SKIP LOCKED"
		}
		if err := tx.NewRaw(`SELECT CAST(tx AS TEXT) AS tx_text, id FROM webhook_dispatch WHERE singleton = 1`+lock).Scan(ctx, &cur); err != nil {
			if err == sql.ErrNoRows {
				return nil // another replica is dispatching
			}
			return err
		}
		txid, err := strconv.ParseUint(cur.Tx, 10, 64)
		if err != nil {
			return fmt.Errorf("dispatch position: %w", err)
		}
		after := core.Cursor{Tx: txid, Seq: cur.ID}
		hooked := map[string]bool{}
		events, next, err := s.readEvents(ctx, tx, core.EventQuery{After: &after, Limit: limit}, hooked)
		if core.ErrorCode(err) == core.CodeCursorExpired {
			// Retention outran the dispatcher (stopped for longer than the
			// log keeps events): go on from the oldest retained event.
			_, horizon, herr := s.logBounds(ctx, tx, "")
			if herr != nil {
				return herr
			}
			events, next, err = s.readEvents(ctx, tx, core.EventQuery{After: &horizon, Limit: limit}, hooked)
		}
		if err != nil {
			return err
		}
		read = len(events)
		hooks := map[string][]core.Webhook{}
		for _, e := range events {
			if _, ok := hooks[e.AccountID]; ok || !hooked[e.AccountID] {
				continue
			}
			var rows []webhookRow
			if err := tx.NewSelect().Model(&rows).Where("account_id = ? AND enabled", e.AccountID).Scan(ctx); err != nil {
				return err
			}
			list := make([]core.Webhook, 0, len(rows))
			for i := range rows {
				w, err := rows[i].toWebhook()
				if err != nil {
					return err
				}
				list = append(list, w)
			}
			hooks[e.AccountID] = list
		}
		var deliveries []*deliveryRow
		var bodies []*bodyRow
		for _, e := range events {
			if len(hooks[e.AccountID]) == 0 {
				continue
			}
			planned, err := plan(e, hooks[e.AccountID])
			if err != nil {
				return err
			}
			for _, d := range planned {
				deliveries = append(deliveries, toDeliveryRow(d))
			}
			if len(planned) > 0 { // one body per event, whatever the number of webhooks
				bodies = append(bodies, &bodyRow{EventID: e.ID.Internal(), Body: string(planned[0].Payload)})
			}
		}
		if len(deliveries) > 0 {
			if _, err := tx.NewInsert().Model(&bodies).On("CONFLICT (event_id) DO NOTHING").Exec(ctx); err != nil {
				return err
			}
			if _, err := tx.NewInsert().Model(&deliveries).Exec(ctx); err != nil {
				return err
			}
		}
		t := s.txType()
		_, err = tx.NewRaw(fmt.Sprintf(`UPDATE webhook_dispatch SET tx = CAST(? AS %s), id = ? WHERE singleton = 1`, t),
			strconv.FormatUint(next.Tx, 10), next.Seq).Exec(ctx)
		return err
	})
	return read, err
}

func newLease() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ClaimDeliveries implements core.WebhookStore: one statement leases due
// attempts, past the skipped webhooks and accounts; on PostgreSQL SKIP
// LOCKED lets replicas claim side by side.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int, skipWebhooks, skipAccounts []string) ([]core.Delivery, error) {
	token := newLease()
	sub := s.db.NewSelect().Model((*deliveryRow)(nil)).Column("id").
		Where("status = 'PENDING' AND next_attempt_at <= ?", millis(now)).
		Where("(lease_until IS NULL OR lease_until < ?)", millis(now)).
		OrderExpr("next_attempt_at").Limit(limit)
	if len(skipWebhooks) > 0 {
		sub = sub.Where("webhook_id NOT IN (?)", bun.In(skipWebhooks))
	}
	if len(skipAccounts) > 0 {
		sub = sub.Where("account_id NOT IN (?)", bun.In(skipAccounts))
	}
	if s.postgres {
		sub = sub.For("UPDATE SKIP LOCKED")
	}
	var rows []deliveryRow
	err := s.write(ctx, func() error {
		return s.db.NewRaw(`UPDATE webhook_deliveries SET lease = ?, lease_until = ? WHERE id IN (?) RETURNING `+
			s.columns(reflect.TypeFor[deliveryRow](), ""), token, millis(now.Add(lease)), sub).Scan(ctx, &rows)
	})
	if err != nil && err != sql.ErrNoRows {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	ids := make([]string, 0, len(rows))
	for _, r := range rows {
		if !slices.Contains(ids, r.EventID) { // at most a claim's limit: linear
			ids = append(ids, r.EventID)
		}
	}
	var bodies []bodyRow
	if err := s.db.NewSelect().Model(&bodies).Where("event_id IN (?)", bun.In(ids)).Scan(ctx); err != nil {
		return nil, err
	}
	byEvent := make(map[string][]byte, len(bodies))
	for _, b := range bodies {
		byEvent[b.EventID] = []byte(b.Body)
	}
	out := make([]core.Delivery, len(rows))
	for i := range rows {
		out[i] = rows[i].toDelivery()
		out[i].Payload = byEvent[rows[i].EventID] // nil if missing: core records the attempt as failed
	}
	return out, nil
}

// FinishDeliveries implements core.WebhookStore: one statement records
// every result still under its lease and names those it recorded; one more
// inserts the next attempts of those, in the same transaction.
func (s *Store) FinishDeliveries(ctx context.Context, done []core.FinishedDelivery) error {
	if len(done) == 0 {
		return nil
	}
	retries := false
	for _, f := range done {
		retries = retries || f.Next != nil
	}
	if !retries {
		// The common case, successes: one statement, no transaction.
		return s.write(ctx, func() error { _, err := s.finishDeliveries(ctx, s.db, done); return err })
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var next []*deliveryRow
		// The update names the attempts it recorded by id, and one batch
		// may hold an attempt twice (claimed again by this replica after
		// its lease lapsed; only the last lease matches): each round
		// takes an id once.
		for rest := done; len(rest) > 0; {
			var round, later []core.FinishedDelivery
			for _, f := range rest {
				if slices.ContainsFunc(round, func(g core.FinishedDelivery) bool { return g.ID == f.ID }) {
					later = append(later, f)
				} else {
					round = append(round, f)
				}
			}
			recorded, err := s.finishDeliveries(ctx, tx, round)
			if err != nil {
				return err
			}
			for _, f := range round {
				if f.Next != nil && slices.Contains(recorded, f.ID) {
					next = append(next, toDeliveryRow(*f.Next))
				}
			}
			rest = later
		}
		if len(next) == 0 {
			return nil
		}
		_, err := tx.NewInsert().Model(&next).Exec(ctx)
		return err
	})
}

// finishDeliveries updates the attempts of done from a VALUES list (a CTE,
// which both PostgreSQL and SQLite join in an UPDATE ... FROM) and returns
// the ids it updated: those whose lease still held.
func (s *Store) finishDeliveries(ctx context.Context, db bun.IDB, done []core.FinishedDelivery) ([]string, error) {
	var (
		q    strings.Builder
		args = make([]any, 0, 7*len(done))
	)
	q.WriteString(`WITH v (v_id, v_lease, v_status, v_response_status, v_error, v_duration_ms, v_attempted_at) AS (VALUES `)
	for i, f := range done {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("(?, ?, ?, ?, ?, ?, ?)")
		args = append(args, f.ID, f.Lease, string(f.Status), f.ResponseStatus, f.Error, f.Duration.Milliseconds(), optNull(f.AttemptedAt))
	}
	// The casts type a column PostgreSQL would read as text when all its
	// values are NULL (attempted_at) or all arguments are literals.
	q.WriteString(`) UPDATE webhook_deliveries SET status = v_status, response_status = CAST(v_response_status AS INTEGER),
		error = v_error, duration_ms = CAST(v_duration_ms AS BIGINT), attempted_at = CAST(v_attempted_at AS BIGINT),
		next_attempt_at = NULL, lease = NULL, lease_until = NULL
		FROM v WHERE id = v_id AND status = 'PENDING' AND lease = v_lease RETURNING id`)
	var ids []string
	if err := db.NewRaw(q.String(), args...).Scan(ctx, &ids); err != nil && err != sql.ErrNoRows {
		return nil, err
	}
	return ids, nil
}

// WebhookBodyStats says how many webhook bodies the store holds and their
// total length (the contract suite's view of what deliveries cost).
func (s *Store) WebhookBodyStats(ctx context.Context) (count int, size int64, err error) {
	var r struct {
		Count int   `bun:"n"`
		Size  int64 `bun:"size"`
	}
	err = s.db.NewRaw(`SELECT COUNT(*) AS n, COALESCE(SUM(LENGTH(body)), 0) AS size FROM webhook_bodies`).Scan(ctx, &r)
	return r.Count, r.Size, err
}
