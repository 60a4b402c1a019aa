package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/protocol"
)

// rolloutCounts and rolloutView are a Rollout as the API shows it
// (docs/api.md, "Rollouts").
type rolloutCounts struct {
	Pending    int `json:"pending"`
	Eligible   int `json:"eligible"`
	Installing int `json:"installing"`
	Healthy    int `json:"healthy"`
	Failed     int `json:"failed"`
}

func (c rolloutCounts) text() string {
	return fmt.Sprintf("pending=%d eligible=%d installing=%d healthy=%d failed=%d", c.Pending, c.Eligible, c.Installing, c.Healthy, c.Failed)
}

type rolloutView struct {
	ID               string        `json:"id"`
	ModelNumber      string        `json:"modelNumber"`
	SoftwareRevision string        `json:"softwareRevision"`
	Filter           string        `json:"filter"`
	Phases           []int         `json:"phases"`
	FailureThreshold int           `json:"failureThreshold"`
	MinSample        int           `json:"minSample"`
	HealthWindow     string        `json:"healthWindow"`
	RequireIdle      bool          `json:"requireIdle"`
	State            string        `json:"state"`
	PausedReason     *string       `json:"pausedReason"`
	OpenPhase        int           `json:"openPhase"`
	Targets          int           `json:"targets"`
	Counts           rolloutCounts `json:"counts"`
	CreatedAt        string        `json:"createdAt"`
	EndedAt          *string       `json:"endedAt"`
}

func (r rolloutView) line() string {
	state := r.State
	if r.PausedReason != nil {
		state += " (" + *r.PausedReason + ")"
	}
	line := fmt.Sprintf("%s  %-9s %s → %s  phase %d of %d  %d targets: %s  created %s", r.ID, state, r.ModelNumber,
		r.SoftwareRevision, r.OpenPhase+1, len(r.Phases), r.Targets, r.Counts.text(), r.CreatedAt)
	if r.EndedAt != nil {
		line += "  ended " + *r.EndedAt
	}
	if r.Filter != "" {
		line += fmt.Sprintf("  filter %q", r.Filter)
	}
	return line
}

// rolloutTargetView is a rollout at one of its mounts.
type rolloutTargetView struct {
	UID             string  `json:"uid"`
	State           string  `json:"state"`
	Phase           int     `json:"phase"`
	CommandID       *string `json:"commandId"`
	InstallingSince *string `json:"installingSince"`
	Reason          *string `json:"reason"`
}

func (t rolloutTargetView) line() string {
	cmd := "-"
	if t.CommandID != nil {
		cmd = *t.CommandID
	}
	line := fmt.Sprintf("%-20s phase %-2d %-10s %s", t.UID, t.Phase+1, t.State, cmd)
	if t.InstallingSince != nil {
		line += "  installing since " + *t.InstallingSince
	}
	if t.Reason != nil {
		line += fmt.Sprintf("  %q", *t.Reason)
	}
	return line
}

// parsePhases reads --phases: comma-separated percentages ("1,10,50,100").
// Whether they ascend to 100 is the server's to say.
func parsePhases(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f), "%")))
		if err != nil {
			return nil, fmt.Errorf("--phases %q: give comma-separated percentages such as 1,10,50,100", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// phaseStatus labels phase i of r: "open, passed" before the open phase;
// the open phase "open, current", or "open, last" once the rollout
// COMPLETED; "waiting" after it; from the open phase on, "canceled" once
// the rollout is CANCELED.
func phaseStatus(r rolloutView, i int) string {
	switch {
	case i < r.OpenPhase:
		return "open, passed"
	case r.State == "CANCELED":
		return "canceled"
	case i == r.OpenPhase && r.State == "COMPLETED":
		return "open, last"
	case i == r.OpenPhase:
		return "open, current"
	}
	return "waiting"
}

// printRollout prints a rollout, its counts per state, each phase's size
// and whether it is open, and one page of its targets.
func printRollout(o io.Writer, r rolloutView, mounts []rolloutTargetView, pagination map[string]int) {
	fmt.Fprintln(o, r.line())
	fmt.Fprintf(o, "revision %s of %s  failure threshold %d%% of at least %d  health window %s  require idle %v\n",
		r.SoftwareRevision, r.ModelNumber, r.FailureThreshold, r.MinSample, r.HealthWindow, r.RequireIdle)
	c := r.Counts
	fmt.Fprintf(o, "targets %d: pending %d, eligible %d, installing %d, healthy %d, failed %d\n",
		r.Targets, c.Pending, c.Eligible, c.Installing, c.Healthy, c.Failed)
	// What the listed page says of each phase, when it lists every target.
	complete := pagination["totalItems"] == len(mounts)
	byPhase := map[int]map[string]int{}
	for _, t := range mounts {
		if byPhase[t.Phase] == nil {
			byPhase[t.Phase] = map[string]int{}
		}
		byPhase[t.Phase][t.State]++
	}
	for i, size := range protocol.RolloutPhaseSizes(r.Phases, r.Targets) {
		line := fmt.Sprintf("  phase %d  up to %3d%%  %d mounts  %s", i+1, r.Phases[i], size, phaseStatus(r, i))
		if complete {
			s := byPhase[i]
			decided := s["HEALTHY"] + s["FAILED"]
			line += fmt.Sprintf("  decided %d/%d (healthy %d, failed %d)", decided, size, s["HEALTHY"], s["FAILED"])
		}
		fmt.Fprintln(o, line)
	}
	for _, t := range mounts {
		fmt.Fprintln(o, "  "+t.line())
	}
	pageFooter(o, pagination, "mounts ", "mounts", "")
}

func rolloutsCommand(s *settings, out *printer) *cli.Command {
	rolloutID := oneID("rollout")
	change := func(verb, usage string) *cli.Command {
		return &cli.Command{
			Name: verb, Usage: usage, ArgsUsage: "ID",
			Action: func(ctx context.Context, cmd *cli.Command) error {
				id, err := rolloutID(cmd)
				if err != nil {
					return err
				}
				var r rolloutView
				if err := s.call(ctx, http.MethodPost, "/rollouts/"+url.PathEscape(id)+"/"+verb, nil, &r); err != nil {
					return err
				}
				return out.print(r, func(o io.Writer) { fmt.Fprintln(o, r.line()) })
			},
		}
	}
	return &cli.Command{
		Name:  "rollouts",
		Usage: "rollouts: one firmware revision for the mounts of a model, in health-gated phases (owners): create, list, show, pause, resume, cancel",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "roll a published revision out to the mounts of a model",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "model", Required: true, Usage: "the model number (modelNumber)"},
					&cli.StringFlag{Name: "revision", Required: true, Usage: "the revision to install, published for the model (softwareRevision)"},
					&cli.StringFlag{Name: "filter", Usage: `a fleet filter narrowing the targets: presence = "ONLINE" AND batteryLevel > 50`},
					&cli.StringFlag{Name: "phases", Usage: "comma-separated cumulative percentages of the targets, the last 100 (default 1,10,50,100)"},
					&cli.IntFlag{Name: "failure-threshold", Usage: "pause when more than this percentage of the decided targets failed, 0-100", DefaultText: "the server's, 5"},
					&cli.IntFlag{Name: "min-sample", Usage: "decided targets needed before the threshold applies", DefaultText: "the server's, 10"},
					&cli.StringFlag{Name: "health-window", Usage: "how long after the install a mount must report the new revision: 1h, 30m, at most 168h (default 1h)"},
					&cli.BoolFlag{Name: "require-idle", Usage: "offer the install only while the mount is locked with the helmet present (the server's default: true; --require-idle=false offers it any time)"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					body := map[string]any{"modelNumber": cmd.String("model"), "softwareRevision": cmd.String("revision")}
					if cmd.IsSet("filter") {
						body["filter"] = cmd.String("filter")
					}
					if cmd.IsSet("phases") {
						phases, err := parsePhases(cmd.String("phases"))
						if err != nil {
							return err
						}
						body["phases"] = phases
					}
					if cmd.IsSet("failure-threshold") {
						body["failureThreshold"] = cmd.Int("failure-threshold")
					}
					if cmd.IsSet("min-sample") {
						body["minSample"] = cmd.Int("min-sample")
					}
					if cmd.IsSet("health-window") {
						body["healthWindow"] = cmd.String("health-window")
					}
					if cmd.IsSet("require-idle") {
						body["requireIdle"] = cmd.Bool("require-idle")
					}
					var r rolloutView
					if err := s.call(ctx, http.MethodPost, "/rollouts", body, &r); err != nil {
						return err
					}
					return out.print(r, func(o io.Writer) { fmt.Fprintln(o, r.line()) })
				},
			},
			{
				Name: "list", Usage: "list the account's rollouts, newest first", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					var page struct {
						Rollouts   []rolloutView  `json:"rollouts"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/rollouts?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, r := range page.Rollouts {
							fmt.Fprintln(o, r.line())
						}
						pageFooter(o, page.Pagination, "", "rollouts", "")
					})
				},
			},
			{
				Name: "show", Aliases: []string{"get"}, Usage: "show a rollout: counts per state, each phase's progress, and one page of its mounts", ArgsUsage: "ID", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := rolloutID(cmd)
					if err != nil {
						return err
					}
					var r rolloutView
					if err := s.call(ctx, http.MethodGet, "/rollouts/"+url.PathEscape(id), nil, &r); err != nil {
						return err
					}
					var page struct {
						Mounts     []rolloutTargetView `json:"mounts"`
						Pagination map[string]int      `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/rollouts/"+url.PathEscape(id)+"/mounts?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(map[string]any{"rollout": r, "mounts": page.Mounts, "pagination": page.Pagination}, func(o io.Writer) {
						printRollout(o, r, page.Mounts, page.Pagination)
					})
				},
			},
			change("pause", "pause a RUNNING rollout: nothing is offered until it is resumed"),
			change("resume", "resume a PAUSED rollout: the failure threshold counts afresh"),
			change("cancel", "cancel a RUNNING or PAUSED rollout: its install is no longer offered"),
		},
	}
}
