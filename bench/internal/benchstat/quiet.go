package benchstat

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Quiet says when the machine is quiet enough to measure on. The machine is
// shared, and a measurement taken while something else runs says more about
// that than about the code under test.
type Quiet struct {
	// MaxLoad: the 1-minute load average must be below this; 0 disables
	// waiting altogether.
	MaxLoad float64
	// MaxBusy: the share of all CPUs (0 to 1) busy over a 2 s sample must be
	// below this; 0 leaves the CPUs unchecked. The load average alone lags:
	// it falls below 1.0 while, say, the kernel still writes back the dirty
	// pages of the previous phase.
	MaxBusy float64
	// Timeout is the longest wait; after it the measurement runs anyway.
	Timeout time.Duration
}

// quietStep is the pause between two looks at a busy machine.
const quietStep = 10 * time.Second

// Wait waits until the machine is quiet, logging one line per look at a busy
// machine, and returns how long it waited. It ends early when ctx does.
func (q Quiet) Wait(ctx context.Context, logf func(format string, args ...any)) time.Duration {
	if q.MaxLoad <= 0 {
		return 0
	}
	start := time.Now()
	for ctx.Err() == nil {
		load, busy := q.sample(ctx)
		if q.quiet(load, busy) {
			if q.MaxBusy <= 0 {
				break
			}
			// Look again a little later: another benchmark that waited for
			// the same quiet machine may just have started.
			if Sleep(ctx, 3*time.Second) != nil {
				break
			}
			if load, busy = q.sample(ctx); q.quiet(load, busy) {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) >= q.Timeout {
			logf("%s after %s: measuring anyway", q.describe(load, busy), q.Timeout)
			break
		}
		logf("%s: waiting %s", q.describe(load, busy), quietStep)
		if Sleep(ctx, quietStep) != nil {
			break
		}
	}
	return time.Since(start)
}

// sample reads the load average and, when MaxBusy is set, the share of all
// CPUs that were busy over the next 2 s (0 when /proc/stat is unreadable:
// then only the load average counts).
func (q Quiet) sample(ctx context.Context) (load [3]float64, busy float64) {
	if q.MaxBusy > 0 {
		s0, err0 := MachineCPU()
		t0 := time.Now()
		slept := Sleep(ctx, 2*time.Second)
		s1, err1 := MachineCPU()
		cpus := s0.CPUs
		if cpus == 0 {
			cpus = runtime.NumCPU()
		}
		if slept == nil && err0 == nil && err1 == nil {
			busy = (s1.Busy - s0.Busy) / time.Since(t0).Seconds() / float64(cpus)
		}
	}
	return LoadAvg(), busy
}

func (q Quiet) quiet(load [3]float64, busy float64) bool {
	return load[0] < q.MaxLoad && (q.MaxBusy <= 0 || busy < q.MaxBusy)
}

func (q Quiet) describe(load [3]float64, busy float64) string {
	s := fmt.Sprintf("load average %.2f %.2f %.2f (max %.2f)", load[0], load[1], load[2], q.MaxLoad)
	if q.MaxBusy > 0 {
		s += fmt.Sprintf(", CPUs %.0f%% busy (max %.0f%%)", busy*100, q.MaxBusy*100)
	}
	return s
}

// Sleep waits d, or less when ctx ends first: then it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
