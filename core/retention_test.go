package core_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// housekeepingLog records what the retention worker asks, pruning a
// given number of rows per kind before it runs dry.
type housekeepingLog struct {
	calls []string
	cuts  map[string]time.Time
	rows  map[string]int
}

func (h *housekeepingLog) prune(kind string, before time.Time, limit int) (int, error) {
	h.calls = append(h.calls, kind)
	h.cuts[kind] = before
	n := min(h.rows[kind], limit)
	h.rows[kind] -= n
	return n, nil
}

func (h *housekeepingLog) PrepareStates(_ context.Context, until time.Time) error {
	h.calls = append(h.calls, "prepare")
	h.cuts["prepare"] = until
	return nil
}
func (h *housekeepingLog) PruneStates(_ context.Context, before time.Time, limit int) (int, error) {
	return h.prune("states", before, limit)
}
func (h *housekeepingLog) PruneDeliveries(_ context.Context, before time.Time, limit int) (int, error) {
	return h.prune("deliveries", before, limit)
}
func (h *housekeepingLog) PruneAudit(_ context.Context, before time.Time, limit int) (int, error) {
	return h.prune("audit", before, limit)
}
func (h *housekeepingLog) PruneSignIns(_ context.Context, requestsBefore, _ time.Time, limit int) (int, error) {
	return h.prune("signins", requestsBefore, limit)
}

func TestRetentionRunOnce(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tt := range []struct {
		name   string
		policy core.RetentionPolicy
		rows   map[string]int
		calls  int // prune calls in all
	}{
		{"defaults, little to prune", core.RetentionPolicy{States: 90 * day, Deliveries: 30 * day}, map[string]int{"states": 10}, 3},
		{"a backlog is pruned in batches", core.RetentionPolicy{States: 90 * day, Deliveries: 30 * day}, map[string]int{"states": 12_000}, 5},
		{"zero keeps all", core.RetentionPolicy{}, map[string]int{"states": 12_000, "deliveries": 9, "audit": 3}, 1},
		{"the audit log after a year", core.RetentionPolicy{Audit: core.DefaultAuditRetention}, map[string]int{"audit": 5001, "states": 1}, 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := &housekeepingLog{cuts: map[string]time.Time{}, rows: tt.rows}
			r := core.NewRetention(h, tt.policy, slog.New(slog.NewTextHandler(io.Discard, nil)))
			core.SetRetentionClock(r, func() time.Time { return now })
			if err := r.RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			if h.calls[0] != "prepare" || !h.cuts["prepare"].Equal(now.Add(7*day)) {
				t.Fatalf("calls %v, prepared until %v: want the history prepared a week ahead first", h.calls, h.cuts["prepare"])
			}
			if got := len(h.calls) - 1; got != tt.calls {
				t.Fatalf("prune calls %v, want %d", h.calls[1:], tt.calls)
			}
			if tt.policy.States > 0 && (!h.cuts["states"].Equal(now.Add(-tt.policy.States)) || h.rows["states"] != 0) {
				t.Fatalf("states cut at %v with %d left", h.cuts["states"], h.rows["states"])
			}
			if tt.policy.States == 0 && h.rows["states"] == 0 {
				t.Fatal("states pruned with no retention")
			}
			if tt.policy.Audit > 0 && (!h.cuts["audit"].Equal(now.Add(-8760*time.Hour)) || h.rows["audit"] != 0) {
				t.Fatalf("audit cut at %v with %d left", h.cuts["audit"], h.rows["audit"])
			}
			if tt.policy.Audit == 0 && h.rows["audit"] != 3 && tt.rows["audit"] == 3 {
				t.Fatal("audit entries pruned with no retention")
			}
			if !h.cuts["signins"].Equal(now.Add(-time.Hour)) {
				t.Fatalf("sign-ins cut at %v, want an hour back", h.cuts["signins"])
			}
		})
	}
}
