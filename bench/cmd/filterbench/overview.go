package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// The console's overview (docs/guide.md, "Overview"), measured both ways
// in one run, alternating: as the console counts now (one GraphQL request,
// one aliased mounts(pageSize: 1, filter:) per tile) and as it counted
// before (every page of 100 mounts, six requests in flight, counted in the
// page). The counts of the two ways must agree: the filters are the
// twins of the page's tests.

// overviewTiles are the tiles' filters as the console writes them
// (console/static/app.js, overviewCounts); silent is cut at now.
func overviewTiles(now time.Time) [][2]string {
	return [][2]string{
		{"all", ""},
		{"associated", `associationState = "ASSOCIATED"`},
		{"idle", `associationState = "IDLE"`},
		{"low", `batteryLevel < 19.5`},
		{"helmet", `helmetMounted = false`},
		{"silent", `NOT lastSeenAt >= "` + now.Add(-time.Hour).UTC().Format("2006-01-02T15:04:05.000Z") + `"`},
		{"online", `presence = "ONLINE"`},
		{"offline", `presence = "OFFLINE"`},
		{"unknown", `presence = "UNKNOWN"`},
	}
}

// overviewMount is what the old overview read of every mount.
type overviewMount struct {
	AssociationState string     `json:"associationState"`
	BatteryLevel     *int       `json:"batteryLevel"`
	HelmetMounted    *bool      `json:"helmetMounted"`
	LastSeenAt       *time.Time `json:"lastSeenAt"`
	Presence         string     `json:"presence"`
}

// countInPage counts as the old overview did, with the page's tests.
func countInPage(mounts []overviewMount, now time.Time) map[string]int {
	n := map[string]int{}
	for _, m := range mounts {
		n["all"]++
		switch m.AssociationState {
		case "ASSOCIATED":
			n["associated"]++
		case "IDLE":
			n["idle"]++
		}
		if m.BatteryLevel != nil && *m.BatteryLevel < 20 {
			n["low"]++
		}
		if m.HelmetMounted != nil && !*m.HelmetMounted {
			n["helmet"]++
		}
		if m.LastSeenAt == nil || now.Sub(*m.LastSeenAt) > time.Hour {
			n["silent"]++
		}
		n[strings.ToLower(m.Presence)]++
	}
	return n
}

// graphQL posts one query and decodes its data into out.
func graphQL(ctx context.Context, c *http.Client, base, token, query string, vars map[string]any, out any) error {
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/graphql", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	var answer struct {
		Data   json.RawMessage `json:"data"`
		Errors []any           `json:"errors"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil || res.StatusCode != http.StatusOK || len(answer.Errors) > 0 {
		return fmt.Errorf("graphql: %d %.500s", res.StatusCode, raw)
	}
	return json.Unmarshal(answer.Data, out)
}

// countOnServer is the overview as the console counts now.
func countOnServer(ctx context.Context, c *http.Client, base, token string, now time.Time) (map[string]int, error) {
	tiles := overviewTiles(now)
	var params, fields []string
	vars := map[string]any{}
	for _, t := range tiles {
		params = append(params, "$"+t[0]+": MountFilter")
		fields = append(fields, t[0]+": mounts(pageSize: 1, filter: $"+t[0]+") { pagination { totalItems } }")
		if t[1] != "" {
			vars[t[0]] = map[string]any{"expression": t[1]}
		}
	}
	q := "query(" + strings.Join(params, ", ") + ") { " + strings.Join(fields, " ") + " }"
	var data map[string]struct {
		Pagination struct{ TotalItems int } `json:"pagination"`
	}
	if err := graphQL(ctx, c, base, token, q, vars, &data); err != nil {
		return nil, err
	}
	n := map[string]int{}
	for k, v := range data {
		n[k] = v.Pagination.TotalItems
	}
	return n, nil
}

// countAllPages is the overview as the console counted before: every page
// of the fleet, six requests in flight, with the fields it read
// (console/static/ui.js, MOUNT_FIELDS).
func countAllPages(ctx context.Context, c *http.Client, base, token string, now time.Time) (map[string]int, error) {
	const q = `query($p: Int!) { mounts(currentPage: $p, pageSize: 100) { mounts { uid name modelNumber serialNumber firmwareRevision softwareRevision associationState mountLocked helmetMounted batteryLevel cpuTemperature lastReportAt associationDeadline unverifiedStates lastSeenAt presence } pagination { totalPages } } }`
	type page struct {
		Mounts struct {
			Mounts     []overviewMount          `json:"mounts"`
			Pagination struct{ TotalPages int } `json:"pagination"`
		} `json:"mounts"`
	}
	var first page
	if err := graphQL(ctx, c, base, token, q, map[string]any{"p": 1}, &first); err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		firstErr error
		next     = 2
	)
	all := slices.Clone(first.Mounts.Mounts)
	for range 6 {
		wg.Go(func() {
			for {
				mu.Lock()
				p := next
				next++
				mu.Unlock()
				if p > first.Mounts.Pagination.TotalPages {
					return
				}
				var d page
				err := graphQL(ctx, c, base, token, q, map[string]any{"p": p}, &d)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				all = append(all, d.Mounts.Mounts...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return countInPage(all, now), nil
}

// measureOverview counts the fleet both ways, rounds times, alternating,
// and prints each way's median time; it fails when the ways disagree.
// seenPerSecond is how many mounts share a second of lastSeenAt.
func measureOverview(ctx context.Context, c *http.Client, base, token string, rounds, seenPerSecond int, out io.Writer) error {
	var server, pages []time.Duration
	for round := range rounds {
		// One instant for both, so that silent and presence cut alike.
		now := time.Now()
		t0 := time.Now()
		byServer, err := countOnServer(ctx, c, base, token, now)
		if err != nil {
			return err
		}
		server = append(server, time.Since(t0))
		t0 = time.Now()
		byPage, err := countAllPages(ctx, c, base, token, now)
		if err != nil {
			return err
		}
		pages = append(pages, time.Since(t0))
		logf("overview round %d: server %s, all pages %s; counts %v", round+1, server[round].Round(time.Millisecond), pages[round].Round(time.Millisecond), byServer)
		for _, t := range overviewTiles(now) {
			// Presence is cut at each request's instant, and the pages
			// take seconds: the seed's mounts of each second of
			// lastSeenAt may cross it meanwhile. Every other count is exact.
			slack := 0.0
			if t[0] == "online" || t[0] == "offline" {
				slack = float64(seenPerSecond) * (1 + pages[round].Seconds())
			}
			if d := byServer[t[0]] - byPage[t[0]]; math.Abs(float64(d)) > slack {
				return fmt.Errorf("overview %s: the server counts %d, the pages %d", t[0], byServer[t[0]], byPage[t[0]])
			}
		}
	}
	median := func(ds []time.Duration) float64 {
		s := slices.Sorted(slices.Values(ds))
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	fmt.Fprintf(out, "| the console's overview | ms (median of %d) |\n|---|---|\n", rounds)
	fmt.Fprintf(out, "| one request, one aliased count per tile | %.1f |\n| every page of 100, six in flight, counted in the page (before) | %.1f |\n", median(server), median(pages))
	return nil
}
