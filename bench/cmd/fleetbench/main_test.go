package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

func TestScheduleSlots(t *testing.T) {
	for _, c := range []struct {
		name    string
		s       schedule
		slots   int
		due     map[int]time.Duration
		clients map[int]int
	}{
		{name: "10/s over 4 clients for 30 s", s: schedule{Rate: 10, Clients: 4, Duration: 30 * time.Second}, slots: 300,
			due:     map[int]time.Duration{0: 0, 1: 100 * time.Millisecond, 10: time.Second, 299: 29900 * time.Millisecond},
			clients: map[int]int{0: 0, 1: 1, 3: 3, 4: 0, 299: 3}},
		{name: "fractional rate", s: schedule{Rate: 2.5, Clients: 1, Duration: 2 * time.Second}, slots: 5,
			due:     map[int]time.Duration{1: 400 * time.Millisecond, 4: 1600 * time.Millisecond},
			clients: map[int]int{4: 0}},
		{name: "shorter than one slot", s: schedule{Rate: 1, Clients: 4, Duration: 500 * time.Millisecond}, slots: 0},
		{name: "no rate", s: schedule{Rate: 0, Clients: 4, Duration: time.Second}, slots: 0},
		{name: "no clients counts as one", s: schedule{Rate: 4, Duration: time.Second}, slots: 4, clients: map[int]int{3: 0}},
	} {
		if got := c.s.slots(); got != c.slots {
			t.Errorf("%s: %d slots, want %d", c.name, got, c.slots)
		}
		for j, want := range c.due {
			if got := c.s.due(j); got != want {
				t.Errorf("%s: slot %d due at %s, want %s", c.name, j, got, want)
			}
		}
		for j, want := range c.clients {
			if got := c.s.clientOf(j); got != want {
				t.Errorf("%s: slot %d sent by client %d, want %d", c.name, j, got, want)
			}
		}
	}
}

// TestScheduleIsOpenLoop: a send that never answers in time holds up no
// other slot; every slot is sent once, by its client.
func TestScheduleIsOpenLoop(t *testing.T) {
	s := schedule{Rate: 1000, Clients: 4, Duration: 40 * time.Millisecond}
	release := make(chan struct{})
	var mu sync.Mutex
	sentBy := map[int]int{}
	done := make(chan []sample)
	go func() {
		done <- s.run(context.Background(), 0, func(_ context.Context, c, j int) outcome {
			mu.Lock()
			sentBy[j] = c
			all := len(sentBy) == s.slots()
			mu.Unlock()
			if all {
				close(release)
			}
			<-release // no answer until every slot was sent
			return outcome{Total: j}
		})
	}()
	got := <-done
	if len(got) != s.slots() {
		t.Fatalf("%d samples, want %d", len(got), s.slots())
	}
	for j, c := range sentBy {
		if c != s.clientOf(j) {
			t.Errorf("slot %d sent by client %d, want %d", j, c, s.clientOf(j))
		}
	}
	for _, smp := range got {
		if smp.Total != smp.Slot {
			t.Errorf("slot %d has the outcome of slot %d", smp.Slot, smp.Total)
		}
	}
}

// TestScheduleInFlightBound: slots due while the bound is reached are not
// sent and count as failures.
func TestScheduleInFlightBound(t *testing.T) {
	s := schedule{Rate: 1000, Clients: 2, Duration: 20 * time.Millisecond}
	release := make(chan struct{})
	// No answer until every slot is due: the first three fill the bound.
	time.AfterFunc(s.Duration+50*time.Millisecond, func() { close(release) })
	got := s.run(context.Background(), 3, func(context.Context, int, int) outcome {
		<-release
		return outcome{}
	})
	kinds := map[string]int{}
	for _, smp := range got {
		kinds[smp.Kind]++
	}
	if len(got) != s.slots() || kinds[""] < 3 || kinds["in-flight bound"] == 0 {
		t.Errorf("%d samples of %d slots, kinds %v; want 3 or more sent and some over the bound", len(got), s.slots(), kinds)
	}
}

func TestScheduleStopsWithContext(t *testing.T) {
	s := schedule{Rate: 1, Clients: 1, Duration: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	got := s.run(ctx, 0, func(context.Context, int, int) outcome { cancel(); return outcome{} })
	if len(got) != 1 {
		t.Errorf("%d samples after cancelling in the first send, want 1", len(got))
	}
}

func TestFleetShares(t *testing.T) {
	const n = 100_000
	probes := fleetProbes(n)
	share := map[string]float64{}
	for _, p := range probes {
		share[p.Name] = float64(p.expected) / n
	}
	models := map[string]int{}
	for i := range n {
		v := valuesOf(i)
		models[v.Model]++
		if v.Battery < 1 || v.Battery > 99.9 || v.CPUTemperature < 25 || v.CPUTemperature > 79.9 {
			t.Fatalf("mount %d: values out of range %+v", i, v)
		}
		if v.CPUTemperature > 59.9 && v.CPUTemperature < 60.5 {
			t.Fatalf("mount %d: temperature %.1f next to the filter's 60", i, v.CPUTemperature)
		}
	}
	near := func(what string, got, want float64) {
		if got < want-0.01 || got > want+0.01 {
			t.Errorf("%s: share %.3f, want about %.3f", what, got, want)
		}
	}
	near("batteryLevel < 20", share["battery"], 0.10)
	near("HM-1 above 60", share["model-hot"], 0.30*0.15)
	near("unlocked without helmet", share["unlocked-empty"], 0.30*0.60)
	near("unfiltered", share["unfiltered"], 1)
	for m, want := range map[string]float64{"HM-1": 0.30, "HM-2": 0.25, "HM-3": 0.20, "HM-4": 0.15, "HM-5": 0.10} {
		near(m, float64(models[m])/n, want)
	}
	if p := probes[1]; p.expected != -1 || p.atMost != probes[0].expected || !p.presence {
		t.Errorf("the presence read is bounded by the battery read's total: %+v", p)
	}
}

func TestReportBody(t *testing.T) {
	v := mountValues{Model: "HM-2", Battery: 19.5, CPUTemperature: 61, Locked: true}
	var body struct {
		States []struct{ Code, Value, OccurredAt string }
	}
	if err := json.Unmarshal(v.report(time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC)), &body); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range body.States {
		got[s.Code] = s.Value
		if s.OccurredAt != "2026-11-29T07:00:00.000Z" {
			t.Errorf("%s occurredAt %q", s.Code, s.OccurredAt)
		}
	}
	want := map[string]string{"BATTERY_LEVEL": "19.5", "CPU_TEMPERATURE": "61.0", "MOUNT_LOCKED": "1", "HELMET_MOUNTED": "0"}
	if !maps.Equal(got, want) {
		t.Errorf("report %v, want %v", got, want)
	}
}

func TestProbeCheck(t *testing.T) {
	exact := probe{Name: "battery", expected: 10, atMost: -1}
	bounded := probe{Name: "offline", expected: -1, atMost: 10, presence: true}
	for _, c := range []struct {
		name   string
		p      probe
		total  int
		first  int
		ingest bool
		wrong  bool
	}{
		{"the seeded total", exact, 10, -1, false, false},
		{"another total", exact, 9, -1, false, true},
		{"another total with ingest", exact, 11, 10, true, true},
		{"within its bound, first", bounded, 7, -1, false, false},
		{"within its bound, as before", bounded, 7, 7, false, false},
		{"moved without ingest", bounded, 6, 7, false, true},
		{"moved with ingest", bounded, 6, 7, true, false},
		{"over its bound", bounded, 11, -1, true, true},
	} {
		if msg := c.p.check(c.total, c.first, c.ingest); (msg != "") != c.wrong {
			t.Errorf("%s: check says %q, want wrong %v", c.name, msg, c.wrong)
		}
	}
}

func TestCollector(t *testing.T) {
	probes := []probe{{Name: "a", expected: 5, atMost: -1}, {Name: "b", expected: -1, atMost: -1}}
	probeOf := func(j int) probe { return probes[j%2] }
	names := func(p probe) []string { return []string{"fleet", p.Name} }
	c := newCollector(false)
	ms := time.Millisecond
	// Out of order on purpose: "first" is the earliest slot's total.
	c.addAll([]sample{
		{Slot: 3, Latency: 40 * ms, outcome: outcome{Total: 8}},
		{Slot: 0, Latency: 10 * ms, outcome: outcome{Total: 5}},
		{Slot: 1, Latency: 20 * ms, outcome: outcome{Total: 7}},
		{Slot: 2, Latency: 10 * time.Second, outcome: outcome{Kind: "timeout", Detail: "Client.Timeout"}},
		{Slot: 4, Latency: 30 * ms, outcome: outcome{Total: 4}},
	}, probeOf, names)
	c.addAll([]sample{{Slot: 0, Latency: 50 * ms, outcome: outcome{Total: 1}}},
		func(int) probe { return baselineProbe }, func(probe) []string { return []string{"baseline"} })
	r := c.report(probes)
	if r.Fleet.Requests != 5 || r.Fleet.Errors != 1 || r.Fleet.ErrorKinds["timeout"] != 1 || !strings.HasPrefix(r.Fleet.FirstError, "timeout") {
		t.Errorf("fleet figures %+v", r.Fleet)
	}
	// The timeout counts in the latencies at the time it failed.
	if r.Fleet.Latency.Max != 10_000 || r.P99Ms != 10_000 || r.BaselineP99Ms != 50 || r.P99Ratio != 200 {
		t.Errorf("fleet latency %+v, p99 %v, baseline p99 %v, ratio %v", r.Fleet.Latency, r.P99Ms, r.BaselineP99Ms, r.P99Ratio)
	}
	// a: 5 then 4 (not the seeded 5); b: 7 then 8 (moved).
	if r.TotalsErrors != 2 || !strings.Contains(r.FirstTotalsError, "b: totalItems 8, 7 before") {
		t.Errorf("totals errors %d, first %q", r.TotalsErrors, r.FirstTotalsError)
	}
	if len(r.Expressions) != 2 || r.Expressions[0].Requests != 3 || r.Expressions[0].Errors != 1 || r.Expressions[1].Requests != 2 {
		t.Errorf("per expression %+v", r.Expressions)
	}
	if r.Expressions[0].TotalItems != 4 || r.Expressions[1].TotalItems != 8 {
		t.Errorf("last totals %d %d, want 4 8", r.Expressions[0].TotalItems, r.Expressions[1].TotalItems)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

var _ net.Error = timeoutError{}

func TestFailure(t *testing.T) {
	for _, c := range []struct {
		err  error
		kind string
	}{
		{&client.Error{Status: 503}, "status 503"},
		{fmt.Errorf("cannot reach mountd: %w", timeoutError{}), "timeout"},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), "timeout"},
		{errors.New("connection refused"), "transport"},
	} {
		if got := failure(c.err).Kind; got != c.kind {
			t.Errorf("%v: kind %q, want %q", c.err, got, c.kind)
		}
	}
}

func TestOverviewQuery(t *testing.T) {
	now := time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)
	counts := overviewCounts(now)
	q := overviewQuery(counts)
	for _, want := range []string{
		`all: mounts(pageSize: 1) { pagination { totalItems } }`,
		`idle: mounts(pageSize: 1, filter: {expression: "associationState = \"IDLE\""}) { pagination { totalItems } }`,
		`silent: mounts(pageSize: 1, filter: {expression: "NOT lastSeenAt >= \"2026-11-29T07:00:00Z\""})`,
	} {
		if !strings.Contains(q, want) {
			t.Errorf("query lacks %s:\n%s", want, q)
		}
	}
	aliases := []string{}
	for _, c := range counts {
		aliases = append(aliases, c.alias)
	}
	if want := []string{"all", "associated", "idle", "lowBattery", "noHelmet", "silent", "online", "offline", "unknown"}; !slices.Equal(aliases, want) {
		t.Errorf("counts %v, want %v", aliases, want)
	}
}

func TestCheckOverview(t *testing.T) {
	good := map[string]int{"all": 100, "associated": 100, "idle": 0, "lowBattery": 10, "online": 20, "offline": 80, "unknown": 0}
	if msg := checkOverview(good, 100, 10); msg != "" {
		t.Errorf("plausible counts: %s", msg)
	}
	bad := maps.Clone(good)
	bad["offline"], bad["all"] = 79, 99
	if msg := checkOverview(bad, 100, 10); !strings.Contains(msg, "all 99") || !strings.Contains(msg, "online+offline+unknown 99") {
		t.Errorf("implausible counts: %q", msg)
	}
}

func TestDumpPath(t *testing.T) {
	p := dumpPath("/c", 100000, "20261129024500")
	if p != "/c/fleet-100000-20261129024500-"+seedModel+".dump" || metaPath(p) != "/c/fleet-100000-20261129024500-"+seedModel+".json" {
		t.Errorf("dump %s, meta %s", p, metaPath(p))
	}
	u, err := withDatabase("postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "scratch")
	if err != nil || u != "postgres://postgres@127.0.0.1:5432/scratch?sslmode=disable" {
		t.Errorf("withDatabase: %s %v", u, err)
	}
}
