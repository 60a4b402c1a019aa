package core

import (
	"context"
	"sync"
	"time"
)

// ExportStore streams an account's data out for the exports (docs/api.md,
// "Exports") in constant memory: each method reads one database cursor and
// hands the rows to yield one at a time, never holding the whole result. An
// error from yield stops the iteration and is returned as is; the end of ctx
// stops the query (a client that went away stops the database's work too).
type ExportStore interface {
	// EachMount calls yield with each mount accountID owns with a live
	// association at now (as ListMounts lists them), ordered by uid, with
	// its computed fields (Latest) read by the same cursor. f narrows it
	// as it narrows ListMounts.
	EachMount(ctx context.Context, accountID string, f MountFilter, now time.Time, yield func(Mount) error) error
	// EachState calls yield with each history entry accountID's
	// associations with the mount reported (as ListStates lists them), but
	// oldest first: by occurredAt, then code, then value. From is
	// inclusive, To exclusive; Code is honoured.
	EachState(ctx context.Context, uid, accountID string, f StateFilter, yield func(StateEntry) error) error
}

// ActionExport is owner-only: an export is the whole fleet's data, and its
// cost is a full scan.
const ActionExport Action = "exports.read"

// MaxExportsPerAccount bounds the exports one account runs at once on a
// replica: each holds a database connection and a scan for as long as its
// client reads.
const MaxExportsPerAccount = 2

// ExportLimit is the most exports one replica runs at once, whatever their
// accounts (MOUNTD_MAX_EXPORTS; by default half the database pool): each
// holds a database connection for as long as its client reads, and the
// rest of the pool must serve everything else. Past it an export is
// refused 503 UNAVAILABLE with Retry-After: the replica is busy, not the
// caller over its own rate (which is MaxExportsPerAccount's 429).
type ExportLimit int

// MaxExportDuration bounds one export. A million history entries stream in
// well under a minute (docs/performance.md); the bound is for a client that
// reads very slowly, which would otherwise hold a connection and the
// database's snapshot without end.
const MaxExportDuration = time.Hour

// exportRetryAfter is what a refused export is told to wait: exports take
// seconds to minutes, so sooner is pointless.
const exportRetryAfter = 10 * time.Second

// ExportService holds the rules of the exports: owners only, a mount of
// the caller's account, a bounded number at once.
type ExportService struct {
	// offlineAfter makes each exported mount's presence from its lastSeenAt.
	offlineAfter time.Duration
	store        ExportStore
	mounts       MountStore
	filters      FilterParser
	now          func() time.Time

	limit   int // 0: none
	mu      sync.Mutex
	running map[string]int // by account
	total   int
}

// NewExportService returns an ExportService over its ports.
func NewExportService(store ExportStore, mounts MountStore, filters FilterParser, offlineAfter OfflineAfter, limit ExportLimit) *ExportService {
	return &ExportService{store: store, mounts: mounts, filters: filters, offlineAfter: time.Duration(offlineAfter), now: time.Now,
		limit: int(limit), running: map[string]int{}}
}

// ExportMounts streams the caller's fleet to yield (GET /exports/mounts).
// FORBIDDEN for a restricted token, VALIDATION_FAILED (field filter) for a
// filter it cannot apply, RATE_LIMITED when the account already runs
// MaxExportsPerAccount exports, UNAVAILABLE when the replica already runs
// its ExportLimit; otherwise what the store or yield returns.
func (s *ExportService) ExportMounts(ctx context.Context, p Principal, filter string, yield func(Mount) error) error {
	if err := p.Authorize(ActionExport); err != nil {
		return err
	}
	now := s.now().UTC()
	f := MountFilter{Expression: filter}
	if err := ParseMountFilter(s.filters, &f, s.offlineAfter, now); err != nil {
		return err
	}
	release, err := s.acquire(p.AccountID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, MaxExportDuration)
	defer cancel()
	return s.store.EachMount(ctx, p.AccountID, f, now, func(m Mount) error {
		m.Presence = PresenceAt(m.LastSeenAt, s.offlineAfter, now)
		return yield(m)
	})
}

// ExportStates streams one mount's history to yield (GET /exports/states).
// FORBIDDEN for a restricted token, VALIDATION_FAILED (field mountUid) when
// uid is empty, MOUNT_NOT_FOUND unless the caller's account owns the mount,
// RATE_LIMITED and UNAVAILABLE as ExportMounts.
func (s *ExportService) ExportStates(ctx context.Context, p Principal, uid string, f StateFilter, yield func(StateEntry) error) error {
	if err := p.Authorize(ActionExport); err != nil {
		return err
	}
	if uid == "" {
		var v Validation
		v.Add("mountUid", "is required")
		return v.Err()
	}
	m, err := s.mounts.Mount(ctx, uid)
	if err != nil {
		return err
	}
	if m.OwnerID != p.AccountID || m.State == StateInactive || m.Lapsed(s.now()) {
		return Errorf(CodeMountNotFound, "mount %q not found", uid)
	}
	release, err := s.acquire(p.AccountID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, MaxExportDuration)
	defer cancel()
	return s.store.EachState(ctx, uid, p.AccountID, f, yield)
}

// acquire takes one of the account's export slots.
func (s *ExportService) acquire(accountID string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[accountID] >= MaxExportsPerAccount {
		e := Errorf(CodeRateLimited, "this account already runs %d exports; retry when one has finished", MaxExportsPerAccount)
		e.RetryAfter = exportRetryAfter
		return nil, e
	}
	if s.limit > 0 && s.total >= s.limit {
		e := Errorf(CodeUnavailable, "this server already runs %d exports; retry shortly", s.limit)
		e.RetryAfter = exportRetryAfter
		return nil, e
	}
	s.running[accountID]++
	s.total++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.running[accountID]--; s.running[accountID] == 0 {
			delete(s.running, accountID)
		}
	}, nil
}
