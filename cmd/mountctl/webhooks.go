package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/urfave/cli/v3"

	"github.com/mountd/mountd/client"
)

// webhookView prints a webhook on one line.
type webhookView client.Webhook

func (w webhookView) line() string {
	types, mounts := "every event", "every mount"
	if len(w.EventTypes) > 0 {
		types = strings.Join(w.EventTypes, ",")
	}
	if len(w.MountUIDs) > 0 {
		mounts = strings.Join(w.MountUIDs, ",")
	}
	state := "enabled"
	if !w.Enabled {
		state = "disabled"
	}
	return fmt.Sprintf("%s  %s  %s, %s, %s", w.ID, w.URL, types, mounts, state)
}

func pageQuery(cmd *cli.Command) string {
	return url.Values{"currentPage": {fmt.Sprint(cmd.Int("page"))}, "pageSize": {fmt.Sprint(cmd.Int("page-size"))}}.Encode()
}

// pageCall is a call with --page and --page-size whose validation errors
// name those flags rather than the API's currentPage and pageSize.
func (s *settings) pageCall(ctx context.Context, path string, out any) error {
	err := s.call(ctx, http.MethodGet, path, nil, out)
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		flags := map[string]string{"currentPage": "--page", "pageSize": "--page-size"}
		for i, f := range apiErr.Fields {
			if flag, ok := flags[f.Field]; ok {
				apiErr.Fields[i].Field = flag
			}
		}
	}
	return err
}

var pageFlags = []cli.Flag{&cli.IntFlag{Name: "page", Value: 1}, &cli.IntFlag{Name: "page-size", Value: 20}}

func webhooksCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "webhooks",
		Usage: "webhooks of the account: create, list, deliveries, delete, disable, enable, rotate-secret, test",
		Commands: []*cli.Command{
			{
				Name: "create", Usage: "send the account's events to URL (the secret is printed once)", ArgsUsage: "URL",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "types", Usage: "comma-separated event types (default: all)"},
					&cli.StringFlag{Name: "mounts", Usage: "comma-separated mount uids (default: all)"},
					&cli.StringFlag{Name: "description"},
				},
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() != 1 {
						return fmt.Errorf("give the receiver's URL")
					}
					body := map[string]any{"url": cmd.Args().First(), "description": cmd.String("description")}
					if t := cmd.String("types"); t != "" {
						body["eventTypes"] = strings.Split(t, ",")
					}
					if m := cmd.String("mounts"); m != "" {
						body["mountUids"] = strings.Split(m, ",")
					}
					var w webhookView
					if err := s.call(ctx, http.MethodPost, "/webhooks", body, &w); err != nil {
						return err
					}
					return out.print(w, func(o io.Writer) {
						fmt.Fprintln(o, w.line())
						fmt.Fprintf(o, "secret %s (shown only now: keep it to verify signatures)\n", w.Secret)
					})
				},
			},
			{
				Name: "list", Usage: "list webhooks", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					var page struct {
						Webhooks   []webhookView  `json:"webhooks"`
						Pagination map[string]int `json:"pagination"`
					}
					if err := s.pageCall(ctx, "/webhooks?"+pageQuery(cmd), &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, w := range page.Webhooks {
							fmt.Fprintln(o, w.line())
						}
						pageFooter(o, page.Pagination, "", "webhooks", "")
					})
				},
			},
			{
				Name: "deliveries", Usage: "a webhook's delivery attempts, newest first", ArgsUsage: "ID", Flags: pageFlags,
				Action: func(ctx context.Context, cmd *cli.Command) error {
					if cmd.Args().Len() != 1 {
						return fmt.Errorf("give the webhook's id")
					}
					var page struct {
						Deliveries []client.Delivery `json:"deliveries"`
						Pagination map[string]int    `json:"pagination"`
					}
					path := "/webhooks/" + url.PathEscape(cmd.Args().First()) + "/deliveries?" + pageQuery(cmd)
					if err := s.pageCall(ctx, path, &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, d := range page.Deliveries {
							line := fmt.Sprintf("%-9s attempt %d  %-21s %s", d.Status, d.Attempt, d.EventType, d.EventID)
							if d.ResponseStatus != nil {
								line += fmt.Sprintf("  HTTP %d", *d.ResponseStatus)
							}
							if d.Error != nil {
								line += "  " + *d.Error
							}
							if d.NextAttemptAt != nil {
								line += "  next " + *d.NextAttemptAt
							}
							fmt.Fprintln(o, line)
						}
						pageFooter(o, page.Pagination, "", "deliveries", "no deliveries yet")
					})
				},
			},
			webhookChange(s, out, "disable", "stop sending events to the webhook (kept, with its deliveries)", map[string]any{"enabled": false}),
			webhookChange(s, out, "enable", "send events to the webhook again", map[string]any{"enabled": true}),
			{
				Name: "delete", Usage: "delete the webhook and its deliveries", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := webhookID(cmd)
					if err != nil {
						return err
					}
					if err := s.call(ctx, http.MethodDelete, "/webhooks/"+url.PathEscape(id), nil, nil); err != nil {
						return err
					}
					return out.print(map[string]any{"id": id, "deleted": true}, func(o io.Writer) { fmt.Fprintf(o, "webhook %s deleted\n", id) })
				},
			},
			{
				Name: "rotate-secret", Usage: "give the webhook a new signing secret (printed once)", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := webhookID(cmd)
					if err != nil {
						return err
					}
					var res struct {
						Secret string `json:"secret"`
					}
					if err := s.call(ctx, http.MethodPost, "/webhooks/"+url.PathEscape(id)+"/rotate-secret", nil, &res); err != nil {
						return err
					}
					return out.print(res, func(o io.Writer) {
						fmt.Fprintf(o, "secret %s (shown only now: keep it to verify signatures)\n", res.Secret)
					})
				},
			},
			{
				Name: "test", Usage: "send the webhook a signed test delivery now and show how it went (fails when the receiver does not answer 2xx)", ArgsUsage: "ID",
				Action: func(ctx context.Context, cmd *cli.Command) error {
					id, err := webhookID(cmd)
					if err != nil {
						return err
					}
					var res struct {
						Status         string  `json:"status"`
						ResponseStatus *int    `json:"responseStatus"`
						Error          *string `json:"error"`
						DurationMs     int64   `json:"durationMs"`
					}
					if err := s.call(ctx, http.MethodPost, "/webhooks/"+url.PathEscape(id)+"/test", nil, &res); err != nil {
						return err
					}
					err = out.print(res, func(o io.Writer) {
						line := fmt.Sprintf("%s in %d ms", res.Status, res.DurationMs)
						if res.ResponseStatus != nil {
							line += fmt.Sprintf("  HTTP %d", *res.ResponseStatus)
						}
						if res.Error != nil {
							line += "  " + *res.Error
						}
						fmt.Fprintln(o, line)
					})
					if err == nil && res.Status != "SUCCEEDED" {
						err = errors.New("the receiver did not accept the test delivery")
					}
					return err
				},
			},
		},
	}
}

func webhookID(cmd *cli.Command) (string, error) {
	if cmd.Args().Len() != 1 {
		return "", fmt.Errorf("give the webhook's id")
	}
	return cmd.Args().First(), nil
}

// webhookChange is a subcommand that PATCHes the webhook with body.
func webhookChange(s *settings, out *printer, name, usage string, body map[string]any) *cli.Command {
	return &cli.Command{
		Name: name, Usage: usage, ArgsUsage: "ID",
		Action: func(ctx context.Context, cmd *cli.Command) error {
			id, err := webhookID(cmd)
			if err != nil {
				return err
			}
			var w webhookView
			if err := s.call(ctx, http.MethodPatch, "/webhooks/"+url.PathEscape(id), body, &w); err != nil {
				return err
			}
			return out.print(w, func(o io.Writer) { fmt.Fprintln(o, w.line()) })
		},
	}
}
