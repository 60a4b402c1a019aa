package sdk

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/mountd/mountd/protocol"
)

// MaxSyncCommands bounds the commands one Sync runs on a mount. The API
// offers one command per job that waits there (an account has at most 50
// active jobs), so this is a bound against a server gone wrong, not a
// queue: what is left waits for the next phone, freshly signed.
const MaxSyncCommands = 50

// SyncOutcome is what became of one pending command during a Sync.
type SyncOutcome string

// The outcomes of a pending command.
const (
	// SyncExecuted: the mount ran it (its receipt says so).
	SyncExecuted SyncOutcome = "EXECUTED"
	// SyncRefused: the mount refused it; Reason says why. Not an error:
	// the API decides from the receipt whether the job offers it again.
	SyncRefused SyncOutcome = "REFUSED"
	// SyncNoAnswer: written, but no answer came (the link was lost or the
	// mount was silent); the API will call it UNCONFIRMED.
	SyncNoAnswer SyncOutcome = "NO_ANSWER"
	// SyncSkipped: Sync did not write this command to the mount: an
	// INSTALL_FIRMWARE it could not start (bad parameters, the image's
	// download failed or did not match, a link without the firmware
	// characteristic); Reason says why. The other commands still run.
	SyncSkipped SyncOutcome = "SKIPPED"
)

// SyncedCommand is one pending command and what became of it.
type SyncedCommand struct {
	ID      string      `json:"id"`    // the command's id (its payload's nonce)
	JobID   string      `json:"jobId"` // the job it was signed for; empty if none
	Code    string      `json:"code"`
	Outcome SyncOutcome `json:"outcome"`
	Reason  string      `json:"reason,omitempty"` // the mount's, for REFUSED; Sync's, for SKIPPED
}

// SyncSummary is what one Sync did at a mount.
type SyncSummary struct {
	UID string `json:"uid"`
	// Offered is how many commands the API offered; Commands are those
	// Sync got to, in order (at most MaxSyncCommands). Offered minus
	// len(Commands) were left for the next phone (the bound, or a lost
	// link).
	Offered  int             `json:"offered"`
	Commands []SyncedCommand `json:"commands"`
	// Pending is how many of the mount's receipts and reports wait in the
	// upload queue; 0 when the API has them all.
	Pending int `json:"pending"`
}

// Count returns how many commands ended with outcome o.
func (s SyncSummary) Count(o SyncOutcome) int {
	n := 0
	for _, c := range s.Commands {
		if c.Outcome == o {
			n++
		}
	}
	return n
}

// pendingCommand is a Command of GET /mounts/{uid}/pending-commands: what
// the mount needs (the BLE command) and what the summary names it by.
type pendingCommand struct {
	protocol.BLECommand
	ID    string `json:"id"`
	JobID string `json:"jobId"`
}

// confirmations are the states an action waits for after a code's
// result, so the report that proves the effect is uploaded with the
// receipt; codes without one end at the result.
var confirmations = map[string]func(map[string]string) bool{
	string(protocol.CmdReleaseHelmet): helmetReleased,
}

// Sync runs a connected mount's pending commands (the jobs waiting there)
// one by one, at most MaxSyncCommands, and uploads what the mount said
// (its signed receipts and reports) through the upload queue, so nothing is
// lost offline. It checks the token with the identity provider first. A
// command the mount refuses is in the summary, not an error. A lost link
// (or a mount that stops answering) ends the Sync: what was collected is
// uploaded and returned with the error (ErrNotConnected or ErrTimeout).
func (c *Client) Sync(ctx context.Context, uid string) (SyncSummary, error) {
	sum := SyncSummary{UID: uid}
	if err := c.api.validate(ctx, uid); err != nil {
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return sum, err
	}
	d, err := c.connected(uid)
	if err != nil {
		return sum, err
	}
	var page struct {
		Commands []pendingCommand `json:"commands"`
	}
	if err := c.api.do(ctx, http.MethodGet, "/mounts/"+url.PathEscape(uid)+"/pending-commands", nil, &page); err != nil {
		return sum, err
	}
	sum.Offered = len(page.Commands)
	cmds := page.Commands[:min(len(page.Commands), MaxSyncCommands)]
	var uploads []Upload
	var stop error
	installPending := 0
	for _, pc := range cmds {
		sc := SyncedCommand{ID: pc.ID, JobID: pc.JobID, Code: pc.Code}
		if p, ok := protocol.ParsePayload(pc.Payload); ok && sc.ID == "" {
			sc.ID = p.Nonce
		}
		if pc.Code == string(protocol.CmdInstallFirmware) {
			// The image streams, the mount restarts; install uploads its
			// receipt and report itself.
			inst, written, ierr := c.install(ctx, uid, pc.BLECommand)
			installPending += inst.Pending
			if !written {
				// Nothing reached the mount (a bad command, the image's
				// download, a link without firmware): the others still run.
				sc.Outcome, sc.Reason = SyncSkipped, ierr.Error()
				sum.Commands = append(sum.Commands, sc)
				continue
			}
			var refused *RefusedError
			switch {
			case inst.Result.Accepted: // the receipt at the end of the transfer
				sc.Outcome = SyncExecuted
			case inst.Result.Reason != "":
				sc.Outcome, sc.Reason = SyncRefused, inst.Result.Reason
			default:
				// No receipt (the link dropped as the mount finished): its
				// report, if any, tells the API; Sync claims nothing.
				sc.Outcome = SyncNoAnswer
			}
			sum.Commands = append(sum.Commands, sc)
			if ierr != nil && !errors.As(ierr, &refused) {
				stop = ierr
				break
			}
			if nd, err := c.connected(uid); err == nil {
				d = nd // the mount restarted: a new link
			}
			continue
		}
		dl, werr := c.write(ctx, d, pc.BLECommand, confirmations[pc.Code])
		uploads = append(uploads, dl.uploads(uid)...)
		switch {
		case dl.result != nil && dl.result.Accepted:
			sc.Outcome = SyncExecuted // a missing confirming state changes nothing: the receipt decides
		case dl.result != nil:
			sc.Outcome, sc.Reason = SyncRefused, dl.result.Reason
		default:
			sc.Outcome = SyncNoAnswer
		}
		sum.Commands = append(sum.Commands, sc)
		if dl.result == nil && werr != nil {
			stop = werr // lost link, silent mount, or ctx: the rest waits for the next phone
			break
		}
		if ctx.Err() != nil {
			stop = ctx.Err()
			break
		}
	}
	// Uploads run on a context of their own: a Sync cut short (ctx) still
	// queues what the mount said.
	pending, uerr := c.up.carry(context.WithoutCancel(ctx), c.cfg.UploadWait, uploads)
	sum.Pending = pending + installPending
	if uerr != nil {
		uerr = fmt.Errorf("sdk: the mount answered, but uploading what it said failed: %w", uerr)
	}
	if stop == nil {
		c.carryLog(ctx, d) // the mount's offline log, as after every action
	}
	return sum, errors.Join(stop, uerr)
}
