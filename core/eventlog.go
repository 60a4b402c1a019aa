package core

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"time"
)

// Cursor is a position in the event log (docs/api.md, "Event log"). The
// log's order is (Tx, Seq): on PostgreSQL Tx is the writing transaction's
// id and only positions of finished transactions are ever read, so a
// position handed out is never followed by an earlier one; elsewhere Tx is
// 0 and Seq alone orders. Clients see it only through a CursorCodec.
type Cursor struct {
	Tx  uint64
	Seq int64
}

// Before reports whether c comes before d in the log.
func (c Cursor) Before(d Cursor) bool {
	return c.Tx < d.Tx || c.Tx == d.Tx && c.Seq < d.Seq
}

// Internal is c as storage and messages between replicas carry it, 16
// bytes in URL-safe base64; never shown to clients (CursorCodec is).
func (c Cursor) Internal() string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], c.Tx)
	binary.BigEndian.PutUint64(b[8:], uint64(c.Seq))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ParseInternalCursor reads what Internal wrote.
func ParseInternalCursor(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 || b[8]&0x80 != 0 {
		return Cursor{}, InvalidCursor()
	}
	return Cursor{Tx: binary.BigEndian.Uint64(b[:8]), Seq: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}

// InvalidCursor is the error for a cursor the log never handed out:
// malformed, forged, or past the log's settled end. An event log refuses a
// cursor past its end, since a reader there would wait for positions that
// may never come (and an idle feed would start there, holding back every
// subscriber of the replica).
func InvalidCursor() error {
	var v Validation
	v.Add("after", "is not a cursor of this event log")
	return v.Err()
}

// CursorCodec turns positions into the cursors clients see and back. A
// position is global to the installation (a transaction id, a sequence),
// so it would tell every account how much all the others write: a cursor
// is the position encrypted with a key of the installation (one AES block,
// so equal positions give equal cursors) and authenticated (a truncated
// HMAC), so that clients can neither read one nor make one up.
type CursorCodec struct {
	block cipher.Block
	mac   []byte
}

// cursorTag is how many bytes of HMAC a cursor carries.
const cursorTag = 8

// NewCursorCodec returns a codec for a 32-byte key of the installation
// (derived for this purpose only).
func NewCursorCodec(key [32]byte) *CursorCodec {
	block, err := aes.NewCipher(key[:16])
	if err != nil {
		panic(err) // a 16-byte key is always valid
	}
	return &CursorCodec{block: block, mac: slices.Clone(key[16:])}
}

func (c *CursorCodec) tag(plain []byte) []byte {
	h := hmac.New(sha256.New, c.mac)
	h.Write(plain)
	return h.Sum(nil)[:cursorTag]
}

// Encode is the cursor of position p as clients see it: 32 URL-safe
// characters.
func (c *CursorCodec) Encode(p Cursor) string {
	var plain [16]byte
	binary.BigEndian.PutUint64(plain[:8], p.Tx)
	binary.BigEndian.PutUint64(plain[8:], uint64(p.Seq))
	out := make([]byte, 16, 16+cursorTag)
	c.block.Encrypt(out, plain[:])
	return base64.RawURLEncoding.EncodeToString(append(out, c.tag(plain[:])...))
}

// Decode reads a cursor a client passed; anything Encode did not make with
// this installation's key is VALIDATION_FAILED on the field after.
func (c *CursorCodec) Decode(s string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16+cursorTag {
		return Cursor{}, InvalidCursor()
	}
	var plain [16]byte
	c.block.Decrypt(plain[:], b[:16])
	if !hmac.Equal(c.tag(plain[:]), b[16:]) || plain[8]&0x80 != 0 {
		return Cursor{}, InvalidCursor()
	}
	return Cursor{Tx: binary.BigEndian.Uint64(plain[:8]), Seq: int64(binary.BigEndian.Uint64(plain[8:]))}, nil
}

// EventQuery selects events of the log.
type EventQuery struct {
	// AccountID selects one account's events; "" reads every account's
	// (the process's own feed).
	AccountID string
	// After is the cursor to read on from; nil: the oldest retained event.
	After *Cursor
	// Types and MountUIDs narrow the events read; nil selects all.
	Types     []EventType
	MountUIDs []string
	// Limit bounds the events returned; 0 returns none, only the head.
	Limit int
	// Tail reads the last Limit settled events q selects instead of the
	// first ones (After must be nil), still returned in log order.
	Tail bool
}

// Selects reports whether e is one of the events q asks for (After and
// Limit aside): the one filter of the log, the feed and the stores.
func (q EventQuery) Selects(e Event) bool {
	return (q.AccountID == "" || e.AccountID == q.AccountID) &&
		(q.Types == nil || slices.Contains(q.Types, e.Type)) &&
		(q.MountUIDs == nil || slices.Contains(q.MountUIDs, e.UID))
}

// EventLog reads the log the stores append to. Each store method that
// changes a mount takes the event of that change and appends it in the
// change's own transaction (a transactional outbox): an event of a
// committed change is never lost, and one of a change rolled back never
// exists.
type EventLog interface {
	// ReadEvents returns, in log order, up to q.Limit events after q.After
	// that are settled: no event can later appear before them (with
	// q.Tail, the last q.Limit settled ones). next is the cursor to read
	// on from: the last event's when the page is full, otherwise the
	// settled head of the whole log (never before q.After).
	// CURSOR_EXPIRED when q.After lies before the retained log: for a
	// query of one account, when retention deleted an event of that
	// account after q.After (so that other accounts' events, and how old
	// they are, never decide it); VALIDATION_FAILED past the settled head.
	ReadEvents(ctx context.Context, q EventQuery) (events []Event, next Cursor, err error)
	// AccountHorizon is the position of accountID's newest event that
	// retention deleted; the zero cursor when none was.
	AccountHorizon(ctx context.Context, accountID string) (Cursor, error)
	// AccountHead is the position of accountID's newest settled event, or
	// its horizon when retention deleted all of them (the zero cursor for
	// an account without events): where a reader of that account stands
	// once it has read everything, moving with the account's own events
	// only. Reading on from it misses none of the account's events: an
	// event that settles later lies after it.
	AccountHead(ctx context.Context, accountID string) (Cursor, error)
	// AccountNewest is the position of accountID's newest committed event,
	// settled or not, or its horizon when retention deleted all of them
	// (the zero cursor for an account without events). It is never handed
	// out (reading on from it could skip an older transaction's events):
	// it tells how far AccountHead must move to lie after every event of
	// the account committed before the call.
	AccountNewest(ctx context.Context, accountID string) (Cursor, error)
	// PruneEvents deletes up to limit events created before before, the
	// oldest first, and remembers the newest deleted position, of the log
	// and of each account, so that a cursor before it is known to have
	// lost events.
	PruneEvents(ctx context.Context, before time.Time, limit int) (int, error)
}

// EventWaker tells every replica that the log has grown. It only wakes: a
// lost wake-up delays an event until the next poll of the log, it never
// loses one.
type EventWaker interface {
	// Wake announces that the log holds an event at c.
	Wake(ctx context.Context, c Cursor) error
	// Wakeups delivers announced cursors until ctx ends; when the reader
	// lags, wake-ups are dropped rather than queued.
	Wakeups(ctx context.Context) (<-chan Cursor, error)
}

// FleetMeter counts what the fleet does on this replica, for the metrics
// of docs/operations.md. The services tell it through their EventWaker: a
// waker that is also a FleetMeter is told of every event committed here,
// every command issued and every webhook attempt's outcome.
type FleetMeter interface {
	EventCommitted(e *Event)
	CommandIssued(code CommandCode)
	DeliveryFinished(status DeliveryStatus)
}

// DefaultEventRetention is how long the log keeps events unless
// MOUNTD_EVENT_RETENTION says otherwise.
const DefaultEventRetention = 168 * time.Hour

// MaxEventPage is the most events one read of the feed returns.
const MaxEventPage = 1000

// DefaultEventPage is what a read returns without a limit.
const DefaultEventPage = 100

// TailRule checks tail=N of GET /events and GET /audit (docs/api.md): the
// last N entries (1 to MaxEventPage) visible to the caller, oldest first,
// with next after the last of them. It is a read of its own: with after,
// limit or wait it is refused (field tail). It returns N, or 0 when tail
// is absent or refused.
func TailRule(v *Validation, tail *int, after, limit, wait bool) int {
	if tail == nil {
		return 0
	}
	switch {
	case *tail < 1 || *tail > MaxEventPage:
		v.Add("tail", "must be between 1 and 1000")
	case after || limit || wait:
		v.Add("tail", "reads the last entries and cannot be combined with after, limit or wait")
	default:
		return *tail
	}
	return 0
}

// MaxEventWait bounds a long poll of the feed.
const MaxEventWait = 30 * time.Second
