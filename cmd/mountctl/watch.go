package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
)

const watchQuery = `subscription($uid: ID!, $after: ID) { mountStateChanged(uid: $uid, after: $after) {
  id uid occurredAt states { code value occurredAt }
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
			}, func(format string, args ...any) {
				fmt.Fprintf(cmd.Root().ErrWriter, "mountctl: "+format+"\n", args...)
			})
		},
	}
}

// watch subscribes to a mount's state reports, calls ready once the
// subscription is sent and each for every event. Once subscribed, it
// reconnects when the connection ends (a restart, a stopped replica, an
// expired token it can renew), resuming after the last event it passed to
// each, so that none is lost or repeated; logf says why it reconnects.
func watch(ctx context.Context, s *settings, uid string, count int, ready func(), each func(json.RawMessage) error, logf func(string, ...any)) error {
	seen := 0
	errDone := errors.New("done")
	api := s.api()
	var (
		after      string
		subscribed bool
		refusedRun int // connections refused at the start in a row
		b          backoff
	)
	for {
		vars := map[string]any{"uid": uid}
		if after != "" {
			vars["after"] = after
		}
		err := api.Subscribe(ctx, watchQuery, vars, func() {
			if !subscribed && ready != nil {
				ready()
			} else if subscribed {
				logf("reconnected, resuming after the last report printed")
			}
			subscribed, refusedRun = true, 0
			b.reset()
		}, func(data json.RawMessage) error {
			var next struct {
				Event json.RawMessage `json:"mountStateChanged"`
			}
			if err := json.Unmarshal(data, &next); err != nil {
				return err
			}
			var ev struct {
				ID string `json:"id"`
			}
			_ = json.Unmarshal(next.Event, &ev)
			if err := each(next.Event); err != nil {
				return err
			}
			if ev.ID != "" {
				after = ev.ID
			}
			if seen++; count > 0 && seen >= count {
				return errDone
			}
			return nil
		})
		if errors.Is(err, errDone) || ctx.Err() != nil || err == nil {
			return nil
		}
		var closed *client.CloseError
		if errors.As(err, &closed) && !closed.Acked && (closed.Code == 4401 || closed.Code == 4403) {
			refusedRun++
		}
		// Before the first subscription, an error is the command's (a wrong
		// address or token); a fresh token refused twice will not do better.
		if !subscribed || refusedRun > 1 || !retryable(err, api.Renews()) {
			return explain(err, api.Renews())
		}
		logf("%v; reconnecting", err)
		if !b.wait(ctx) {
			return nil
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
