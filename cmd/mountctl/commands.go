package main

import (
	"cmp"
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
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

func tokenCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "get an access token with client credentials (prints the token)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "role", Value: "owner", Usage: "owner or restricted"},
			&cli.StringSliceFlag{Name: "mount", Usage: "restrict to this mount uid (repeatable)"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			// One line naming what is missing, rather than the whole help.
			var missing []string
			if s.ClientID == "" {
				missing = append(missing, "--client-id (or MOUNTCTL_CLIENT_ID)")
			}
			if s.ClientSecret == "" {
				missing = append(missing, "--client-secret (or MOUNTCTL_CLIENT_SECRET)")
			}
			if len(missing) > 0 {
				return fmt.Errorf("no client credentials: set %s", strings.Join(missing, " and "))
			}
			role := cmd.String("role")
			if role != "owner" && role != "restricted" {
				return fmt.Errorf("--role must be owner or restricted")
			}
			scope := tokenScope(s.IDPName, s.ProjectID, role)
			for _, m := range cmd.StringSlice("mount") {
				scope = append(scope, "mount:"+m)
			}
			tok, err := s.requestToken(ctx, s.ClientID, s.ClientSecret, scope)
			if err != nil {
				return err
			}
			return out.print(tok, func(w io.Writer) { fmt.Fprintln(w, tok["access_token"]) })
		},
	}
}

// mountView is a mount as the API shows it, printed on one line.
type mountView client.Mount

func (m mountView) line() string {
	seen := "never"
	if m.LastSeenAt != nil {
		seen = *m.LastSeenAt
	}
	presence := m.Presence
	if presence == "" {
		presence = "?"
	}
	return fmt.Sprintf("%-20s %-11s %-7s locked=%s helmet=%s battery=%s temp=%s seen=%s name=%q",
		m.UID, m.AssociationState, presence, optBool(m.MountLocked), optBool(m.HelmetMounted), optInt(m.BatteryLevel),
		optFloat(m.CPUTemperature), seen, m.Name)
}

func optBool(b *bool) string {
	if b == nil {
		return "?"
	}
	return fmt.Sprint(*b)
}

func optInt(n *int) string {
	if n == nil {
		return "?"
	}
	return fmt.Sprintf("%d%%", *n)
}

func optFloat(f *float64) string {
	if f == nil {
		return "?"
	}
	return fmt.Sprintf("%.1f°C", *f)
}

// commandView is a command as the API shows it, printed on one line with
// where it stands.
type commandView struct {
	ID          string  `json:"id"`
	Code        string  `json:"code"`
	GeneratedAt string  `json:"generatedAt"`
	Status      string  `json:"status"`
	StatusAt    *string `json:"statusAt"`
	Reason      *string `json:"reason"`
	Verified    bool    `json:"verified"`
	IssuedBy    string  `json:"issuedBy,omitempty"`
	// IssuedByName is the issuer's name (the id for commands issued
	// before names were kept).
	IssuedByName string `json:"issuedByName,omitempty"`
	JobID        string `json:"jobId,omitempty"`
}

func (c commandView) line() string {
	at, reason := "-", ""
	if c.StatusAt != nil {
		at = *c.StatusAt
	}
	if c.Reason != nil && *c.Reason != "" {
		reason = fmt.Sprintf(" reason=%q", *c.Reason)
	}
	if c.JobID != "" {
		reason += " job=" + c.JobID
	}
	if by := cmp.Or(c.IssuedByName, c.IssuedBy); by != "" {
		reason += fmt.Sprintf(" by %q", by)
	}
	return fmt.Sprintf("%-32s %-16s %-11s %-24s verified=%t%s", c.ID, c.Code, c.Status, at, c.Verified, reason)
}

func mountsCommand(s *settings, out *printer) *cli.Command {
	uidArg := func(cmd *cli.Command) (string, error) {
		if cmd.Args().Len() != 1 {
			return "", fmt.Errorf("give one mount uid")
		}
		return cmd.Args().First(), nil
	}
	return &cli.Command{
		Name:  "mounts",
		Usage: "mounts of the account: list (with a fleet filter), get, commands, associate, confirm, abandon",
		Commands: []*cli.Command{
			{
				Name: "list", Usage: "list mounts",
				Flags: []cli.Flag{&cli.IntFlag{Name: "page", Value: 1}, &cli.IntFlag{Name: "page-size", Value: 20},
					&cli.BoolFlag{Name: "all", Usage: "every page (100 mounts a call), not one"},
					&cli.StringFlag{Name: "filter", Usage: `only the mounts a fleet filter selects: batteryLevel < 20 AND presence = "OFFLINE" AND modelNumber = "HM-1"`}},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					type mountPage struct {
						Mounts     []mountView    `json:"mounts"`
						Pagination map[string]int `json:"pagination"`
					}
					if cmd.Bool("all") {
						var all []mountView
						for n := 1; ; n++ {
							var page mountPage
							q := url.Values{"currentPage": {fmt.Sprint(n)}, "pageSize": {"100"}}
							if cmd.IsSet("filter") {
								q.Set("filter", cmd.String("filter"))
							}
							if err := s.pageCall(ctx, "/mounts?"+q.Encode(), &page); err != nil {
								return err
							}
							all = append(all, page.Mounts...)
							// The last page, or an empty one (mounts deleted meanwhile).
							if len(page.Mounts) == 0 || n >= page.Pagination["totalPages"] {
								break
							}
						}
						return out.print(map[string]any{"mounts": all, "totalItems": len(all)}, func(w io.Writer) {
							for _, m := range all {
								fmt.Fprintln(w, m.line())
							}
							fmt.Fprintf(w, "%d mounts\n", len(all))
						})
					}
					var page mountPage
					q := url.Values{"currentPage": {fmt.Sprint(cmd.Int("page"))}, "pageSize": {fmt.Sprint(cmd.Int("page-size"))}}
					if cmd.IsSet("filter") {
						q.Set("filter", cmd.String("filter"))
					}
					if err := s.pageCall(ctx, "/mounts?"+q.Encode(), &page); err != nil {
						return err
					}
					return out.print(page, func(w io.Writer) {
						for _, m := range page.Mounts {
							fmt.Fprintln(w, m.line())
						}
						pageFooter(w, page.Pagination, "", "mounts", "")
					})
				},
			},
			{
				Name: "get", Aliases: []string{"show"}, Usage: "show one mount", ArgsUsage: "UID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					uid, err := uidArg(cmd)
					if err != nil {
						return err
					}
					var ms []mountView
					if err := s.call(ctx, http.MethodGet, "/mounts/"+url.PathEscape(uid), nil, &ms); err != nil {
						return err
					}
					return out.print(ms[0], func(w io.Writer) { fmt.Fprintln(w, ms[0].line()) })
				},
			},
			{
				Name: "commands", Usage: "list the commands issued for a mount, newest first, with their status (owners)", ArgsUsage: "UID",
				Flags: []cli.Flag{&cli.IntFlag{Name: "page", Value: 1}, &cli.IntFlag{Name: "page-size", Value: 20}},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					uid, err := uidArg(cmd)
					if err != nil {
						return err
					}
					var page struct {
						Commands   []commandView  `json:"commands"`
						Pagination map[string]int `json:"pagination"`
					}
					q := url.Values{"currentPage": {fmt.Sprint(cmd.Int("page"))}, "pageSize": {fmt.Sprint(cmd.Int("page-size"))}}
					if err := s.pageCall(ctx, "/mounts/"+url.PathEscape(uid)+"/commands?"+q.Encode(), &page); err != nil {
						return err
					}
					return out.print(page, func(w io.Writer) {
						for _, c := range page.Commands {
							fmt.Fprintln(w, c.line())
						}
						pageFooter(w, page.Pagination, "", "commands", "")
					})
				},
			},
			{
				Name: "associate", Usage: "request the association of a mount; with --deliver, carry ASSOCIATE_OWNER to it over BLE and confirm", ArgsUsage: "UID",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name"}, &cli.StringFlag{Name: "serial-number"}, &cli.StringFlag{Name: "mac-address"}, &cli.StringFlag{Name: "model-number"},
					&cli.BoolFlag{Name: "deliver", Usage: "deliver ASSOCIATE_OWNER over BLE, then confirm"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					uid, err := uidArg(cmd)
					if err != nil {
						return err
					}
					body := map[string]any{"uid": uid}
					var client *sdk.Client
					if cmd.Bool("deliver") {
						// The mount is at hand: what it says of itself (its
						// info characteristic) goes into the request.
						c, closeClient, err := s.sdkClient()
						if err != nil {
							return err
						}
						defer closeClient()
						info, err := c.Connect(ctx, uid)
						if err != nil {
							return err
						}
						client, body = c, sdk.AssociationRequest(info)
					}
					// Flags given by the operator win over the mount's word.
					for flag, field := range map[string]string{"name": "name", "serial-number": "serialNumber", "mac-address": "macAddress", "model-number": "modelNumber"} {
						if cmd.IsSet(flag) {
							body[field] = cmd.String(flag)
						}
					}
					var cmds []protocol.BLECommand
					if err := s.call(ctx, http.MethodPost, "/mounts", body, &cmds); err != nil {
						return err
					}
					result := map[string]any{"uid": uid, "commands": cmds}
					if client != nil {
						res, err := client.Deliver(ctx, uid, cmds[0])
						if err != nil {
							return err
						}
						var m mountView
						if err := s.call(ctx, http.MethodPost, "/mounts/"+url.PathEscape(uid)+"/confirm-association", nil, &m); err != nil {
							return err
						}
						// The mount's receipt goes up once the association
						// is confirmed: only then is its device key pinned
						// for the account, and the command leaves ISSUED.
						if res.Receipt != nil {
							if _, err := client.Upload(ctx, sdk.Upload{UID: uid, Receipt: res.Receipt}); err != nil {
								return fmt.Errorf("upload the association's receipt: %w", err)
							}
						}
						result["delivered"] = res
						result["mount"] = m
					}
					return out.print(result, func(w io.Writer) {
						fmt.Fprintf(w, "association of %s requested; ASSOCIATE_OWNER payload %s\n", uid, cmds[0].Payload)
						if m, ok := result["mount"].(mountView); ok {
							fmt.Fprintf(w, "delivered over BLE and confirmed: %s\n", m.line())
						} else {
							fmt.Fprintf(w, "deliver it to the mount, then: mountctl mounts confirm %s\n", uid)
						}
					})
				},
			},
			{
				Name: "confirm", Usage: "confirm an association (within the window)", ArgsUsage: "UID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					uid, err := uidArg(cmd)
					if err != nil {
						return err
					}
					var m mountView
					if err := s.call(ctx, http.MethodPost, "/mounts/"+url.PathEscape(uid)+"/confirm-association", nil, &m); err != nil {
						return err
					}
					return out.print(m, func(w io.Writer) { fmt.Fprintln(w, m.line()) })
				},
			},
			{
				Name: "abandon", Usage: "give a mount up (it becomes INACTIVE)", ArgsUsage: "UID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					uid, err := uidArg(cmd)
					if err != nil {
						return err
					}
					if err := s.call(ctx, http.MethodDelete, "/mounts/"+url.PathEscape(uid)+"/abandon", nil, nil); err != nil {
						return err
					}
					return out.print(map[string]string{"uid": uid, "associationState": "INACTIVE"}, func(w io.Writer) { fmt.Fprintf(w, "%s abandoned\n", uid) })
				},
			},
		},
	}
}

func scanCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "scan",
		Usage: "scan for mounts nearby over BLE",
		Flags: []cli.Flag{&cli.DurationFlag{Name: "duration", Value: 3 * time.Second}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			client, closeClient, err := s.sdkClient()
			if err != nil {
				return err
			}
			defer closeClient()
			// Said on stderr, so that --json output stays one document.
			fmt.Fprintf(cmd.Root().ErrWriter, "scanning for mounts nearby for %s…\n", cmd.Duration("duration"))
			devices, err := client.Scan(ctx, cmd.Duration("duration"))
			if err != nil {
				return err
			}
			slices.SortFunc(devices, func(a, b protocol.BLEDevice) int {
				return cmp.Or(cmp.Compare(a.MountUID, b.MountUID), cmp.Compare(a.Address, b.Address))
			})
			return out.print(devices, func(w io.Writer) {
				for _, d := range devices {
					fmt.Fprintf(w, "%-20s %-24s rssi %d\n", d.MountUID, d.Address, d.RSSI)
				}
				fmt.Fprintf(w, "%d mounts\n", len(devices))
			})
		},
	}
}

func connectCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "connect",
		Usage:     "connect to a mount over BLE and print its states as they come",
		ArgsUsage: "UID",
		Flags:     []cli.Flag{&cli.DurationFlag{Name: "duration", Usage: "stop after this long", DefaultText: "until interrupted"}},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("give one mount uid")
			}
			uid := cmd.Args().First()
			client, closeClient, err := s.sdkClient()
			if err != nil {
				return err
			}
			defer closeClient()
			info, err := client.Connect(ctx, uid)
			if err != nil {
				return err
			}
			_ = out.print(info, func(w io.Writer) {
				fmt.Fprintf(w, "connected to %s (serial %s, model %s, software %s)\n", info.UID, info.SerialNumber, info.ModelNumber, info.SoftwareRevision)
			})
			events, err := client.DeviceStates(uid)
			if err != nil {
				return err
			}
			if d := cmd.Duration("duration"); d > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, d)
				defer cancel()
			}
			for {
				select {
				case <-ctx.Done():
					return nil
				case ev, ok := <-events:
					if !ok {
						return fmt.Errorf("%s disconnected", uid)
					}
					_ = out.print(ev, func(w io.Writer) { fmt.Fprintln(w, describe(ev)) })
				}
			}
		},
	}
}

func describe(ev sdk.DeviceEvent) string {
	if ev.Result != nil {
		if ev.Result.Accepted {
			return fmt.Sprintf("%s accepted %s", ev.UID, ev.Result.Code)
		}
		return fmt.Sprintf("%s refused %s: %s", ev.UID, ev.Result.Code, ev.Result.Reason)
	}
	parts := make([]string, len(ev.States))
	for i, st := range ev.States {
		parts[i] = st.Code + "=" + st.Value
	}
	return fmt.Sprintf("%s %s", ev.UID, strings.Join(parts, " "))
}

func releaseCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "release-helmet",
		Usage:     "release the helmet of a mount over BLE (the token must allow this mount)",
		ArgsUsage: "UID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if cmd.Args().Len() != 1 {
				return fmt.Errorf("give one mount uid")
			}
			uid := cmd.Args().First()
			ctx, cancel := context.WithTimeout(ctx, s.Timeout)
			defer cancel()
			client, closeClient, err := s.sdkClient()
			if err != nil {
				return err
			}
			defer closeClient()
			if _, err := client.Connect(ctx, uid); err != nil {
				return err
			}
			outcome, err := client.ReleaseHelmet(ctx, uid)
			if err != nil {
				return err
			}
			return out.print(outcome, func(w io.Writer) {
				fmt.Fprintf(w, "helmet of %s released: %s\n", uid, describe(sdk.DeviceEvent{UID: uid, States: outcome.States}))
			})
		},
	}
}

// sdkClient builds an SDK client on the configured radio.
func (s *settings) sdkClient() (*sdk.Client, func(), error) {
	if err := s.requireToken(); err != nil {
		return nil, nil, err
	}
	api := s.api()
	// A token now: a source that cannot give one fails here, before the radio opens.
	if _, err := api.Token(); err != nil {
		return nil, nil, err
	}
	radio, closeRadio, err := openRadio(s.BLE)
	if err != nil {
		return nil, nil, err
	}
	client, err := sdk.New(sdk.Config{BaseURL: s.apiBase(), TokenSource: api.TokenSource(), Radio: radio, QueueDir: s.QueueDir})
	if err != nil {
		closeRadio()
		return nil, nil, err
	}
	return client, func() { _ = client.Close(); closeRadio() }, nil
}
