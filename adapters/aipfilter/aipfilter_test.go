package aipfilter_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/aipfilter"
	"github.com/mountd/mountd/core"
)

// show writes a tree compactly, for the table below.
func show(e *core.FilterExpr) string {
	switch e.Op {
	case core.FilterAnd, core.FilterOr, core.FilterNot:
		parts := make([]string, len(e.Args))
		for i, a := range e.Args {
			parts[i] = show(a)
		}
		return string(e.Op) + "(" + strings.Join(parts, ", ") + ")"
	}
	var v string
	switch core.FilterFields[e.Field] {
	case core.FilterNumber:
		v = strconv.FormatFloat(e.Number, 'g', -1, 64)
	case core.FilterBool:
		v = map[bool]string{true: "true", false: "false"}[e.Bool]
	case core.FilterTime:
		v = e.Time.Format(time.RFC3339Nano)
	default:
		v = `"` + e.String + `"`
	}
	return string(e.Field) + string(e.Op) + v
}

func TestParseFilter(t *testing.T) {
	p := aipfilter.New()
	for _, c := range []struct{ in, want string }{
		{`batteryLevel < 20`, `batteryLevel<20`},
		{`cpuTemperature >= 45.5`, `cpuTemperature>=45.5`},
		{`cpuTemperature > -5`, `cpuTemperature>-5`},
		{`mountLocked = true`, `mountLocked=true`},
		{`helmetMounted != false`, `helmetMounted!=false`},
		{`lastSeenAt < "2026-11-26T10:00:00Z"`, `lastSeenAt<2026-11-26T10:00:00Z`},
		{`lastSeenAt >= "2026-11-26T11:00:00.5+01:00"`, `lastSeenAt>=2026-11-26T10:00:00.5Z`},
		{`associationState = "IDLE"`, `associationState="IDLE"`},
		{`presence != "UNKNOWN"`, `presence!="UNKNOWN"`},
		{`name <= "M"`, `name<="M"`},
		{`batteryLevel < 20 AND presence = "OFFLINE" AND modelNumber = "HM-1"`,
			`AND(batteryLevel<20, presence="OFFLINE", modelNumber="HM-1")`},
		{`uid = "a" OR uid = "b" OR NOT (uid = "c" AND firmwareRevision = "1.0")`,
			`OR(uid="a", uid="b", NOT(AND(uid="c", firmwareRevision="1.0")))`},
		{`-softwareRevision = "2"`, `NOT(softwareRevision="2")`},
		{`  (batteryLevel > 1)  `, `batteryLevel>1`},
	} {
		got, err := p.ParseFilter(c.in)
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if s := show(got); s != c.want {
			t.Errorf("%s: got %s, want %s", c.in, s, c.want)
		}
	}
}

func TestParseFilterRefuses(t *testing.T) {
	p := aipfilter.New()
	many := strings.Repeat(`uid="a" OR `, 100) + `uid="a"`
	for _, c := range []struct{ in, want string }{
		{``, "must not be blank"},
		{`   `, "must not be blank"},
		{strings.Repeat("a", core.MaxFilterLength+1), "at most 2000 characters"},
		{many, "102 terms; at most 100"},
		{`batteryLevel <`, "is not a valid filter"},
		{`batteryLevel < 20 AND (`, "is not a valid filter"},
		{`colour = "red"`, `unknown field "colour" (fields: associationState, batteryLevel,`},
		{`batteryLevel < 20 AND colour = "red"`, `unknown field "colour"` + " (fields: associationState, batteryLevel, cpuTemperature, firmwareRevision, helmetMounted, lastSeenAt, modelNumber, mountLocked, name, presence, softwareRevision, uid) at line 1, column 23"},
		{`mount.name = "x"`, `unknown field "mount.name"`},
		{`name:"x"`, "the has operator ':' is not supported: use = or != at line 1, column 1"},
		{`name = "HM*"`, "wildcards (*) are not supported at line 1, column 8"},
		{`batteryLevel < cpuTemperature`, "batteryLevel must be compared with a literal value, not with cpuTemperature"},
		{`batteryLevel < "low"`, "batteryLevel is a number: compare it with a number"},
		{`mountLocked = 1`, "mountLocked is true or false"},
		{`mountLocked < true`, "only = and != apply"},
		{`lastSeenAt < "yesterday"`, `an RFC 3339 timestamp such as "2026-11-26T10:00:00Z", not "yesterday"`},
		{`lastSeenAt < 5`, "lastSeenAt is a timestamp"},
		{`associationState = "INACTIVE"`, `associationState is one of IDLE, ASSOCIATED, not "INACTIVE"`},
		{`presence = "offline"`, `presence is one of ONLINE, OFFLINE, UNKNOWN, not "offline"`},
		{`presence < "ONLINE"`, "only = and != apply"},
		{`presence = OFFLINE`, "presence must be compared with a literal value, not with OFFLINE (quote text values)"},
		{`name = 5`, "name is text: compare it with a quoted string"},
		{`mountLocked`, "mountLocked alone is not a condition"},
		{`"Garage"`, "a bare value is not a condition"},
		{`batteryLevel < 20 presence = "OFFLINE"`, "conditions must be joined with AND or OR"},
		{`timestamp("2026-11-26T10:00:00Z") > lastSeenAt`, "functions are not supported"},
		{`lastSeenAt < timestamp("2026-11-26T10:00:00Z")`, "not a function or expression"},
		{`20 > batteryLevel`, "a comparison starts with a field name"},
		{`name.upper() = "x"`, "functions are not supported"},
	} {
		_, err := p.ParseFilter(c.in)
		var ce *core.Error
		if !errors.As(err, &ce) || ce.Code != core.CodeValidation || len(ce.Fields) != 1 || ce.Fields[0].Field != "filter" {
			t.Errorf("%q: %v, want VALIDATION_FAILED on filter", c.in, err)
			continue
		}
		if !strings.Contains(ce.Fields[0].Message, c.want) {
			t.Errorf("%q: %q, want it to say %q", c.in, ce.Fields[0].Message, c.want)
		}
	}
}

// FuzzParseFilter: any text yields a tree within the bounds whose every
// comparison names a known field, or VALIDATION_FAILED on filter.
func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{
		`batteryLevel < 20 AND presence = "OFFLINE" AND modelNumber = "HM-1"`,
		`NOT (mountLocked = true OR cpuTemperature >= 45.5)`,
		`lastSeenAt < "2026-11-26T10:00:00Z"`, `name:"x"`, `a.b.c(1) = -"x"`, `((((`, `"\`,
	} {
		f.Add(s)
	}
	p := aipfilter.New()
	f.Fuzz(func(t *testing.T, text string) {
		e, err := p.ParseFilter(text)
		if err != nil {
			var ce *core.Error
			if !errors.As(err, &ce) || ce.Code != core.CodeValidation || len(ce.Fields) != 1 || ce.Fields[0].Field != "filter" {
				t.Fatalf("%q: %v", text, err)
			}
			return
		}
		if n := e.Nodes(); n > core.MaxFilterNodes {
			t.Fatalf("%q: %d nodes", text, n)
		}
		var check func(*core.FilterExpr)
		check = func(e *core.FilterExpr) {
			switch e.Op {
			case core.FilterAnd, core.FilterOr:
				if len(e.Args) < 2 {
					t.Fatalf("%q: %s with %d args", text, e.Op, len(e.Args))
				}
			case core.FilterNot:
				if len(e.Args) != 1 {
					t.Fatalf("%q: NOT with %d args", text, len(e.Args))
				}
			default:
				if _, ok := core.FilterFields[e.Field]; !ok || len(e.Args) != 0 {
					t.Fatalf("%q: comparison %+v", text, e)
				}
			}
			for _, a := range e.Args {
				check(a)
			}
		}
		check(e)
	})
}
