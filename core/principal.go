package core

import (
	"context"
	"time"
)

// Principal is the verified caller of an API operation.
type Principal struct {
	AccountID string
	ClientID  string
	// TokenID tells the caller's access tokens apart (a digest of the
	// token, never the token), for bounds per token; "" when unknown.
	TokenID string
	// IssuedAt is the token's iat (seconds); zero when it has none.
	IssuedAt  time.Time
	ExpiresAt time.Time
	// Person says that the token is a person's (ClientID is then the
	// user id), and Name is the person's username when the token says it.
	Person bool
	Name   string
	Grant
}

// Action is an operation subject to authorisation.
type Action string

// Every authorised action of the API. REST and GraphQL name the same ones.
const (
	ActionReadAccount        Action = "account.read"
	ActionListMounts         Action = "mounts.list"
	ActionReadMount          Action = "mount.read"
	ActionRequestAssociation Action = "mount.associate"
	ActionConfirmAssociation Action = "mount.confirm"
	ActionUpdateMount        Action = "mount.update"
	ActionDeleteMount        Action = "mount.delete"
	ActionAbandonMount       Action = "mount.abandon"
	ActionReportStates       Action = "mount.states.report"
	ActionReadStates         Action = "mount.states.read"
	ActionQueryCommand       Action = "mount.command.query"
	// ActionCreateGrant and ActionReadGrants are open to restricted tokens
	// for their mounts (the service bounds them); ActionManageGrants
	// (revoking, the account's grants of a rider) is the owner's.
	ActionCreateGrant      Action = "grant.create"
	ActionReadGrants       Action = "grant.read"
	ActionManageGrants     Action = "grant.manage"
	ActionReadCommandAudit Action = "mount.command.audit"
	ActionReadNfcTags      Action = "nfc.read"
	ActionWriteNfcTags     Action = "nfc.write"
	ActionReadFirmware     Action = "firmware.read"
	ActionSubscribe        Action = "events.subscribe"
	// ActionManageWebhooks is owner-only: a webhook receives every event
	// of the account.
	ActionManageWebhooks Action = "webhooks.manage"
	// ActionReadAudit is owner-only: the audit log names every actor.
	ActionReadAudit Action = "audit.read"
	// Alarm rules are the owner's; alarms are read by owners and
	// maintainers (restricted without mount items), acknowledged by owners.
	ActionManageAlarmRules Action = "alarm-rules.manage"
	ActionReadAlarms       Action = "alarms.read"
	ActionAcknowledgeAlarm Action = "alarm.acknowledge"
)

// restrictedActions is what role:restricted may do (docs/api.md, "Identity"); owners may
// do everything in their account.
var restrictedActions = map[Action]bool{
	ActionReadAccount:  true,
	ActionListMounts:   true,
	ActionReadMount:    true,
	ActionReportStates: true,
	ActionReadStates:   true,
	ActionQueryCommand: true,
	ActionCreateGrant:  true,
	ActionReadGrants:   true,
	ActionReadNfcTags:  true,
	ActionReadFirmware: true,
	ActionSubscribe:    true,
	// Maintainers (restricted without mount items) read alarms; the
	// service refuses restricted tokens with mount items.
	ActionReadAlarms: true,
}

// LimitedToMounts reports whether p reaches only the mounts its items name:
// a restricted token with mount items. Owners and maintainers (restricted
// without items) reach every mount of their account.
func (p Principal) LimitedToMounts() bool {
	return p.Role == RoleRestricted && len(p.MountUIDs) > 0
}

// CanSeeMount reports whether the token's mount items let it reach uid.
func (p Principal) CanSeeMount(uid string) bool {
	return !p.LimitedToMounts() || contains(p.MountUIDs, uid)
}

// Authorize decides whether p may perform a. It is the single place that
// decides, for every transport.
func (p Principal) Authorize(a Action) error {
	if !p.Complete {
		return Errorf(CodeInsufficientScope, "the token lacks a mandatory scope item and grants no rights")
	}
	if p.Role == RoleOwner || restrictedActions[a] {
		return nil
	}
	return Errorf(CodeForbidden, "the token's role does not allow this action")
}

// AuthorizeMount decides whether p may perform a on mount uid. A mount
// outside a restricted token's mount items is reported as not found, so that
// the token learns nothing about it.
func (p Principal) AuthorizeMount(a Action, uid string) error {
	if !p.Complete {
		return p.Authorize(a)
	}
	if !p.CanSeeMount(uid) {
		return Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	return p.Authorize(a)
}

type principalKey struct{}

// WithPrincipal returns a context carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the caller stored in ctx; without one it answers
// UNAUTHENTICATED, so a missing middleware can never grant access.
func PrincipalFrom(ctx context.Context) (Principal, error) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	if !ok {
		return Principal{}, Errorf(CodeUnauthenticated, "no valid access token")
	}
	return p, nil
}

// TokenVerifier turns a bearer token into a principal. It answers
// UNAUTHENTICATED for a missing, malformed, foreign-signed or expired token;
// a valid token lacking mandatory scope items yields a principal whose Grant
// is not Complete.
type TokenVerifier interface {
	Verify(ctx context.Context, rawToken string) (Principal, error)
}
