package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

func TestKeys(t *testing.T) {
	ms := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC).UnixMilli() + 123
	msg := []byte(`{"payload":{"data":{"mountStateChanged":{"states":[{"occurredAt":"` + keyAt(ms) +
		`","code":"BATTERY_LEVEL"}],"occurredAt":"2026-05-01T10:00:09.000Z"}}},"id":"1","type":"next"}`)
	if got, ok := keyMillis(msg); !ok || got != ms {
		t.Fatalf("keyMillis = %d, %v; want %d", got, ok, ms)
	}
	if msgType(msg) != "next" || msgType([]byte(`{"type":"ping"}`)) != "ping" || msgType([]byte(`{}`)) != "" {
		t.Fatal("msgType")
	}
	if _, ok := keyMillis([]byte(`{"type":"ping"}`)); ok {
		t.Fatal("a message without occurredAt has no key")
	}

	tpl, err := newTemplate(msg)
	if err != nil {
		t.Fatal(err)
	}
	out := tpl.message(ms + 7)
	if len(out) != len(msg) {
		t.Fatalf("templated message is %d bytes, the template %d", len(out), len(msg))
	}
	if got, _ := keyMillis(out); got != ms+7 {
		t.Fatalf("templated key %d", got)
	}
	syn, err := syntheticTemplate(600)
	if err != nil || len(syn.message(ms)) != 600 {
		t.Fatalf("synthetic template: %v, %d bytes", err, len(syn.raw))
	}
}

func TestRecorder(t *testing.T) {
	base := int64(1_000_000)
	r := newRecorder(2, 3, base)
	msg := func(ms int64) []byte { return []byte(`{"occurredAt":"` + keyAt(ms) + `"}`) }
	// both subscribers primed by a key below base
	r.deliver(0, msg(base-1), 5)
	r.deliver(1, msg(base-2), 5)
	r.deliver(1, msg(base-1), 6)
	if r.primedCount.Load() != 2 {
		t.Fatalf("primed %d", r.primedCount.Load())
	}
	// message 0: sent at 100, acknowledged at 110; message 1 at 200/210
	r.sendAt[0], r.ackAt[0] = 100, 110
	r.sendAt[1], r.ackAt[1] = 200, 210
	r.deliver(0, msg(base), 105) // before the ack
	r.deliver(1, msg(base), 130)
	r.deliver(0, msg(base+1), 220)
	r.deliver(0, msg(base+1), 221) // duplicate
	r.deliver(1, msg(base+5), 300) // beyond the measured keys
	r.deliver(1, []byte(`junk`), 300)
	l := r.latency()
	if l.Messages != 2 || l.Expected != 4 || l.Delivered != 3 || l.Lost != 1 || l.Duplicates != 1 || l.Strays != 2 || l.EarlyDeliveries != 1 {
		t.Fatalf("%+v", l)
	}
	if l.FromAck.Count != 3 || l.LastFromAck.Count != 2 {
		t.Fatalf("%+v", l)
	}
}

func TestQuantile(t *testing.T) {
	s := make([]int64, 1000)
	for i := range s {
		s[i] = int64(i + 1)
	}
	if quantile(s, 0.5) != 500 || quantile(s, 0.99) != 990 || quantile(s, 0.999) != 999 || quantile(s, 1) != 1000 {
		t.Fatal("nearest-rank quantiles")
	}
	d := distOf([]int64{3e6, 1e6, 2e6})
	if d.P50 != 2 || d.Max != 3 || d.Min != 1 || d.Mean != 2 {
		t.Fatalf("%+v", d)
	}
}

func TestParallel(t *testing.T) {
	var n atomic.Int64
	if err := parallel(context.Background(), 100, 8, func(context.Context, int) error { n.Add(1); return nil }); err != nil || n.Load() != 100 {
		t.Fatalf("%v, %d", err, n.Load())
	}
	boom := errors.New("boom")
	if err := parallel(context.Background(), 100, 8, func(_ context.Context, i int) error {
		if i == 3 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

func TestFlags(t *testing.T) {
	var sink nopWriter
	if _, err := parseFlags([]string{"--base", "http://10.0.0.1:8080", "--client-id", "x"}, sink); err == nil {
		t.Fatal("a non-loopback target must be refused")
	}
	if _, err := parseFlags([]string{"--nats-url", "nats://example.com:4222", "--client-id", "x"}, sink); err == nil {
		t.Fatal("a non-loopback broker must be refused")
	}
	if _, err := parseFlags([]string{"--subscribers", "0", "--client-id", "x"}, sink); err == nil {
		t.Fatal("--subscribers 0")
	}
	c, err := parseFlags([]string{"--client-id", "x", "--systems", "mountd,nats"}, sink)
	if err != nil || len(c.systems) != 2 || c.subscribers != 1000 {
		t.Fatalf("%v %+v", err, c)
	}
}

type nopWriter struct{}

func (nopWriter) Write(p []byte) (int, error) { return len(p), nil }

func TestBusiest(t *testing.T) {
	before := procTimes{1: {"a", 10, 1}, 2: {"b", 10, 5}, 3: {"self", 10, 0}, 5: {"old", 10, 7}}
	after := procTimes{1: {"a", 10, 4}, 2: {"b", 10, 5.5}, 3: {"self", 10, 9}, 4: {"new", 20, 2}, 5: {"reused", 30, 0.3}}
	got := busiest(before, after, 3, 3)
	if len(got) != 3 || got[0].Comm != "a" || got[0].Seconds != 3 || got[1].Comm != "new" || got[2].Comm != "b" {
		t.Fatalf("%+v", got)
	}
	if st, err := benchstat.ReadStat(0); err != nil || st.CPUSeconds() < 0 || st.Started <= 0 {
		t.Fatalf("ReadStat(self) = %+v, %v", st, err)
	}
}
