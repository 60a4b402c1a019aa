package core

import (
	"context"
	"time"
)

// The truth from the mount (CONTRACT §16): signed reports, receipts and the
// command lifecycle.

// ReportSignature is what a mount's signed states message adds to its
// entries; the phone relays it unchanged.
type ReportSignature struct {
	Counter          uint64
	SoftwareRevision string
	// Signature is lowercase hex Ed25519 over protocol.BuildReportText.
	Signature string
}

// ReceiptInput is one receipt as a phone uploaded it: the fields of the
// mount's signed result message.
type ReceiptInput struct {
	Nonce   string
	Outcome string
	Reason  string
	Counter uint64
	// At is the mount's clock, milliseconds.
	At        time.Time
	Signature string
}

// ReceiptResult answers POST /mounts/{uid}/commands/receipts.
type ReceiptResult struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
}

// MaxReceiptsPerUpload bounds one receipts upload.
const MaxReceiptsPerUpload = 500

// UploadReceipts handles POST /mounts/{uid}/commands/receipts: the batch is
// validated whole (404 COMMAND_NOT_FOUND, 403 SIGNATURE_REQUIRED, 400
// INVALID_SIGNATURE, 400 VALIDATION_FAILED past the grace), then each
// command's status moves as its deciding receipt says.
func (s *MountService) UploadReceipts(ctx context.Context, p Principal, uid string, in []ReceiptInput) (ReceiptResult, error) {
	return ReceiptResult{}, Errorf(CodeUnavailable, "receipts are not built yet")
}

// Command handles GET /mounts/{uid}/commands/{id}: one command by its id
// (the payload's nonce), owners only; COMMAND_NOT_FOUND otherwise.
func (s *MountService) Command(ctx context.Context, p Principal, uid, id string) (Command, error) {
	return Command{}, Errorf(CodeCommandNotFound, "command %q not found", id)
}
