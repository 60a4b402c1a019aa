// Command mountd is the Mount Management Service: `mountd serve` runs the
// REST and GraphQL API with the embedded identity provider; the other
// subcommands administer the same database.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/mountd/mountd/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.NewCommand(os.Stdout, os.Stderr).Run(ctx, os.Args); err != nil {
		fmt.Fprintln(os.Stderr, "mountd:", err)
		os.Exit(1)
	}
}
