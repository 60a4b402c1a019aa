package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	report := func(ingest, p99, mqtt float64) string {
		return `{"ingest":{"throughputRatio":` + ftoa(ingest) + `},"get":{"p99Ratio":` + ftoa(p99) +
			`},"ratios":[{"broker":"nats","p99FromSend":9},{"broker":"mqtt","p99FromSend":` + ftoa(mqtt) + `}]}`
	}
	const baseline = `# name path recorded better reason
ingest   ingest.throughputRatio       0.40  higher  the outbox and one statement per report
get-p99  get.p99Ratio                 2.00  lower   measured 2026-11-26
fanout   ratios[broker=mqtt].p99FromSend 1.00 lower  measured
`
	tests := []struct {
		name    string
		reports []string
		wantErr string
		wantOut []string
	}{
		{"all within", []string{report(0.41, 2.1, 1.1), report(0.33, 2.4, 0.9), report(0.39, 1.9, 1.2)}, "",
			[]string{"0.390", "2.100", "1.100"}},
		{"the median decides, not one bad run", []string{report(0.1, 9, 9), report(0.4, 2, 1), report(0.4, 2, 1)}, "", nil},
		{"ingest more than 20 % below", []string{report(0.31, 2, 1), report(0.30, 2, 1), report(0.5, 2, 1)},
			"1 of 3 ratios", []string{"FAIL: more than 20 %"}},
		{"a lower-is-better ratio above its limit", []string{report(0.4, 2.6, 1), report(0.4, 2.51, 1), report(0.4, 2, 1)},
			"1 of 3 ratios", nil},
		{"a ratio no run measured", []string{`{"ingest":{"throughputRatio":0.4},"get":{"p99Ratio":2}}`},
			"1 of 3 ratios", []string{"no run measured it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "baseline.txt")
			if err := os.WriteFile(base, []byte(baseline), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--baseline", base}
			for i, r := range tt.reports {
				name := filepath.Join(dir, "r"+ftoa(float64(i))+".json")
				if err := os.WriteFile(name, []byte(r), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, name)
			}
			var out bytes.Buffer
			err := run(args, &out, &out)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q\n%s", err, tt.wantErr, out.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out.String())
				}
			}
		})
	}
}

func TestParseBaselineRefuses(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "a b 0.4 higher\n", "a b x higher why\n", "a b -1 higher why\n", "a b 0.4 up why\n"} {
		if _, err := parseBaseline(strings.NewReader(in)); err == nil {
			t.Errorf("parseBaseline(%q) took it", in)
		}
	}
}

func TestLookup(t *testing.T) {
	var doc any
	if err := json.Unmarshal([]byte(`{"kind":"shared","a":{"b":[{"k":"x","v":1},{"k":"y","v":2}],"z":0}}`), &doc); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]float64{"a.b[k=y].v": 2, "a.b[k=x].v": 1, "a.b[k=q].v": 0, "a.z": 0, "a.c": 0, "a.b.v": 0,
		"[kind=shared]a.b[k=y].v": 2, "[kind=distinct]a.b[k=y].v": 0, "[other=shared]a.b[k=y].v": 0} {
		got, ok := lookup(doc, path)
		if got != want || ok != (want > 0) {
			t.Errorf("lookup(%q) = %v, %v; want %v", path, got, ok, want)
		}
	}
}

func ftoa(f float64) string {
	b, _ := json.Marshal(f)
	return string(b)
}
