package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// CommandCode names a command for a mount.
type CommandCode string

// The command codes (docs/api.md, "Commands").
const (
	CmdAssociateOwner CommandCode = "ASSOCIATE_OWNER"
	CmdReleaseHelmet  CommandCode = "RELEASE_HELMET"
	CmdConfigureAlarm CommandCode = "CONFIGURE_ALARM"
	CmdSetRFIDMode    CommandCode = "SET_RFID_MODE"
	CmdAddNfcTag      CommandCode = "ADD_NFC_TAG"
	CmdRemoveNfcTag   CommandCode = "REMOVE_NFC_TAG"
	CmdSyncNfcTags    CommandCode = "SYNC_NFC_TAGS"
)

// CommandLifetime is how long a mount accepts a command after generation.
const CommandLifetime = 5 * time.Minute

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
	IssuedBy    string
}

// CommandParams are the query parameters of GET /mounts/{uid}/query.
type CommandParams map[string]string

// paramRule says which values a parameter takes.
type paramRule struct {
	values  []string
	pattern *regexp.Regexp
}

var (
	levels    = []string{"LOW", "MEDIUM", "HIGH"}
	tagUIDArg = regexp.MustCompile(`^([0-9A-Fa-f]{2}:?){3,9}[0-9A-Fa-f]{2}$`)
)

// commandCatalogue lists the parameters of each queryable code; all are required.
var commandCatalogue = map[CommandCode]map[string]paramRule{
	CmdReleaseHelmet: {},
	CmdConfigureAlarm: {
		"alarmMode":        {values: []string{"OFF", "ON", "SILENT"}},
		"alarmSensitivity": {values: levels},
		"alarmVolume":      {values: levels},
	},
	CmdSetRFIDMode:  {"rfidMode": {values: []string{"NORMAL", "LEARN", "DISABLED"}}},
	CmdAddNfcTag:    {"tagUid": {pattern: tagUIDArg}},
	CmdRemoveNfcTag: {"tagUid": {pattern: tagUIDArg}},
	CmdSyncNfcTags:  {},
}

// CommandParamNames lists every parameter name any code takes.
var CommandParamNames = []string{"alarmMode", "alarmSensitivity", "alarmVolume", "rfidMode", "tagUid"}

// ValidateCommandQuery checks a code and its parameters and returns them
// normalised (tag uids upper case without colons).
func ValidateCommandQuery(code string, params CommandParams) (CommandCode, CommandParams, error) {
	var v Validation
	rules, ok := commandCatalogue[CommandCode(code)]
	if code == "" {
		v.Add("code", "is required")
		return "", nil, v.Err()
	}
	if !ok {
		v.Add("code", "must be one of RELEASE_HELMET, CONFIGURE_ALARM, SET_RFID_MODE, ADD_NFC_TAG, REMOVE_NFC_TAG, SYNC_NFC_TAGS")
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
		case rule.values != nil && !containsString(rule.values, value):
			v.Add(name, "must be one of %s", strings.Join(rule.values, ", "))
		case rule.pattern != nil && !rule.pattern.MatchString(value):
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
	if name, ok := out["tagUid"]; ok && !validTagLength(name) {
		v.Add("tagUid", "must be a tag uid of 4, 7 or 10 bytes in hexadecimal")
	}
	sort.Slice(v.Fields, func(i, j int) bool { return v.Fields[i].Field < v.Fields[j].Field })
	if err := v.Err(); err != nil {
		return "", nil, err
	}
	return CommandCode(code), out, nil
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// NormalizeTagUID upper-cases a tag uid and drops colons.
func NormalizeTagUID(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, ":", ""))
}

func validTagLength(normalized string) bool {
	n := len(normalized)
	return n == 8 || n == 14 || n == 20
}

// ValidTagUID reports whether s is a tag uid of 4, 7 or 10 bytes in hex.
func ValidTagUID(s string) bool {
	n := NormalizeTagUID(s)
	if !validTagLength(n) {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil
}

// BuildPayload renders the text a command's signature covers:
// `<generatedAt ms>;<code>;<mountUid>;<params>;<nonce>`, params as key=value
// sorted by key and joined by ',' (list items joined by '+').
func BuildPayload(generatedAt time.Time, code CommandCode, uid string, params map[string]string, nonce string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + params[k]
	}
	return strconv.FormatInt(generatedAt.UnixMilli(), 10) + ";" + string(code) + ";" + uid + ";" +
		strings.Join(pairs, ",") + ";" + nonce
}

// Payload is a command's signed text taken apart: what BuildPayload joined.
type Payload struct {
	GeneratedAt time.Time
	Code        CommandCode
	MountUID    string
	Params      map[string]string
	Nonce       string
}

// ParsePayload takes a payload apart; false for anything not in
// BuildPayload's shape (five fields, a millisecond instant, code and uid
// present, key=value parameters without repeats, a nonce as NewNonce makes).
func ParsePayload(s string) (Payload, bool) {
	parts := strings.Split(s, ";")
	if len(parts) != 5 {
		return Payload{}, false
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || parts[1] == "" || parts[2] == "" || !validNonce(parts[4]) {
		return Payload{}, false
	}
	p := Payload{GeneratedAt: time.UnixMilli(ms).UTC(), Code: CommandCode(parts[1]), MountUID: parts[2],
		Params: map[string]string{}, Nonce: parts[4]}
	if parts[3] != "" {
		for _, pair := range strings.Split(parts[3], ",") {
			k, v, ok := strings.Cut(pair, "=")
			if !ok || k == "" {
				return Payload{}, false
			}
			if _, dup := p.Params[k]; dup {
				return Payload{}, false
			}
			p.Params[k] = v
		}
	}
	return p, true
}

// ListParam reads a list parameter of a payload: items joined by '+',
// nil for none.
func ListParam(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, "+")
}

// ValidCommandParam reports whether value is one the catalogue allows for
// code's parameter name.
func ValidCommandParam(code CommandCode, name, value string) bool {
	rule, ok := commandCatalogue[code][name]
	switch {
	case !ok:
		return false
	case rule.pattern != nil:
		return rule.pattern.MatchString(value)
	}
	return slices.Contains(rule.values, value)
}

// validNonce: 32 lowercase hex characters, as NewNonce makes them.
func validNonce(s string) bool {
	if len(s) != 32 {
		return false
	}
	for _, c := range s {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// NewNonce returns 32 lowercase hex characters, fresh for every command.
func NewNonce() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}

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
	// InsertCommand records an issued command.
	InsertCommand(ctx context.Context, c Command) error
	// ListCommands lists the commands accountID issued to a mount, newest
	// first; commands of one millisecond in reverse order of issue.
	ListCommands(ctx context.Context, uid, accountID string, p Page) ([]Command, int, error)
}
