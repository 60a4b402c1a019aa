package rest

import (
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestCSVCell: the console's rule for cells a spreadsheet would run as a
// formula, and RFC 4180 quoting.
func TestCSVCell(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"Front", "Front"},
		{"=1+2", "'=1+2"},
		{"+1+2", "'+1+2"},
		{"-1+2", "'-1+2"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\tx", "'\tx"},
		{"\rx", "\"'\rx\""},
		{"-12.5", "-12.5"},
		{"-5", "-5"},
		{"a,b", `"a,b"`},
		{`say "hi"`, `"say ""hi"""`},
		{"two\nlines", "\"two\nlines\""},
		{" padded", `" padded"`},
		{"=a,b", `"'=a,b"`},
		{"x=1", "x=1"},
	} {
		if got := string(appendCSVCell(nil, tc.in)); got != tc.want {
			t.Errorf("cell %q = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestJSONString: the hand-written quoting of state lines is encoding/json's.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "M-1", "a\"b", `back\slash`, "ctl\x01", "<&>", "ünï", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := string(appendJSONString(nil, s)); got != string(want) {
			t.Errorf("%q = %s, want %s", s, got, want)
		}
	}
}

// TestMountCSVRowFollowsHeader: each cell of a mount's CSV row is the
// value of the header's field in the REST Mount, so a field added to
// MountJSON without its cell fails here.
func TestMountCSVRowFollowsHeader(t *testing.T) {
	locked, helmet, battery, temp := true, false, 81, -12.3
	m := core.Mount{UID: "M-1", Name: "Front, left", SerialNumber: "SN1", MACAddress: "AA:BB:CC:DD:EE:FF",
		FirmwareRevision: "1.0.0", SoftwareRevision: "1.0.1", ModelNumber: "MX-1", State: core.StateAssociated,
		AssociatedAt: time.Date(2026, 11, 22, 1, 40, 13, 123e6, time.UTC),
		LastSeenAt:   time.Date(2026, 11, 22, 2, 0, 0, 5e6, time.UTC), Presence: core.PresenceOnline,
		Latest:  core.LatestStates{MountLocked: &locked, HelmetMounted: &helmet, BatteryLevel: &battery, CPUTemperature: &temp},
		Offline: &core.MountOffline{RevocationVersion: 1795311613123, LogPending: 2, TimeTrusted: true, At: time.Date(2026, 11, 22, 2, 1, 0, 0, time.UTC)}}
	header := strings.Split(mountCSVHeader, ",")
	row, err := csv.NewReader(strings.NewReader(string(appendMountCSV(nil, m)))).Read()
	if err != nil || len(row) != len(header) {
		t.Fatalf("row %q (%v) for header %q", row, err, header)
	}
	raw, _ := json.Marshal(mountJSON(m))
	var obj map[string]json.RawMessage
	_ = json.Unmarshal(raw, &obj)
	for i, name := range header {
		want := string(obj[name])
		var s string
		if json.Unmarshal(obj[name], &s) == nil {
			want = s
		}
		if row[i] != want {
			t.Errorf("column %s = %q, the Mount has %q", name, row[i], want)
		}
	}
}
