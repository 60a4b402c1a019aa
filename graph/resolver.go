// Package graph is the GraphQL transport of mountd: thin resolvers over the
// same core services as REST, with the same rights and error codes.
package graph

import (
	"log/slog"

	"github.com/mountd/mountd/core"
)

// Resolver holds the core services; wire builds it.
type Resolver struct {
	Accounts        Accounts
	MountService    Mounts
	NfcService      NfcTags
	FirmwareService Firmware
	EventLog        EventLog
	WebhookService  Webhooks
	AuditLog        Audit
	AlarmService    Alarms
	JobService      Jobs
	RolloutService  Rollouts
	GrantService    Grants
	Logger          *slog.Logger
	// Cursors makes the event log's positions into cursors and back.
	Cursors *core.CursorCodec
	// OfflineAfter is MOUNTD_OFFLINE_AFTER: an event's mount's presence is
	// computed with it.
	OfflineAfter core.OfflineAfter
}
