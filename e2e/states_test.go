package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStates covers docs/api.md, "States" on both backends.
func TestStates(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			a.associate(t, "S1", nil) // IDLE mounts take reports too
			base := time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)

			got := a.report(t, "S1",
				entry("BATTERY_LEVEL", "80.5", base),
				entry("CPU_TEMPERATURE", "41.25", base),
				entry("MOUNT_LOCKED", "1", base),
				entry("HELMET_MOUNTED", "1", base))
			if got["accepted"] != 4 || got["duplicates"] != 0 {
				t.Fatalf("first report %v", got)
			}
			m := a.get(t, "S1")
			if *m.BatteryLevel != 81 || *m.CPUTemperature != 41.3 || !*m.MountLocked || !*m.HelmetMounted {
				t.Fatalf("computed fields %+v (want 81, 41.3, true, true: half away from zero)", m)
			}

			// newer entries move the fields; the +02:00 form of a stored instant is a duplicate
			plus2 := base.In(time.FixedZone("", 2*3600)).Format("2006-01-02T15:04:05.000-07:00")
			got = a.report(t, "S1",
				map[string]any{"code": "BATTERY_LEVEL", "value": "80.5", "occurredAt": plus2},
				entry("BATTERY_LEVEL", "-0", base.Add(time.Minute)),
				entry("MOUNT_LOCKED", "0", base.Add(time.Minute)),
				entry("CPU_TEMPERATURE", "-12.25", base.Add(time.Minute)))
			if got["accepted"] != 3 || got["duplicates"] != 1 {
				t.Fatalf("second report %v", got)
			}
			m = a.get(t, "S1")
			if *m.BatteryLevel != 0 || *m.CPUTemperature != -12.3 || *m.MountLocked {
				t.Fatalf("after newer entries %+v", m)
			}

			// a late (older) entry is kept in history but changes nothing
			got = a.report(t, "S1", entry("MOUNT_LOCKED", "1", base.Add(30*time.Second)))
			if got["accepted"] != 1 {
				t.Fatalf("late entry %v", got)
			}
			if m = a.get(t, "S1"); *m.MountLocked {
				t.Fatal("a late entry changed mountLocked")
			}
			// and the whole report again is all duplicates
			if got = a.report(t, "S1", entry("MOUNT_LOCKED", "1", base.Add(30*time.Second))); got["accepted"] != 0 || got["duplicates"] != 1 {
				t.Fatalf("repeat %v", got)
			}

			// history: newest first, filters, from inclusive and to exclusive, pagination
			h := decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/S1/states", nil))
			if h.Pagination.TotalItems != 8 || h.Pagination.PageSize != 20 || h.Pagination.TotalPages != 1 || h.States[0].OccurredAt != base.Add(time.Minute).Format("2006-01-02T15:04:05.000Z") {
				t.Fatalf("history %+v", h)
			}
			from := base.Add(30 * time.Second).Format(time.RFC3339Nano)
			to := base.Add(time.Minute).Format(time.RFC3339Nano)
			h = decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/S1/states?code=MOUNT_LOCKED&from="+from+"&to="+to, nil))
			if h.Pagination.TotalItems != 1 || h.States[0].Value != "1" {
				t.Fatalf("filtered history %+v", h)
			}
			h = decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/S1/states?pageSize=3&currentPage=3", nil))
			if h.Pagination.TotalPages != 3 || len(h.States) != 2 || h.Pagination.CurrentPage != 3 {
				t.Fatalf("page 3 of 3 %+v", h)
			}
			h = decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/S1/states?currentPage=9", nil))
			if len(h.States) != 0 || h.Pagination.TotalItems != 8 {
				t.Fatalf("page past the end %+v", h)
			}

			// another account cannot report or read
			res, raw := b.call(http.MethodPost, "/api/v1/mounts/S1/states", map[string]any{"states": []any{entry("MOUNT_LOCKED", "1", base)}})
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			res, raw = b.call(http.MethodGet, "/api/v1/mounts/S1/states", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
		})
	}
}

// TestStateValidation: any bad entry rejects the whole batch, naming it.
func TestStateValidation(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	a.associate(t, "V1", nil)
	now := time.Now().UTC()
	good := entry("BATTERY_LEVEL", "50", now)
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"unknown code", map[string]any{"states": []any{good, entry("SPEED", "1", now)}}, "states[1].code"},
		{"battery above 100", map[string]any{"states": []any{entry("BATTERY_LEVEL", "101", now)}}, "states[0].value"},
		{"battery not a number", map[string]any{"states": []any{entry("BATTERY_LEVEL", "full", now)}}, "states[0].value"},
		{"hex float", map[string]any{"states": []any{entry("BATTERY_LEVEL", "0x1.9p5", now)}}, "states[0].value"},
		{"underscores", map[string]any{"states": []any{entry("BATTERY_LEVEL", "1_0", now)}}, "states[0].value"},
		{"plus sign", map[string]any{"states": []any{entry("BATTERY_LEVEL", "+50", now)}}, "states[0].value"},
		{"exponent", map[string]any{"states": []any{entry("BATTERY_LEVEL", "5e1", now)}}, "states[0].value"},
		{"temperature below -60", map[string]any{"states": []any{good, good, entry("CPU_TEMPERATURE", "-61", now)}}, "states[2].value"},
		{"locked is 1 or 0", map[string]any{"states": []any{entry("MOUNT_LOCKED", "true", now)}}, "states[0].value"},
		{"helmet is 1 or 0", map[string]any{"states": []any{entry("HELMET_MOUNTED", "2", now)}}, "states[0].value"},
		{"far future", map[string]any{"states": []any{entry("BATTERY_LEVEL", "5", now.Add(6*time.Minute))}}, "states[0].occurredAt"},
		{"bad time", map[string]any{"states": []any{map[string]any{"code": "BATTERY_LEVEL", "value": "5", "occurredAt": "yesterday"}}}, "states[0].occurredAt"},
		{"missing time", map[string]any{"states": []any{map[string]any{"code": "BATTERY_LEVEL", "value": "5"}}}, "states[0].occurredAt"},
		{"value as number", map[string]any{"states": []any{map[string]any{"code": "BATTERY_LEVEL", "value": 5, "occurredAt": now}}}, "states[0].value"},
		{"unknown entry field", map[string]any{"states": []any{map[string]any{"code": "BATTERY_LEVEL", "value": "5", "occurredAt": now, "unit": "%"}}}, "states[0].unit"},
		{"no states", map[string]any{}, "states"},
		{"empty states", map[string]any{"states": []any{}}, "states"},
		{"unknown top field", map[string]any{"states": []any{good}, "mount": "V1"}, "mount"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, raw := a.call(http.MethodPost, "/api/v1/mounts/V1/states", c.body)
			p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			found := false
			for _, e := range p.Errors {
				found = found || e.Field == c.field
			}
			if !found {
				t.Fatalf("errors %s; want field %s", raw, c.field)
			}
		})
	}
	// nothing of the rejected batches was stored
	h := decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/V1/states", nil))
	if h.Pagination.TotalItems != 0 {
		t.Fatalf("rejected batches stored %d entries", h.Pagination.TotalItems)
	}

	// more than 500 entries: 413 before any entry is looked at
	many := make([]any, 501)
	for i := range many {
		many[i] = map[string]any{"code": "NOPE"}
	}
	res, raw := a.call(http.MethodPost, "/api/v1/mounts/V1/states", map[string]any{"states": many})
	wantProblem(t, res, raw, 413, "PAYLOAD_TOO_LARGE")
	ok := make([]map[string]any, 500)
	for i := range ok {
		ok[i] = entry("BATTERY_LEVEL", fmt.Sprint(i%100), now.Add(-time.Duration(i)*time.Second))
	}
	if got := a.report(t, "V1", ok...); got["accepted"] != 500 {
		t.Fatalf("500 entries: %v", got)
	}
}

// TestBadInput: malformed bodies and parameters are clear 400s, oversized
// ones 413, and authentication comes before both.
func TestBadInput(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	a.associate(t, "B1", nil)
	huge := `{"uid":"B2","name":"` + strings.Repeat("x", 1<<20) + `"}`
	cases := []struct {
		name, method, path, token string
		body                      any
		status                    int
		code, field               string
	}{
		{"malformed JSON", "POST", "/api/v1/mounts", a.token, `{"uid":`, 400, "VALIDATION_FAILED", ""},
		{"trailing data", "POST", "/api/v1/mounts", a.token, `{"uid":"B3"} {}`, 400, "VALIDATION_FAILED", ""},
		{"not an object", "POST", "/api/v1/mounts", a.token, `["B3"]`, 400, "VALIDATION_FAILED", ""},
		{"wrong type", "POST", "/api/v1/mounts", a.token, `{"uid":7}`, 400, "VALIDATION_FAILED", "uid"},
		{"unknown field", "POST", "/api/v1/mounts", a.token, `{"uid":"B3","colour":"red"}`, 400, "VALIDATION_FAILED", "colour"},
		{"missing uid", "POST", "/api/v1/mounts", a.token, `{"name":"x"}`, 400, "VALIDATION_FAILED", "uid"},
		{"bad uid", "POST", "/api/v1/mounts", a.token, `{"uid":"a b"}`, 400, "VALIDATION_FAILED", "uid"},
		{"long uid", "POST", "/api/v1/mounts", a.token, `{"uid":"` + strings.Repeat("u", 65) + `"}`, 400, "VALIDATION_FAILED", "uid"},
		{"bad mac", "POST", "/api/v1/mounts", a.token, `{"uid":"B3","macAddress":"AA:BB:CC"}`, 400, "VALIDATION_FAILED", "macAddress"},
		{"long name", "POST", "/api/v1/mounts", a.token, `{"uid":"B3","name":"` + strings.Repeat("n", 101) + `"}`, 400, "VALIDATION_FAILED", "name"},
		{"patch unknown field", "PATCH", "/api/v1/mounts/B1", a.token, `{"uid":"X"}`, 400, "VALIDATION_FAILED", "uid"},
		{"body over 1 MiB", "POST", "/api/v1/mounts", a.token, huge, 413, "PAYLOAD_TOO_LARGE", ""},
		{"no token before the body", "POST", "/api/v1/mounts", "", huge, 401, "UNAUTHENTICATED", ""},
		{"pageSize 0", "GET", "/api/v1/mounts?pageSize=0", a.token, nil, 400, "VALIDATION_FAILED", "pageSize"},
		{"pageSize 101", "GET", "/api/v1/mounts?pageSize=101", a.token, nil, 400, "VALIDATION_FAILED", "pageSize"},
		{"currentPage 0", "GET", "/api/v1/mounts?currentPage=0", a.token, nil, 400, "VALIDATION_FAILED", "currentPage"},
		{"currentPage text", "GET", "/api/v1/mounts?currentPage=two", a.token, nil, 400, "VALIDATION_FAILED", "currentPage"},
		{"unknown parameter", "GET", "/api/v1/mounts?owner=me", a.token, nil, 400, "VALIDATION_FAILED", "owner"},
		{"bad history code", "GET", "/api/v1/mounts/B1/states?code=SPEED", a.token, nil, 400, "VALIDATION_FAILED", "code"},
		{"bad history time", "GET", "/api/v1/mounts/B1/states?from=monday", a.token, nil, 400, "VALIDATION_FAILED", "from"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, raw := in.call(c.method, c.path, c.token, c.body)
			p := wantProblem(t, res, raw, c.status, c.code)
			if c.field != "" && (len(p.Errors) == 0 || p.Errors[0].Field != c.field) {
				t.Fatalf("errors %s; want field %s", raw, c.field)
			}
		})
	}
	// nothing was created by the refused requests
	list := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/mounts", nil))
	if n := list["pagination"].(map[string]any)["totalItems"].(float64); n != 1 {
		t.Fatalf("%v mounts after refused requests, want 1", n)
	}
}

// TestMountListAndPatch: listing, filters, pagination and PATCH.
func TestMountListAndPatch(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			for i := 1; i <= 5; i++ {
				a.associate(t, fmt.Sprintf("L%d", i), map[string]any{"macAddress": fmt.Sprintf("aa:bb:cc:dd:ee:0%d", i), "serialNumber": fmt.Sprintf("SN%d", i%2)})
			}
			b.associate(t, "L9", nil)
			type listView struct {
				Mounts     []mountView    `json:"mounts"`
				Pagination map[string]int `json:"pagination"`
			}
			l := decode[listView](t, a.ok(t, http.MethodGet, "/api/v1/mounts?pageSize=2&currentPage=2", nil))
			if len(l.Mounts) != 2 || l.Mounts[0].UID != "L3" || l.Pagination["totalItems"] != 5 || l.Pagination["totalPages"] != 3 {
				t.Fatalf("page 2: %+v", l)
			}
			for q, want := range map[string]int{"macAddress=AA:BB:CC:DD:EE:03": 1, "macAddress=aa:bb:cc:dd:ee:03": 1, "serialNumber=SN1": 3, "mountUid=L9": 0, "mountUid=L2": 1, "serialNumber=SN": 0} {
				if l := decode[listView](t, a.ok(t, http.MethodGet, "/api/v1/mounts?"+q, nil)); l.Pagination["totalItems"] != want {
					t.Errorf("filter %s: %d, want %d", q, l.Pagination["totalItems"], want)
				}
			}
			l = decode[listView](t, a.ok(t, http.MethodGet, "/api/v1/mounts?currentPage=7", nil))
			if len(l.Mounts) != 0 || l.Pagination["totalItems"] != 5 {
				t.Fatalf("past the end: %+v", l)
			}

			raw := a.ok(t, http.MethodPatch, "/api/v1/mounts/L1", map[string]any{"name": "Renamed"})
			if m := decode[[]mountView](t, raw); len(m) != 1 || m[0].Name != "Renamed" {
				t.Fatalf("patch: %s", raw)
			}
			raw = a.ok(t, http.MethodPatch, "/api/v1/mounts/L1", map[string]any{})
			if m := decode[[]mountView](t, raw); m[0].Name != "Renamed" {
				t.Fatalf("empty patch changed the mount: %s", raw)
			}
			a.ok(t, http.MethodPatch, "/api/v1/mounts/L1", map[string]any{"softwareRevision": "2.0.0"})
			if m := a.get(t, "L1"); m.Name != "Renamed" || m.SoftwareRevision != "2.0.0" {
				t.Fatalf("after patches: %+v", m)
			}
			res, body := b.call(http.MethodPatch, "/api/v1/mounts/L1", map[string]any{"name": "Mine"})
			wantProblem(t, res, body, 404, "MOUNT_NOT_FOUND")
		})
	}
}

// TestRestrictedTokens: docs/api.md, "Identity" and "Conventions" through the API.
func TestRestrictedTokens(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	a.associate(t, "P1", nil)
	a.confirm(t, "P1")
	a.associate(t, "P2", nil)
	a.confirm(t, "P2")
	rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:P1")
	maintainer := in.token(a.creds, "openid", "sub", audItem, "role:restricted")
	now := time.Now().UTC()
	states := map[string]any{"states": []any{entry("HELMET_MOUNTED", "0", now)}}
	cases := []struct {
		name, token, method, path string
		body                      any
		status                    int
		code                      string
	}{
		{"rider reads its mount", rider, "GET", "/api/v1/mounts/P1", nil, 200, ""},
		{"rider lists only its mount", rider, "GET", "/api/v1/mounts", nil, 200, ""},
		{"rider reports states", rider, "POST", "/api/v1/mounts/P1/states", states, 200, ""},
		{"rider reads history", rider, "GET", "/api/v1/mounts/P1/states", nil, 200, ""},
		{"rider queries a command", rider, "GET", "/api/v1/mounts/P1/query?code=RELEASE_HELMET", nil, 200, ""},
		{"rider cannot see another mount", rider, "GET", "/api/v1/mounts/P2", nil, 404, "MOUNT_NOT_FOUND"},
		{"rider cannot command another mount", rider, "GET", "/api/v1/mounts/P2/query?code=RELEASE_HELMET", nil, 404, "MOUNT_NOT_FOUND"},
		{"rider cannot read the audit", rider, "GET", "/api/v1/mounts/P1/commands", nil, 403, "FORBIDDEN"},
		{"rider cannot patch", rider, "PATCH", "/api/v1/mounts/P1", map[string]any{"name": "x"}, 403, "FORBIDDEN"},
		{"rider cannot delete", rider, "DELETE", "/api/v1/mounts/P1", nil, 403, "FORBIDDEN"},
		{"rider cannot abandon", rider, "DELETE", "/api/v1/mounts/P1/abandon", nil, 403, "FORBIDDEN"},
		{"rider cannot associate", rider, "POST", "/api/v1/mounts", map[string]any{"uid": "P1"}, 403, "FORBIDDEN"},
		{"rider cannot confirm", rider, "POST", "/api/v1/mounts/P1/confirm-association", nil, 403, "FORBIDDEN"},
		{"maintainer reads any mount", maintainer, "GET", "/api/v1/mounts/P2", nil, 200, ""},
		{"maintainer queries any mount", maintainer, "GET", "/api/v1/mounts/P2/query?code=SET_RFID_MODE&rfidMode=LEARN", nil, 200, ""},
		{"maintainer cannot delete", maintainer, "DELETE", "/api/v1/mounts/P2", nil, 403, "FORBIDDEN"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, raw := in.call(c.method, c.path, c.token, c.body)
			if c.code != "" {
				wantProblem(t, res, raw, c.status, c.code)
				return
			}
			if res.StatusCode != c.status {
				t.Fatalf("got %d %s", res.StatusCode, raw)
			}
			if c.path == "/api/v1/mounts" && !strings.Contains(string(raw), `"totalItems":1`) {
				t.Fatalf("rider's list %s", raw)
			}
		})
	}
	// the rider's report reached the mount
	if m := a.get(t, "P1"); m.HelmetMounted == nil || *m.HelmetMounted {
		t.Fatalf("after the rider's report: %+v", m)
	}
}

// TestStateValueCanonical: a value is stored as canonical text, so that
// spellings of one number are duplicates, and a value too long for an
// index is refused on both databases, not a 500.
func TestStateValueCanonical(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			a.associate(t, "C1", nil)
			at := time.Now().UTC().Add(-time.Minute)
			if got := a.report(t, "C1", entry("BATTERY_LEVEL", "080.50", at), entry("CPU_TEMPERATURE", "-0.0", at)); got["accepted"] != 2 {
				t.Fatalf("report %v", got)
			}
			if got := a.report(t, "C1", entry("BATTERY_LEVEL", "80.5", at)); got["accepted"] != 0 || got["duplicates"] != 1 {
				t.Fatalf("80.5 after 080.50 at the same instant: %v, want a duplicate", got)
			}
			h := decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/C1/states", nil))
			values := map[string]string{}
			for _, s := range h.States {
				values[s.Code] = s.Value
			}
			if values["BATTERY_LEVEL"] != "80.5" || values["CPU_TEMPERATURE"] != "0" {
				t.Fatalf("stored %v", values)
			}
			res, raw := a.call(http.MethodPost, "/api/v1/mounts/C1/states", map[string]any{"states": []any{entry("BATTERY_LEVEL", strings.Repeat("9", 3000), at)}})
			p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			if len(p.Errors) != 1 || p.Errors[0].Field != "states[0].value" {
				t.Fatalf("errors %+v", p.Errors)
			}
		})
	}
}
