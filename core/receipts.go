package core

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/mountd/mountd/protocol"
)

// The truth from the mount (docs/api.md, "Command lifecycle"): signed
// reports, receipts and the command lifecycle.

// ReportSignature is what a mount's signed states message adds to its
// entries; the phone relays it unchanged.
type ReportSignature struct {
	Counter          uint64
	SoftwareRevision string
	// Signature is lowercase hex Ed25519 over protocol.BuildReportText.
	Signature string
}

// ReceiptInput is one receipt as a phone uploaded it: the fields of the
// mount's signed result message.
type ReceiptInput struct {
	Nonce   string
	Outcome string
	Reason  string
	Counter uint64
	// At is the mount's clock, milliseconds.
	At        time.Time
	Signature string
}

// ReceiptResult answers POST /mounts/{uid}/commands/receipts.
type ReceiptResult struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// MaxReceiptsPerUpload bounds one receipts upload.
const MaxReceiptsPerUpload = 500

// MaxReceiptReasonLength bounds a receipt's reason text.
const MaxReceiptReasonLength = 200

// MaxCounter is the highest counter a mount's signed message may carry,
// in reports and receipts alike: counters are stored (receipts, rollout
// targets) as signed 64-bit integers.
const MaxCounter = math.MaxInt64

// checkCounter bounds a signed message's counter (field counter or
// receipts[i].counter).
func checkCounter(v *Validation, field string, c uint64) {
	if c > MaxCounter {
		v.Add(field, "must be at most %d", int64(MaxCounter))
	}
}

// CommandTTL is how long after generation a command can run on the mount
// (data.expiresAt); MOUNTD_COMMAND_TTL, at most MaxCommandTTL.
type CommandTTL time.Duration

// ReceiptGrace is how long after a command's expiresAt its receipts are
// still accepted (MOUNTD_RECEIPT_GRACE).
type ReceiptGrace time.Duration

// The lifecycle's defaults: the mount's own window, and a day for a phone
// without network to come back.
const (
	DefaultCommandTTL   = 5 * time.Minute
	MaxCommandTTL       = CommandLifetime
	DefaultReceiptGrace = 24 * time.Hour
)

// CommandDecision is what a deciding receipt does to a command: the store
// applies it with one conditional update that only moves forward (an
// EXECUTED command stays so; a REFUSED one moves to EXECUTED, or to the
// REFUSED receipt of a lower counter).
type CommandDecision struct {
	UID       string
	AccountID string
	ID        string
	// Status is CommandExecuted or CommandRefused.
	Status   CommandStatus
	Reason   string
	Counter  uint64
	Verified bool
	// At is the server's time of the change (StatusAt).
	At time.Time
	// AccountEvents, when not nil, receives the account-level events the
	// decision appended: JOB_COMPLETED (a job command's decision moves its
	// job's target, which may complete the job) and ROLLOUT_* (a rollout
	// command's refusal may fail its target and move the rollout's gates).
	AccountEvents *[]*Event
}

// CommandOutcomeMeter counts command outcomes (mountd_command_outcomes_total);
// a waker that is also one is told of every status change made here.
type CommandOutcomeMeter interface {
	CommandOutcome(code CommandCode, status CommandStatus)
}

// UploadReceipts handles POST /mounts/{uid}/commands/receipts: the batch is
// validated whole (404 MOUNT_NOT_FOUND, 404 COMMAND_NOT_FOUND, 403
// SIGNATURE_REQUIRED, 400 INVALID_SIGNATURE, then 400 VALIDATION_FAILED for
// content and receipts past the grace), then each command's status moves
// as its deciding receipt says.
func (s *MountService) UploadReceipts(ctx context.Context, p Principal, uid string, in []ReceiptInput) (ReceiptResult, error) {
	if err := p.AuthorizeMount(ActionReportStates, uid); err != nil {
		return ReceiptResult{}, err
	}
	if len(in) > MaxReceiptsPerUpload {
		return ReceiptResult{}, Errorf(CodePayloadTooLarge, "an upload holds at most %d receipts", MaxReceiptsPerUpload)
	}
	m, err := s.live(ctx, p, uid)
	if err != nil {
		return ReceiptResult{}, err
	}
	now := s.clock()
	// 404: every nonce must name a command of this association.
	ids := make([]string, 0, len(in))
	for _, r := range in {
		if protocol.ValidNonce(r.Nonce) && !slices.Contains(ids, r.Nonce) {
			ids = append(ids, r.Nonce)
		}
	}
	var found []Command
	if len(ids) > 0 {
		if found, err = s.commands.CommandsByID(ctx, uid, p.AccountID, ids); err != nil {
			return ReceiptResult{}, err
		}
	}
	byID := make(map[string]Command, len(found))
	for _, c := range found {
		// A command of an earlier association of this account is not
		// this mount's in its current association (docs/api.md, "The truth
		// from the mount").
		if c.GeneratedAt.Before(m.AssociationStartedAt) {
			continue
		}
		byID[c.ID] = c
	}
	for _, r := range in {
		if _, ok := byID[r.Nonce]; !ok {
			return ReceiptResult{}, Errorf(CodeCommandNotFound, "command %q was not issued to mount %q", r.Nonce, uid)
		}
	}
	// 403: a mount with a device key speaks for itself only.
	if m.DevicePublicKey != "" {
		for _, r := range in {
			if r.Signature == "" {
				return ReceiptResult{}, Errorf(CodeSignatureRequired, "mount %q has a device key: receipts must be signed by it", uid)
			}
		}
	}
	// 400 INVALID_SIGNATURE.
	for i, r := range in {
		if r.Signature == "" {
			continue
		}
		text := protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: r.Nonce, Outcome: r.Outcome,
			Reason: r.Reason, Counter: r.Counter, At: r.At})
		if m.DevicePublicKey == "" || !protocol.Verify(m.DevicePublicKey, text, r.Signature) {
			return ReceiptResult{}, invalidSignature(fmt.Sprintf("receipts[%d]", i), m.DevicePublicKey != "")
		}
	}
	// 400 VALIDATION_FAILED: content, then the grace.
	var v Validation
	for i, r := range in {
		field := fmt.Sprintf("receipts[%d]", i)
		switch {
		case r.Outcome != protocol.OutcomeExecuted && r.Outcome != protocol.OutcomeRefused:
			v.Add(field+".outcome", "must be EXECUTED or REFUSED")
		case r.Outcome == protocol.OutcomeExecuted && r.Reason != "":
			v.Add(field+".reason", "must be empty for EXECUTED")
		case r.Outcome == protocol.OutcomeRefused && r.Reason == "":
			v.Add(field+".reason", "is required for REFUSED")
		}
		checkText(&v, field+".reason", &r.Reason, MaxReceiptReasonLength)
		switch {
		case r.At.IsZero():
			v.Add(field+".at", "is required")
		case r.At.After(now.Add(futureTolerance)):
			// As a report's occurredAt (docs/api.md, "The truth from the
			// mount"): a receipt dated
			// ahead would keep the mount ONLINE.
			v.Add(field+".at", "must not be more than 5 minutes in the future")
		}
		checkCounter(&v, field+".counter", r.Counter)
		if c := byID[r.Nonce]; now.After(c.ExpiresAt.Add(s.grace)) {
			v.Add(field, "arrived more than %s after the command expired at %s", s.grace, FormatTime(c.ExpiresAt))
		}
	}
	if err := v.Err(); err != nil {
		return ReceiptResult{}, err
	}
	// The deciding receipt of each command within the batch; the others
	// are duplicates whatever the order of upload.
	decide := map[string]int{}
	order := []string{}
	for i, r := range in {
		j, ok := decide[r.Nonce]
		if !ok {
			decide[r.Nonce] = i
			order = append(order, r.Nonce)
			continue
		}
		if decides(r, in[j]) {
			decide[r.Nonce] = i
		}
	}
	res := ReceiptResult{Duplicates: len(in) - len(order)}
	for _, id := range order {
		r := in[decide[id]]
		d := CommandDecision{UID: uid, AccountID: p.AccountID, ID: id, Status: CommandStatus(r.Outcome),
			Reason: r.Reason, Counter: r.Counter, Verified: r.Signature != "", At: now, AccountEvents: &[]*Event{}}
		ev := &Event{Type: EventCommandExecuted, UID: uid, AccountID: p.AccountID, OccurredAt: now}
		if d.Status == CommandRefused {
			ev.Type = EventCommandRefused
		}
		c, changed, err := s.commands.DecideCommand(ctx, d, ev)
		if err != nil {
			return res, err
		}
		if !changed {
			res.Duplicates++
			continue
		}
		res.Accepted++
		s.announceOutcome(ctx, c, ev)
		for _, je := range *d.AccountEvents {
			wake(ctx, s.waker, s.logger, je)
		}
	}
	// A receipt upload is also the mount being heard (duplicates too),
	// unless its newest receipt is older than the offline threshold.
	var newest time.Time
	for _, r := range in {
		if r.At.After(newest) {
			newest = r.At
		}
	}
	if s.counts(newest, now) {
		if err := s.evaluateErr(ctx, uid, p.AccountID, WatchHeard); err != nil {
			return res, err
		}
	}
	return res, nil
}

// decides reports whether receipt a decides its command rather than b: an
// EXECUTED receipt over a REFUSED one, else the lower counter; between two
// EXECUTED receipts the first stays.
func decides(a, b ReceiptInput) bool {
	if (a.Outcome == protocol.OutcomeExecuted) != (b.Outcome == protocol.OutcomeExecuted) {
		return a.Outcome == protocol.OutcomeExecuted
	}
	return a.Outcome == protocol.OutcomeRefused && a.Counter < b.Counter
}

func invalidSignature(what string, keyed bool) error {
	if !keyed {
		return Errorf(CodeInvalidSignature, "%s is signed, but the mount has no device key pinned", what)
	}
	return Errorf(CodeInvalidSignature, "the signature of %s does not verify with the mount's device key", what)
}

// announceOutcome wakes the feeds for a status change and counts it.
func (s *MountService) announceOutcome(ctx context.Context, c Command, ev *Event) {
	if m, ok := s.waker.(CommandOutcomeMeter); ok {
		m.CommandOutcome(c.Code, c.Status)
	}
	wake(ctx, s.waker, s.logger, ev)
}

// Command handles GET /mounts/{uid}/commands/{id}: one command by its id
// (the payload's nonce), owners only; COMMAND_NOT_FOUND otherwise.
func (s *MountService) Command(ctx context.Context, p Principal, uid, id string) (Command, error) {
	if _, err := s.owned(ctx, p, ActionReadCommandAudit, uid); err != nil {
		return Command{}, err
	}
	if !protocol.ValidNonce(id) {
		return Command{}, Errorf(CodeCommandNotFound, "command %q not found", id)
	}
	cmds, err := s.commands.CommandsByID(ctx, uid, p.AccountID, []string{id})
	if err != nil {
		return Command{}, err
	}
	if len(cmds) == 0 {
		return Command{}, Errorf(CodeCommandNotFound, "command %q not found", id)
	}
	return cmds[0], nil
}

// live loads a mount whose association p's account holds (IDLE in its
// window, or ASSOCIATED), for the reports and receipts that come from it;
// MOUNT_NOT_FOUND otherwise.
func (s *MountService) live(ctx context.Context, p Principal, uid string) (Mount, error) {
	m, err := s.mounts.Mount(ctx, uid)
	if err != nil {
		return Mount{}, err
	}
	if m.OwnerID != p.AccountID || m.State == StateInactive || m.Lapsed(s.clock()) {
		return Mount{}, Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	return m, nil
}

// CommandSweepEvery is how often each replica looks in the database for
// ISSUED commands whose expiresAt passed; UNCONFIRMED follows within it.
const CommandSweepEvery = 5 * time.Second

// SweepCommands turns every ISSUED command whose expiresAt passed
// UNCONFIRMED, with its COMMAND_UNCONFIRMED event, and returns how many it
// turned. Safe on every replica at once: each change is one conditional
// update, so exactly one sweeper makes it.
func (s *MountService) SweepCommands(ctx context.Context) (int, error) {
	total := 0
	for {
		now := s.clock()
		events, err := s.commands.UnconfirmCommands(ctx, now, sweepBatch, func(c Command) *Event {
			return &Event{Type: EventCommandUnconfirmed, UID: c.MountUID, AccountID: c.AccountID, OccurredAt: now}
		})
		if err != nil {
			return total, err
		}
		for _, ev := range events {
			if ev.ID == (Cursor{}) {
				// The association ended and the mount has another owner:
				// turned without an event (see UnconfirmCommands).
				if m, ok := s.waker.(CommandOutcomeMeter); ok {
					m.CommandOutcome(ev.Command.Code, ev.Command.Status)
				}
				continue
			}
			s.announceOutcome(ctx, *ev.Command, ev)
		}
		total += len(events)
		if len(events) < sweepBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
