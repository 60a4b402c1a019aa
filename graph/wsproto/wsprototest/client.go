// Package wsprototest is a small GraphQL-over-WebSocket client for tests: it
// speaks graphql-transport-ws (or legacy graphql-ws) over a real socket with
// github.com/coder/websocket, writing the protocol messages itself, so tests
// see exactly what a client on the network sees, close codes included.
package wsprototest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Message is one protocol message.
type Message struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// String shows the message as sent on the wire.
func (m Message) String() string {
	b, _ := json.Marshal(m)
	return string(b)
}

// Errors decodes an error message's payload (graphql-transport-ws: an array
// of GraphQL errors) or a next message's "errors".
func (m Message) Errors() []GraphQLError {
	var errs []GraphQLError
	if json.Unmarshal(m.Payload, &errs) == nil {
		return errs
	}
	var res struct {
		Errors []GraphQLError `json:"errors"`
	}
	_ = json.Unmarshal(m.Payload, &res)
	return res.Errors
}

// GraphQLError is an entry of a GraphQL errors list.
type GraphQLError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

// Code is extensions.code.
func (e GraphQLError) Code() string {
	s, _ := e.Extensions["code"].(string)
	return s
}

// Client is one WebSocket to a GraphQL server. A reader goroutine queues
// the messages it receives and answers graphql-transport-ws pings with a
// pong (unless AutoPong is off), as real clients do.
type Client struct {
	tb       testing.TB
	conn     *websocket.Conn
	msgs     chan Message
	done     chan struct{} // closed when reading stops
	stop     chan struct{} // closed when the test closes the socket
	stopOnce sync.Once
	autoPong bool

	mu       sync.Mutex
	closeErr error // why reading stopped
}

// Options tune Dial.
type Options struct {
	// Subprotocol defaults to graphql-transport-ws; "-" asks for none.
	Subprotocol string
	Header      http.Header
	// HTTPClient makes the handshake (nil: http.DefaultClient), e.g. one
	// that trusts a test certificate for an https:// url.
	HTTPClient *http.Client
	// NoAutoPong leaves server pings unanswered.
	NoAutoPong bool
}

// Dial opens a WebSocket to url (http(s):// or ws(s)://); the socket is closed
// when the test ends.
func Dial(tb testing.TB, url string, opts Options) (*Client, error) {
	tb.Helper()
	url = strings.Replace(url, "http://", "ws://", 1)
	proto := opts.Subprotocol
	if proto == "" {
		proto = "graphql-transport-ws"
	}
	dialOpts := &websocket.DialOptions{HTTPHeader: opts.Header, HTTPClient: opts.HTTPClient}
	if proto != "-" {
		dialOpts.Subprotocols = []string{proto}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, res, err := websocket.Dial(ctx, url, dialOpts)
	if err != nil {
		if res != nil {
			return nil, fmt.Errorf("dial %s: HTTP %d: %w", url, res.StatusCode, err)
		}
		return nil, err
	}
	conn.SetReadLimit(1 << 24)
	c := &Client{tb: tb, conn: conn, msgs: make(chan Message, 4096), done: make(chan struct{}),
		stop: make(chan struct{}), autoPong: !opts.NoAutoPong && proto == "graphql-transport-ws"}
	go c.read()
	tb.Cleanup(c.Drop)
	return c, nil
}

// MustDial is Dial that fails the test on an error.
func MustDial(tb testing.TB, url string, opts Options) *Client {
	tb.Helper()
	c, err := Dial(tb, url, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func (c *Client) read() {
	defer close(c.done)
	for {
		_, data, err := c.conn.Read(context.Background())
		if err != nil {
			c.mu.Lock()
			c.closeErr = err
			c.mu.Unlock()
			return
		}
		var m Message
		if err := json.Unmarshal(data, &m); err != nil {
			m = Message{Type: "<invalid JSON>", Payload: json.RawMessage(fmt.Sprintf("%q", data))}
		}
		if m.Type == "ping" && c.autoPong {
			_ = c.write(Message{Type: "pong"})
		}
		select {
		case c.msgs <- m:
		case <-c.stop: // nobody reads any more
			return
		}
	}
}

func (c *Client) write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeRaw(string(b))
}

func (c *Client) writeRaw(s string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageText, []byte(s))
}

// Send writes v as JSON.
func (c *Client) Send(v any) {
	c.tb.Helper()
	if err := c.write(v); err != nil {
		c.tb.Fatalf("send %v: %v", v, err)
	}
}

// SendRaw writes s as a text message, as is.
func (c *Client) SendRaw(s string) {
	c.tb.Helper()
	if err := c.writeRaw(s); err != nil {
		c.tb.Fatalf("send %s: %v", s, err)
	}
}

// Init sends connection_init with payload (nil: none) and waits for
// connection_ack, which it returns. Legacy keep-alives are skipped.
func (c *Client) Init(payload any) Message {
	c.tb.Helper()
	m := Message{Type: "connection_init"}
	if payload != nil {
		b, _ := json.Marshal(payload)
		m.Payload = b
	}
	c.Send(m)
	return c.Expect("connection_ack")
}

// Subscribe sends a graphql-transport-ws subscribe (legacy: start).
func (c *Client) Subscribe(id, query string, variables map[string]any) {
	c.tb.Helper()
	typ := "subscribe"
	if c.conn.Subprotocol() != "graphql-transport-ws" {
		typ = "start"
	}
	p := map[string]any{"query": query}
	if variables != nil {
		p["variables"] = variables
	}
	b, _ := json.Marshal(p)
	c.Send(Message{Type: typ, ID: id, Payload: b})
}

// Complete stops an operation (legacy: stop).
func (c *Client) Complete(id string) {
	c.tb.Helper()
	typ := "complete"
	if c.conn.Subprotocol() != "graphql-transport-ws" {
		typ = "stop"
	}
	c.Send(Message{Type: typ, ID: id})
}

// DefaultTimeout bounds Next and Expect.
var DefaultTimeout = 10 * time.Second

// Next returns the next message other than ping, pong and ka; it fails the
// test if none comes within DefaultTimeout or the socket closes.
func (c *Client) Next() Message {
	c.tb.Helper()
	m, err := c.NextWithin(DefaultTimeout)
	if err != nil {
		c.tb.Fatal(err)
	}
	return m
}

// NextWithin is Next with its own timeout, returning the failure.
func (c *Client) NextWithin(d time.Duration) (Message, error) { return c.next(d, "") }

// next skips ping, pong and ka unless want names that type.
func (c *Client) next(d time.Duration, want string) (Message, error) {
	skip := func(m Message) bool {
		return m.Type != want && (m.Type == "ping" || m.Type == "pong" || m.Type == "ka")
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m := <-c.msgs:
			if skip(m) {
				continue
			}
			return m, nil
		case <-c.done:
			// drain what arrived before the close
			select {
			case m := <-c.msgs:
				if skip(m) {
					continue
				}
				return m, nil
			default:
			}
			code, reason := c.CloseStatus()
			return Message{}, fmt.Errorf("socket closed (%d %q) while waiting for a message", code, reason)
		case <-timer.C:
			return Message{}, fmt.Errorf("no message within %s", d)
		}
	}
}

// Expect returns the next message, failing unless it has type typ.
func (c *Client) Expect(typ string) Message {
	c.tb.Helper()
	m, err := c.next(DefaultTimeout, typ)
	if err != nil {
		c.tb.Fatal(err)
	}
	if m.Type != typ {
		c.tb.Fatalf("got %s; want a %s message", m, typ)
	}
	return m
}

// ExpectRaw returns the next message of any type, pings and pongs included.
func (c *Client) ExpectRaw(d time.Duration) (Message, error) {
	select {
	case m := <-c.msgs:
		return m, nil
	case <-c.done:
		select {
		case m := <-c.msgs:
			return m, nil
		default:
		}
		code, reason := c.CloseStatus()
		return Message{}, fmt.Errorf("socket closed (%d %q)", code, reason)
	case <-time.After(d):
		return Message{}, fmt.Errorf("no message within %s", d)
	}
}

// Quiet fails the test if a message other than a ping/pong/ka arrives, or
// the socket closes, within d.
func (c *Client) Quiet(d time.Duration) {
	c.tb.Helper()
	m, err := c.NextWithin(d)
	if err == nil {
		c.tb.Fatalf("unexpected message %s", m)
	}
	if c.Closed() {
		code, reason := c.CloseStatus()
		c.tb.Fatalf("socket closed (%d %q); want it open", code, reason)
	}
}

// Closed reports whether the socket has closed.
func (c *Client) Closed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// CloseStatus is the code and reason the server closed with: -1 while
// open, 1006 when the connection dropped without a close frame.
func (c *Client) CloseStatus() (int, string) {
	select {
	case <-c.done:
	default:
		return -1, ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var ce websocket.CloseError
	if errors.As(c.closeErr, &ce) {
		return int(ce.Code), ce.Reason
	}
	return int(websocket.StatusAbnormalClosure), ""
}

// WaitClose waits up to d for the socket to close and returns the close
// code and reason; messages received meanwhile are returned too.
func (c *Client) WaitClose(d time.Duration) (code int, reason string, msgs []Message) {
	c.tb.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case m := <-c.msgs:
			msgs = append(msgs, m)
		case <-c.done:
			for {
				select {
				case m := <-c.msgs:
					msgs = append(msgs, m)
					continue
				default:
				}
				break
			}
			code, reason = c.CloseStatus()
			return code, reason, msgs
		case <-timer.C:
			c.tb.Fatalf("socket still open after %s (received %v)", d, msgs)
			return 0, "", nil
		}
	}
}

// ExpectClose fails unless the socket closes within d with code (and, when
// reason is not empty, that reason), and returns the messages received
// before.
func (c *Client) ExpectClose(d time.Duration, code int, reason string) []Message {
	c.tb.Helper()
	got, why, msgs := c.WaitClose(d)
	if got != code || (reason != "" && why != reason) {
		c.tb.Fatalf("closed with %d %q; want %d %q (messages %v)", got, why, code, reason, msgs)
	}
	return msgs
}

// Close closes the socket normally.
func (c *Client) Close() { _ = c.conn.Close(websocket.StatusNormalClosure, "") }

// Drop closes the TCP connection without a close handshake, as a client
// that vanishes does, and stops reading.
func (c *Client) Drop() {
	c.stopOnce.Do(func() { close(c.stop) })
	_ = c.conn.CloseNow()
}
