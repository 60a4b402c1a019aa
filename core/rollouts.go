package core

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Rollouts (docs/api.md, "Rollouts"): one firmware revision for the mounts
// of a model, opened to them in phases. A phase opens when every target of
// the phases before it is decided; a target is decided on what the mount
// did after the install (a verified report on the new revision within the
// health window), never on the install's own status. Too many failures
// pause the rollout by itself until a person resumes it.

// RolloutState is where a rollout stands.
type RolloutState string

// The rollout states.
const (
	RolloutRunning   RolloutState = "RUNNING"
	RolloutPaused    RolloutState = "PAUSED"
	RolloutCompleted RolloutState = "COMPLETED"
	RolloutCanceled  RolloutState = "CANCELED"
)

// Why a rollout is PAUSED.
const (
	PausedFailureThreshold = "FAILURE_THRESHOLD"
	PausedManual           = "MANUAL"
)

// RolloutTargetState is where a rollout stands at one of its mounts.
type RolloutTargetState string

// The target states: PENDING while its phase is not open; ELIGIBLE once it
// is (INSTALL_FIRMWARE is offered; a fetched command with no answer leaves
// it so); INSTALLING from the install's first signed EXECUTED receipt or
// the first verified report on the new revision (the health window counts
// from then); HEALTHY or FAILED when decided.
const (
	TargetStatePending    RolloutTargetState = "PENDING"
	TargetStateEligible   RolloutTargetState = "ELIGIBLE"
	TargetStateInstalling RolloutTargetState = "INSTALLING"
	TargetStateHealthy    RolloutTargetState = "HEALTHY"
	TargetStateFailed     RolloutTargetState = "FAILED"
)

// Finished reports whether s is a decided state.
func (s RolloutTargetState) Finished() bool {
	return s == TargetStateHealthy || s == TargetStateFailed
}

// RolloutCounts counts a rollout's targets by state; each target counts
// once.
type RolloutCounts struct {
	Pending    int
	Eligible   int
	Installing int
	Healthy    int
	Failed     int
}

// Rollout is one firmware revision for the mounts of a model.
type Rollout struct {
	ID               string
	AccountID        string
	ModelNumber      string
	SoftwareRevision string
	// SHA256 and Size are the catalogue's, copied at creation: the signed
	// INSTALL_FIRMWARE carries them.
	SHA256 string
	Size   int64
	// Filter is the fleet filter that narrowed the targets ("" for none).
	Filter string
	// Phases are ascending cumulative percentages of the targets, the
	// last 100.
	Phases           []int
	FailureThreshold int
	MinSample        int
	HealthWindow     time.Duration
	RequireIdle      bool
	State            RolloutState
	// PausedReason is PausedFailureThreshold or PausedManual while PAUSED.
	PausedReason string
	// OpenPhase is the index in Phases of the last open phase.
	OpenPhase int
	Targets   int
	Counts    RolloutCounts
	// SampleHealthy and SampleFailed count the targets of the open phases
	// decided since the rollout was created or last resumed: the failure
	// threshold looks at these only.
	SampleHealthy int
	SampleFailed  int
	CreatedAt     time.Time
	// EndedAt is when it became COMPLETED or CANCELED.
	EndedAt   time.Time
	CreatedBy string
}

// RolloutTarget is a rollout at one of its mounts.
type RolloutTarget struct {
	RolloutID string
	UID       string
	// Phase is the index in Phases of the target's phase.
	Phase int
	State RolloutTargetState
	// CommandID is the latest INSTALL_FIRMWARE signed for the mount, or
	// the one whose EXECUTED receipt made it INSTALLING (empty before any).
	CommandID string
	// InstallingSince is when the target became INSTALLING (the server's
	// time of the install's EXECUTED receipt or of the first verified
	// report on the new revision): the health window counts from it.
	InstallingSince time.Time
	// NewRevisionCounter is the highest counter of a verified report on
	// the rollout's revision (nil before any); a verified report on
	// another revision with a higher counter is a rollback.
	NewRevisionCounter *uint64
	// OldRevisionCounter is the highest counter of a verified report on
	// another revision seen while INSTALLING (nil before any): reports
	// may be relayed late, so a report on the rollout's revision with a
	// lower counter is a rollback too.
	OldRevisionCounter *uint64
	// Reason says why a target FAILED: "refused: <reason>", "rollback",
	// or "no report on the new revision".
	Reason    string
	UpdatedAt time.Time
}

// RolloutInput is a POST /rollouts body; nil fields take their defaults.
type RolloutInput struct {
	ModelNumber      string
	SoftwareRevision string
	Filter           *string
	Phases           []int
	FailureThreshold *int
	MinSample        *int
	HealthWindow     *string
	RequireIdle      *bool
}

// The bounds and defaults of rollouts.
const (
	DefaultRolloutFailureThreshold = 5
	DefaultRolloutMinSample        = 10
	DefaultRolloutHealthWindow     = time.Hour
	// MinRolloutHealthWindow: the stores keep instants in milliseconds;
	// a window of at least a second is one they all keep exactly.
	MinRolloutHealthWindow = time.Second
	MaxRolloutHealthWindow = 168 * time.Hour
	MaxRolloutPhases       = 10
	// MaxRolloutTargets bounds one rollout's mounts, as a job's.
	MaxRolloutTargets = MaxJobTargets
	// RolloutSweepEvery is how often each replica decides the targets
	// whose health window ended; decisions follow within it.
	RolloutSweepEvery = 5 * time.Second
)

// DefaultRolloutPhases are the phases unless given.
var DefaultRolloutPhases = []int{1, 10, 50, 100}

// ActionManageRollouts is owner-only: a rollout puts firmware on the fleet.
const ActionManageRollouts Action = "rollouts.manage"

// RolloutOffer is a rollout with its target at one mount: the
// INSTALL_FIRMWARE a rollout offers a mount now (RolloutOffers), or one of
// the rollouts a mount was a target of (MountRollouts).
type RolloutOffer struct {
	Rollout Rollout
	Target  RolloutTarget
}

// RolloutStore persists rollouts and their targets. Every transition is
// made in one transaction under the rollout's row lock, so that replicas
// deciding at once decide once; the events it appends go out through
// the returned slices.
type RolloutStore interface {
	// CreateRollout stores r (RUNNING, OpenPhase 0) and fixes its targets
	// in the same transaction: the ASSOCIATED mounts of r.AccountID with
	// r.ModelNumber and a device key that f selects, not already on
	// r.SoftwareRevision, split into phases by AssignRolloutPhases; the
	// first phase's targets ELIGIBLE, the rest PENDING. More than
	// MaxRolloutTargets: VALIDATION_FAILED (field filter). A RUNNING or
	// PAUSED rollout of the same account and model: CONFLICT. It appends
	// ROLLOUT_PHASE_OPENED for phase 0 (and, when phases open or the
	// rollout completes at once because they are empty, those events too)
	// and records the audit entry in ctx.
	CreateRollout(ctx context.Context, r Rollout, f MountFilter, now time.Time) (Rollout, []*Event, error)
	// Rollout returns a rollout of accountID; ROLLOUT_NOT_FOUND otherwise.
	Rollout(ctx context.Context, accountID, id string) (Rollout, error)
	// ListRollouts lists accountID's rollouts, newest first.
	ListRollouts(ctx context.Context, accountID string, p Page) ([]Rollout, int, error)
	// RunningRolloutsOf returns the RUNNING rollouts of every account that
	// roll out model's revision (at most one per account and model).
	RunningRolloutsOf(ctx context.Context, model, revision string) ([]Rollout, error)
	// RolloutTargets lists a rollout's targets by uid; ROLLOUT_NOT_FOUND
	// unless accountID's.
	RolloutTargets(ctx context.Context, accountID, id string, p Page) ([]RolloutTarget, int, error)
	// MountRollouts lists the rollouts of accountID that mount uid was a
	// target of, newest first, each with its target; another account's
	// rollouts of the same mount (before or after a change of hands) are
	// never listed. No error for a mount without any.
	MountRollouts(ctx context.Context, accountID, uid string, p Page) ([]RolloutOffer, int, error)
	// ChangeRollout applies change to a rollout of accountID under its
	// lock (pause, resume, cancel: ChangeRolloutState), records the audit
	// entry in ctx, appends the events change returns and returns them.
	// ROLLOUT_NOT_FOUND; change's error (CONFLICT) aborts.
	ChangeRollout(ctx context.Context, accountID, id string, now time.Time,
		change func(*Rollout) ([]*Event, error)) (Rollout, []*Event, error)
	// RolloutOffers returns what the RUNNING rollouts of accountID offer
	// mount uid now: its targets that are ELIGIBLE or INSTALLING (at most
	// one: one rollout per model).
	RolloutOffers(ctx context.Context, uid, accountID string) ([]RolloutOffer, error)
	// RolloutFor returns the RUNNING or PAUSED rollout of accountID for
	// model and, when mount uid is its target, the target; ok false when
	// there is no such rollout.
	RolloutFor(ctx context.Context, accountID, model, uid string) (r Rollout, t *RolloutTarget, ok bool, err error)
	// DecideRolloutTargets decides up to limit INSTALLING targets whose
	// health window ended at or before now (DecideAtWindowEnd) and then
	// the gates of their rollouts (AdvanceRollout), each rollout under
	// its lock, and returns how many it decided and the events appended.
	DecideRolloutTargets(ctx context.Context, now time.Time, limit int) (int, []*Event, error)
}

// The moves a command and a report make, which the stores apply in their
// own transactions (InsertCommand, DecideCommand, InsertReport) under the
// rollout's lock:
//
//   - Command.RolloutID set: InsertCommand sets the target's CommandID
//     and leaves its state (a fetch is no outcome: docs/api.md,
//     "Rollouts"); CONFLICT, nothing stored, unless the rollout is RUNNING
//     and the target ELIGIBLE or INSTALLING.
//   - A rollout command's EXECUTED or REFUSED decision, under a RUNNING
//     or PAUSED rollout: DecideRolloutReceipt, then AdvanceRollout;
//     events to CommandDecision.AccountEvents.
//   - A verified report (ReportCheck.Counter set) on an ELIGIBLE or
//     INSTALLING target of a RUNNING or PAUSED rollout: ObserveRolloutReport, then
//     AdvanceRollout; events to ReportCheck.RolloutEvents.
//   - The mount leaves the account (DeleteMount, AbandonMount,
//     ExpireAssociation, ClaimMount by another account), the mount's row
//     locked first: LeaveRolloutTarget on its undecided targets of the
//     account's RUNNING or PAUSED rollouts, then AdvanceRollout; events
//     to the mount event's Then.

// AssignRolloutPhases splits uids into phases: ranked by a stable hash of
// the uid, the first ceil(phases[0]% of n) get phase 0, and so on up to
// phases[i]% cumulatively. It returns each uid's phase index, in uids'
// order.
func AssignRolloutPhases(uids []string, phases []int) []int {
	n := len(uids)
	type ranked struct {
		i    int
		hash uint64
	}
	order := make([]ranked, n)
	for i, uid := range uids {
		h := sha256.Sum256([]byte(uid))
		order[i] = ranked{i, binary.BigEndian.Uint64(h[:8])}
	}
	slices.SortFunc(order, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(uids[a.i], uids[b.i]))
	})
	out := make([]int, n)
	rank := 0
	for phase, size := range protocol.RolloutPhaseSizes(phases, n) {
		for range size {
			out[order[rank].i] = phase
			rank++
		}
	}
	return out
}

// DecideRolloutReceipt is the rule for the deciding receipt of one of the
// rollout's INSTALL_FIRMWARE commands at the target (c as it now stands),
// whichever of them it names: only a signed one (c.Verified) counts. An
// EXECUTED install makes an ELIGIBLE target INSTALLING, its health window
// counting from now, with c as its command; a REFUSED one fails it
// (RefuseRolloutTarget). It returns the target as it then stands and
// whether it changed.
func DecideRolloutReceipt(t RolloutTarget, c Command, now time.Time) (RolloutTarget, bool) {
	if !c.Verified {
		return t, false
	}
	switch c.Status {
	case CommandExecuted:
		if t.State != TargetStateEligible {
			return t, false
		}
		t.State, t.InstallingSince, t.CommandID, t.UpdatedAt = TargetStateInstalling, now, c.ID, now
		return t, true
	case CommandRefused:
		return RefuseRolloutTarget(t, c.Reason, now)
	}
	return t, false
}

// RefuseRolloutTarget is the rule for a REFUSED receipt of the target's
// command: FAILED at once, unless the reason is one JobReasonRetried
// allows (the command is offered again, freshly signed). It returns the
// target as it then stands and whether it changed.
func RefuseRolloutTarget(t RolloutTarget, reason string, now time.Time) (RolloutTarget, bool) {
	if t.State.Finished() || t.State == TargetStatePending || JobReasonRetried(reason) {
		return t, false
	}
	t.State, t.Reason, t.UpdatedAt = TargetStateFailed, "refused: "+reason, now
	return t, true
}

// RolloutReasonMountLeft is why a target FAILED whose mount left the
// account (deleted, abandoned, its association expired, associated with
// another account): it says nothing about the firmware, so the failure
// threshold's sample does not count it.
const RolloutReasonMountLeft = "mount left the account"

// LeaveRolloutTarget is the rule for a target whose mount left the
// rollout's account: PENDING, ELIGIBLE or INSTALLING, it FAILED (so it no
// longer holds its phase open); decided, it stays.
func LeaveRolloutTarget(t RolloutTarget, now time.Time) (RolloutTarget, bool) {
	if t.State.Finished() {
		return t, false
	}
	t.State, t.Reason, t.UpdatedAt = TargetStateFailed, RolloutReasonMountLeft, now
	return t, true
}

// ObserveRolloutReport is the rule for a verified report with counter on
// revision at a target of r, in whatever order reports arrive (a phone
// may relay them late). At an INSTALLING target: on r's revision it
// raises NewRevisionCounter, but a counter below OldRevisionCounter means
// the old revision ran after the new one: a rollback, FAILED at once; on
// another revision it raises OldRevisionCounter, and a counter above
// NewRevisionCounter is a rollback. At an ELIGIBLE target a report on r's
// revision (installed by hand) makes it INSTALLING from now, so the
// health window counts from it and the install is not offered again.
func ObserveRolloutReport(r Rollout, t RolloutTarget, revision string, counter uint64, now time.Time) (RolloutTarget, bool) {
	if revision == "" {
		return t, false
	}
	c := counter
	switch {
	case t.State == TargetStateEligible && revision == r.SoftwareRevision:
		t.State, t.InstallingSince, t.NewRevisionCounter, t.UpdatedAt = TargetStateInstalling, now, &c, now
		return t, true
	case t.State != TargetStateInstalling:
		return t, false
	case revision == r.SoftwareRevision:
		if t.OldRevisionCounter != nil && counter < *t.OldRevisionCounter {
			t.State, t.Reason, t.UpdatedAt = TargetStateFailed, "rollback", now
			return t, true
		}
		if t.NewRevisionCounter != nil && *t.NewRevisionCounter >= counter {
			return t, false
		}
		t.NewRevisionCounter, t.UpdatedAt = &c, now
		return t, true
	case t.NewRevisionCounter != nil && counter > *t.NewRevisionCounter:
		t.State, t.Reason, t.UpdatedAt = TargetStateFailed, "rollback", now
		return t, true
	case t.OldRevisionCounter != nil && *t.OldRevisionCounter >= counter:
		return t, false
	}
	t.OldRevisionCounter, t.UpdatedAt = &c, now
	return t, true
}

// DecideAtWindowEnd decides an INSTALLING target whose health window
// ended: HEALTHY with a verified report on the new revision, else FAILED.
func DecideAtWindowEnd(r Rollout, t RolloutTarget, now time.Time) RolloutTarget {
	if t.State != TargetStateInstalling {
		return t
	}
	if t.NewRevisionCounter != nil {
		t.State, t.Reason = TargetStateHealthy, ""
	} else {
		t.State, t.Reason = TargetStateFailed, "no report on the new revision"
	}
	t.UpdatedAt = now
	return t
}

func (c *RolloutCounts) slot(s RolloutTargetState) *int {
	switch s {
	case TargetStateEligible:
		return &c.Eligible
	case TargetStateInstalling:
		return &c.Installing
	case TargetStateHealthy:
		return &c.Healthy
	case TargetStateFailed:
		return &c.Failed
	}
	return &c.Pending
}

// ApplyRolloutTarget moves r's counts (and sample, but for a mount that
// left the account) from t to next.
func ApplyRolloutTarget(r *Rollout, t, next RolloutTarget) {
	if t.State == next.State {
		return
	}
	*r.Counts.slot(t.State)--
	*r.Counts.slot(next.State)++
	if next.State.Finished() && !t.State.Finished() && next.Reason != RolloutReasonMountLeft {
		if next.State == TargetStateHealthy {
			r.SampleHealthy++
		} else {
			r.SampleFailed++
		}
	}
}

// OverThreshold reports whether r's sample holds at least MinSample
// decided targets of which more than FailureThreshold percent FAILED.
func (r Rollout) OverThreshold() bool {
	n := r.SampleHealthy + r.SampleFailed
	return n > 0 && n >= r.MinSample && r.SampleFailed*100 > r.FailureThreshold*n
}

// AdvanceRollout applies the gates to a RUNNING rollout after its counts
// moved: it pauses it (FAILURE_THRESHOLD) when, among at least MinSample
// decided targets of the sample, more than FailureThreshold percent
// FAILED; otherwise, when no target of the open phases is ELIGIBLE or
// INSTALLING, it opens the next phase (open reports the phase index the
// store must turn ELIGIBLE, -1 for none) or completes the rollout. It
// returns the events of what it did. The store calls it again after
// opening a phase that turned nothing ELIGIBLE.
func AdvanceRollout(r *Rollout, now time.Time) (open int, events []*Event) {
	if r.State != RolloutRunning {
		return -1, nil
	}
	if r.OverThreshold() {
		r.State, r.PausedReason = RolloutPaused, PausedFailureThreshold
		return -1, []*Event{RolloutEvent(EventRolloutPaused, *r, now)}
	}
	if r.Counts.Eligible+r.Counts.Installing > 0 {
		return -1, nil
	}
	if r.OpenPhase+1 < len(r.Phases) {
		r.OpenPhase++
		return r.OpenPhase, []*Event{RolloutEvent(EventRolloutPhaseOpened, *r, now)}
	}
	r.State, r.EndedAt, r.PausedReason = RolloutCompleted, now, ""
	return -1, []*Event{RolloutEvent(EventRolloutCompleted, *r, now)}
}

// AdvanceRolloutWith runs AdvanceRollout until it stops, opening each
// phase it asks for with openPhase (which turns the phase's PENDING
// targets ELIGIBLE and returns how many it turned): the stores call it
// under the rollout's lock. The ROLLOUT_PHASE_OPENED event shows the
// rollout with the phase's targets ELIGIBLE.
func AdvanceRolloutWith(r *Rollout, now time.Time, openPhase func(phase int) (int, error)) ([]*Event, error) {
	var out []*Event
	for range len(r.Phases) + 2 {
		open, events := AdvanceRollout(r, now)
		if open < 0 {
			return append(out, events...), nil
		}
		n, err := openPhase(open)
		if err != nil {
			return nil, err
		}
		r.Counts.Pending -= n
		r.Counts.Eligible += n
		for _, e := range events {
			rc := *r
			e.Rollout = &rc
		}
		out = append(out, events...)
		if n > 0 {
			return out, nil
		}
	}
	return out, nil
}

// ChangeRolloutState returns the change ChangeRollout applies for action
// (AuditRolloutPause, AuditRolloutResume, AuditRolloutCancel): CONFLICT in
// the wrong state. Resuming clears the sample.
func ChangeRolloutState(action AuditAction, now time.Time) func(*Rollout) ([]*Event, error) {
	return func(r *Rollout) ([]*Event, error) {
		switch action {
		case AuditRolloutPause:
			if r.State != RolloutRunning {
				return nil, Errorf(CodeConflict, "rollout %q is %s; only a RUNNING rollout can be paused", r.ID, r.State)
			}
			r.State, r.PausedReason = RolloutPaused, PausedManual
			return []*Event{RolloutEvent(EventRolloutPaused, *r, now)}, nil
		case AuditRolloutResume:
			if r.State != RolloutPaused {
				return nil, Errorf(CodeConflict, "rollout %q is %s; only a PAUSED rollout can be resumed", r.ID, r.State)
			}
			r.State, r.PausedReason, r.SampleHealthy, r.SampleFailed = RolloutRunning, "", 0, 0
			return nil, nil
		case AuditRolloutCancel:
			if r.State != RolloutRunning && r.State != RolloutPaused {
				return nil, Errorf(CodeConflict, "rollout %q is %s; only a RUNNING or PAUSED rollout can be canceled", r.ID, r.State)
			}
			r.State, r.PausedReason, r.EndedAt = RolloutCanceled, "", now
			return nil, nil
		}
		return nil, Errorf(CodeInternal, "no rollout change for %q", action)
	}
}

// RolloutEvent is an account-level event about r.
func RolloutEvent(t EventType, r Rollout, at time.Time) *Event {
	rc := r
	return &Event{Type: t, AccountID: r.AccountID, Rollout: &rc, OccurredAt: at}
}

// RolloutDeps are the ports RolloutService uses.
type RolloutDeps struct {
	Store    RolloutStore
	Firmware FirmwareStore
	Filters  FilterParser
	Waker    EventWaker
	// OfflineAfter makes a filter's presence as the fleet shows it.
	OfflineAfter OfflineAfter
	Logger       *slog.Logger
}

// RolloutService holds the rules of rollouts: owners create, read, pause,
// resume and cancel them; a sweep decides targets at the end of their
// health window.
type RolloutService struct {
	store        RolloutStore
	firmware     FirmwareStore
	filters      FilterParser
	waker        EventWaker
	offlineAfter time.Duration
	logger       *slog.Logger
	now          func() time.Time
}

// NewRolloutService returns a RolloutService over its ports.
func NewRolloutService(d RolloutDeps) *RolloutService {
	return &RolloutService{store: d.Store, firmware: d.Firmware, filters: d.Filters, waker: d.Waker,
		offlineAfter: time.Duration(d.OfflineAfter), logger: d.Logger, now: time.Now}
}

// SetClock replaces the service's clock (tests).
func (s *RolloutService) SetClock(now func() time.Time) { s.now = now }

func (s *RolloutService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// authorizeOwner lets only the account's owner manage rollouts.
func (s *RolloutService) authorizeOwner(p Principal) error {
	if !p.Complete {
		return p.Authorize(ActionManageRollouts)
	}
	if p.Role != RoleOwner {
		return Errorf(CodeForbidden, "only the account's owner manages rollouts")
	}
	return nil
}

// validPhases checks phases: 1 to MaxRolloutPhases ascending integers in
// 1..100, the last 100.
func validPhases(v *Validation, phases []int) {
	if len(phases) == 0 || len(phases) > MaxRolloutPhases {
		v.Add("phases", "must hold 1 to %d percentages", MaxRolloutPhases)
		return
	}
	for i, p := range phases {
		switch {
		case p < 1 || p > 100:
			v.Add("phases", "must hold percentages from 1 to 100 (phases[%d] is %d)", i, p)
			return
		case i > 0 && p <= phases[i-1]:
			v.Add("phases", "must be ascending")
			return
		}
	}
	if phases[len(phases)-1] != 100 {
		v.Add("phases", "must end with 100")
	}
}

// CreateRollout handles POST /rollouts.
func (s *RolloutService) CreateRollout(ctx context.Context, p Principal, in RolloutInput) (Rollout, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Rollout{}, err
	}
	now := s.clock()
	var v Validation
	r := Rollout{ID: "ro_" + randomHex(12), AccountID: p.AccountID, ModelNumber: in.ModelNumber,
		SoftwareRevision: in.SoftwareRevision, Phases: slices.Clone(DefaultRolloutPhases),
		FailureThreshold: DefaultRolloutFailureThreshold, MinSample: DefaultRolloutMinSample,
		HealthWindow: DefaultRolloutHealthWindow, RequireIdle: true, State: RolloutRunning,
		CreatedAt: now, CreatedBy: p.Actor().ID}
	checkText(&v, "modelNumber", &r.ModelNumber, 64)
	if r.ModelNumber == "" {
		v.Add("modelNumber", "is required")
	}
	checkText(&v, "softwareRevision", &r.SoftwareRevision, 64)
	if r.SoftwareRevision == "" {
		v.Add("softwareRevision", "is required")
	} else if r.ModelNumber != "" {
		fw, err := s.catalogVersion(ctx, r.ModelNumber, r.SoftwareRevision, now)
		switch {
		case err != nil:
			return Rollout{}, err
		case fw == nil:
			v.Add("softwareRevision", "is not a published revision of model %q", r.ModelNumber)
		case fw.Deprecated:
			v.Add("softwareRevision", "is deprecated for model %q", r.ModelNumber)
		default:
			r.SHA256, r.Size = fw.SHA256, fw.Size
		}
	}
	if in.Phases != nil {
		validPhases(&v, in.Phases)
		r.Phases = slices.Clone(in.Phases)
	}
	if in.FailureThreshold != nil {
		if *in.FailureThreshold < 0 || *in.FailureThreshold > 100 {
			v.Add("failureThreshold", "must be a percentage from 0 to 100")
		}
		r.FailureThreshold = *in.FailureThreshold
	}
	if in.MinSample != nil {
		if *in.MinSample < 1 || *in.MinSample > MaxRolloutTargets {
			v.Add("minSample", "must be from 1 to %d", MaxRolloutTargets)
		}
		r.MinSample = *in.MinSample
	}
	if in.HealthWindow != nil {
		d, err := time.ParseDuration(strings.TrimSpace(*in.HealthWindow))
		switch {
		case err != nil:
			v.Add("healthWindow", "must be a duration such as \"1h\" or \"30m\"")
		case d < MinRolloutHealthWindow:
			v.Add("healthWindow", "must be at least %s", MinRolloutHealthWindow)
		case d > MaxRolloutHealthWindow:
			v.Add("healthWindow", "must be at most %s", MaxRolloutHealthWindow)
		default:
			r.HealthWindow = d
		}
	}
	if in.RequireIdle != nil {
		r.RequireIdle = *in.RequireIdle
	}
	f := MountFilter{}
	if in.Filter != nil {
		r.Filter, f.Expression = *in.Filter, *in.Filter
		if err := addFields(&v, ParseMountFilter(s.filters, &f, s.offlineAfter, now), func(f string) string { return f }); err != nil {
			return Rollout{}, err
		}
	}
	if err := v.Err(); err != nil {
		return Rollout{}, err
	}
	details := map[string]any{"modelNumber": r.ModelNumber, "softwareRevision": r.SoftwareRevision,
		"filter": r.Filter, "phases": r.Phases, "failureThreshold": r.FailureThreshold, "minSample": r.MinSample,
		"healthWindow": r.HealthWindow.String(), "requireIdle": r.RequireIdle}
	actx := byPrincipal(ctx, p, now, AuditRolloutCreate, AuditTarget("rollout", r.ID), details)
	created, events, err := s.store.CreateRollout(actx, r, f, now)
	if err != nil {
		return Rollout{}, err
	}
	s.wakeAll(ctx, events)
	return created, nil
}

func (s *RolloutService) wakeAll(ctx context.Context, events []*Event) {
	for _, e := range events {
		wake(ctx, s.waker, s.logger, e)
	}
}

// ListRollouts handles GET /rollouts: newest first.
func (s *RolloutService) ListRollouts(ctx context.Context, p Principal, page Page) ([]Rollout, Pagination, error) {
	if err := s.authorizeOwner(p); err != nil {
		return nil, Pagination{}, err
	}
	list, total, err := s.store.ListRollouts(ctx, p.AccountID, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return list, NewPagination(page, total), nil
}

// Rollout handles GET /rollouts/{id}.
func (s *RolloutService) Rollout(ctx context.Context, p Principal, id string) (Rollout, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Rollout{}, err
	}
	return s.store.Rollout(ctx, p.AccountID, id)
}

// RolloutMounts handles GET /rollouts/{id}/mounts: the targets by uid.
func (s *RolloutService) RolloutMounts(ctx context.Context, p Principal, id string, page Page) ([]RolloutTarget, Pagination, error) {
	if err := s.authorizeOwner(p); err != nil {
		return nil, Pagination{}, err
	}
	targets, total, err := s.store.RolloutTargets(ctx, p.AccountID, id, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return targets, NewPagination(page, total), nil
}

// MountRollouts answers GraphQL mountRollouts: the caller's rollouts that
// mount uid was a target of, newest first, with where each stands at it
// (owners only, as every rollout read).
func (s *RolloutService) MountRollouts(ctx context.Context, p Principal, uid string, page Page) ([]RolloutOffer, Pagination, error) {
	if err := s.authorizeOwner(p); err != nil {
		return nil, Pagination{}, err
	}
	list, total, err := s.store.MountRollouts(ctx, p.AccountID, uid, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return list, NewPagination(page, total), nil
}

func (s *RolloutService) change(ctx context.Context, p Principal, id string, action AuditAction) (Rollout, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Rollout{}, err
	}
	now := s.clock()
	actx := byPrincipal(ctx, p, now, action, AuditTarget("rollout", id), map[string]any{})
	r, events, err := s.store.ChangeRollout(actx, p.AccountID, id, now, ChangeRolloutState(action, now))
	if err != nil {
		return Rollout{}, err
	}
	s.wakeAll(ctx, events)
	return r, nil
}

// PauseRollout handles POST /rollouts/{id}/pause: CONFLICT unless RUNNING.
func (s *RolloutService) PauseRollout(ctx context.Context, p Principal, id string) (Rollout, error) {
	return s.change(ctx, p, id, AuditRolloutPause)
}

// ResumeRollout handles POST /rollouts/{id}/resume: CONFLICT unless
// PAUSED.
// A rollout of a version deprecated since it started: CONFLICT (the
// operator withdrew it; a rollout of another version takes over).
func (s *RolloutService) ResumeRollout(ctx context.Context, p Principal, id string) (Rollout, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Rollout{}, err
	}
	r, err := s.store.Rollout(ctx, p.AccountID, id)
	if err != nil {
		return Rollout{}, err
	}
	fw, err := s.catalogVersion(ctx, r.ModelNumber, r.SoftwareRevision, s.clock())
	if err != nil {
		return Rollout{}, err
	}
	if fw != nil && fw.Deprecated {
		return Rollout{}, Errorf(CodeConflict, "firmware %s %s is deprecated; rollout %q cannot be resumed: start a rollout of another version", r.ModelNumber, r.SoftwareRevision, id)
	}
	return s.change(ctx, p, id, AuditRolloutResume)
}

// catalogVersion is model's visible version of revision in the
// catalogue, deprecated or not; nil when there is none.
func (s *RolloutService) catalogVersion(ctx context.Context, model, revision string, now time.Time) (*FirmwareVersion, error) {
	versions, err := s.firmware.ModelFirmware(ctx, model, now)
	if err != nil {
		return nil, err
	}
	if i := slices.IndexFunc(versions, func(f FirmwareVersion) bool { return f.SoftwareRevision == revision }); i >= 0 {
		return &versions[i], nil
	}
	return nil, nil
}

// CancelRollout handles POST /rollouts/{id}/cancel: CONFLICT unless
// RUNNING or PAUSED.
func (s *RolloutService) CancelRollout(ctx context.Context, p Principal, id string) (Rollout, error) {
	return s.change(ctx, p, id, AuditRolloutCancel)
}

// SweepRollouts decides the targets whose health window ended, and the
// gates that follow, and returns how many targets it decided; safe on
// every replica at once.
func (s *RolloutService) SweepRollouts(ctx context.Context) (int, error) {
	total := 0
	for {
		n, events, err := s.store.DecideRolloutTargets(ctx, s.clock(), sweepBatch)
		if err != nil {
			return total, err
		}
		s.wakeAll(ctx, events)
		total += n
		if n < sweepBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// Run sweeps every RolloutSweepEvery until ctx ends.
func (s *RolloutService) Run(ctx context.Context) error {
	tick := time.NewTicker(RolloutSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if _, err := s.SweepRollouts(ctx); err != nil && ctx.Err() == nil {
				s.logger.ErrorContext(ctx, "sweep rollouts failed", "err", err)
			}
		}
	}
}
