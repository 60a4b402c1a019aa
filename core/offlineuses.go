package core

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Every offline use comes back (CONTRACT §21): the mount keeps a signed
// receipt of each use of a grant until the server acknowledges it, and any
// phone that connects carries the log here.

// OfflineReceiptInput is one receipt of a mount's offline log as a phone
// uploads it.
type OfflineReceiptInput struct {
	GrantID string
	Code    string
	ReceiptInput
	// Unreadable, when not empty, says why the transport could not read
	// the receipt: it is rejected with that, the others judged.
	Unreadable string
}

// OfflineRejection is a receipt not stored, and why (its code is
// GRANT_NOT_FOUND, INVALID_SIGNATURE or VALIDATION_FAILED).
type OfflineRejection struct {
	Nonce  string
	Code   Code
	Detail string
}

// OfflineUpload answers POST /mounts/{uid}/offline-receipts: Ack, signed
// by the owner key, names the receipts stored (new or duplicate) for the
// mount to drop from its log; nil when none was.
type OfflineUpload struct {
	Accepted   int
	Duplicates int
	Rejected   []OfflineRejection
	Ack        *SignedText
}

// MaxOfflineReceiptsPerUpload bounds one upload.
const MaxOfflineReceiptsPerUpload = 500

// OfflineUseEvent makes the event of a stored offline use: COMMAND_EXECUTED
// or COMMAND_REFUSED with the command.
type OfflineUseEvent func(c Command) *Event

// UploadOfflineReceipts judges each receipt alone and stores the good ones
// as commands of the grant's account (CONTRACT §21). status, when not nil,
// is what the mount's info said; it becomes the mount's Offline, At now.
func (s *GrantService) UploadOfflineReceipts(ctx context.Context, p Principal, uid string, in []OfflineReceiptInput, status *MountOffline) (OfflineUpload, error) {
	m, err := s.ownedMount(ctx, p, ActionReportStates, uid) // authorizes p first
	if err != nil {
		return OfflineUpload{}, err
	}
	if len(in) > MaxOfflineReceiptsPerUpload {
		return OfflineUpload{}, Errorf(CodePayloadTooLarge, "an upload holds at most %d receipts", MaxOfflineReceiptsPerUpload)
	}
	now := s.clock()
	if status != nil {
		if err := status.validate(); err != nil {
			return OfflineUpload{}, err
		}
		o := *status
		o.At = now
		if err := s.Grants.SetMountOffline(ctx, m.OwnerID, uid, o); err != nil {
			return OfflineUpload{}, err
		}
	}
	out := OfflineUpload{Rejected: []OfflineRejection{}}
	grants := map[string]*RiderGrant{}
	keys := &deviceKeys{store: s.Grants, uid: uid, current: m.DevicePublicKey}
	var uses []Command
	var kept []int // indexes into in of uses, in order
	for i, r := range in {
		code, detail, err := s.judgeOfflineReceipt(ctx, p, m, r, now, keys, grants)
		if err != nil {
			return OfflineUpload{}, err
		}
		if code != "" {
			out.Rejected = append(out.Rejected, OfflineRejection{Nonce: r.Nonce, Code: code, Detail: fmt.Sprintf("receipts[%d]: %s", i, detail)})
			continue
		}
		g := grants[r.GrantID]
		uses = append(uses, Command{ID: r.Nonce, MountUID: uid, AccountID: g.AccountID, Code: CommandCode(r.Code),
			Data:        map[string]any{"expiresAt": FormatTime(r.At)},
			GeneratedAt: r.At, IssuedBy: g.CreatedBy, ExpiresAt: r.At, Status: CommandStatus(r.Outcome), StatusAt: now,
			Reason: r.Reason, Verified: true, GrantID: g.ID})
		kept = append(kept, i)
	}
	if len(uses) == 0 {
		return out, nil
	}
	event := func(c Command) *Event {
		e := &Event{Type: EventCommandExecuted, UID: uid, AccountID: c.AccountID, OccurredAt: now}
		if c.Status == CommandRefused {
			e.Type = EventCommandRefused
		}
		return e
	}
	stored, err := s.Grants.RecordOfflineUses(ctx, uid, uses, event)
	if err != nil {
		return OfflineUpload{}, err
	}
	nonces := make([]string, 0, len(kept))
	for k, st := range stored {
		nonces = append(nonces, in[kept[k]].Nonce)
		if st.Event == nil {
			out.Duplicates++
			continue
		}
		out.Accepted++
		if m, ok := s.Waker.(GrantMeter); ok {
			m.OfflineUse(st.Event.Command.Status)
		}
		s.wakeAll(ctx, []*Event{st.Event})
	}
	ack, err := s.signText(ctx, m, protocol.BuildAckText(uid, nonces))
	if err != nil {
		return OfflineUpload{}, err
	}
	out.Ack = &ack
	return out, nil
}

// judgeOfflineReceipt returns why r cannot be stored ("" when it can):
// its fields, then the device's signature, then the grant (one of the
// token's account on this mount; found ones are kept in grants).
func (s *GrantService) judgeOfflineReceipt(ctx context.Context, p Principal, m Mount, r OfflineReceiptInput, now time.Time,
	keys *deviceKeys, grants map[string]*RiderGrant) (Code, string, error) {
	var v Validation
	switch {
	case r.Unreadable != "":
		return CodeValidation, r.Unreadable, nil
	case !protocol.ValidNonce(r.Nonce):
		v.Add("nonce", "must be 32 lowercase hex characters")
	case !protocol.ValidGrantID(r.GrantID):
		v.Add("grantId", "must be gr_ and 24 lowercase hex characters")
	case r.Code != RightReleaseHelmet:
		v.Add("code", "must be RELEASE_HELMET (the only right a grant carries)")
	case r.Outcome != protocol.OutcomeExecuted && r.Outcome != protocol.OutcomeRefused:
		v.Add("outcome", "must be EXECUTED or REFUSED")
	case r.Outcome == protocol.OutcomeExecuted && r.Reason != "":
		v.Add("reason", "must be empty for EXECUTED")
	case r.Outcome == protocol.OutcomeRefused && r.Reason == "":
		v.Add("reason", "is required for REFUSED")
	case len(r.Reason) > MaxReceiptReasonLength:
		v.Add("reason", "must be at most %d characters", MaxReceiptReasonLength)
	case r.Counter > MaxCounter:
		v.Add("counter", "must be at most %d", int64(MaxCounter))
	case r.At.IsZero():
		v.Add("at", "is required")
	case r.At.After(now.Add(futureTolerance)):
		v.Add("at", "must not be more than 5 minutes in the future")
	}
	if len(v.Fields) > 0 {
		return CodeValidation, v.Fields[0].Field + " " + v.Fields[0].Message, nil
	}
	receipt := protocol.OfflineReceipt{UID: m.UID, GrantID: r.GrantID, Code: r.Code, Nonce: r.Nonce, Outcome: r.Outcome,
		Reason: r.Reason, Counter: r.Counter, At: r.At}
	if ok, err := keys.verify(ctx, receipt, r.Signature); err != nil || !ok {
		return CodeInvalidSignature, "the signature does not verify with a device key of the mount", err
	}
	g, ok := grants[r.GrantID]
	if !ok {
		found, err := s.Grants.RiderGrant(ctx, p.AccountID, r.GrantID)
		if err != nil && ErrorCode(err) != CodeGrantNotFound {
			return "", "", err // the store failed: the whole upload does
		}
		if err == nil && found.UID == m.UID {
			g = &found
		}
		grants[r.GrantID] = g
	}
	if g == nil || !slices.Contains(g.Rights, r.Code) {
		return CodeGrantNotFound, fmt.Sprintf("grant %q of this mount not found", r.GrantID), nil
	}
	return "", "", nil
}

// StoredUse is what became of one offline use: Event is the event appended
// with a new one, nil for a duplicate.
type StoredUse struct {
	Event *Event
}

// GrantMeter counts offline access for metrics (the waker implements it
// where metrics are kept).
type GrantMeter interface {
	GrantIssued()
	// OfflineUse counts a stored offline use by outcome (EXECUTED,
	// REFUSED).
	OfflineUse(outcome CommandStatus)
}

func (o MountOffline) validate() error {
	var v Validation
	if o.RevocationVersion < 0 {
		v.Add("status.revocationVersion", "must not be negative")
	}
	if o.LogPending < 0 || o.LogPending > MaxLogPending {
		v.Add("status.logPending", "must be between 0 and %d", MaxLogPending)
	}
	return v.Err()
}

// deviceKeys are the keys an upload's receipts may verify with: the
// mount's current device key, then those pinned in earlier associations
// (read once per upload, only when a receipt needs them).
type deviceKeys struct {
	store   GrantStore
	uid     string
	current string
	past    []string
	read    bool
}

// verify's error is the store's: it fails the upload, so that no receipt
// is rejected for it.
func (k *deviceKeys) verify(ctx context.Context, r protocol.OfflineReceipt, signature string) (bool, error) {
	if signature == "" {
		return false, nil
	}
	if k.current != "" && protocol.VerifyOfflineReceipt(k.current, r, signature) {
		return true, nil
	}
	if !k.read {
		past, err := k.store.PastDeviceKeys(ctx, k.uid)
		if err != nil {
			return false, err
		}
		k.past, k.read = past, true
	}
	for _, key := range k.past {
		if key != k.current && protocol.VerifyOfflineReceipt(key, r, signature) {
			return true, nil
		}
	}
	return false, nil
}
