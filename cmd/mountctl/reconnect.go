package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

// Reconnection waits: 0.5 s doubling to 15 s, each jittered, so that the
// clients of a stopped replica do not all come back in the same instant.
const (
	firstWait = 500 * time.Millisecond
	maxWait   = 15 * time.Second
)

type backoff struct{ next time.Duration }

func (b *backoff) reset() { b.next = 0 }

// wait sleeps the next delay (between half and all of it); false when ctx
// ended first.
func (b *backoff) wait(ctx context.Context) bool {
	if b.next == 0 {
		b.next = firstWait
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, maxWait)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// retryable says whether a long-running command reconnects after err: the
// server going away (1001, a restart, a stopped replica), the network, an
// overloaded or restarting server, and a token that expired when mountctl
// renews its own. What retrying cannot fix (a refused subscription, a mount
// that does not exist, a fixed token that expired) ends the command.
func retryable(err error, renews bool) bool {
	var refused *client.RefusedError
	if errors.As(err, &refused) {
		// Over the account's rate limit (many watchers reconnecting at
		// once): the limit refills, so waiting helps.
		return refused.Code == string(core.CodeRateLimited)
	}
	var closed *client.CloseError
	if errors.As(err, &closed) {
		switch closed.Code {
		case 1001, 1006, 1011, 1012, 1013, 1014, 4429: // 4429: the socket was over the rate limit
			return true
		case 4401, 4403:
			return renews
		}
		return false
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
			http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
		return false
	}
	return true // the network: refused, reset, EOF, timeouts
}

// explain turns the errors a fixed token meets into what to do about them.
func explain(err error, renews bool) error {
	var closed *client.CloseError
	if !renews && (errors.As(err, &closed) && (closed.Code == 4401 || closed.Code == 4403) || client.StatusOf(err) == http.StatusUnauthorized) {
		return fmt.Errorf("%w: get a new one with `mountctl token`, or set MOUNTCTL_CLIENT_ID and MOUNTCTL_CLIENT_SECRET instead of a token so that mountctl renews its own", tokenRefused(err))
	}
	return err
}

func tokenRefused(err error) error {
	var closed *client.CloseError
	if errors.As(err, &closed) {
		return closed
	}
	return errors.New("the server refused the token (expired, revoked or of another server)")
}
