package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

// BenchmarkResume10k: a subscriber that missed 10,000 events resumes with
// its cursor; the figure is the time until it has them all (mountEvents
// with after). Baseline in the same run: reading the same 10,000 events
// through GET /api/v1/events in pages of 1,000. docs/performance.md,
// "Event log".
func BenchmarkResume10k(b *testing.B) {
	for name, newConfig := range backends(b) {
		b.Run(name, func(b *testing.B) {
			in := start(b, newConfig(b))
			a := newFleet(in, "A")
			api := client.New(in.base, client.StaticToken(a.token))
			uid := uniqueUID("RB")
			associate(b, api, uid)
			var start eventPageView
			if err := api.Do(context.Background(), http.MethodGet, "/events?limit=1000", nil, &start); err != nil {
				b.Fatal(err)
			}
			const missed = 10_000
			fill(b, api, uid, missed, time.Now().Add(-time.Hour))
			b.ResetTimer()
			var resume, page time.Duration
			for range b.N {
				began := time.Now()
				n := 0
				ctx, cancel := context.WithCancel(context.Background())
				err := api.Subscribe(ctx, `subscription($after: ID) { mountEvents(after: $after) { id } }`, map[string]any{"after": start.Next}, nil,
					func(json.RawMessage) error {
						if n++; n == missed {
							cancel()
						}
						return nil
					})
				cancel()
				if err != nil && n < missed {
					b.Fatal(err)
				}
				resume += time.Since(began)

				began = time.Now()
				after, got := start.Next, 0
				for got < missed {
					var p eventPageView
					if err := api.Do(context.Background(), http.MethodGet, "/events?limit=1000&after="+url.QueryEscape(after), nil, &p); err != nil {
						b.Fatal(err)
					}
					got, after = got+len(p.Events), p.Next
				}
				page += time.Since(began)
			}
			b.ReportMetric(float64(resume.Milliseconds())/float64(b.N), "resume-ms")
			b.ReportMetric(float64(page.Milliseconds())/float64(b.N), "rest-pages-ms")
		})
	}
}

// BenchmarkWebhookDeliveries: one webhook to a local receiver, reports of
// one entry posted 8 at a time, in two phases: flat out (2,000 reports: the
// delivery rate the service sustains), then paced at 500 reports/s for 5 s
// (the p99 from a report's acknowledgement to its delivery while the
// receiver keeps up). Baseline in the same run: the rate at which a plain Go
// client POSTs bodies of the same size to the same receiver.
// docs/performance.md, "Webhooks".
func BenchmarkWebhookDeliveries(b *testing.B) {
	for name, newConfig := range backends(b) {
		b.Run(name, func(b *testing.B) {
			cfg := newConfig(b)
			cfg.WebhookAllowPrivate = true
			in := start(b, cfg)
			a := newFleet(in, "A")
			api := client.New(in.base, client.StaticToken(a.token))
			uid := uniqueUID("WB")
			associate(b, api, uid)
			rcv := newDeliveryReceiver()
			defer rcv.Close()
			if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"STATES_REPORTED"}}, nil); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			base := time.Now().Add(-time.Hour)
			flat := rcv.run(b, api, uid, base, 2000, 0)
			b.ReportMetric(flat.rate, "flat-out-deliveries/s")
			b.ReportMetric(flat.p99, "flat-out-p99-ms")
			paced := rcv.run(b, api, uid, base.Add(time.Minute), 2500, 500)
			b.ReportMetric(paced.rate, "paced-deliveries/s")
			b.ReportMetric(paced.p99, "paced-p99-ms")
			b.StopTimer()
			b.ReportMetric(plainPosts(rcv.URL, 2000), "plain-posts/s")
		})
	}
}

// BenchmarkWebhookBurst: 5,000 reports posted at once (8 clients, as fast
// as they are answered) to a mount one webhook listens to; the delivery
// rate from the first delivery to the last, how long after its report the
// last delivery came, and plain POSTs to the same receiver as the
// baseline. "backlog" measures the dispatcher alone: the 5,000 reports are
// in the log before it starts, so that how fast they were posted does not
// bound the rate. docs/performance.md, "Webhooks: a burst to one webhook".
func BenchmarkWebhookBurst(b *testing.B) {
	for name, newConfig := range backends(b) {
		for _, backlog := range []bool{false, true} {
			sub := name
			if backlog {
				sub += "/backlog"
			}
			b.Run(sub, func(b *testing.B) {
				cfg := newConfig(b)
				cfg.WebhookAllowPrivate = true
				hold := make(chan struct{})
				if backlog {
					cfg.HoldDeliveries = hold
				}
				in := start(b, cfg)
				a := newFleet(in, "A")
				api := client.New(in.base, client.StaticToken(a.token))
				uid := uniqueUID("WB")
				associate(b, api, uid)
				rcv := newDeliveryReceiver()
				defer rcv.Close()
				if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"STATES_REPORTED"}}, nil); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				const n = 5000
				base := time.Now().Add(-time.Hour)
				acked := rcv.post(b, api, uid, base, n, 0)
				released := time.Now()
				if backlog {
					close(hold)
				}
				burst := rcv.collect(b, base, acked)
				b.StopTimer()
				plain := plainPosts(rcv.URL, n)
				b.ReportMetric(burst.rate, "deliveries/s")
				if backlog {
					b.ReportMetric(burst.last.Sub(released).Seconds(), "drained-after-s")
				} else {
					b.ReportMetric(burst.lastLag.Seconds(), "last-after-its-report-s")
					b.ReportMetric(burst.p99, "p99-ms")
				}
				b.ReportMetric(plain, "plain-posts/s")
				b.ReportMetric(burst.rate/plain, "ratio")
			})
		}
	}
}

// plainPosts is the baseline of the webhook benchmarks: n plain POSTs of
// a body of a delivery's size to url, 8 at a time, per second.
func plainPosts(url string, n int) float64 {
	body := make([]byte, 1200)
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for range work {
				res, err := http.Post(url, "application/json", bytes.NewReader(body))
				if err == nil {
					res.Body.Close()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return float64(n) / time.Since(began).Seconds()
}
