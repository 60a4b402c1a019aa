package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
)

// alarmView prints an alarm on one line.
type alarmView client.Alarm

func (a alarmView) line() string {
	line := fmt.Sprintf("%s  %-8s %-7s %s  %q  raised %s", a.ID, a.Severity, a.State, a.UID, a.RuleName, a.RaisedAt)
	if a.ClearedAt != nil {
		line += "  cleared " + *a.ClearedAt
	}
	if a.AcknowledgedAt != nil {
		by := ""
		switch {
		case a.AcknowledgedByName != nil && *a.AcknowledgedByName != "":
			by = fmt.Sprintf(" by %q", *a.AcknowledgedByName)
		case a.AcknowledgedBy != nil:
			by = " by " + *a.AcknowledgedBy
		}
		line += "  acknowledged " + *a.AcknowledgedAt + by
	}
	if len(a.Values) > 0 {
		codes := make([]string, 0, len(a.Values))
		for c := range a.Values {
			codes = append(codes, c)
		}
		slices.Sort(codes)
		vals := make([]string, len(codes))
		for i, c := range codes {
			vals[i] = c + "=" + a.Values[c]
		}
		line += "  " + strings.Join(vals, " ")
	}
	return line
}

// ruleView prints an alarm rule on one line.
type ruleView client.AlarmRule

func (r ruleView) line() string {
	mounts := "every mount"
	if len(r.MountUIDs) > 0 {
		mounts = strings.Join(r.MountUIDs, ",")
	}
	state := "enabled"
	if !r.Enabled {
		state = "disabled"
	}
	return fmt.Sprintf("%s  %-8s %q  %s for %s, %s, %s", r.ID, r.Severity, r.Name, conditionsText(r.Conditions),
		time.Duration(r.ForSeconds)*time.Second, mounts, state)
}

func conditionsText(cs []client.AlarmCondition) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		if c.Presence != "" {
			parts[i] = "presence=" + c.Presence
		} else {
			parts[i] = c.Code + c.Op + c.Value
		}
	}
	return strings.Join(parts, " AND ")
}

// conditionOps are the comparisons a condition may use, the two-character
// ones first so that "<=" is not read as "<".
var conditionOps = []string{"<=", ">=", "==", "!=", "<", ">", "="}

// parseCondition reads a --condition: CODE<OP>VALUE (BATTERY_LEVEL<20,
// MOUNT_LOCKED==0; a lone "=" means "==") or presence=OFFLINE.
func parseCondition(s string) (client.AlarmCondition, error) {
	s = strings.TrimSpace(s)
	if name, value, ok := strings.Cut(s, "="); ok && strings.EqualFold(strings.TrimSpace(name), "presence") {
		return client.AlarmCondition{Presence: strings.ToUpper(strings.TrimSpace(strings.TrimPrefix(value, "=")))}, nil
	}
	at, op := -1, ""
	for _, o := range conditionOps {
		if i := strings.Index(s, o); i > 0 && (at < 0 || i < at) {
			at, op = i, o
		}
	}
	if at < 0 {
		return client.AlarmCondition{}, fmt.Errorf("condition %q: write CODE<OP>VALUE (e.g. BATTERY_LEVEL<20) or presence=OFFLINE", s)
	}
	value := strings.TrimSpace(s[at+len(op):])
	if op == "=" {
		op = "=="
	}
	return client.AlarmCondition{Code: strings.ToUpper(strings.TrimSpace(s[:at])), Op: op, Value: value}, nil
}

func alarmsCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "alarms",
		Usage: "alarms of the account's mounts: list, ack",
		Commands: []*cli.Command{
			{
				Name: "list", Usage: "list alarms, newest first (owners and maintainers)",
				Flags: append([]cli.Flag{
					&cli.StringFlag{Name: "state", Usage: "ACTIVE or CLEARED"},
					&cli.StringFlag{Name: "severity", Usage: "INFO, WARNING or CRITICAL"},
					&cli.StringFlag{Name: "mount", Usage: "only this mount's alarms"},
					&cli.StringFlag{Name: "rule", Usage: "only this rule's alarms (its id)"},
				}, pageFlags...),
				Action: func(ctx context.Context, cmd *cli.Command) error {
					q := url.Values{"currentPage": {fmt.Sprint(cmd.Int("page"))}, "pageSize": {fmt.Sprint(cmd.Int("page-size"))}}
					for flag, param := range map[string]string{"state": "state", "severity": "severity", "mount": "mountUid", "rule": "ruleId"} {
						if cmd.IsSet(flag) {
							q.Set(param, cmd.String(flag))
						}
					}
					var page struct {
						Alarms     []alarmView    `json:"alarms"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/alarms?"+q.Encode(), &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, a := range page.Alarms {
							fmt.Fprintln(o, a.line())
						}
						pageFooter(o, page.Pagination, "", "alarms", "")
					})
				},
			},
			{
				Name: "ack", Usage: "acknowledge an alarm (owners; it stays ACTIVE until its condition ends)", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() != 1 {
						return fmt.Errorf("give the alarm's id")
					}
					var a alarmView
					if err := s.call(ctx, http.MethodPost, "/alarms/"+url.PathEscape(cmd.Args().First())+"/acknowledge", nil, &a); err != nil {
						return err
					}
					return out.print(a, func(o io.Writer) { fmt.Fprintln(o, a.line()) })
				},
			},
		},
	}
}

func alarmRulesCommand(s *settings, out *printer) *cli.Command {
	ruleID := func(cmd *cli.Command) (string, error) {
		if cmd.Args().Len() != 1 {
			return "", fmt.Errorf("give the rule's id")
		}
		return cmd.Args().First(), nil
	}
	change := func(name, usage string, body map[string]any) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "ID",
			Action: func(ctx context.Context, cmd *cli.Command) error {
				id, err := ruleID(cmd)
				if err != nil {
					return err
				}
				var r ruleView
				if err := s.call(ctx, http.MethodPatch, "/alarm-rules/"+url.PathEscape(id), body, &r); err != nil {
					return err
				}
				return out.print(r, func(o io.Writer) { fmt.Fprintln(o, r.line()) })
			},
		}
	}
	return &cli.Command{
		Name:  "alarm-rules",
		Usage: "alarm rules of the account (owners): create, list, suggested, disable, enable, delete",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "raise an alarm on a mount whose conditions all hold for --for",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true},
					&cli.StringFlag{Name: "severity", Value: "WARNING", Usage: "INFO, WARNING or CRITICAL"},
					&cli.StringSliceFlag{Name: "condition", Required: true, Usage: "CODE<OP>VALUE (BATTERY_LEVEL<20, CPU_TEMPERATURE>=70, MOUNT_LOCKED==0) or presence=OFFLINE; repeat for more (all must hold)"},
					&cli.DurationFlag{Name: "for", Usage: "how long the conditions must hold (whole seconds, at most 24h)"},
					&cli.StringSliceFlag{Name: "mount", Usage: "only this mount (repeatable; default: every mount)"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					conds := []client.AlarmCondition{}
					for _, c := range cmd.StringSlice("condition") {
						cond, err := parseCondition(c)
						if err != nil {
							return err
						}
						conds = append(conds, cond)
					}
					d := cmd.Duration("for")
					if d%time.Second != 0 {
						return fmt.Errorf("--for %s: give whole seconds", d)
					}
					mounts := cmd.StringSlice("mount")
					if mounts == nil {
						mounts = []string{}
					}
					body := map[string]any{"name": cmd.String("name"), "severity": strings.ToUpper(cmd.String("severity")),
						"conditions": conds, "forSeconds": int(d / time.Second), "mountUids": mounts}
					var r ruleView
					if err := s.call(ctx, http.MethodPost, "/alarm-rules", body, &r); err != nil {
						return err
					}
					return out.print(r, func(o io.Writer) { fmt.Fprintln(o, r.line()) })
				},
			},
			{
				Name: "list", Usage: "list alarm rules", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					var page struct {
						Rules      []ruleView     `json:"rules"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/alarm-rules?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, r := range page.Rules {
							fmt.Fprintln(o, r.line())
						}
						pageFooter(o, page.Pagination, "", "rules", "")
					})
				},
			},
			{
				Name: "suggested", Usage: "the starting rules mountd suggests (create them with alarm-rules create)",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					var res struct {
						Rules []ruleView `json:"rules"`
					}
					if err := s.call(ctx, http.MethodGet, "/alarm-rules/suggested", nil, &res); err != nil {
						return err
					}
					return out.print(res, func(o io.Writer) {
						for _, r := range res.Rules {
							fmt.Fprintf(o, "%-8s %q  %s for %s\n", r.Severity, r.Name, conditionsText(r.Conditions), time.Duration(r.ForSeconds)*time.Second)
						}
					})
				},
			},
			change("disable", "stop evaluating the rule (its open alarms clear)", map[string]any{"enabled": false}),
			change("enable", "evaluate the rule again, afresh", map[string]any{"enabled": true}),
			{
				Name: "delete", Usage: "delete the rule (its open alarms clear)", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := ruleID(cmd)
					if err != nil {
						return err
					}
					if err := s.call(ctx, http.MethodDelete, "/alarm-rules/"+url.PathEscape(id), nil, nil); err != nil {
						return err
					}
					return out.print(map[string]any{"id": id, "deleted": true}, func(o io.Writer) { fmt.Fprintf(o, "alarm rule %s deleted\n", id) })
				},
			},
		},
	}
}
