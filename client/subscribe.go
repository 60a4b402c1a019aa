package client

import (
	"context"
	"encoding/json"
	"errors"
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
	acked := false
	read := func() (message, error) {
		var m message
		if err := wsjson.Read(ctx, conn, &m); err != nil {
			if status := websocket.CloseStatus(err); status != -1 {
				var ce websocket.CloseError
				errors.As(err, &ce)
				if status == 4401 || status == 4403 {
					// The token expired or was refused: a renewing source
					// gives a fresh one on the next Subscribe.
					c.tokens.refused()
				}
				return m, &CloseError{Code: int(status), Reason: ce.Reason, Acked: acked}
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
			return err
		}
		if m.Type == "connection_ack" {
			acked = true
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
			return refused(m.Payload)
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
				return refused(res.Errors)
			}
			if err := next(res.Data); err != nil {
				return err
			}
		}
	}
}

// CloseError is the server closing a subscription's socket.
type CloseError struct {
	Code   int
	Reason string
	// Acked: the server had accepted the connection (a token that expired
	// since, rather than one refused at the start).
	Acked bool
}

func (e *CloseError) Error() string {
	switch e.Code {
	case 1001:
		return "the server is going away (restart or shutdown)"
	case 4401, 4403:
		if e.Acked {
			return "the token expired"
		}
		return "the server refused the token (expired, revoked or of another server)"
	case 1013:
		return "the server closed the connection: this client read too slowly"
	}
	if e.Reason != "" {
		return fmt.Sprintf("the server closed the connection: %s (%d)", e.Reason, e.Code)
	}
	return fmt.Sprintf("the server closed the connection (%d)", e.Code)
}

// RefusedError is a subscription the server refused or ended with errors,
// e.g. a mount that does not exist.
type RefusedError struct {
	Code    string // extensions.code, e.g. NOT_FOUND
	Message string
}

func (e *RefusedError) Error() string {
	if e.Message == "" {
		return "subscription refused: " + e.Code
	}
	return e.Message
}

// refused reads GraphQL errors ([{message, extensions: {code}}]) into a
// RefusedError, so that the caller prints the message, not the JSON.
func refused(raw json.RawMessage) error {
	var errs []struct {
		Message    string `json:"message"`
		Extensions struct {
			Code string `json:"code"`
		} `json:"extensions"`
	}
	if json.Unmarshal(raw, &errs) != nil || len(errs) == 0 {
		return &RefusedError{Message: "subscription refused: " + string(raw)}
	}
	return &RefusedError{Code: errs[0].Extensions.Code, Message: errs[0].Message}
}
