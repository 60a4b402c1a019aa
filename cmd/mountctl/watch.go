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

// watchQuery follows every event of one mount; watch prints its state
// reports, its commands' receipts (docs/api.md, "Command lifecycle") and
// its presence turning OFFLINE and ONLINE, each with when it was last seen.
const watchQuery = `subscription($uids: [ID!], $after: ID) { mountEvents(uids: $uids, after: $after) {
  id type uid occurredAt states { code value occurredAt verified }
  command { id code status statusAt reason verified }
  mount { associationState mountLocked helmetMounted batteryLevel cpuTemperature presence lastSeenAt name } } }`

// watchedTypes are the events watch prints; it passes over the others.
var watchedTypes = map[string]bool{"STATES_REPORTED": true, "COMMAND_EXECUTED": true, "COMMAND_REFUSED": true, "COMMAND_UNCONFIRMED": true,
	"MOUNT_OFFLINE": true, "MOUNT_ONLINE": true}

func watchCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "watch",
		Usage:     "print a mount's state reports, command receipts and presence (ONLINE, OFFLINE, last seen) live (GraphQL subscription)",
		ArgsUsage: "UID",
		Flags:     []cli.Flag{&cli.IntFlag{Name: "count", Usage: "stop after this many events", DefaultText: "until interrupted"}},
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
				fmt.Fprintf(cmd.Root().ErrWriter, "watching mount %s for state reports, receipts and presence (Ctrl-C to stop)\n", uid)
			}
			return watch(ctx, s, uid, int(cmd.Int("count")), ready, func(ev json.RawMessage) error {
				return out.print(ev, func(w io.Writer) { fmt.Fprintln(w, describeStateEvent(ev)) })
			}, newOutage(cmd.Root().ErrWriter))
		},
	}
}

// watch subscribes to a mount's events, calls ready once the subscription
// is sent and each for every state report and receipt (count counts those). Once subscribed, it
// reconnects when the connection ends (a restart, a stopped replica, an
// expired token it can renew), resuming after the last event it passed to
// each, so that none is lost or repeated; down prints one line per outage.
func watch(ctx context.Context, s *settings, uid string, count int, ready func(), each func(json.RawMessage) error, down *outage) error {
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
		vars := map[string]any{"uids": []string{uid}}
		if after != "" {
			vars["after"] = after
		}
		err := api.Subscribe(ctx, watchQuery, vars, func() {
			if !subscribed && ready != nil {
				ready()
			} else if subscribed {
				down.recovered("resuming after the last event printed")
			}
			subscribed, refusedRun = true, 0
			b.reset()
		}, func(data json.RawMessage) error {
			var next struct {
				Event json.RawMessage `json:"mountEvents"`
			}
			if err := json.Unmarshal(data, &next); err != nil {
				return err
			}
			var ev struct {
				ID   string `json:"id"`
				Type string `json:"type"`
			}
			_ = json.Unmarshal(next.Event, &ev)
			if !watchedTypes[ev.Type] {
				if ev.ID != "" {
					after = ev.ID
				}
				return nil
			}
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
		down.failed(err)
		if !b.wait(ctx) {
			return nil
		}
	}
}

// describeStateEvent prints a state report as one line (marked
// "[unverified]" when the mount did not sign it) with the mount's values,
// presence and last seen; a receipt: the command's new status, id, code
// and reason; or the mount turning OFFLINE or ONLINE and when it was last seen.
func describeStateEvent(raw json.RawMessage) string {
	var ev struct {
		Type       string `json:"type"`
		UID        string `json:"uid"`
		OccurredAt string `json:"occurredAt"`
		States     []struct {
			Code, Value string
			Verified    bool
		} `json:"states"`
		Command *commandView `json:"command"`
		Mount   mountView    `json:"mount"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return string(raw)
	}
	if ev.Command != nil {
		return fmt.Sprintf("%s %s %s", ev.OccurredAt, ev.UID, ev.Command.line())
	}
	if presence, ok := strings.CutPrefix(ev.Type, "MOUNT_"); ok && (presence == "OFFLINE" || presence == "ONLINE") {
		seen := "never"
		if ev.Mount.LastSeenAt != nil {
			seen = *ev.Mount.LastSeenAt
		}
		return fmt.Sprintf("%s %s %s, last seen %s", ev.OccurredAt, ev.UID, presence, seen)
	}
	parts := make([]string, len(ev.States))
	unverified := false
	for i, st := range ev.States {
		parts[i] = st.Code + "=" + st.Value
		unverified = unverified || !st.Verified
	}
	if unverified {
		parts = append(parts, "[unverified]")
	}
	ev.Mount.UID = ev.UID
	return fmt.Sprintf("%s %s | %s", ev.OccurredAt, strings.Join(parts, " "), ev.Mount.line())
}
