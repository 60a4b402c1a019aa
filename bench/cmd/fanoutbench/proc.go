package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

// rssBytes reads VmRSS of a process.
func rssBytes(pid int) (int64, error) { return benchstat.RSS(pid) }

// cpuSeconds is user+system CPU time of a process (pid 0: this one).
func cpuSeconds(pid int) (float64, error) {
	st, err := benchstat.ReadStat(pid)
	return st.CPUSeconds(), err
}

// loadAvg is the three load averages as /proc/loadavg writes them.
func loadAvg() string {
	l := benchstat.LoadAvg()
	return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2])
}

// findPid returns the pid of the process whose comm is name, or 0.
func findPid(name string) int {
	for _, pid := range benchstat.Pids() {
		if benchstat.Comm(pid) == name {
			return pid
		}
	}
	return 0
}

// promSample reads the named unlabelled samples from a Prometheus text
// endpoint; missing names are absent from the map.
func promSample(ctx context.Context, c *http.Client, u string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	res, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, res.Status)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		if !ok || !want[name] {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// mustLoopback refuses any target that is not this machine's loopback.
func mustLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	if benchstat.Loopback(u.Hostname()) {
		return nil
	}
	return fmt.Errorf("%s: only loopback targets (127.0.0.1) are allowed", raw)
}

// procTimes is the CPU seconds of every process, by pid, with its name.
type procTimes map[int]procTime

type procTime struct {
	comm    string
	started int64
	cpu     float64
}

func snapshotProcs() procTimes {
	out := procTimes{}
	for _, pid := range benchstat.Pids() {
		st, err := benchstat.ReadStat(pid)
		if err != nil {
			continue
		}
		out[pid] = procTime{benchstat.Comm(pid), st.Started, st.CPUSeconds()}
	}
	return out
}

// ProcCPU is one process's CPU time in a window.
type ProcCPU struct {
	Pid     int     `json:"pid"`
	Comm    string  `json:"comm"`
	Seconds float64 `json:"seconds"`
}

// busiest lists the processes, other than skip, that used the most CPU
// between two snapshots (processes that ended in between are missed).
func busiest(before, after procTimes, n int, skip ...int) []ProcCPU {
	var out []ProcCPU
	for pid, a := range after {
		if slices.Contains(skip, pid) {
			continue
		}
		d := a.cpu
		if b, ok := before[pid]; ok && b.started == a.started {
			d -= b.cpu
		}
		if d >= 0.05 {
			out = append(out, ProcCPU{Pid: pid, Comm: a.comm, Seconds: math.Round(d*100) / 100})
		}
	}
	slices.SortFunc(out, func(x, y ProcCPU) int { return cmp.Compare(y.Seconds, x.Seconds) })
	if len(out) > n {
		out = out[:n]
	}
	return out
}
