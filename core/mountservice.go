package core

import (
	"context"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/mountd/mountd/protocol"
)

// MountService holds the association lifecycle (docs/api.md, "Mount lifecycle"), state ingest
// ("States") and command issuing ("Commands"). Every transport calls it; it
// asks the principal for permission before anything else.
type MountService struct {
	mounts    MountStore
	states    StateStore
	commands  CommandStore
	tags      TagStore
	signer    Signer
	cache     StateCache
	scheduler ExpiryScheduler
	waker     EventWaker
	window    AssociationWindow
	ttl       time.Duration
	grace     time.Duration
	logger    *slog.Logger
	now       func() time.Time
	// alarms evaluates presence and alarm rules (set by NewAlarmService;
	// nil: neither is kept) with offlineAfter.
	alarms       *AlarmService
	offlineAfter time.Duration
	jobs         JobStore
	filters      FilterParser
	rollouts     RolloutStore
	firmware     FirmwareStore
	grants       GrantResigner
}

// AssociationWindow is how long an IDLE mount waits for confirmation.
type AssociationWindow time.Duration

// MountDeps are the ports MountService uses.
type MountDeps struct {
	Mounts   MountStore
	States   StateStore
	Commands CommandStore
	// Tags gives SYNC_NFC_TAGS the tags authorised on a mount.
	Tags      TagStore
	Signer    Signer
	Cache     StateCache
	Scheduler ExpiryScheduler
	Waker     EventWaker
	Window    AssociationWindow
	// CommandTTL (0: DefaultCommandTTL, at most MaxCommandTTL) and
	// ReceiptGrace (0: DefaultReceiptGrace) shape the command lifecycle.
	CommandTTL   CommandTTL
	ReceiptGrace ReceiptGrace
	Logger       *slog.Logger
	// Jobs gives a phone the commands that wait at a mount; Filters parses
	// fleet filters (GET /mounts?filter=).
	Jobs    JobStore
	Filters FilterParser
	// Rollouts offers a mount its INSTALL_FIRMWARE among its pending
	// commands; Firmware gives an owner's INSTALL_FIRMWARE query the
	// catalogue's size and SHA-256.
	Rollouts RolloutStore
	Firmware FirmwareStore
	// Grants signs a mount's live rider grants again when its association
	// continues under a new owner key; nil: none are kept.
	Grants GrantResigner
}

// GrantResigner signs mount uid's live rider grants again with its current
// owner key (CONTRACT §21, "Lifecycle"), and refuses a rider's token issued
// before a revocation on the mount.
type GrantResigner interface {
	ResignGrants(ctx context.Context, uid string) error
	CheckRiderToken(ctx context.Context, p Principal, uid string) error
}

// NewMountService returns a MountService over its ports.
func NewMountService(d MountDeps) *MountService {
	ttl, grace := time.Duration(d.CommandTTL), time.Duration(d.ReceiptGrace)
	if ttl <= 0 || ttl > MaxCommandTTL {
		ttl = DefaultCommandTTL
	}
	if grace <= 0 {
		grace = DefaultReceiptGrace
	}
	return &MountService{mounts: d.Mounts, states: d.States, commands: d.Commands, tags: d.Tags, signer: d.Signer,
		cache: d.Cache, scheduler: d.Scheduler, waker: d.Waker, window: d.Window, ttl: ttl, grace: grace,
		logger: d.Logger, now: time.Now, offlineAfter: DefaultOfflineAfter, jobs: d.Jobs, filters: d.Filters,
		rollouts: d.Rollouts, firmware: d.Firmware, grants: d.Grants}
}

// SetClock replaces the service's clock (tests of the window).
func (s *MountService) SetClock(now func() time.Time) { s.now = now }

func (s *MountService) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// wake tells every replica's feed that the change's event is in the log.
// A failure only delays the event until the feeds poll; it is logged.
func wake(ctx context.Context, w EventWaker, logger *slog.Logger, e *Event) {
	if m, ok := w.(FleetMeter); ok {
		m.EventCommitted(e)
	}
	if err := w.Wake(context.WithoutCancel(ctx), e.ID); err != nil {
		logger.WarnContext(ctx, "wake event feeds failed", "type", e.Type, "uid", e.UID, "err", err)
	}
	for _, then := range e.Then {
		wake(ctx, w, logger, then)
	}
}

// RequestAssociation handles POST /mounts: it claims or refreshes the mount
// with a fresh key pair and returns the ASSOCIATE_OWNER command.
func (s *MountService) RequestAssociation(ctx context.Context, p Principal, uid string, f MountFields) ([]Command, error) {
	if err := p.Authorize(ActionRequestAssociation); err != nil {
		return nil, err
	}
	if err := ValidateMountFields(uid, &f); err != nil {
		return nil, err
	}
	key, err := s.signer.NewKey(ctx, uid)
	if err != nil {
		return nil, err
	}
	now := s.clock()
	ev := &Event{Type: EventAssociationRequested, UID: uid, AccountID: p.AccountID, OccurredAt: now}
	// The command goes into the claim's transaction: a successful claim
	// stores the mount, its key and this command together.
	cmd, _, err := s.newCommand(ctx, p, uid, key, CmdAssociateOwner, map[string]string{
		"accountId": p.AccountID,
		"publicKey": hex.EncodeToString(key.PublicKey),
	}, now)
	if err != nil {
		return nil, err
	}
	if cmd.Data["handover"], err = s.handover(ctx, uid, cmd.Payload); err != nil {
		return nil, err
	}
	claim := Claim{UID: uid, AccountID: p.AccountID, Fields: f, Key: key,
		Now: now, Deadline: now.Add(time.Duration(s.window)), Command: &cmd}
	// The claim's audit entry rides with it (not with the expiry below).
	actx := byPrincipal(ctx, p, now, AuditMountRequest, AuditTarget("mount", uid), mountFieldDetails(f))
	m, err := s.mounts.ClaimMount(actx, claim, ev)
	if ErrorCode(err) == CodeMountAlreadyOwned {
		// A lapsed window ends its association first, whether or not the
		// worker caught it (here or on another replica): the former owner
		// gets ASSOCIATION_EXPIRED and the claim, once more, sees an
		// INACTIVE mount. The store refuses a lapsed mount's claim, so a
		// new uid, the common case, needs no expiry read before it.
		_ = s.expire(ctx, uid)
		m, err = s.mounts.ClaimMount(actx, claim, ev)
	}
	if err != nil {
		return nil, err
	}
	if fm, ok := s.waker.(FleetMeter); ok {
		fm.CommandIssued(CmdAssociateOwner)
	}
	wake(ctx, s.waker, s.logger, ev)
	if m.State == StateAssociated {
		// The owner asked again during its association: a new key, which
		// its live grants must carry.
		s.resignGrants(byPrincipal(ctx, p, now, AuditGrantResign, AuditTarget("mount", uid), nil), uid)
	}
	if m.State == StateIdle {
		if err := s.scheduler.Schedule(ctx, uid, m.IdleDeadline); err != nil {
			// The deadline still holds at confirm time; the worker only
			// makes expiry visible sooner.
			s.logger.WarnContext(ctx, "schedule expiry failed", "uid", uid, "err", err)
		}
	}
	return []Command{cmd}, nil
}

// handover signs an ASSOCIATE_OWNER's payload with every owner key the
// mount may hold (docs/api.md, "Commands"): data.handover, the
// signatures joined by '+', the last confirmed association's first; nil
// (null) for a uid never claimed. The keys stay sealed in the signer; a
// key that no longer opens is left out (and logged), so the mount refuses
// the hand-over rather than the request failing for ever.
func (s *MountService) handover(ctx context.Context, uid, payload string) (any, error) {
	keys, err := s.mounts.HandoverKeys(ctx, uid)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		sig, err := s.signer.Sign(ctx, uid, k, []byte(payload))
		if err != nil {
			s.logger.WarnContext(ctx, "hand-over key does not sign", "uid", uid, "keyId", k.ID, "err", err)
			continue
		}
		sigs = append(sigs, hex.EncodeToString(sig))
	}
	if len(sigs) == 0 {
		return nil, nil
	}
	return protocol.JoinHandover(sigs), nil
}

// ConfirmAssociation handles POST /mounts/{uid}/confirm-association.
func (s *MountService) ConfirmAssociation(ctx context.Context, p Principal, uid string) (Mount, error) {
	if err := p.AuthorizeMount(ActionConfirmAssociation, uid); err != nil {
		return Mount{}, err
	}
	now := s.clock()
	ev := &Event{Type: EventAssociationConfirmed, UID: uid, AccountID: p.AccountID, OccurredAt: now}
	m, ok, err := s.mounts.ConfirmAssociation(byPrincipal(ctx, p, now, AuditMountConfirm, AuditTarget("mount", uid), nil),
		uid, p.AccountID, now, ev)
	if err != nil {
		return Mount{}, err
	}
	if ok {
		wake(ctx, s.waker, s.logger, ev)
		_ = s.scheduler.Cancel(ctx, uid)
		// The event's mount was read with its latest values in the
		// transaction: no second read for the answer.
		m.Latest = ev.Mount.Latest
		s.withPresence(&m)
		return m, nil
	}
	// The row did not qualify: decide why from what is stored.
	switch {
	case m.State == StateAssociated && m.OwnerID == p.AccountID:
		s.withLatest(ctx, &m, p.AccountID)
		s.withPresence(&m)
		return m, nil // confirming twice is harmless
	case m.State == StateIdle && m.OwnerID == p.AccountID:
		// The window passed and the worker has not caught up: expire now.
		_ = s.expire(ctx, uid)
		return Mount{}, Errorf(CodeAssociationExpired, "the association window of mount %q has passed; request the association again", uid)
	case m.State == StateInactive && m.ExpiredOwnerID == p.AccountID:
		return Mount{}, Errorf(CodeAssociationExpired, "the association window of mount %q has passed; request the association again", uid)
	case m.State == StateInactive && p.Role == RoleOwner:
		return Mount{}, Errorf(CodeAssociationNotPending, "mount %q has no pending association", uid)
	}
	return Mount{}, Errorf(CodeMountNotFound, "mount %q not found", uid)
}

// Expire makes a lapsed IDLE mount INACTIVE and announces it; the expiry
// worker calls it, and it is safe on every replica at once.
func (s *MountService) Expire(ctx context.Context, uid string) { _ = s.expire(ctx, uid) }

// expire expires uid if its window lapsed; the error is a failed attempt
// (logged here), after which the mount may still be IDLE and lapsed.
func (s *MountService) expire(ctx context.Context, uid string) error {
	now := s.clock()
	ev := &Event{Type: EventAssociationExpired, UID: uid, OccurredAt: now}
	m, ok, err := s.mounts.ExpireAssociation(ctx, uid, now, ev)
	if err != nil {
		if ErrorCode(err) == CodeMountNotFound {
			return nil
		}
		s.logger.ErrorContext(ctx, "expire association failed", "uid", uid, "err", err)
		return err
	}
	if !ok {
		return nil
	}
	wake(ctx, s.waker, s.logger, ev)
	s.logger.InfoContext(ctx, "association expired", "uid", uid, "account", m.ExpiredOwnerID)
	s.forgetLatest(ctx, uid, m.ExpiredOwnerID)
	s.evaluate(ctx, uid, "", WatchSweep)
	return nil
}

// RecoverDeadlines schedules every pending deadline found in the database,
// so that expiry survives restarts, and expires what is already due.
func (s *MountService) RecoverDeadlines(ctx context.Context) error {
	deadlines, err := s.mounts.IdleDeadlines(ctx)
	if err != nil {
		return err
	}
	for _, d := range deadlines {
		if err := s.scheduler.Schedule(ctx, d.UID, d.At); err != nil {
			return err
		}
	}
	return nil
}

// SweepEvery is how often the expiry worker looks in the database for
// windows that lapsed without the scheduler firing (it was down, or the
// schedule call failed).
const SweepEvery = 30 * time.Second

// sweepBatch bounds one read of the sweep; it reads again while full.
const sweepBatch = 500

// SweepLapsed expires every IDLE mount whose window lapsed, and returns
// how many it read. Safe on every replica at once: expiry is conditional.
func (s *MountService) SweepLapsed(ctx context.Context) (int, error) {
	total := 0
	for {
		uids, err := s.mounts.LapsedIdle(ctx, s.clock(), sweepBatch)
		if err != nil {
			return total, err
		}
		for _, uid := range uids {
			_ = s.expire(ctx, uid)
		}
		total += len(uids)
		if len(uids) < sweepBatch || ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}

// RunExpiry runs the expiry worker until ctx ends: the scheduler fires on
// time, and a periodic sweep of the database catches what it missed.
func (s *MountService) RunExpiry(ctx context.Context) error {
	if err := s.RecoverDeadlines(ctx); err != nil {
		s.logger.ErrorContext(ctx, "recover association deadlines failed", "err", err)
	}
	go s.every(ctx, SweepEvery, "sweep lapsed associations", func(ctx context.Context) error {
		_, err := s.SweepLapsed(ctx)
		return err
	})
	// Commands past expiresAt become UNCONFIRMED from the database alone:
	// every replica sweeps, and the conditional update lets one win.
	go s.every(ctx, CommandSweepEvery, "sweep expired commands", func(ctx context.Context) error {
		_, err := s.SweepCommands(ctx)
		return err
	})
	// Presence and alarms move on from the database alone too: lapses,
	// held durations and alarms whose mount or rule changed.
	if s.alarms != nil {
		go s.every(ctx, AlarmSweepEvery, "sweep presence and alarms", func(ctx context.Context) error {
			_, err := s.alarms.SweepAlarms(ctx)
			return err
		})
	}
	return s.scheduler.Run(ctx, s.fireExpiry)
}

// ExpiryRetry is how soon a deadline whose expiry failed fires again.
const ExpiryRetry = time.Second

// fireExpiry expires uid when the scheduler fires its deadline. The
// scheduler hands each deadline out once, taking it off first: an attempt
// that fails (the database busy, timing out or failing over) would leave
// the lapsed mount IDLE until the next sweep, up to SweepEvery later, and
// its ASSOCIATION_EXPIRED with it. It is scheduled again, ExpiryRetry on.
func (s *MountService) fireExpiry(ctx context.Context, uid string) {
	if s.expire(ctx, uid) == nil || ctx.Err() != nil {
		return
	}
	if err := s.scheduler.Schedule(ctx, uid, s.clock().Add(ExpiryRetry)); err != nil {
		s.logger.WarnContext(ctx, "schedule expiry retry failed; the sweep will expire it", "uid", uid, "err", err)
	}
}

// every runs sweep each period until ctx ends, logging its failures.
func (s *MountService) every(ctx context.Context, period time.Duration, what string, sweep func(context.Context) error) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := sweep(ctx); err != nil && ctx.Err() == nil {
				s.logger.ErrorContext(ctx, what+" failed", "err", err)
			}
		}
	}
}

// owned loads a mount the principal may act on: it must be reachable by the
// token and owned by its account; anything else is MOUNT_NOT_FOUND.
func (s *MountService) owned(ctx context.Context, p Principal, a Action, uid string) (Mount, error) {
	return s.ownedWith(ctx, p, a, uid, s.mounts.Mount)
}

func (s *MountService) ownedWith(ctx context.Context, p Principal, a Action, uid string,
	load func(ctx context.Context, uid string) (Mount, error)) (Mount, error) {
	if err := p.AuthorizeMount(a, uid); err != nil {
		return Mount{}, err
	}
	m, err := load(ctx, uid)
	if err != nil {
		return Mount{}, err
	}
	if m.Lapsed(s.clock()) {
		_ = s.expire(ctx, uid)
		return Mount{}, Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	if m.OwnerID != p.AccountID || m.State == StateInactive {
		return Mount{}, Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	return m, nil
}

// Mount handles GET /mounts/{uid}. The row has to come from the database
// (ownership is decided on it) and the latest values are stored beside it,
// so one statement reads both: a state cache read would be a second round
// trip, not a saved one (docs/architecture.md, "Who reads the latest values").
func (s *MountService) Mount(ctx context.Context, p Principal, uid string) (Mount, error) {
	m, err := s.ownedWith(ctx, p, ActionReadMount, uid, s.mounts.MountWithLatest)
	if err != nil {
		return Mount{}, err
	}
	s.withPresence(&m)
	return m, nil
}

// withPresence computes m's presence from its lastSeenAt at the read.
func (s *MountService) withPresence(m *Mount) {
	m.Presence = PresenceAt(m.LastSeenAt, s.offlineAfter, s.clock())
}

// evaluate watches the mount through the alarm service (presence and
// rules); a failure is logged: the sweep catches up with what it missed
// of presence and mounts that left the account.
func (s *MountService) evaluate(ctx context.Context, uid, accountID string, mode WatchMode) {
	if err := s.evaluateErr(ctx, uid, accountID, mode); err != nil {
		s.logger.ErrorContext(ctx, "evaluate alarms failed", "uid", uid, "err", err)
	}
}

func (s *MountService) evaluateErr(ctx context.Context, uid, accountID string, mode WatchMode) error {
	if s.alarms == nil {
		return nil
	}
	return s.alarms.Evaluate(context.WithoutCancel(ctx), uid, accountID, mode)
}

// counts says whether something the mount said at newest counts for
// presence at now: not when older than the offline threshold.
func (s *MountService) counts(newest, now time.Time) bool {
	return !newest.IsZero() && now.Sub(newest) < s.offlineAfter
}

// latestKey names a mount's latest values within one account's
// associations in the state cache: a mount that changes hands must never
// serve its former owner's values to the next.
func latestKey(uid, accountID string) string { return accountID + "/" + uid }

// withLatest fills the computed fields with what accountID's associations
// reported, from the cache when it can.
func (s *MountService) withLatest(ctx context.Context, m *Mount, accountID string) {
	entries, ok, err := s.cache.Latest(ctx, latestKey(m.UID, accountID))
	if err != nil {
		s.logger.WarnContext(ctx, "state cache read failed", "uid", m.UID, "err", err)
	}
	if err != nil || !ok {
		s.fillLatest(ctx, m, accountID)
		return
	}
	m.Latest = ComputeLatest(entries)
}

// forgetLatest drops an ended association's cache entry (the database keeps
// the values for the former owner).
func (s *MountService) forgetLatest(ctx context.Context, uid, accountID string) {
	if err := s.cache.Forget(ctx, latestKey(uid, accountID)); err != nil {
		s.logger.WarnContext(ctx, "state cache forget failed", "uid", uid, "err", err)
	}
}

// fillLatest reads the computed fields from the database and completes the
// association's cache entry with them.
func (s *MountService) fillLatest(ctx context.Context, m *Mount, accountID string) {
	entries, err := s.states.LatestStates(ctx, m.UID, accountID)
	if err != nil {
		s.logger.ErrorContext(ctx, "read latest states failed", "uid", m.UID, "err", err)
		return
	}
	if err := s.cache.Fill(ctx, latestKey(m.UID, accountID), entries); err != nil {
		s.logger.WarnContext(ctx, "state cache fill failed", "uid", m.UID, "err", err)
	}
	m.Latest = ComputeLatest(entries)
}

// ListMounts handles GET /mounts.
func (s *MountService) ListMounts(ctx context.Context, p Principal, f MountFilter, page Page) ([]Mount, Pagination, error) {
	if err := p.Authorize(ActionListMounts); err != nil {
		return nil, Pagination{}, err
	}
	if p.LimitedToMounts() {
		f.UIDs = p.MountUIDs
	}
	now := s.clock()
	if err := ParseMountFilter(s.filters, &f, s.offlineAfter, now); err != nil {
		return nil, Pagination{}, err
	}
	// The store reads the page's latest states with the rows (one batch
	// query), so a page costs no cache round trip per mount.
	mounts, total, err := s.mounts.ListMounts(ctx, p.AccountID, f, page, now)
	if err != nil {
		return nil, Pagination{}, err
	}
	for i := range mounts {
		s.withPresence(&mounts[i])
	}
	return mounts, NewPagination(page, total), nil
}

// UpdateMount handles PATCH /mounts/{uid}.
func (s *MountService) UpdateMount(ctx context.Context, p Principal, uid string, u MountUpdate) (Mount, error) {
	if err := p.AuthorizeMount(ActionUpdateMount, uid); err != nil {
		return Mount{}, err
	}
	if err := ValidateMountUpdate(u); err != nil {
		return Mount{}, err
	}
	now := s.clock()
	m, err := s.mounts.UpdateMount(byPrincipal(ctx, p, now, AuditMountUpdate, AuditTarget("mount", uid), mountUpdateDetails(u)),
		uid, p.AccountID, u, now)
	if err != nil {
		return Mount{}, err
	}
	s.withLatest(ctx, &m, p.AccountID)
	s.withPresence(&m)
	return m, nil
}

// DeleteMount handles DELETE /mounts/{uid}.
func (s *MountService) DeleteMount(ctx context.Context, p Principal, uid string) error {
	if err := p.AuthorizeMount(ActionDeleteMount, uid); err != nil {
		return err
	}
	now := s.clock()
	ev := &Event{Type: EventDeleted, UID: uid, AccountID: p.AccountID, OccurredAt: now}
	actx := byPrincipal(ctx, p, now, AuditMountDelete, AuditTarget("mount", uid), nil)
	if _, err := s.mounts.DeleteMount(actx, uid, p.AccountID, ev); err != nil {
		return err
	}
	wake(ctx, s.waker, s.logger, ev)
	_ = s.scheduler.Cancel(ctx, uid)
	s.forgetLatest(ctx, uid, p.AccountID)
	s.evaluate(ctx, uid, p.AccountID, WatchSweep)
	return nil
}

// AbandonMount handles DELETE /mounts/{uid}/abandon.
func (s *MountService) AbandonMount(ctx context.Context, p Principal, uid string) error {
	if err := p.AuthorizeMount(ActionAbandonMount, uid); err != nil {
		return err
	}
	now := s.clock()
	ev := &Event{Type: EventAbandoned, UID: uid, AccountID: p.AccountID, OccurredAt: now}
	actx := byPrincipal(ctx, p, now, AuditMountAbandon, AuditTarget("mount", uid), nil)
	if _, err := s.mounts.AbandonMount(actx, uid, p.AccountID, now, ev); err != nil {
		return err
	}
	wake(ctx, s.waker, s.logger, ev)
	_ = s.scheduler.Cancel(ctx, uid)
	s.forgetLatest(ctx, uid, p.AccountID)
	s.evaluate(ctx, uid, p.AccountID, WatchSweep)
	return nil
}

// ReportResult is the answer to a state report.
type ReportResult struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// ReportStates handles POST /mounts/{uid}/states: the batch is validated
// whole, stored in one transaction, and announced once if anything was new.
// sig is the mount's signature of the report, nil (or without Signature)
// for an unsigned one.
func (s *MountService) ReportStates(ctx context.Context, p Principal, uid string, in []StateInput, sig *ReportSignature) (ReportResult, error) {
	if err := p.AuthorizeMount(ActionReportStates, uid); err != nil {
		return ReportResult{}, err
	}
	if err := CheckReportSize(len(in)); err != nil {
		return ReportResult{}, err
	}
	if sig != nil && sig.Signature == "" {
		sig = nil // a counter or revision without a signature proves nothing
	}
	now := s.clock()
	// A rider's token carries what the mount signed and cannot author
	// states for a mount with a device key; owners and maintainers may.
	rider := sig == nil && p.LimitedToMounts()
	var check ReportCheck
	var rolloutEvents []*Event
	if sig != nil || rider {
		// The signed path (and a rider's) reads the mount first: the key
		// decides before the transaction, where verifying once costs no
		// lock. The owner's unsigned path keeps its one round trip.
		m, err := s.live(ctx, p, uid)
		if err != nil {
			return ReportResult{}, err
		}
		key := m.DevicePublicKey
		if rider && key != "" {
			return ReportResult{}, signatureRequired(uid)
		}
		if sig != nil {
			if err := verifyReport(uid, key, in, *sig); err != nil {
				return ReportResult{}, err
			}
			check.SoftwareRevision = sig.SoftwareRevision
			// A verified report decides the mount's rollout target.
			counter := sig.Counter
			check.Counter, check.RolloutEvents = &counter, &rolloutEvents
		}
		// The key may change between the read and the insert (a new
		// association): the transaction's row decides again.
		check.Check = func(m Mount) error {
			switch {
			case rider && m.DevicePublicKey != "":
				return signatureRequired(uid)
			case sig != nil && m.DevicePublicKey != key:
				return invalidSignature("the report", m.DevicePublicKey != "")
			}
			return nil
		}
	}
	entries, err := ValidateStates(in, now)
	if err == nil && sig != nil {
		var v Validation
		checkText(&v, "softwareRevision", &sig.SoftwareRevision, 64)
		checkCounter(&v, "counter", sig.Counter)
		err = v.Err()
	}
	if err != nil {
		if check.Check == nil {
			// 404 comes before the content's 400: read the mount on the
			// error path only.
			if _, merr := s.live(ctx, p, uid); merr != nil {
				return ReportResult{}, merr
			}
		}
		return ReportResult{}, err
	}
	if sig != nil {
		for i := range entries {
			entries[i].Verified = true
		}
	}
	ev := &Event{Type: EventStatesReported, UID: uid, AccountID: p.AccountID, OccurredAt: now}
	// Presence and rules are evaluated in the report's transaction, on the
	// latest values after it (whatever its entries' order): lastSeenAt,
	// MOUNT_ONLINE and the alarms commit with the entries.
	var watched []*Event
	var mode WatchMode
	if s.alarms != nil {
		var newest time.Time
		for _, e := range entries {
			if e.OccurredAt.After(newest) {
				newest = e.OccurredAt
			}
		}
		mode = WatchValues
		if s.counts(newest, now) {
			mode = WatchHeard
			check.SeenAt = now
		}
		check.WatchEvents = &watched
	}
	var accepted []StateEntry
	for attempt := 0; ; attempt++ {
		if s.alarms != nil {
			// Rules come from the cache; should the open episodes show it
			// stale, the transaction rolls back and runs once more with
			// the rules read afresh.
			var light bool
			if check.Watch, light, err = s.alarms.reportWatch(ctx, p.AccountID, uid, now, mode, attempt > 0); err != nil {
				return ReportResult{}, err
			}
			check.LightCut = time.Time{}
			if light && attempt == 0 {
				check.LightCut = now.Add(-s.offlineAfter)
			}
		}
		if check.Check == nil && check.Watch == nil {
			_, accepted, err = s.states.InsertStates(ctx, uid, p.AccountID, entries, ev)
		} else {
			_, accepted, err = s.states.InsertReport(ctx, uid, p.AccountID, entries, check, ev)
		}
		if attempt == 0 && (isStaleRules(err) || errors.Is(err, ErrFullWatch)) {
			continue
		}
		break
	}
	if err != nil {
		return ReportResult{}, err
	}
	res := ReportResult{Accepted: len(accepted), Duplicates: len(entries) - len(accepted)}
	if len(accepted) > 0 {
		wake(ctx, s.waker, s.logger, ev)
		s.offerLatest(ctx, uid, p.AccountID, accepted)
	}
	if s.alarms != nil {
		s.alarms.announce(ctx, watched)
	}
	for _, e := range rolloutEvents {
		wake(ctx, s.waker, s.logger, e)
	}
	return res, nil
}

// offerLatest moves the state cache on with a report's new entries.
func (s *MountService) offerLatest(ctx context.Context, uid, accountID string, accepted []StateEntry) {
	if len(accepted) == 0 {
		return
	}
	// The cache keeps up with the database; a cache that cannot is
	// emptied for the mount, and the next read fills it.
	if _, _, err := s.cache.Offer(ctx, latestKey(uid, accountID), LatestPerCode(accepted)); err != nil {
		s.logger.WarnContext(ctx, "state cache offer failed", "uid", uid, "err", err)
		s.forgetLatest(ctx, uid, accountID)
	}
}

func signatureRequired(uid string) error {
	return Errorf(CodeSignatureRequired, "mount %q has a device key: this token may relay only reports the mount signed", uid)
}

// verifyReport checks a report's signature over its entries exactly as
// sent (values as sent, occurredAt as Unix milliseconds) with the mount's
// device key.
func verifyReport(uid, key string, in []StateInput, sig ReportSignature) error {
	if key == "" {
		return invalidSignature("the report", false)
	}
	r := protocol.Report{UID: uid, Counter: sig.Counter, SoftwareRevision: sig.SoftwareRevision,
		Entries: make([]protocol.ReportEntry, len(in))}
	for i, e := range in {
		r.Entries[i] = protocol.ReportEntry{Code: StateCode(e.Code), Value: e.Value, OccurredAt: e.OccurredAt}
	}
	if !protocol.Verify(key, protocol.BuildReportText(r), sig.Signature) {
		return invalidSignature("the report", true)
	}
	return nil
}

// StateHistory handles GET /mounts/{uid}/states.
func (s *MountService) StateHistory(ctx context.Context, p Principal, uid string, f StateFilter, page Page) ([]StateEntry, Pagination, error) {
	if f.Code != nil && !KnownStateCode(*f.Code) {
		var v Validation
		v.Add("code", "must be one of BATTERY_LEVEL, CPU_TEMPERATURE, MOUNT_LOCKED, HELMET_MOUNTED")
		return nil, Pagination{}, v.Err()
	}
	if _, err := s.owned(ctx, p, ActionReadStates, uid); err != nil {
		return nil, Pagination{}, err
	}
	entries, total, err := s.states.ListStates(ctx, uid, p.AccountID, f, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return entries, NewPagination(page, total), nil
}

// QueryCommand handles GET /mounts/{uid}/query: one fresh signed command.
func (s *MountService) QueryCommand(ctx context.Context, p Principal, uid, code string, params CommandParams) ([]Command, error) {
	if s.grants != nil && p.LimitedToMounts() {
		if err := p.AuthorizeMount(ActionQueryCommand, uid); err != nil {
			return nil, err
		}
		if err := s.grants.CheckRiderToken(ctx, p, uid); err != nil {
			return nil, err
		}
	}
	if code == string(CmdInstallFirmware) {
		return s.queryInstallFirmware(ctx, p, uid, params)
	}
	m, err := s.owned(ctx, p, ActionQueryCommand, uid)
	if err != nil {
		return nil, err
	}
	cc, norm, err := ValidateCommandQuery(code, params)
	if err != nil {
		return nil, err
	}
	if m.State != StateAssociated {
		return nil, Errorf(CodeMountNotAssociated, "mount %q is not associated", uid)
	}
	if cc == CmdSyncNfcTags {
		// The association's own tags only: a mount that changed hands
		// never signs its former owner's tags.
		tags, err := s.tags.MountTagUIDs(ctx, p.AccountID, uid)
		if err != nil {
			return nil, err
		}
		norm["tagUids"] = strings.Join(tags, "+")
	}
	cmd, err := s.issue(ctx, p, m, cc, norm, s.clock())
	if err != nil {
		return nil, err
	}
	return []Command{cmd}, nil
}

// CommandAudit handles GET /mounts/{uid}/commands (owners only).
func (s *MountService) CommandAudit(ctx context.Context, p Principal, uid string, page Page) ([]Command, Pagination, error) {
	if _, err := s.owned(ctx, p, ActionReadCommandAudit, uid); err != nil {
		return nil, Pagination{}, err
	}
	cmds, total, err := s.commands.ListCommands(ctx, uid, p.AccountID, page)
	if err != nil {
		return nil, Pagination{}, err
	}
	return cmds, NewPagination(page, total), nil
}

// RotateKey gives an owned mount a new key pair; the next ASSOCIATE_OWNER
// carries it (mountd keys rotate). It is a change to the installation: the
// operator's, whoever owns the mount.
func (s *MountService) RotateKey(ctx context.Context, uid string) (Mount, error) {
	m, err := s.mounts.Mount(ctx, uid)
	if err != nil {
		return Mount{}, err
	}
	if m.State == StateInactive {
		return Mount{}, Errorf(CodeMountNotAssociated, "mount %q has no association to re-key", uid)
	}
	key, err := s.signer.NewKey(ctx, uid)
	if err != nil {
		return Mount{}, err
	}
	now := s.clock()
	actx := byOperator(ctx, "", now, AuditKeysRotate, AuditTarget("mount", uid), map[string]any{"keyId": key.ID})
	m, err = s.mounts.RekeyMount(actx, uid, m.OwnerID, key, now)
	if err == nil {
		s.resignGrants(byOperator(ctx, m.OwnerID, now, AuditGrantResign, AuditTarget("mount", uid), nil), uid)
	}
	return m, err
}

// resignGrants has mount uid's live grants signed with its new key. A
// failure is logged: the association's change stands, and the grants keep
// the signature of the key before it until the next new key.
func (s *MountService) resignGrants(ctx context.Context, uid string) {
	if s.grants == nil {
		return
	}
	if err := s.grants.ResignGrants(ctx, uid); err != nil {
		s.logger.ErrorContext(ctx, "signing rider grants with the new owner key failed", "uid", uid, "err", err)
	}
}

// issue builds, signs and records one command.
func (s *MountService) issue(ctx context.Context, p Principal, m Mount, code CommandCode, params map[string]string, now time.Time) (Command, error) {
	return s.issueFor(ctx, p, m, code, params, now, "", "")
}

// issueFor is issue for job jobID ("" for none): the store moves the
// job's target with the insert, or answers CONFLICT when the job no longer
// takes commands.
func (s *MountService) issueFor(ctx context.Context, p Principal, m Mount, code CommandCode, params map[string]string, now time.Time,
	jobID, rolloutID string) (Command, error) {
	cmd, ev, err := s.newCommand(ctx, p, m.UID, m.Key, code, params, now)
	if err != nil {
		return Command{}, err
	}
	cmd.JobID, cmd.RolloutID = jobID, rolloutID
	if err := s.commands.InsertCommand(ctx, cmd, ev); err != nil {
		return Command{}, err
	}
	if m, ok := s.waker.(FleetMeter); ok {
		m.CommandIssued(code)
	}
	if ev != nil {
		wake(ctx, s.waker, s.logger, ev)
	}
	return cmd, nil
}

// newCommand builds (and, but for ASSOCIATE_OWNER, signs with key) a
// command for mount uid, with the event its insert appends (none for
// ASSOCIATE_OWNER, which the claim's event announces).
func (s *MountService) newCommand(ctx context.Context, p Principal, uid string, key MountKey, code CommandCode,
	params map[string]string, now time.Time) (Command, *Event, error) {
	var err error
	nonce := protocol.NewNonce()
	payload := protocol.BuildPayload(now, string(code), uid, params, nonce)
	data := map[string]any{}
	for k, v := range params {
		data[k] = v
	}
	if code == CmdSyncNfcTags {
		// data carries the list as a list; the payload joins it with '+'.
		data["tagUids"] = []string{}
		if list := protocol.ListParam(params["tagUids"]); list != nil {
			data["tagUids"] = list
		}
	}
	// The command's id is its nonce: what the mount's receipt names.
	expires := now.Add(s.ttl)
	data["expiresAt"] = FormatTime(expires)
	cmd := Command{ID: nonce, MountUID: uid, AccountID: p.AccountID, Code: code, Params: params,
		Data: data, GeneratedAt: now, Payload: payload, IssuedBy: p.ClientID,
		ExpiresAt: expires, Status: CommandIssued, StatusAt: now}
	if cmd.IssuedByName, err = s.issuerName(ctx, p); err != nil {
		return Command{}, nil, err
	}
	if code == CmdAssociateOwner {
		return cmd, nil, nil
	}
	sig, err := s.signer.Sign(ctx, uid, key, []byte(payload))
	if err != nil {
		return Command{}, nil, err
	}
	cmd.SignedToken = hex.EncodeToString(sig)
	return cmd, &Event{Type: EventCommandIssued, UID: uid, AccountID: p.AccountID, OccurredAt: now}, nil
}

// clientLookup is the AccountStore method the stores' CommandStore also
// has, to name a client issuer.
type clientLookup interface {
	APIClient(ctx context.Context, clientID string) (APIClient, error)
}

// issuerName is the name a command p issues is recorded under
// (Command.IssuedByName): a person's username, an API client's name as it
// is now, "" for a client the store does not know (an external issuer's).
func (s *MountService) issuerName(ctx context.Context, p Principal) (string, error) {
	a := p.Actor()
	if a.Type != ActorClient {
		return a.Name, nil
	}
	clients, ok := s.commands.(clientLookup)
	if !ok {
		return "", nil
	}
	c, err := clients.APIClient(ctx, p.ClientID)
	if ErrorCode(err) == CodeNotFound {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return c.Name, nil
}
