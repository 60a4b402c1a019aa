package core

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/mountd/mountd/protocol"
)

// StateCode names what a state entry reports (the vocabulary the mount shares).
type StateCode = protocol.StateCode

// The state codes (docs/api.md, "States").
const (
	StateBatteryLevel   = protocol.StateBatteryLevel
	StateCPUTemperature = protocol.StateCPUTemperature
	StateMountLocked    = protocol.StateMountLocked
	StateHelmetMounted  = protocol.StateHelmetMounted
)

// StateCodes lists every known code.
var StateCodes = protocol.StateCodes

// MaxStatesPerReport is the API's limit on one report.
const MaxStatesPerReport = 500

// CheckReportSize refuses a report of more than MaxStatesPerReport entries;
// transports call it before they look at any entry.
func CheckReportSize(n int) error {
	if n > MaxStatesPerReport {
		return Errorf(CodePayloadTooLarge, "a report holds at most %d entries", MaxStatesPerReport)
	}
	return nil
}

// futureTolerance is how far ahead of our clock an entry may claim to be.
const futureTolerance = 5 * time.Minute

// StateEntry is one reported observation.
type StateEntry struct {
	Code       StateCode
	Value      string
	OccurredAt time.Time // truncated to milliseconds, UTC
	ReceivedAt time.Time
	// Verified is true when the entry came in a report signed by the
	// mount's device key (docs/api.md, "The truth from the mount").
	Verified bool
}

// LatestStates are a mount's computed fields: the value of the latest entry
// per code (Newer: a verified entry first), nil when none was reported.
type LatestStates struct {
	MountLocked    *bool
	HelmetMounted  *bool
	BatteryLevel   *int
	CPUTemperature *float64
	// At holds the occurredAt of each code's latest entry.
	At map[StateCode]time.Time
	// Verified says, per code, whether the latest entry came signed by
	// the mount (docs/api.md, "The truth from the mount").
	Verified map[StateCode]bool
}

// KnownStateCode reports whether code is one of the state codes.
func KnownStateCode(code StateCode) bool {
	for _, c := range StateCodes {
		if c == code {
			return true
		}
	}
	return false
}

// ValidateState checks one entry's code and value.
func ValidateState(code StateCode, value string) error { return protocol.ValidateState(code, value) }

// CanonicalState checks value for code and returns the text stored for it
// (the rule is protocol's: it says what a mount may report).
func CanonicalState(code StateCode, value string) (string, error) {
	return protocol.CanonicalState(code, value)
}

// StateInput is an entry as a client sent it, before validation.
type StateInput struct {
	Code       string
	Value      string
	OccurredAt time.Time
	// HasOccurredAt is false when the client sent no occurredAt.
	HasOccurredAt bool
}

// ValidateStates checks a whole report; any bad entry rejects the report.
func ValidateStates(in []StateInput, now time.Time) ([]StateEntry, error) {
	var v Validation
	if len(in) == 0 {
		v.Add("states", "must hold at least one entry")
	}
	out := make([]StateEntry, 0, len(in))
	for i, s := range in {
		if s.Code == "" {
			v.Add(fmt.Sprintf("states[%d].code", i), "is required")
		} else if !KnownStateCode(StateCode(s.Code)) {
			v.Add(fmt.Sprintf("states[%d].code", i), "must be one of BATTERY_LEVEL, CPU_TEMPERATURE, MOUNT_LOCKED, HELMET_MOUNTED")
		} else if canonical, err := CanonicalState(StateCode(s.Code), s.Value); err != nil {
			v.Add(fmt.Sprintf("states[%d].value", i), "%s", err.Error())
		} else {
			s.Value = canonical
		}
		switch {
		case !s.HasOccurredAt:
			v.Add(fmt.Sprintf("states[%d].occurredAt", i), "is required")
		case s.OccurredAt.After(now.Add(futureTolerance)):
			v.Add(fmt.Sprintf("states[%d].occurredAt", i), "must not be more than 5 minutes in the future")
		}
		out = append(out, StateEntry{Code: StateCode(s.Code), Value: s.Value,
			OccurredAt: s.OccurredAt.UTC().Truncate(time.Millisecond), ReceivedAt: now})
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// LatestPerCode keeps, of entries, the latest per code by Newer (ties
// broken by the larger value text so that every replica picks the same one).
func LatestPerCode(entries []StateEntry) []StateEntry {
	best := map[StateCode]StateEntry{}
	for _, e := range entries {
		if b, ok := best[e.Code]; !ok || Newer(e, b) {
			best[e.Code] = e
		}
	}
	out := make([]StateEntry, 0, len(best))
	for _, c := range StateCodes {
		if e, ok := best[c]; ok {
			out = append(out, e)
		}
	}
	return out
}

// Newer reports whether a supersedes b as the latest entry of its code: a
// verified entry outranks an unverified one whatever their instants
// (docs/api.md, "The truth from the mount": once the association has a
// verified entry of a code, its unverified entries count no more; a mount
// without a device key has none, so there the latest entry wins), then the
// later occurredAt, then the larger value text. Every holder of latest values
// (the stores' latest rows, the state cache, the report's merge) keeps them
// by this rule, so the computed fields, alarms, the fleet filter and
// requireIdle agree.
func Newer(a, b StateEntry) bool {
	if a.Verified != b.Verified {
		return a.Verified
	}
	if !a.OccurredAt.Equal(b.OccurredAt) {
		return a.OccurredAt.After(b.OccurredAt)
	}
	return a.Value > b.Value
}

// ComputeLatest derives a mount's computed fields from the latest entry per
// code: battery rounded to an integer, temperature to one decimal, half away
// from zero.
func ComputeLatest(latest []StateEntry) LatestStates {
	var l LatestStates
	l.At = map[StateCode]time.Time{}
	l.Verified = map[StateCode]bool{}
	for _, e := range latest {
		l.At[e.Code] = e.OccurredAt
		l.Verified[e.Code] = e.Verified
		switch e.Code {
		case StateMountLocked:
			b := e.Value == "1"
			l.MountLocked = &b
		case StateHelmetMounted:
			b := e.Value == "1"
			l.HelmetMounted = &b
		case StateBatteryLevel:
			if f, err := strconv.ParseFloat(e.Value, 64); err == nil {
				n := int(math.Round(f))
				l.BatteryLevel = &n
			}
		case StateCPUTemperature:
			if f, err := strconv.ParseFloat(e.Value, 64); err == nil {
				t := math.Round(f*10) / 10
				l.CPUTemperature = &t
			}
		}
	}
	return l
}

// ReportCheck is what a report asks of InsertReport beyond storing its
// entries.
type ReportCheck struct {
	// Check, when set, decides on the mount row read in the report's
	// transaction whether the report may be stored.
	Check func(Mount) error
	// SoftwareRevision, when not empty, is the revision the mount signed
	// that it runs.
	SoftwareRevision string
	// Counter is a verified report's counter (nil for an unsigned one):
	// with it the store moves the mount's INSTALLING rollout target
	// (ObserveRolloutReport, AdvanceRollout) in the report's transaction
	// and appends the events of that to RolloutEvents.
	Counter       *uint64
	RolloutEvents *[]*Event
	// Watch, when set, evaluates presence and alarm rules in the report's
	// transaction once its entries are stored, under the mount's lock, as
	// AlarmStore.WatchMount does; the events it appended (after the
	// report's) go to WatchEvents.
	Watch       func(MountWatch) (WatchChanges, error)
	WatchEvents *[]*Event
	// SeenAt, when not zero, is the lastSeenAt the report gives the mount:
	// the report's event shows the mount with it.
	SeenAt time.Time
	// LightCut, when not zero, says no enabled rule applies to the mount:
	// unless the mount was announced offline or last seen at or before
	// LightCut (a lapse to announce), the report only moves lastSeenAt,
	// without Watch's lock and reads. Otherwise the store answers
	// ErrFullWatch and the report is tried again without LightCut.
	LightCut time.Time
}

// ErrFullWatch asks for a report to be tried again with its full watch
// (ReportCheck.LightCut).
var ErrFullWatch = errors.New("the report needs its full watch")

// StateFilter narrows a state history listing; From is inclusive, To
// exclusive.
type StateFilter struct {
	Code *StateCode
	From *time.Time
	To   *time.Time
}

// StateStore persists reported states.
type StateStore interface {
	// InsertStates stores entries for a mount accountID owns (IDLE or
	// ASSOCIATED) in one transaction, skipping duplicates, and moves the
	// latest value per code forward. It returns the mount as it was read
	// for the ownership check (without computed fields) and the entries
	// newly stored. MOUNT_NOT_FOUND when accountID does not own the mount.
	// The event (see MountStore) is appended when an entry is new, with
	// the new entries as its States.
	InsertStates(ctx context.Context, uid, accountID string, entries []StateEntry, e *Event) (Mount, []StateEntry, error)
	// InsertReport is InsertStates with r's checks and changes made in
	// the same transaction: r.Check sees the mount row the ownership check
	// read, before anything is stored, and its error aborts the report
	// (nothing stored); a non-empty r.SoftwareRevision different from the
	// mount's becomes the mount's (the mount returned and the event's
	// show it). Entries keep their Verified; an entry equal to a stored
	// one is a duplicate, whatever either's Verified.
	InsertReport(ctx context.Context, uid, accountID string, entries []StateEntry, r ReportCheck, e *Event) (Mount, []StateEntry, error)
	// LatestStates returns the latest entry per code that accountID's
	// associations with the mount reported.
	LatestStates(ctx context.Context, uid, accountID string) ([]StateEntry, error)
	// ListStates lists the history accountID's associations with the mount
	// reported, newest first.
	ListStates(ctx context.Context, uid, accountID string, f StateFilter, p Page) ([]StateEntry, int, error)
}
