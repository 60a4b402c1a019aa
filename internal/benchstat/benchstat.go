// Package benchstat holds what mountd's load tools (cmd/mountbench,
// cmd/fanoutbench) share: latency summaries, machine readings from /proc,
// and the loopback-only rule for their targets.
package benchstat

import (
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
		P50: ms(float64(Percentile(ns, 0.50))), P90: ms(float64(Percentile(ns, 0.90))),
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

// Loopback reports whether host names this machine's loopback interface:
// the load tools refuse any other target.
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
