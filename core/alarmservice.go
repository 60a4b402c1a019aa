package core

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"
)

// OfflineAfter is MOUNTD_OFFLINE_AFTER: how long after lastSeenAt a mount
// turns OFFLINE.
type OfflineAfter time.Duration

// The limits of alarm rules (docs/api.md, "Presence and alarms").
const (
	MaxAlarmRulesPerAccount = 50
	MaxAlarmConditions      = 10
	MaxAlarmForSeconds      = 86400
	MaxAlarmRuleMounts      = 1000
	MaxAlarmRuleNameLength  = 100
)

// AlarmSweepEvery is how often each replica looks in the database for
// lapses to announce, episodes that became due and alarms whose mount or
// rule changed; 10 s keeps every timed change well within 30 s.
const AlarmSweepEvery = 10 * time.Second

// alarmRulesTTL bounds how long a replica trusts its cached copy of an
// account's enabled rules (changes made here invalidate it at once).
const alarmRulesTTL = 5 * time.Second

// AlarmTrack is an open episode of a rule on a mount: PENDING (the
// conditions hold, not yet for forSeconds) or ACTIVE (the alarm).
type AlarmTrack struct {
	Alarm
	// Since is when the conditions became true; DueAt is Since plus the
	// rule's forSeconds.
	Since        time.Time
	DueAt        time.Time
	RuleRevision int
}

// MountWatch is what WatchMount reads under the mount's lock.
type MountWatch struct {
	// Mount is the mount row (LastSeenAt set; zero UID: no such mount).
	Mount Mount
	// OfflineAnnounced says MOUNT_OFFLINE was appended for the current
	// lapse of LastSeenAt.
	OfflineAnnounced bool
	// Latest are the latest entries of the owner's association.
	Latest []StateEntry
	// Tracks are the mount's open episodes, of any account.
	Tracks []AlarmTrack
}

// WatchChanges is what the evaluation decided; WatchMount applies it in
// the same transaction.
type WatchChanges struct {
	// Seen, when not zero, becomes lastSeenAt (when later) and the lapse
	// is no longer announced.
	Seen time.Time
	// ResetSeen makes lastSeenAt null (a new association) before Seen.
	ResetSeen bool
	// AnnounceOffline marks the current lapse announced.
	AnnounceOffline bool
	// Open are new episodes (PENDING or ACTIVE), with IDs.
	Open []AlarmTrack
	// Raise turns PENDING episodes ACTIVE (RaisedAt, Values set).
	Raise []AlarmTrack
	// Close drops PENDING episodes and clears ACTIVE ones (ClearedAt set).
	Close []AlarmTrack
	// Events are appended in order; the store sets their ID and Mount.
	Events []*Event
}

// Empty reports whether c changes nothing.
func (c WatchChanges) Empty() bool {
	return c.Seen.IsZero() && !c.ResetSeen && !c.AnnounceOffline && len(c.Open)+len(c.Raise)+len(c.Close)+len(c.Events) == 0
}

// AlarmStore persists alarm rules, alarms and presence.
type AlarmStore interface {
	// CreateAlarmRule stores r unless its account holds max rules already
	// (VALIDATION_FAILED); the audit entry in ctx is recorded with it.
	CreateAlarmRule(ctx context.Context, r AlarmRule, max int) (AlarmRule, error)
	// AlarmRules lists an account's rules, oldest first.
	AlarmRules(ctx context.Context, accountID string, p Page) ([]AlarmRule, int, error)
	// AlarmRule reads one (ALARM_RULE_NOT_FOUND).
	AlarmRule(ctx context.Context, accountID, id string) (AlarmRule, error)
	// EnabledAlarmRules reads an account's enabled rules.
	EnabledAlarmRules(ctx context.Context, accountID string) ([]AlarmRule, error)
	// UpdateAlarmRule stores r (by AccountID and ID; ALARM_RULE_NOT_FOUND);
	// with restart the rule's open episodes close in the same transaction:
	// PENDING ones are dropped, ACTIVE ones CLEARED at r.UpdatedAt with
	// the event cleared gives, returned in order.
	UpdateAlarmRule(ctx context.Context, r AlarmRule, restart bool, cleared func(Alarm) *Event) ([]*Event, error)
	// DeleteAlarmRule deletes a rule and closes its open episodes at at,
	// as UpdateAlarmRule does.
	DeleteAlarmRule(ctx context.Context, accountID, id string, at time.Time, cleared func(Alarm) *Event) ([]*Event, error)
	// ListAlarms lists an account's alarms (ACTIVE and CLEARED), newest
	// raisedAt first.
	ListAlarms(ctx context.Context, accountID string, f AlarmFilter, p Page) ([]Alarm, int, error)
	// AcknowledgeAlarm sets AcknowledgedAt/By/ByName once (ALARM_NOT_FOUND)
	// and appends the event ev gives then; later calls change nothing and
	// return a nil event. AcknowledgedBy is by's id, AcknowledgedByName
	// the name by is recorded under (ClientActorName, as the audit log
	// names it). The audit entry in ctx is recorded with it.
	AcknowledgeAlarm(ctx context.Context, accountID, id string, by Actor, at time.Time, ev func(Alarm) *Event) (Alarm, *Event, error)
	// WatchMount reads the mount's watch under a lock that serialises every
	// WatchMount of the mount (across replicas), calls decide, and applies
	// its changes in the same transaction. The events are returned with
	// their IDs. A mount that does not exist gives a zero Mount.
	WatchMount(ctx context.Context, uid string, decide func(MountWatch) (WatchChanges, error)) ([]*Event, error)
	// WatchCandidates returns up to limit uids that a sweep at now must
	// watch: a live association's lapse (lastSeenAt + offlineAfter <= now)
	// not announced, a
	// PENDING episode due, an open episode whose account no longer holds
	// the mount, or whose rule is gone, disabled or of another revision.
	WatchCandidates(ctx context.Context, now time.Time, offlineAfter time.Duration, limit int) ([]string, error)
	// PruneAlarms deletes up to limit CLEARED alarms cleared before
	// before, and says how many.
	PruneAlarms(ctx context.Context, before time.Time, limit int) (int, error)
	// OfflineMounts lists, in uid order after after, up to limit mounts of
	// accountID's live associations that are OFFLINE at now.
	OfflineMounts(ctx context.Context, accountID string, now time.Time, offlineAfter time.Duration, after string, limit int) ([]string, error)
	// AlarmCounts counts, over every account, the mounts of live
	// associations OFFLINE at now and the ACTIVE alarms by severity.
	AlarmCounts(ctx context.Context, now time.Time, offlineAfter time.Duration) (offline int, active map[Severity]int, err error)
}

// AlarmMeter is told of presence and alarm changes (the metrics).
type AlarmMeter interface {
	AlarmsChanged(raised, cleared []Alarm)
}

// AlarmDeps are the ports AlarmService uses.
type AlarmDeps struct {
	Store AlarmStore
	// Mounts, when set, evaluates rules on every accepted report through
	// this service and computes presence with OfflineAfter.
	Mounts       *MountService
	Waker        EventWaker
	Logger       *slog.Logger
	OfflineAfter OfflineAfter
}

// AlarmService holds alarm rules and alarms (docs/api.md, "Presence and
// alarms") and evaluates them: on every accepted report (MountService calls
// Evaluate) and by a sweep of the database for durations and presence.
type AlarmService struct {
	store        AlarmStore
	waker        EventWaker
	logger       *slog.Logger
	offlineAfter time.Duration
	now          func() time.Time

	mu    sync.Mutex
	rules map[string]cachedRules
}

type cachedRules struct {
	rules []AlarmRule
	at    time.Time
}

// NewAlarmService returns an AlarmService over its ports.
func NewAlarmService(d AlarmDeps) *AlarmService {
	after := time.Duration(d.OfflineAfter)
	if after <= 0 {
		after = DefaultOfflineAfter
	}
	logger := d.Logger
	if logger == nil {
		logger = slog.Default()
	}
	s := &AlarmService{store: d.Store, waker: d.Waker, logger: logger, offlineAfter: after, now: time.Now,
		rules: map[string]cachedRules{}}
	if d.Mounts != nil {
		d.Mounts.alarms = s
		d.Mounts.offlineAfter = after
	}
	return s
}

// SetClock replaces the service's clock (tests).
func (s *AlarmService) SetClock(now func() time.Time) { s.now = now }

func (s *AlarmService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// OfflineAfter is the threshold presence uses.
func (s *AlarmService) OfflineAfter() time.Duration { return s.offlineAfter }

func (s *AlarmService) authorizeOwner(p Principal, a Action) error {
	if !p.Complete {
		return p.Authorize(a)
	}
	if p.Role != RoleOwner {
		return Errorf(CodeForbidden, "only the account's owner manages alarm rules and acknowledges alarms")
	}
	return nil
}

// ValidateAlarmRule checks a rule's fields; conditions' fields are named
// conditions[i].code|op|value|presence.
func ValidateAlarmRule(r AlarmRule) error {
	var v Validation
	if r.Name == "" {
		v.Add("name", "must be 1 to %d characters", MaxAlarmRuleNameLength)
	}
	checkText(&v, "name", &r.Name, MaxAlarmRuleNameLength)
	switch r.Severity {
	case SeverityInfo, SeverityWarning, SeverityCritical:
	default:
		v.Add("severity", "must be INFO, WARNING or CRITICAL")
	}
	if n := len(r.Conditions); n < 1 || n > MaxAlarmConditions {
		v.Add("conditions", "must hold 1 to %d conditions", MaxAlarmConditions)
	}
	for i, c := range r.Conditions {
		if i >= MaxAlarmConditions {
			break
		}
		field := fmt.Sprintf("conditions[%d]", i)
		if c.Presence != "" {
			if c.Presence != PresenceOffline {
				v.Add(field+".presence", "must be OFFLINE")
			}
			if c.Code != "" || c.Op != "" || c.Value != "" {
				v.Add(field, "is either {code, op, value} or {presence}")
			}
			continue
		}
		if !KnownStateCode(c.Code) {
			v.Add(field+".code", "must be one of BATTERY_LEVEL, CPU_TEMPERATURE, MOUNT_LOCKED, HELMET_MOUNTED (or give presence)")
		}
		switch c.Op {
		case "<", "<=", ">", ">=", "==", "!=":
		default:
			v.Add(field+".op", "must be one of <, <=, >, >=, ==, !=")
		}
		if KnownStateCode(c.Code) {
			if err := ValidateState(c.Code, c.Value); err != nil {
				v.Add(field+".value", "%s", err.Error())
			}
		}
	}
	if r.ForSeconds < 0 || r.ForSeconds > MaxAlarmForSeconds {
		v.Add("forSeconds", "must be from 0 to %d", MaxAlarmForSeconds)
	}
	if len(r.MountUIDs) > MaxAlarmRuleMounts {
		v.Add("mountUids", "must name at most %d mounts", MaxAlarmRuleMounts)
	} else {
		for _, uid := range r.MountUIDs {
			if !ValidMountUID(uid) {
				v.Add("mountUids", "%q is not a mount uid", uid)
				break
			}
		}
	}
	return v.Err()
}

// normalizeRule canonicalises condition values and drops repeated uids.
func normalizeRule(r *AlarmRule) {
	for i, c := range r.Conditions {
		if c.Presence == "" {
			if v, err := CanonicalState(c.Code, c.Value); err == nil {
				r.Conditions[i].Value = v
			}
		}
	}
	var uids []string
	for _, uid := range r.MountUIDs {
		if !slices.Contains(uids, uid) {
			uids = append(uids, uid)
		}
	}
	if uids == nil {
		uids = []string{}
	}
	r.MountUIDs = uids
}

func ruleDetails(r AlarmRule) map[string]any {
	return map[string]any{"name": r.Name, "severity": string(r.Severity), "enabled": r.Enabled,
		"forSeconds": r.ForSeconds, "conditions": len(r.Conditions), "mountUids": len(r.MountUIDs)}
}

// CreateRule handles POST /alarm-rules (owner).
func (s *AlarmService) CreateRule(ctx context.Context, p Principal, in AlarmRuleInput) (AlarmRule, error) {
	if err := s.authorizeOwner(p, ActionManageAlarmRules); err != nil {
		return AlarmRule{}, err
	}
	now := s.clock()
	r := AlarmRule{ID: "alr_" + randomHex(12), AccountID: p.AccountID, Enabled: true, CreatedAt: now, UpdatedAt: now,
		MountUIDs: []string{}, Revision: 1}
	var v Validation
	if in.Name == nil {
		v.Add("name", "is required")
	}
	if in.Severity == nil {
		v.Add("severity", "is required")
	}
	if in.Conditions == nil {
		v.Add("conditions", "is required")
	}
	if err := v.Err(); err != nil {
		return AlarmRule{}, err
	}
	applyRuleInput(&r, in)
	if err := ValidateAlarmRule(r); err != nil {
		return AlarmRule{}, err
	}
	normalizeRule(&r)
	out, err := s.store.CreateAlarmRule(byPrincipal(ctx, p, now, AuditAlarmRuleCreate, AuditTarget("alarm-rule", r.ID), ruleDetails(r)),
		r, MaxAlarmRulesPerAccount)
	if err != nil {
		return AlarmRule{}, err
	}
	s.invalidate(p.AccountID)
	s.scanOffline(ctx, out)
	return out, nil
}

// MaxOfflineScan bounds how many OFFLINE mounts a new or restarted rule
// with a presence condition evaluates in its request.
const MaxOfflineScan = 5000

// scanOffline evaluates a new or restarted rule with a presence condition
// on the mounts OFFLINE already (their lapse has passed: no sweep would
// look at them again); held counts from now. Failures are logged.
func (s *AlarmService) scanOffline(ctx context.Context, r AlarmRule) {
	if !r.Enabled || !r.hasPresence() {
		return
	}
	ctx = context.WithoutCancel(ctx)
	after := ""
	for scanned := 0; scanned < MaxOfflineScan; {
		uids, err := s.store.OfflineMounts(ctx, r.AccountID, s.clock(), s.offlineAfter, after, sweepBatch)
		if err != nil {
			s.logger.ErrorContext(ctx, "list offline mounts failed", "rule", r.ID, "err", err)
			return
		}
		for _, uid := range uids {
			if r.applies(uid) {
				if err := s.watch(ctx, uid, WatchSweep, r.AccountID); err != nil {
					s.logger.ErrorContext(ctx, "evaluate alarms failed", "uid", uid, "err", err)
				}
			}
		}
		scanned += len(uids)
		if len(uids) < sweepBatch {
			return
		}
		after = uids[len(uids)-1]
	}
}

func applyRuleInput(r *AlarmRule, in AlarmRuleInput) {
	if in.Name != nil {
		r.Name = *in.Name
	}
	if in.Severity != nil {
		r.Severity = Severity(*in.Severity)
	}
	if in.Conditions != nil {
		r.Conditions = slices.Clone(*in.Conditions)
	}
	if in.ForSeconds != nil {
		r.ForSeconds = *in.ForSeconds
	}
	if in.MountUIDs != nil {
		r.MountUIDs = slices.Clone(*in.MountUIDs)
	}
	if in.Enabled != nil {
		r.Enabled = *in.Enabled
	}
}

// ListRules handles GET /alarm-rules (owner).
func (s *AlarmService) ListRules(ctx context.Context, p Principal, page Page) ([]AlarmRule, Pagination, error) {
	if err := s.authorizeOwner(p, ActionManageAlarmRules); err != nil {
		return nil, Pagination{}, err
	}
	rules, total, err := s.store.AlarmRules(ctx, p.AccountID, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return rules, NewPagination(page, total), nil
}

// Rule handles GET /alarm-rules/{id} (owner; ALARM_RULE_NOT_FOUND).
func (s *AlarmService) Rule(ctx context.Context, p Principal, id string) (AlarmRule, error) {
	if err := s.authorizeOwner(p, ActionManageAlarmRules); err != nil {
		return AlarmRule{}, err
	}
	return s.store.AlarmRule(ctx, p.AccountID, id)
}

// UpdateRule handles PATCH /alarm-rules/{id} (owner). A change of
// conditions, forSeconds or mountUids, and disabling, clear the rule's open
// alarms; its evaluation starts afresh.
func (s *AlarmService) UpdateRule(ctx context.Context, p Principal, id string, in AlarmRuleInput) (AlarmRule, error) {
	if err := s.authorizeOwner(p, ActionManageAlarmRules); err != nil {
		return AlarmRule{}, err
	}
	old, err := s.store.AlarmRule(ctx, p.AccountID, id)
	if err != nil {
		return AlarmRule{}, err
	}
	r := old
	applyRuleInput(&r, in)
	if err := ValidateAlarmRule(r); err != nil {
		return AlarmRule{}, err
	}
	normalizeRule(&r)
	restart := !slices.Equal(r.Conditions, old.Conditions) || r.ForSeconds != old.ForSeconds ||
		!slices.Equal(r.MountUIDs, old.MountUIDs) || r.Enabled != old.Enabled
	now := s.clock()
	r.UpdatedAt = now
	if restart {
		r.Revision = old.Revision + 1
	}
	events, err := s.store.UpdateAlarmRule(byPrincipal(ctx, p, now, AuditAlarmRuleUpdate, AuditTarget("alarm-rule", id), ruleDetails(r)),
		r, restart, s.clearedEvent(now))
	s.invalidate(p.AccountID)
	if err != nil {
		return AlarmRule{}, err
	}
	s.announce(ctx, events)
	if restart {
		s.scanOffline(ctx, r)
	}
	return r, nil
}

// DeleteRule handles DELETE /alarm-rules/{id} (owner): its open alarms clear.
func (s *AlarmService) DeleteRule(ctx context.Context, p Principal, id string) error {
	if err := s.authorizeOwner(p, ActionManageAlarmRules); err != nil {
		return err
	}
	now := s.clock()
	events, err := s.store.DeleteAlarmRule(byPrincipal(ctx, p, now, AuditAlarmRuleDelete, AuditTarget("alarm-rule", id), nil),
		p.AccountID, id, now, s.clearedEvent(now))
	s.invalidate(p.AccountID)
	if err != nil {
		return err
	}
	s.announce(ctx, events)
	return nil
}

// SuggestedRules are the starting rules offered (not imposed) to an
// account without any.
func (s *AlarmService) SuggestedRules() []AlarmRuleInput { return SuggestedAlarmRules() }

// SuggestedAlarmRules are the four starting rules: battery below 20 %,
// silent for an hour, helmet absent while locked for 10 minutes, CPU above
// 70 °C for 5 minutes.
func SuggestedAlarmRules() []AlarmRuleInput {
	rule := func(name string, sev Severity, forSeconds int, conds ...AlarmCondition) AlarmRuleInput {
		sv := string(sev)
		uids := []string{}
		enabled := true
		return AlarmRuleInput{Name: &name, Severity: &sv, Conditions: &conds, ForSeconds: &forSeconds, MountUIDs: &uids, Enabled: &enabled}
	}
	return []AlarmRuleInput{
		rule("Battery low", SeverityWarning, 0, AlarmCondition{Code: StateBatteryLevel, Op: "<", Value: "20"}),
		rule("Silent for an hour", SeverityWarning, 3600-int(DefaultOfflineAfter/time.Second), AlarmCondition{Presence: PresenceOffline}),
		rule("Helmet absent while locked", SeverityInfo, 600,
			AlarmCondition{Code: StateMountLocked, Op: "==", Value: "1"}, AlarmCondition{Code: StateHelmetMounted, Op: "==", Value: "0"}),
		rule("CPU hot", SeverityCritical, 300, AlarmCondition{Code: StateCPUTemperature, Op: ">", Value: "70"}),
	}
}

// ListAlarms handles GET /alarms (owner and maintainer), newest first; a
// restricted token with mount items is FORBIDDEN.
func (s *AlarmService) ListAlarms(ctx context.Context, p Principal, f AlarmFilter, page Page) ([]Alarm, Pagination, error) {
	if err := p.Authorize(ActionReadAlarms); err != nil {
		return nil, Pagination{}, err
	}
	if p.LimitedToMounts() {
		return nil, Pagination{}, Errorf(CodeForbidden, "a token limited to mounts cannot read alarms")
	}
	var v Validation
	if f.State != nil && *f.State != AlarmActive && *f.State != AlarmCleared {
		v.Add("state", "must be ACTIVE or CLEARED")
	}
	if f.Severity != nil && *f.Severity != SeverityInfo && *f.Severity != SeverityWarning && *f.Severity != SeverityCritical {
		v.Add("severity", "must be INFO, WARNING or CRITICAL")
	}
	if f.MountUID != nil && !ValidMountUID(*f.MountUID) {
		v.Add("mountUid", "is not a mount uid")
	}
	if err := v.Err(); err != nil {
		return nil, Pagination{}, err
	}
	alarms, total, err := s.store.ListAlarms(ctx, p.AccountID, f, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return alarms, NewPagination(page, total), nil
}

// Acknowledge handles POST /alarms/{id}/acknowledge (owner; idempotent;
// acknowledging does not clear).
func (s *AlarmService) Acknowledge(ctx context.Context, p Principal, id string) (Alarm, error) {
	if err := s.authorizeOwner(p, ActionAcknowledgeAlarm); err != nil {
		return Alarm{}, err
	}
	now := s.clock()
	by := p.Actor()
	a, ev, err := s.store.AcknowledgeAlarm(byPrincipal(ctx, p, now, AuditAlarmAcknowledge, AuditTarget("alarm", id), nil),
		p.AccountID, id, by, now, func(a Alarm) *Event {
			return &Event{Type: EventAlarmAcknowledged, UID: a.UID, AccountID: a.AccountID, Alarm: &a, OccurredAt: now}
		})
	if err != nil {
		return Alarm{}, err
	}
	if ev != nil {
		s.announce(ctx, []*Event{ev})
	}
	return a, nil
}

func (s *AlarmService) clearedEvent(now time.Time) func(Alarm) *Event {
	return func(a Alarm) *Event {
		return &Event{Type: EventAlarmCleared, UID: a.UID, AccountID: a.AccountID, Alarm: &a, OccurredAt: now}
	}
}

// announce wakes the feeds for committed events and tells the meter.
func (s *AlarmService) announce(ctx context.Context, events []*Event) {
	var raised, cleared []Alarm
	for _, ev := range events {
		if s.waker != nil {
			wake(ctx, s.waker, s.logger, ev)
		}
		switch {
		case ev.Alarm == nil:
		case ev.Type == EventAlarmRaised:
			raised = append(raised, *ev.Alarm)
		case ev.Type == EventAlarmCleared:
			cleared = append(cleared, *ev.Alarm)
		}
	}
	if m, ok := s.waker.(AlarmMeter); ok && len(raised)+len(cleared) > 0 {
		m.AlarmsChanged(raised, cleared)
	}
}

func (s *AlarmService) invalidate(accountID string) {
	s.mu.Lock()
	delete(s.rules, accountID)
	s.mu.Unlock()
}

// enabledRules reads an account's enabled rules through the in-process
// cache (invalidated by changes here, trusted for alarmRulesTTL).
func (s *AlarmService) enabledRules(ctx context.Context, accountID string) ([]AlarmRule, error) {
	now := time.Now()
	s.mu.Lock()
	c, ok := s.rules[accountID]
	s.mu.Unlock()
	if ok && now.Sub(c.at) < alarmRulesTTL {
		return c.rules, nil
	}
	rules, err := s.store.EnabledAlarmRules(ctx, accountID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if len(s.rules) > 10000 {
		clear(s.rules)
	}
	s.rules[accountID] = cachedRules{rules: rules, at: now}
	s.mu.Unlock()
	return rules, nil
}

// applies says whether r watches uid.
func (r AlarmRule) applies(uid string) bool {
	return len(r.MountUIDs) == 0 || slices.Contains(r.MountUIDs, uid)
}

func (r AlarmRule) hasPresence() bool {
	return slices.ContainsFunc(r.Conditions, func(c AlarmCondition) bool { return c.Presence != "" })
}

// Holds reports whether every condition of r holds on latest (the latest
// value by code) and presence. A condition on a code without a value does
// not hold.
func (r AlarmRule) Holds(latest map[StateCode]string, presence Presence) bool {
	for _, c := range r.Conditions {
		if c.Presence != "" {
			if presence != c.Presence {
				return false
			}
			continue
		}
		v, ok := latest[c.Code]
		if !ok || !compareState(v, c.Op, c.Value) {
			return false
		}
	}
	return true
}

func compareState(v, op, want string) bool {
	a, err1 := strconv.ParseFloat(v, 64)
	b, err2 := strconv.ParseFloat(want, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	switch op {
	case "<":
		return a < b
	case "<=":
		return a <= b
	case ">":
		return a > b
	case ">=":
		return a >= b
	case "==":
		return a == b
	case "!=":
		return a != b
	}
	return false
}

// WatchMode says why a mount is watched.
type WatchMode int

// The watch modes.
const (
	// WatchSweep: the timer (lapses, due episodes, changed rules).
	WatchSweep WatchMode = iota
	// WatchHeard: an accepted report or receipt upload that counts for
	// presence (lastSeenAt moves to now).
	WatchHeard
	// WatchValues: an accepted report that does not count for presence
	// (its entries are older than the offline threshold).
	WatchValues
	// WatchNewAssociation: lastSeenAt starts over (a new association).
	WatchNewAssociation
)

// Evaluate watches one mount of accountID's: lastSeenAt, presence events
// and the owner's rules on its latest values. MountService calls it in the
// request that accepted the report (or changed the mount's owner), after
// that change's transaction.
func (s *AlarmService) Evaluate(ctx context.Context, uid, accountID string, mode WatchMode) error {
	return s.watch(ctx, uid, mode, accountID)
}

// errNeedRules asks watch to read an owner's rules outside the lock.
type errNeedRules struct{ owner string }

func (e errNeedRules) Error() string { return "rules of " + e.owner + " needed" }

// watch runs one WatchMount. The rules are read before the transaction
// (from the cache); if the mount turns out to have another owner, once more
// with that owner's.
func (s *AlarmService) watch(ctx context.Context, uid string, mode WatchMode, owner string) error {
	fresh := false
	for attempt := 0; ; attempt++ {
		var rules []AlarmRule
		if owner != "" {
			var err error
			if rules, err = s.enabledRules(ctx, owner); err != nil {
				return err
			}
		}
		now := s.clock()
		events, err := s.store.WatchMount(ctx, uid, func(w MountWatch) (WatchChanges, error) {
			if w.Mount.OwnerID != "" && w.Mount.OwnerID != owner {
				return WatchChanges{}, errNeedRules{w.Mount.OwnerID}
			}
			if !fresh && staleRules(w, rules) {
				return WatchChanges{}, errStaleRules{}
			}
			return DecideWatch(w, rules, now, mode, s.offlineAfter), nil
		})
		var need errNeedRules
		if errors.As(err, &need) && attempt < 3 {
			// Read the owner's rules outside the lock and watch again.
			owner = need.owner
			continue
		}
		if errors.As(err, new(errStaleRules)) && attempt < 3 {
			s.invalidate(owner)
			fresh = true
			continue
		}
		if err != nil {
			return err
		}
		s.announce(ctx, events)
		return nil
	}
}

// errStaleRules says the cached rules disagree with an open episode.
type errStaleRules struct{}

func (errStaleRules) Error() string { return "cached alarm rules are stale" }

// staleRules reports whether an open episode of the owner names a rule the
// cached rules lack or know at another revision: the cache may be older
// than a change made on another replica, and deciding with it would close
// a valid episode. The rules are read again from the database then.
func staleRules(w MountWatch, rules []AlarmRule) bool {
	for _, t := range w.Tracks {
		if t.AccountID != w.Mount.OwnerID {
			continue
		}
		i := slices.IndexFunc(rules, func(r AlarmRule) bool { return r.ID == t.RuleID })
		if i < 0 || rules[i].Revision != t.RuleRevision {
			return true
		}
	}
	return false
}

// reportWatch is the evaluation a report runs in its transaction; with
// fresh false it refuses to decide on rules the open episodes say are
// stale (errStaleRules), and the report is tried again with fresh ones.
func (s *AlarmService) reportWatch(ctx context.Context, accountID, uid string, now time.Time, mode WatchMode, fresh bool) (watch func(MountWatch) (WatchChanges, error), light bool, err error) {
	if fresh {
		s.invalidate(accountID)
	}
	rules, err := s.enabledRules(ctx, accountID)
	if err != nil {
		return nil, false, err
	}
	light = !slices.ContainsFunc(rules, func(r AlarmRule) bool { return r.applies(uid) })
	return func(w MountWatch) (WatchChanges, error) {
		if !fresh && staleRules(w, rules) {
			return WatchChanges{}, errStaleRules{}
		}
		return DecideWatch(w, rules, now, mode, s.offlineAfter), nil
	}, light, nil
}

// IsStaleRules reports whether err asks for the rules to be read again.
func isStaleRules(err error) bool { return errors.As(err, new(errStaleRules)) }

// DecideWatch is the evaluation of one mount at now (pure): presence
// (lastSeenAt, MOUNT_OFFLINE and MOUNT_ONLINE) and every rule of the
// owner's (rules are the owner's enabled rules).
func DecideWatch(w MountWatch, rules []AlarmRule, now time.Time, mode WatchMode, offlineAfter time.Duration) WatchChanges {
	var c WatchChanges
	m := w.Mount
	if m.UID == "" {
		// The mount is gone: close whatever was open.
		for _, t := range w.Tracks {
			closeTrack(&c, t, now)
		}
		return c
	}
	live := m.OwnerID != "" && (m.State == StateAssociated || m.State == StateIdle && m.IdleDeadline.After(now))
	owner := m.OwnerID
	lastSeen, announced := m.LastSeenAt, w.OfflineAnnounced
	if mode == WatchNewAssociation {
		c.ResetSeen = true
		lastSeen, announced = time.Time{}, false
	}
	lapseAt := lastSeen.Add(offlineAfter)
	lapsed := !lastSeen.IsZero() && !now.Before(lapseAt)
	justLapsed := false
	event := func(t EventType, at time.Time) {
		c.Events = append(c.Events, &Event{Type: t, UID: m.UID, AccountID: owner, OccurredAt: at})
	}
	switch {
	case !live:
		// The association ended: the next one starts unheard.
		if !lastSeen.IsZero() || announced {
			c.ResetSeen = true
		}
	case mode == WatchHeard:
		if lapsed && !announced {
			// Heard after a lapse no sweep announced yet: the events
			// still pair up.
			event(EventMountOffline, lapseAt)
			announced = true
		}
		if announced {
			event(EventMountOnline, now)
		}
		c.Seen = now
		lastSeen, announced = now, false
	case lapsed && !announced:
		c.AnnounceOffline = true
		event(EventMountOffline, lapseAt)
		announced, justLapsed = true, true
	}
	presence := PresenceAt(lastSeen, offlineAfter, now)
	latest := make(map[StateCode]string, len(w.Latest))
	values := make(map[string]string, len(w.Latest))
	for _, e := range LatestPerCode(w.Latest) {
		latest[e.Code] = e.Value
		values[string(e.Code)] = e.Value
	}
	byID := map[string]AlarmRule{}
	if live {
		for _, r := range rules {
			if r.Enabled && r.AccountID == owner && r.applies(m.UID) {
				byID[r.ID] = r
			}
		}
	}
	open := map[string]AlarmTrack{}
	for _, t := range w.Tracks {
		r, ok := byID[t.RuleID]
		if !ok || t.AccountID != owner || t.RuleRevision != r.Revision || open[t.RuleID].ID != "" {
			closeTrack(&c, t, now)
			continue
		}
		open[t.RuleID] = t
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := byID[id]
		t, isOpen := open[id]
		if !r.Holds(latest, presence) {
			if isOpen {
				closeTrack(&c, t, now)
			}
			continue
		}
		if !isOpen {
			since := now
			if justLapsed && r.hasPresence() {
				since = lapseAt
			}
			t = AlarmTrack{Alarm: Alarm{ID: "alm_" + randomHex(12), AccountID: owner, RuleID: r.ID, RuleName: r.Name,
				UID: m.UID, Severity: r.Severity, State: AlarmPending}, Since: since,
				DueAt: since.Add(time.Duration(r.ForSeconds) * time.Second), RuleRevision: r.Revision}
			if !t.DueAt.After(now) {
				t.State, t.RaisedAt, t.Values = AlarmActive, now, values
				c.Open = append(c.Open, t)
				a := t.Alarm
				c.Events = append(c.Events, &Event{Type: EventAlarmRaised, UID: m.UID, AccountID: owner, Alarm: &a, OccurredAt: now})
				continue
			}
			c.Open = append(c.Open, t)
			continue
		}
		if t.State == AlarmPending && !t.DueAt.After(now) {
			t.State, t.RaisedAt, t.Values = AlarmActive, now, values
			c.Raise = append(c.Raise, t)
			a := t.Alarm
			c.Events = append(c.Events, &Event{Type: EventAlarmRaised, UID: m.UID, AccountID: owner, Alarm: &a, OccurredAt: now})
		}
	}
	return c
}

// closeTrack drops a PENDING episode or clears an ACTIVE alarm.
func closeTrack(c *WatchChanges, t AlarmTrack, now time.Time) {
	if t.State == AlarmActive {
		t.State, t.ClearedAt = AlarmCleared, now
		a := t.Alarm
		c.Events = append(c.Events, &Event{Type: EventAlarmCleared, UID: t.UID, AccountID: t.AccountID, Alarm: &a, OccurredAt: now})
	}
	c.Close = append(c.Close, t)
}

// Counts are the fleet's figures for the metrics: mounts OFFLINE now and
// ACTIVE alarms by severity.
func (s *AlarmService) Counts(ctx context.Context) (offline int, active map[Severity]int, err error) {
	return s.store.AlarmCounts(ctx, s.clock(), s.offlineAfter)
}

// AlarmRetention is how long a CLEARED alarm stays listed.
const AlarmRetention = 90 * 24 * time.Hour

// SweepAlarms watches every mount the database says is due (lapses to
// announce, episodes due, alarms whose mount or rule changed) and returns
// how many it watched. Safe on every replica at once: each mount's watch
// runs under its lock and rereads what it decides on.
func (s *AlarmService) SweepAlarms(ctx context.Context) (int, error) {
	total := 0
	for {
		uids, err := s.store.WatchCandidates(ctx, s.clock(), s.offlineAfter, sweepBatch)
		if err != nil {
			return total, err
		}
		for _, uid := range uids {
			if err := s.watch(ctx, uid, WatchSweep, ""); err != nil {
				return total, err
			}
		}
		total += len(uids)
		if len(uids) < sweepBatch || ctx.Err() != nil || total >= 20*sweepBatch {
			break
		}
	}
	if ctx.Err() != nil {
		return total, ctx.Err()
	}
	// CLEARED alarms leave after AlarmRetention, a batch per sweep.
	if _, err := s.store.PruneAlarms(ctx, s.clock().Add(-AlarmRetention), sweepBatch); err != nil {
		return total, err
	}
	return total, nil
}
