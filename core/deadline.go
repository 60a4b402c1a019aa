package core

import (
	"context"
	"errors"
	"time"
)

// DefaultRequestTimeout is how long a request may work (MOUNTD_REQUEST_TIMEOUT):
// past it the request answers 503 UNAVAILABLE with Retry-After and its
// database statement is cancelled. Streams (exports, WebSockets, firmware
// files) have bounds of their own; a long poll gets its wait on top.
const DefaultRequestTimeout = 10 * time.Second

// ErrRequestDeadline is the cause of a request context that its deadline
// ended (WithRequestDeadline), as opposed to a client that went away.
var ErrRequestDeadline = &Error{Code: CodeUnavailable,
	Message:    "the request took longer than the server allows; retry shortly, or ask for less",
	RetryAfter: UnavailableRetry}

// WithRequestDeadline bounds a request's work to d: every store call made
// with the returned context carries the deadline to the database.
func WithRequestDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, d, ErrRequestDeadline)
}

// DeadlineError returns ErrRequestDeadline when ctx was ended by its request
// deadline, and nil otherwise (not ended, or its client went away).
func DeadlineError(ctx context.Context) error {
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), ErrRequestDeadline) {
		return ErrRequestDeadline
	}
	return nil
}
