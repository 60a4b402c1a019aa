package main

import (
	"context"
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

var pageFlags = []cli.Flag{&cli.IntFlag{Name: "page", Value: 1}, &cli.IntFlag{Name: "page-size", Value: 20}}

func webhooksCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:  "webhooks",
		Usage: "webhooks of the account: create, list, deliveries",
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
					if err := s.call(ctx, http.MethodGet, "/webhooks?"+pageQuery(cmd), nil, &page); err != nil {
						return err
					}
					return out.print(page, func(o io.Writer) {
						for _, w := range page.Webhooks {
							fmt.Fprintln(o, w.line())
						}
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
					}
					path := "/webhooks/" + url.PathEscape(cmd.Args().First()) + "/deliveries?" + pageQuery(cmd)
					if err := s.call(ctx, http.MethodGet, path, nil, &page); err != nil {
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
					})
				},
			},
		},
	}
}
