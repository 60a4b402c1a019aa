package memory

import (
	"context"

	"github.com/mountd/mountd/core"
)

// handoverKey is one owner key a mount may hold (core.MountStore.HandoverKeys).
type handoverKey struct {
	key       core.MountKey
	confirmed bool
}

// keepHandoverKeyLocked keeps a claim's key after the uid's others, and of
// the unconfirmed ones only the newest core.MaxHandoverKeys-1.
func (s *Store) keepHandoverKeyLocked(uid string, key core.MountKey) {
	if s.handover == nil {
		s.handover = map[string][]handoverKey{}
	}
	keys := append(s.handover[uid], handoverKey{key: key})
	var kept []handoverKey
	unconfirmed := 0
	for i := len(keys) - 1; i >= 0; i-- {
		if !keys[i].confirmed {
			if unconfirmed == core.MaxHandoverKeys-1 {
				continue
			}
			unconfirmed++
		}
		kept = append([]handoverKey{keys[i]}, kept...)
	}
	s.handover[uid] = kept
}

// confirmHandoverKeyLocked makes keyID the uid's confirmed key, if a claim
// kept it, and drops the keys kept before it.
func (s *Store) confirmHandoverKeyLocked(uid, keyID string) {
	keys := s.handover[uid]
	for i, k := range keys {
		if k.key.ID == keyID {
			rest := append([]handoverKey{{key: k.key, confirmed: true}}, keys[i+1:]...)
			s.handover[uid] = rest
			return
		}
	}
}

// HandoverKeys implements core.MountStore.
func (s *Store) HandoverKeys(_ context.Context, uid string) ([]core.MountKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []core.MountKey
	for _, k := range s.handover[uid] {
		out = append(out, k.key)
	}
	return out, nil
}
