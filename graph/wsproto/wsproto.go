// Package wsproto serves GraphQL over WebSocket for gqlgen: the
// graphql-transport-ws protocol as github.com/enisdenjo/graphql-ws
// PROTOCOL.md states it, and the legacy graphql-ws protocol through gqlgen's
// own transport.
//
// graphql-transport-ws is served here (server.go) on gqlgen's executor:
// gqlgen parses, validates, applies its extensions and runs the resolvers;
// this package owns the socket, the protocol and the fan-out, where gqlgen's
// transport.Websocket falls short:
//
//	client does / server state              gqlgen's transport           here
//	nothing within InitTimeout              1002                         4408 Connection initialisation timeout
//	invalid message (JSON, type, id, ...)   1002, 1000, or accepted      4400 Invalid message received: ...
//	subscribe before connection_ack         1002                         4401 Unauthorized
//	connection_init refused                 InitFunc's code              4403 Forbidden
//	subscribe with an active id             replaces the operation       4409 Subscriber for <id> already exists
//	second connection_init                  1002                         4429 Too many initialisation requests
//	ping before connection_ack              1002                         pong, payload echoed
//	connection context ends (token expiry)  1000                         the cause's code (WithExpiry: 4403)
//	operation refused before any result     next {errors} + complete     error [errors], no complete
//	after error, after a client complete,   complete (and late next)     nothing
//	or while the socket closes
//	client reads too slowly                 unbounded goroutines         1013 after MaxQueuedMessages
//	more than MaxOperations active          unbounded                    error [TOO_MANY_OPERATIONS]
//	  (legacy graphql-ws: here, 4430 Too many operations)
//	server shuts down (Stats.GoingAway)     complete, then EOF           1001, no complete
//
// Fan-out (Sharing): sockets whose subscriptions are equal (same operation,
// variables and rights, as the Sharing's Key decides) share one execution;
// each event is resolved and encoded once and the same bytes are queued on
// every socket. An idle socket holds one goroutine (its reader); a writer
// goroutine runs only while messages wait. An operation whose resolver
// claims its Pull holds no goroutine while it waits: the goroutine that
// sends the resolver's next value produces the result.
//
// The legacy graphql-ws subprotocol (subscriptions-transport-ws) runs on
// gqlgen's transport, unchanged except for what applies to it too: the
// initialisation timeout (4408) and the close codes at init (Reject) and
// when the connection context ends (WithExpiry).
package wsproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
)

// Subprotocols.
const (
	// TransportWS is graphql-transport-ws (github.com/enisdenjo/graphql-ws).
	TransportWS = "graphql-transport-ws"
	// LegacyWS is graphql-ws (subscriptions-transport-ws); also what a
	// client that names no subprotocol gets, as in gqlgen.
	LegacyWS = "graphql-ws"
)

// Close codes of graphql-transport-ws.
const (
	CloseBadRequest              = 4400
	CloseUnauthorized            = 4401
	CloseForbidden               = 4403
	CloseInitTimeout             = 4408
	CloseSubscriberAlreadyExists = 4409
	CloseTooManyInitRequests     = 4429
	// CloseTooManyOperations ends a legacy graphql-ws socket that starts
	// more than MaxOperations operations (that protocol has no error
	// message for a refused start).
	CloseTooManyOperations = 4430
)

// CloseError is a close code and reason. As the cause of the context that
// InitFunc returns (context.WithDeadlineCause, context.WithCancelCause), it
// makes Transport close the socket with that code when the context ends,
// where gqlgen would close with 1000.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string { return fmt.Sprintf("websocket closed: %d %s", e.Code, e.Reason) }

// Reject marks ctx, to be returned by an InitFunc with its error, so that
// the socket closes with 4403 Forbidden (gqlgen reads both values).
func Reject(ctx context.Context) context.Context {
	return transport.AppendCloseReason(transport.WithWebsocketCloseCode(ctx, CloseForbidden), "Forbidden")
}

// WithExpiry returns a context, to be returned by an InitFunc, that ends at
// t and then closes the socket with 4403 Forbidden: a client may reconnect
// with a fresh token (graphql-ws clients retry on 4403, not on 4401).
func WithExpiry(ctx context.Context, t time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadlineCause(ctx, t, &CloseError{Code: CloseForbidden, Reason: "Forbidden: the access token expired"})
}

// Transport is gqlgen's WebSocket transport with the protocol rules it
// lacks. Configure the embedded transport.Websocket as usual; InitTimeout
// (default 3s) is enforced here with 4408 rather than by gqlgen.
//
// graphql-transport-ws connections are served by this package (see
// server.go) on gqlgen's executor; legacy graphql-ws connections by gqlgen's
// transport with the init timeout and close codes applied.
type Transport struct {
	transport.Websocket
	// Share, when set, lets equal subscriptions share one execution
	// (graphql-transport-ws only).
	Share *Sharing
	// Stats, when set, counts connections and slow-client closes, and
	// closes the connections when the server shuts down (GoingAway).
	Stats *Stats
	// MaxOperations bounds the active operations of one socket; zero:
	// DefaultMaxOperations. Beyond, a subscribe gets an error message.
	MaxOperations int
	// SlowClientWait is how long an execution of one socket's own (a
	// replay, not a shared live one) waits for a client that stopped
	// reading before it is closed with CloseTooSlow; zero:
	// DefaultSlowClientWait.
	SlowClientWait time.Duration
}

// DefaultSlowClientWait is SlowClientWait when it is zero.
const DefaultSlowClientWait = 5 * time.Second

func (t Transport) slowClientWait() time.Duration {
	if t.SlowClientWait > 0 {
		return t.SlowClientWait
	}
	return DefaultSlowClientWait
}

func (t Transport) maxOperations() int {
	if t.MaxOperations > 0 {
		return t.MaxOperations
	}
	return DefaultMaxOperations
}

var _ graphql.Transport = Transport{}

// DefaultInitTimeout is the connection_init wait when InitTimeout is zero.
const DefaultInitTimeout = 3 * time.Second

// Do serves one WebSocket: graphql-transport-ws here, legacy graphql-ws
// through gqlgen with a conn that applies the init timeout and close codes.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	if offers(r, TransportWS) {
		t.serve(w, r, exec)
		return
	}
	c := &conn{initTimeout: t.InitTimeout, maxOperations: t.maxOperations(), active: map[string]struct{}{}}
	if c.initTimeout <= 0 {
		c.initTimeout = DefaultInitTimeout
	}
	ws := t.Websocket
	ws.InitTimeout = 0 // the conn's timer closes with 4408
	inner := ws.Implementation
	if inner == nil {
		inner = transport.CoderWebsocketImplementation{}
	}
	ws.Implementation = acceptor{inner: inner, c: c}
	if init := ws.InitFunc; init != nil {
		ws.InitFunc = func(ctx context.Context, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
			ctx, ack, err := init(ctx, p)
			if err == nil {
				c.mu.Lock()
				c.connCtx = ctx
				c.mu.Unlock()
			}
			return ctx, ack, err
		}
	}
	ws.Do(w, r, exec)
	c.stopTimer()
}

type acceptor struct {
	inner transport.WebsocketImplementation
	c     *conn
}

func (a acceptor) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	ws, err := a.inner.Accept(w, r, opts)
	if err != nil {
		return nil, err
	}
	c := a.c
	c.inner = ws
	c.mu.Lock()
	c.timer = time.AfterFunc(c.initTimeout, func() {
		c.mu.Lock()
		seen := c.initSeen
		c.mu.Unlock()
		if !seen {
			c.close(CloseInitTimeout, "Connection initialisation timeout")
		}
	})
	c.mu.Unlock()
	return c, nil
}

// conn sits between gqlgen's legacy graphql-ws transport and the socket.
type conn struct {
	initTimeout time.Duration
	inner       transport.WebsocketConn

	// maxOperations bounds the operations started and not yet ended, as
	// on graphql-transport-ws: gqlgen's legacy transport has no bound, and
	// each operation holds goroutines and a subscriber's buffer.
	maxOperations int

	mu       sync.Mutex
	timer    *time.Timer
	initSeen bool
	closed   bool
	connCtx  context.Context     // what InitFunc returned, once accepted
	active   map[string]struct{} // ids started and not yet stopped or completed
}

var (
	_ transport.WebsocketConn          = (*conn)(nil)
	_ transport.WebsocketReadLimiter   = (*conn)(nil)
	_ transport.WebsocketReadDeadliner = (*conn)(nil)
)

// message is a graphql-transport-ws client message.
type message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// NextReader returns the next message for gqlgen, noting connection_init.
func (c *conn) NextReader() (int, io.Reader, error) {
	typ, r, err := c.inner.NextReader()
	if err != nil {
		if c.isClosed() {
			return typ, nil, transport.ErrWebsocketClosed
		}
		return typ, nil, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return typ, nil, err
	}
	if !c.sawLegacy(data) {
		c.close(CloseTooManyOperations, "Too many operations")
		return typ, nil, transport.ErrWebsocketClosed
	}
	return typ, bytes.NewReader(data), nil
}

// legacyMessage is what the bookkeeping of a graphql-ws message needs.
type legacyMessage struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// sawLegacy stops the init timer at a legacy connection_init and counts
// operations; false when a start would exceed maxOperations.
func (c *conn) sawLegacy(data []byte) bool {
	var m legacyMessage
	if json.Unmarshal(data, &m) != nil {
		return true // gqlgen answers it
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case "connection_init":
		c.initSeen = true
		if c.timer != nil {
			c.timer.Stop()
		}
	case "start":
		if _, ok := c.active[m.ID]; !ok && len(c.active) >= c.maxOperations {
			return false
		}
		c.active[m.ID] = struct{}{}
	case "stop":
		delete(c.active, m.ID)
	}
	return true
}

// parse validates a client message as the reference implementation does
// (graphql-ws validateMessage): an object with a known client type, ids
// non-empty strings, payloads of the right shape.
func parse(data []byte) (*message, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil || fields == nil {
		return nil, errors.New("not a JSON object")
	}
	var m message
	if !isString(fields["type"]) {
		return nil, errors.New(`"type" must be a string`)
	}
	_ = json.Unmarshal(fields["type"], &m.Type)
	payload := fields["payload"]
	switch m.Type {
	case "connection_init", "ping", "pong":
		if !isObjectOrNull(payload) {
			return nil, fmt.Errorf(`%q payload must be an object`, m.Type)
		}
		if isObject(payload) {
			m.Payload = payload
		}
	case "subscribe", "complete":
		if !isString(fields["id"]) {
			return nil, fmt.Errorf(`%q needs a string "id"`, m.Type)
		}
		_ = json.Unmarshal(fields["id"], &m.ID)
		if m.ID == "" {
			return nil, fmt.Errorf(`%q needs a non-empty "id"`, m.Type)
		}
		if m.Type == "complete" {
			break
		}
		var p map[string]json.RawMessage
		if !isObject(payload) || json.Unmarshal(payload, &p) != nil {
			return nil, errors.New(`"subscribe" payload must be an object`)
		}
		if !isString(p["query"]) {
			return nil, errors.New(`"subscribe" payload needs a string "query"`)
		}
		if v, ok := p["operationName"]; ok && !isString(v) && !isNull(v) {
			return nil, errors.New(`"operationName" must be a string or null`)
		}
		for _, k := range []string{"variables", "extensions"} {
			if !isObjectOrNull(p[k]) {
				return nil, fmt.Errorf("%q must be an object or null", k)
			}
		}
		m.Payload = payload
	default:
		return nil, fmt.Errorf("unexpected message type %q", truncate(m.Type, 40))
	}
	return &m, nil
}

func isString(v json.RawMessage) bool { return len(v) > 0 && v[0] == '"' }
func isObject(v json.RawMessage) bool { return len(v) > 0 && v[0] == '{' }
func isNull(v json.RawMessage) bool   { return string(v) == "null" }

// isObjectOrNull admits an absent value too.
func isObjectOrNull(v json.RawMessage) bool { return len(v) == 0 || isNull(v) || isObject(v) }

// WriteJSON sends a message from gqlgen unchanged, noting the operations
// it ends.
func (c *conn) WriteJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var m legacyMessage
	if json.Unmarshal(b, &m) == nil && (m.Type == "complete" || m.Type == "error") {
		c.mu.Lock()
		delete(c.active, m.ID)
		c.mu.Unlock()
	}
	return c.inner.WriteJSON(json.RawMessage(b)) // encoded once
}

// WriteClose closes with gqlgen's code, unless the connection context ended
// with a *CloseError cause.
func (c *conn) WriteClose(code int, reason string) error {
	c.mu.Lock()
	ctx := c.connCtx
	c.mu.Unlock()
	if ctx != nil {
		var ce *CloseError
		if errors.As(context.Cause(ctx), &ce) {
			code, reason = ce.Code, ce.Reason
		}
	}
	c.close(code, reason)
	return nil
}

// close starts the close handshake once; gqlgen then sees the read fail
// and winds the connection down.
func (c *conn) close(code int, reason string) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	_ = c.inner.WriteClose(code, truncate(reason, 123))
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *conn) stopTimer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timer != nil {
		c.timer.Stop()
	}
}

func (c *conn) Close() error {
	c.stopTimer()
	return c.inner.Close()
}

func (c *conn) Subprotocol() string { return c.inner.Subprotocol() }

func (c *conn) SetReadLimit(limit int64) {
	if l, ok := c.inner.(transport.WebsocketReadLimiter); ok {
		l.SetReadLimit(limit)
	}
}

func (c *conn) SetReadDeadline(t time.Time) error {
	if d, ok := c.inner.(transport.WebsocketReadDeadliner); ok {
		return d.SetReadDeadline(t)
	}
	return nil
}

// truncate cuts s to at most n bytes on a rune boundary (a close reason
// may hold 123 bytes).
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
