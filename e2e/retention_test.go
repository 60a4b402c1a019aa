package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

// TestStateRetention: with MOUNTD_STATE_RETENTION=720h, a server starting
// up drops the history past 30 days and keeps the rest, on both databases.
func TestStateRetention(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.PublicURL = "http://mountd.test" // one issuer across the restart
			cfg.StateRetention = 30 * 24 * time.Hour
			first := start(t, cfg)
			f := newFleet(first, "Fleet")
			api := client.New(first.base, client.StaticToken(f.token))
			associate(t, api, "MNT-R")
			now := time.Now()
			for _, age := range []time.Duration{40 * 24 * time.Hour, 10 * 24 * time.Hour, time.Minute} {
				reportStates(t, api, "MNT-R", 50, true, now.Add(-age))
			}
			first.stop()

			second := start(t, cfg) // retention runs as the server starts
			count := func() int {
				res, body := second.call(http.MethodGet, "/api/v1/mounts/MNT-R/states?code=BATTERY_LEVEL", f.token, nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("history: %d %s", res.StatusCode, body)
				}
				page := decode[struct {
					Pagination struct {
						TotalItems int `json:"totalItems"`
					} `json:"pagination"`
				}](t, body)
				return page.Pagination.TotalItems
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for count() != 2 {
				if ctx.Err() != nil {
					t.Fatalf("history holds %d battery entries, want the 2 within 30 days", count())
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
