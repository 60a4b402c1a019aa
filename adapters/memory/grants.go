package memory

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

var _ core.GrantStore = (*Store)(nil)

// grantState holds rider grants in creation order, the epoch each revoked
// grant was revoked at, and each mount's revocation version and epoch
// (which outlive the mount's record).
type grantState struct {
	grants       []core.RiderGrant
	revokedEpoch map[string]int64
	revocations  map[string]core.Revocations
	// lastRevocation is each mount's last revocation's time.
	lastRevocation map[string]time.Time
}

func (s *Store) grantsLocked() *grantState {
	if s.gr.revokedEpoch == nil {
		s.gr.revokedEpoch, s.gr.revocations, s.gr.lastRevocation = map[string]int64{}, map[string]core.Revocations{}, map[string]time.Time{}
	}
	return &s.gr
}

func (g *grantState) revocation(uid string) core.Revocations {
	if r, ok := g.revocations[uid]; ok {
		return r
	}
	return core.Revocations{UID: uid, Version: 1, Epoch: 1}
}

// CreateGrant implements core.GrantStore.
func (s *Store) CreateGrant(ctx context.Context, g core.RiderGrant, lim core.GrantLimits, now time.Time, sign core.GrantSigner) (core.RiderGrant, []*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.grantsLocked()
	m, ok := s.mounts[g.UID]
	if !ok || m.OwnerID != g.AccountID {
		return core.RiderGrant{}, nil, mountNotFound(g.UID)
	}
	if m.State != core.StateAssociated {
		return core.RiderGrant{}, nil, core.Errorf(core.CodeMountNotAssociated, "mount %q is not associated", g.UID)
	}
	if m.DevicePublicKey == "" {
		return core.RiderGrant{}, nil, core.Errorf(core.CodeDeviceKeyRequired, "mount %q has no device key", g.UID)
	}
	// The store's writes come after every check and signature, as the
	// database's transaction rolls back on an error.
	// The same rider's live grant gives its place to the new one.
	var same []int
	live, perToken := 0, 0
	for i, o := range st.grants {
		switch {
		case !o.Live(now):
		case o.UID == g.UID && o.AccountID == g.AccountID && o.RiderKey == g.RiderKey:
			same = append(same, i)
		default:
			if o.UID == g.UID {
				live++
			}
			if o.AccountID == g.AccountID && o.TokenID == g.TokenID {
				perToken++
			}
		}
	}
	if live >= lim.PerMount {
		return core.RiderGrant{}, nil, core.Errorf(core.CodeConflict, "mount %q has %d live grants, the most it may have", g.UID, live)
	}
	if lim.PerToken > 0 && perToken >= lim.PerToken {
		return core.RiderGrant{}, nil, core.Errorf(core.CodeConflict, "this token has %d live grants, the most it may have", perToken)
	}
	rev := st.revocation(g.UID)
	var replaced []*core.Event
	if len(same) > 0 {
		var err error
		if rev, replaced, err = s.revokeOnMountLocked(ctx, *m, rev, same, now, sign); err != nil {
			return core.RiderGrant{}, nil, err
		}
	}
	g.Epoch = rev.Epoch
	g, err := sign(ctx, *m, g)
	if err != nil {
		return core.RiderGrant{}, nil, err
	}
	g.Rights = slices.Clone(g.Rights)
	st.grants = append(st.grants, g)
	st.revocations[g.UID] = rev
	s.auditLocked(ctx)
	return g, replaced, nil
}

// revokeOnMountLocked revokes the grants at idx (all of mount m) at now as
// bunstore's revokeOnMount does, and returns the mount's new revocation
// state; nothing is stored when signing fails.
func (s *Store) revokeOnMountLocked(ctx context.Context, m core.Mount, rev core.Revocations, idx []int, now time.Time, sign core.GrantSigner) (core.Revocations, []*core.Event, error) {
	st := &s.gr
	listed := 0
	for _, o := range st.grants {
		if o.UID == m.UID && !o.RevokedAt.IsZero() && st.revokedEpoch[o.ID] == rev.Epoch && o.NotAfter.After(now) {
			listed++
		}
	}
	rev.Version = max(rev.Version+1, now.UnixMilli())
	resigned := map[int]core.RiderGrant{}
	if listed+len(idx) > core.MaxRevocations {
		rev.Epoch = max(rev.Epoch+1, now.UnixMilli())
		if m.State == core.StateAssociated {
			for i, o := range st.grants {
				if o.UID != m.UID || o.AccountID != m.OwnerID || !o.Live(now) || slices.Contains(idx, i) {
					continue
				}
				o.Epoch = rev.Epoch
				signed, err := sign(ctx, m, o)
				if err != nil {
					return core.Revocations{}, nil, err
				}
				resigned[i] = signed
			}
		}
	}
	for i, g := range resigned {
		st.grants[i] = g
	}
	if rev.Epoch != st.revocation(m.UID).Epoch {
		s.auditLocked(core.AuditEach(ctx, core.AuditGrantResign, core.AuditTarget("mount", m.UID),
			map[string]any{"epoch": rev.Epoch, "grants": len(resigned)}))
	}
	out := make([]*core.Event, len(idx))
	for k, i := range idx {
		st.grants[i].RevokedAt = ms(now)
		st.revokedEpoch[st.grants[i].ID] = rev.Epoch
		g := st.grants[i]
		out[k] = &core.Event{Type: core.EventGrantRevoked, UID: g.UID, AccountID: g.AccountID, OccurredAt: ms(now), Grant: &g}
		s.appendLocked(out[k], m)
		s.auditLocked(core.AuditEach(ctx, core.AuditGrantRevoke, core.AuditTarget("grant", g.ID),
			map[string]any{"uid": g.UID, "riderKey": g.RiderKey}))
	}
	st.revocations[m.UID] = rev
	st.lastRevocation[m.UID] = ms(now)
	return rev, out, nil
}

// RiderGrant implements core.GrantStore.
func (s *Store) RiderGrant(_ context.Context, accountID, id string) (core.RiderGrant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range s.grantsLocked().grants {
		if g.ID == id && g.AccountID == accountID {
			return g, nil
		}
	}
	return core.RiderGrant{}, core.Errorf(core.CodeGrantNotFound, "grant %q not found", id)
}

// ListRiderGrants implements core.GrantStore.
func (s *Store) ListRiderGrants(_ context.Context, accountID, uid string, f core.GrantFilter, now time.Time, p core.Page) ([]core.RiderGrant, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.RiderGrant
	for _, g := range s.grantsLocked().grants {
		if g.AccountID != accountID || uid != "" && g.UID != uid || f.RiderKey != nil && g.RiderKey != *f.RiderKey ||
			f.State != nil && g.State(now) != *f.State {
			continue
		}
		out = append(out, g)
	}
	slices.SortStableFunc(out, func(a, b core.RiderGrant) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	return page(out, p), len(out), nil
}

// RevokeGrants implements core.GrantStore.
func (s *Store) RevokeGrants(ctx context.Context, accountID string, ids []string, riderKey string, now time.Time, sign core.GrantSigner) ([]*core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.grantsLocked()
	byMount := map[string][]int{}
	var mounts []string
	found := false
	for i, g := range st.grants {
		if g.AccountID != accountID || riderKey != "" && g.RiderKey != riderKey || riderKey == "" && !slices.Contains(ids, g.ID) {
			continue
		}
		found = true
		if !g.Live(now) {
			continue
		}
		if byMount[g.UID] == nil {
			mounts = append(mounts, g.UID)
		}
		byMount[g.UID] = append(byMount[g.UID], i)
	}
	if riderKey == "" && !found && len(ids) == 1 {
		return nil, core.Errorf(core.CodeGrantNotFound, "grant %q not found", ids[0])
	}
	slices.Sort(mounts)
	var revoked []*core.Event
	for _, uid := range mounts {
		stored, ok := s.mounts[uid]
		if !ok {
			continue // a deleted mount's grants ended with it
		}
		m := *stored
		_, done, err := s.revokeOnMountLocked(ctx, m, st.revocation(uid), byMount[uid], now, sign)
		if err != nil {
			return nil, err
		}
		revoked = append(revoked, done...)
	}
	return revoked, nil
}

// Revocations implements core.GrantStore.
func (s *Store) Revocations(_ context.Context, uid string, now time.Time) (core.Revocations, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.grantsLocked()
	r := st.revocation(uid)
	r.GrantIDs = []string{}
	for _, g := range st.grants {
		if g.UID == uid && !g.RevokedAt.IsZero() && st.revokedEpoch[g.ID] == r.Epoch && g.NotAfter.After(now) {
			r.GrantIDs = append(r.GrantIDs, g.ID)
		}
	}
	slices.Sort(r.GrantIDs)
	return r, nil
}

// DatabaseTime implements core.GrantStore: the process's clock.
func (s *Store) DatabaseTime(context.Context) (time.Time, error) { return time.Now().UTC(), nil }

// RecordOfflineUses implements core.GrantStore.
func (s *Store) RecordOfflineUses(_ context.Context, uid string, uses []core.Command, event core.OfflineUseEvent) ([]core.StoredUse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok {
		return nil, mountNotFound(uid)
	}
	st := s.grantsLocked()
	stored := make([]core.StoredUse, len(uses))
	for i, c := range uses {
		if slices.ContainsFunc(s.commands, func(o storedCommand) bool { return o.ID == c.ID }) {
			continue
		}
		c.GeneratedAt, c.StatusAt, c.ExpiresAt = ms(c.GeneratedAt), ms(c.StatusAt), ms(c.ExpiresAt)
		s.insertClaimCommandLocked(&c)
		if c.Status == core.CommandExecuted {
			for j := range st.grants {
				if g := &st.grants[j]; g.ID == c.GrantID {
					g.Uses++
					if c.GeneratedAt.After(g.LastUsedAt) {
						g.LastUsedAt = c.GeneratedAt
					}
				}
			}
		}
		e := event(c)
		e.Command = &c
		s.appendLocked(e, *m)
		stored[i].Event = e
	}
	return stored, nil
}

// endGrantsLocked ends mount uid's live grants at now with its association,
// as bunstore's endGrants does.
func (s *Store) endGrantsLocked(uid string, now time.Time) {
	st := s.grantsLocked()
	for i := range st.grants {
		if g := &st.grants[i]; g.UID == uid && g.Live(now) {
			g.RevokedAt = ms(now)
		}
	}
}

// ResignGrants implements core.GrantStore.
func (s *Store) ResignGrants(ctx context.Context, uid string, now time.Time, sign core.GrantSigner) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.State != core.StateAssociated {
		return 0, nil
	}
	st := s.grantsLocked()
	signed := map[int]core.RiderGrant{}
	for i, g := range st.grants {
		if g.UID != uid || g.AccountID != m.OwnerID || g.KeyID == m.Key.ID || !g.Live(now) {
			continue
		}
		ng, err := sign(ctx, *m, g)
		if err != nil {
			return 0, err
		}
		signed[i] = ng
	}
	for i, g := range signed {
		st.grants[i] = g
	}
	if len(signed) > 0 {
		if e := core.AuditFrom(ctx); e != nil {
			e.Details = map[string]any{"grants": len(signed)}
		}
		s.auditLocked(ctx)
	}
	return len(signed), nil
}

// LastRevocation implements core.GrantStore.
func (s *Store) LastRevocation(_ context.Context, uid string) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.grantsLocked().lastRevocation[uid], nil
}

// SetMountOffline implements core.GrantStore.
func (s *Store) SetMountOffline(_ context.Context, accountID, uid string, o core.MountOffline) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.mounts[uid]
	if !ok || m.OwnerID != accountID || !live(m, o.At) {
		return nil
	}
	m.Offline = &o // a new value: copies of the mount handed out keep theirs
	return nil
}

// MountsBehindRevocations implements core.GrantStore.
func (s *Store) MountsBehindRevocations(context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for uid, r := range s.grantsLocked().revocations {
		m, ok := s.mounts[uid]
		if !ok || m.State != core.StateAssociated {
			continue
		}
		if m.Offline == nil || m.Offline.RevocationVersion < r.Version {
			n++
		}
	}
	return n, nil
}
