package graph

import (
	"context"

	"github.com/mountd/mountd/core"
)

// The services the GraphQL transport uses, declared here with just the
// methods it calls: core's services satisfy them.

// Mounts is what the resolvers ask of the mount rules.
type Mounts interface {
	RequestAssociation(ctx context.Context, p core.Principal, uid string, f core.MountFields) ([]core.Command, error)
	ConfirmAssociation(ctx context.Context, p core.Principal, uid string) (core.Mount, error)
	Mount(ctx context.Context, p core.Principal, uid string) (core.Mount, error)
	ListMounts(ctx context.Context, p core.Principal, f core.MountFilter, page core.Page) ([]core.Mount, core.Pagination, error)
	UpdateMount(ctx context.Context, p core.Principal, uid string, u core.MountUpdate) (core.Mount, error)
	DeleteMount(ctx context.Context, p core.Principal, uid string) error
	AbandonMount(ctx context.Context, p core.Principal, uid string) error
	ReportStates(ctx context.Context, p core.Principal, uid string, in []core.StateInput, sig *core.ReportSignature) (core.ReportResult, error)
	UploadReceipts(ctx context.Context, p core.Principal, uid string, in []core.ReceiptInput) (core.ReceiptResult, error)
	Command(ctx context.Context, p core.Principal, uid, id string) (core.Command, error)
	StateHistory(ctx context.Context, p core.Principal, uid string, f core.StateFilter, page core.Page) ([]core.StateEntry, core.Pagination, error)
	QueryCommand(ctx context.Context, p core.Principal, uid, code string, params core.CommandParams) ([]core.Command, error)
	CommandAudit(ctx context.Context, p core.Principal, uid string, page core.Page) ([]core.Command, core.Pagination, error)
}

// NfcTags is what they ask of the NFC tag rules.
type NfcTags interface {
	ListTags(ctx context.Context, p core.Principal, page core.Page) ([]core.NfcTag, core.Pagination, error)
	SyncTags(ctx context.Context, p core.Principal, mountUID string, tagUIDs []string) (core.SyncResult, error)
	UpdateTag(ctx context.Context, p core.Principal, uid string, u core.NfcTagUpdate) (core.NfcTag, error)
	TagsOfMounts(ctx context.Context, p core.Principal, mountUIDs []string) (map[string][]core.NfcTag, error)
}

// Firmware is what they ask of the firmware catalogue.
type Firmware interface {
	List(ctx context.Context, p core.Principal, model *string, page core.Page) ([]core.FirmwareVersion, core.Pagination, error)
	CheckUpdate(ctx context.Context, p core.Principal, model string, rev *string) (core.UpdateCheck, error)
	Download(ctx context.Context, p core.Principal, model string, rev *string) (core.Download, error)
}

// Accounts is what they ask of the account rules.
type Accounts interface {
	Me(ctx context.Context, p core.Principal) (core.Me, error)
}

// EventLog is what they ask of the event log's rules.
type EventLog interface {
	Authorize(ctx context.Context, p core.Principal, f core.EventFilter) error
	Stream(ctx context.Context, p core.Principal, f core.EventFilter, send func(core.Event) bool, end func()) error
	Events(ctx context.Context, p core.Principal, r core.EventsRequest) (core.EventPage, error)
	Head(ctx context.Context, p core.Principal) (core.Cursor, error)
}

// Webhooks is what they ask of the webhook rules.
type Webhooks interface {
	CreateWebhook(ctx context.Context, p core.Principal, in core.WebhookInput) (core.Webhook, string, error)
	Webhook(ctx context.Context, p core.Principal, id string) (core.Webhook, error)
	ListWebhooks(ctx context.Context, p core.Principal, page core.Page) ([]core.Webhook, core.Pagination, error)
	UpdateWebhook(ctx context.Context, p core.Principal, id string, in core.WebhookInput) (core.Webhook, error)
	DeleteWebhook(ctx context.Context, p core.Principal, id string) error
	RotateSecret(ctx context.Context, p core.Principal, id string) (string, error)
	TestWebhook(ctx context.Context, p core.Principal, id string) (core.Delivery, error)
	Deliveries(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.Delivery, core.Pagination, error)
}

// Audit is what they ask of the audit log.
type Audit interface {
	Audit(ctx context.Context, p core.Principal, r core.AuditRequest) (core.AuditPage, error)
}

// Alarms is what it asks of alarm rules and alarms (docs/api.md, "Presence and alarms").
type Alarms interface {
	CreateRule(ctx context.Context, p core.Principal, in core.AlarmRuleInput) (core.AlarmRule, error)
	ListRules(ctx context.Context, p core.Principal, page core.Page) ([]core.AlarmRule, core.Pagination, error)
	Rule(ctx context.Context, p core.Principal, id string) (core.AlarmRule, error)
	UpdateRule(ctx context.Context, p core.Principal, id string, in core.AlarmRuleInput) (core.AlarmRule, error)
	DeleteRule(ctx context.Context, p core.Principal, id string) error
	SuggestedRules() []core.AlarmRuleInput
	ListAlarms(ctx context.Context, p core.Principal, f core.AlarmFilter, page core.Page) ([]core.Alarm, core.Pagination, error)
	Acknowledge(ctx context.Context, p core.Principal, id string) (core.Alarm, error)
}

// Jobs is what it asks of jobs (docs/api.md, "Jobs").
type Jobs interface {
	CreateJob(ctx context.Context, p core.Principal, in core.JobInput) (core.Job, error)
	ListJobs(ctx context.Context, p core.Principal, page core.Page) ([]core.Job, core.Pagination, error)
	Job(ctx context.Context, p core.Principal, id string) (core.Job, error)
	JobMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.JobTarget, core.Pagination, error)
	CancelJob(ctx context.Context, p core.Principal, id string) (core.Job, error)
}

// Rollouts is what it asks of rollouts (docs/api.md, "Rollouts").
type Rollouts interface {
	CreateRollout(ctx context.Context, p core.Principal, in core.RolloutInput) (core.Rollout, error)
	ListRollouts(ctx context.Context, p core.Principal, page core.Page) ([]core.Rollout, core.Pagination, error)
	Rollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error)
	RolloutMounts(ctx context.Context, p core.Principal, id string, page core.Page) ([]core.RolloutTarget, core.Pagination, error)
	MountRollouts(ctx context.Context, p core.Principal, uid string, page core.Page) ([]core.RolloutOffer, core.Pagination, error)
	PauseRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error)
	ResumeRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error)
	CancelRollout(ctx context.Context, p core.Principal, id string) (core.Rollout, error)
}

// Grants is what it asks of offline access (docs/api.md, "Offline access").
type Grants interface {
	Create(ctx context.Context, p core.Principal, uid string, in core.GrantInput) (core.RiderGrant, error)
	Grant(ctx context.Context, p core.Principal, id string) (core.RiderGrant, error)
	List(ctx context.Context, p core.Principal, uid string, f core.GrantFilter, page core.Page) ([]core.RiderGrant, core.Pagination, error)
	Revoke(ctx context.Context, p core.Principal, id string) (core.RiderGrant, error)
}
