package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
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
		return refused.Code == string(protocol.CodeRateLimited)
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

// outageReason says in words why a connection to the server failed, for
// the one line an outage prints: the server going away, a replica gone
// (refused, reset or timed out connections, a proxy's 502–504), a token
// being renewed or a rate limit, rather than the raw dial error.
func outageReason(err error) string {
	var closed *client.CloseError
	if errors.As(err, &closed) {
		if closed.Code == 1006 {
			return "replica gone (the connection dropped)"
		}
		return closed.Error()
	}
	var refused *client.RefusedError
	if errors.As(err, &refused) && refused.Code == string(protocol.CodeRateLimited) {
		return "over the account's rate limit"
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case http.StatusTooManyRequests:
			return "over the account's rate limit"
		case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return fmt.Sprintf("replica gone (%d from the server or its proxy)", apiErr.Status)
		case http.StatusUnauthorized:
			return "the token expired"
		}
		return fmt.Sprintf("the server failed (%d)", apiErr.Status)
	}
	var dnsErr *net.DNSError
	switch {
	case errors.As(err, &dnsErr):
		return "the server's name does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "replica gone (connection refused)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "replica gone (connection lost)"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "replica gone (no answer in time)"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "replica gone (no answer in time)"
	}
	return "replica gone"
}

// outage prints one line per outage of a long-running command: its first
// failed attempt says why and that it reconnects; later attempts rewrite
// that line on a terminal, and in a log file print again only when the
// reason changes; the first success after it says how many attempts it took.
type outage struct {
	w io.Writer
	// raw, on a terminal, takes the line's control sequences, which w
	// (terminalText, for the server's words in the reason) would escape.
	raw      io.Writer
	tty      bool
	attempts int
	reason   string
}

func newOutage(w io.Writer) *outage {
	raw := w
	if t, ok := w.(terminalText); ok {
		raw = t.w
	}
	f, ok := raw.(*os.File)
	return &outage{w: w, raw: raw, tty: ok && term.IsTerminal(int(f.Fd()))}
}

// control writes a terminal control sequence unescaped.
func (o *outage) control(seq string) {
	if o.raw != nil {
		io.WriteString(o.raw, seq)
	} else {
		io.WriteString(o.w, seq)
	}
}

// failed records a failed attempt.
func (o *outage) failed(err error) {
	o.attempts++
	reason := outageReason(err)
	switch {
	case o.tty:
		o.control("\r")
		fmt.Fprintf(o.w, "mountctl: %s, reconnecting (attempt %d)", reason, o.attempts)
		o.control("\x1b[K")
	case o.attempts == 1 || reason != o.reason:
		fmt.Fprintf(o.w, "mountctl: %s, reconnecting (attempt %d)\n", reason, o.attempts)
	}
	o.reason = reason
}

// recovered ends the outage, if there was one, saying what the command
// does now.
func (o *outage) recovered(what string) {
	if o.attempts == 0 {
		return
	}
	if o.tty {
		fmt.Fprintln(o.w)
	}
	attempts := "1 attempt"
	if o.attempts > 1 {
		attempts = fmt.Sprintf("%d attempts", o.attempts)
	}
	fmt.Fprintf(o.w, "mountctl: reconnected after %s, %s\n", attempts, what)
	o.attempts, o.reason = 0, ""
}
