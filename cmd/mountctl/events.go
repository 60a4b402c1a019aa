package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

type eventPage struct {
	Events []json.RawMessage `json:"events"`
	Next   string            `json:"next"`
}

func eventsCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "events",
		Usage: "print the account's event log, resuming after the last event printed",
		Description: "Each run starts after the last event the previous run printed (the cursor is kept in\n" +
			"--cursor-file), so nothing is printed twice and nothing is missed while it is not running.\n" +
			"With --follow it waits for new events until interrupted.",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep waiting for new events"},
			&cli.StringFlag{Name: "after", Usage: "start after this cursor instead of the stored one"},
			&cli.BoolFlag{Name: "from-start", Usage: "start from the oldest retained event, ignoring the stored cursor"},
			&cli.StringFlag{Name: "types", Usage: "comma-separated event types to print"},
			&cli.StringFlag{Name: "mount", Usage: "print the events of this mount only"},
			&cli.StringFlag{Name: "cursor-file", Usage: "where the last cursor is kept (default: in the user's config directory, per API and token account)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := s.requireToken(); err != nil {
				return err
			}
			cursorFile := cmd.String("cursor-file")
			if cursorFile == "" {
				cursorFile = defaultCursorFile(s)
			}
			after := cmd.String("after")
			if after == "" && !cmd.Bool("from-start") && cursorFile != "" {
				if b, err := os.ReadFile(cursorFile); err == nil {
					after = strings.TrimSpace(string(b))
				}
			}
			q := url.Values{}
			if t := cmd.String("types"); t != "" {
				q.Set("types", t)
			}
			if m := cmd.String("mount"); m != "" {
				q.Set("mountUid", m)
			}
			if cmd.Bool("follow") {
				q.Set("wait", "25")
				fmt.Fprintln(cmd.Root().ErrWriter, "following the event log (Ctrl-C to stop)")
			}
			api := s.api()
			stored := after
			var b backoff
			down := newOutage(cmd.Root().ErrWriter)
			for first := true; ; first = false {
				if after != "" {
					q.Set("after", after)
				}
				var page eventPage
				err := api.Do(ctx, "GET", "/events?"+q.Encode(), nil, &page)
				var apiErr *client.Error
				if errors.As(err, &apiErr) && apiErr.Code == string(protocol.CodeCursorExpired) {
					return fmt.Errorf("the log no longer holds the events after the stored cursor (retention passed): run again with --from-start")
				}
				if errors.As(err, &apiErr) && apiErr.Code == string(protocol.CodeValidation) && slices.ContainsFunc(apiErr.Fields,
					func(f client.FieldError) bool { return f.Field == "after" }) {
					return fmt.Errorf("the server does not take the stored cursor (one of an older version, or of another installation): run again with --from-start")
				}
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					// Following, after the first answer, a restart, a stopped
					// replica or the network only delays the next page: it
					// resumes after the last event printed.
					if first || !cmd.Bool("follow") || !retryable(err, api.Renews()) {
						return explain(err, api.Renews())
					}
					down.failed(err)
					if !b.wait(ctx) {
						return nil
					}
					continue
				}
				b.reset()
				down.recovered("resuming after the last event printed")
				for _, ev := range page.Events {
					if err := out.print(ev, func(w io.Writer) { fmt.Fprintln(w, describeEvent(ev)) }); err != nil {
						return err
					}
				}
				if page.Next != after && cursorFile != "" {
					if err := writeCursor(cursorFile, page.Next); err != nil {
						return err
					}
				}
				after = page.Next
				if len(page.Events) == 0 && !cmd.Bool("follow") {
					switch {
					case first && stored != "":
						// Silence would look like a broken command or an empty log.
						fmt.Fprintf(cmd.Root().ErrWriter, "no events after %s; --from-start reads from the beginning\n", stored)
					case first:
						fmt.Fprintln(cmd.Root().ErrWriter, "no events yet")
					}
					return nil
				}
			}
		},
	}
}

// defaultCursorFile names a file per API address and token account, so
// that two accounts or two servers never share a cursor.
func defaultCursorFile(s *settings) string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	token := s.Token
	if token == "" {
		token, _ = s.api().Token() // the renewed tokens are of one account
	}
	sum := sha256.Sum256([]byte(s.API + "\x00" + tokenAccount(token)))
	return filepath.Join(dir, "mountctl", "events-"+hex.EncodeToString(sum[:8]))
}

// tokenAccount reads the account id from a JWT's claims without checking
// it (the server does); "" when the token is not one.
func tokenAccount(token string) string {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		AccountID string `json:"account_id"`
	}
	_ = json.Unmarshal(raw, &claims)
	return claims.AccountID
}

// writeCursor replaces the file whole, so that an interrupted write never
// leaves half a cursor.
func writeCursor(path, cursor string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(cursor+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func describeEvent(raw json.RawMessage) string {
	var ev struct {
		Type       string `json:"type"`
		UID        string `json:"uid"`
		OccurredAt string `json:"occurredAt"`
		States     []struct {
			Code, Value string
		} `json:"states"`
		Command *commandView `json:"command"`
		// Job is an account-level event's (JOB_COMPLETED; no uid).
		Job *jobView `json:"job"`
		// Rollout is a ROLLOUT_* event's (no uid either).
		Rollout *rolloutView `json:"rollout"`
		// Alarm is an ALARM_* event's.
		Alarm *alarmView `json:"alarm"`
	}
	if json.Unmarshal(raw, &ev) != nil {
		return string(raw)
	}
	line := fmt.Sprintf("%s  %-21s %s", ev.OccurredAt, ev.Type, ev.UID)
	for _, st := range ev.States {
		line += fmt.Sprintf(" %s=%s", st.Code, st.Value)
	}
	if c := ev.Command; c != nil {
		line += fmt.Sprintf(" %s %s", c.Code, c.ID)
		if c.Reason != nil && *c.Reason != "" {
			line += fmt.Sprintf(" reason=%q", *c.Reason)
		}
		line += fmt.Sprintf(" verified=%t", c.Verified)
	}
	if j := ev.Job; j != nil {
		line += fmt.Sprintf("job %s %s %s %s", j.ID, j.State, j.Code, j.Counts.text())
	}
	if a := ev.Alarm; a != nil {
		line += fmt.Sprintf(" %s %q %s alarm %s", a.Severity, a.RuleName, a.State, a.ID)
	}
	if r := ev.Rollout; r != nil {
		state := r.State
		if r.PausedReason != nil {
			state += " " + *r.PausedReason
		}
		line += fmt.Sprintf("rollout %s %s %s %s phase %d of %d %s", r.ID, state, r.ModelNumber, r.SoftwareRevision,
			r.OpenPhase+1, len(r.Phases), r.Counts.text())
	}
	return line
}
