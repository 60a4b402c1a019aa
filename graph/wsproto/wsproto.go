// Package wsproto makes gqlgen's WebSocket transport follow the
// graphql-transport-ws protocol as github.com/enisdenjo/graphql-ws
// PROTOCOL.md states it, where gqlgen's own transport.Websocket falls short.
//
// gqlgen does the GraphQL work: the upgrade (coder/websocket, with its origin
// check), connection_init and the InitFunc (whose ack payload it sends),
// executing operations, next, complete when a stream ends, cancelling an
// operation on a client complete, its own pings and keep-alives, and the
// legacy graphql-ws subprotocol. Configuration covers what it can: a rejected
// init closes with the code and reason the InitFunc puts in its context
// (Reject). Transport wraps the rest: it hands gqlgen a connection that sees
// every message both ways, answers or drops some, rewrites a few and closes
// with the protocol's codes.
//
//	client does / server state              gqlgen alone                 with wsproto
//	nothing within InitTimeout              1002                         4408 Connection initialisation timeout
//	invalid message (JSON, type, id, ...)   1002, 1000, or accepted      4400 Invalid message received: ...
//	subscribe before connection_ack         1002                         4401 Unauthorized
//	connection_init refused                 InitFunc's code              4403 Forbidden (Reject)
//	subscribe with an active id             replaces the operation       4409 Subscriber for <id> already exists
//	second connection_init                  1002                         4429 Too many initialisation requests
//	ping before connection_ack              1002                         pong, payload echoed
//	connection context ends (token expiry)  1000                         the cause's code (WithExpiry: 4403)
//	operation refused before any result     next {errors} + complete     error [errors], no complete
//	after error, after a client complete,   complete (and late next)     nothing
//	or while the socket closes
//
// Operation ids are rewritten on the way to gqlgen to ids unique on the
// socket, so an operation the client completed can never be confused with a
// new one that reuses its id while gqlgen winds the old one down.
//
// The legacy graphql-ws subprotocol (subscriptions-transport-ws) passes
// through unchanged except for what applies to it too: the initialisation
// timeout (4408) and the close codes at init (Reject) and when the connection
// context ends (WithExpiry).
package wsproto

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
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
type Transport struct {
	transport.Websocket
}

var _ graphql.Transport = Transport{}

// DefaultInitTimeout is the connection_init wait when InitTimeout is zero.
const DefaultInitTimeout = 3 * time.Second

// Do serves one WebSocket through gqlgen with a conn that applies the rules.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	c := &conn{initTimeout: t.InitTimeout, ops: map[string]*operation{}, byClient: map[string]string{}}
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
	c.modern = ws.Subprotocol() == TransportWS
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

// operation is one subscribe the client sent, under the id gqlgen knows.
type operation struct {
	clientID  string
	cancelled bool // the client completed it: gqlgen's messages for it are dropped
	sent      bool // a message for it reached the client
}

// conn sits between gqlgen's transport and the socket.
type conn struct {
	initTimeout time.Duration
	inner       transport.WebsocketConn
	modern      bool // graphql-transport-ws; otherwise legacy graphql-ws

	mu       sync.Mutex
	timer    *time.Timer
	initSeen bool
	acked    bool
	closed   bool
	connCtx  context.Context // what InitFunc returned, once accepted
	lastID   uint64
	ops      map[string]*operation // by gqlgen's id
	byClient map[string]string     // active client id → gqlgen's id
}

var (
	_ transport.WebsocketConn          = (*conn)(nil)
	_ transport.WebsocketReadLimiter   = (*conn)(nil)
	_ transport.WebsocketReadDeadliner = (*conn)(nil)
)

// message is a graphql-transport-ws message as forwarded either way.
type message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// NextReader returns the next message gqlgen should see. It answers pings,
// drops what gqlgen must not see and closes the socket on a violation.
func (c *conn) NextReader() (int, io.Reader, error) {
	for {
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
		if !c.modern {
			c.sawLegacy(data)
			return typ, bytes.NewReader(data), nil
		}
		fwd, reply, ce := c.receive(data)
		if ce != nil {
			c.close(ce.Code, ce.Reason)
			return typ, nil, transport.ErrWebsocketClosed
		}
		if reply != nil {
			_ = c.send(reply)
		}
		if fwd != nil {
			b, err := json.Marshal(fwd)
			if err != nil {
				return typ, nil, err
			}
			return typ, bytes.NewReader(b), nil
		}
	}
}

// sawLegacy stops the init timer at a legacy connection_init.
func (c *conn) sawLegacy(data []byte) {
	var m struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &m) == nil && m.Type == "connection_init" {
		c.mu.Lock()
		c.initSeen = true
		c.mu.Unlock()
		c.stopTimer()
	}
}

// receive applies the protocol to one client message: what to forward to
// gqlgen, what to answer directly, or why to close.
func (c *conn) receive(data []byte) (fwd, reply *message, ce *CloseError) {
	m, err := parse(data)
	if err != nil {
		return nil, nil, &CloseError{Code: CloseBadRequest, Reason: "Invalid message received: " + err.Error()}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case "connection_init":
		if c.initSeen {
			return nil, nil, &CloseError{Code: CloseTooManyInitRequests, Reason: "Too many initialisation requests"}
		}
		c.initSeen = true
		if c.timer != nil {
			c.timer.Stop()
		}
		return m, nil, nil
	case "ping":
		return nil, &message{Type: "pong", Payload: m.Payload}, nil
	case "pong":
		if !c.acked {
			return nil, nil, nil // gqlgen expects only connection_init before the ack
		}
		return m, nil, nil // gqlgen clears its pong deadline
	case "subscribe":
		if !c.acked {
			return nil, nil, &CloseError{Code: CloseUnauthorized, Reason: "Unauthorized"}
		}
		if _, ok := c.byClient[m.ID]; ok {
			return nil, nil, &CloseError{Code: CloseSubscriberAlreadyExists, Reason: "Subscriber for " + m.ID + " already exists"}
		}
		c.lastID++
		id := strconv.FormatUint(c.lastID, 10)
		c.ops[id] = &operation{clientID: m.ID}
		c.byClient[m.ID] = id
		return &message{Type: m.Type, ID: id, Payload: m.Payload}, nil, nil
	case "complete":
		id, ok := c.byClient[m.ID]
		if !ok {
			return nil, nil, nil // not active (any more): nothing to stop
		}
		delete(c.byClient, m.ID)
		c.ops[id].cancelled = true
		return &message{Type: m.Type, ID: id}, nil, nil
	}
	panic("unreachable: parse admits only client message types")
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

// WriteJSON sends a message from gqlgen, with the client's operation id,
// dropping what the protocol says must not be sent.
func (c *conn) WriteJSON(v any) error {
	if !c.modern {
		return c.inner.WriteJSON(v)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	send, err := c.outgoing(&m)
	if !send || err != nil {
		return err
	}
	return c.send(&m)
}

// outgoing updates the state for a server message and rewrites it; false
// means drop it.
func (c *conn) outgoing(m *message) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch m.Type {
	case "connection_ack":
		c.acked = true
		return true, nil
	case "next", "error", "complete":
	default:
		return true, nil
	}
	op := c.ops[m.ID]
	if op == nil || c.closed || (c.connCtx != nil && c.connCtx.Err() != nil) {
		// Unknown or finished, or the connection is ending: gqlgen
		// completes every operation as it winds down, but a client must not
		// take that for the end of its subscriptions (it resubscribes
		// after reconnecting).
		return false, nil
	}
	first := !op.sent
	op.sent = true
	if op.cancelled {
		if m.Type != "next" {
			delete(c.ops, m.ID)
		}
		return false, nil
	}
	if m.Type == "next" && first {
		if errs, ok := operationErrors(m.Payload); ok {
			m.Type, m.Payload = "error", errs
		}
	}
	if m.Type != "next" { // error or complete ends the operation; nothing follows
		delete(c.ops, m.ID)
		delete(c.byClient, op.clientID)
	}
	m.ID = op.clientID
	return true, nil
}

// operationErrors recognises a result that holds errors and no data at all:
// the operation failed before producing anything (its subscription resolver
// refused, or validation failed). graphql-transport-ws sends that as an
// error message whose payload is the errors.
func operationErrors(payload json.RawMessage) (json.RawMessage, bool) {
	var res struct {
		Data   json.RawMessage `json:"data"`
		Errors json.RawMessage `json:"errors"`
	}
	if json.Unmarshal(payload, &res) != nil || !(len(res.Data) == 0 || isNull(res.Data)) {
		return nil, false
	}
	var errs []json.RawMessage
	if json.Unmarshal(res.Errors, &errs) != nil || len(errs) == 0 {
		return nil, false
	}
	return res.Errors, true
}

func (c *conn) send(m *message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return c.inner.WriteJSON(json.RawMessage(b))
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
