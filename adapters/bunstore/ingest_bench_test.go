package bunstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// BenchmarkIngest measures state ingest in the store, with the event of
// each report appended in its transaction (outbox) and without (plain), in
// one run on each database: the outbox's cost against the same ingest
// without it. Reports come from 4 goroutines per processor, spread over
// 64 mounts, as batches of 50 entries (the ingest scenario's) and of one.
// docs/performance.md, "Event log".
func BenchmarkIngest(b *testing.B) {
	for name, newURL := range testenv.Databases(b) {
		b.Run(name, func(b *testing.B) {
			const mounts = 64
			store := benchStore(b, newURL(b), mounts)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			var seq atomic.Int64
			for _, bench := range []struct {
				mode    string
				entries int
			}{{"plain", 50}, {"outbox", 50}, {"plain", 1}, {"outbox", 1}} {
				mode := bench.mode
				b.Run(fmt.Sprintf("%s/entries=%d", mode, bench.entries), func(b *testing.B) {
					b.SetParallelism(4) // 4 × GOMAXPROCS goroutines
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							n := seq.Add(1)
							uid := fmt.Sprintf("B%02d", n%mounts)
							entries := make([]core.StateEntry, bench.entries)
							for i := range entries {
								at := now.Add(-time.Duration(n*100+int64(i)) * time.Millisecond)
								entries[i] = core.StateEntry{Code: core.StateBatteryLevel, Value: strconv.FormatInt(n%101, 10), OccurredAt: at, ReceivedAt: now}
							}
							var e *core.Event
							if mode == "outbox" {
								e = &core.Event{Type: core.EventStatesReported, UID: uid, AccountID: "acc_b", OccurredAt: now}
							}
							if _, _, err := store.InsertStates(ctx, uid, "acc_b", entries, e); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
