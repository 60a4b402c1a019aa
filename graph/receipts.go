package graph

import (
	"fmt"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
	"github.com/mountd/mountd/protocol"
)

// reportSignature is what reportStates' signed-message arguments add, nil
// without a signature (the others are then not looked at), as in REST.
func reportSignature(counter *int, softwareRevision, signature *string) (*core.ReportSignature, error) {
	if signature == nil {
		return nil, nil
	}
	sig := &core.ReportSignature{Signature: *signature}
	var v core.Validation
	switch {
	case counter == nil:
		v.Add("counter", "is required with a signature")
	case *counter < 0:
		v.Add("counter", "must be a number from 0")
	default:
		sig.Counter = uint64(*counter)
	}
	if softwareRevision != nil {
		sig.SoftwareRevision = *softwareRevision
	}
	return sig, v.Err()
}

// receiptInputs checks each receipt's shape as REST does, naming
// receipts[i].field: a nonce, a counter from 0, at in RFC 3339 UTC with
// milliseconds; the outcome's value is core's to judge.
func receiptInputs(receipts []model.ReceiptInput) ([]core.ReceiptInput, error) {
	if len(receipts) > core.MaxReceiptsPerUpload {
		return nil, core.Errorf(core.CodePayloadTooLarge, "an upload holds at most %d receipts", core.MaxReceiptsPerUpload)
	}
	var v core.Validation
	in := make([]core.ReceiptInput, len(receipts))
	for i, rc := range receipts {
		field := func(name string) string { return fmt.Sprintf("receipts[%d].%s", i, name) }
		ri := core.ReceiptInput{Nonce: rc.Nonce, Outcome: rc.Outcome}
		if rc.Nonce == "" {
			v.Add(field("nonce"), "is required")
		}
		if rc.Reason != nil {
			ri.Reason = *rc.Reason
		}
		if rc.Counter < 0 {
			v.Add(field("counter"), "must be a number from 0")
		} else {
			ri.Counter = uint64(rc.Counter)
		}
		if at, err := time.Parse(protocol.TimeLayout, rc.At); err != nil || !strings.HasSuffix(rc.At, "Z") {
			v.Add(field("at"), "must be an RFC 3339 UTC date-time with milliseconds")
		} else {
			ri.At = at.UTC()
		}
		if rc.Signature != nil {
			ri.Signature = *rc.Signature
		}
		in[i] = ri
	}
	return in, v.Err()
}
