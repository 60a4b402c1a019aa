//go:build wireinject

package main

import (
	"context"
	"log/slog"

	"github.com/google/wire"

	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/core"
)

// newServer wires everything `mountd serve` runs.
func newServer(ctx context.Context, cfg Config, logger *slog.Logger) (*rest.Server, func(), error) {
	panic(wire.Build(serverSet))
}

// newAccountService wires what the admin commands on accounts need.
func newAccountService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.AccountService, func(), error) {
	panic(wire.Build(storeSet))
}
