package core

import (
	"context"
	"time"
)

// EventType names what happened to a mount (docs/api.md, "GraphQL").
type EventType string

// The event types.
const (
	EventStatesReported       EventType = "STATES_REPORTED"
	EventAssociationRequested EventType = "ASSOCIATION_REQUESTED"
	EventAssociationConfirmed EventType = "ASSOCIATION_CONFIRMED"
	EventAssociationExpired   EventType = "ASSOCIATION_EXPIRED"
	EventAbandoned            EventType = "ABANDONED"
	EventDeleted              EventType = "DELETED"
	EventNfcTagsSynced        EventType = "NFC_TAGS_SYNCED"
	EventCommandIssued        EventType = "COMMAND_ISSUED"
	// A command's status moved (docs/api.md, "The truth from the mount"):
	// Event.Command carries it.
	EventCommandExecuted    EventType = "COMMAND_EXECUTED"
	EventCommandRefused     EventType = "COMMAND_REFUSED"
	EventCommandUnconfirmed EventType = "COMMAND_UNCONFIRMED"
	// Presence (docs/api.md, "Presence and alarms"): OFFLINE at the lapse of
	// lastSeenAt + offline-after, ONLINE with the first accepted report after
	// OFFLINE.
	EventMountOffline EventType = "MOUNT_OFFLINE"
	EventMountOnline  EventType = "MOUNT_ONLINE"
	// Alarms (docs/api.md, "Presence and alarms"): Event.Alarm carries the
	// alarm.
	EventAlarmRaised       EventType = "ALARM_RAISED"
	EventAlarmCleared      EventType = "ALARM_CLEARED"
	EventAlarmAcknowledged EventType = "ALARM_ACKNOWLEDGED"
	// Account-level events (no mount: UID is empty): Event.Job carries
	// the job.
	EventJobCompleted EventType = "JOB_COMPLETED"
	// Rollouts (docs/api.md, "Rollouts"): Event.Rollout carries the
	// rollout as the change left it.
	EventRolloutPhaseOpened EventType = "ROLLOUT_PHASE_OPENED"
	EventRolloutPaused      EventType = "ROLLOUT_PAUSED"
	EventRolloutCompleted   EventType = "ROLLOUT_COMPLETED"
	// A rider grant was revoked (CONTRACT §21): Event.Grant carries it.
	EventGrantRevoked EventType = "GRANT_REVOKED"
)

// AccountEventTypes lists the account-level event types: their events have
// no mount (UID "") and reach GraphQL through accountEvents.
var AccountEventTypes = []EventType{EventJobCompleted, EventRolloutPhaseOpened, EventRolloutPaused, EventRolloutCompleted}

// AccountLevel reports whether e is about the account rather than a mount.
func (e Event) AccountLevel() bool { return e.UID == "" }

// EventTypes lists every event type, so that counters by type can show
// zero before the first event.
var EventTypes = []EventType{EventStatesReported, EventAssociationRequested, EventAssociationConfirmed,
	EventAssociationExpired, EventAbandoned, EventDeleted, EventNfcTagsSynced, EventCommandIssued,
	EventCommandExecuted, EventCommandRefused, EventCommandUnconfirmed,
	EventMountOffline, EventMountOnline, EventAlarmRaised, EventAlarmCleared, EventAlarmAcknowledged,
	EventJobCompleted, EventRolloutPhaseOpened, EventRolloutPaused, EventRolloutCompleted, EventGrantRevoked}

// Event is something that happened to a mount, appended to the event log
// in the transaction of the change.
type Event struct {
	// ID is the event's position in the log, set when it is appended.
	ID   Cursor
	Type EventType
	UID  string
	// AccountID is the account the event belongs to: the owner, or for
	// expiry, abandon and delete, the account that lost the mount.
	AccountID string
	// Mount is the mount as the change left it (without key material),
	// with the latest values of AccountID's association; the store sets it.
	Mount Mount
	// States are a report's newly stored entries (STATES_REPORTED); the
	// store sets them.
	States []StateEntry
	// Command is the command whose status moved (COMMAND_EXECUTED,
	// COMMAND_REFUSED, COMMAND_UNCONFIRMED).
	Command *Command
	// Alarm is the alarm an ALARM_* event is about.
	Alarm *Alarm
	// Job is the job a JOB_* event is about.
	Job *Job
	// Rollout is the rollout a ROLLOUT_* event is about.
	Rollout *Rollout
	// Grant is the grant a GRANT_REVOKED event is about.
	Grant      *RiderGrant
	OccurredAt time.Time
	// Then are the events the same transaction appended after this one
	// (the ROLLOUT_* events of a mount leaving the account); the store
	// sets them and they are woken with it.
	Then []*Event
}

// StateCache holds each association's latest entry per code in front of
// the database, which stays the source of truth. Entries are named by key,
// which the core derives from the mount uid and its owner, so a mount that
// changes hands starts with an empty entry. Every write merges per code and
// keeps the newer entry (core.Newer), so concurrent writers can never move a
// value backwards. A mount's entry counts as a hit only once Fill has stored
// a complete set; Offer alone leaves a miss that the next read fills.
type StateCache interface {
	// Latest returns the cached latest entries; ok is false on a miss.
	Latest(ctx context.Context, key string) (entries []StateEntry, ok bool, err error)
	// Offer merges newly stored entries and, in the same step, returns the
	// mount's merged latest entries as Latest would (ok is false on a miss).
	Offer(ctx context.Context, key string, entries []StateEntry) (latest []StateEntry, ok bool, err error)
	// Fill merges the complete latest set read from the database and marks
	// the mount's entry complete.
	Fill(ctx context.Context, key string, entries []StateEntry) error
	// Forget drops an entry (delete, abandon, expiry).
	Forget(ctx context.Context, key string) error
}

// ExpiryScheduler remembers association deadlines and calls back when one
// passes. With several replicas each deadline fires on exactly one of them.
type ExpiryScheduler interface {
	// Schedule sets (or moves) uid's deadline.
	Schedule(ctx context.Context, uid string, at time.Time) error
	// Cancel forgets uid's deadline.
	Cancel(ctx context.Context, uid string) error
	// Run calls fire for each due deadline until ctx ends.
	Run(ctx context.Context, fire func(ctx context.Context, uid string)) error
}
