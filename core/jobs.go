package core

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Jobs (docs/api.md, "Jobs"): one command for many mounts, fixed at
// creation, that waits at each mount for whichever phone passes. A phone
// near a mount fetches its pending commands, signed then with a fresh
// nonce; the job's progress follows the commands' statuses (docs/api.md, "The
// truth from the mount").

// JobState is where a job stands.
type JobState string

// The job states: ACTIVE until every target has finished or ExpiresAt
// passed (COMPLETED), or an owner cancelled it (CANCELED).
const (
	JobActive    JobState = "ACTIVE"
	JobCompleted JobState = "COMPLETED"
	JobCanceled  JobState = "CANCELED"
)

// JobTargetStatus is where a job stands at one of its mounts: PENDING
// before any command, then the status of its latest command, except that
// EXECUTED (any command of the job executed there) and a final REFUSED
// stay.
type JobTargetStatus string

// The target statuses.
const (
	TargetPending     JobTargetStatus = "PENDING"
	TargetIssued      JobTargetStatus = "ISSUED"
	TargetExecuted    JobTargetStatus = "EXECUTED"
	TargetRefused     JobTargetStatus = "REFUSED"
	TargetUnconfirmed JobTargetStatus = "UNCONFIRMED"
)

// JobCounts counts a job's targets by status; each target counts once.
type JobCounts struct {
	Pending     int
	Issued      int
	Executed    int
	Refused     int
	Unconfirmed int
}

// Move moves one target from one status's count to another's.
func (c *JobCounts) Move(from, to JobTargetStatus) {
	if from == to {
		return
	}
	*c.slot(from)--
	*c.slot(to)++
}

func (c *JobCounts) slot(s JobTargetStatus) *int {
	switch s {
	case TargetIssued:
		return &c.Issued
	case TargetExecuted:
		return &c.Executed
	case TargetRefused:
		return &c.Refused
	case TargetUnconfirmed:
		return &c.Unconfirmed
	}
	return &c.Pending
}

// Job is one command for a fixed set of mounts.
type Job struct {
	ID        string
	AccountID string
	Code      CommandCode
	Params    map[string]string
	// Filter is the fleet filter the targets were selected with, as given
	// ("" for a list of uids).
	Filter      string
	Description string
	State       JobState
	CreatedAt   time.Time
	ExpiresAt   time.Time
	// EndedAt is when the job became COMPLETED or CANCELED.
	EndedAt time.Time
	// Targets is how many mounts the job was created for; Counts splits
	// them by status and Finished counts those that EXECUTED or were
	// REFUSED for good (the job completes when it reaches Targets).
	Targets  int
	Counts   JobCounts
	Finished int
	// CreatedBy is the actor id of the job's creator.
	CreatedBy string
}

// JobTarget is a job at one of its mounts.
type JobTarget struct {
	JobID string
	UID   string
	// Status is the target's status; Final says it will not move again but
	// to EXECUTED (an older command's late receipt).
	Status JobTargetStatus
	Final  bool
	// CommandID is the deciding command once Final, else the latest one;
	// empty while PENDING.
	CommandID string
	UpdatedAt time.Time
}

// PendingJob is a job that waits at a mount, with its target there.
type PendingJob struct {
	Job    Job
	Target JobTarget
}

// JobInput is a POST /jobs body. Filter (even "", every mount) or
// MountUIDs selects the targets; not both.
type JobInput struct {
	Code        string
	Params      map[string]string
	Filter      *string
	MountUIDs   []string
	Description string
	ExpiresAt   *time.Time
}

// The bounds of jobs.
const (
	// MaxJobTargets bounds one job's mounts.
	MaxJobTargets = 100_000
	// DefaultJobLifetime is a job's expiresAt unless given; a given one is
	// at most MaxJobLifetime ahead.
	DefaultJobLifetime = 7 * 24 * time.Hour
	MaxJobLifetime     = 90 * 24 * time.Hour
	// MaxActiveJobsPerAccount bounds an account's ACTIVE jobs: a phone's
	// fetch signs a command for each job that waits at the mount.
	MaxActiveJobsPerAccount = 50
	// MaxJobDescriptionLength bounds a description's characters.
	MaxJobDescriptionLength = 500
	// MaxPendingCommands bounds the commands one pending-commands call
	// hands out, jobs' and rollouts' together (docs/api.md, "Jobs").
	MaxPendingCommands = 10
	// PendingReuseMargin: a job's or rollout's unanswered command is
	// handed out again, the same one, while it is at least this far from
	// its expiresAt; only closer to it (or past it) is a fresh one signed.
	PendingReuseMargin = 2 * time.Minute
)

// JobReasonRetried reports whether a refusal leaves its target open: a
// command the mount found stale or replayed is offered again with a fresh
// one (docs/ble.md); any other refusal is final.
func JobReasonRetried(reason string) bool {
	return reason == ReasonStaleCommand || reason == ReasonReplayedNonce
}

// The refusal reasons a mount gives for a command it never looked at
// (docs/ble.md).
const (
	ReasonStaleCommand  = "stale command"
	ReasonReplayedNonce = "replayed nonce"
)

// AdvanceJobTarget is the rule by which a job's command moves its target:
// c is the command as it now stands (just issued, or its status just
// moved). It returns the target as it then stands and whether it changed.
//
//   - EXECUTED stays; an EXECUTED command makes the target EXECUTED.
//   - A final REFUSED stays; a refusal for a reason other than
//     JobReasonRetried makes the target REFUSED for good.
//   - Otherwise the target follows its latest command: a command just
//     issued becomes the latest, and any other status counts only when it
//     is the latest command's.
func AdvanceJobTarget(t JobTarget, c Command, now time.Time) (JobTarget, bool) {
	next := t
	switch {
	case t.Status == TargetExecuted:
		return t, false
	case c.Status == CommandExecuted:
		next.Status, next.Final, next.CommandID = TargetExecuted, true, c.ID
	case t.Final:
		return t, false
	case c.Status == CommandRefused && !JobReasonRetried(c.Reason):
		next.Status, next.Final, next.CommandID = TargetRefused, true, c.ID
	case c.Status == CommandIssued:
		next.Status, next.CommandID = TargetIssued, c.ID
	case c.ID == t.CommandID:
		next.Status = JobTargetStatus(c.Status)
	default:
		return t, false
	}
	if next == t {
		return t, false
	}
	next.UpdatedAt = now
	return next, true
}

// ApplyJobTarget moves j's counts from target t to next (as
// AdvanceJobTarget returned) and reports whether the job thereby completed:
// the stores keep counts this way, in the transaction that moves the
// target.
func ApplyJobTarget(j *Job, t, next JobTarget, now time.Time) (completed bool) {
	j.Counts.Move(t.Status, next.Status)
	if next.Final && !t.Final {
		j.Finished++
	}
	if j.State == JobActive && j.Finished >= j.Targets {
		j.State, j.EndedAt = JobCompleted, now
		return true
	}
	return false
}

// JobCompletedEvent is the event of j's completion at (account-level: no
// mount).
func JobCompletedEvent(j Job, at time.Time) *Event {
	jc := j
	return &Event{Type: EventJobCompleted, AccountID: j.AccountID, Job: &jc, OccurredAt: at}
}

// JobStore persists jobs and their targets.
type JobStore interface {
	// CreateJob stores j (ACTIVE) and fixes its targets in the same
	// transaction with one statement: the ASSOCIATED mounts j.AccountID
	// owns that f selects (f.Expr with f.OfflineCut, f.UIDs) at now, all
	// PENDING. More than MaxJobTargets: VALIDATION_FAILED (field filter,
	// or mountUids when f.UIDs is set) and nothing stored. It returns the
	// job with Targets and Counts set; a job without targets is stored
	// COMPLETED, with its JOB_COMPLETED event appended and returned. The
	// audit entry in ctx is recorded in the transaction. An account that
	// holds MaxActiveJobsPerAccount ACTIVE jobs already: CONFLICT (counted
	// in the transaction, so creations racing cannot pass the bound).
	CreateJob(ctx context.Context, j Job, f MountFilter, now time.Time) (Job, *Event, error)
	// Job returns a job of accountID; JOB_NOT_FOUND otherwise.
	Job(ctx context.Context, accountID, id string) (Job, error)
	// ListJobs lists accountID's jobs, newest first.
	ListJobs(ctx context.Context, accountID string, p Page) ([]Job, int, error)
	// JobTargets lists a job's targets by uid; JOB_NOT_FOUND unless
	// accountID's.
	JobTargets(ctx context.Context, accountID, id string, p Page) ([]JobTarget, int, error)
	// CancelJob turns an ACTIVE job of accountID CANCELED (EndedAt now)
	// with one conditional update, recording the audit entry in ctx;
	// JOB_NOT_FOUND, or CONFLICT unless ACTIVE.
	CancelJob(ctx context.Context, accountID, id string, now time.Time) (Job, error)
	// ActiveJobs counts accountID's ACTIVE jobs.
	ActiveJobs(ctx context.Context, accountID string) (int, error)
	// PendingJobs lists, oldest first and at most limit, the ACTIVE jobs
	// of accountID, unexpired at now, that have mount uid as a target that
	// is not Final, each with that target.
	PendingJobs(ctx context.Context, uid, accountID string, now time.Time, limit int) ([]PendingJob, error)
	// ExpireJobs completes up to limit ACTIVE jobs whose ExpiresAt is at or
	// before now with one conditional statement (EndedAt their ExpiresAt),
	// appending JOB_COMPLETED of each in the same transaction, and returns
	// those events. A job another caller completed first is not returned.
	ExpireJobs(ctx context.Context, now time.Time, limit int) ([]*Event, error)
}

// JobDeps are the ports JobService uses.
type JobDeps struct {
	Store   JobStore
	Filters FilterParser
	Waker   EventWaker
	// OfflineAfter makes a filter's presence as the fleet shows it.
	OfflineAfter OfflineAfter
	Logger       *slog.Logger
}

// JobService holds the rules of jobs: owners create, read and cancel them;
// targets are fixed at creation; a sweep completes expired ones.
type JobService struct {
	store        JobStore
	filters      FilterParser
	waker        EventWaker
	offlineAfter time.Duration
	logger       *slog.Logger
	now          func() time.Time
}

// NewJobService returns a JobService over its ports.
func NewJobService(d JobDeps) *JobService {
	return &JobService{store: d.Store, filters: d.Filters, waker: d.Waker, offlineAfter: time.Duration(d.OfflineAfter),
		logger: d.Logger, now: time.Now}
}

// SetClock replaces the service's clock (tests).
func (s *JobService) SetClock(now func() time.Time) { s.now = now }

func (s *JobService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// ActionManageJobs is owner-only: a job signs commands for the whole fleet.
const ActionManageJobs Action = "jobs.manage"

// JobSweepEvery is how often each replica completes the jobs whose
// expiresAt passed; JOB_COMPLETED follows within it.
const JobSweepEvery = 5 * time.Second

// authorizeOwner lets only the account's owner manage jobs.
func (s *JobService) authorizeOwner(p Principal) error {
	if !p.Complete {
		return p.Authorize(ActionManageJobs)
	}
	if p.Role != RoleOwner {
		return Errorf(CodeForbidden, "only the account's owner manages jobs")
	}
	return nil
}

// addFields adds a validation error's fields to v under prefix and
// returns any other error.
func addFields(v *Validation, err error, prefix func(string) string) error {
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeValidation {
		return err
	}
	for _, f := range e.Fields {
		v.Add(prefix(f.Field), "%s", f.Message)
	}
	return nil
}

// CreateJob handles POST /jobs: the targets are the ASSOCIATED mounts the
// filter (or list of uids) selects now, fixed in the store's transaction.
func (s *JobService) CreateJob(ctx context.Context, p Principal, in JobInput) (Job, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Job{}, err
	}
	now := s.clock()
	var v Validation
	j := Job{ID: "job_" + randomHex(12), AccountID: p.AccountID, Description: in.Description, CreatedAt: now,
		ExpiresAt: now.Add(DefaultJobLifetime), CreatedBy: p.Actor().ID, Params: map[string]string{}}
	switch {
	case in.Code == "":
		v.Add("code", "is required")
	case slices.Contains(CommandCodes, CommandCode(in.Code)) && !protocol.JobSends(CommandCode(in.Code)):
		v.Add("code", "%s cannot be sent by a job", in.Code)
	default:
		code, params, err := ValidateCommandQuery(in.Code, CommandParams(in.Params))
		if err := addFields(&v, err, func(f string) string {
			if f == "code" {
				return f
			}
			return "params." + f
		}); err != nil {
			return Job{}, err
		}
		if err == nil {
			j.Code, j.Params = code, params
		}
	}
	f := MountFilter{}
	switch {
	case in.Filter != nil && in.MountUIDs != nil:
		v.Add("filter", "cannot be given with mountUids: a job selects its mounts by one or the other")
	case in.Filter != nil:
		j.Filter, f.Expression = *in.Filter, *in.Filter
		if err := addFields(&v, ParseMountFilter(s.filters, &f, s.offlineAfter, now), func(f string) string { return f }); err != nil {
			return Job{}, err
		}
	case len(in.MountUIDs) > MaxJobTargets:
		v.Add("mountUids", "names %d mounts; a job has at most %d targets", len(in.MountUIDs), MaxJobTargets)
	case len(in.MountUIDs) > 0:
		f.UIDs = make([]string, 0, len(in.MountUIDs))
		seen := make(map[string]bool, len(in.MountUIDs))
		for i, uid := range in.MountUIDs {
			if !ValidMountUID(uid) {
				v.Add(fmt.Sprintf("mountUids[%d]", i), "is not a mount uid")
				continue
			}
			if !seen[uid] {
				seen[uid] = true
				f.UIDs = append(f.UIDs, uid)
			}
		}
	default:
		v.Add("filter", "or mountUids is required (an empty filter selects every associated mount)")
	}
	checkText(&v, "description", &in.Description, MaxJobDescriptionLength)
	if in.ExpiresAt != nil {
		at := in.ExpiresAt.UTC().Truncate(time.Millisecond)
		switch {
		case !at.After(now):
			v.Add("expiresAt", "must be in the future")
		case at.After(now.Add(MaxJobLifetime)):
			v.Add("expiresAt", "must be at most %d days ahead", int(MaxJobLifetime/(24*time.Hour)))
		default:
			j.ExpiresAt = at
		}
	}
	if err := v.Err(); err != nil {
		return Job{}, err
	}
	details := map[string]any{"code": string(j.Code), "params": j.Params, "expiresAt": FormatTime(j.ExpiresAt)}
	if in.Filter != nil {
		details["filter"] = j.Filter
	} else {
		// The list itself may hold 100,000 uids: the entry says how many.
		details["mountUids"] = len(f.UIDs)
	}
	if j.Description != "" {
		details["description"] = j.Description
	}
	actx := byPrincipal(ctx, p, now, AuditJobCreate, AuditTarget("job", j.ID), details)
	created, ev, err := s.store.CreateJob(actx, j, f, now)
	if err != nil {
		return Job{}, err
	}
	if ev != nil {
		wake(ctx, s.waker, s.logger, ev)
	}
	return created, nil
}

// ListJobs handles GET /jobs: newest first.
func (s *JobService) ListJobs(ctx context.Context, p Principal, page Page) ([]Job, Pagination, error) {
	if err := s.authorizeOwner(p); err != nil {
		return nil, Pagination{}, err
	}
	jobs, total, err := s.store.ListJobs(ctx, p.AccountID, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return jobs, NewPagination(page, total), nil
}

// Job handles GET /jobs/{id}.
func (s *JobService) Job(ctx context.Context, p Principal, id string) (Job, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Job{}, err
	}
	return s.store.Job(ctx, p.AccountID, id)
}

// JobMounts handles GET /jobs/{id}/mounts: the targets by uid.
func (s *JobService) JobMounts(ctx context.Context, p Principal, id string, page Page) ([]JobTarget, Pagination, error) {
	if err := s.authorizeOwner(p); err != nil {
		return nil, Pagination{}, err
	}
	targets, total, err := s.store.JobTargets(ctx, p.AccountID, id, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return targets, NewPagination(page, total), nil
}

// CancelJob handles POST /jobs/{id}/cancel: CONFLICT unless ACTIVE.
func (s *JobService) CancelJob(ctx context.Context, p Principal, id string) (Job, error) {
	if err := s.authorizeOwner(p); err != nil {
		return Job{}, err
	}
	now := s.clock()
	actx := byPrincipal(ctx, p, now, AuditJobCancel, AuditTarget("job", id), map[string]any{})
	return s.store.CancelJob(actx, p.AccountID, id, now)
}

// SweepJobs completes every ACTIVE job whose expiresAt passed, with its
// JOB_COMPLETED event, and returns how many it completed. Safe on every
// replica at once: the store's conditional update completes each once.
func (s *JobService) SweepJobs(ctx context.Context) (int, error) {
	total := 0
	for {
		events, err := s.store.ExpireJobs(ctx, s.clock(), sweepBatch)
		if err != nil {
			return total, err
		}
		for _, ev := range events {
			wake(ctx, s.waker, s.logger, ev)
		}
		total += len(events)
		if len(events) < sweepBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// Run completes expired jobs until ctx ends, once across replicas (the
// store's conditional statement decides).
func (s *JobService) Run(ctx context.Context) error {
	tick := time.NewTicker(JobSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			if _, err := s.SweepJobs(ctx); err != nil && ctx.Err() == nil {
				s.logger.ErrorContext(ctx, "sweep expired jobs failed", "err", err)
			}
		}
	}
}

// PendingCommands handles GET /mounts/{uid}/pending-commands: at most
// MaxPendingCommands commands, one for each ACTIVE job that waits at the
// mount, oldest job first, and, last, the install a rollout offers it
// (which keeps its place among them). A job's or rollout's latest command,
// unanswered and at least PendingReuseMargin from its expiresAt, is handed
// out again as it is (no new command, event or audit entry: a phone that
// fetches again and again writes nothing); otherwise a freshly signed one
// is issued. A job or rollout that stopped taking commands between the
// read and the issue is left out.
func (s *MountService) PendingCommands(ctx context.Context, p Principal, uid string) ([]Command, error) {
	m, err := s.owned(ctx, p, ActionQueryCommand, uid)
	if err != nil {
		return nil, err
	}
	if m.State != StateAssociated {
		return nil, Errorf(CodeMountNotAssociated, "mount %q is not associated", uid)
	}
	now := s.clock()
	installs, err := s.rolloutCommands(ctx, p, m, now)
	if err != nil {
		return nil, err
	}
	out := []Command{}
	if s.jobs == nil || len(installs) >= MaxPendingCommands {
		return append(out, installs...), nil
	}
	pending, err := s.jobs.PendingJobs(ctx, uid, p.AccountID, now, MaxPendingCommands-len(installs))
	if err != nil {
		return nil, err
	}
	latest := make([]string, 0, len(pending))
	for _, pj := range pending {
		if pj.Target.Status == TargetIssued && pj.Target.CommandID != "" {
			latest = append(latest, pj.Target.CommandID)
		}
	}
	open, err := s.commandsByID(ctx, p, uid, latest)
	if err != nil {
		return nil, err
	}
	var tags *string
	for _, pj := range pending {
		j := pj.Job
		params := maps.Clone(j.Params)
		if params == nil {
			params = map[string]string{}
		}
		if j.Code == CmdSyncNfcTags {
			// The association's own tags, as QueryCommand signs them.
			if tags == nil {
				list, err := s.tags.MountTagUIDs(ctx, p.AccountID, uid)
				if err != nil {
					return nil, err
				}
				joined := strings.Join(list, "+")
				tags = &joined
			}
			params["tagUids"] = *tags
		}
		if c, ok := HandOutAgain(m, open[pj.Target.CommandID], j.Code, params, now); ok {
			out = append(out, c)
			continue
		}
		cmd, err := s.issueFor(ctx, p, m, j.Code, params, now, j.ID, "")
		if ErrorCode(err) == CodeConflict {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, cmd)
	}
	return append(out, installs...), nil
}

// commandsByID reads the commands of mount uid in p's account named by
// ids, by id.
func (s *MountService) commandsByID(ctx context.Context, p Principal, uid string, ids []string) (map[string]*Command, error) {
	out := make(map[string]*Command, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	cmds, err := s.commands.CommandsByID(ctx, uid, p.AccountID, ids)
	if err != nil {
		return nil, err
	}
	for i := range cmds {
		out[cmds[i].ID] = &cmds[i]
	}
	return out, nil
}

// HandOutAgain decides whether c, the latest command of a job or rollout
// at mount m (nil for none), is handed out again at now instead of a
// freshly signed one (docs/api.md, "Jobs"): it is still unanswered
// (ISSUED), at least PendingReuseMargin from its expiresAt, and says what
// would be signed now (the same code, mount and params; a SYNC_NFC_TAGS
// whose tags changed since is not) under the association's current key
// (a command of an earlier association or key the mount would refuse).
// It returns c with params set.
func HandOutAgain(m Mount, c *Command, code CommandCode, params map[string]string, now time.Time) (Command, bool) {
	if c == nil || c.Status != CommandIssued || c.Code != code || c.MountUID != m.UID ||
		now.Add(PendingReuseMargin).After(c.ExpiresAt) || c.GeneratedAt.Before(m.AssociatedAt) {
		return Command{}, false
	}
	if protocol.BuildPayload(c.GeneratedAt, string(code), m.UID, params, c.ID) != c.Payload {
		return Command{}, false
	}
	sig, err := hex.DecodeString(c.SignedToken)
	if err != nil || len(m.Key.PublicKey) != ed25519.PublicKeySize || !ed25519.Verify(m.Key.PublicKey, []byte(c.Payload), sig) {
		return Command{}, false
	}
	out := *c
	out.Params = params
	return out, true
}

// rolloutCommands returns the INSTALL_FIRMWARE each rollout offers mount m
// now (at most one: one rollout per model): with requireIdle, only while
// its latest values say locked with the helmet present. The target's
// latest command is handed out again while HandOutAgain allows, else a
// freshly signed one is issued. A rollout paused or moved on between the
// read and the issue is left out.
func (s *MountService) rolloutCommands(ctx context.Context, p Principal, m Mount, now time.Time) ([]Command, error) {
	out := []Command{}
	if s.rollouts == nil {
		return out, nil
	}
	offers, err := s.rollouts.RolloutOffers(ctx, m.UID, p.AccountID)
	if err != nil || len(offers) == 0 {
		return out, err
	}
	var idle *bool
	for _, o := range offers {
		known, err := s.installOutcomeKnown(ctx, p, m, o.Target)
		if err != nil {
			return nil, err
		}
		if known {
			continue
		}
		if o.Rollout.RequireIdle {
			if idle == nil {
				entries, err := s.states.LatestStates(ctx, m.UID, p.AccountID)
				if err != nil {
					return nil, err
				}
				ok := MountIdle(entries)
				idle = &ok
			}
			if !*idle {
				continue
			}
		}
		params := InstallFirmwareParams(FirmwareVersion{SoftwareRevision: o.Rollout.SoftwareRevision, SHA256: o.Rollout.SHA256,
			Size: o.Rollout.Size})
		var ids []string
		if o.Target.CommandID != "" {
			ids = []string{o.Target.CommandID}
		}
		latest, err := s.commandsByID(ctx, p, m.UID, ids)
		if err != nil {
			return nil, err
		}
		if c, ok := HandOutAgain(m, latest[o.Target.CommandID], CmdInstallFirmware, params, now); ok && c.RolloutID == o.Rollout.ID {
			out = append(out, c)
			continue
		}
		cmd, err := s.issueFor(ctx, p, m, CmdInstallFirmware, params, now, "", o.Rollout.ID)
		if ErrorCode(err) == CodeConflict {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, cmd)
	}
	return out, nil
}

// installOutcomeKnown says whether an INSTALLING target's install has an
// outcome already, so that it is not offered again: the mount proved the
// new revision (a verified report on it), or its latest command was
// EXECUTED. Offering it again would make the mount take the whole image
// once more at every pass until its health window ends.
func (s *MountService) installOutcomeKnown(ctx context.Context, p Principal, m Mount, t RolloutTarget) (bool, error) {
	if t.State != TargetStateInstalling {
		return false, nil
	}
	if t.NewRevisionCounter != nil {
		return true, nil
	}
	if t.CommandID == "" {
		return false, nil
	}
	cmds, err := s.commands.CommandsByID(ctx, m.UID, p.AccountID, []string{t.CommandID})
	if err != nil {
		return false, err
	}
	return len(cmds) == 1 && cmds[0].Status == CommandExecuted, nil
}

// MountIdle reports whether latest values say the mount is locked with
// the helmet present (a rollout's requireIdle).
func MountIdle(latest []StateEntry) bool {
	locked, helmet := false, false
	for _, e := range latest {
		switch e.Code {
		case StateMountLocked:
			locked = e.Value == "1"
		case StateHelmetMounted:
			helmet = e.Value == "1"
		}
	}
	return locked && helmet
}
