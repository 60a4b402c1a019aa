package memory

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/mountd/mountd/core"
)

// auditLocked records the audit entry ctx carries, as the database does in
// the change's transaction: under the lock of the change. Its details go
// through JSON, as they do in the database, so both give back the same.
func (s *Store) auditLocked(ctx context.Context) {
	e := core.AuditFrom(ctx)
	if e == nil {
		return
	}
	e.Actor.Name = s.actorNameLocked(e.Actor)
	stored := *e
	stored.At = ms(e.At)
	stored.Details = map[string]any{}
	if e.Details != nil {
		if b, err := json.Marshal(e.Details); err == nil {
			_ = json.Unmarshal(b, &stored.Details)
		}
	}
	s.auditSeq++
	stored.Position = core.Cursor{Seq: s.auditSeq}
	e.Position = stored.Position
	s.audit = append(s.audit, stored)
}

// ReadAudit implements core.AuditLog.
func (s *Store) ReadAudit(_ context.Context, q core.AuditQuery) ([]core.AuditEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []core.AuditEntry{}
	entries := slices.Values(s.audit)
	if q.Tail {
		entries = func(yield func(core.AuditEntry) bool) {
			for i := len(s.audit) - 1; i >= 0 && yield(s.audit[i]); i-- {
			}
		}
	}
	for e := range entries {
		if len(out) == q.Limit {
			break
		}
		if e.AccountID != q.AccountID || q.After != nil && !q.After.Before(e.Position) ||
			q.Actor != "" && e.Actor.ID != q.Actor || q.Action != "" && string(e.Action) != q.Action ||
			q.Target != "" && e.Target != q.Target {
			continue
		}
		out = append(out, e)
	}
	if q.Tail {
		slices.Reverse(out)
	}
	return out, nil
}

// PruneAudit implements core.Housekeeping.
func (s *Store) PruneAudit(_ context.Context, before time.Time, limit int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	kept := s.audit[:0]
	for _, e := range s.audit {
		if n < limit && e.At.Before(before) {
			n++
			continue
		}
		kept = append(kept, e)
	}
	clear(s.audit[len(kept):])
	s.audit = kept
	return n, nil
}
