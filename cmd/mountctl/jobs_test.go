package main

import (
	"maps"
	"testing"
	"time"
)

func TestParseJobFlags(t *testing.T) {
	got, err := parseParams([]string{"alarmMode=ON", " alarmVolume =HIGH", "tagUid=04:A1=x"})
	want := map[string]string{"alarmMode": "ON", "alarmVolume": "HIGH", "tagUid": "04:A1=x"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("parseParams = %v, %v; want %v", got, err, want)
	}
	for _, bad := range [][]string{{"alarmMode"}, {"=ON"}, {"alarmMode=ON", "alarmMode=OFF"}} {
		if _, err := parseParams(bad); err == nil {
			t.Errorf("parseParams(%q) accepted", bad)
		}
	}
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]string{
		"2026-12-01T01:00:00+01:00": "2026-12-01T00:00:00Z",
		"72h":                       "2026-11-29T12:00:00Z",
	} {
		if got, err := parseExpiresAt(in, now); err != nil || got != want {
			t.Errorf("parseExpiresAt(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"tomorrow", "-1h", "2026-12-01"} {
		if _, err := parseExpiresAt(bad, now); err == nil {
			t.Errorf("parseExpiresAt(%q) accepted", bad)
		}
	}
}
