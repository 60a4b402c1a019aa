package bunstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/core"
)

var _ core.EventLog = (*Store)(nil)

// eventRow is a row of the event log. Tx is read as text: PostgreSQL's
// xid8 has no integer type in Go's drivers.
type eventRow struct {
	ID         int64  `bun:"id"`
	Tx         string `bun:"tx_text"`
	AccountID  string `bun:"account_id"`
	Type       string `bun:"type"`
	MountUID   string `bun:"mount_uid"`
	OccurredAt int64  `bun:"occurred_at"`
	Body       string `bun:"body"`
}

// eventBody is what the log stores of an event beyond its columns. Its
// JSON names are fixed here, apart from core's types, so that renaming a
// field in core does not break stored events.
// An account-level event (JOB_*) has no mount.
type eventBody struct {
	Mount   *eventMount   `json:"mount,omitempty"`
	States  []eventState  `json:"states,omitempty"`
	Command *eventCommand `json:"command,omitempty"`
	Alarm   *eventAlarm   `json:"alarm,omitempty"`
	Job     *eventJob     `json:"job,omitempty"`
	Rollout *eventRollout `json:"rollout,omitempty"`
	Grant   *eventGrant   `json:"grant,omitempty"`
}

// eventGrant is a rider grant as GRANT_REVOKED carries it, instants as
// Unix milliseconds (0: none).
type eventGrant struct {
	ID         string   `json:"id"`
	UID        string   `json:"uid"`
	AccountID  string   `json:"accountId"`
	RiderKey   string   `json:"riderKey"`
	Rights     []string `json:"rights"`
	NotBefore  int64    `json:"notBefore"`
	NotAfter   int64    `json:"notAfter"`
	Epoch      int64    `json:"epoch"`
	Label      string   `json:"label"`
	CreatedAt  int64    `json:"createdAt"`
	CreatedBy  string   `json:"createdBy"`
	KeyID      string   `json:"keyId"`
	Text       string   `json:"text"`
	Signature  string   `json:"signature"`
	RevokedAt  int64    `json:"revokedAt"`
	Uses       int      `json:"uses"`
	LastUsedAt int64    `json:"lastUsedAt"`
}

func toEventGrant(g *core.RiderGrant) *eventGrant {
	if g == nil {
		return nil
	}
	return &eventGrant{ID: g.ID, UID: g.UID, AccountID: g.AccountID, RiderKey: g.RiderKey, Rights: g.Rights,
		NotBefore: millis(g.NotBefore), NotAfter: millis(g.NotAfter), Epoch: g.Epoch, Label: g.Label, CreatedAt: millis(g.CreatedAt),
		CreatedBy: g.CreatedBy, KeyID: g.KeyID, Text: g.Text, Signature: g.Signature, RevokedAt: optMillis(g.RevokedAt),
		Uses: g.Uses, LastUsedAt: optMillis(g.LastUsedAt)}
}

func fromEventGrant(g *eventGrant) *core.RiderGrant {
	if g == nil {
		return nil
	}
	return &core.RiderGrant{ID: g.ID, UID: g.UID, AccountID: g.AccountID, RiderKey: g.RiderKey, Rights: g.Rights,
		NotBefore: fromMillis(g.NotBefore), NotAfter: fromMillis(g.NotAfter), Epoch: g.Epoch, Label: g.Label, CreatedAt: fromMillis(g.CreatedAt),
		CreatedBy: g.CreatedBy, KeyID: g.KeyID, Text: g.Text, Signature: g.Signature, RevokedAt: optTime(g.RevokedAt),
		Uses: g.Uses, LastUsedAt: optTime(g.LastUsedAt)}
}

// eventAlarm is an alarm as an ALARM_* event carries it, instants as Unix
// milliseconds (0: none).
type eventAlarm struct {
	ID             string            `json:"id"`
	AccountID      string            `json:"accountId"`
	RuleID         string            `json:"ruleId"`
	RuleName       string            `json:"ruleName"`
	UID            string            `json:"uid"`
	Severity       string            `json:"severity"`
	State          string            `json:"state"`
	RaisedAt       int64             `json:"raisedAt"`
	ClearedAt      int64             `json:"clearedAt,omitempty"`
	AcknowledgedAt int64             `json:"acknowledgedAt,omitempty"`
	AcknowledgedBy string            `json:"acknowledgedBy,omitempty"`
	Values         map[string]string `json:"values"`
	// AcknowledgedByName is absent from events written before names.
	AcknowledgedByName string `json:"acknowledgedByName,omitempty"`
}

func toEventAlarm(a *core.Alarm) *eventAlarm {
	if a == nil {
		return nil
	}
	values := a.Values
	if values == nil {
		values = map[string]string{}
	}
	return &eventAlarm{ID: a.ID, AccountID: a.AccountID, RuleID: a.RuleID, RuleName: a.RuleName, UID: a.UID,
		Severity: string(a.Severity), State: string(a.State), RaisedAt: optMillis(a.RaisedAt), ClearedAt: optMillis(a.ClearedAt),
		AcknowledgedAt: optMillis(a.AcknowledgedAt), AcknowledgedBy: a.AcknowledgedBy, Values: values, AcknowledgedByName: a.AcknowledgedByName}
}

func fromEventAlarm(a *eventAlarm) *core.Alarm {
	if a == nil {
		return nil
	}
	return &core.Alarm{ID: a.ID, AccountID: a.AccountID, RuleID: a.RuleID, RuleName: a.RuleName, UID: a.UID,
		Severity: core.Severity(a.Severity), State: core.AlarmState(a.State), RaisedAt: optTime(a.RaisedAt),
		ClearedAt: optTime(a.ClearedAt), AcknowledgedAt: optTime(a.AcknowledgedAt), AcknowledgedBy: a.AcknowledgedBy,
		AcknowledgedByName: a.AcknowledgedByName, Values: a.Values}
}

// eventCommand is a command as an event carries it (COMMAND_EXECUTED,
// COMMAND_REFUSED, COMMAND_UNCONFIRMED): the whole Command, instants as
// Unix milliseconds.
type eventCommand struct {
	ID          string         `json:"id"`
	MountUID    string         `json:"mountUid"`
	AccountID   string         `json:"accountId"`
	Code        string         `json:"code"`
	Data        map[string]any `json:"data"`
	GeneratedAt int64          `json:"generatedAt"`
	Payload     string         `json:"payload"`
	SignedToken string         `json:"signedToken,omitempty"`
	IssuedBy    string         `json:"issuedBy"`
	ExpiresAt   int64          `json:"expiresAt"`
	Status      string         `json:"status"`
	StatusAt    int64          `json:"statusAt"`
	Reason      string         `json:"reason,omitempty"`
	Verified    bool           `json:"verified"`
	JobID       string         `json:"jobId,omitempty"`
	RolloutID   string         `json:"rolloutId,omitempty"`
	GrantID     string         `json:"grantId,omitempty"`
	// IssuedByName is absent from events written before names.
	IssuedByName string `json:"issuedByName,omitempty"`
}

func toEventCommand(c *core.Command) *eventCommand {
	if c == nil {
		return nil
	}
	return &eventCommand{ID: c.ID, MountUID: c.MountUID, AccountID: c.AccountID, Code: string(c.Code), Data: c.Data,
		GeneratedAt: millis(c.GeneratedAt), Payload: c.Payload, SignedToken: c.SignedToken, IssuedBy: c.IssuedBy, IssuedByName: c.IssuedByName,
		ExpiresAt: millis(c.ExpiresAt), Status: string(c.Status), StatusAt: millis(c.StatusAt), Reason: c.Reason, Verified: c.Verified,
		JobID: c.JobID, RolloutID: c.RolloutID, GrantID: c.GrantID}
}

func fromEventCommand(c *eventCommand) *core.Command {
	if c == nil {
		return nil
	}
	return &core.Command{ID: c.ID, MountUID: c.MountUID, AccountID: c.AccountID, Code: core.CommandCode(c.Code), Data: c.Data,
		GeneratedAt: fromMillis(c.GeneratedAt), Payload: c.Payload, SignedToken: c.SignedToken, IssuedBy: c.IssuedBy, IssuedByName: c.IssuedByName,
		ExpiresAt: fromMillis(c.ExpiresAt), Status: core.CommandStatus(c.Status), StatusAt: fromMillis(c.StatusAt),
		Reason: c.Reason, Verified: c.Verified, JobID: c.JobID, RolloutID: c.RolloutID, GrantID: c.GrantID}
}

type eventMount struct {
	UID              string       `json:"uid"`
	Name             string       `json:"name"`
	SerialNumber     string       `json:"serialNumber"`
	MACAddress       string       `json:"macAddress"`
	FirmwareRevision string       `json:"firmwareRevision"`
	SoftwareRevision string       `json:"softwareRevision"`
	ModelNumber      string       `json:"modelNumber"`
	State            string       `json:"state"`
	OwnerID          string       `json:"ownerId,omitempty"`
	ExpiredOwnerID   string       `json:"expiredOwnerId,omitempty"`
	IdleDeadline     int64        `json:"idleDeadline,omitempty"`
	AssociatedAt     int64        `json:"associatedAt,omitempty"`
	CreatedAt        int64        `json:"createdAt"`
	UpdatedAt        int64        `json:"updatedAt"`
	Latest           []eventState `json:"latest,omitempty"`
	DevicePublicKey  string       `json:"devicePublicKey,omitempty"`
	LastSeenAt       int64        `json:"lastSeenAt,omitempty"`
}

type eventState struct {
	Code       string `json:"code"`
	Value      string `json:"value"`
	OccurredAt int64  `json:"occurredAt"`
	ReceivedAt int64  `json:"receivedAt,omitempty"`
	Verified   bool   `json:"verified,omitempty"`
}

func optMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return millis(t)
}

func optTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return fromMillis(ms)
}

func toEventStates(entries []core.StateEntry) []eventState {
	out := make([]eventState, len(entries))
	for i, e := range entries {
		out[i] = eventState{Code: string(e.Code), Value: e.Value, OccurredAt: millis(e.OccurredAt), ReceivedAt: optMillis(e.ReceivedAt),
			Verified: e.Verified}
	}
	return out
}

func fromEventStates(states []eventState) []core.StateEntry {
	if states == nil {
		return nil
	}
	out := make([]core.StateEntry, len(states))
	for i, s := range states {
		out[i] = core.StateEntry{Code: core.StateCode(s.Code), Value: s.Value, OccurredAt: fromMillis(s.OccurredAt), ReceivedAt: optTime(s.ReceivedAt),
			Verified: s.Verified}
	}
	return out
}

// appendEvent completes e with the mount as the change left it (row) and
// the latest values of e.AccountID's association read in tx, and appends
// it to the log in tx; nil appends nothing.
func (s *Store) appendEvent(ctx context.Context, tx bun.IDB, e *core.Event, row *mountRow) error {
	if e == nil {
		return nil
	}
	var latest []core.StateEntry
	if e.Type != core.EventDeleted {
		byMount, err := s.latestFor(ctx, tx, e.AccountID, []string{row.UID})
		if err != nil {
			return err
		}
		latest = byMount[row.UID]
	}
	return s.appendEventWith(ctx, tx, e, row, latest, "", nil)
}

// appendEventWith is appendEvent with the latest values known already. A
// statement given as with (PostgreSQL only) runs as a data-modifying WITH
// of the insert: one round trip for both.
func (s *Store) appendEventWith(ctx context.Context, tx bun.IDB, e *core.Event, row *mountRow, latest []core.StateEntry,
	with string, withArgs []any) error {
	_, err := s.appendEventGuarded(ctx, tx, e, row, latest, with, withArgs, false)
	return err
}

// appendEventGuarded is appendEventWith; guarded, the event is appended
// only when the WITH statement returned a row, and it reports whether it
// was (the claim of a new mount: its event rides in the insert's round
// trip, and a uid taken already gets none).
func (s *Store) appendEventGuarded(ctx context.Context, tx bun.IDB, e *core.Event, row *mountRow, latest []core.StateEntry,
	with string, withArgs []any, guarded bool) (bool, error) {
	args, m, err := eventValues(e, row, latest)
	if err != nil {
		return false, err
	}
	var pos eventPosition
	query := `INSERT INTO events (` + eventColumns + `) VALUES (?, ?, ?, ?, ?)
		RETURNING id, CAST(tx AS TEXT) AS tx_text`
	if guarded {
		query = `INSERT INTO events (` + eventColumns + `) SELECT ?, ?, ?, ?, ?
			WHERE EXISTS (SELECT 1 FROM before_event) RETURNING id, CAST(tx AS TEXT) AS tx_text`
	}
	if with != "" {
		query, args = "WITH before_event AS ("+with+") "+query, append(withArgs, args...)
	}
	if err := tx.NewRaw(query, args...).Scan(ctx, &pos); err != nil {
		if guarded && errors.Is(err, sql.ErrNoRows) {
			return false, nil
		}
		return false, err
	}
	txid, err := strconv.ParseUint(pos.Tx, 10, 64)
	if err != nil {
		return false, fmt.Errorf("event position: %w", err)
	}
	e.ID, e.Mount = core.Cursor{Tx: txid, Seq: pos.ID}, m
	return true, nil
}

// eventPosition is what an insert into events returns.
type eventPosition struct {
	ID int64  `bun:"id"`
	Tx string `bun:"tx_text"`
}

const eventColumns = `account_id, type, mount_uid, occurred_at, body`

// eventValues are e's values for eventColumns, the mount as row and latest
// tell it, and that mount as the event carries it. e.OccurredAt is
// truncated to the stored milliseconds.
func eventValues(e *core.Event, row *mountRow, latest []core.StateEntry) ([]any, core.Mount, error) {
	m := row.toMount()
	m.Key = core.MountKey{}
	m.Latest = core.ComputeLatest(latest)
	body, err := json.Marshal(eventBody{States: toEventStates(e.States), Command: toEventCommand(e.Command), Alarm: toEventAlarm(e.Alarm), Job: toEventJob(e.Job), Grant: toEventGrant(e.Grant), Mount: &eventMount{
		UID: m.UID, Name: m.Name, SerialNumber: m.SerialNumber, MACAddress: m.MACAddress,
		FirmwareRevision: m.FirmwareRevision, SoftwareRevision: m.SoftwareRevision, ModelNumber: m.ModelNumber,
		State: string(m.State), OwnerID: m.OwnerID, ExpiredOwnerID: m.ExpiredOwnerID,
		IdleDeadline: optMillis(m.IdleDeadline), AssociatedAt: optMillis(m.AssociatedAt),
		CreatedAt: millis(m.CreatedAt), UpdatedAt: millis(m.UpdatedAt), Latest: toEventStates(latest),
		DevicePublicKey: m.DevicePublicKey, LastSeenAt: optMillis(m.LastSeenAt)}})
	if err != nil {
		return nil, core.Mount{}, err
	}
	e.OccurredAt = fromMillis(millis(e.OccurredAt))
	return []any{e.AccountID, string(e.Type), e.UID, millis(e.OccurredAt), string(body)}, m, nil
}

// appendEvents appends events, each about the mount rows holds for its
// UID with the latest values latest holds, in one statement: a change of
// many mounts (a rider's revocation) costs one round trip, not one each.
// Each event gets its position in the order given.
func (s *Store) appendEvents(ctx context.Context, tx bun.IDB, events []*core.Event, rows map[string]*mountRow, latest map[string][]core.StateEntry) error {
	if len(events) == 0 {
		return nil
	}
	var (
		values strings.Builder
		args   = make([]any, 0, 5*len(events))
		mounts = make([]core.Mount, len(events))
	)
	for i, e := range events {
		a, m, err := eventValues(e, rows[e.UID], latest[e.UID])
		if err != nil {
			return err
		}
		if i > 0 {
			values.WriteString(", ")
		}
		values.WriteString("(?, ?, ?, ?, ?)")
		args, mounts[i] = append(args, a...), m
	}
	var pos []eventPosition
	if err := tx.NewRaw(`INSERT INTO events (`+eventColumns+`) VALUES `+values.String()+`
		RETURNING id, CAST(tx AS TEXT) AS tx_text`, args...).Scan(ctx, &pos); err != nil {
		return err
	}
	if len(pos) != len(events) {
		return fmt.Errorf("appended %d events, %d positions", len(events), len(pos))
	}
	// The ids are taken in the order of the rows; RETURNING's order is
	// not promised.
	slices.SortFunc(pos, func(a, b eventPosition) int { return cmp.Compare(a.ID, b.ID) })
	for i, e := range events {
		txid, err := strconv.ParseUint(pos[i].Tx, 10, 64)
		if err != nil {
			return fmt.Errorf("event position: %w", err)
		}
		e.ID, e.Mount = core.Cursor{Tx: txid, Seq: pos[i].ID}, mounts[i]
	}
	return nil
}

func (r eventRow) toEvent() (core.Event, error) {
	txid, err := strconv.ParseUint(r.Tx, 10, 64)
	if err != nil {
		return core.Event{}, fmt.Errorf("event %d: position: %w", r.ID, err)
	}
	var b eventBody
	if err := json.Unmarshal([]byte(r.Body), &b); err != nil {
		return core.Event{}, fmt.Errorf("event %d: body: %w", r.ID, err)
	}
	if b.Mount == nil {
		// An account-level event, or a body not read (readEvents).
		b.Mount = &eventMount{}
	}
	bm := b.Mount
	m := core.Mount{UID: bm.UID, Name: bm.Name, SerialNumber: bm.SerialNumber, MACAddress: bm.MACAddress,
		FirmwareRevision: bm.FirmwareRevision, SoftwareRevision: bm.SoftwareRevision, ModelNumber: bm.ModelNumber,
		State: core.AssociationState(bm.State), OwnerID: bm.OwnerID, ExpiredOwnerID: bm.ExpiredOwnerID,
		IdleDeadline: optTime(bm.IdleDeadline), AssociatedAt: optTime(bm.AssociatedAt),
		CreatedAt: fromMillis(bm.CreatedAt), UpdatedAt: fromMillis(bm.UpdatedAt), DevicePublicKey: bm.DevicePublicKey,
		LastSeenAt: optTime(bm.LastSeenAt)}
	if bm.Latest != nil {
		m.Latest = core.ComputeLatest(fromEventStates(bm.Latest))
	}
	e := core.Event{ID: core.Cursor{Tx: txid, Seq: r.ID}, Type: core.EventType(r.Type), UID: r.MountUID,
		AccountID: r.AccountID, Mount: m, States: fromEventStates(b.States), Command: fromEventCommand(b.Command),
		Alarm: fromEventAlarm(b.Alarm), Job: fromEventJob(b.Job), Rollout: fromEventRollout(b.Rollout), Grant: fromEventGrant(b.Grant), OccurredAt: fromMillis(r.OccurredAt)}
	if b.Mount.UID == "" {
		e.Mount = core.Mount{}
	}
	return e, nil
}

// txType is the SQL type of the position's first part.
func (s *Store) txType() string {
	if s.postgres {
		return "xid8"
	}
	return "INTEGER"
}

// logBounds reads, in one statement, where the settled log ends and where
// retention has cut it: the whole log, or with accountID that account's
// events. On PostgreSQL the settled part is every row of a
// transaction older than the oldest one still in flight; on SQLite, with
// one writer at a time, every row up to the last id handed out.
func (s *Store) logBounds(ctx context.Context, db bun.IDB, accountID string) (head, horizon core.Cursor, err error) {
	var b struct {
		Bound     string `bun:"bound"`
		HorizonTx string `bun:"horizon_tx"`
		HorizonID int64  `bun:"horizon_id"`
	}
	bound := `CAST(pg_snapshot_xmin(pg_current_snapshot()) AS TEXT)`
	if !s.postgres {
		bound = `CAST(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0) AS TEXT)`
	}
	query, args := `SELECT `+bound+` AS bound, CAST(tx AS TEXT) AS horizon_tx, id AS horizon_id FROM event_horizon`, []any{}
	if accountID != "" {
		query = `SELECT ` + bound + ` AS bound, COALESCE((SELECT CAST(tx AS TEXT) FROM event_account_horizons WHERE account_id = ?), '0') AS horizon_tx,
			COALESCE((SELECT id FROM event_account_horizons WHERE account_id = ?), 0) AS horizon_id`
		args = []any{accountID, accountID}
	}
	if err := db.NewRaw(query, args...).Scan(ctx, &b); err != nil {
		return head, horizon, err
	}
	n, err := strconv.ParseUint(b.Bound, 10, 64)
	if err != nil {
		return head, horizon, fmt.Errorf("event log bound: %w", err)
	}
	htx, err := strconv.ParseUint(b.HorizonTx, 10, 64)
	if err != nil {
		return head, horizon, fmt.Errorf("event log horizon: %w", err)
	}
	horizon = core.Cursor{Tx: htx, Seq: b.HorizonID}
	if s.postgres {
		// Every transaction below xmin has ended: its rows, and only
		// theirs, are settled. xmin is at least 3 (the first normal id).
		head = core.Cursor{Tx: n - 1, Seq: math.MaxInt64}
	} else {
		head = core.Cursor{Seq: int64(n)}
	}
	return head, horizon, nil
}

// ReadEvents implements core.EventLog.
func (s *Store) ReadEvents(ctx context.Context, q core.EventQuery) ([]core.Event, core.Cursor, error) {
	return s.readEvents(ctx, s.db, q, nil)
}

// readEvents reads the events q asks for. With hooked not nil (the webhook
// dispatcher), it reads and decodes the bodies of the events of accounts
// with an enabled webhook only, and tells which accounts have one: the
// others' events come with their columns alone (about a tenth of mountd's
// CPU under ingest went to decoding bodies no webhook wanted).
func (s *Store) readEvents(ctx context.Context, db bun.IDB, q core.EventQuery, hooked map[string]bool) ([]core.Event, core.Cursor, error) {
	head, horizon, err := s.logBounds(ctx, db, q.AccountID)
	if err != nil {
		return nil, core.Cursor{}, err
	}
	if q.After != nil {
		if q.After.Before(horizon) {
			return nil, core.Cursor{}, core.Errorf(core.CodeCursorExpired,
				"the event log no longer holds the events after this cursor; start again without it")
		}
		if head.Before(*q.After) {
			return nil, core.Cursor{}, core.InvalidCursor()
		}
	}
	if q.Limit <= 0 {
		return nil, head, nil
	}
	t := s.txType()
	var sb strings.Builder
	args := []any{}
	body := "body"
	if hooked != nil {
		// A stored body is never empty: '' marks one not read.
		body = `CASE WHEN EXISTS (SELECT 1 FROM webhooks w WHERE w.account_id = events.account_id AND w.enabled) THEN body ELSE '' END AS body`
	}
	fmt.Fprintf(&sb, `SELECT id, CAST(tx AS TEXT) AS tx_text, account_id, type, mount_uid, occurred_at, %s FROM events WHERE `, body)
	// Only settled rows: up to the head read above, so that the head is
	// exactly where this read stops.
	fmt.Fprintf(&sb, `(tx, id) <= (CAST(? AS %s), ?)`, t)
	args = append(args, strconv.FormatUint(head.Tx, 10), head.Seq)
	if q.After != nil {
		fmt.Fprintf(&sb, ` AND (tx, id) > (CAST(? AS %s), ?)`, t)
		args = append(args, strconv.FormatUint(q.After.Tx, 10), q.After.Seq)
	}
	if q.AccountID != "" {
		sb.WriteString(` AND account_id = ?`)
		args = append(args, q.AccountID)
	}
	if q.Types != nil {
		types := make([]string, len(q.Types))
		for i, ty := range q.Types {
			types[i] = string(ty)
		}
		sb.WriteString(` AND type IN (?)`)
		args = append(args, bun.In(types))
	}
	if q.MountUIDs != nil {
		if len(q.MountUIDs) == 0 {
			return []core.Event{}, head, nil
		}
		sb.WriteString(` AND mount_uid IN (?)`)
		args = append(args, bun.In(q.MountUIDs))
	}
	sb.WriteString(logOrder(q.Tail))
	args = append(args, q.Limit)
	var rows []eventRow
	if err := db.NewRaw(sb.String(), args...).Scan(ctx, &rows); err != nil {
		return nil, core.Cursor{}, err
	}
	if q.Tail {
		slices.Reverse(rows)
	}
	events := make([]core.Event, len(rows))
	for i, r := range rows {
		if hooked != nil {
			hooked[r.AccountID] = r.Body != ""
			if r.Body == "" {
				r.Body = "{}"
			}
		}
		if events[i], err = r.toEvent(); err != nil {
			return nil, core.Cursor{}, err
		}
	}
	if len(events) == q.Limit {
		return events, events[len(events)-1].ID, nil
	}
	return events, head, nil
}

// logOrder ends a read of the event or audit log: the first rows in log
// order, or with tail the last ones (newest first: the caller reverses
// them).
func logOrder(tail bool) string {
	if tail {
		return ` ORDER BY tx DESC, id DESC LIMIT ?`
	}
	return ` ORDER BY tx, id LIMIT ?`
}

// AccountHorizon implements core.EventLog.
func (s *Store) AccountHorizon(ctx context.Context, accountID string) (core.Cursor, error) {
	_, horizon, err := s.logBounds(ctx, s.db, accountID)
	return horizon, err
}

// AccountHead implements core.EventLog: the account's newest row up to
// the settled head read first (on PostgreSQL every transaction below the
// head's has ended, so those rows are all visible to the second
// statement).
func (s *Store) AccountHead(ctx context.Context, accountID string) (core.Cursor, error) {
	head, horizon, err := s.logBounds(ctx, s.db, accountID)
	if err != nil {
		return core.Cursor{}, err
	}
	return s.accountNewest(ctx, accountID, &head, horizon)
}

// AccountNewest implements core.EventLog: the account's newest committed
// row, settled or not. On SQLite, with one writer at a time, it is the
// head.
func (s *Store) AccountNewest(ctx context.Context, accountID string) (core.Cursor, error) {
	if !s.postgres {
		return s.AccountHead(ctx, accountID)
	}
	horizon, err := s.AccountHorizon(ctx, accountID)
	if err != nil {
		return core.Cursor{}, err
	}
	return s.accountNewest(ctx, accountID, nil, horizon)
}

// accountNewest is the position of accountID's newest row up to upTo
// (nil: the newest of all), or horizon when that is later (retention
// deleted the account's rows), through the index on (account_id, tx, id).
func (s *Store) accountNewest(ctx context.Context, accountID string, upTo *core.Cursor, horizon core.Cursor) (core.Cursor, error) {
	var rows []struct {
		ID int64  `bun:"id"`
		Tx string `bun:"tx_text"`
	}
	query, args := `SELECT id, CAST(tx AS TEXT) AS tx_text FROM events WHERE account_id = ?`, []any{accountID}
	if upTo != nil {
		query += fmt.Sprintf(` AND (tx, id) <= (CAST(? AS %s), ?)`, s.txType())
		args = append(args, strconv.FormatUint(upTo.Tx, 10), upTo.Seq)
	}
	query += ` ORDER BY account_id DESC, tx DESC, id DESC LIMIT 1`
	if err := s.db.NewRaw(query, args...).Scan(ctx, &rows); err != nil {
		return core.Cursor{}, err
	}
	if len(rows) == 0 {
		return horizon, nil
	}
	tx, err := strconv.ParseUint(rows[0].Tx, 10, 64)
	if err != nil {
		return core.Cursor{}, fmt.Errorf("event position: %w", err)
	}
	if c := (core.Cursor{Tx: tx, Seq: rows[0].ID}); horizon.Before(c) {
		return c, nil
	}
	return horizon, nil
}

// PruneEvents implements core.EventLog: one transaction deletes the oldest
// rows past retention and moves the horizons, the log's and each
// account's, to the newest of them.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	n := 0
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var rows []struct {
			ID        int64  `bun:"id"`
			Tx        string `bun:"tx_text"`
			AccountID string `bun:"account_id"`
		}
		if err := tx.NewRaw(`SELECT id, CAST(tx AS TEXT) AS tx_text, account_id FROM events WHERE occurred_at < ? ORDER BY tx, id LIMIT ?`,
			millis(before), limit).Scan(ctx, &rows); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]int64, len(rows))
		for i, r := range rows {
			ids[i] = r.ID
		}
		if _, err := tx.NewRaw(`DELETE FROM events WHERE id IN (?)`, bun.In(ids)).Exec(ctx); err != nil {
			return err
		}
		last := rows[len(rows)-1]
		t := s.txType()
		if _, err := tx.NewRaw(fmt.Sprintf(`UPDATE event_horizon SET tx = CAST(? AS %s), id = ?
			WHERE (tx, id) < (CAST(? AS %s), ?)`, t, t), last.Tx, last.ID, last.Tx, last.ID).Exec(ctx); err != nil {
			return err
		}
		// Each account's newest pruned event: rows come in log order, so
		// the last of an account's is its newest.
		newest := map[string]int{}
		var accounts []string
		for i, r := range rows {
			if _, ok := newest[r.AccountID]; !ok {
				accounts = append(accounts, r.AccountID)
			}
			newest[r.AccountID] = i
		}
		var values strings.Builder
		args := make([]any, 0, 3*len(accounts))
		for i, a := range accounts {
			if i > 0 {
				values.WriteString(", ")
			}
			fmt.Fprintf(&values, "(?, CAST(? AS %s), ?)", t)
			r := rows[newest[a]]
			args = append(args, a, r.Tx, r.ID)
		}
		if _, err := tx.NewRaw(`INSERT INTO event_account_horizons (account_id, tx, id) VALUES `+values.String()+`
			ON CONFLICT (account_id) DO UPDATE SET tx = excluded.tx, id = excluded.id
			WHERE (event_account_horizons.tx, event_account_horizons.id) < (excluded.tx, excluded.id)`, args...).Exec(ctx); err != nil {
			return err
		}
		n = len(rows)
		return nil
	})
	return n, err
}
