package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// rssBytes reads VmRSS of a process from /proc/<pid>/status.
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// cpuSeconds is user+system CPU time of a process (pid 0: this one).
func cpuSeconds(pid int) (float64, error) {
	cpu, _, err := procStat(pid)
	return cpu, err
}

// procStat reads a process's user+system CPU seconds and its start time
// (clock ticks after boot), which tells a reused pid apart.
func procStat(pid int) (cpu float64, started int64, err error) {
	p := "/proc/self/stat"
	if pid > 0 {
		p = fmt.Sprintf("/proc/%d/stat", pid)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return 0, 0, err
	}
	// The command name may hold spaces: fields start after its ')'.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("unexpected %s", p)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime, stime and starttime are fields 14, 15, 22.
	if len(f) < 20 {
		return 0, 0, fmt.Errorf("short %s", p)
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	start, err3 := strconv.ParseInt(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, fmt.Errorf("bad %s", p)
	}
	return (ut + st) / clockTicks, start, nil
}

// loadAvg is the three load averages as /proc/loadavg writes them.
func loadAvg() string {
	l := benchstat.LoadAvg()
	return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2])
}

// findPid returns the pid of the process whose comm is name, or 0.
func findPid(name string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == name {
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
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, started, err := procStat(pid)
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		out[pid] = procTime{strings.TrimSpace(string(comm)), started, c}
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
