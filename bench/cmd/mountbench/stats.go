package main

import (
	"context"
	"math"
	"os"
	"time"

	"github.com/uptrace/bun"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

// latency summarises a set of request durations (milliseconds).
type latency = benchstat.Latency

// summarize sorts d in place and reads nearest-rank percentiles from it.
func summarize(d []time.Duration) latency { return benchstat.Summarize(d) }

// loadAvg reads the 1, 5 and 15 minute load averages.
func loadAvg() [3]float64 { return benchstat.LoadAvg() }

// watched is a process whose CPU time (its own, and its children's) is
// reported per phase.
type watched struct {
	name string
	pid  int
}

// cpuWatch samples the CPU time of mountbench itself, of the processes
// named with --watch and of the PostgreSQL server (found through
// pg_backend_pid when it runs on this machine).
type cpuWatch struct {
	procs []watched
}

func newCPUWatch(ctx context.Context, db *bun.DB, procs []watched) *cpuWatch {
	w := &cpuWatch{procs: append([]watched{{name: "mountbench", pid: os.Getpid()}}, procs...)}
	var backend int
	if err := db.NewRaw("SELECT pg_backend_pid()").Scan(ctx, &backend); err == nil && backend > 0 {
		if st, ok := readStat(backend); ok && st.PPid > 1 {
			w.procs = append(w.procs, watched{name: "postgres", pid: st.PPid})
		}
	}
	return w
}

func readStat(pid int) (benchstat.Stat, bool) {
	st, err := benchstat.ReadStat(pid)
	return st, err == nil
}

// sample returns each watched process's CPU seconds so far: its own time,
// its reaped children's, and its live children's.
func (w *cpuWatch) sample() map[string]float64 {
	out := make(map[string]float64, len(w.procs)+1)
	if m, err := benchstat.MachineCPU(); err == nil {
		out[machineKey], out[stealKey] = m.Busy, m.Steal
	}
	roots := make(map[int]string, len(w.procs))
	for _, p := range w.procs {
		st, ok := readStat(p.pid)
		if !ok {
			continue
		}
		roots[p.pid] = p.name
		out[p.name] += float64(st.UTime+st.STime+st.CUTime+st.CSTime) / benchstat.ClockTicks
	}
	for _, pid := range benchstat.Pids() {
		if _, root := roots[pid]; root {
			continue
		}
		st, ok := readStat(pid)
		if !ok {
			continue
		}
		if name, child := roots[st.PPid]; child {
			out[name] += st.CPUSeconds()
		}
	}
	return out
}

// machineKey holds the CPU seconds the whole machine spent busy (all
// processes, kernel included) in a sample.
const machineKey = "machine"

// stealKey holds the part of the machine's busy time the hypervisor gave to
// other guests: a disturbance from outside, reported apart from "other".
const stealKey = "steal"

// cpuSpan is what a phase cost in CPU, per process, in percent of one core;
// "machine" is the whole machine, "steal" what the hypervisor took for
// other guests, and "other" what neither those nor the watched processes
// and mountbench used (other work on this machine: a disturbance).
func cpuSpan(before, after map[string]float64, elapsed time.Duration) map[string]float64 {
	out := make(map[string]float64, len(after)+1)
	var watchedSum float64
	for name, v := range after {
		out[name] = math.Round((v-before[name])/elapsed.Seconds()*1000) / 10
		if name != machineKey {
			watchedSum += out[name] // steal included: it is not "other"
		}
	}
	if m, ok := out[machineKey]; ok {
		out["other"] = math.Round(max(0, m-watchedSum)*10) / 10
	}
	return out
}
