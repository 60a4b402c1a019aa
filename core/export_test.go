package core

import "time"

// SetTarpitDelay shortens the tarpit for the duration of a test.
func SetTarpitDelay(d time.Duration) (restore func()) {
	old := tarpitDelay
	tarpitDelay = d
	return func() { tarpitDelay = old }
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
