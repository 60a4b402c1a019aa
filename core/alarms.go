package core

import "time"

// Presence and alarms (docs/api.md, "Presence and alarms").

// Presence says whether a mount is heard from (docs/api.md, "Presence and
// alarms").
type Presence string

// The presences: UNKNOWN before any accepted report, ONLINE while the last
// one is within the offline-after threshold, OFFLINE after it.
const (
	PresenceUnknown Presence = "UNKNOWN"
	PresenceOnline  Presence = "ONLINE"
	PresenceOffline Presence = "OFFLINE"
)

// DefaultOfflineAfter is MOUNTD_OFFLINE_AFTER's default.
const DefaultOfflineAfter = 15 * time.Minute

// PresenceAt computes a mount's presence at now from lastSeenAt: it flips
// to OFFLINE exactly at lastSeenAt + offlineAfter.
func PresenceAt(lastSeenAt time.Time, offlineAfter time.Duration, now time.Time) Presence {
	switch {
	case lastSeenAt.IsZero():
		return PresenceUnknown
	case now.Before(lastSeenAt.Add(offlineAfter)):
		return PresenceOnline
	}
	return PresenceOffline
}

// EventPresence is the presence of an event's mount as the change left it:
// the snapshot's own when it has one, what MOUNT_OFFLINE and MOUNT_ONLINE
// say, otherwise computed from the snapshot's lastSeenAt at the event's
// instant. Every transport shows events' mounts with it.
func EventPresence(e Event, offlineAfter time.Duration) Presence {
	switch {
	case e.Mount.Presence != "":
		return e.Mount.Presence
	case e.Type == EventMountOffline:
		return PresenceOffline
	case e.Type == EventMountOnline:
		return PresenceOnline
	case offlineAfter <= 0:
		offlineAfter = DefaultOfflineAfter
	}
	return PresenceAt(e.Mount.LastSeenAt, offlineAfter, e.OccurredAt)
}

// Severity grades an alarm rule.
type Severity string

// The severities.
const (
	SeverityInfo     Severity = "INFO"
	SeverityWarning  Severity = "WARNING"
	SeverityCritical Severity = "CRITICAL"
)

// AlarmCondition is one condition of a rule: Code Op Value on the mount's
// latest value, or, with Presence set, the mount's presence.
type AlarmCondition struct {
	Code     StateCode
	Op       string // <, <=, >, >=, ==, !=
	Value    string
	Presence Presence
}

// AlarmRule raises an alarm on a mount whose conditions all held for
// ForSeconds. MountUIDs empty: every mount of the account.
type AlarmRule struct {
	ID         string
	AccountID  string
	Name       string
	Severity   Severity
	Conditions []AlarmCondition
	ForSeconds int
	MountUIDs  []string
	Enabled    bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
	// Revision counts the changes that restart the rule's evaluation
	// (conditions, forSeconds, mountUids, enabling); an open alarm or
	// pending episode of an older revision is closed.
	Revision int
}

// AlarmRuleInput is a rule as a client sent it (POST: every field it
// needs; PATCH: nil leaves a field unchanged).
type AlarmRuleInput struct {
	Name       *string
	Severity   *string
	Conditions *[]AlarmCondition
	ForSeconds *int
	MountUIDs  *[]string
	Enabled    *bool
}

// AlarmState is whether an alarm is open.
type AlarmState string

// The alarm states.
const (
	AlarmActive  AlarmState = "ACTIVE"
	AlarmCleared AlarmState = "CLEARED"
	// AlarmPending is the stores' state of an episode whose conditions
	// hold but not yet for forSeconds: never listed, never an event.
	AlarmPending AlarmState = "PENDING"
)

// Alarm is one episode of a rule's conditions holding on a mount.
type Alarm struct {
	ID             string
	AccountID      string
	RuleID         string
	RuleName       string
	UID            string
	Severity       Severity
	State          AlarmState
	RaisedAt       time.Time
	ClearedAt      time.Time // zero while ACTIVE
	AcknowledgedAt time.Time // zero until acknowledged
	AcknowledgedBy string
	// AcknowledgedByName names who acknowledged: a person's username or
	// the client's name at the acknowledgement.
	AcknowledgedByName string
	// Values are the mount's latest values by code when raised.
	Values map[string]string
}

// AcknowledgerName is who acknowledged a as the API shows it:
// AcknowledgedByName, or the id for an acknowledgement recorded before
// names were kept; "" while unacknowledged.
func (a Alarm) AcknowledgerName() string {
	if a.AcknowledgedByName != "" {
		return a.AcknowledgedByName
	}
	return a.AcknowledgedBy
}

// AlarmFilter narrows GET /alarms; nil matches all.
type AlarmFilter struct {
	State    *AlarmState
	Severity *Severity
	MountUID *string
	RuleID   *string
}
