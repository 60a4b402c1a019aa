package core

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// RateLimiter admits events per key under a Rate (GCRA, a burst of the
// whole Limit), shared by every replica when it is backed by Redis.
type RateLimiter interface {
	Allow(ctx context.Context, key string, r Rate) (RateDecision, error)
}

// RateDecision is a limiter's answer for one event.
type RateDecision struct {
	Allowed   bool
	Limit     int
	Remaining int
	// RetryAfter is how long until one more event fits, when refused.
	RetryAfter time.Duration
	// ResetAfter is how long until the whole Limit is free again.
	ResetAfter time.Duration
}

// ParseRate reads MOUNTD_RATE_LIMIT: "<count>/<s|m|h>", e.g. "1200/m".
func ParseRate(s string) (Rate, error) {
	count, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.Atoi(count)
	period := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	if !ok || err != nil || n < 1 || n > 1_000_000 || period == 0 {
		return Rate{}, fmt.Errorf("rate limit %q: want <count>/<s|m|h> with a count of 1 to 1000000, e.g. 1200/m", s)
	}
	return Rate{Limit: n, Period: period}, nil
}

// APIRateLimit is the per-account API rate limit (MOUNTD_RATE_LIMIT).
type APIRateLimit struct {
	limiter RateLimiter
	rate    Rate
	logger  *slog.Logger
}

// NewAPIRateLimit limits each account to rate through limiter.
func NewAPIRateLimit(limiter RateLimiter, rate Rate, logger *slog.Logger) *APIRateLimit {
	return &APIRateLimit{limiter: limiter, rate: rate, logger: logger}
}

// Take counts one API request of the principal's account. Over the limit it
// returns the decision and a RATE_LIMITED error with the wait. When the
// limiter cannot answer (Redis down) the request is let through: the limit
// protects the service, and refusing every request would do the harm it
// exists to prevent.
func (l *APIRateLimit) Take(ctx context.Context, p Principal) (RateDecision, error) {
	d, err := l.limiter.Allow(ctx, "api:"+p.AccountID, l.rate)
	if err != nil {
		l.logger.WarnContext(ctx, "the rate limiter is unavailable; request let through", "err", err)
		return RateDecision{Allowed: true, Limit: l.rate.Limit, Remaining: -1}, nil
	}
	if !d.Allowed {
		return d, &Error{Code: CodeRateLimited, Message: fmt.Sprintf("the account's API rate limit of %d requests per %s is used up; retry later", l.rate.Limit, periodName(l.rate.Period)),
			RetryAfter: d.RetryAfter}
	}
	return d, nil
}

func periodName(d time.Duration) string {
	switch d {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	}
	return d.String()
}
