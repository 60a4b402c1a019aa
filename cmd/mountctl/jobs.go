package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/protocol"
)

// jobCounts and jobView are a Job as the API shows it (docs/api.md, "Jobs").
type jobCounts struct {
	Pending     int `json:"pending"`
	Issued      int `json:"issued"`
	Executed    int `json:"executed"`
	Refused     int `json:"refused"`
	Unconfirmed int `json:"unconfirmed"`
}

type jobView struct {
	ID          string            `json:"id"`
	Code        string            `json:"code"`
	Params      map[string]string `json:"params"`
	Filter      string            `json:"filter"`
	Description string            `json:"description"`
	State       string            `json:"state"`
	CreatedAt   string            `json:"createdAt"`
	ExpiresAt   string            `json:"expiresAt"`
	Targets     int               `json:"targets"`
	Counts      jobCounts         `json:"counts"`
}

func (j jobView) line() string {
	names := make([]string, 0, len(j.Params))
	for name := range j.Params {
		names = append(names, name)
	}
	slices.Sort(names)
	command := j.Code
	for _, name := range names {
		command += " " + name + "=" + j.Params[name]
	}
	line := fmt.Sprintf("%s  %-9s %s  %d targets: %s  created %s  expires %s", j.ID, j.State, command, j.Targets,
		j.Counts.text(), j.CreatedAt, j.ExpiresAt)
	if j.Filter != "" {
		line += fmt.Sprintf("  filter %q", j.Filter)
	}
	if j.Description != "" {
		line += fmt.Sprintf("  %q", j.Description)
	}
	return line
}

func (c jobCounts) text() string {
	return fmt.Sprintf("pending=%d issued=%d executed=%d refused=%d unconfirmed=%d", c.Pending, c.Issued, c.Executed, c.Refused, c.Unconfirmed)
}

// jobTargetView is a job at one of its mounts.
type jobTargetView struct {
	UID       string  `json:"uid"`
	Status    string  `json:"status"`
	CommandID *string `json:"commandId"`
}

func (t jobTargetView) line() string {
	cmd := "-"
	if t.CommandID != nil {
		cmd = *t.CommandID
	}
	return fmt.Sprintf("%-20s %-11s %s", t.UID, t.Status, cmd)
}

func jobCodeNames() []string {
	var names []string
	for _, c := range protocol.JobCommandCodes() {
		names = append(names, string(c))
	}
	return names
}

// jobCommandsHelp lists each command a job sends with its parameters and
// their values, from protocol's catalogue (the one the server checks against).
func jobCommandsHelp() string {
	var b strings.Builder
	b.WriteString("The commands a job sends and their parameters (--param NAME=VALUE, each required):\n")
	for _, code := range protocol.JobCommandCodes() {
		rules, _ := protocol.CommandParamRules(code)
		names := slices.Sorted(maps.Keys(rules))
		params := make([]string, len(names))
		for i, name := range names {
			if r := rules[name]; r.Values != nil {
				params[i] = name + "=" + strings.Join(r.Values, "|")
			} else {
				params[i] = name + "=<" + r.Text + ">"
			}
		}
		if len(params) == 0 {
			params = []string{"(no parameters)"}
		}
		fmt.Fprintf(&b, "  %-16s %s\n", code, strings.Join(params, " "))
	}
	return strings.TrimRight(b.String(), "\n")
}

// parseParams reads --param NAME=VALUE flags; a name given twice is an
// error rather than a silent choice.
func parseParams(flags []string) (map[string]string, error) {
	params := map[string]string{}
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("--param %q: write NAME=VALUE (e.g. alarmMode=ON)", f)
		}
		if _, dup := params[name]; dup {
			return nil, fmt.Errorf("--param %s is given twice", name)
		}
		params[name] = value
	}
	return params, nil
}

// parseExpiresAt reads --expires-at: an RFC 3339 date-time, or a duration
// from now ("72h").
func parseExpiresAt(s string, now time.Time) (string, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC().Format(time.RFC3339Nano), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return now.Add(d).UTC().Format(time.RFC3339Nano), nil
	}
	return "", fmt.Errorf("--expires-at %q: give an RFC 3339 date-time (2026-12-01T00:00:00Z) or a duration from now (72h)", s)
}

// oneID reads the one argument of a command on a thing (a job, a
// rollout): its id.
func oneID(thing string) func(cmd *cli.Command) (string, error) {
	return func(cmd *cli.Command) (string, error) {
		if cmd.Args().Len() != 1 {
			return "", fmt.Errorf("give the %s's id", thing)
		}
		return cmd.Args().First(), nil
	}
}

func jobsCommand(s *settings, out *printer) *cli.Command {
	jobID := oneID("job")
	return &cli.Command{
		Name:  "jobs",
		Usage: "jobs: one command for many mounts, run as phones pass them (owners): create, list, show, cancel",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "create a job for the mounts --filter selects, or for the --mount uids",
				Description: jobCommandsHelp(),
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "code", Required: true, Usage: "the command: " + strings.Join(jobCodeNames(), ", ") + " (its parameters below)"},
					&cli.StringSliceFlag{Name: "param", Usage: "a parameter of the command, NAME=VALUE (alarmMode=ON); repeat for more"},
					&cli.StringFlag{Name: "filter", Usage: `a fleet filter: batteryLevel < 20 AND presence = "OFFLINE" ("" is every mount)`},
					&cli.StringSliceFlag{Name: "mount", Usage: "a mount's uid (repeatable), instead of --filter"},
					&cli.StringFlag{Name: "description", Usage: "what the job is for"},
					&cli.StringFlag{Name: "expires-at", Usage: "when the job stops waiting: RFC 3339, or a duration from now (72h); default 7 days"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					byFilter, byMount := cmd.IsSet("filter"), cmd.IsSet("mount")
					if byFilter == byMount {
						return fmt.Errorf("give --filter or --mount (one of them)")
					}
					params, err := parseParams(cmd.StringSlice("param"))
					if err != nil {
						return err
					}
					body := map[string]any{"code": strings.ToUpper(cmd.String("code")), "params": params}
					if byFilter {
						body["filter"] = cmd.String("filter")
					} else {
						body["mountUids"] = cmd.StringSlice("mount")
					}
					if cmd.IsSet("description") {
						body["description"] = cmd.String("description")
					}
					if cmd.IsSet("expires-at") {
						at, err := parseExpiresAt(cmd.String("expires-at"), time.Now())
						if err != nil {
							return err
						}
						body["expiresAt"] = at
					}
					var j jobView
					if err := s.call(ctx, http.MethodPost, "/jobs", body, &j); err != nil {
						return err
					}
					return out.print(j, func(o io.Writer) { fmt.Fprintln(o, j.line()) })
				},
			},
			{
				Name: "list", Usage: "list the account's jobs, newest first", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					var page struct {
						Jobs       []jobView      `json:"jobs"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/jobs?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, j := range page.Jobs {
							fmt.Fprintln(o, j.line())
						}
						pageFooter(o, page.Pagination, "", "jobs", "")
					})
				},
			},
			{
				Name: "show", Aliases: []string{"get"}, Usage: "show a job, its counts, and one page of its mounts' statuses", ArgsUsage: "ID", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := jobID(cmd)
					if err != nil {
						return err
					}
					var j jobView
					if err := s.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id), nil, &j); err != nil {
						return err
					}
					var page struct {
						Mounts     []jobTargetView `json:"mounts"`
						Pagination map[string]int  `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/jobs/"+url.PathEscape(id)+"/mounts?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(map[string]any{"job": j, "mounts": page.Mounts, "pagination": page.Pagination}, func(o io.Writer) {
						fmt.Fprintln(o, j.line())
						for _, t := range page.Mounts {
							fmt.Fprintln(o, "  "+t.line())
						}
						pageFooter(o, page.Pagination, "mounts ", "mounts", "")
					})
				},
			},
			{
				Name: "cancel", Usage: "cancel an ACTIVE job: its commands are no longer offered", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := jobID(cmd)
					if err != nil {
						return err
					}
					var j jobView
					if err := s.call(ctx, http.MethodPost, "/jobs/"+url.PathEscape(id)+"/cancel", nil, &j); err != nil {
						return err
					}
					return out.print(j, func(o io.Writer) { fmt.Fprintln(o, j.line()) })
				},
			},
		},
	}
}
