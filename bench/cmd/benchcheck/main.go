// Command benchcheck compares the ratios of benchmark runs with the ones
// recorded in a baseline file and fails when one has fallen more than the
// allowed share (default 20 %) below its record. It reads the JSON reports
// of mountbench (--json) and fanoutbench (--json FILE); each ratio is the
// median of every report that holds it. `make bench-check` runs the
// benchmarks three times and then this (bench/check.sh).
//
// The baseline file has one ratio a line, fields separated by blanks:
//
//	name  path  recorded  better  reason…
//
// path names a number in a report: object keys joined by dots, and
// [key=value] picks the element of an array whose key has that value, e.g.
// ingest.throughputRatio or ratios[broker=mqtt].p99FromSend. A leading
// [key=value] picks the reports whose top-level key has that value:
// [operations=distinct-texts]ratios[broker=mqtt].p50FromSend. better is
// "higher" when a larger ratio is better (a throughput ratio) or "lower"
// when a smaller one is (a latency ratio); "falls 20 % below" then means
// the inverse ratio does. Lines starting with # and blank lines are skipped.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// record is one line of the baseline file.
type record struct {
	Name     string
	Path     string
	Recorded float64
	Higher   bool
	Reason   string
}

// verdict is one record checked against the runs.
type verdict struct {
	record
	Values []float64
	Median float64
	// Limit is the worst median that still passes.
	Limit float64
	OK    bool
}

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "benchcheck:", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	baseline := fs.String("baseline", "bench/baseline.txt", "the recorded ratios")
	tolerance := fs.Float64("tolerance", 0.2, "how far below its record a ratio may fall (0.2: 20 %)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: benchcheck [--baseline FILE] [--tolerance 0.2] REPORT.json...\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *tolerance < 0 || *tolerance >= 1 {
		return errors.New("--tolerance must be 0 to 1")
	}
	f, err := os.Open(*baseline)
	if err != nil {
		return err
	}
	records, err := parseBaseline(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", *baseline, err)
	}
	var reports []any
	for _, name := range fs.Args() {
		raw, err := os.ReadFile(name)
		if err != nil {
			return err
		}
		var doc any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		reports = append(reports, doc)
	}
	verdicts := check(records, reports, *tolerance)
	failed := 0
	fmt.Fprintf(stdout, "%-26s %9s %9s %9s  %-24s %s\n", "ratio", "recorded", "limit", "median", "runs", "verdict")
	for _, v := range verdicts {
		runs := make([]string, len(v.Values))
		for i, x := range v.Values {
			runs[i] = strconv.FormatFloat(x, 'f', 3, 64)
		}
		text := "ok"
		switch {
		case len(v.Values) == 0:
			text = "FAIL: no run measured it"
		case !v.OK:
			text = fmt.Sprintf("FAIL: more than %.0f %% worse than recorded (%s)", *tolerance*100, v.Reason)
		}
		if !v.OK {
			failed++
		}
		fmt.Fprintf(stdout, "%-26s %9.3f %9.3f %9.3f  %-24s %s\n", v.Name, v.Recorded, v.Limit, v.Median, strings.Join(runs, " "), text)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d ratios below their record; if the cost was chosen, record the new ratio and the reason in %s", failed, len(verdicts), *baseline)
	}
	return nil
}

// parseBaseline reads the baseline file.
func parseBaseline(r io.Reader) ([]record, error) {
	var out []record
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("line %d: want name, path, recorded ratio, higher or lower, and a reason", n)
		}
		v, err := strconv.ParseFloat(f[2], 64)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("line %d: recorded ratio %q is not a positive number", n, f[2])
		}
		if f[3] != "higher" && f[3] != "lower" {
			return nil, fmt.Errorf("line %d: %q: want higher or lower", n, f[3])
		}
		out = append(out, record{Name: f[0], Path: f[1], Recorded: v, Higher: f[3] == "higher", Reason: strings.Join(f[4:], " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no ratio recorded")
	}
	return out, nil
}

// check takes, per record, the median of the reports that hold its path.
func check(records []record, reports []any, tolerance float64) []verdict {
	out := make([]verdict, 0, len(records))
	for _, r := range records {
		v := verdict{record: r}
		for _, doc := range reports {
			if x, ok := lookup(doc, r.Path); ok {
				v.Values = append(v.Values, x)
			}
		}
		if r.Higher {
			v.Limit = r.Recorded * (1 - tolerance)
		} else {
			v.Limit = r.Recorded / (1 - tolerance)
		}
		if len(v.Values) > 0 {
			v.Median = median(v.Values)
			v.OK = r.Higher && v.Median >= v.Limit || !r.Higher && v.Median <= v.Limit
		}
		out = append(out, v)
	}
	return out
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// lookup resolves path in a decoded JSON document to a positive number; a
// zero or missing figure (a phase that did not run) counts as not measured.
func lookup(doc any, path string) (float64, bool) {
	if rest, ok := strings.CutPrefix(path, "["); ok {
		sel, rest, _ := strings.Cut(rest, "]")
		k, want, _ := strings.Cut(sel, "=")
		obj, ok := doc.(map[string]any)
		if !ok || fmt.Sprint(obj[k]) != want {
			return 0, false
		}
		path = strings.TrimPrefix(rest, ".")
	}
	cur := doc
	for _, part := range strings.Split(path, ".") {
		key, sel, hasSel := strings.Cut(part, "[")
		obj, ok := cur.(map[string]any)
		if !ok {
			return 0, false
		}
		if cur, ok = obj[key]; !ok {
			return 0, false
		}
		if !hasSel {
			continue
		}
		k, want, ok := strings.Cut(strings.TrimSuffix(sel, "]"), "=")
		arr, isArr := cur.([]any)
		if !ok || !isArr {
			return 0, false
		}
		cur = nil
		for _, el := range arr {
			if m, ok := el.(map[string]any); ok && fmt.Sprint(m[k]) == want {
				cur = m
				break
			}
		}
	}
	x, ok := cur.(float64)
	return x, ok && x > 0
}
