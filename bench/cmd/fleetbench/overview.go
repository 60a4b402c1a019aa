package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
)

// overviewReport is the console's overview counts: one GraphQL request of
// aliased counts, timed closed loop.
type overviewReport struct {
	Runs    int               `json:"runs"`
	Errors  int               `json:"errors"`
	Error   string            `json:"firstError,omitempty"`
	Latency benchstat.Latency `json:"latency"`
	P50Ms   float64           `json:"p50Ms"`
	P99Ms   float64           `json:"p99Ms"`
	// Split is set when the server refused the counts in one request and
	// each was asked on its own (the figures are then the sum).
	Split       bool           `json:"split,omitempty"`
	SplitReason string         `json:"splitReason,omitempty"`
	Counts      map[string]int `json:"counts"`
	// CountsError says what is implausible about the counts.
	CountsError string `json:"countsError,omitempty"`
}

// overviewCount is one count of the overview.
type overviewCount struct{ alias, expression string }

// overviewCounts are the counts of the console's overview at now.
func overviewCounts(now time.Time) []overviewCount {
	hourAgo := now.Add(-time.Hour).UTC().Format(time.RFC3339)
	return []overviewCount{
		{"all", ""},
		{"associated", `associationState = "ASSOCIATED"`},
		{"idle", `associationState = "IDLE"`},
		{"lowBattery", `batteryLevel < 20`},
		{"noHelmet", `helmetMounted = false`},
		// Not seen within the hour, or never: NOT selects the mounts
		// without lastSeenAt too ("Fleet filter", semantics).
		{"silent", `NOT lastSeenAt >= "` + hourAgo + `"`},
		{"online", `presence = "ONLINE"`},
		{"offline", `presence = "OFFLINE"`},
		{"unknown", `presence = "UNKNOWN"`},
	}
}

// overviewQuery is the GraphQL document asking for counts as aliases.
func overviewQuery(counts []overviewCount) string {
	var q strings.Builder
	q.WriteString("{")
	for _, c := range counts {
		q.WriteString(" " + c.alias + ": mounts(pageSize: 1")
		if c.expression != "" {
			q.WriteString(", filter: {expression: " + strconv.Quote(c.expression) + "}")
		}
		q.WriteString(") { pagination { totalItems } }")
	}
	q.WriteString(" }")
	return q.String()
}

// graphql posts one query and decodes its counts.
func graphql(ctx context.Context, hc *http.Client, base string, tokens *client.Credentials, query string) (map[string]int, error) {
	tok, err := tokens.Token()
	if err != nil {
		return nil, err
	}
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/graphql", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Access-Key", tok.AccessToken)
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	var answer struct {
		Data map[string]struct {
			Pagination struct {
				TotalItems int `json:"totalItems"`
			} `json:"pagination"`
		} `json:"data"`
		Errors []struct {
			Message string `json:"message"`
		} `json:"errors"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return nil, fmt.Errorf("graphql: %d %.300s", res.StatusCode, raw)
	}
	if len(answer.Errors) > 0 || res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("graphql: %d %.300s", res.StatusCode, raw)
	}
	out := make(map[string]int, len(answer.Data))
	for k, v := range answer.Data {
		out[k] = v.Pagination.TotalItems
	}
	return out, nil
}

// measureOverview asks the overview's counts runs times, one request after
// the other. When the server refuses them in one request, it says why and
// asks each count in a request of its own.
func measureOverview(ctx context.Context, cfg config, tokens *client.Credentials, n int) overviewReport {
	hc := &http.Client{Timeout: cfg.Timeout}
	counts := overviewCounts(time.Now())
	rep := overviewReport{Runs: cfg.OverviewRuns}
	queries := []string{overviewQuery(counts)}
	if _, err := graphql(ctx, hc, cfg.Base, tokens, queries[0]); err != nil {
		rep.SplitReason = err.Error()
		logf("overview: in one request: %s; asking each count on its own", err)
		rep.Split, queries = true, nil
		for _, c := range counts {
			queries = append(queries, overviewQuery([]overviewCount{c}))
		}
	}
	var lats []time.Duration
	for range cfg.OverviewRuns {
		start := time.Now()
		got := map[string]int{}
		for _, q := range queries {
			part, err := graphql(ctx, hc, cfg.Base, tokens, q)
			if err != nil {
				rep.Errors++
				if rep.Error == "" {
					rep.Error = err.Error()
				}
				break
			}
			for k, v := range part {
				got[k] = v
			}
		}
		lats = append(lats, time.Since(start))
		rep.Counts = got
	}
	rep.Latency = benchstat.Summarize(lats)
	rep.P50Ms, rep.P99Ms = rep.Latency.P50, rep.Latency.P99
	rep.CountsError = checkOverview(rep.Counts, n, fleetProbes(n)[0].expected)
	return rep
}

// checkOverview says what is implausible in the counts of a fleet of n
// associated mounts with lowBattery below 20.
func checkOverview(c map[string]int, n, lowBattery int) string {
	var wrong []string
	want := func(what string, got, want int) {
		if got != want {
			wrong = append(wrong, fmt.Sprintf("%s %d, want %d", what, got, want))
		}
	}
	want("all", c["all"], n)
	want("associated", c["associated"], n)
	want("idle", c["idle"], 0)
	want("lowBattery", c["lowBattery"], lowBattery)
	want("online+offline+unknown", c["online"]+c["offline"]+c["unknown"], n)
	return strings.Join(wrong, "; ")
}
