package bunstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// seedAssociated gives the account acc_j n ASSOCIATED mounts: TEMPLATE,
// claimed and confirmed, and copies of it (copyTemplate).
func seedAssociated(b *testing.B, store *bunstore.Store, n int) {
	b.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := store.CreateAccount(ctx, core.Account{ID: "acc_j", Name: "j", CreatedAt: now},
		core.APIClient{ClientID: "cli_j", AccountID: "acc_j", SecretHash: "x", CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "TEMPLATE", AccountID: "acc_j", Now: now, Deadline: now.Add(time.Hour),
		Key: core.MountKey{ID: "k", PublicKey: make([]byte, 32), SealedPrivateKey: "s"}}, nil); err != nil {
		b.Fatal(err)
	}
	if _, _, err := store.ConfirmAssociation(ctx, "TEMPLATE", "acc_j", now, nil); err != nil {
		b.Fatal(err)
	}
	copyTemplate(b, store, 1, n-1)
	if _, err := store.DB().ExecContext(ctx, `ANALYZE mounts`); err != nil {
		b.Fatal(err)
	}
}

// copyTemplate copies TEMPLATE as mounts J<lo> … J<hi> in one statement:
// seeding 100,000 mounts through ClaimMount would take longer than the
// benchmark.
func copyTemplate(b *testing.B, store *bunstore.Store, lo, hi int) {
	b.Helper()
	ctx := context.Background()
	var cols []string
	if err := store.DB().NewRaw(`SELECT column_name FROM information_schema.columns WHERE table_name = 'mounts' ORDER BY ordinal_position`).
		Scan(ctx, &cols); err != nil {
		b.Fatal(err)
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		sel[i] = "m." + c
		if c == "uid" {
			sel[i] = `'J' || lpad(g::text, 6, '0')`
		}
	}
	if _, err := store.DB().ExecContext(ctx, fmt.Sprintf(`INSERT INTO mounts (%s) SELECT %s FROM mounts m, generate_series(%d, %d) g
		WHERE m.uid = 'TEMPLATE'`, strings.Join(cols, ", "), strings.Join(sel, ", "), lo, hi)); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateJob100k creates a job over every mount of an account of
// 100,000 ASSOCIATED mounts (the bound) on PostgreSQL: the targets are one
// INSERT … SELECT in the job's transaction. docs/performance.md, "A job
// over 100,000 mounts (PostgreSQL)", asks for at most 2 s. A job over one
// more mount is refused (reported as refused-ms).
func BenchmarkCreateJob100k(b *testing.B) {
	store := MustOpen(b, testenv.PostgresURL(b))
	ctx := context.Background()
	if _, err := store.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	seedAssociated(b, store, core.MaxJobTargets)
	now := time.Now().UTC().Truncate(time.Millisecond)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := fmt.Sprintf("job_bench%d", i)
		j, _, err := store.CreateJob(ctx, core.Job{ID: id, AccountID: "acc_j", Code: core.CmdReleaseHelmet, CreatedAt: now,
			ExpiresAt: now.Add(time.Hour), CreatedBy: "cli_j"}, core.MountFilter{}, now)
		if err != nil || j.Targets != core.MaxJobTargets {
			b.Fatalf("CreateJob = %d targets, %v", j.Targets, err)
		}
		b.StopTimer()
		// The account's bound of active jobs would stop the loop.
		if _, err := store.CancelJob(ctx, "acc_j", id, now); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	// One mount more: refused, nothing stored.
	copyTemplate(b, store, core.MaxJobTargets, core.MaxJobTargets)
	start := time.Now()
	_, _, err := store.CreateJob(ctx, core.Job{ID: "job_over", AccountID: "acc_j", Code: core.CmdReleaseHelmet, CreatedAt: now,
		ExpiresAt: now.Add(time.Hour), CreatedBy: "cli_j"}, core.MountFilter{}, now)
	b.ReportMetric(float64(time.Since(start).Milliseconds()), "refused-ms")
	if core.ErrorCode(err) != core.CodeValidation {
		b.Fatalf("over the bound: %v", err)
	}
	if _, err := store.Job(ctx, "acc_j", "job_over"); core.ErrorCode(err) != core.CodeJobNotFound {
		b.Fatalf("a job over the bound was stored: %v", err)
	}
}
