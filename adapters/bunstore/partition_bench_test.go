package bunstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

const benchDay = 24 * time.Hour

// benchStore opens a migrated store with the account acc_b and mounts
// B00, B01, ... it owns.
func benchStore(b *testing.B, url string, mounts int) *bunstore.Store {
	b.Helper()
	store := MustOpen(b, url)
	ctx := context.Background()
	if _, err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := store.CreateAccount(ctx, core.Account{ID: "acc_b", Name: "b", CreatedAt: now},
		core.APIClient{ClientID: "cli_b", AccountID: "acc_b", SecretHash: "x", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	for i := range mounts {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: fmt.Sprintf("B%02d", i), AccountID: "acc_b", Now: now,
			Deadline: now.Add(24 * time.Hour), Key: core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "s"}}, nil); err != nil {
			b.Fatal(err)
		}
	}
	return store
}

// steadyPartitions lays the history out as a server keeps it: entries
// older than 30 days in the partition of old entries, a partition per day
// from there to a week ahead.
func steadyPartitions(b *testing.B, store *bunstore.Store) {
	b.Helper()
	ctx := context.Background()
	from := time.Now().UTC().Truncate(benchDay).Add(-30 * benchDay).UnixMilli()
	for _, q := range []string{
		`DROP TABLE mount_states_before`,
		fmt.Sprintf(`CREATE TABLE mount_states_before PARTITION OF mount_states FOR VALUES FROM (MINVALUE) TO (%d)`, from),
	} {
		if _, err := store.DB().ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	if err := store.PrepareStates(ctx, time.Now().Add(7*benchDay)); err != nil {
		b.Fatal(err)
	}
}

// ingest posts reports of n entries occurring now from 4 goroutines per
// processor for d and returns the entries stored per second and the
// latency of each report.
func ingest(b *testing.B, store *bunstore.Store, mounts, n int, d time.Duration, seq *atomic.Int64) (float64, []time.Duration) {
	ctx := context.Background()
	var (
		stored atomic.Int64
		mu     sync.Mutex
		lat    []time.Duration
		wg     sync.WaitGroup
	)
	deadline := time.Now().Add(d)
	for range 8 {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(deadline) {
				k := seq.Add(1)
				uid := fmt.Sprintf("B%02d", k%int64(mounts))
				now := time.Now().UTC().Truncate(time.Millisecond)
				entries := make([]core.StateEntry, n)
				for i := range entries {
					entries[i] = core.StateEntry{Code: core.StateBatteryLevel, Value: strconv.FormatInt(k*100+int64(i), 10), OccurredAt: now, ReceivedAt: now}
				}
				began := time.Now()
				_, got, err := store.InsertStates(ctx, uid, "acc_b", entries,
					&core.Event{Type: core.EventStatesReported, UID: uid, AccountID: "acc_b", OccurredAt: now})
				if err != nil {
					b.Error(err)
					return
				}
				mine = append(mine, time.Since(began))
				stored.Add(int64(len(got)))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return float64(stored.Load()) / d.Seconds(), lat
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// BenchmarkPartitionedIngest: state ingest (reports of 50 entries and of
// one, with their events) into the history partitioned by day as a server
// keeps it, against the same schema with one plain table, in alternating
// 3 s rounds in one run. docs/performance.md, "Retention".
func BenchmarkPartitionedIngest(b *testing.B) {
	const mounts = 64
	partitioned := benchStore(b, testenv.PostgresURL(b), mounts)
	steadyPartitions(b, partitioned)
	plain := benchStore(b, testenv.PostgresURL(b), mounts)
	for _, q := range []string{
		`DROP TABLE mount_states`,
		`CREATE TABLE mount_states (
			mount_uid TEXT NOT NULL REFERENCES mounts (uid) ON DELETE CASCADE, account_id TEXT NOT NULL, code TEXT NOT NULL,
			occurred_at BIGINT NOT NULL, value TEXT COLLATE "C" NOT NULL, received_at BIGINT NOT NULL,
			PRIMARY KEY (mount_uid, account_id, code, occurred_at, value))`,
		`CREATE INDEX mount_states_history ON mount_states (mount_uid, account_id, occurred_at DESC)`,
	} {
		if _, err := plain.DB().ExecContext(context.Background(), q); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Int64
	for _, n := range []int{50, 1} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			ingest(b, partitioned, mounts, n, time.Second, &seq) // warm up
			ingest(b, plain, mounts, n, time.Second, &seq)
			var p, q float64
			for round := range 4 {
				if round%2 == 0 {
					p += must(ingest(b, partitioned, mounts, n, 3*time.Second, &seq))
					q += must(ingest(b, plain, mounts, n, 3*time.Second, &seq))
				} else {
					q += must(ingest(b, plain, mounts, n, 3*time.Second, &seq))
					p += must(ingest(b, partitioned, mounts, n, 3*time.Second, &seq))
				}
			}
			b.ReportMetric(p/4, "partitioned-entries/s")
			b.ReportMetric(q/4, "plain-entries/s")
			b.ReportMetric(p/q, "ratio")
		})
	}
}

func must(rate float64, _ []time.Duration) float64 { return rate }

// BenchmarkDropPartition: a day's partition of 10 million entries is
// dropped by the retention prune while reports of 50 entries go on; the
// figures are how long the prune takes and the reports' latency while it
// runs against before it. docs/performance.md, "Retention".
func BenchmarkDropPartition(b *testing.B) {
	const mounts, rows = 64, 10_000_000
	store := benchStore(b, testenv.PostgresURL(b), mounts)
	steadyPartitions(b, store)
	ctx := context.Background()
	day := time.Now().UTC().Truncate(benchDay).Add(-30 * benchDay) // the oldest daily partition
	began := time.Now()
	// One day of a large fleet: 10 million entries, spread over the mounts,
	// in steps that each finish within the driver's read timeout.
	const step = 250_000
	for first := 1; first <= rows; first += step {
		if _, err := store.DB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at)
			SELECT 'B' || lpad((g %% %d)::text, 2, '0'), 'acc_b', 'BATTERY_LEVEL', %d + (g * 8) %% 86400000, (g %% 101)::text, %d
			FROM generate_series(%d, %d) g`, mounts, day.UnixMilli(), day.UnixMilli(), first, first+step-1)); err != nil {
			b.Fatal(err)
		}
	}
	// A day 30 days old was vacuumed and checkpointed long ago (else
	// autovacuum, drawn by the bulk load, holds the partition until the
	// detach cancels it after deadlock_timeout), and the operating system
	// has long since evicted its pages from its cache: settle the bulk
	// load, and drop the page cache where the benchmark may (as root).
	for _, q := range []string{`VACUUM (ANALYZE) mount_states_p` + day.Format("20060102"), `CHECKPOINT`} {
		if _, err := store.DB().ExecContext(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		b.Logf("the page cache still holds the partition: %v", err)
	}
	b.Logf("filled a partition with %d rows in %v", rows, time.Since(began))

	var seq atomic.Int64
	_, quiet := ingest(b, store, mounts, 50, 5*time.Second, &seq)
	var (
		took   time.Duration
		during []time.Duration
		wg     sync.WaitGroup
	)
	b.ResetTimer()
	wg.Go(func() { _, during = ingest(b, store, mounts, 50, 6*time.Second, &seq) })
	time.Sleep(2 * time.Second)
	pruneBegan := time.Now()
	if _, err := store.PruneStates(ctx, day.Add(benchDay), 5000); err != nil {
		b.Fatal(err)
	}
	took = time.Since(pruneBegan)
	wg.Wait()
	b.StopTimer()
	var left int
	if err := store.DB().NewRaw(`SELECT count(*) FROM mount_states WHERE occurred_at < ?`, day.Add(benchDay).UnixMilli()).Scan(ctx, &left); err != nil || left != 0 {
		b.Fatalf("%d rows left in the dropped range (%v)", left, err)
	}
	b.ReportMetric(float64(took.Milliseconds()), "prune-ms")
	b.ReportMetric(float64(percentile(quiet, 0.99).Microseconds())/1000, "quiet-p99-ms")
	b.ReportMetric(float64(percentile(during, 0.99).Microseconds())/1000, "during-p99-ms")
	b.ReportMetric(float64(percentile(during, 1).Microseconds())/1000, "during-max-ms")
	b.ReportMetric(float64(percentile(quiet, 1).Microseconds())/1000, "quiet-max-ms")
}
