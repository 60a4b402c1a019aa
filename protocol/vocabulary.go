package protocol

import (
	"encoding/hex"
	"regexp"
	"slices"
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
	// CmdInstallFirmware makes the mount take the image that follows on
	// the firmware characteristic (docs/ble.md); rollouts send it.
	CmdInstallFirmware CommandCode = "INSTALL_FIRMWARE"
)

// CommandCodes lists every command code.
var CommandCodes = []CommandCode{CmdAssociateOwner, CmdReleaseHelmet, CmdConfigureAlarm, CmdSetRFIDMode,
	CmdAddNfcTag, CmdRemoveNfcTag, CmdSyncNfcTags, CmdInstallFirmware}

// CommandLifetime is how long a mount accepts a command after generation
// (the mount's own window; the server's MOUNTD_COMMAND_TTL is at most this).
const CommandLifetime = 5 * time.Minute

// StateCode names what a state entry reports.
type StateCode string

// The state codes (docs/api.md, "States").
const (
	StateBatteryLevel   StateCode = "BATTERY_LEVEL"
	StateCPUTemperature StateCode = "CPU_TEMPERATURE"
	StateMountLocked    StateCode = "MOUNT_LOCKED"
	StateHelmetMounted  StateCode = "HELMET_MOUNTED"
)

// StateCodes lists every known code.
var StateCodes = []StateCode{StateBatteryLevel, StateCPUTemperature, StateMountLocked, StateHelmetMounted}

// TimeLayout is the date-time text of the API and of BLE messages: UTC
// with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t in TimeLayout.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ParamRule says which values a command parameter takes: one of Values,
// or text matching Pattern, which Text describes (for help texts).
type ParamRule struct {
	Values  []string
	Pattern *regexp.Regexp
	Text    string
}

var (
	levels    = []string{"LOW", "MEDIUM", "HIGH"}
	tagUIDArg = regexp.MustCompile(`^([0-9A-Fa-f]{2}:?){3,9}[0-9A-Fa-f]{2}$`)
	// An INSTALL_FIRMWARE's parameters: a semantic version, the image's
	// SHA-256 in lowercase hex, and its size in bytes.
	revisionArg = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	sha256Arg   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	sizeArg     = regexp.MustCompile(`^[1-9][0-9]{0,9}$`)
)

const tagUIDText = "a tag uid of 4, 7 or 10 bytes in hexadecimal, colons allowed (04:A1:B2:C3)"

// commandCatalogue lists the parameters of each queryable code; all are
// required. The server checks a query against it, the mount a command.
var commandCatalogue = map[CommandCode]map[string]ParamRule{
	CmdReleaseHelmet: {},
	CmdConfigureAlarm: {
		"alarmMode":        {Values: []string{"OFF", "ON", "SILENT"}},
		"alarmSensitivity": {Values: levels},
		"alarmVolume":      {Values: levels},
	},
	CmdSetRFIDMode:  {"rfidMode": {Values: []string{"NORMAL", "LEARN", "DISABLED"}}},
	CmdAddNfcTag:    {"tagUid": {Pattern: tagUIDArg, Text: tagUIDText}},
	CmdRemoveNfcTag: {"tagUid": {Pattern: tagUIDArg, Text: tagUIDText}},
	CmdSyncNfcTags:  {},
	CmdInstallFirmware: {
		"revision": {Pattern: revisionArg, Text: "a semantic version (1.4.0)"},
		"sha256":   {Pattern: sha256Arg, Text: "the image's SHA-256, 64 lowercase hex characters"},
		"size":     {Pattern: sizeArg, Text: "the image's size in bytes"},
	},
}

// CommandParamRules returns the parameters code takes; ok is false for a
// code that cannot be queried (ASSOCIATE_OWNER, unknown codes).
func CommandParamRules(code CommandCode) (rules map[string]ParamRule, ok bool) {
	rules, ok = commandCatalogue[code]
	return rules, ok
}

// CommandParamNames lists every parameter name any code takes.
var CommandParamNames = []string{"alarmMode", "alarmSensitivity", "alarmVolume", "rfidMode", "tagUid",
	"revision", "sha256", "size"}

// ValidCommandParam reports whether value is one the catalogue allows for
// code's parameter name.
func ValidCommandParam(code CommandCode, name, value string) bool {
	rule, ok := commandCatalogue[code][name]
	switch {
	case !ok:
		return false
	case rule.Pattern != nil:
		return rule.Pattern.MatchString(value)
	}
	return slices.Contains(rule.Values, value)
}

// NormalizeTagUID upper-cases a tag uid and drops colons.
func NormalizeTagUID(s string) string {
	return strings.ToUpper(strings.ReplaceAll(s, ":", ""))
}

// ValidTagLength reports whether a normalised tag uid has 4, 7 or 10 bytes.
func ValidTagLength(normalized string) bool {
	n := len(normalized)
	return n == 8 || n == 14 || n == 20
}

// ValidTagUID reports whether s is a tag uid of 4, 7 or 10 bytes in hex.
func ValidTagUID(s string) bool {
	n := NormalizeTagUID(s)
	if !ValidTagLength(n) {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil
}
