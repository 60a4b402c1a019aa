package core

import "time"

// SetTarpitDelay shortens the tarpit, and the wait for a place under a
// full failure limit with it, for the duration of a test.
func SetTarpitDelay(d time.Duration) (restore func()) {
	oldDelay, oldWait := tarpitDelay, placeWait
	tarpitDelay, placeWait = d, d
	return func() { tarpitDelay, placeWait = oldDelay, oldWait }
}

// SetPlaceWait sets how long a credential check waits for a place under
// a full failure limit.
func SetPlaceWait(d time.Duration) (restore func()) {
	old := placeWait
	placeWait = d
	return func() { placeWait = old }
}

// SetRetentionClock makes r read its time from now.
func SetRetentionClock(r *Retention, now func() time.Time) { r.now = now }

// SetHashGate replaces the process's hash gate for the duration of a test.
func SetHashGate(g *HashGate) (restore func()) {
	old := hashGate
	hashGate = g
	return func() { hashGate = old }
}

// GateWaiting is how many callers wait in g's queue.
func GateWaiting(g *HashGate) int64 { return g.waiting.Load() }

// OpenWaits is how many long polls of accountID s holds open.
func (s *EventService) OpenWaits(accountID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waits[accountID]
}
