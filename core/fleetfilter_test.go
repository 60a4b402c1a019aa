package core_test

import (
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

func cmpNode(field core.FilterField, op core.FilterOp) *core.FilterExpr {
	return &core.FilterExpr{Field: field, Op: op}
}

func not(e *core.FilterExpr) *core.FilterExpr {
	return &core.FilterExpr{Op: core.FilterNot, Args: []*core.FilterExpr{e}}
}

func TestFilterMatches(t *testing.T) {
	cut := t0.Add(-15 * time.Minute)
	seen := core.Mount{UID: "M1", Name: "shed", ModelNumber: "HM-1", FirmwareRevision: "1.0", SoftwareRevision: "2.0",
		State: core.StateAssociated, LastSeenAt: t0}
	silent := core.Mount{UID: "M2", State: core.StateIdle}
	atCut := core.Mount{UID: "M3", State: core.StateAssociated, LastSeenAt: cut}
	values := map[core.StateCode]string{core.StateBatteryLevel: "19.5", core.StateCPUTemperature: "-12.25",
		core.StateMountLocked: "1", core.StateHelmetMounted: "0"}
	num := func(f core.FilterField, op core.FilterOp, v float64) *core.FilterExpr {
		e := cmpNode(f, op)
		e.Number = v
		return e
	}
	str := func(f core.FilterField, op core.FilterOp, v string) *core.FilterExpr {
		e := cmpNode(f, op)
		e.String = v
		return e
	}
	boolean := func(f core.FilterField, op core.FilterOp, v bool) *core.FilterExpr {
		e := cmpNode(f, op)
		e.Bool = v
		return e
	}
	at := func(op core.FilterOp, v time.Time) *core.FilterExpr {
		e := cmpNode(core.FilterLastSeenAt, op)
		e.Time = v
		return e
	}
	and := func(args ...*core.FilterExpr) *core.FilterExpr { return &core.FilterExpr{Op: core.FilterAnd, Args: args} }
	or := func(args ...*core.FilterExpr) *core.FilterExpr { return &core.FilterExpr{Op: core.FilterOr, Args: args} }
	for _, c := range []struct {
		name   string
		e      *core.FilterExpr
		m      core.Mount
		latest map[core.StateCode]string
		want   bool
	}{
		{"number as reported, not rounded", num(core.FilterBatteryLevel, core.FilterLt, 20), seen, values, true},
		{"19.5 is not 20", num(core.FilterBatteryLevel, core.FilterEq, 20), seen, values, false},
		{"19.5 >= 19.5", num(core.FilterBatteryLevel, core.FilterGe, 19.5), seen, values, true},
		{"negative decimal", num(core.FilterCPUTemperature, core.FilterGt, -12.5), seen, values, true},
		{"no value: no comparison", num(core.FilterBatteryLevel, core.FilterNe, 20), silent, nil, false},
		{"no value: NOT matches", not(num(core.FilterBatteryLevel, core.FilterLt, 20)), silent, nil, true},
		{"bool true", boolean(core.FilterMountLocked, core.FilterEq, true), seen, values, true},
		{"bool false", boolean(core.FilterHelmetMounted, core.FilterEq, false), seen, values, true},
		{"bool !=", boolean(core.FilterHelmetMounted, core.FilterNe, false), seen, values, false},
		{"bool missing", boolean(core.FilterMountLocked, core.FilterNe, true), silent, nil, false},
		{"presence ONLINE", str(core.FilterPresence, core.FilterEq, "ONLINE"), seen, nil, true},
		{"presence OFFLINE at the cut", str(core.FilterPresence, core.FilterEq, "OFFLINE"), atCut, nil, true},
		{"presence UNKNOWN", str(core.FilterPresence, core.FilterEq, "UNKNOWN"), silent, nil, true},
		{"presence != UNKNOWN", str(core.FilterPresence, core.FilterNe, "UNKNOWN"), silent, nil, false},
		{"lastSeenAt missing", at(core.FilterLt, t0), silent, nil, false},
		{"NOT lastSeenAt missing", not(at(core.FilterGe, t0)), silent, nil, true},
		{"lastSeenAt <=", at(core.FilterLe, t0), seen, nil, true},
		{"lastSeenAt at millisecond precision", at(core.FilterLt, t0.Add(500*time.Microsecond)), seen, nil, false},
		{"bytes: shed > Z", str(core.FilterName, core.FilterGt, "Z"), seen, nil, true},
		{"empty name < a", str(core.FilterName, core.FilterLt, "a"), silent, nil, true},
		{"associationState", str(core.FilterAssociationState, core.FilterEq, "IDLE"), silent, nil, true},
		{"revisions", or(str(core.FilterFirmwareRevision, core.FilterEq, "1.1"), str(core.FilterSoftwareRevision, core.FilterEq, "2.0")), seen, nil, true},
		{"AND", and(str(core.FilterModelNumber, core.FilterEq, "HM-1"), num(core.FilterBatteryLevel, core.FilterLt, 20), str(core.FilterUID, core.FilterEq, "M1")), seen, values, true},
		{"AND short", and(str(core.FilterModelNumber, core.FilterEq, "HM-1"), num(core.FilterBatteryLevel, core.FilterGt, 20)), seen, values, false},
		{"NOT over OR of missing", not(or(num(core.FilterBatteryLevel, core.FilterLt, 20), boolean(core.FilterMountLocked, core.FilterEq, true))), silent, nil, true},
		{"unparseable stored value matches nothing", num(core.FilterBatteryLevel, core.FilterNe, 1), seen, map[core.StateCode]string{core.StateBatteryLevel: "x"}, false},
	} {
		if got := c.e.Matches(c.m, c.latest, cut); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestPresenceOf: the filter's presence is PresenceAt's, at every instant
// around the lapse.
func TestPresenceOf(t *testing.T) {
	after := 15 * time.Minute
	for _, d := range []time.Duration{-time.Hour, -after - time.Millisecond, -after, -after + time.Millisecond, 0} {
		seen := t0.Add(d)
		if got, want := core.PresenceOf(seen, t0.Add(-after)), core.PresenceAt(seen, after, t0); got != want {
			t.Errorf("seen %s before: %s, want %s", -d, got, want)
		}
	}
	if core.PresenceOf(time.Time{}, t0) != core.PresenceUnknown {
		t.Error("never seen")
	}
}
