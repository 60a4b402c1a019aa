package e2e

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

// BenchmarkAPIRateLimit measures what MOUNTD_RATE_LIMIT costs: the most
// GET /api/v1/mounts/{uid} one server answers (32 clients, closed loop)
// without a limit and with one too high to refuse anything, A/B in
// alternating 3 s rounds in one run, on each backend. docs/performance.md,
// "API rate limit".
func BenchmarkAPIRateLimit(b *testing.B) {
	for name, newConfig := range backends(b) {
		b.Run(name, func(b *testing.B) {
			type arm struct {
				in       *instance
				token    string
				requests int64
				elapsed  time.Duration
			}
			setUp := func(rateLimit string) *arm {
				cfg := newConfig(b)
				cfg.RateLimit = rateLimit
				in := start(b, cfg)
				f := newFleet(in, "Bench")
				api := client.New(in.base, client.StaticToken(f.token))
				associate(b, api, "MNT-BENCH")
				fill(b, api, "MNT-BENCH", 10, time.Now().Add(-time.Minute))
				return &arm{in: in, token: f.token}
			}
			plain, limited := setUp(""), setUp("1000000/s")
			transport := &http.Transport{MaxIdleConnsPerHost: 64}
			defer transport.CloseIdleConnections()
			hc := &http.Client{Transport: transport}
			run := func(a *arm, d time.Duration) {
				var n atomic.Int64
				deadline := time.Now().Add(d)
				var wg sync.WaitGroup
				for range 32 {
					wg.Go(func() {
						for time.Now().Before(deadline) {
							req, _ := http.NewRequest(http.MethodGet, a.in.base+"/api/v1/mounts/MNT-BENCH", nil)
							req.Header.Set("Access-Key", a.token)
							res, err := hc.Do(req)
							if err != nil {
								b.Error(err)
								return
							}
							_, _ = io.Copy(io.Discard, res.Body)
							res.Body.Close()
							if res.StatusCode != http.StatusOK {
								b.Errorf("status %d", res.StatusCode)
								return
							}
							n.Add(1)
						}
					})
				}
				wg.Wait()
				a.requests += n.Load()
				a.elapsed += d
			}
			run(plain, time.Second) // warm both up
			run(limited, time.Second)
			plain.requests, plain.elapsed, limited.requests, limited.elapsed = 0, 0, 0, 0
			b.ResetTimer()
			for round := range 6 {
				if round%2 == 0 {
					run(plain, 3*time.Second)
					run(limited, 3*time.Second)
				} else {
					run(limited, 3*time.Second)
					run(plain, 3*time.Second)
				}
			}
			b.StopTimer()
			plainRate := float64(plain.requests) / plain.elapsed.Seconds()
			limitedRate := float64(limited.requests) / limited.elapsed.Seconds()
			b.ReportMetric(plainRate, "plain-req/s")
			b.ReportMetric(limitedRate, "limited-req/s")
			b.ReportMetric(limitedRate/plainRate, "ratio")
		})
	}
}
