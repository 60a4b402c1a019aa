package memory

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.AlarmStore = (*Store)(nil)

// alarmState holds the rules, alarms (with their pending episodes) and
// which lapses were announced.
type alarmState struct {
	rules     []core.AlarmRule
	tracks    []core.AlarmTrack // every alarm, PENDING, ACTIVE or CLEARED
	announced map[string]bool   // mount uid → its current lapse was announced
}

func cloneRule(r core.AlarmRule) core.AlarmRule {
	r.Conditions = slices.Clone(r.Conditions)
	r.MountUIDs = slices.Clone(r.MountUIDs)
	if r.MountUIDs == nil {
		r.MountUIDs = []string{}
	}
	return r
}

func cloneAlarm(a core.Alarm) core.Alarm {
	a.Values = maps.Clone(a.Values)
	return a
}

func (s *Store) ruleIndexLocked(accountID, id string) int {
	return slices.IndexFunc(s.al.rules, func(r core.AlarmRule) bool { return r.AccountID == accountID && r.ID == id })
}

func ruleNotFound(id string) error {
	return core.Errorf(core.CodeAlarmRuleNotFound, "alarm rule %q not found", id)
}

// CreateAlarmRule implements core.AlarmStore.
func (s *Store) CreateAlarmRule(ctx context.Context, r core.AlarmRule, max int) (core.AlarmRule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range s.al.rules {
		if o.AccountID == r.AccountID {
			n++
		}
	}
	if n >= max {
		var v core.Validation
		v.Add("conditions", "an account holds at most %d alarm rules", max)
		return core.AlarmRule{}, v.Err()
	}
	r.CreatedAt, r.UpdatedAt = ms(r.CreatedAt), ms(r.UpdatedAt)
	s.al.rules = append(s.al.rules, cloneRule(r))
	s.auditLocked(ctx)
	return cloneRule(r), nil
}

// AlarmRules implements core.AlarmStore.
func (s *Store) AlarmRules(_ context.Context, accountID string, p core.Page) ([]core.AlarmRule, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.AlarmRule
	for _, r := range s.al.rules {
		if r.AccountID == accountID {
			all = append(all, cloneRule(r))
		}
	}
	return append([]core.AlarmRule{}, page(all, p)...), len(all), nil
}

// AlarmRule implements core.AlarmStore.
func (s *Store) AlarmRule(_ context.Context, accountID, id string) (core.AlarmRule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.ruleIndexLocked(accountID, id)
	if i < 0 {
		return core.AlarmRule{}, ruleNotFound(id)
	}
	return cloneRule(s.al.rules[i]), nil
}

// EnabledAlarmRules implements core.AlarmStore.
func (s *Store) EnabledAlarmRules(_ context.Context, accountID string) ([]core.AlarmRule, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.AlarmRule{}
	for _, r := range s.al.rules {
		if r.AccountID == accountID && r.Enabled {
			out = append(out, cloneRule(r))
		}
	}
	return out, nil
}

// closeRuleLocked closes a rule's open episodes at at.
func (s *Store) closeRuleLocked(accountID, id string, at time.Time, cleared func(core.Alarm) *core.Event) []*core.Event {
	var events []*core.Event
	keep := s.al.tracks[:0]
	for _, t := range s.al.tracks {
		if t.AccountID == accountID && t.RuleID == id {
			switch t.State {
			case core.AlarmPending:
				continue
			case core.AlarmActive:
				t.State, t.ClearedAt = core.AlarmCleared, ms(at)
				ev := cleared(cloneAlarm(t.Alarm))
				s.appendMountEventLocked(ev)
				events = append(events, ev)
			}
		}
		keep = append(keep, t)
	}
	s.al.tracks = keep
	return events
}

// appendMountEventLocked appends an event about a mount that may be gone.
func (s *Store) appendMountEventLocked(e *core.Event) {
	m := core.Mount{UID: e.UID}
	if cur, ok := s.mounts[e.UID]; ok {
		m = *cur
	}
	s.appendLocked(e, m)
}

// UpdateAlarmRule implements core.AlarmStore.
func (s *Store) UpdateAlarmRule(ctx context.Context, r core.AlarmRule, restart bool, cleared func(core.Alarm) *core.Event) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.ruleIndexLocked(r.AccountID, r.ID)
	if i < 0 {
		return nil, ruleNotFound(r.ID)
	}
	r.UpdatedAt = ms(r.UpdatedAt)
	s.al.rules[i] = cloneRule(r)
	var events []*core.Event
	if restart {
		events = s.closeRuleLocked(r.AccountID, r.ID, r.UpdatedAt, cleared)
	}
	s.auditLocked(ctx)
	return events, nil
}

// DeleteAlarmRule implements core.AlarmStore.
func (s *Store) DeleteAlarmRule(ctx context.Context, accountID, id string, at time.Time, cleared func(core.Alarm) *core.Event) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.ruleIndexLocked(accountID, id)
	if i < 0 {
		return nil, ruleNotFound(id)
	}
	s.al.rules = slices.Delete(s.al.rules, i, i+1)
	events := s.closeRuleLocked(accountID, id, at, cleared)
	s.auditLocked(ctx)
	return events, nil
}

// ListAlarms implements core.AlarmStore: newest raisedAt first, ties by id.
func (s *Store) ListAlarms(_ context.Context, accountID string, f core.AlarmFilter, p core.Page) ([]core.Alarm, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.Alarm
	for _, t := range s.al.tracks {
		switch {
		case t.AccountID != accountID, t.State == core.AlarmPending,
			f.State != nil && t.State != *f.State,
			f.Severity != nil && t.Severity != *f.Severity,
			f.MountUID != nil && t.UID != *f.MountUID,
			f.RuleID != nil && t.RuleID != *f.RuleID:
			continue
		}
		all = append(all, cloneAlarm(t.Alarm))
	}
	slices.SortFunc(all, func(a, b core.Alarm) int {
		if c := b.RaisedAt.Compare(a.RaisedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return append([]core.Alarm{}, page(all, p)...), len(all), nil
}

// AcknowledgeAlarm implements core.AlarmStore.
func (s *Store) AcknowledgeAlarm(ctx context.Context, accountID, id string, by core.Actor, at time.Time, ev func(core.Alarm) *core.Event) (core.Alarm, *core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.al.tracks, func(t core.AlarmTrack) bool {
		return t.ID == id && t.AccountID == accountID && t.State != core.AlarmPending
	})
	if i < 0 {
		return core.Alarm{}, nil, core.Errorf(core.CodeAlarmNotFound, "alarm %q not found", id)
	}
	t := &s.al.tracks[i]
	if !t.AcknowledgedAt.IsZero() {
		return cloneAlarm(t.Alarm), nil, nil
	}
	t.AcknowledgedAt, t.AcknowledgedBy, t.AcknowledgedByName = ms(at), by.ID, s.actorNameLocked(by)
	e := ev(cloneAlarm(t.Alarm))
	s.appendMountEventLocked(e)
	s.auditLocked(ctx)
	return cloneAlarm(t.Alarm), e, nil
}

// WatchMount implements core.AlarmStore: the store's lock serialises it.
func (s *Store) WatchMount(_ context.Context, uid string, decide func(core.MountWatch) (core.WatchChanges, error)) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watchLocked(uid, decide)
}

// watchLocked is WatchMount under the store's lock.
func (s *Store) watchLocked(uid string, decide func(core.MountWatch) (core.WatchChanges, error)) ([]*core.Event, error) {
	c, err := decide(s.viewLocked(uid))
	if err != nil {
		return nil, err
	}
	return s.applyLocked(uid, c)
}

// viewLocked is what a watch of uid reads.
func (s *Store) viewLocked(uid string) core.MountWatch {
	var w core.MountWatch
	if m, ok := s.mounts[uid]; ok {
		w.Mount = *m
		w.OfflineAnnounced = s.al.announced[uid]
		if m.OwnerID != "" {
			w.Latest = s.latestLocked(uid, m.OwnerID)
		}
	}
	for _, t := range s.al.tracks {
		if t.UID == uid && (t.State == core.AlarmPending || t.State == core.AlarmActive) {
			t.Alarm = cloneAlarm(t.Alarm)
			w.Tracks = append(w.Tracks, t)
		}
	}
	return w
}

// applyLocked applies a watch's decision.
func (s *Store) applyLocked(uid string, c core.WatchChanges) ([]*core.Event, error) {
	if m, ok := s.mounts[uid]; ok {
		if c.ResetSeen {
			m.LastSeenAt = time.Time{}
			delete(s.al.announced, uid)
		}
		if !c.Seen.IsZero() {
			if c.Seen.After(m.LastSeenAt) {
				m.LastSeenAt = ms(c.Seen)
			}
			delete(s.al.announced, uid)
		}
		if c.AnnounceOffline {
			s.al.announced[uid] = true
		}
	}
	for _, t := range c.Close {
		i := slices.IndexFunc(s.al.tracks, func(o core.AlarmTrack) bool {
			return o.ID == t.ID && o.State == core.AlarmPending || o.State == core.AlarmActive && o.ID == t.ID
		})
		if i < 0 {
			continue
		}
		if s.al.tracks[i].State == core.AlarmPending {
			s.al.tracks = slices.Delete(s.al.tracks, i, i+1)
			continue
		}
		s.al.tracks[i].State, s.al.tracks[i].ClearedAt = core.AlarmCleared, ms(t.ClearedAt)
	}
	for _, t := range c.Raise {
		i := slices.IndexFunc(s.al.tracks, func(o core.AlarmTrack) bool { return o.ID == t.ID && o.State == core.AlarmPending })
		if i < 0 {
			continue
		}
		s.al.tracks[i].State, s.al.tracks[i].RaisedAt, s.al.tracks[i].Values = core.AlarmActive, ms(t.RaisedAt), maps.Clone(t.Values)
	}
	for _, t := range c.Open {
		// The unique open episode per rule and mount.
		if slices.ContainsFunc(s.al.tracks, func(o core.AlarmTrack) bool {
			return o.RuleID == t.RuleID && o.UID == t.UID && (o.State == core.AlarmPending || o.State == core.AlarmActive)
		}) {
			return nil, core.Errorf(core.CodeConflict, "rule %q already has an open alarm on mount %q", t.RuleID, t.UID)
		}
		t.Alarm = cloneAlarm(t.Alarm)
		t.RaisedAt, t.Since, t.DueAt = ms(t.RaisedAt), ms(t.Since), ms(t.DueAt)
		s.al.tracks = append(s.al.tracks, t)
	}
	for _, e := range c.Events {
		s.appendMountEventLocked(e)
	}
	return c.Events, nil
}

// WatchCandidates implements core.AlarmStore.
func (s *Store) WatchCandidates(_ context.Context, now time.Time, offlineAfter time.Duration, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	set := map[string]bool{}
	for uid, m := range s.mounts {
		if m.OwnerID != "" && live(m, now) && !m.LastSeenAt.IsZero() && !now.Before(m.LastSeenAt.Add(offlineAfter)) && !s.al.announced[uid] {
			set[uid] = true
		}
	}
	for _, t := range s.al.tracks {
		if t.State != core.AlarmPending && t.State != core.AlarmActive {
			continue
		}
		m, ok := s.mounts[t.UID]
		ri := s.ruleIndexLocked(t.AccountID, t.RuleID)
		switch {
		case t.State == core.AlarmPending && !t.DueAt.After(now),
			!ok, m.OwnerID != t.AccountID, !live(m, now),
			ri < 0, !s.al.rules[ri].Enabled, s.al.rules[ri].Revision != t.RuleRevision:
			set[t.UID] = true
		}
	}
	out := slices.Sorted(maps.Keys(set))
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// AlarmCounts implements core.AlarmStore.
func (s *Store) AlarmCounts(_ context.Context, now time.Time, offlineAfter time.Duration) (int, map[core.Severity]int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	offline := 0
	for _, m := range s.mounts {
		if m.OwnerID != "" && live(m, now) && core.PresenceAt(m.LastSeenAt, offlineAfter, now) == core.PresenceOffline {
			offline++
		}
	}
	active := map[core.Severity]int{}
	for _, t := range s.al.tracks {
		if t.State == core.AlarmActive {
			active[t.Severity]++
		}
	}
	return offline, active, nil
}

// OfflineMounts implements core.AlarmStore.
func (s *Store) OfflineMounts(_ context.Context, accountID string, now time.Time, offlineAfter time.Duration, after string, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for uid, m := range s.mounts {
		if uid > after && m.OwnerID == accountID && live(m, now) && core.PresenceAt(m.LastSeenAt, offlineAfter, now) == core.PresenceOffline {
			out = append(out, uid)
		}
	}
	slices.Sort(out)
	if len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// PruneAlarms implements core.AlarmStore.
func (s *Store) PruneAlarms(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	s.al.tracks = slices.DeleteFunc(s.al.tracks, func(t core.AlarmTrack) bool {
		if n < limit && t.State == core.AlarmCleared && t.ClearedAt.Before(before) {
			n++
			return true
		}
		return false
	})
	return n, nil
}
