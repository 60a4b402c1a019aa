package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// latencyProbe records, in the page, how long after its report each fleet
// row shows it: a report's occurredAt is taken just before it is posted,
// and a row's data-last changes when the row is drawn with it.
const latencyProbe = `(() => {
  window.__lat = [];
  new MutationObserver((records) => {
    const now = Date.now();
    for (const r of records) if (r.attributeName === "data-last" && r.target.dataset.last) window.__lat.push(now - Date.parse(r.target.dataset.last));
  }).observe(document.querySelector("#fleet tbody"), { subtree: true, attributes: true, attributeFilter: ["data-last"] });
  true;
})()`

// BenchmarkConsoleFleet: a fleet of 5,000 mounts in the console, in headless
// Chromium: the time from opening the page (signed in) to the whole fleet
// laid out (the rows on screen drawn, the rest counted and scrollable), then
// reports at 200 a second for 10 s to the mounts on screen and the p99 from
// a report to its value on screen. Baselines in the same run: loading the
// same fleet through GraphQL from Go (the pages the console asks for), and
// the p99 from a report to its event at a Go subscriber.
// docs/performance.md, "Console".
func BenchmarkConsoleFleet(b *testing.B) {
	chromium := testenv.Chromium(b)
	in := start(b, testConfig(b.TempDir(), ""))
	a := newFleet(in, "Big Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	const fleet = 5000
	uid := func(i int) string { return fmt.Sprintf("BIG-%05d", i) }
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				associate(b, api, uid(i))
			}
		})
	}
	for i := range fleet {
		work <- i
	}
	close(work)
	wg.Wait()
	in.runCLIInput(b, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	// Baseline: the fleet's pages through GraphQL from Go.
	began := time.Now()
	q := `query($p: Int!) { mounts(currentPage: $p, pageSize: 100) { mounts { uid name associationState mountLocked helmetMounted batteryLevel cpuTemperature lastReportAt associationDeadline } pagination { totalPages } } }`
	var goFirst time.Duration
	for p := 1; p <= fleet/100; p++ {
		if res, raw := in.call(http.MethodPost, "/graphql", a.token, map[string]any{"query": q, "variables": map[string]any{"p": p}}); res.StatusCode != http.StatusOK {
			b.Fatalf("graphql: %d %s", res.StatusCode, raw)
		}
		if p == 1 {
			goFirst = time.Since(began)
		}
	}
	goLoad := time.Since(began)

	br := newBrowserSession(b, chromium)
	br.signIn(in.base, "ann")
	br.step("open the fleet", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.ResetTimer()
	began = time.Now()
	br.step("reload the fleet", chromedp.Reload())
	br.waitJS("the whole fleet on screen", fmt.Sprintf(`document.getElementById('fleet')?.dataset.count === '%d' && document.querySelector('#fleet tr[data-uid]') !== null`, fleet), 60*time.Second)
	pageLoad := time.Since(began)
	split, err := chromedp.Run(br.ctx, chromedp.Evaluate[map[string]float64](`window.__fleetLoad`))
	if err != nil {
		b.Fatal(err)
	}
	br.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	br.eval(latencyProbe)

	// A Go subscriber beside the page, for the baseline.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		mu    sync.Mutex
		goLat []time.Duration
	)
	go func() {
		_ = api.Subscribe(ctx, `subscription { mountEvents { states { occurredAt } } }`, nil, nil, func(raw json.RawMessage) error {
			var ev struct {
				MountEvents struct {
					States []struct{ OccurredAt time.Time }
				}
			}
			if json.Unmarshal(raw, &ev) == nil && len(ev.MountEvents.States) > 0 {
				mu.Lock()
				goLat = append(goLat, time.Since(ev.MountEvents.States[0].OccurredAt))
				mu.Unlock()
			}
			return nil
		})
	}()
	time.Sleep(300 * time.Millisecond)

	const rate, seconds = 200, 10
	tick := time.NewTicker(time.Second / rate)
	sent := make(chan int, rate)
	for range 16 {
		wg.Go(func() {
			for i := range sent {
				at := time.Now().UTC().Truncate(time.Millisecond)
				if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid(i%fleet)+"/states", map[string]any{"states": []any{
					map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(i % 101), "occurredAt": at.Format(time.RFC3339Nano)}}}, nil); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range rate * seconds {
		<-tick.C
		sent <- i % 20 // the mounts on screen (the fleet is sorted by uid)
	}
	tick.Stop()
	close(sent)
	wg.Wait()
	time.Sleep(2 * time.Second)
	b.StopTimer()

	pageLat, err := chromedp.Run(br.ctx, chromedp.Evaluate[[]float64](`window.__lat`))
	if err != nil {
		b.Fatal(err)
	}
	p99 := func(xs []float64) float64 {
		if len(xs) == 0 {
			return -1
		}
		slices.Sort(xs)
		return xs[len(xs)*99/100]
	}
	mu.Lock()
	goMs := make([]float64, len(goLat))
	for i, d := range goLat {
		goMs[i] = float64(d.Microseconds()) / 1000
	}
	mu.Unlock()
	b.ReportMetric(float64(pageLoad.Milliseconds()), "page-fleet-ms")
	b.ReportMetric(split["fetchMs"], "page-fetch-ms")
	b.ReportMetric(split["layoutMs"], "page-layout-ms")
	b.ReportMetric(split["startMs"], "page-start-ms")
	// First paint: from navigation to the first page of rows on screen.
	b.ReportMetric(split["firstRowsMs"], "page-first-rows-ms")
	b.ReportMetric(float64(goFirst.Microseconds())/1000, "go-first-page-ms")
	b.ReportMetric(float64(goLoad.Milliseconds()), "go-fleet-ms")
	b.ReportMetric(p99(pageLat), "page-p99-ms")
	b.ReportMetric(p99(goMs), "go-p99-ms")
	b.ReportMetric(float64(len(pageLat)), "page-updates")
	b.ReportMetric(float64(len(goMs)), "go-events")
}
