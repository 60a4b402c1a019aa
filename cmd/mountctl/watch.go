package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/urfave/cli/v3"
)

const watchQuery = `subscription($uid: ID!) { mountStateChanged(uid: $uid) {
  uid occurredAt states { code value occurredAt }
  mount { associationState mountLocked helmetMounted batteryLevel cpuTemperature } } }`

func watchCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print a mount's state reports live (GraphQL subscription)",
		ArgsUsage: "UID",
		Flags:     []cli.Flag{&cli.IntFlag{Name: "count", Usage: "stop after this many events (default: until interrupted)"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("give one mount uid")
			}
			if err := s.requireToken(); err != nil {
				return err
			}
			uid := cmd.Args().First()
			ready := func() {
				// On stderr, so that --json output stays one event per line.
				fmt.Fprintf(cmd.Root().ErrWriter, "watching mount %s for state reports (Ctrl-C to stop)\n", uid)
			}
			return watch(ctx, s, uid, int(cmd.Int("count")), ready, func(ev json.RawMessage) error {
				return out.print(ev, func(w io.Writer) { fmt.Fprintln(w, describeStateEvent(ev)) })
			})
		},
	}
}

// watch subscribes over graphql-transport-ws, calls ready once the server
// has accepted the connection and the subscription is sent, and each for
// every event.
func watch(ctx context.Context, s *settings, uid string, count int, ready func(), each func(json.RawMessage) error) error {
	wsURL := "ws" + strings.TrimPrefix(strings.TrimRight(s.API, "/"), "http") + "/graphql"
	conn, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: []string{"graphql-transport-ws"}})
	if err != nil {
		return fmt.Errorf("cannot open %s: %w", wsURL, err)
	}
	defer conn.Close(websocket.StatusNormalClosure, "done")
	if err := wsjson.Write(ctx, conn, map[string]any{"type": "connection_init", "payload": map[string]string{"Access-Key": s.Token}}); err != nil {
		return err
	}
	// The protocol wants the ack before a subscribe; a refused token closes
	// the socket instead.
	for acked := false; !acked; {
		var msg struct {
			Type string `json:"type"`
		}
		if err := wsjson.Read(ctx, conn, &msg); err != nil {
			if status := websocket.CloseStatus(err); status != -1 {
				return fmt.Errorf("the server refused the connection (%d): check the token", status)
			}
			return err
		}
		acked = msg.Type == "connection_ack"
	}
	if err := wsjson.Write(ctx, conn, map[string]any{"id": "1", "type": "subscribe",
		"payload": map[string]any{"query": watchQuery, "variables": map[string]string{"uid": uid}}}); err != nil {
		return err
	}
	ready()
	seen := 0
	for {
		var msg struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := wsjson.Read(ctx, conn, &msg); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if status := websocket.CloseStatus(err); status != -1 {
				return fmt.Errorf("the server closed the subscription (%d)", status)
			}
			return err
		}
		switch msg.Type {
		case "ping":
			_ = wsjson.Write(ctx, conn, map[string]string{"type": "pong"})
		case "error":
			return fmt.Errorf("subscription refused: %s", msg.Payload)
		case "complete":
			return nil
		case "next":
			var next struct {
				Data struct {
					Event json.RawMessage `json:"mountStateChanged"`
				} `json:"data"`
				Errors json.RawMessage `json:"errors"`
			}
			if err := json.Unmarshal(msg.Payload, &next); err != nil {
				return err
			}
			if len(next.Errors) > 0 && string(next.Errors) != "null" {
				return fmt.Errorf("subscription error: %s", next.Errors)
			}
			if err := each(next.Data.Event); err != nil {
				return err
			}
			seen++
			if count > 0 && seen >= count {
				return nil
			}
		}
	}
}

func describeStateEvent(raw json.RawMessage) string {
	var ev struct {
		UID        string `json:"uid"`
		OccurredAt string `json:"occurredAt"`
		States     []struct {
			Code, Value string
		} `json:"states"`
		Mount mountView `json:"mount"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return string(raw)
	}
	parts := make([]string, len(ev.States))
	for i, st := range ev.States {
		parts[i] = st.Code + "=" + st.Value
	}
	ev.Mount.UID = ev.UID
	return fmt.Sprintf("%s %s | %s", ev.OccurredAt, strings.Join(parts, " "), ev.Mount.line())
}
