package main

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/mountd/mountd/bench/internal/benchstat"
	"github.com/mountd/mountd/client"
)

// ingestReport is the report load run beside the reads of --ingest-rate.
type ingestReport struct {
	RatePerSec     float64 `json:"ratePerSec"`
	AchievedPerSec float64 `json:"achievedPerSec"`
	figures
	Reads readsReport `json:"reads"`
}

// ingestClients share the reports' connections.
const ingestClients = 16

// ingestBound bounds the reports outstanding: past it a report is not sent
// (the "in-flight bound" failure) rather than piling up goroutines.
const ingestBound = 1024

// runIngest reports states at rate over the fleet's mounts until ctx ends,
// each report one mount's four codes with the values it was seeded with
// (so that only presence and lastSeenAt change, never a filter's values).
func runIngest(ctx context.Context, cfg config, tokens *client.Credentials, n int) ingestReport {
	hc := &http.Client{Timeout: cfg.Timeout, Transport: &http.Transport{MaxIdleConnsPerHost: ingestBound, DisableCompression: true}}
	api := client.New(cfg.Base, tokens, client.Options{HTTPClient: hc})
	// An open loop as long as the longest the reads can take; ctx ends it.
	s := schedule{Rate: cfg.IngestRate, Clients: ingestClients, Duration: 24 * time.Hour}
	start := time.Now()
	samples := s.run(ctx, ingestBound, func(ctx context.Context, _, j int) outcome {
		i := j % n
		err := api.Do(ctx, http.MethodPost, "/mounts/"+uidOf(i)+"/states", json.RawMessage(valuesOf(i).report(time.Now())), nil)
		if err != nil {
			return failure(err)
		}
		return outcome{}
	})
	elapsed := time.Since(start)
	c := newCollector(true)
	for _, smp := range samples {
		c.add(probe{Name: "ingest", expected: -1, atMost: -1}, smp, "ingest")
	}
	rep := ingestReport{RatePerSec: cfg.IngestRate, figures: c.figures("ingest")}
	rep.AchievedPerSec = round(float64(len(samples)-rep.Errors)/elapsed.Seconds(), 1)
	return rep
}

// measureWithIngest runs the reads' rounds again with the ingest running.
func measureWithIngest(ctx context.Context, cfg config, r *reader, tokens *client.Credentials) ingestReport {
	ictx, stop := context.WithCancel(ctx)
	done := make(chan ingestReport)
	go func() { done <- runIngest(ictx, cfg, tokens, r.n) }()
	// Let the ingest reach its pace before measuring.
	_ = benchstat.Sleep(ctx, 5*time.Second)
	reads := measureReads(ctx, cfg, r, true)
	stop()
	rep := <-done
	rep.Reads = reads
	return rep
}
