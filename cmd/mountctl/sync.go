package main

import (
	"context"
	"fmt"
	"io"

	"github.com/urfave/cli/v3"
)

// syncCommand is a phone passing a mount: connect over BLE, run the
// mount's pending commands (its jobs) with the SDK's Sync and upload the
// receipts.
func syncCommand(s *settings, out *printer) *cli.Command {
	return &cli.Command{
		Name:      "sync",
		Usage:     "run a mount's pending commands (jobs) over BLE and upload its receipts (the token must allow this mount)",
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
			sum, err := client.Sync(ctx, uid)
			_ = out.print(sum, func(w io.Writer) {
				fmt.Fprintf(w, "%s: %d pending, %d run\n", uid, sum.Offered, len(sum.Commands))
				for _, c := range sum.Commands {
					fmt.Fprintf(w, "  %s %s job %s: %s", c.ID, c.Code, c.JobID, c.Outcome)
					if c.Reason != "" {
						fmt.Fprintf(w, " (%s)", c.Reason)
					}
					fmt.Fprintln(w)
				}
				if sum.Pending > 0 {
					fmt.Fprintf(w, "  %d uploads wait in the queue\n", sum.Pending)
				}
			})
			return err
		},
	}
}
