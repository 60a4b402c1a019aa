package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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

// watch subscribes to a mount's state reports, calls ready once the
// subscription is sent and each for every event.
func watch(ctx context.Context, s *settings, uid string, count int, ready func(), each func(json.RawMessage) error) error {
	seen := 0
	errDone := errors.New("done")
	err := s.api().Subscribe(ctx, watchQuery, map[string]any{"uid": uid}, ready, func(data json.RawMessage) error {
		var next struct {
			Event json.RawMessage `json:"mountStateChanged"`
		}
		if err := json.Unmarshal(data, &next); err != nil {
			return err
		}
		if err := each(next.Event); err != nil {
			return err
		}
		if seen++; count > 0 && seen >= count {
			return errDone
		}
		return nil
	})
	if errors.Is(err, errDone) {
		return nil
	}
	return err
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
