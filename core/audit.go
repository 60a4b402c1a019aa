package core

import (
	"context"
	"net/url"
	"strings"
	"time"
)

// AuditAction names a kind of change in the audit log (docs/api.md,
// "Audit log"). A capability that adds a change adds its name here and
// passes it to WithAudit where it calls the store.
type AuditAction string

// The audited actions.
const (
	AuditAccountCreate       AuditAction = "account.create"
	AuditAccountRotateSecret AuditAction = "account.rotate-secret"
	AuditAccountRenameClient AuditAction = "account.rename-client"
	AuditUserCreate          AuditAction = "user.create"
	AuditUserSetPassword     AuditAction = "user.set-password"
	AuditUserDelete          AuditAction = "user.delete"
	AuditMountRequest        AuditAction = "mount.request-association"
	AuditMountConfirm        AuditAction = "mount.confirm-association"
	AuditMountUpdate         AuditAction = "mount.update"
	AuditMountDelete         AuditAction = "mount.delete"
	AuditMountAbandon        AuditAction = "mount.abandon"
	AuditNfcTagsSync         AuditAction = "nfc-tags.sync"
	AuditNfcTagUpdate        AuditAction = "nfc-tag.update"
	AuditWebhookCreate       AuditAction = "webhook.create"
	AuditWebhookUpdate       AuditAction = "webhook.update"
	AuditWebhookDelete       AuditAction = "webhook.delete"
	AuditWebhookRotateSecret AuditAction = "webhook.rotate-secret"
	AuditFirmwarePublish     AuditAction = "firmware.publish"
	AuditFirmwareDeprecate   AuditAction = "firmware.deprecate"
	AuditKeysRotate          AuditAction = "keys.rotate"
	AuditAlarmRuleCreate     AuditAction = "alarm-rule.create"
	AuditAlarmRuleUpdate     AuditAction = "alarm-rule.update"
	AuditAlarmRuleDelete     AuditAction = "alarm-rule.delete"
	AuditAlarmAcknowledge    AuditAction = "alarm.acknowledge"
	AuditJobCreate           AuditAction = "job.create"
	AuditJobCancel           AuditAction = "job.cancel"
	AuditRolloutCreate       AuditAction = "rollout.create"
	AuditRolloutPause        AuditAction = "rollout.pause"
	AuditRolloutResume       AuditAction = "rollout.resume"
	AuditRolloutCancel       AuditAction = "rollout.cancel"
	AuditGrantCreate         AuditAction = "grant.create"
	AuditGrantRevoke         AuditAction = "grant.revoke"
	AuditGrantResign         AuditAction = "grant.resign"
)

// maxAuditFilter bounds a filter's length.
const maxAuditFilter = 200

// AuditActions lists every audited action, for filters and documentation.
var AuditActions = []AuditAction{AuditAccountCreate, AuditAccountRotateSecret, AuditAccountRenameClient, AuditUserCreate, AuditUserSetPassword,
	AuditUserDelete, AuditMountRequest, AuditMountConfirm, AuditMountUpdate, AuditMountDelete, AuditMountAbandon,
	AuditNfcTagsSync, AuditNfcTagUpdate, AuditWebhookCreate, AuditWebhookUpdate, AuditWebhookDelete,
	AuditWebhookRotateSecret, AuditFirmwarePublish, AuditFirmwareDeprecate, AuditKeysRotate,
	AuditAlarmRuleCreate, AuditAlarmRuleUpdate, AuditAlarmRuleDelete, AuditAlarmAcknowledge,
	AuditJobCreate, AuditJobCancel, AuditRolloutCreate, AuditRolloutPause, AuditRolloutResume, AuditRolloutCancel,
	AuditGrantCreate, AuditGrantRevoke, AuditGrantResign}

// DefaultAuditRetention is how long the audit log keeps entries unless
// MOUNTD_AUDIT_RETENTION says otherwise: a year, so that a yearly review
// finds the whole year.
const DefaultAuditRetention = 8760 * time.Hour

// ActorType says who made a change.
type ActorType string

// The actor types.
const (
	ActorClient ActorType = "client"
	ActorUser   ActorType = "user"
	// ActorCLI is an operator at the `mountd` commands on the server.
	ActorCLI ActorType = "cli"
)

// Actor is who made a change.
type Actor struct {
	Type ActorType
	ID   string
	Name string
}

// Actor is who p is in the audit log: a person signed in (named by the
// username the token carries) or an API client. A client is named here by
// its client id; the stores record it under its client's name as it is at
// the change (ClientActorName), so that a rename shows at once.
func (p Principal) Actor() Actor {
	if p.Person {
		name := p.Name
		if name == "" {
			name = p.ClientID
		}
		if len(name) > maxAuditFilter {
			name = strings.ToValidUTF8(name[:maxAuditFilter], "") // an external issuer's claim, of any length
		}
		return Actor{Type: ActorUser, ID: p.ClientID, Name: name}
	}
	return Actor{Type: ActorClient, ID: p.ClientID, Name: p.ClientID}
}

// ClientActorName is the name a change by a is recorded under, given the
// name of a's client when a is one (clientName "" when the client has none
// or is not this installation's: an external issuer's): a client's name,
// else its id; any other actor keeps its name.
func ClientActorName(a Actor, clientName string) string {
	if a.Type == ActorClient && clientName != "" {
		return clientName
	}
	return a.Name
}

// CLIActor is an operator at the `mountd` commands, named by the
// operating-system user.
func CLIActor(osUser string) Actor { return Actor{Type: ActorCLI, ID: osUser, Name: osUser} }

// AuditEntry is one change in the audit log.
type AuditEntry struct {
	// Position is the entry's place in the log, set when it is stored
	// (the event log's order: see Cursor); ID is the cursor clients see.
	Position Cursor
	ID       string
	At       time.Time
	// AccountID is the account whose data changed; "" for changes to the
	// installation (accounts created, firmware, keys), which only `mountd
	// audit` lists.
	AccountID     string
	Actor         Actor
	Action        AuditAction
	Target        string
	SourceAddress string
	// Details say what changed; never a secret.
	Details map[string]any
}

// AuditTarget names what a change touched: "<kind>:<id>".
func AuditTarget(kind, id string) string { return kind + ":" + id }

type sourceCtxKey struct{}

// WithSource returns ctx carrying the caller's address: the one the rate
// limits use (a trusted proxy's X-Forwarded-For respected).
func WithSource(ctx context.Context, addr string) context.Context {
	return context.WithValue(ctx, sourceCtxKey{}, addr)
}

// SourceFrom returns the caller's address WithSource stored; "" without.
func SourceFrom(ctx context.Context) string {
	s, _ := ctx.Value(sourceCtxKey{}).(string)
	return s
}

type actorKey struct{}

// WithActor returns ctx carrying who acts, for the services that take no
// principal (the `mountd` commands on accounts, users, firmware and keys).
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// actorFrom is the actor WithActor stored; an unnamed operator without.
func actorFrom(ctx context.Context) Actor {
	if a, ok := ctx.Value(actorKey{}).(Actor); ok {
		return a
	}
	return Actor{Type: ActorCLI}
}

type auditKey struct{}

// WithAudit returns ctx carrying the audit entry of the change that the
// store call it is passed to makes. The service passes it to that one call
// only, so that no other transaction (an expiry on the way, a command
// issued after) records it; the store records it in the change's
// transaction, and only when the call changes something.
func WithAudit(ctx context.Context, e AuditEntry) context.Context {
	return context.WithValue(ctx, auditKey{}, &e)
}

// AuditEach returns ctx with the entry ctx carries (its actor, time and
// source) made over for one of several things a store call changes:
// action, target and details replaced. ctx carrying none is returned as
// it is.
func AuditEach(ctx context.Context, action AuditAction, target string, details map[string]any) context.Context {
	e := AuditFrom(ctx)
	if e == nil {
		return ctx
	}
	each := *e
	each.Action, each.Target, each.Details = action, target, details
	return WithAudit(ctx, each)
}

// AuditFrom is the entry a store records with the change it makes in ctx;
// nil when the change is not audited.
func AuditFrom(ctx context.Context) *AuditEntry {
	e, _ := ctx.Value(auditKey{}).(*AuditEntry)
	return e
}

// byPrincipal is the entry of a change p makes in its account at now.
func byPrincipal(ctx context.Context, p Principal, now time.Time, action AuditAction, target string, details map[string]any) context.Context {
	return WithAudit(ctx, AuditEntry{At: now.UTC().Truncate(time.Millisecond), AccountID: p.AccountID, Actor: p.Actor(),
		Action: action, Target: target, SourceAddress: SourceFrom(ctx), Details: details})
}

// byOperator is the entry of a change the actor in ctx (the `mountd`
// commands) makes at now; accountID "" for the installation.
func byOperator(ctx context.Context, accountID string, now time.Time, action AuditAction, target string, details map[string]any) context.Context {
	return WithAudit(ctx, AuditEntry{At: now.UTC().Truncate(time.Millisecond), AccountID: accountID, Actor: actorFrom(ctx),
		Action: action, Target: target, SourceAddress: SourceFrom(ctx), Details: details})
}

// redactURL is u as an audit entry may show it: without user information
// and query, either of which may carry a credential.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// AuditQuery selects entries of the audit log.
type AuditQuery struct {
	// AccountID selects one account's entries; "" the installation's.
	AccountID string
	// After is the position to read on from; nil: the oldest retained.
	After *Cursor
	// Actor, Action and Target, when not empty, select entries with that
	// actor id, action and target.
	Actor, Action, Target string
	Limit                 int
	// Tail reads the last Limit settled entries q selects instead of the
	// first ones (After must be nil), still returned oldest first.
	Tail bool
}

// AuditLog reads the log the stores record changes in (AuditFrom).
type AuditLog interface {
	// ReadAudit returns, oldest first, up to q.Limit entries after q.After
	// that are settled: no entry can later appear before them (with
	// q.Tail, the last q.Limit settled ones).
	ReadAudit(ctx context.Context, q AuditQuery) ([]AuditEntry, error)
}

// AuditRequest is a read of the audit log as a client asks it.
type AuditRequest struct {
	After *string
	// Limit is nil for the default page.
	Limit                 *int
	Actor, Action, Target *string
	// Tail, when not nil, asks for the last Tail entries (TailRule).
	Tail *int
}

// AuditPage is a page of the audit log and the cursor to read on from.
type AuditPage struct {
	Entries []AuditEntry
	Next    string
}

// AuditService reads the audit log.
type AuditService struct {
	log   AuditLog
	codec *CursorCodec
}

// NewAuditService returns the reader of log whose cursors codec makes.
func NewAuditService(log AuditLog, codec *AuditCursors) *AuditService {
	return &AuditService{log: log, codec: (*CursorCodec)(codec)}
}

// AuditCursors is the codec of the audit log's cursors: keyed apart from
// the event log's, so that one is never taken for the other, and a type of
// its own, so that wiring never confuses the two.
type AuditCursors CursorCodec

// Audit handles GET /audit: owners read their account's entries.
func (s *AuditService) Audit(ctx context.Context, p Principal, r AuditRequest) (AuditPage, error) {
	if err := p.Authorize(ActionReadAudit); err != nil {
		return AuditPage{}, err
	}
	q, err := s.query(r)
	if err != nil {
		return AuditPage{}, err
	}
	q.AccountID = p.AccountID
	return s.read(ctx, q, r.After)
}

// Installation reads the installation's entries (accountID ""), or an
// account's, for `mountd audit`.
func (s *AuditService) Installation(ctx context.Context, accountID string, r AuditRequest) (AuditPage, error) {
	q, err := s.query(r)
	if err != nil {
		return AuditPage{}, err
	}
	q.AccountID = accountID
	return s.read(ctx, q, r.After)
}

func (s *AuditService) query(r AuditRequest) (AuditQuery, error) {
	var v Validation
	q := AuditQuery{Limit: DefaultEventPage}
	if r.Limit != nil {
		if q.Limit = *r.Limit; q.Limit < 1 || q.Limit > MaxEventPage {
			v.Add("limit", "must be between 1 and 1000")
		}
	}
	if r.After != nil {
		c, err := s.codec.Decode(*r.After)
		if err != nil {
			v.Add("after", "is not a cursor of this audit log")
		}
		q.After = &c
	}
	filter := func(field string, in *string, dst *string) {
		if in == nil {
			return
		}
		if *in == "" || len(*in) > maxAuditFilter || strings.ContainsFunc(*in, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			v.Add(field, "must be 1 to 200 printable characters")
			return
		}
		*dst = *in
	}
	if tail := TailRule(&v, r.Tail, r.After != nil, r.Limit != nil, false); tail > 0 {
		q.Limit, q.Tail = tail, true
	}
	filter("actor", r.Actor, &q.Actor)
	filter("action", r.Action, &q.Action)
	filter("target", r.Target, &q.Target)
	if q.Action != "" && !knownAuditAction(AuditAction(q.Action)) {
		v.Add("action", "must name an audited action")
	}
	return q, v.Err()
}

func knownAuditAction(a AuditAction) bool {
	for _, k := range AuditActions {
		if k == a {
			return true
		}
	}
	return false
}

func (s *AuditService) read(ctx context.Context, q AuditQuery, after *string) (AuditPage, error) {
	entries, err := s.log.ReadAudit(ctx, q)
	if err != nil {
		return AuditPage{}, err
	}
	page := AuditPage{Entries: entries}
	for i := range entries {
		entries[i].ID = s.codec.Encode(entries[i].Position)
	}
	switch {
	case len(entries) > 0:
		// The last entry's position: settled entries only are read, so
		// none can later appear before it.
		page.Next = entries[len(entries)-1].ID
	case after != nil:
		page.Next = *after
	default:
		page.Next = s.codec.Encode(Cursor{})
	}
	return page, nil
}

// setFields adds the fields given (not nil) to details.
func setFields(details map[string]any, fields map[string]*string) map[string]any {
	for k, v := range fields {
		if v != nil {
			details[k] = *v
		}
	}
	return details
}

// mountFieldDetails are a claim's details: the fields given, the device
// key among them (in full: the console's fingerprint is its beginning), so
// that an owner sees which key its association pinned.
func mountFieldDetails(f MountFields) map[string]any {
	return setFields(map[string]any{}, map[string]*string{"name": f.Name, "serialNumber": f.SerialNumber,
		"macAddress": f.MACAddress, "firmwareRevision": f.FirmwareRevision, "softwareRevision": f.SoftwareRevision,
		"modelNumber": f.ModelNumber, "devicePublicKey": f.DevicePublicKey})
}

func mountUpdateDetails(u MountUpdate) map[string]any {
	return setFields(map[string]any{}, map[string]*string{"name": u.Name, "softwareRevision": u.SoftwareRevision})
}
