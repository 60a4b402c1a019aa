package rest

import (
	"reflect"
	"testing"
)

// TestDecodeStateEntry: the fast path takes the common entries and gives
// for every entry what the strict decoder gives, errors included.
func TestDecodeStateEntry(t *testing.T) {
	tests := []struct {
		raw  string
		fast bool
	}{
		{`{"code":"BATTERY_LEVEL","value":"87","occurredAt":"2026-11-26T08:00:00.000Z"}`, true},
		{` { "occurredAt" : "2026-11-26T08:00:00Z" ,` + "\n\t" + `"value":"-1.5", "code":"CPU_TEMPERATURE" } `, true},
		{`{"code":"MOUNT_LOCKED"}`, true},
		{`{}`, true},
		{`{"code":"A","code":"B"}`, false},              // the decoder keeps the last
		{`{"Code":"BATTERY_LEVEL","value":"1"}`, false}, // the decoder matches keys without case
		{`{"code":"BATTERY\u005fLEVEL","value":"1"}`, false},
		{`{"code":"BATTERY_LEVEL","value":"1","extra":"x"}`, false},
		{`{"code":"BATTERY_LEVEL","value":1}`, false},
		{`{"code":"BATTERY_LEVEL","value":null}`, false},
		{`{"code":"BATTERY_LEVEL","value":"\u00e9"}`, false},
		{"{\"code\":\"BATTERY_LEVEL\",\"value\":\"\xc3\xa9\"}", false},
		{"{\"code\":\"BATTERY_LEVEL\",\"value\":\"\xff\"}", false},
		{`{"code":"BATTERY_LEVEL","value":{"a":"b"}}`, false},
		{`["code","value"]`, false},
		{`"code"`, false},
		{`{"code":"BATTERY_LEVEL",}`, false},
		{`{"code":"BATTERY_LEVEL"`, false},
		{`{"code" "BATTERY_LEVEL"}`, false},
		{`{"code":"BATTERY_LEVEL"} {}`, false},
		{`{"code":"BATTERY_LEVEL"}x`, false},
	}
	for _, tt := range tests {
		var fast stateEntryJSON
		if got := flatStateEntry([]byte(tt.raw), &fast); got != tt.fast {
			t.Errorf("flatStateEntry(%s) = %v, want %v", tt.raw, got, tt.fast)
		}
		var viaFast, strict stateEntryJSON
		errFast := decodeStateEntry([]byte(tt.raw), &viaFast)
		errStrict := decodeJSONBytes([]byte(tt.raw), &strict)
		if !reflect.DeepEqual(viaFast, strict) || !reflect.DeepEqual(errFast, errStrict) {
			t.Errorf("%s: decodeStateEntry = %+v, %v; the strict decoder = %+v, %v", tt.raw, show(viaFast), errFast, show(strict), errStrict)
		}
	}
}

func show(e stateEntryJSON) []string {
	var out []string
	for _, p := range []*string{e.Code, e.Value, e.OccurredAt} {
		if p == nil {
			out = append(out, "<nil>")
		} else {
			out = append(out, *p)
		}
	}
	return out
}

func BenchmarkDecodeStateEntry(b *testing.B) {
	raw := []byte(`{"code":"CPU_TEMPERATURE","value":"41.5","occurredAt":"2026-11-26T08:00:00.000Z"}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e stateEntryJSON
			_ = decodeStateEntry(raw, &e)
		}
	})
	b.Run("strict", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e stateEntryJSON
			_ = decodeJSONBytes(raw, &e)
		}
	})
}
