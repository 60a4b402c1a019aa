package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/core"
)

// Operator is who runs a mountd command, as the audit log names it: the
// operating-system user the process runs as (its id and name). SUDO_USER
// is only a hint beside it, "root (sudo from alice)": anyone can set the
// variable, so it never replaces the real user.
func Operator() core.Actor {
	return operatorOf(currentUser(), os.Getenv("SUDO_USER"))
}

// currentUser is the name of the process's user: from the user database,
// else its uid (never $USER, which the caller sets).
func currentUser() string {
	uid := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(uid); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + uid
}

// operatorOf is the actor of the user name, with sudoUser (SUDO_USER) as
// a hint in its name when it names someone else.
func operatorOf(name, sudoUser string) core.Actor {
	a := core.CLIActor(name)
	if sudoUser = strings.TrimSpace(sudoUser); sudoUser != "" && sudoUser != name {
		a.Name = fmt.Sprintf("%s (sudo from %s)", name, sudoHint(sudoUser))
	}
	return a
}

// sudoHint is SUDO_USER as it may appear in a name: the variable is the
// caller's to set, so it is cut to 64 characters and its control
// characters are dropped.
func sudoHint(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if r := []rune(s); len(r) > 64 {
		s = string(r[:64])
	}
	return s
}

// withOperator makes the admin commands' changes the operator's in the
// audit log.
func withOperator(ctx context.Context, _ *cli.Command) (context.Context, error) {
	return core.WithActor(ctx, Operator()), nil
}

// auditCommand is `mountd audit`: the installation's changes, which the API
// never lists, or one account's.
func auditCommand(cfg *Config, stdout io.Writer, logger func() *slog.Logger) *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "list the audit log: the installation's changes (accounts created, firmware, keys) or, with --account, an account's",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "account", Usage: "an account's entries instead of the installation's"},
			&cli.StringFlag{Name: "after", Usage: "the entries after this cursor (the next of a previous page)"},
			&cli.IntFlag{Name: "limit", Usage: "at most this many entries (1 to 1000)", Value: core.DefaultEventPage},
			&cli.StringFlag{Name: "actor", Usage: "only this actor id"},
			&cli.StringFlag{Name: "action", Usage: "only this action (mount.abandon, firmware.publish, …)"},
			&cli.StringFlag{Name: "target", Usage: "only this target (<kind>:<id>)"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON, as GET /api/v1/audit answers"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			audit, cleanup, err := adminService(ctx, cfg, logger(), newAuditService)
			if err != nil {
				return err
			}
			defer cleanup()
			opt := func(name string) *string {
				if !cmd.IsSet(name) {
					return nil
				}
				v := cmd.String(name)
				return &v
			}
			limit := cmd.Int("limit")
			page, err := audit.Installation(ctx, cmd.String("account"), core.AuditRequest{After: opt("after"), Limit: &limit,
				Actor: opt("actor"), Action: opt("action"), Target: opt("target")})
			if err != nil {
				return cliError(err)
			}
			return printAudit(stdout, page, limit, cmd.Bool("json"))
		},
	}
}

func printAudit(w io.Writer, page core.AuditPage, limit int, asJSON bool) error {
	entries := make([]rest.AuditEntryJSON, len(page.Entries))
	for i, e := range page.Entries {
		entries[i] = rest.AuditJSON(e)
	}
	if asJSON {
		return json.NewEncoder(w).Encode(map[string]any{"entries": entries, "next": page.Next})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tACTOR\tACTION\tTARGET\tSOURCE\tDETAILS")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s %s\t%s\t%s\t%s\t%s\n", time.Time(e.At).UTC().Format(core.TimeLayout), e.Actor.Type, e.Actor.Name,
			e.Action, e.Target, orDash(e.SourceAddress), detailsText(e.Details))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(entries) == limit {
		_, err := fmt.Fprintf(w, "\nmore follow: --after %s\n", page.Next)
		return err
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// detailsText shows details as key=value pairs in key order, values as JSON.
func detailsText(d map[string]any) string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		v, _ := json.Marshal(d[k])
		parts[i] = k + "=" + string(v)
	}
	return orDash(strings.Join(parts, " "))
}
