package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

// TestFleetMetrics: GET /metrics shows the fleet (docs/operations.md,
// "Monitoring") on both backends: mounts by state, entries, commands,
// events, webhook attempts and the feed's lag.
func TestFleetMetrics(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true
			in := start(t, cfg)
			f := newFleet(in, "Fleet")
			hooks := newReceiver(t)
			res, body := f.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": hooks.URL, "eventTypes": []string{"STATES_REPORTED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create webhook: %d %s", res.StatusCode, body)
			}
			hooks.setSecret(decode[webhookView](t, body).Secret)
			api := client.New(in.base, client.StaticToken(f.token))
			associate(t, api, "MNT-M1")
			associate(t, api, "MNT-M2")
			if err := api.Do(t.Context(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-M3"}, nil); err != nil {
				t.Fatal(err)
			}
			reportStates(t, api, "MNT-M1", 80, true, time.Now())
			hooks.waitFor(t, "the report's delivery", func(c []webhookCall) bool { return len(c) == 1 })

			want := map[string]float64{
				`mountd_mounts{association_state="ASSOCIATED"}`:        2,
				`mountd_mounts{association_state="IDLE"}`:              1,
				`mountd_state_entries_total`:                           4,
				`mountd_commands_total{code="ASSOCIATE_OWNER"}`:        3,
				`mountd_events_total{type="STATES_REPORTED"}`:          1,
				`mountd_events_total{type="ASSOCIATION_CONFIRMED"}`:    2,
				`mountd_webhook_deliveries_total{outcome="succeeded"}`: 1,
			}
			var page string
			for deadline := time.Now().Add(30 * time.Second); ; {
				res, body := in.call(http.MethodGet, "/metrics", "", nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("metrics: %d", res.StatusCode)
				}
				page = string(body)
				ok := true
				for sample, v := range want {
					ok = ok && metricValue(page, sample) == v
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					for sample, v := range want {
						if got := metricValue(page, sample); got != v {
							t.Errorf("%s = %v, want %v", sample, got, v)
						}
					}
					t.FailNow()
				}
				time.Sleep(50 * time.Millisecond)
			}
			if lag := metricValue(page, "mountd_event_log_lag_seconds"); lag < 0 || lag > 5 {
				t.Fatalf("mountd_event_log_lag_seconds = %v", lag)
			}
			// The Grafana dashboard asks only for metrics the server has.
			dashboard, err := os.ReadFile("../deploy/grafana/mountd.json")
			if err != nil || !json.Valid(dashboard) {
				t.Fatalf("deploy/grafana/mountd.json: %v", err)
			}
			for _, name := range regexp.MustCompile(`\b(?:mountd|process)_[a-z_]+`).FindAllString(string(dashboard), -1) {
				if !strings.Contains(page, "\n"+strings.TrimSuffix(name, "_bucket")) {
					t.Errorf("the dashboard asks for %s, which /metrics does not have", name)
				}
			}
		})
	}
}

// httpSeries returns the label sets of mountd's HTTP metrics on a
// Prometheus text page, one per series.
func httpSeries(page string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(page) {
		if strings.HasPrefix(line, "mountd_http_") {
			out[strings.Fields(line)[0]] = true
		}
	}
	return out
}

// TestInventedMethodsBounded: methods a client invents are answered 405
// (problem+json, before any other work) and counted under one label,
// OTHER, so that a flood of distinct ones cannot grow the metrics.
func TestInventedMethodsBounded(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			send := func(method, path string) (*http.Response, []byte) {
				t.Helper()
				req, _ := http.NewRequest(method, in.base+path, nil)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatalf("%s %s: %v", method, path, err)
				}
				defer res.Body.Close()
				body, _ := io.ReadAll(res.Body)
				return res, body
			}
			scrape := func() string {
				t.Helper()
				res, body := send(http.MethodGet, "/metrics")
				if res.StatusCode != http.StatusOK {
					t.Fatalf("metrics: %d", res.StatusCode)
				}
				return string(body)
			}
			paths := []string{"/api/v1/mounts", "/api/v1/mounts/MNT-1", "/graphql", "/nowhere", "/oauth/v2/token", "/metrics"}
			// One of each path first: the OTHER series exist from then on.
			for _, p := range paths {
				send("WARMUP", p)
			}
			scrape()
			before := httpSeries(scrape())
			for i := range 300 {
				method := fmt.Sprintf("INVENTED%d", i)
				path := paths[i%len(paths)]
				res, body := send(method, path)
				p := wantProblem(t, res, body, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
				if strings.Contains(p.Detail, method) {
					t.Fatalf("%s %s: the detail repeats the method: %s", method, path, body)
				}
				if path == "/api/v1/mounts" && res.Header.Get("Allow") == "" {
					t.Fatalf("%s %s: no Allow header", method, path)
				}
			}
			page := scrape()
			after := httpSeries(page)
			for s := range after {
				if !before[s] {
					t.Errorf("new series after invented methods: %s", s)
				}
			}
			if strings.Contains(page, "INVENTED") || strings.Contains(page, "WARMUP") {
				t.Error("an invented method shows in /metrics")
			}
			if metricValue(page, `mountd_http_requests_total{method="OTHER",route="unmatched",status="405"}`) < 300 {
				t.Errorf("invented methods not counted as OTHER:\n%s", page)
			}
		})
	}
}

// TestFleetCountersStartAtZero: before anything happened, every event
// type, command code and delivery outcome has its counter at 0, so that
// dashboards and alerts see the series from the start.
func TestFleetCountersStartAtZero(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	res, body := in.call(http.MethodGet, "/metrics", "", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d", res.StatusCode)
	}
	page := string(body)
	var want []string
	for _, e := range core.EventTypes {
		want = append(want, fmt.Sprintf(`mountd_events_total{type=%q}`, e))
	}
	for _, c := range core.CommandCodes {
		want = append(want, fmt.Sprintf(`mountd_commands_total{code=%q}`, c))
	}
	want = append(want, `mountd_webhook_deliveries_total{outcome="succeeded"}`, `mountd_webhook_deliveries_total{outcome="failed"}`,
		`mountd_grants_issued_total`, `mountd_offline_uses_total{outcome="EXECUTED"}`, `mountd_offline_uses_total{outcome="REFUSED"}`,
		`mountd_db_reads_total{target="replica"}`)
	for _, sample := range want {
		if got := metricValue(page, sample); got != 0 {
			t.Errorf("%s = %v on a fresh server, want 0", sample, got)
		}
	}
}
