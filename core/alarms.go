package core

import (
	"context"
	"time"
)

// Presence and alarms (docs/api.md, "Presence and alarms").

// Presence says whether a mount is heard from (§17).
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
	// Values are the mount's latest values by code when raised.
	Values map[string]string
}

// AlarmFilter narrows GET /alarms; nil matches all.
type AlarmFilter struct {
	State    *AlarmState
	Severity *Severity
	MountUID *string
	RuleID   *string
}

// AlarmService holds alarm rules and alarms (§17). Its transports call it;
// the evaluation on accepted reports and the timer live beside ingest.
type AlarmService struct{}

// AlarmDeps are the ports AlarmService uses.
type AlarmDeps struct{}

// NewAlarmService returns an AlarmService over its ports.
func NewAlarmService(d AlarmDeps) *AlarmService { return &AlarmService{} }

// CreateRule handles POST /alarm-rules (owner).
func (s *AlarmService) CreateRule(ctx context.Context, p Principal, in AlarmRuleInput) (AlarmRule, error) {
	return AlarmRule{}, Errorf(CodeUnavailable, "alarm rules are not built yet")
}

// ListRules handles GET /alarm-rules (owner).
func (s *AlarmService) ListRules(ctx context.Context, p Principal, page Page) ([]AlarmRule, Pagination, error) {
	return nil, Pagination{}, Errorf(CodeUnavailable, "alarm rules are not built yet")
}

// Rule handles GET /alarm-rules/{id} (owner; ALARM_RULE_NOT_FOUND).
func (s *AlarmService) Rule(ctx context.Context, p Principal, id string) (AlarmRule, error) {
	return AlarmRule{}, Errorf(CodeAlarmRuleNotFound, "alarm rule %q not found", id)
}

// UpdateRule handles PATCH /alarm-rules/{id} (owner).
func (s *AlarmService) UpdateRule(ctx context.Context, p Principal, id string, in AlarmRuleInput) (AlarmRule, error) {
	return AlarmRule{}, Errorf(CodeAlarmRuleNotFound, "alarm rule %q not found", id)
}

// DeleteRule handles DELETE /alarm-rules/{id} (owner): its open alarms clear.
func (s *AlarmService) DeleteRule(ctx context.Context, p Principal, id string) error {
	return Errorf(CodeAlarmRuleNotFound, "alarm rule %q not found", id)
}

// SuggestedRules are the starting rules offered (not imposed) to an
// account without any.
func (s *AlarmService) SuggestedRules() []AlarmRuleInput { return nil }

// ListAlarms handles GET /alarms (owner and maintainer), newest first.
func (s *AlarmService) ListAlarms(ctx context.Context, p Principal, f AlarmFilter, page Page) ([]Alarm, Pagination, error) {
	return nil, Pagination{}, Errorf(CodeUnavailable, "alarms are not built yet")
}

// Acknowledge handles POST /alarms/{id}/acknowledge (owner; idempotent;
// acknowledging does not clear).
func (s *AlarmService) Acknowledge(ctx context.Context, p Principal, id string) (Alarm, error) {
	return Alarm{}, Errorf(CodeAlarmNotFound, "alarm %q not found", id)
}
