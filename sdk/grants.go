package sdk

import (
	"context"
	"errors"
	"time"
)

// Offline access (CONTRACT §21; docs/ble.md, "Offline access"): a grant
// is a right, signed by the mount's owner key, that the phone keeps
// (Config.GrantDir or Config.Keeper) and carries to the mount when the API
// does not answer; the mount checks it alone and signs a receipt of every
// use, which any phone carries back to the API.

// ErrNoKeeper: the Client has neither GrantDir nor Keeper, so no offline
// access.
var ErrNoKeeper = errors.New("sdk: no grant keeper (Config.GrantDir or Config.Keeper)")

// RiderKey is the phone's rider key as riderKey hex (the uncompressed
// SEC1 point, 130 lowercase hex): what an operator names in a grant.
func (c *Client) RiderKey() (string, error) {
	return "", errors.New("sdk: TODO")
}

// RequestGrant asks the API for a grant of RELEASE_HELMET on mount uid for
// this phone's rider key, valid from now to notAfter, and keeps it (it
// replaces the mount's previous grant), with the mount's revocation list.
func (c *Client) RequestGrant(ctx context.Context, uid string, notAfter time.Time) (StoredGrant, error) {
	return StoredGrant{}, errors.New("sdk: TODO")
}

// RefreshGrants fetches each grant held again (a re-signed text replaces
// the one held; a revoked, expired or unknown grant is dropped) and each
// such mount's revocation list.
func (c *Client) RefreshGrants(ctx context.Context) error {
	return errors.New("sdk: TODO")
}

// UploadPending carries a connected mount's offline log: the offline
// receipts it notified are uploaded (queued when the API does not answer)
// and the API's acknowledgement is written back to the mount, which drops
// them. It returns how many receipts the API acknowledged.
func (c *Client) UploadPending(ctx context.Context, uid string) (int, error) {
	return 0, errors.New("sdk: TODO")
}
