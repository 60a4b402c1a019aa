// Package benchstat holds what mountd's load tools (cmd/mountbench,
// cmd/fanoutbench) share: latency summaries, machine readings from /proc,
// the wait for a quiet machine, and the loopback-only rule for their targets.
package benchstat

import (
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Latency summarises a set of latencies in milliseconds.
type Latency struct {
	Count int     `json:"count"`
	Min   float64 `json:"minMs"`
	Mean  float64 `json:"meanMs"`
	P50   float64 `json:"p50Ms"`
	P90   float64 `json:"p90Ms"`
	P95   float64 `json:"p95Ms"`
	P99   float64 `json:"p99Ms"`
	P999  float64 `json:"p999Ms"`
	Max   float64 `json:"maxMs"`
}

// Summarize sorts ns (nanoseconds, or a time.Duration) in place and reads
// nearest-rank percentiles from it, rounded to the microsecond.
func Summarize[T ~int64](ns []T) Latency {
	if len(ns) == 0 {
		return Latency{}
	}
	slices.Sort(ns)
	var sum float64
	for _, v := range ns {
		sum += float64(v)
	}
	return Latency{Count: len(ns), Min: ms(float64(ns[0])), Mean: ms(sum / float64(len(ns))),
		P50: ms(float64(Percentile(ns, 0.50))), P90: ms(float64(Percentile(ns, 0.90))), P95: ms(float64(Percentile(ns, 0.95))),
		P99: ms(float64(Percentile(ns, 0.99))), P999: ms(float64(Percentile(ns, 0.999))),
		Max: ms(float64(ns[len(ns)-1]))}
}

// Percentile is the nearest-rank percentile p (0..1] of sorted; 0 when empty.
func Percentile[T ~int64](sorted []T, p float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(ns float64) float64 { return math.Round(ns/1e3) / 1e3 }

// LoadAvg reads the 1, 5 and 15 minute load averages (zeros when unreadable).
func LoadAvg() [3]float64 {
	var out [3]float64
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(raw)) {
		if i >= 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}

// clockTicks is USER_HZ, the unit of /proc/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// MachineTimes are the machine-wide CPU figures of /proc/stat since boot,
// in seconds, all CPUs together.
type MachineTimes struct {
	// Busy is the time the machine (all processes and the kernel) was busy.
	Busy float64
	// Steal is the part of Busy the hypervisor gave to other guests while
	// this machine's CPUs had work: a disturbance no process here caused.
	Steal float64
	// CPUs is the number of per-CPU lines.
	CPUs int
}

// MachineCPU reads MachineTimes in one read of /proc/stat.
func MachineCPU() (MachineTimes, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineTimes{}, err
	}
	busy, steal, cpus, err := parseProcStat(string(raw))
	return MachineTimes{Busy: float64(busy) / clockTicks, Steal: float64(steal) / clockTicks, CPUs: cpus}, err
}

// parseProcStat reads the busy clock ticks of all CPUs together from the
// first ("cpu") line of /proc/stat and counts the per-CPU lines ("cpu0", …).
// Busy is user, nice, system, irq, softirq and steal: idle and iowait are
// not (a CPU waiting for the disk is free to run something), and guest is
// already part of user.
func parseProcStat(s string) (busyTicks, stealTicks int64, cpus int, err error) {
	first, rest, _ := strings.Cut(s, "\n")
	f := strings.Fields(first)
	// user nice system idle is the least every kernel writes
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, 0, fmt.Errorf("unexpected /proc/stat line %q", first)
	}
	for i, v := range f[1:min(len(f), 9)] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("unexpected /proc/stat line %q", first)
		}
		busyTicks += n
		if i == 7 {
			stealTicks = n
		}
	}
	for line := range strings.Lines(rest) {
		if n, ok := strings.CutPrefix(line, "cpu"); ok && n != "" && n[0] >= '0' && n[0] <= '9' {
			cpus++
		}
	}
	return busyTicks, stealTicks, cpus, nil
}

// Loopback reports whether host names this machine's loopback interface:
// the load tools refuse any other target.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
