package benchstat

import (
	"context"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	for _, c := range []struct {
		name  string
		in    string
		busy  int64
		steal int64
		cpus  int
		fails bool
	}{
		{name: "two CPUs, guest columns",
			in: "cpu  125790 3 53243 482596 1602 7 9106 1470 500 0\n" +
				"cpu0 61508 0 25636 243781 295 0 4435 760 0 0\n" +
				"cpu1 64281 0 27606 238814 1306 0 4671 709 0 0\n" +
				"intr 1 2 3\nctxt 99\n",
			// user nice system irq softirq steal; not idle, iowait, guest
			busy: 125790 + 3 + 53243 + 7 + 9106 + 1470, steal: 1470, cpus: 2},
		{name: "old kernel without steal", in: "cpu 10 20 30 40 50 60 70\ncpu0 10 20 30 40 50 60 70\n",
			busy: 10 + 20 + 30 + 60 + 70, cpus: 1},
		{name: "no per-CPU lines", in: "cpu 1 2 3 4 5 6 7 8", busy: 1 + 2 + 3 + 6 + 7 + 8, steal: 8},
		{name: "no cpu line", in: "intr 1 2 3\n", fails: true},
		{name: "per-CPU line first", in: "cpu0 1 2 3 4 5 6 7 8\n", fails: true},
		{name: "too short", in: "cpu 1 2 3\n", fails: true},
		{name: "not a number", in: "cpu 1 x 3 4 5 6 7 8\n", fails: true},
		{name: "empty", in: "", fails: true},
	} {
		busy, steal, cpus, err := parseProcStat(c.in)
		if (err != nil) != c.fails || busy != c.busy || steal != c.steal || cpus != c.cpus {
			t.Errorf("%s: got %d ticks (steal %d), %d CPUs, err %v; want %d (%d), %d, fails %v",
				c.name, busy, steal, cpus, err, c.busy, c.steal, c.cpus, c.fails)
		}
	}
}

func TestQuietWaitEnds(t *testing.T) {
	logf := func(format string, args ...any) { t.Logf(format, args...) }
	// MaxLoad 0 does not wait.
	if d := (Quiet{MaxBusy: 0.1, Timeout: time.Hour}).Wait(context.Background(), logf); d != 0 {
		t.Errorf("MaxLoad 0 waited %s", d)
	}
	// A cancelled context ends the wait at once, however busy the machine.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := (Quiet{MaxLoad: 1e-9, MaxBusy: 1e-9, Timeout: time.Hour}).Wait(ctx, logf); d > time.Second {
		t.Errorf("cancelled wait took %s", d)
	}
}
