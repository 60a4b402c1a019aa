package redis

import "time"

// SetFailureClock makes l give the scripts now instead of Redis's TIME
// (nil: Redis's TIME again).
func SetFailureClock(l *FailureLimiter, now func() time.Time) { l.now = now }

// SetRateClock makes l read its time from now, its scripts included (nil:
// Redis's TIME again).
func SetRateClock(l *RateLimiter, now func() time.Time) {
	l.redisNow = now
	if now != nil {
		l.now = now
	}
}

// RetryStart exposes retryStart to the tests.
var RetryStart = retryStart
