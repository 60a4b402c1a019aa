package core

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/mountd/mountd/protocol"
)

// CommandCode names a command for a mount (the vocabulary the mount shares).
type CommandCode = protocol.CommandCode

// The command codes (docs/api.md, "Commands").
const (
	CmdAssociateOwner  = protocol.CmdAssociateOwner
	CmdReleaseHelmet   = protocol.CmdReleaseHelmet
	CmdConfigureAlarm  = protocol.CmdConfigureAlarm
	CmdSetRFIDMode     = protocol.CmdSetRFIDMode
	CmdAddNfcTag       = protocol.CmdAddNfcTag
	CmdRemoveNfcTag    = protocol.CmdRemoveNfcTag
	CmdSyncNfcTags     = protocol.CmdSyncNfcTags
	CmdInstallFirmware = protocol.CmdInstallFirmware
)

// CommandCodes lists every command code.
var CommandCodes = protocol.CommandCodes

// CommandLifetime is how long a mount accepts a command after generation.
const CommandLifetime = protocol.CommandLifetime

// Command is a signed instruction a phone carries to a mount over BLE.
type Command struct {
	ID          string
	MountUID    string
	AccountID   string
	Code        CommandCode
	Params      map[string]string
	Data        map[string]any
	GeneratedAt time.Time
	Payload     string
	// SignedToken is the hex Ed25519 signature of Payload; empty for
	// ASSOCIATE_OWNER, which carries the key itself.
	SignedToken string
	// IssuedBy is the issuer's id (a user id or a client id);
	// IssuedByName its name when the command was issued: a person's
	// username, or an API client's name ("" for an external issuer's
	// client and for commands stored before names: IssuerName falls back
	// to the id). A later rename does not change it.
	IssuedBy     string
	IssuedByName string
	// ExpiresAt is when the command can no longer run: GeneratedAt plus
	// the server's command TTL (data.expiresAt).
	ExpiresAt time.Time
	// The lifecycle (docs/api.md, "The truth from the mount"): Status moved
	// at StatusAt (the server's clock); Reason is the mount's for REFUSED;
	// Verified says the deciding receipt was signed by the mount's device
	// key.
	Status   CommandStatus
	StatusAt time.Time
	Reason   string
	Verified bool
	// JobID is the job the command was signed for (a phone's pending
	// commands); empty for a command asked for directly.
	JobID string
	// RolloutID is the rollout an INSTALL_FIRMWARE was signed for; empty
	// for a command asked for directly.
	RolloutID string
	// GrantID is the rider grant of an offline use (CONTRACT §21): the
	// command was never signed by the server (Payload and SignedToken
	// empty) and came back in the mount's signed receipt.
	GrantID string
}

// IssuerName is who issued c as the API shows it: IssuedByName, or the
// id when no name was recorded.
func (c Command) IssuerName() string {
	if c.IssuedByName != "" {
		return c.IssuedByName
	}
	return c.IssuedBy
}

// CommandStatus is where a command stands in its lifecycle
// (docs/api.md, "The truth from the mount").
type CommandStatus string

// The command statuses: ISSUED, then EXECUTED or REFUSED from a receipt, or
// UNCONFIRMED when ExpiresAt passed without one (a late receipt still moves
// it on).
const (
	CommandIssued      CommandStatus = "ISSUED"
	CommandExecuted    CommandStatus = "EXECUTED"
	CommandRefused     CommandStatus = "REFUSED"
	CommandUnconfirmed CommandStatus = "UNCONFIRMED"
)

// CommandParams are the query parameters of GET /mounts/{uid}/query.
type CommandParams map[string]string

// CommandParamNames lists every parameter name any code takes.
var CommandParamNames = protocol.CommandParamNames

// ValidateCommandQuery checks a code and its parameters and returns them
// normalised (tag uids upper case without colons).
func ValidateCommandQuery(code string, params CommandParams) (CommandCode, CommandParams, error) {
	var v Validation
	rules, ok := protocol.CommandParamRules(CommandCode(code))
	if code == "" {
		v.Add("code", "is required")
		return "", nil, v.Err()
	}
	if !ok {
		v.Add("code", "must be one of RELEASE_HELMET, CONFIGURE_ALARM, SET_RFID_MODE, ADD_NFC_TAG, REMOVE_NFC_TAG, SYNC_NFC_TAGS, INSTALL_FIRMWARE")
		return "", nil, v.Err()
	}
	out := CommandParams{}
	names := make([]string, 0, len(params))
	for name := range params {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		value := params[name]
		rule, known := rules[name]
		switch {
		case !known:
			v.Add(name, "does not belong to %s", code)
		case rule.Values != nil && !slices.Contains(rule.Values, value):
			v.Add(name, "must be one of %s", strings.Join(rule.Values, ", "))
		case rule.Pattern != nil && !rule.Pattern.MatchString(value):
			v.Add(name, "must be a tag uid of 4, 7 or 10 bytes in hexadecimal")
		default:
			if name == "tagUid" {
				value = NormalizeTagUID(value)
			}
			out[name] = value
		}
	}
	for name := range rules {
		if _, given := params[name]; !given {
			v.Add(name, "is required for %s", code)
		}
	}
	if name, ok := out["tagUid"]; ok && !protocol.ValidTagLength(name) {
		v.Add("tagUid", "must be a tag uid of 4, 7 or 10 bytes in hexadecimal")
	}
	sort.Slice(v.Fields, func(i, j int) bool { return v.Fields[i].Field < v.Fields[j].Field })
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	return CommandCode(code), out, nil
}

// NormalizeTagUID upper-cases a tag uid and drops colons.
func NormalizeTagUID(s string) string { return protocol.NormalizeTagUID(s) }

// ValidTagUID reports whether s is a tag uid of 4, 7 or 10 bytes in hex.
func ValidTagUID(s string) bool { return protocol.ValidTagUID(s) }

// Signer creates association keys and signs command payloads. Private keys
// exist in the clear only inside the adapter.
type Signer interface {
	// NewKey creates an Ed25519 key pair for uid, the private half sealed.
	NewKey(ctx context.Context, uid string) (MountKey, error)
	// Sign returns the Ed25519 signature of payload with uid's key.
	Sign(ctx context.Context, uid string, key MountKey, payload []byte) ([]byte, error)
}

// CommandStore records every command issued (the audit).
type CommandStore interface {
	// InsertCommand records an issued command, and appends e (see
	// MountStore) when given. A command with JobID moves its job's target
	// at the mount in the same transaction; CONFLICT, with nothing stored,
	// unless the job is ACTIVE, unexpired at c.GeneratedAt, and has the
	// mount as a target.
	InsertCommand(ctx context.Context, c Command, e *Event) error
	// ListCommands lists the commands accountID issued to a mount, newest
	// first; commands of one millisecond in reverse order of issue.
	ListCommands(ctx context.Context, uid, accountID string, p Page) ([]Command, int, error)
	// CommandsByID returns those of ids (command ids, at most
	// MaxReceiptsPerUpload) that accountID's associations issued to mount
	// uid, in no particular order; unknown ids are left out.
	CommandsByID(ctx context.Context, uid, accountID string, ids []string) ([]Command, error)
	// DecideCommand applies a deciding receipt with one conditional update
	// that only moves forward: EXECUTED unless the command is EXECUTED
	// already; REFUSED when it is ISSUED or UNCONFIRMED, or REFUSED by a
	// receipt of a higher counter (its StatusAt then stays). changed says
	// whether the command moved; only then is e appended, with Command set
	// to the command as it now stands. COMMAND_NOT_FOUND when accountID
	// issued no such command to the mount. A job command's target moves in
	// the same transaction (core.AdvanceJobTarget); a job thereby completed
	// gets its JOB_COMPLETED event, added to d.AccountEvents.
	DecideCommand(ctx context.Context, d CommandDecision, e *Event) (c Command, changed bool, err error)
	// UnconfirmCommands turns up to limit ISSUED commands whose ExpiresAt
	// is at or before now UNCONFIRMED (StatusAt now) with one conditional
	// statement, and appends, in the same transaction, the event that
	// event makes of each, with Command set; it returns those events. A
	// command that another caller turned first is not returned. A command
	// whose mount another account owns now is turned without an event
	// (its event's ID stays zero): the event's mount would show the new
	// owner's association to the former one. A job command's target moves
	// in the same transaction (UNCONFIRMED never finishes a target, so no
	// job completes here).
	UnconfirmCommands(ctx context.Context, now time.Time, limit int, event func(Command) *Event) ([]*Event, error)
}
