//go:build wireinject

package app

import (
	"context"
	"log/slog"

	"github.com/google/wire"

	"github.com/mountd/mountd/core"
)

// newServer wires everything `mountd serve` runs.
func newServer(ctx context.Context, cfg Config, logger *slog.Logger) (*server, func(), error) {
	panic(wire.Build(serverSet, wire.Struct(new(server), "*")))
}

// newAccountService wires what the admin commands on accounts need.
func newAccountService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.AccountService, func(), error) {
	panic(wire.Build(storeSet, noFailureLimiter, provideSealer, provideClientSecretKey, core.NewKeyedAccountService))
}

// newUserService wires what the admin commands on users need.
func newUserService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.UserService, func(), error) {
	panic(wire.Build(storeSet, noFailureLimiter, core.NewUserService))
}

// newMountService wires what the admin commands on mount keys need.
func newMountService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.MountService, func(), error) {
	panic(wire.Build(storeSet, mountSet))
}

// newAuditService wires what `mountd audit` needs.
func newAuditService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.AuditService, func(), error) {
	panic(wire.Build(storeSet, provideSealer, provideAuditCursors, core.NewAuditService))
}

// newFirmwareService wires what the admin commands on firmware need.
func newFirmwareService(ctx context.Context, cfg Config, logger *slog.Logger) (*core.FirmwareService, func(), error) {
	panic(wire.Build(storeSet, provideSealer, firmwareSet))
}
