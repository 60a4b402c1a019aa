package memory

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/core"
)

var (
	_ core.AccountStore  = (*Store)(nil)
	_ core.MountStore    = (*Store)(nil)
	_ core.StateStore    = (*Store)(nil)
	_ core.CommandStore  = (*Store)(nil)
	_ core.TagStore      = (*Store)(nil)
	_ core.FirmwareStore = (*Store)(nil)
	_ core.EventLog      = (*Store)(nil)
	_ core.WebhookStore  = (*Store)(nil)
	_ core.AuditLog      = (*Store)(nil)
)

// Store is every storage port of core in memory, with the conditional
// semantics of the database adapter: each transition checks its condition
// and changes the mount under one lock, as the database's conditional
// UPDATE does in one statement. It serves core's tests (no database, a fake
// clock) and runs the same contract suite as the database (storetest).
type Store struct {
	mu       sync.Mutex
	accounts map[string]core.Account
	clients  map[string]core.APIClient
	mounts   map[string]*core.Mount
	states   map[stateKey]core.StateEntry // the history, one entry per key
	latest   map[latestKey]map[core.StateCode]core.StateEntry
	commands []storedCommand
	seq      int64
	tags     map[tagKey]core.NfcTag // MountUIDs unused here: links hold them
	links    map[linkKey]string     // → account that linked
	firmware map[[2]string]core.FirmwareVersion
	events   []core.Event // the log, in order
	eventSeq int64
	horizon  core.Cursor // the newest pruned position
	// accountHorizons is the newest pruned position of each account.
	accountHorizons map[string]core.Cursor
	wh              webhookState
	people          peopleState
	audit           []core.AuditEntry // the audit log, in order
	auditSeq        int64
	al              alarmState
	jb              jobState
	ro              rolloutState
	// revisions holds, per mount, the verified report its softwareRevision
	// follows (bunstore's revision_counter and revision_key).
	revisions map[string]revisionMark
	// handover holds each uid's hand-over keys, oldest first; it outlives
	// the mount's record.
	handover map[string][]handoverKey
	gr       grantState
}

// revisionMark is the counter and device key of the verified report a
// mount's softwareRevision follows.
type revisionMark struct {
	counter uint64
	key     string
}

type stateKey struct {
	uid, account string
	code         core.StateCode
	at           int64
	value        string
}

type latestKey struct{ uid, account string }

type tagKey struct{ account, uid string }

type linkKey struct{ mount, tag string }

type storedCommand struct {
	core.Command
	seq int64
	// counter is the deciding receipt's counter.
	counter uint64
}

// NewStore returns an empty store.
func NewStore() *Store {
	return &Store{accounts: map[string]core.Account{}, clients: map[string]core.APIClient{},
		mounts: map[string]*core.Mount{}, states: map[stateKey]core.StateEntry{},
		latest: map[latestKey]map[core.StateCode]core.StateEntry{}, tags: map[tagKey]core.NfcTag{},
		links: map[linkKey]string{}, firmware: map[[2]string]core.FirmwareVersion{},
		accountHorizons: map[string]core.Cursor{}, al: alarmState{announced: map[string]bool{}},
		revisions: map[string]revisionMark{}}
}

func mountNotFound(uid string) error {
	return core.Errorf(core.CodeMountNotFound, "mount %q not found", uid)
}

// live is the database's condition that an association is in force at now:
// ASSOCIATED, or IDLE inside its window.
func live(m *core.Mount, now time.Time) bool {
	return m.State == core.StateAssociated || m.State == core.StateIdle && m.IdleDeadline.After(now)
}

func ms(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// CreateAccount implements core.AccountStore.
func (s *Store) CreateAccount(ctx context.Context, a core.Account, c core.APIClient) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.accounts[a.ID]; ok {
		return core.Errorf(core.CodeConflict, "account already exists")
	}
	if _, ok := s.clients[c.ClientID]; ok {
		return core.Errorf(core.CodeConflict, "account already exists")
	}
	s.accounts[a.ID], s.clients[c.ClientID] = a, c
	s.auditLocked(ctx)
	return nil
}

// EnsureAccount implements core.AccountStore.
func (s *Store) EnsureAccount(_ context.Context, a core.Account) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.accounts[a.ID]; !ok {
		s.accounts[a.ID] = a
	}
	return nil
}

// Accounts implements core.AccountStore.
func (s *Store) Accounts(_ context.Context) ([]core.AccountSummary, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]core.AccountSummary, 0, len(s.accounts))
	for _, a := range s.accounts {
		sum := core.AccountSummary{Account: a}
		for _, c := range s.clients {
			if c.AccountID == a.ID {
				sum.Clients++
			}
		}
		out = append(out, sum)
	}
	slices.SortFunc(out, func(a, b core.AccountSummary) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// ReplaceClientSecrets implements core.AccountStore.
func (s *Store) ReplaceClientSecrets(ctx context.Context, accountID, secretHash string) ([]string, error) {
	return s.changeClients(ctx, accountID, func(c *core.APIClient) { c.SecretHash = secretHash })
}

// RehashClientSecret implements core.AccountStore.
func (s *Store) RehashClientSecret(_ context.Context, clientID, oldHash, newHash string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[clientID]
	if !ok || c.SecretHash != oldHash {
		return false, nil
	}
	c.SecretHash = newHash
	s.clients[clientID] = c
	return true, nil
}

// RenameClients implements core.AccountStore.
func (s *Store) RenameClients(ctx context.Context, accountID, name string) ([]string, error) {
	return s.changeClients(ctx, accountID, func(c *core.APIClient) { c.Name = name })
}

// changeClients applies change to the account's clients and records the
// audit entry in ctx; CodeNotFound when the account has none.
func (s *Store) changeClients(ctx context.Context, accountID string, change func(*core.APIClient)) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []string
	for id, c := range s.clients {
		if c.AccountID == accountID {
			change(&c)
			s.clients[id] = c
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, core.Errorf(core.CodeNotFound, "the account has no client credentials")
	}
	slices.Sort(ids)
	s.auditLocked(ctx)
	return ids, nil
}

// actorNameLocked is the name a change by a is recorded under
// (core.ClientActorName).
func (s *Store) actorNameLocked(a core.Actor) string {
	name := ""
	if a.Type == core.ActorClient {
		name = s.clients[a.ID].Name
	}
	return core.ClientActorName(a, name)
}

// Account implements core.AccountStore.
func (s *Store) Account(_ context.Context, id string) (core.Account, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.accounts[id]
	if !ok {
		return core.Account{}, core.Errorf(core.CodeNotFound, "account not found")
	}
	return a, nil
}

// APIClient implements core.AccountStore.
func (s *Store) APIClient(_ context.Context, clientID string) (core.APIClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[clientID]
	if !ok {
		return core.APIClient{}, core.Errorf(core.CodeNotFound, "API client not found")
	}
	return c, nil
}

func or(v *string, keep string) string {
	if v == nil {
		return keep
	}
	return *v
}

// ClaimMount implements core.MountStore.
func (s *Store) ClaimMount(ctx context.Context, c core.Claim, e *core.Event) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := c.Fields
	m, ok := s.mounts[c.UID]
	if !ok {
		m = &core.Mount{UID: c.UID, Name: or(f.Name, ""), SerialNumber: or(f.SerialNumber, ""), MACAddress: or(f.MACAddress, ""),
			FirmwareRevision: or(f.FirmwareRevision, ""), SoftwareRevision: or(f.SoftwareRevision, ""), ModelNumber: or(f.ModelNumber, ""),
			State: core.StateIdle, OwnerID: c.AccountID, IdleDeadline: ms(c.Deadline), Key: c.Key, CreatedAt: ms(c.Now), UpdatedAt: ms(c.Now),
			DevicePublicKey: or(f.DevicePublicKey, ""), AssociationStartedAt: ms(c.Now)}
		s.mounts[c.UID] = m
		s.keepHandoverKeyLocked(c.UID, c.Key)
		s.insertClaimCommandLocked(c.Command)
		s.appendLocked(e, *m)
		s.auditLocked(ctx)
		return *m, nil
	}
	if m.State != core.StateInactive && m.OwnerID != c.AccountID || m.Lapsed(c.Now) {
		return core.Mount{}, core.Errorf(core.CodeMountAlreadyOwned, "mount %q belongs to another account", c.UID)
	}
	// Taking an INACTIVE mount starts a new association: the former
	// owner's name goes, the device's own fields stay.
	if m.State == core.StateInactive {
		m.Name = or(f.Name, "")
		// Presence is the association's: the next starts unheard.
		m.LastSeenAt = time.Time{}
		m.Offline = nil
		delete(s.al.announced, c.UID)
		// Nor has it verified values: the account's former ones no
		// longer outrank its unverified ones (core.Newer).
		for code, e := range s.latest[latestKey{c.UID, c.AccountID}] {
			e.Verified = false
			s.latest[latestKey{c.UID, c.AccountID}][code] = e
		}
	} else {
		m.Name = or(f.Name, m.Name)
	}
	m.SerialNumber, m.MACAddress = or(f.SerialNumber, m.SerialNumber), or(f.MACAddress, m.MACAddress)
	m.FirmwareRevision, m.SoftwareRevision = or(f.FirmwareRevision, m.FirmwareRevision), or(f.SoftwareRevision, m.SoftwareRevision)
	m.ModelNumber = or(f.ModelNumber, m.ModelNumber)
	// A device key lives and dies with the association that pinned it: a
	// new association starts with the key its claim brings, or none; the
	// owner's claim during its own association keeps it unless a new one
	// comes (docs/api.md, "The truth from the mount").
	if m.State == core.StateInactive {
		m.DevicePublicKey = or(f.DevicePublicKey, "")
		m.AssociationStartedAt = ms(c.Now)
	} else {
		m.DevicePublicKey = or(f.DevicePublicKey, m.DevicePublicKey)
	}
	if m.State == core.StateAssociated {
		m.IdleDeadline = time.Time{}
	} else {
		m.State, m.IdleDeadline, m.AssociatedAt = core.StateIdle, ms(c.Deadline), time.Time{}
	}
	m.OwnerID, m.ExpiredOwnerID, m.Key, m.UpdatedAt = c.AccountID, "", c.Key, ms(c.Now)
	s.unlinkLocked(c.UID, c.AccountID)
	s.keepHandoverKeyLocked(c.UID, c.Key)
	s.insertClaimCommandLocked(c.Command)
	s.appendLocked(e, *m)
	s.leaveRolloutsLocked(e, c.UID, c.AccountID, c.Now)
	s.auditLocked(ctx)
	return *m, nil
}

// insertClaimCommandLocked stores a claim's command (if any) with it.
func (s *Store) insertClaimCommandLocked(c *core.Command) {
	if c == nil {
		return
	}
	s.seq++
	cmd := *c
	cmd.GeneratedAt, cmd.ExpiresAt, cmd.StatusAt = ms(cmd.GeneratedAt), ms(cmd.ExpiresAt), ms(cmd.StatusAt)
	s.commands = append(s.commands, storedCommand{Command: cmd, seq: s.seq})
}

// unlinkLocked removes the mount's tag links of every account but keep
// ("" removes them all).
func (s *Store) unlinkLocked(uid, keep string) {
	for k, account := range s.links {
		if k.mount == uid && account != keep {
			delete(s.links, k)
		}
	}
}

// ConfirmAssociation implements core.MountStore.
func (s *Store) ConfirmAssociation(ctx context.Context, uid, accountID string, now time.Time, e *core.Event) (core.Mount, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok {
		return core.Mount{}, false, mountNotFound(uid)
	}
	if m.State != core.StateIdle || m.OwnerID != accountID || !m.IdleDeadline.After(now) {
		return *m, false, nil
	}
	m.State, m.AssociatedAt, m.IdleDeadline, m.UpdatedAt = core.StateAssociated, ms(now), time.Time{}, ms(now)
	s.confirmHandoverKeyLocked(uid, m.Key.ID)
	s.appendLocked(e, *m)
	s.auditLocked(ctx)
	return *m, true, nil
}

// ExpireAssociation implements core.MountStore.
func (s *Store) ExpireAssociation(_ context.Context, uid string, now time.Time, e *core.Event) (core.Mount, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.State != core.StateIdle || m.IdleDeadline.After(now) {
		return core.Mount{}, false, nil
	}
	m.State, m.ExpiredOwnerID, m.OwnerID = core.StateInactive, m.OwnerID, ""
	m.IdleDeadline, m.Key, m.UpdatedAt = time.Time{}, core.MountKey{}, ms(now)
	m.LastSeenAt = time.Time{}
	m.Offline = nil
	delete(s.al.announced, uid)
	s.unlinkLocked(uid, "")
	if e != nil {
		e.AccountID = m.ExpiredOwnerID
	}
	s.appendLocked(e, *m)
	s.endGrantsLocked(uid, now)
	s.leaveRolloutsLocked(e, uid, "", now)
	return *m, true, nil
}

// AbandonMount implements core.MountStore.
func (s *Store) AbandonMount(ctx context.Context, uid, accountID string, now time.Time, e *core.Event) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.OwnerID != accountID || !live(m, now) {
		return core.Mount{}, mountNotFound(uid)
	}
	m.State, m.ExpiredOwnerID, m.OwnerID = core.StateInactive, "", ""
	m.IdleDeadline, m.AssociatedAt, m.Key, m.UpdatedAt = time.Time{}, time.Time{}, core.MountKey{}, ms(now)
	m.LastSeenAt = time.Time{}
	m.Offline = nil
	delete(s.al.announced, uid)
	s.unlinkLocked(uid, "")
	s.appendLocked(e, *m)
	s.endGrantsLocked(uid, now)
	s.leaveRolloutsLocked(e, uid, "", now)
	s.auditLocked(ctx)
	return *m, nil
}

// DeleteMount implements core.MountStore: the mount and everything of it.
func (s *Store) DeleteMount(ctx context.Context, uid, accountID string, e *core.Event) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.OwnerID != accountID {
		return core.Mount{}, mountNotFound(uid)
	}
	delete(s.mounts, uid)
	delete(s.revisions, uid)
	for k := range s.states {
		if k.uid == uid {
			delete(s.states, k)
		}
	}
	for k := range s.latest {
		if k.uid == uid {
			delete(s.latest, k)
		}
	}
	s.commands = slices.DeleteFunc(s.commands, func(c storedCommand) bool { return c.MountUID == uid })
	s.unlinkLocked(uid, "")
	s.appendLocked(e, *m)
	now := time.Now()
	if e != nil && !e.OccurredAt.IsZero() {
		now = e.OccurredAt
	}
	s.endGrantsLocked(uid, now)
	s.leaveRolloutsLocked(e, uid, "", now)
	s.auditLocked(ctx)
	return *m, nil
}

// RekeyMount implements core.MountStore.
func (s *Store) RekeyMount(ctx context.Context, uid, accountID string, key core.MountKey, now time.Time) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.OwnerID != accountID || !live(m, now) {
		return core.Mount{}, mountNotFound(uid)
	}
	m.Key, m.UpdatedAt = key, ms(now)
	s.auditLocked(ctx)
	return *m, nil
}

// UpdateMount implements core.MountStore.
func (s *Store) UpdateMount(ctx context.Context, uid, accountID string, u core.MountUpdate, now time.Time) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.OwnerID != accountID || !live(m, now) {
		return core.Mount{}, mountNotFound(uid)
	}
	m.Name, m.SoftwareRevision = or(u.Name, m.Name), or(u.SoftwareRevision, m.SoftwareRevision)
	if u.Name != nil || u.SoftwareRevision != nil {
		m.UpdatedAt = ms(now)
	}
	s.auditLocked(ctx)
	return *m, nil
}

// Mount implements core.MountStore.
func (s *Store) Mount(_ context.Context, uid string) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok {
		return core.Mount{}, mountNotFound(uid)
	}
	return *m, nil
}

// MountWithLatest implements core.MountStore.
func (s *Store) MountWithLatest(_ context.Context, uid string) (core.Mount, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok {
		return core.Mount{}, mountNotFound(uid)
	}
	out := *m
	out.Latest = core.ComputeLatest(s.latestLocked(uid, m.OwnerID))
	return out, nil
}

func (s *Store) latestLocked(uid, accountID string) []core.StateEntry {
	var out []core.StateEntry
	for _, e := range s.latest[latestKey{uid, accountID}] {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b core.StateEntry) int { return cmp.Compare(a.Code, b.Code) })
	return out
}

// ListMounts implements core.MountStore.
func (s *Store) ListMounts(_ context.Context, accountID string, f core.MountFilter, p core.Page, now time.Time) ([]core.Mount, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.Mount
	for _, m := range s.mounts {
		switch {
		case m.OwnerID != accountID || !live(m, now),
			f.MACAddress != nil && m.MACAddress != strings.ToUpper(*f.MACAddress),
			f.MountUID != nil && m.UID != *f.MountUID,
			f.SerialNumber != nil && m.SerialNumber != *f.SerialNumber,
			f.UIDs != nil && !slices.Contains(f.UIDs, m.UID):
			continue
		}
		latest := s.latestLocked(m.UID, accountID)
		if f.Expr != nil && !f.Expr.Matches(*m, latestValues(latest), f.OfflineCut) {
			continue
		}
		out := *m
		out.Latest = core.ComputeLatest(latest)
		all = append(all, out)
	}
	slices.SortFunc(all, func(a, b core.Mount) int { return cmp.Compare(a.UID, b.UID) })
	return page(all, p), len(all), nil
}

// latestValues is a mount's latest values by code, as the fleet filter
// reads them.
func latestValues(latest []core.StateEntry) map[core.StateCode]string {
	out := make(map[core.StateCode]string, len(latest))
	for _, e := range latest {
		out[e.Code] = e.Value
	}
	return out
}

// page cuts p out of a sorted list.
func page[T any](all []T, p core.Page) []T {
	from := min(p.Offset(), len(all))
	to := min(from+p.PageSize, len(all))
	return slices.Clone(all[from:to])
}

// IdleDeadlines implements core.MountStore.
func (s *Store) IdleDeadlines(context.Context) ([]core.Deadline, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.Deadline
	for _, m := range s.mounts {
		if m.State == core.StateIdle && !m.IdleDeadline.IsZero() {
			out = append(out, core.Deadline{UID: m.UID, At: m.IdleDeadline})
		}
	}
	return out, nil
}

// LapsedIdle implements core.MountStore.
func (s *Store) LapsedIdle(_ context.Context, now time.Time, limit int) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*core.Mount
	for _, m := range s.mounts {
		if m.State == core.StateIdle && !m.IdleDeadline.After(now) {
			due = append(due, m)
		}
	}
	slices.SortFunc(due, func(a, b *core.Mount) int { return a.IdleDeadline.Compare(b.IdleDeadline) })
	uids := []string{}
	for _, m := range due[:min(limit, len(due))] {
		uids = append(uids, m.UID)
	}
	return uids, nil
}

// InsertStates implements core.StateStore.
func (s *Store) InsertStates(ctx context.Context, uid, accountID string, entries []core.StateEntry, e *core.Event) (core.Mount, []core.StateEntry, error) {
	return s.InsertReport(ctx, uid, accountID, entries, core.ReportCheck{}, e)
}

// InsertReport implements core.StateStore.
func (s *Store) InsertReport(_ context.Context, uid, accountID string, entries []core.StateEntry, r core.ReportCheck, e *core.Event) (core.Mount, []core.StateEntry, error) {
	if len(entries) == 0 {
		return core.Mount{}, nil, core.Errorf(core.CodeValidation, "a report holds at least one entry")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	// The entries' ReceivedAt is the instant of the report.
	if !ok || m.OwnerID != accountID || !live(m, entries[0].ReceivedAt) {
		return core.Mount{}, nil, mountNotFound(uid)
	}
	if r.Check != nil {
		if err := r.Check(*m); err != nil {
			return core.Mount{}, nil, err
		}
	}
	if r.Watch != nil {
		// The database rolls a refused watch back with the entries; here
		// it is asked first, on what the entries do not change (the open
		// episodes), so that nothing is stored when it refuses.
		if _, err := r.Watch(s.viewLocked(uid)); err != nil {
			return core.Mount{}, nil, err
		}
	}
	if r.SoftwareRevision != "" && r.Counter != nil && m.DevicePublicKey != "" {
		// The revision follows the verified report with the highest
		// counter of the mount's device key (docs/api.md, "The truth from the
		// mount").
		if mark, ok := s.revisions[uid]; !ok || mark.key != m.DevicePublicKey || mark.counter < *r.Counter {
			s.revisions[uid] = revisionMark{counter: *r.Counter, key: m.DevicePublicKey}
			if r.SoftwareRevision != m.SoftwareRevision {
				m.SoftwareRevision, m.UpdatedAt = r.SoftwareRevision, ms(entries[0].ReceivedAt)
			}
		}
	}
	accepted := []core.StateEntry{}
	for _, entry := range entries {
		entry.OccurredAt, entry.ReceivedAt = ms(entry.OccurredAt), ms(entry.ReceivedAt)
		k := stateKey{uid, accountID, entry.Code, entry.OccurredAt.UnixMilli(), entry.Value}
		if _, dup := s.states[k]; dup {
			continue
		}
		s.states[k] = entry
		accepted = append(accepted, entry)
	}
	lk := latestKey{uid, accountID}
	for _, entry := range core.LatestPerCode(accepted) {
		if s.latest[lk] == nil {
			s.latest[lk] = map[core.StateCode]core.StateEntry{}
		}
		if cur, ok := s.latest[lk][entry.Code]; !ok || core.Newer(entry, cur) {
			s.latest[lk][entry.Code] = core.StateEntry{Code: entry.Code, Value: entry.Value, OccurredAt: entry.OccurredAt, Verified: entry.Verified}
		}
	}
	if len(accepted) > 0 && e != nil {
		e.States = slices.Clone(accepted)
		// The event shows the mount as the report leaves it: with the
		// lastSeenAt the watch below gives it.
		snap := *m
		if !r.SeenAt.IsZero() && snap.LastSeenAt.Before(r.SeenAt) {
			snap.LastSeenAt = ms(r.SeenAt)
		}
		s.appendLocked(e, snap)
	}
	if r.Watch != nil {
		events, err := s.watchLocked(uid, r.Watch)
		if err != nil {
			return core.Mount{}, nil, err
		}
		if r.WatchEvents != nil {
			*r.WatchEvents = events
		}
	}
	if r.Counter != nil && r.SoftwareRevision != "" {
		events := s.observeRolloutReportLocked(uid, accountID, r.SoftwareRevision, *r.Counter, entries[0].ReceivedAt)
		if r.RolloutEvents != nil {
			*r.RolloutEvents = append(*r.RolloutEvents, events...)
		}
	}
	return *m, accepted, nil
}

// LatestStates implements core.StateStore.
func (s *Store) LatestStates(_ context.Context, uid, accountID string) ([]core.StateEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.latestLocked(uid, accountID), nil
}

// ListStates implements core.StateStore.
func (s *Store) ListStates(_ context.Context, uid, accountID string, f core.StateFilter, p core.Page) ([]core.StateEntry, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.StateEntry
	for k, e := range s.states {
		switch {
		case k.uid != uid || k.account != accountID,
			f.Code != nil && e.Code != *f.Code,
			f.From != nil && e.OccurredAt.Before(ms(*f.From)),
			f.To != nil && !e.OccurredAt.Before(ms(*f.To)):
			continue
		}
		all = append(all, e)
	}
	slices.SortFunc(all, func(a, b core.StateEntry) int {
		return cmp.Or(b.OccurredAt.Compare(a.OccurredAt), cmp.Compare(a.Code, b.Code), cmp.Compare(a.Value, b.Value))
	})
	return page(all, p), len(all), nil
}

// InsertCommand implements core.CommandStore.
func (s *Store) InsertCommand(_ context.Context, c core.Command, e *core.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[c.MountUID]
	if !ok {
		return mountNotFound(c.MountUID)
	}
	if c.JobID != "" {
		if err := s.checkJobCommandLocked(c); err != nil {
			return err
		}
	}
	if c.RolloutID != "" {
		if err := s.checkRolloutCommandLocked(c); err != nil {
			return err
		}
	}
	s.insertClaimCommandLocked(&c)
	if c.JobID != "" {
		s.moveJobTargetLocked(c, c.GeneratedAt)
	}
	if c.RolloutID != "" {
		s.installRolloutTargetLocked(c)
	}
	s.appendLocked(e, *m)
	return nil
}

// ListCommands implements core.CommandStore: newest first, in issue order
// within one millisecond.
func (s *Store) ListCommands(_ context.Context, uid, accountID string, p core.Page) ([]core.Command, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []storedCommand
	for _, c := range s.commands {
		if c.MountUID == uid && c.AccountID == accountID {
			all = append(all, c)
		}
	}
	slices.SortFunc(all, func(a, b storedCommand) int {
		return cmp.Or(b.GeneratedAt.Compare(a.GeneratedAt), cmp.Compare(b.seq, a.seq))
	})
	out := make([]core.Command, 0, len(all))
	for _, c := range page(all, p) {
		out = append(out, c.Command)
	}
	return out, len(all), nil
}

// CommandsByID implements core.CommandStore.
func (s *Store) CommandsByID(_ context.Context, uid, accountID string, ids []string) ([]core.Command, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.Command{}
	for _, c := range s.commands {
		if c.MountUID == uid && c.AccountID == accountID && slices.Contains(ids, c.ID) {
			out = append(out, c.Command)
		}
	}
	return out, nil
}

// DecideCommand implements core.CommandStore.
func (s *Store) DecideCommand(_ context.Context, d core.CommandDecision, e *core.Event) (core.Command, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.commands, func(c storedCommand) bool {
		return c.ID == d.ID && c.MountUID == d.UID && c.AccountID == d.AccountID
	})
	if i < 0 {
		return core.Command{}, false, core.Errorf(core.CodeCommandNotFound, "command %q not found", d.ID)
	}
	c := &s.commands[i]
	at := ms(d.At)
	switch {
	case d.Status == core.CommandExecuted && c.Status != core.CommandExecuted:
	case d.Status == core.CommandRefused && (c.Status == core.CommandIssued || c.Status == core.CommandUnconfirmed):
	case d.Status == core.CommandRefused && c.Status == core.CommandRefused && c.counter > d.Counter:
		at = c.StatusAt // the status stands; the deciding receipt changes
	default:
		return c.Command, false, nil
	}
	c.Status, c.StatusAt, c.Reason, c.Verified, c.counter = d.Status, at, d.Reason, d.Verified, d.Counter
	if c.JobID != "" {
		if je := s.moveJobTargetLocked(c.Command, d.At); je != nil && d.AccountEvents != nil {
			*d.AccountEvents = append(*d.AccountEvents, je)
		}
	}
	if c.RolloutID != "" {
		if re := s.decideRolloutTargetLocked(c.Command, d.At); len(re) > 0 && d.AccountEvents != nil {
			*d.AccountEvents = append(*d.AccountEvents, re...)
		}
	}
	if m, ok := s.mounts[d.UID]; ok && e != nil {
		cmd := c.Command
		e.Command = &cmd
		s.appendLocked(e, *m)
	}
	return c.Command, true, nil
}

// UnconfirmCommands implements core.CommandStore.
func (s *Store) UnconfirmCommands(_ context.Context, now time.Time, limit int, event func(core.Command) *core.Event) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []int
	for i, c := range s.commands {
		if c.Status == core.CommandIssued && !c.ExpiresAt.After(now) {
			due = append(due, i)
		}
	}
	slices.SortFunc(due, func(a, b int) int { return s.commands[a].ExpiresAt.Compare(s.commands[b].ExpiresAt) })
	out := []*core.Event{}
	for _, i := range due[:min(limit, len(due))] {
		c := &s.commands[i]
		c.Status, c.StatusAt = core.CommandUnconfirmed, ms(now)
		e := event(c.Command)
		cmd := c.Command
		e.Command = &cmd
		if m, ok := s.mounts[c.MountUID]; ok && (m.OwnerID == "" || m.OwnerID == c.AccountID) {
			s.appendLocked(e, *m)
		}
		out = append(out, e)
	}
	var jobCmds []core.Command
	for _, e := range out {
		if e.Command.JobID != "" {
			jobCmds = append(jobCmds, *e.Command)
		}
	}
	slices.SortFunc(jobCmds, func(a, b core.Command) int { return cmp.Compare(a.JobID, b.JobID) })
	for _, c := range jobCmds {
		s.moveJobTargetLocked(c, now)
	}
	return out, nil
}

// tagLocked returns a tag with its links.
func (s *Store) tagLocked(t core.NfcTag) core.NfcTag {
	t.MountUIDs = []string{}
	for k, account := range s.links {
		if k.tag == t.UID && account == t.AccountID {
			t.MountUIDs = append(t.MountUIDs, k.mount)
		}
	}
	slices.Sort(t.MountUIDs)
	return t
}

// ListTags implements core.TagStore.
func (s *Store) ListTags(_ context.Context, accountID string, mountUIDs []string, p core.Page) ([]core.NfcTag, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.NfcTag
	for k, t := range s.tags {
		if k.account != accountID {
			continue
		}
		t = s.tagLocked(t)
		if mountUIDs != nil && !slices.ContainsFunc(t.MountUIDs, func(m string) bool { return slices.Contains(mountUIDs, m) }) {
			continue
		}
		all = append(all, t)
	}
	slices.SortFunc(all, func(a, b core.NfcTag) int { return cmp.Compare(a.UID, b.UID) })
	return page(all, p), len(all), nil
}

// SyncTags implements core.TagStore.
func (s *Store) SyncTags(ctx context.Context, accountID, mountUID string, tagUIDs []string, now time.Time, e *core.Event) (added, removed int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[mountUID]
	if !ok || m.OwnerID != accountID || m.State == core.StateInactive {
		return 0, 0, mountNotFound(mountUID)
	}
	if m.State != core.StateAssociated {
		return 0, 0, core.Errorf(core.CodeMountNotAssociated, "mount %q is not associated", mountUID)
	}
	for _, uid := range tagUIDs {
		k := tagKey{accountID, uid}
		if _, ok := s.tags[k]; !ok {
			s.tags[k] = core.NfcTag{UID: uid, AccountID: accountID, CreatedAt: ms(now), UpdatedAt: ms(now)}
		}
	}
	for k := range s.links {
		if k.mount == mountUID && !slices.Contains(tagUIDs, k.tag) {
			delete(s.links, k)
			removed++
		}
	}
	for _, uid := range tagUIDs {
		k := linkKey{mountUID, uid}
		if _, ok := s.links[k]; !ok {
			s.links[k] = accountID
			added++
		}
	}
	s.appendLocked(e, *m)
	s.auditLocked(ctx)
	return added, removed, nil
}

// UpdateTag implements core.TagStore.
func (s *Store) UpdateTag(ctx context.Context, accountID, uid string, u core.NfcTagUpdate, now time.Time) (core.NfcTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := tagKey{accountID, uid}
	t, ok := s.tags[k]
	if !ok {
		return core.NfcTag{}, core.Errorf(core.CodeNfcTagNotFound, "NFC tag not found")
	}
	t.Name, t.IconName = or(u.Name, t.Name), or(u.IconName, t.IconName)
	if u.Color != nil {
		t.Color = strings.ToUpper(*u.Color)
	}
	if u.Name != nil || u.Color != nil || u.IconName != nil {
		t.UpdatedAt = ms(now)
	}
	s.tags[k] = t
	s.auditLocked(ctx)
	return s.tagLocked(t), nil
}

// MountTagUIDs implements core.TagStore.
func (s *Store) MountTagUIDs(_ context.Context, accountID, mountUID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	uids := []string{}
	for k, account := range s.links {
		if k.mount == mountUID && account == accountID {
			uids = append(uids, k.tag)
		}
	}
	slices.Sort(uids)
	return uids, nil
}

// TagsOfMounts implements core.TagStore.
func (s *Store) TagsOfMounts(_ context.Context, accountID string, mountUIDs []string) (map[string][]core.NfcTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]core.NfcTag{}
	for k, account := range s.links {
		if account != accountID || !slices.Contains(mountUIDs, k.mount) {
			continue
		}
		if t, ok := s.tags[tagKey{accountID, k.tag}]; ok {
			out[k.mount] = append(out[k.mount], s.tagLocked(t))
		}
	}
	for _, tags := range out {
		slices.SortFunc(tags, func(a, b core.NfcTag) int { return cmp.Compare(a.UID, b.UID) })
	}
	return out, nil
}

// InsertFirmware implements core.FirmwareStore.
func (s *Store) InsertFirmware(ctx context.Context, v core.FirmwareVersion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{v.ModelNumber, v.SoftwareRevision}
	if _, ok := s.firmware[k]; ok {
		return core.Errorf(core.CodeConflict, "firmware version already exists")
	}
	v.AvailableSince = ms(v.AvailableSince)
	s.firmware[k] = v
	s.auditLocked(ctx)
	return nil
}

// ListFirmware implements core.FirmwareStore.
func (s *Store) ListFirmware(_ context.Context, model *string, now time.Time, p core.Page) ([]core.FirmwareVersion, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.FirmwareVersion
	for _, v := range s.firmware {
		if v.AvailableSince.After(now) || model != nil && v.ModelNumber != *model {
			continue
		}
		all = append(all, v)
	}
	slices.SortFunc(all, func(a, b core.FirmwareVersion) int {
		return cmp.Or(b.AvailableSince.Compare(a.AvailableSince), cmp.Compare(a.ModelNumber, b.ModelNumber),
			cmp.Compare(b.SoftwareRevision, a.SoftwareRevision))
	})
	return page(all, p), len(all), nil
}

// ModelFirmware implements core.FirmwareStore.
func (s *Store) ModelFirmware(_ context.Context, model string, now time.Time) ([]core.FirmwareVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.FirmwareVersion
	for _, v := range s.firmware {
		if v.ModelNumber == model && !v.AvailableSince.After(now) {
			out = append(out, v)
		}
	}
	return out, nil
}

// DeprecateFirmware implements core.FirmwareStore.
func (s *Store) DeprecateFirmware(ctx context.Context, model, revision string) (core.FirmwareVersion, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{model, revision}
	v, ok := s.firmware[k]
	if !ok {
		return core.FirmwareVersion{}, core.Errorf(core.CodeFirmwareNotFound, "firmware version not found")
	}
	v.Deprecated = true
	s.firmware[k] = v
	s.auditLocked(ctx)
	return v, nil
}

// appendLocked completes e with the mount as the change left it and
// appends it to the log; nil appends nothing.
func (s *Store) appendLocked(e *core.Event, m core.Mount) {
	if e == nil {
		return
	}
	m.Key = core.MountKey{}
	m.Latest = core.LatestStates{}
	if e.Type != core.EventDeleted {
		m.Latest = core.ComputeLatest(s.latestLocked(m.UID, e.AccountID))
	}
	s.eventSeq++
	e.ID, e.Mount, e.OccurredAt = core.Cursor{Seq: s.eventSeq}, m, ms(e.OccurredAt)
	stored := *e
	stored.States = slices.Clone(e.States)
	if e.Command != nil {
		cmd := *e.Command
		stored.Command = &cmd
	}
	if e.Alarm != nil {
		a := cloneAlarm(*e.Alarm)
		stored.Alarm = &a
	}
	s.events = append(s.events, stored)
}

// ReadEvents implements core.EventLog. Appends happen under the store's
// lock, so every event in the log is settled.
func (s *Store) ReadEvents(_ context.Context, q core.EventQuery) ([]core.Event, core.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	horizon := s.horizon
	if q.AccountID != "" {
		horizon = s.accountHorizons[q.AccountID]
	}
	if q.After != nil && q.After.Before(horizon) {
		return nil, core.Cursor{}, core.Errorf(core.CodeCursorExpired, "the event log no longer holds the events after this cursor; start again without it")
	}
	head := core.Cursor{Seq: s.eventSeq}
	if q.After != nil && head.Before(*q.After) {
		return nil, core.Cursor{}, core.InvalidCursor()
	}
	var out []core.Event
	if q.Limit <= 0 {
		return out, head, nil
	}
	if q.Tail {
		for i := len(s.events) - 1; i >= 0 && len(out) < q.Limit; i-- {
			if e := s.events[i]; q.Selects(e) {
				e.States = slices.Clone(e.States)
				out = append(out, e)
			}
		}
		slices.Reverse(out)
		return out, head, nil
	}
	for _, e := range s.events {
		if q.After != nil && !q.After.Before(e.ID) || !q.Selects(e) {
			continue
		}
		e.States = slices.Clone(e.States)
		out = append(out, e)
		if len(out) == q.Limit {
			return out, e.ID, nil
		}
	}
	return out, head, nil
}

// PruneEvents implements core.EventLog.
func (s *Store) PruneEvents(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for n < len(s.events) && n < limit && s.events[n].OccurredAt.Before(before) {
		n++
	}
	if n > 0 {
		s.horizon = s.events[n-1].ID
		for _, e := range s.events[:n] {
			if h := s.accountHorizons[e.AccountID]; h.Before(e.ID) {
				s.accountHorizons[e.AccountID] = e.ID
			}
		}
		s.events = slices.Delete(s.events, 0, n)
	}
	return n, nil
}

// AccountHorizon implements core.EventLog.
func (s *Store) AccountHorizon(_ context.Context, accountID string) (core.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accountHorizons[accountID], nil
}

// AccountHead implements core.EventLog.
func (s *Store) AccountHead(_ context.Context, accountID string) (core.Cursor, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.events) - 1; i >= 0; i-- {
		if s.events[i].AccountID == accountID {
			return s.events[i].ID, nil
		}
	}
	return s.accountHorizons[accountID], nil
}

// AccountNewest implements core.EventLog: every event of the memory store
// is settled once appended, so it is the head.
func (s *Store) AccountNewest(ctx context.Context, accountID string) (core.Cursor, error) {
	return s.AccountHead(ctx, accountID)
}

// webhookState is the memory store's webhooks and deliveries.
type webhookState struct {
	hooks      []core.Webhook
	deliveries []core.Delivery        // in the order stored, without their bodies
	bodies     map[core.Cursor][]byte // by event: one per event, as in bunstore
	leases     map[string]time.Time
	leaseSeq   int
	dispatched core.Cursor
}

// CreateWebhook implements core.WebhookStore.
func (s *Store) CreateWebhook(ctx context.Context, w core.Webhook, max int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.wh.hooks {
		if h.AccountID == w.AccountID {
			n++
		}
	}
	if n >= max {
		return core.Errorf(core.CodeConflict, "an account holds at most %d webhooks", max)
	}
	w.CreatedAt, w.UpdatedAt = ms(w.CreatedAt), ms(w.UpdatedAt)
	s.wh.hooks = append(s.wh.hooks, cloneWebhook(w))
	s.auditLocked(ctx)
	return nil
}

func cloneWebhook(w core.Webhook) core.Webhook {
	w.EventTypes, w.MountUIDs = slices.Clone(w.EventTypes), slices.Clone(w.MountUIDs)
	return w
}

func (s *Store) webhookLocked(accountID, id string) int {
	return slices.IndexFunc(s.wh.hooks, func(w core.Webhook) bool { return w.ID == id && w.AccountID == accountID })
}

// Webhook implements core.WebhookStore.
func (s *Store) Webhook(_ context.Context, accountID, id string) (core.Webhook, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.webhookLocked(accountID, id)
	if i < 0 {
		return core.Webhook{}, core.Errorf(core.CodeWebhookNotFound, "webhook %q not found", id)
	}
	return cloneWebhook(s.wh.hooks[i]), nil
}

// ListWebhooks implements core.WebhookStore.
func (s *Store) ListWebhooks(_ context.Context, accountID string, p core.Page) ([]core.Webhook, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.Webhook
	for _, w := range s.wh.hooks {
		if w.AccountID == accountID {
			all = append(all, cloneWebhook(w))
		}
	}
	return page(all, p), len(all), nil
}

// UpdateWebhook implements core.WebhookStore.
func (s *Store) UpdateWebhook(ctx context.Context, w core.Webhook) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.webhookLocked(w.AccountID, w.ID)
	if i < 0 {
		return core.Errorf(core.CodeWebhookNotFound, "webhook %q not found", w.ID)
	}
	w.CreatedAt, w.UpdatedAt = s.wh.hooks[i].CreatedAt, ms(w.UpdatedAt)
	s.wh.hooks[i] = cloneWebhook(w)
	s.auditLocked(ctx)
	return nil
}

// DeleteWebhook implements core.WebhookStore.
func (s *Store) DeleteWebhook(ctx context.Context, accountID, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.webhookLocked(accountID, id)
	if i < 0 {
		return core.Errorf(core.CodeWebhookNotFound, "webhook %q not found", id)
	}
	s.wh.hooks = slices.Delete(s.wh.hooks, i, i+1)
	s.wh.deliveries = slices.DeleteFunc(s.wh.deliveries, func(d core.Delivery) bool { return d.WebhookID == id })
	s.dropOrphanBodiesLocked()
	s.auditLocked(ctx)
	return nil
}

// dropOrphanBodiesLocked deletes the bodies no attempt refers to.
func (s *Store) dropOrphanBodiesLocked() {
	used := map[core.Cursor]bool{}
	for _, d := range s.wh.deliveries {
		used[d.EventID] = true
	}
	maps.DeleteFunc(s.wh.bodies, func(id core.Cursor, _ []byte) bool { return !used[id] })
}

// ListDeliveries implements core.WebhookStore: newest first.
func (s *Store) ListDeliveries(_ context.Context, accountID, webhookID string, p core.Page) ([]core.Delivery, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var all []core.Delivery
	for i := len(s.wh.deliveries) - 1; i >= 0; i-- {
		if d := s.wh.deliveries[i]; d.WebhookID == webhookID && d.AccountID == accountID {
			d.Lease = ""
			all = append(all, d)
		}
	}
	return page(all, p), len(all), nil
}

// EnqueueDeliveries implements core.WebhookStore under the store's lock.
func (s *Store) EnqueueDeliveries(ctx context.Context, limit int, plan func(core.Event, []core.Webhook) ([]core.Delivery, error)) (int, error) {
	s.mu.Lock()
	after := s.wh.dispatched
	if after.Before(s.horizon) {
		after = s.horizon
	}
	s.mu.Unlock()
	// The dispatcher of one process is one goroutine: reading outside the
	// lock and storing under it cannot plan an event twice.
	events, next, err := s.ReadEvents(ctx, core.EventQuery{After: &after, Limit: limit})
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		var hooks []core.Webhook
		for _, w := range s.wh.hooks {
			if w.AccountID == e.AccountID && w.Enabled {
				hooks = append(hooks, cloneWebhook(w))
			}
		}
		if len(hooks) == 0 {
			continue
		}
		planned, err := plan(e, hooks)
		if err != nil {
			return 0, err
		}
		for _, d := range planned {
			if s.wh.bodies == nil {
				s.wh.bodies = map[core.Cursor][]byte{}
			}
			if _, ok := s.wh.bodies[e.ID]; !ok {
				s.wh.bodies[e.ID] = slices.Clone(d.Payload)
			}
			d.NextAttemptAt, d.Payload = ms(d.NextAttemptAt), nil
			s.wh.deliveries = append(s.wh.deliveries, d)
		}
	}
	s.wh.dispatched = next
	return len(events), nil
}

// ClaimDeliveries implements core.WebhookStore.
func (s *Store) ClaimDeliveries(_ context.Context, now time.Time, lease time.Duration, limit int, skipWebhooks, skipAccounts []string) ([]core.Delivery, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wh.leases == nil {
		s.wh.leases = map[string]time.Time{}
	}
	var due []int
	for i, d := range s.wh.deliveries {
		if d.Status == core.DeliveryPending && !d.NextAttemptAt.After(now) && !slices.Contains(skipWebhooks, d.WebhookID) &&
			!slices.Contains(skipAccounts, d.AccountID) &&
			(d.Lease == "" || s.wh.leases[d.ID].Before(now)) {
			due = append(due, i)
		}
	}
	slices.SortStableFunc(due, func(a, b int) int {
		return s.wh.deliveries[a].NextAttemptAt.Compare(s.wh.deliveries[b].NextAttemptAt)
	})
	var out []core.Delivery
	s.wh.leaseSeq++
	token := strconv.Itoa(s.wh.leaseSeq)
	for _, i := range due[:min(limit, len(due))] {
		s.wh.deliveries[i].Lease = token
		s.wh.leases[s.wh.deliveries[i].ID] = now.Add(lease)
		d := s.wh.deliveries[i]
		d.Payload = slices.Clone(s.wh.bodies[d.EventID])
		out = append(out, d)
	}
	return out, nil
}

// FinishDeliveries implements core.WebhookStore.
func (s *Store) FinishDeliveries(_ context.Context, done []core.FinishedDelivery) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range done {
		d := f.Delivery
		i := slices.IndexFunc(s.wh.deliveries, func(x core.Delivery) bool {
			return x.ID == d.ID && x.Status == core.DeliveryPending && x.Lease == d.Lease
		})
		if i < 0 {
			continue
		}
		d.Lease, d.NextAttemptAt, d.AttemptedAt, d.Payload = "", time.Time{}, ms(d.AttemptedAt), nil
		d.Duration = d.Duration.Truncate(time.Millisecond)
		s.wh.deliveries[i] = d
		delete(s.wh.leases, d.ID)
		if f.Next != nil {
			n := *f.Next
			n.NextAttemptAt, n.Lease, n.Payload = ms(n.NextAttemptAt), "", nil
			s.wh.deliveries = append(s.wh.deliveries, n)
		}
	}
	return nil
}

// WebhookBodyStats says how many webhook bodies the store holds and their
// total length (the contract suite's view of what deliveries cost).
func (s *Store) WebhookBodyStats(context.Context) (count int, size int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.wh.bodies {
		count++
		size += int64(len(b))
	}
	return count, size, nil
}
