package core_test

import (
	"strings"
	"testing"

	"github.com/mountd/mountd/core"
)

// TestCanonicalState: plain decimals only, bounded, stored canonically.
func TestCanonicalState(t *testing.T) {
	for _, tc := range []struct {
		code  core.StateCode
		value string
		want  string // "" when refused
	}{
		{core.StateBatteryLevel, "50", "50"},
		{core.StateBatteryLevel, "050", "50"},
		{core.StateBatteryLevel, "80.50", "80.5"},
		{core.StateBatteryLevel, "80.0", "80"},
		{core.StateBatteryLevel, "-0", "0"},
		{core.StateBatteryLevel, "0.000", "0"},
		{core.StateBatteryLevel, "100", "100"},
		{core.StateBatteryLevel, "100.0001", ""},
		{core.StateBatteryLevel, "0x1.9p5", ""},
		{core.StateBatteryLevel, "1_0", ""},
		{core.StateBatteryLevel, "+50", ""},
		{core.StateBatteryLevel, "5e1", ""},
		{core.StateBatteryLevel, "Inf", ""},
		{core.StateBatteryLevel, "NaN", ""},
		{core.StateBatteryLevel, " 50", ""},
		{core.StateBatteryLevel, "50.", ""},
		{core.StateBatteryLevel, ".5", ""},
		{core.StateBatteryLevel, "", ""},
		{core.StateBatteryLevel, "0." + strings.Repeat("0", 29) + "1", "0." + strings.Repeat("0", 29) + "1"}, // 32 characters
		{core.StateBatteryLevel, "0." + strings.Repeat("0", 30) + "1", ""},                                   // 33
		{core.StateBatteryLevel, strings.Repeat("9", 3000), ""},
		{core.StateCPUTemperature, "-12.250", "-12.25"},
		{core.StateCPUTemperature, "-0.0", "0"},
		{core.StateCPUTemperature, "-60", "-60"},
		{core.StateCPUTemperature, "-60.5", ""},
		{core.StateMountLocked, "1", "1"},
		{core.StateMountLocked, "01", ""},
		{core.StateHelmetMounted, "true", ""},
	} {
		got, err := core.CanonicalState(tc.code, tc.value)
		if tc.want == "" && err == nil || tc.want != "" && (err != nil || got != tc.want) {
			t.Errorf("CanonicalState(%s, %.40q) = %q, %v; want %q", tc.code, tc.value, got, err, tc.want)
		}
	}
}

// TestPageOffset: no page number overflows the offset.
func TestPageOffset(t *testing.T) {
	for _, tc := range []struct {
		page, size, want int
	}{
		{1, 20, 0},
		{2, 20, 20},
		{2147483647, 100, core.MaxOffset},
		{9223372036854775807, 100, core.MaxOffset},
		{21474837, 100, 2147483600},
		{21474838, 100, core.MaxOffset},
	} {
		if got := (core.Page{CurrentPage: tc.page, PageSize: tc.size}).Offset(); got != tc.want {
			t.Errorf("Page{%d, %d}.Offset() = %d, want %d", tc.page, tc.size, got, tc.want)
		}
	}
}
