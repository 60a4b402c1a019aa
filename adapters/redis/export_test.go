package redis

import "time"

// SetFailureClock makes l give the scripts now instead of Redis's TIME
// (nil: Redis's TIME again).
func SetFailureClock(l *FailureLimiter, now func() time.Time) { l.now = now }
