package client

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
)

// Subscribe runs a GraphQL subscription over graphql-transport-ws: it
// sends the token in connection_init, waits for the server's ack, sends the
// subscription, calls ready (when not nil) and then next with each result's
// data until ctx ends (nil), the server completes the subscription (nil),
// refuses it, or next returns an error.
func (c *Client) Subscribe(ctx context.Context, query string, vars map[string]any, ready func(), next func(data json.RawMessage) error) error {
	tok, err := c.tokens.token()
	if err != nil {
		return err
	}
	wsURL := "ws" + strings.TrimPrefix(c.base, "http") + "/graphql"
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}, HTTPClient: c.http})
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", wsURL, err)
	}
	defer conn.Close(websocket.StatusNormalClosure, "done")
	conn.SetReadLimit(maxAnswer)
	type message struct {
		ID      string          `json:"id,omitempty"`
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}
	read := func() (message, error) {
		var m message
		if err := wsjson.Read(ctx, conn, &m); err != nil {
			if status := websocket.CloseStatus(err); status != -1 {
				return m, fmt.Errorf("the server closed the connection (%d)", status)
			}
			return m, err
		}
		return m, nil
	}
	if err := wsjson.Write(ctx, conn, map[string]any{"type": "connection_init", "payload": map[string]string{"Access-Key": tok}}); err != nil {
		return err
	}
	// The protocol wants the ack before a subscribe.
	for {
		m, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("%w: check the token", err)
		}
		if m.Type == "connection_ack" {
			break
		}
	}
	payload := map[string]any{"query": query}
	if vars != nil {
		payload["variables"] = vars
	}
	if err := wsjson.Write(ctx, conn, map[string]any{"id": "1", "type": "subscribe", "payload": payload}); err != nil {
		return err
	}
	if ready != nil {
		ready()
	}
	for {
		m, err := read()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		switch m.Type {
		case "ping":
			_ = wsjson.Write(ctx, conn, map[string]string{"type": "pong"})
		case "error":
			return fmt.Errorf("subscription refused: %s", m.Payload)
		case "complete":
			return nil
		case "next":
			var res struct {
				Data   json.RawMessage `json:"data"`
				Errors json.RawMessage `json:"errors"`
			}
			if err := json.Unmarshal(m.Payload, &res); err != nil {
				return err
			}
			if len(res.Errors) > 0 && string(res.Errors) != "null" {
				return fmt.Errorf("subscription error: %s", res.Errors)
			}
			if err := next(res.Data); err != nil {
				return err
			}
		}
	}
}
