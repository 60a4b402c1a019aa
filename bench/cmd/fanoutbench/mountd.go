package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/oauth2"

	"github.com/mountd/mountd/client"
)

// defaultQuery lists states { occurredAt } first: the subscriber finds the
// message key as the first occurredAt of the `next` message (keyMillis).
// It stays away from Mount.nfcTags, the one field that reads the database.
const defaultQuery = `subscription Bench($uid: ID!) {
  mountStateChanged(uid: $uid) {
    states { occurredAt code value receivedAt }
    uid
    occurredAt
    mount { uid name associationState mountLocked helmetMounted batteryLevel cpuTemperature associatedAt }
  }
}`

const audienceScope = "openid sub urn:mountd:iam:org:project:id:mountd:aud"

// mountdClient drives the REST side of a running mountd.
type mountdClient struct {
	base   string
	http   *http.Client
	token  string
	tokens []string // for sockets, socketsPerToken each
	uid    string
}

type credentials struct {
	ClientID     string `json:"clientId"`
	ClientSecret string `json:"clientSecret"`
}

// createAccount runs `mountd [global flags] accounts create --name N --json`
// against the server's database.
func createAccount(ctx context.Context, bin string, global []string, name string) (credentials, error) {
	args := append(append([]string{}, global...), "accounts", "create", "--name", name, "--json")
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return credentials{}, fmt.Errorf("%s accounts create: %w: %s", bin, err, strings.TrimSpace(stderr.String()))
	}
	var c credentials
	if err := json.Unmarshal(out, &c); err != nil || c.ClientID == "" || c.ClientSecret == "" {
		return credentials{}, fmt.Errorf("accounts create printed %q", out)
	}
	return c, nil
}

// socketsPerToken is how many WebSockets mountd lets one access token hold
// open (graph.MaxSocketsPerToken): subscribers share tokens in groups of it,
// as that many browser tabs of one person would.
const socketsPerToken = 10

// fetchTokens asks the embedded identity provider for owner tokens, enough
// for sockets subscribers; calls use the first.
func (m *mountdClient) fetchTokens(ctx context.Context, c credentials, sockets int) error {
	m.tokens = make([]string, (sockets+socketsPerToken-1)/socketsPerToken)
	for i := range m.tokens {
		tok, err := client.ClientCredentials(m.base, c.ClientID, c.ClientSecret, strings.Fields(audienceScope)).
			Token(context.WithValue(ctx, oauth2.HTTPClient, m.http))
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		m.tokens[i] = tok.AccessToken
	}
	m.token = m.tokens[0]
	return nil
}

// call sends a JSON request (path under /api/v1) with the token through the
// shared client and returns the answer.
func (m *mountdClient) call(ctx context.Context, method, path string, body []byte) ([]byte, error) {
	var in any
	if body != nil {
		in = json.RawMessage(body)
	}
	var out json.RawMessage
	err := client.New(m.base, client.StaticToken(m.token), client.Options{HTTPClient: m.http}).Do(ctx, method, path, in, &out)
	return out, err
}

// createMount requests and confirms the association of m.uid.
func (m *mountdClient) createMount(ctx context.Context) error {
	body, _ := json.Marshal(map[string]string{"uid": m.uid})
	if _, err := m.call(ctx, http.MethodPost, "/mounts", body); err != nil {
		return err
	}
	_, err := m.call(ctx, http.MethodPost, "/mounts/"+url.PathEscape(m.uid)+"/confirm-association", nil)
	return err
}

// report posts one BATTERY_LEVEL entry whose occurredAt is the key ms. It
// returns when the response body has been read.
func (m *mountdClient) report(ctx context.Context, ms int64) error {
	body := fmt.Appendf(nil, `{"states":[{"code":"BATTERY_LEVEL","value":"%d","occurredAt":"%s"}]}`, ms%101, keyAt(ms))
	_, err := m.call(ctx, http.MethodPost, "/mounts/"+url.PathEscape(m.uid)+"/states", body)
	return err
}

// wsSystem is the mountd side: N graphql-transport-ws subscriptions to
// mountStateChanged(uid), one socket each, published to by POST /states.
type wsSystem struct {
	api         *mountdClient
	url         string
	query       string
	concurrency int
	// distinct gives every subscriber its own operation text (a comment);
	// distinctSelections its own selection, so that the server cannot
	// share one execution between them.
	distinct, distinctSelections bool
	dialed                       atomic.Int64
	// sockets counts dials, to hand each group of socketsPerToken a token.
	sockets atomic.Int64

	dialer  *http.Client
	conns   []*websocket.Conn
	readers sync.WaitGroup
	closing atomic.Bool
	// ended counts subscriptions the server ended (error, complete, close).
	ended   atomic.Int64
	lastErr atomic.Value
}

func newWSSystem(api *mountdClient, query string, concurrency int, distinct, distinctSelections bool) *wsSystem {
	u := "ws" + strings.TrimPrefix(api.base, "http") + "/graphql"
	return &wsSystem{api: api, url: u, query: query, concurrency: concurrency, distinct: distinct, distinctSelections: distinctSelections,
		dialer: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1}}}
}

func (w *wsSystem) Name() string { return "mountd" }

// dial opens one socket and starts the subscription: connection_init with
// the token, connection_ack, subscribe.
func (w *wsSystem) dial(ctx context.Context) (*websocket.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, w.url, &websocket.DialOptions{
		HTTPClient: w.dialer, Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*websocket.Conn, error) {
		c.CloseNow()
		return nil, err
	}
	if p := c.Subprotocol(); p != "graphql-transport-ws" {
		return fail(fmt.Errorf("server chose subprotocol %q", p))
	}
	c.SetReadLimit(1 << 20)
	token := w.api.tokens[int(w.sockets.Add(1)-1)/socketsPerToken%len(w.api.tokens)]
	init, _ := json.Marshal(map[string]any{"type": "connection_init", "payload": map[string]string{"Access-Key": token}})
	if err := c.Write(ctx, websocket.MessageText, init); err != nil {
		return fail(err)
	}
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return fail(fmt.Errorf("waiting for connection_ack: %w", err))
		}
		switch t := msgType(data); t {
		case "connection_ack":
			query := w.query
			switch {
			case w.distinctSelections:
				query = withOwnField(query, w.dialed.Add(1))
			case w.distinct:
				query += fmt.Sprintf("\n# subscriber %d", w.dialed.Add(1))
			}
			sub, _ := json.Marshal(map[string]any{"id": "1", "type": "subscribe",
				"payload": map[string]any{"query": query, "variables": map[string]string{"uid": w.api.uid}}})
			if err := c.Write(ctx, websocket.MessageText, sub); err != nil {
				return fail(err)
			}
			return c, nil
		case "ping":
			if err := c.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`)); err != nil {
				return fail(err)
			}
		default:
			return fail(fmt.Errorf("unexpected %q before connection_ack: %s", t, data))
		}
	}
}

// withOwnField adds a field of subscriber n's own to the selection of
// mountStateChanged, first so that states[0].occurredAt stays the first
// occurredAt of the message.
func withOwnField(query string, n int64) string {
	i := strings.Index(query, "mountStateChanged")
	if i < 0 {
		return query
	}
	j := strings.Index(query[i:], "{")
	if j < 0 {
		return query
	}
	at := i + j + 1
	return query[:at] + fmt.Sprintf(" s%d: __typename", n) + query[at:]
}

// msgType is the graphql-transport-ws message type. gqlgen writes
// {"payload":...,"id":...,"type":...}, so the last "type" is the envelope's.
func msgType(data []byte) string {
	i := bytes.LastIndex(data, []byte(`"type":"`))
	if i < 0 {
		return ""
	}
	rest := data[i+len(`"type":"`):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}

// read delivers `next` messages of subscriber sub and answers pings.
func (w *wsSystem) read(ctx context.Context, sub int, c *websocket.Conn, deliver func(int, []byte, int64), now func() int64) {
	defer w.readers.Done()
	for {
		_, data, err := c.Read(ctx)
		at := now()
		if err != nil {
			if !w.closing.Load() {
				w.ended.Add(1)
				w.lastErr.Store(fmt.Sprintf("subscriber %d: %v", sub, err))
			}
			return
		}
		switch msgType(data) {
		case "next":
			deliver(sub, data, at)
		case "ping":
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
		case "pong":
		default:
			w.ended.Add(1)
			w.lastErr.Store(fmt.Sprintf("subscriber %d: %s", sub, data))
		}
	}
}

func (w *wsSystem) Connect(ctx context.Context, n int, deliver func(int, []byte, int64), now func() int64) error {
	w.conns = make([]*websocket.Conn, n)
	err := parallel(ctx, n, w.concurrency, func(ctx context.Context, i int) error {
		c, err := w.dial(ctx)
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		w.conns[i] = c
		w.readers.Add(1)
		go w.read(context.WithoutCancel(ctx), i, c, deliver, now)
		return nil
	})
	return err
}

func (w *wsSystem) Publish(ctx context.Context, ms int64) error { return w.api.report(ctx, ms) }

func (w *wsSystem) Ended() int { return int(w.ended.Load()) }

func (w *wsSystem) LastError() string {
	s, _ := w.lastErr.Load().(string)
	return s
}

// Close ends every subscription and closes the sockets normally.
func (w *wsSystem) Close() {
	w.closing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = parallel(ctx, len(w.conns), 64, func(ctx context.Context, i int) error {
		if c := w.conns[i]; c != nil {
			_ = c.Write(ctx, websocket.MessageText, []byte(`{"id":"1","type":"complete"}`))
			if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
				c.CloseNow()
			}
		}
		return nil
	})
	done := make(chan struct{})
	go func() { w.readers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// captureTemplate opens one subscription, posts a report with key ms and
// returns the `next` message it got: the payload the brokers send, and a
// warm-up of the server's code paths before its memory is measured.
func (w *wsSystem) captureTemplate(ctx context.Context, ms int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := w.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		_ = c.Write(ctx, websocket.MessageText, []byte(`{"id":"1","type":"complete"}`))
		_ = c.Close(websocket.StatusNormalClosure, "")
	}()
	const tries = 50
	got := make(chan []byte, 1)
	go func() {
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			switch msgType(data) {
			case "next":
				if k, ok := keyMillis(data); ok && k >= ms && k < ms+tries {
					got <- data
					return
				}
			case "ping":
				_ = c.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
			case "error", "complete":
				return
			}
		}
	}()
	// The subscription is live once the server ran the resolver: repeat
	// the report (new keys) until one arrives.
	for k := ms; k < ms+tries; k++ {
		if err := w.api.report(ctx, k); err != nil {
			return nil, err
		}
		select {
		case data := <-got:
			return data, nil
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, errors.New("no event arrived for the warm-up subscription in 30s")
		}
	}
	return nil, errors.New("the warm-up subscription got no event")
}
