package app

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/core"
)

// readPassword reads one line from r: the password of --password-stdin,
// never a flag (flags end up in shell history and process listings).
func readPassword(r io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(r, core.MaxPasswordBytes+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read the password from stdin: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("no password on stdin (pipe it in: printf '%s\\n' \"$PASSWORD\" | mountd users ...)")
	}
	return line, nil
}

// userView is what the users commands print as JSON (docs/api.md, "People").
type userView struct {
	UserID    string   `json:"userId"`
	Username  string   `json:"username"`
	AccountID string   `json:"accountId"`
	Role      string   `json:"role"`
	MountUIDs []string `json:"mountUids,omitempty"`
}

func viewOf(u core.User) userView {
	return userView{UserID: u.ID, Username: u.Username, AccountID: u.AccountID, Role: string(u.Role), MountUIDs: u.MountUIDs}
}

// usersCommand administers the people of accounts.
func usersCommand(cfg *Config, stdin io.Reader, stdout io.Writer, logger func() *slog.Logger) *cli.Command {
	service := func(ctx context.Context) (*core.UserService, func(), error) {
		return adminService(ctx, cfg, logger(), newUserService)
	}
	passwordFlag := &cli.BoolFlag{Name: "password-stdin", Usage: "read the password (12 characters or more) from the first line of stdin", Required: true}
	return &cli.Command{
		Name:  "users",
		Usage: "administer the people who sign in to the console",
		Commands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a user of an account",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "account", Usage: "account id", Required: true},
					&cli.StringFlag{Name: "username", Usage: "username (unique in the installation, case does not matter)", Required: true},
					&cli.StringFlag{Name: "role", Usage: "owner or restricted", Required: true},
					&cli.StringSliceFlag{Name: "mount", Usage: "a mount uid a restricted user may reach (repeat; none: a maintainer)"},
					passwordFlag,
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					password, err := readPassword(stdin)
					if err != nil {
						return err
					}
					users, cleanup, err := service(ctx)
					if err != nil {
						return err
					}
					defer cleanup()
					u, err := users.Create(ctx, core.NewUser{AccountID: cmd.String("account"), Username: cmd.String("username"),
						Role: core.Role(cmd.String("role")), MountUIDs: cmd.StringSlice("mount"), Password: password})
					if err != nil {
						return describe(err)
					}
					if cmd.Bool("json") {
						return json.NewEncoder(stdout).Encode(viewOf(u))
					}
					fmt.Fprintf(stdout, "user %s (%s) created in account %s as %s\n", u.Username, u.ID, u.AccountID, u.Role)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list the users of an account",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "account", Usage: "account id", Required: true},
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					users, cleanup, err := service(ctx)
					if err != nil {
						return err
					}
					defer cleanup()
					list, err := users.List(ctx, cmd.String("account"))
					if err != nil {
						return describe(err)
					}
					views := make([]userView, len(list))
					for i, u := range list {
						views[i] = viewOf(u)
					}
					if cmd.Bool("json") {
						return json.NewEncoder(stdout).Encode(map[string]any{"users": views})
					}
					tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "USERNAME\tUSER ID\tROLE\tMOUNTS")
					for _, v := range views {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Username, v.UserID, v.Role, strings.Join(v.MountUIDs, " "))
					}
					return tw.Flush()
				},
			},
			{
				Name:  "set-password",
				Usage: "replace a user's password (the user's sessions end)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "username", Usage: "username", Required: true},
					passwordFlag,
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					password, err := readPassword(stdin)
					if err != nil {
						return err
					}
					users, cleanup, err := service(ctx)
					if err != nil {
						return err
					}
					defer cleanup()
					if err := users.SetPassword(ctx, cmd.String("username"), password); err != nil {
						return describe(err)
					}
					fmt.Fprintf(stdout, "password of %s replaced; its sessions have ended\n", core.NormalizeUsername(cmd.String("username")))
					return nil
				},
			},
			{
				Name:  "delete",
				Usage: "delete a user (its sessions end at once, its access tokens at their expiry)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "username", Usage: "username", Required: true},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					users, cleanup, err := service(ctx)
					if err != nil {
						return err
					}
					defer cleanup()
					if err := users.Delete(ctx, cmd.String("username")); err != nil {
						return describe(err)
					}
					fmt.Fprintf(stdout, "user %s deleted\n", core.NormalizeUsername(cmd.String("username")))
					return nil
				},
			},
		},
	}
}

// describe turns a core error into the sentence an operator reads.
func describe(err error) error {
	var e *core.Error
	if !errors.As(err, &e) {
		return err
	}
	if len(e.Fields) == 0 {
		return errors.New(e.Message)
	}
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		flag := "--" + f.Field
		if f.Field == "password" {
			flag = "the password (--password-stdin)" // read from stdin, never a flag
		}
		parts[i] = flag + " " + f.Message
	}
	return errors.New(strings.Join(parts, "; "))
}
