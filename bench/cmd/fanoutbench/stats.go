package main

import (
	"bytes"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
)

// keyLayout is how message keys (states[0].occurredAt) are written; it is
// core.TimeLayout's millisecond form, so the key has a fixed length.
const keyLayout = "2006-01-02T15:04:05.000Z07:00"

var keyMarker = []byte(`"occurredAt":"`)

// keyMillis returns the first occurredAt in a message as Unix milliseconds.
// The subscription query lists states { occurredAt ... } first, so the first
// occurredAt of a GraphQL `next` message is states[0].occurredAt; broker
// payloads are the same bytes. A byte scan keeps the subscriber's work per
// message small, as it runs on the same two cores as the server.
func keyMillis(msg []byte) (int64, bool) {
	i := bytes.Index(msg, keyMarker)
	if i < 0 {
		return 0, false
	}
	rest := msg[i+len(keyMarker):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	if err != nil {
		return 0, false
	}
	return t.UnixMilli(), true
}

// keyAt formats the key of message ms (Unix milliseconds).
func keyAt(ms int64) string { return time.UnixMilli(ms).UTC().Format(keyLayout) }

// recorder keeps, for every subscriber and measured message, the time the
// message arrived, from now() (0: not arrived). Message i
// carries the key baseMs+i; keys below baseMs are priming messages.
type recorder struct {
	baseMs int64
	n, m   int

	recv        []atomic.Int64
	primed      []atomic.Bool
	primedCount atomic.Int64
	dups        atomic.Int64
	strays      atomic.Int64
	// sendAt and ackAt are the publisher's times of message i: before the
	// request (or publish) and after its response (or acknowledgement).
	sendAt, ackAt []int64
}

func newRecorder(n, m int, baseMs int64) *recorder {
	return &recorder{baseMs: baseMs, n: n, m: m,
		recv: make([]atomic.Int64, n*m), primed: make([]atomic.Bool, n),
		sendAt: make([]int64, m), ackAt: make([]int64, m)}
}

// epoch is the origin of every recorded time.
var epoch = time.Now()

// now is the monotonic time since epoch in nanoseconds, never 0.
func now() int64 { return int64(time.Since(epoch)) + 1 }

// deliver records that subscriber sub received msg at the time at.
func (r *recorder) deliver(sub int, msg []byte, at int64) {
	ms, ok := keyMillis(msg)
	if !ok {
		r.strays.Add(1)
		return
	}
	idx := ms - r.baseMs
	switch {
	case idx < 0:
		if !r.primed[sub].Swap(true) {
			r.primedCount.Add(1)
		}
	case idx >= int64(r.m):
		r.strays.Add(1)
	default:
		if !r.recv[sub*r.m+int(idx)].CompareAndSwap(0, at) {
			r.dups.Add(1)
		}
	}
}

// received counts the deliveries of the measured messages so far.
func (r *recorder) received() int {
	c := 0
	for i := range r.recv {
		if r.recv[i].Load() != 0 {
			c++
		}
	}
	return c
}

// Dist summarises a latency distribution in milliseconds.
type Dist = benchstat.Latency

// quantile is the nearest-rank quantile of sorted values.
func quantile(sorted []int64, q float64) int64 { return benchstat.Percentile(sorted, q) }

// distOf summarises nanosecond latencies, leaving ns as it was.
func distOf(ns []int64) Dist { return benchstat.Summarize(slices.Clone(ns)) }

// Latency is the outcome of one fan-out measurement.
type Latency struct {
	Subscribers int `json:"subscribers"`
	Messages    int `json:"messages"`
	Expected    int `json:"expectedDeliveries"`
	Delivered   int `json:"delivered"`
	Lost        int `json:"lost"`
	Duplicates  int `json:"duplicates"`
	Strays      int `json:"strays"`
	// FromAck: delivery minus the publisher's response/acknowledgement
	// (POST /states response; NATS Flush; MQTT QoS 0 write). Negative when
	// the event arrived before the response did.
	FromAck Dist `json:"fromAck"`
	// EarlyDeliveries arrived before the publisher's response.
	EarlyDeliveries int `json:"earlyDeliveries"`
	// FromSend: delivery minus the moment the publisher started the request.
	FromSend Dist `json:"fromSend"`
	// Publish: the publisher's send-to-acknowledgement time per message.
	Publish Dist `json:"publish"`
	// LastFromAck: per message, the last subscriber's delivery minus the
	// acknowledgement, i.e. when the whole fan-out was done.
	LastFromAck Dist `json:"lastFromAck"`
}

func (r *recorder) latency() Latency {
	l := Latency{Subscribers: r.n, Duplicates: int(r.dups.Load()), Strays: int(r.strays.Load())}
	fromAck := make([]int64, 0, r.n*r.m)
	fromSend := make([]int64, 0, r.n*r.m)
	publish := make([]int64, 0, r.m)
	last := make([]int64, 0, r.m)
	for i := 0; i < r.m; i++ {
		if r.ackAt[i] == 0 {
			continue // never published (run cut short)
		}
		l.Messages++
		publish = append(publish, r.ackAt[i]-r.sendAt[i])
		lastAt := int64(math.MinInt64)
		for s := 0; s < r.n; s++ {
			at := r.recv[s*r.m+i].Load()
			if at == 0 {
				continue
			}
			d := at - r.ackAt[i]
			if d < 0 {
				l.EarlyDeliveries++
			}
			fromAck = append(fromAck, d)
			fromSend = append(fromSend, at-r.sendAt[i])
			lastAt = max(lastAt, at)
		}
		if lastAt != math.MinInt64 {
			last = append(last, lastAt-r.ackAt[i])
		}
	}
	l.Expected = l.Messages * r.n
	l.Delivered = len(fromAck)
	l.Lost = l.Expected - l.Delivered
	l.FromAck, l.FromSend, l.Publish, l.LastFromAck = distOf(fromAck), distOf(fromSend), distOf(publish), distOf(last)
	return l
}
