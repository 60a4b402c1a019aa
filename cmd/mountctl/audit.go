package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

type auditEntry struct {
	ID    string `json:"id"`
	At    string `json:"at"`
	Actor struct {
		Type string `json:"type"`
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"actor"`
	Action        string         `json:"action"`
	Target        string         `json:"target"`
	SourceAddress string         `json:"sourceAddress"`
	Details       map[string]any `json:"details"`
}

type auditPage struct {
	Entries []json.RawMessage `json:"entries"`
	Next    string            `json:"next"`
}

// auditPoll is how often --follow asks for new entries: the audit log has
// no long poll, and changes are made by people, a few a minute.
const auditPoll = 5 * time.Second

func auditCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "print the account's audit log (owners): who changed what, when and from where",
		Description: "Prints every entry after --after (from the oldest retained without it), oldest first.\n" +
			"With --follow it then asks for new entries every few seconds until interrupted.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "actor", Usage: "only the entries of this actor id (client id, user id, operating-system user)"},
			&cli.StringFlag{Name: "action", Usage: "only this action (mount.abandon, webhook.create, …)"},
			&cli.StringFlag{Name: "target", Usage: "only this target, <kind>:<id> (mount:M-1, webhook:wh_…)"},
			&cli.StringFlag{Name: "after", Usage: "start after this entry's id"},
			&cli.IntFlag{Name: "limit", Value: 100, Usage: "entries per request (1 to 1000)"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep printing new entries"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if err := s.requireToken(); err != nil {
				return err
			}
			q := url.Values{"limit": {fmt.Sprint(cmd.Int("limit"))}}
			for _, name := range []string{"actor", "action", "target"} {
				if cmd.IsSet(name) {
					q.Set(name, cmd.String(name))
				}
			}
			after := cmd.String("after")
			if cmd.Bool("follow") {
				fmt.Fprintln(cmd.Root().ErrWriter, "following the audit log (Ctrl-C to stop)")
			}
			api := s.api()
			var b backoff
			down := newOutage(cmd.Root().ErrWriter)
			for first := true; ; first = false {
				if after != "" {
					q.Set("after", after)
				}
				var page auditPage
				err := api.Do(ctx, "GET", "/audit?"+q.Encode(), nil, &page)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					var apiErr *client.Error
					if errors.As(err, &apiErr) && apiErr.Code == string(protocol.CodeForbidden) {
						return errors.New("the audit log is for owners: this token's role does not allow it")
					}
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
				down.recovered("resuming after the last entry printed")
				for _, raw := range page.Entries {
					if err := out.print(raw, func(w io.Writer) { fmt.Fprintln(w, describeAudit(raw)) }); err != nil {
						return err
					}
				}
				after = page.Next
				if len(page.Entries) == cmd.Int("limit") {
					continue // more follow at once
				}
				if !cmd.Bool("follow") {
					if first && len(page.Entries) == 0 {
						fmt.Fprintln(cmd.Root().ErrWriter, "no audit entries")
					}
					return nil
				}
				t := time.NewTimer(auditPoll)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		},
	}
}

// describeAudit is one entry on one line: when, who, what, where from and
// the details as key=value.
func describeAudit(raw json.RawMessage) string {
	var e auditEntry
	if json.Unmarshal(raw, &e) != nil {
		return string(raw)
	}
	keys := make([]string, 0, len(e.Details))
	for k := range e.Details {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var details []string
	for _, k := range keys {
		v, _ := json.Marshal(e.Details[k])
		details = append(details, k+"="+string(v))
	}
	source := e.SourceAddress
	if source == "" {
		source = "-"
	}
	return strings.TrimSpace(fmt.Sprintf("%s  %-26s %-30s by %s %s from %s  %s", e.At, e.Action, e.Target,
		e.Actor.Type, e.Actor.Name, source, strings.Join(details, " ")))
}
