package memory

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.RolloutStore = (*Store)(nil)

// rolloutState is the rollouts and their targets.
type rolloutState struct {
	rollouts map[string]*core.Rollout
	targets  map[string]map[string]*core.RolloutTarget // rollout id → mount uid →
	// maxTargets, when not 0, replaces core.MaxRolloutTargets (tests).
	maxTargets int
}

// LimitRolloutTargets makes CreateRollout refuse more than n targets
// instead of core.MaxRolloutTargets, as the database store's; 0 restores
// it.
func (s *Store) LimitRolloutTargets(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ro.maxTargets = n
}

func cloneRollout(r core.Rollout) core.Rollout {
	r.Phases = slices.Clone(r.Phases)
	return r
}

func cloneTarget(t core.RolloutTarget) core.RolloutTarget {
	if t.NewRevisionCounter != nil {
		c := *t.NewRevisionCounter
		t.NewRevisionCounter = &c
	}
	if t.OldRevisionCounter != nil {
		c := *t.OldRevisionCounter
		t.OldRevisionCounter = &c
	}
	return t
}

func rolloutNotFound(id string) error {
	return core.Errorf(core.CodeRolloutNotFound, "rollout %q not found", id)
}

func rolloutLive(r *core.Rollout) bool {
	return r.State == core.RolloutRunning || r.State == core.RolloutPaused
}

// CreateRollout implements core.RolloutStore.
func (s *Store) CreateRollout(ctx context.Context, r core.Rollout, f core.MountFilter, now time.Time) (core.Rollout, []*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ro.rollouts == nil {
		s.ro.rollouts, s.ro.targets = map[string]*core.Rollout{}, map[string]map[string]*core.RolloutTarget{}
	}
	if _, ok := s.ro.rollouts[r.ID]; ok {
		return core.Rollout{}, nil, core.Errorf(core.CodeConflict, "rollout %q already exists", r.ID)
	}
	for _, o := range s.ro.rollouts {
		if o.AccountID == r.AccountID && o.ModelNumber == r.ModelNumber && rolloutLive(o) {
			return core.Rollout{}, nil, core.Errorf(core.CodeConflict,
				"rollout %q of model %q is %s; cancel it first", o.ID, o.ModelNumber, o.State)
		}
	}
	bound := core.MaxRolloutTargets
	if s.ro.maxTargets > 0 {
		bound = s.ro.maxTargets
	}
	now = ms(now)
	var uids []string
	for _, m := range s.mounts {
		if m.ModelNumber != r.ModelNumber || m.DevicePublicKey == "" || m.SoftwareRevision == r.SoftwareRevision ||
			!s.jobMatchesLocked(m, r.AccountID, f) {
			continue
		}
		if len(uids) == bound {
			var v core.Validation
			v.Add("filter", "selects more than %d mounts; a rollout has at most %d targets", bound, bound)
			return core.Rollout{}, nil, v.Err()
		}
		uids = append(uids, m.UID)
	}
	slices.Sort(uids)
	phases := core.AssignRolloutPhases(uids, r.Phases)
	r = cloneRollout(r)
	r.CreatedAt = ms(r.CreatedAt)
	r.State, r.PausedReason, r.OpenPhase, r.EndedAt = core.RolloutRunning, "", 0, time.Time{}
	r.Targets, r.Counts, r.SampleHealthy, r.SampleFailed = len(uids), core.RolloutCounts{}, 0, 0
	targets := map[string]*core.RolloutTarget{}
	for i, uid := range uids {
		t := &core.RolloutTarget{RolloutID: r.ID, UID: uid, Phase: phases[i], State: core.TargetStatePending, UpdatedAt: now}
		if t.Phase == 0 {
			t.State = core.TargetStateEligible
			r.Counts.Eligible++
		} else {
			r.Counts.Pending++
		}
		targets[uid] = t
	}
	stored := r
	s.ro.rollouts[r.ID], s.ro.targets[r.ID] = &stored, targets
	events := []*core.Event{core.RolloutEvent(core.EventRolloutPhaseOpened, stored, now)}
	more := s.advanceRolloutLocked(&stored, now)
	events = append(events, more...)
	for _, e := range events {
		s.appendAccountLocked(e)
	}
	s.auditLocked(ctx)
	return cloneRollout(stored), events, nil
}

// advanceRolloutLocked applies the gates to r (core.AdvanceRolloutWith),
// opening phases in r's targets; the caller appends the events.
func (s *Store) advanceRolloutLocked(r *core.Rollout, now time.Time) []*core.Event {
	events, _ := core.AdvanceRolloutWith(r, now, func(phase int) (int, error) {
		n := 0
		for _, t := range s.ro.targets[r.ID] {
			if t.Phase == phase && t.State == core.TargetStatePending {
				t.State, t.UpdatedAt = core.TargetStateEligible, now
				n++
			}
		}
		return n, nil
	})
	return events
}

func (s *Store) rolloutLocked(accountID, id string) (*core.Rollout, error) {
	r, ok := s.ro.rollouts[id]
	if !ok || r.AccountID != accountID {
		return nil, rolloutNotFound(id)
	}
	return r, nil
}

// Rollout implements core.RolloutStore.
func (s *Store) Rollout(_ context.Context, accountID, id string) (core.Rollout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.rolloutLocked(accountID, id)
	if err != nil {
		return core.Rollout{}, err
	}
	return cloneRollout(*r), nil
}

// ListRollouts implements core.RolloutStore.
func (s *Store) ListRollouts(_ context.Context, accountID string, p core.Page) ([]core.Rollout, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := []core.Rollout{}
	for _, r := range s.ro.rollouts {
		if r.AccountID == accountID {
			all = append(all, cloneRollout(*r))
		}
	}
	slices.SortFunc(all, func(a, b core.Rollout) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
	})
	return page(all, p), len(all), nil
}

// RunningRolloutsOf implements core.RolloutStore.
func (s *Store) RunningRolloutsOf(_ context.Context, model, revision string) ([]core.Rollout, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.Rollout{}
	for _, r := range s.ro.rollouts {
		if r.State == core.RolloutRunning && r.ModelNumber == model && r.SoftwareRevision == revision {
			out = append(out, cloneRollout(*r))
		}
	}
	slices.SortFunc(out, func(a, b core.Rollout) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// RolloutTargets implements core.RolloutStore.
func (s *Store) RolloutTargets(_ context.Context, accountID, id string, p core.Page) ([]core.RolloutTarget, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.rolloutLocked(accountID, id); err != nil {
		return nil, 0, err
	}
	all := make([]core.RolloutTarget, 0, len(s.ro.targets[id]))
	for _, t := range s.ro.targets[id] {
		all = append(all, cloneTarget(*t))
	}
	slices.SortFunc(all, func(a, b core.RolloutTarget) int { return cmp.Compare(a.UID, b.UID) })
	return page(all, p), len(all), nil
}

// ChangeRollout implements core.RolloutStore; a rollout RUNNING after the
// change (resumed) has its gates applied at once.
func (s *Store) ChangeRollout(ctx context.Context, accountID, id string, now time.Time,
	change func(*core.Rollout) ([]*core.Event, error)) (core.Rollout, []*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.rolloutLocked(accountID, id)
	if err != nil {
		return core.Rollout{}, nil, err
	}
	now = ms(now)
	next := cloneRollout(*r)
	events, err := change(&next)
	if err != nil {
		return core.Rollout{}, nil, err
	}
	events = append(events, s.advanceRolloutLocked(&next, now)...)
	*r = next
	for _, e := range events {
		s.appendAccountLocked(e)
	}
	s.auditLocked(ctx)
	return cloneRollout(next), events, nil
}

// RolloutOffers implements core.RolloutStore.
func (s *Store) RolloutOffers(_ context.Context, uid, accountID string) ([]core.RolloutOffer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.RolloutOffer{}
	for id, r := range s.ro.rollouts {
		t, ok := s.ro.targets[id][uid]
		if ok && r.AccountID == accountID && r.State == core.RolloutRunning &&
			(t.State == core.TargetStateEligible || t.State == core.TargetStateInstalling) {
			out = append(out, core.RolloutOffer{Rollout: cloneRollout(*r), Target: cloneTarget(*t)})
		}
	}
	slices.SortFunc(out, func(a, b core.RolloutOffer) int { return cmp.Compare(a.Rollout.ID, b.Rollout.ID) })
	return out, nil
}

// MountRollouts implements core.RolloutStore.
func (s *Store) MountRollouts(_ context.Context, accountID, uid string, p core.Page) ([]core.RolloutOffer, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	all := []core.RolloutOffer{}
	for id, r := range s.ro.rollouts {
		if t, ok := s.ro.targets[id][uid]; ok && r.AccountID == accountID {
			all = append(all, core.RolloutOffer{Rollout: cloneRollout(*r), Target: cloneTarget(*t)})
		}
	}
	slices.SortFunc(all, func(a, b core.RolloutOffer) int {
		return cmp.Or(b.Rollout.CreatedAt.Compare(a.Rollout.CreatedAt), cmp.Compare(b.Rollout.ID, a.Rollout.ID))
	})
	return page(all, p), len(all), nil
}

// RolloutFor implements core.RolloutStore.
func (s *Store) RolloutFor(_ context.Context, accountID, model, uid string) (core.Rollout, *core.RolloutTarget, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, r := range s.ro.rollouts {
		if r.AccountID != accountID || r.ModelNumber != model || !rolloutLive(r) {
			continue
		}
		var target *core.RolloutTarget
		if t, ok := s.ro.targets[id][uid]; ok {
			c := cloneTarget(*t)
			target = &c
		}
		return cloneRollout(*r), target, true, nil
	}
	return core.Rollout{}, nil, false, nil
}

// DecideRolloutTargets implements core.RolloutStore.
func (s *Store) DecideRolloutTargets(_ context.Context, now time.Time, limit int) (int, []*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now = ms(now)
	type due struct {
		r   *core.Rollout
		t   *core.RolloutTarget
		end time.Time
	}
	var all []due
	for id, r := range s.ro.rollouts {
		if !rolloutLive(r) {
			continue
		}
		for _, t := range s.ro.targets[id] {
			if end := t.InstallingSince.Add(r.HealthWindow); t.State == core.TargetStateInstalling && !end.After(now) {
				all = append(all, due{r, t, end})
			}
		}
	}
	slices.SortFunc(all, func(a, b due) int {
		return cmp.Or(a.end.Compare(b.end), cmp.Compare(a.r.ID, b.r.ID), cmp.Compare(a.t.UID, b.t.UID))
	})
	all = all[:min(limit, len(all))]
	out := []*core.Event{}
	touched := map[string]*core.Rollout{}
	var order []string
	for _, d := range all {
		next := core.DecideAtWindowEnd(*d.r, *d.t, now)
		core.ApplyRolloutTarget(d.r, *d.t, next)
		*d.t = next
		if touched[d.r.ID] == nil {
			order = append(order, d.r.ID)
		}
		touched[d.r.ID] = d.r
	}
	for _, id := range order {
		out = append(out, s.advanceRolloutLocked(touched[id], now)...)
	}
	for _, e := range out {
		s.appendAccountLocked(e)
	}
	return len(all), out, nil
}

// checkRolloutCommandLocked is the database's check of a rollout command
// before it is stored: the rollout RUNNING and the target ELIGIBLE or
// INSTALLING.
func (s *Store) checkRolloutCommandLocked(c core.Command) error {
	r, ok := s.ro.rollouts[c.RolloutID]
	if !ok || r.AccountID != c.AccountID {
		return core.Errorf(core.CodeConflict, "rollout %q does not exist", c.RolloutID)
	}
	if r.State != core.RolloutRunning {
		return core.Errorf(core.CodeConflict, "rollout %q is %s", c.RolloutID, r.State)
	}
	t, ok := s.ro.targets[c.RolloutID][c.MountUID]
	if !ok || (t.State != core.TargetStateEligible && t.State != core.TargetStateInstalling) {
		return core.Errorf(core.CodeConflict, "rollout %q offers mount %q nothing", c.RolloutID, c.MountUID)
	}
	return nil
}

// installRolloutTargetLocked records c as its target's latest command
// (checked first); the target keeps its state (a fetch is no outcome).
func (s *Store) installRolloutTargetLocked(c core.Command) {
	t := s.ro.targets[c.RolloutID][c.MountUID]
	t.CommandID, t.UpdatedAt = c.ID, ms(c.GeneratedAt)
}

// decideRolloutTargetLocked applies the deciding receipt of rollout
// command c (core.DecideRolloutReceipt) and returns the events appended.
func (s *Store) decideRolloutTargetLocked(c core.Command, now time.Time) []*core.Event {
	r, ok := s.ro.rollouts[c.RolloutID]
	if !ok || !rolloutLive(r) {
		return nil
	}
	t, ok := s.ro.targets[c.RolloutID][c.MountUID]
	if !ok {
		return nil
	}
	next, changed := core.DecideRolloutReceipt(*t, c, ms(now))
	if !changed {
		return nil
	}
	core.ApplyRolloutTarget(r, *t, next)
	*t = next
	events := s.advanceRolloutLocked(r, ms(now))
	for _, e := range events {
		s.appendAccountLocked(e)
	}
	return events
}

// observeRolloutReportLocked applies a verified report of mount uid to
// its ELIGIBLE and INSTALLING targets and returns the events appended.
func (s *Store) observeRolloutReportLocked(uid, accountID, revision string, counter uint64, now time.Time) []*core.Event {
	var out []*core.Event
	for id, r := range s.ro.rollouts {
		if r.AccountID != accountID || !rolloutLive(r) {
			continue
		}
		t, ok := s.ro.targets[id][uid]
		if !ok || (t.State != core.TargetStateInstalling && t.State != core.TargetStateEligible) {
			continue
		}
		next, changed := core.ObserveRolloutReport(*r, *t, revision, counter, ms(now))
		if !changed {
			continue
		}
		core.ApplyRolloutTarget(r, *t, next)
		*t = next
		events := s.advanceRolloutLocked(r, ms(now))
		for _, e := range events {
			s.appendAccountLocked(e)
		}
		out = append(out, events...)
	}
	return out
}

// leaveRolloutsLocked fails the undecided targets of mount uid in the
// RUNNING or PAUSED rollouts of every account but keep ("" for all): the
// mount left those accounts. The events go to e's Then (when given).
func (s *Store) leaveRolloutsLocked(e *core.Event, uid, keep string, now time.Time) {
	ids := make([]string, 0)
	for id, r := range s.ro.rollouts {
		if r.AccountID != keep && rolloutLive(r) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var out []*core.Event
	for _, id := range ids {
		r := s.ro.rollouts[id]
		t, ok := s.ro.targets[id][uid]
		if !ok {
			continue
		}
		next, changed := core.LeaveRolloutTarget(*t, ms(now))
		if !changed {
			continue
		}
		core.ApplyRolloutTarget(r, *t, next)
		*t = next
		events := s.advanceRolloutLocked(r, ms(now))
		for _, ev := range events {
			s.appendAccountLocked(ev)
		}
		out = append(out, events...)
	}
	if e != nil {
		e.Then = out
	}
}
