package main

import (
	"context"
	"sync"
	"time"
)

// schedule is an open loop: rate requests a second in all, slot j due at
// j/rate after the start and sent by client j mod clients. A slot is sent at
// its time whether or not earlier ones were answered, and its latency counts
// from that time, so a slow server shows as latency instead of as fewer
// requests (coordinated omission).
type schedule struct {
	Rate     float64
	Clients  int
	Duration time.Duration
}

// slots is how many requests the schedule sends.
func (s schedule) slots() int {
	if s.Rate <= 0 || s.Duration <= 0 {
		return 0
	}
	return int(s.Duration.Seconds() * s.Rate)
}

// due is when slot j is due, after the start.
func (s schedule) due(j int) time.Duration {
	return time.Duration(float64(j) / s.Rate * float64(time.Second))
}

// clientOf is the client that sends slot j.
func (s schedule) clientOf(j int) int { return j % max(1, s.Clients) }

// outcome is one request's result.
type outcome struct {
	// Kind names a failure ("timeout", "status 503", …); "" is a success.
	Kind   string
	Detail string
	Total  int
}

// sample is one slot as sent: its probe, its outcome and its latency from
// the time it was due.
type sample struct {
	Slot    int
	Latency time.Duration
	outcome
}

// run sends the slots with send(ctx, client, slot) until they are all sent
// or ctx ends, and waits for every answer; the requests themselves do not
// end with ctx (the client's timeout bounds them). Each client waits for
// its own slots' times in its own goroutine and sends each in a new one;
// inFlight (0: unbounded) bounds the requests outstanding: a slot due while
// the bound is reached is not sent and counts as the failure "in-flight
// bound". The samples come in no particular order.
func (s schedule) run(ctx context.Context, inFlight int, send func(ctx context.Context, client, slot int) outcome) []sample {
	n := s.slots()
	var (
		mu      sync.Mutex
		out     []sample
		clients sync.WaitGroup
		sent    sync.WaitGroup
		sem     chan struct{}
	)
	record := func(smp sample) {
		mu.Lock()
		out = append(out, smp)
		mu.Unlock()
	}
	if inFlight > 0 {
		sem = make(chan struct{}, inFlight)
	}
	sendCtx := context.WithoutCancel(ctx)
	step := max(1, s.Clients)
	start := time.Now().Add(10 * time.Millisecond)
	for c := range step {
		clients.Go(func() {
			timer := time.NewTimer(time.Hour)
			defer timer.Stop()
			for j := c; j < n; j += step {
				at := start.Add(s.due(j))
				timer.Reset(time.Until(at))
				select {
				case <-timer.C:
				case <-ctx.Done():
					return
				}
				if sem != nil {
					select {
					case sem <- struct{}{}:
					default:
						record(sample{Slot: j, outcome: outcome{Kind: "in-flight bound"}})
						continue
					}
				}
				sent.Go(func() {
					o := send(sendCtx, c, j)
					record(sample{Slot: j, Latency: time.Since(at), outcome: o})
					if sem != nil {
						<-sem
					}
				})
			}
		})
	}
	clients.Wait()
	sent.Wait()
	return out
}
