// Package graph is the GraphQL transport of mountd: thin resolvers over the
// same core services as REST, with the same rights and error codes.
package graph

import (
	"log/slog"

	"github.com/mountd/mountd/core"
)

// Resolver holds the core services; wire builds it.
type Resolver struct {
	Accounts        *core.AccountService
	MountService    *core.MountService
	NfcService      *core.NfcService
	FirmwareService *core.FirmwareService
	Subscriptions   *core.SubscriptionService
	Logger          *slog.Logger
}
