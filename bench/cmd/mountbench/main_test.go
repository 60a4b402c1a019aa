package main

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestBody: a generated batch is valid JSON with valid codes and values, and
// no two entries of a run share an occurredAt.
func TestBody(t *testing.T) {
	g := newGenerator(50, time.Now().Add(-48*time.Hour))
	seen := map[string]bool{}
	for batch := range 100 {
		var body struct {
			States []struct {
				Code, Value, OccurredAt string
			}
		}
		raw := g.appendBody(nil, g.next(batch%7))
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if len(body.States) != 50 {
			t.Fatalf("%d entries", len(body.States))
		}
		for _, e := range body.States {
			at, err := time.Parse(time.RFC3339Nano, e.OccurredAt)
			if err != nil || at.After(time.Now()) || seen[e.OccurredAt] {
				t.Fatalf("occurredAt %q (err %v, repeated %v)", e.OccurredAt, err, seen[e.OccurredAt])
			}
			seen[e.OccurredAt] = true
			f, ferr := strconv.ParseFloat(e.Value, 64)
			ok := false
			switch e.Code {
			case "BATTERY_LEVEL":
				ok = ferr == nil && f >= 0 && f <= 100
			case "CPU_TEMPERATURE":
				ok = ferr == nil && f >= -60 && f <= 150
			case "MOUNT_LOCKED", "HELMET_MOUNTED":
				ok = e.Value == "0" || e.Value == "1"
			}
			if !ok {
				t.Fatalf("entry %+v", e)
			}
		}
	}
}

func TestPercentile(t *testing.T) {
	d := make([]time.Duration, 1000)
	for i := range d {
		d[i] = time.Duration(1000-i) * time.Millisecond
	}
	l := summarize(d)
	if l.P50 != 500 || l.P99 != 990 || l.P999 != 999 || l.Max != 1000 || l.Min != 1 || l.Count != 1000 {
		t.Fatalf("%+v", l)
	}
}

func TestLoopbackOnly(t *testing.T) {
	db := "postgres://postgres@127.0.0.1:5555/postgres?sslmode=disable"
	for _, c := range []struct {
		args []string
		ok   bool
	}{
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db}, true},
		{[]string{"--base", "http://[::1]:8080/", "--database-url", db}, true},
		{[]string{"--base", "http://example.com:8080", "--database-url", db}, false},
		{[]string{"--base", "http://10.0.0.1:8080", "--database-url", db}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", "postgres://u@db.example.com/x"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", "sqlite://x.db"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--scenario", "soak"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--batch", "501"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--watch", "mountd=12,redis=34"}, true},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--watch", "mountd"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--max-load", "1", "--max-busy", "0.25"}, true},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--max-load", "1", "--max-busy", "0"}, true},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--max-busy", "-0.1"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--max-busy", "10"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--scenario", "tokens", "--renew-every", "20s", "--wrong-rate", "50"}, true},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--scenario", "tokens", "--renew-every", "10ms"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--scenario", "tokens", "--wrong-rate", "0"}, false},
		{[]string{"--base", "http://127.0.0.1:8080", "--database-url", db, "--scenario", "tokens", "--token-clients", "0"}, false},
	} {
		_, err := parseFlags(c.args, io.Discard)
		if (err == nil) != c.ok {
			t.Errorf("%v: err %v", c.args, err)
		}
	}
}

// BenchmarkAppendBody is the client-side cost of one 50-entry batch body.
func BenchmarkAppendBody(b *testing.B) {
	g := newGenerator(50, time.Now().Add(-48*time.Hour))
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = g.appendBody(buf[:0], g.next(i%200))
	}
	b.SetBytes(int64(len(buf)))
}

// BenchmarkSummarize is the cost of the sorted-slice histogram per sample
// (a 30 s run at 2,000/s holds 60,000 samples).
func BenchmarkSummarize(b *testing.B) {
	src := make([]time.Duration, 60000)
	for i := range src {
		src[i] = time.Duration(rand.ExpFloat64() * float64(time.Millisecond))
	}
	d := make([]time.Duration, len(src))
	b.ReportAllocs()
	for b.Loop() {
		copy(d, src)
		summarize(d)
	}
	if !slices.IsSorted(d) {
		b.Fatal("not sorted")
	}
}

// TestScenarioList: scenarios combine with commas, "all" is ingest and
// get, and a flood runs alone.
func TestScenarioList(t *testing.T) {
	base := []string{"--base", "http://127.0.0.1:1", "--database-url", "postgres://u@127.0.0.1:2/db"}
	tests := []struct {
		scenario string
		ok       bool
		runs     []string
	}{
		{"ingest,onboard", true, []string{"ingest", "onboard"}},
		{"all", true, []string{"ingest", "get"}},
		{"get,onboard", true, []string{"get", "onboard"}},
		{"tokenflood", true, nil},
		{"ingest,tokenflood", false, nil},
		{"ingest,bogus", false, nil},
		{"", false, nil},
	}
	for _, tt := range tests {
		c, err := parseFlags(append(base, "--scenario", tt.scenario), io.Discard)
		if (err == nil) != tt.ok {
			t.Errorf("--scenario %q: err %v, want ok %v", tt.scenario, err, tt.ok)
			continue
		}
		for _, name := range []string{"ingest", "get", "onboard"} {
			if got := tt.ok && c.runs(name); got != slices.Contains(tt.runs, name) {
				t.Errorf("--scenario %q runs %s: %v", tt.scenario, name, got)
			}
		}
	}
}

// TestMergePhases: rounds add up and rates are over all of them.
func TestMergePhases(t *testing.T) {
	a := phase{Target: "m", Seconds: 2, Requests: 10, Accepted: 500, EntriesPerSec: 250, CPU: map[string]float64{"mountd": 50},
		lats: []time.Duration{time.Millisecond, 2 * time.Millisecond}}
	b := phase{Target: "m", Seconds: 6, Requests: 30, Accepted: 1500, EntriesPerSec: 250, CPU: map[string]float64{"mountd": 90},
		lats: []time.Duration{3 * time.Millisecond}}
	m := mergePhases([]phase{a, b}, false)
	if m.Requests != 40 || m.Accepted != 2000 || m.EntriesPerSec != 250 || m.RequestsPerSec != 5 || m.CPU["mountd"] != 80 ||
		m.Latency.Count != 3 || m.Rounds != 2 {
		t.Fatalf("%+v", m)
	}
	if o := mergePhases([]phase{a, b}, true); o.RequestsPerSec != 250 || o.EntriesPerSec != 0 {
		t.Fatalf("per accepted: %+v", o)
	}
}
