package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uptrace/bun"
)

// stateRow is a mount_states row; the baseline inserts these into a scratch
// table of the same schema.
type stateRow struct {
	bun.BaseModel `bun:"table:mount_states"`
	MountUID      string `bun:"mount_uid"`
	AccountID     string `bun:"account_id"`
	Code          string `bun:"code"`
	OccurredAt    int64  `bun:"occurred_at"`
	Value         string `bun:"value"`
	ReceivedAt    int64  `bun:"received_at"`
}

// ingestWorker is one client's reusable buffers.
type ingestWorker struct {
	buf  []byte
	resp bytes.Buffer
	rows []stateRow
}

// ingestSend stores one batch somewhere and says how many entries were
// accepted; status names a failure ("503", "transport", …).
type ingestSend func(ctx context.Context, w *ingestWorker, ref batchRef) (accepted, duplicates int, status string, err error)

// runIngest runs a closed loop for d: every client sends a batch, waits for
// the answer and sends the next. Batches go round-robin over the mounts.
func (b *bench) runIngest(ctx context.Context, target string, g *generator, send ingestSend, d time.Duration) phase {
	ph := phase{Target: target, LoadAvg: loadAvg(), Statuses: map[string]int{}}
	var (
		mu       sync.Mutex
		lats     []time.Duration
		batches  atomic.Int64
		accepted atomic.Int64
		dups     atomic.Int64
		wg       sync.WaitGroup
	)
	cpu0 := b.cpu.sample()
	start := time.Now()
	deadline := start.Add(d)
	for range b.cfg.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ingestWorker{}
			local := make([]time.Duration, 0, 1024)
			statuses := map[string]int{}
			var firstErr string
			for ctx.Err() == nil && time.Now().Before(deadline) {
				ref := g.next(int((batches.Add(1) - 1) % int64(len(b.uids))))
				t0 := time.Now()
				acc, dup, status, err := send(ctx, w, ref)
				local = append(local, time.Since(t0))
				if err != nil {
					statuses[status]++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				accepted.Add(int64(acc))
				dups.Add(int64(dup))
			}
			mu.Lock()
			defer mu.Unlock()
			lats = append(lats, local...)
			for k, v := range statuses {
				ph.Statuses[k] += v
				ph.Errors += v
			}
			if ph.FirstError == "" {
				ph.FirstError = firstErr
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	ph.CPU = cpuSpan(cpu0, b.cpu.sample(), elapsed)
	ph.Seconds = round(elapsed.Seconds(), 3)
	ph.Requests = len(lats)
	ph.Accepted = accepted.Load()
	ph.Duplicates = dups.Load()
	ph.RequestsPerSec = round(float64(ph.Requests)/elapsed.Seconds(), 1)
	ph.EntriesPerSec = round(float64(ph.Accepted)/elapsed.Seconds(), 1)
	ph.Latency = summarize(lats)
	ph.lats = lats
	return ph
}

// postStates sends the batch to mountd.
func (b *bench) postStates(g *generator) ingestSend {
	post := b.postBody()
	return func(ctx context.Context, w *ingestWorker, ref batchRef) (int, int, string, error) {
		w.buf = g.appendBody(w.buf[:0], ref)
		return post(ctx, w, ref)
	}
}

// postBody sends w.buf, a report body for the batch's mount, to mountd.
func (b *bench) postBody() ingestSend {
	urls := make([]string, len(b.uids))
	for i, uid := range b.uids {
		urls[i] = b.cfg.Base + "/api/v1/mounts/" + uid + "/states"
	}
	return func(ctx context.Context, w *ingestWorker, ref batchRef) (int, int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, urls[ref.mount], bytes.NewReader(w.buf))
		if err != nil {
			return 0, 0, "request", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Access-Key", b.token)
		res, err := b.client.Do(req)
		if err != nil {
			return 0, 0, "transport", err
		}
		w.resp.Reset()
		_, err = w.resp.ReadFrom(res.Body)
		res.Body.Close()
		if err != nil {
			return 0, 0, "transport", err
		}
		if res.StatusCode != http.StatusOK {
			return 0, 0, strconv.Itoa(res.StatusCode), fmt.Errorf("POST states: %d %.300s", res.StatusCode, w.resp.Bytes())
		}
		var out struct {
			Accepted   int `json:"accepted"`
			Duplicates int `json:"duplicates"`
		}
		if err := json.Unmarshal(w.resp.Bytes(), &out); err != nil {
			return 0, 0, "body", fmt.Errorf("POST states answer %.300s: %w", w.resp.Bytes(), err)
		}
		return out.Accepted, out.Duplicates, "", nil
	}
}

// insertRows is the baseline: a plain multi-row INSERT of the same rows
// through bun, one statement per batch, straight into the scratch table.
func (b *bench) insertRows(g *generator, table string) ingestSend {
	return func(ctx context.Context, w *ingestWorker, ref batchRef) (int, int, string, error) {
		w.rows = g.appendRows(w.rows[:0], ref, b.uids[ref.mount], b.accountID, time.Now().UnixMilli())
		ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
		defer cancel()
		res, err := b.db.NewInsert().Model(&w.rows).ModelTableExpr("?", bun.Ident(table)).Exec(ctx)
		if err != nil {
			return 0, 0, "database", err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, 0, "database", err
		}
		return int(n), len(w.rows) - int(n), "", nil
	}
}

// ingestScenario measures mountd's state ingest and the bun INSERT baseline
// in --rounds alternating rounds (both see the same machine), then counts
// what each stored.
func (b *bench) ingestScenario(ctx context.Context) (*ingestReport, error) {
	rep := &ingestReport{Batch: b.cfg.Batch, Clients: b.cfg.Clients, TargetEntriesPerSec: 20000}
	// entries lie in the past, one millisecond apart (none is a duplicate)
	g := newGenerator(b.cfg.Batch, time.Now().Add(-48*time.Hour))
	send := b.postStates(g)
	var (
		base  *ingestBaseline
		bsend ingestSend
		bg    = newGenerator(b.cfg.Batch, time.Now().Add(-48*time.Hour))
	)
	if b.cfg.Baseline {
		// The baseline inserts the same kind of rows into a scratch table
		// with mount_states' columns, primary key and index (LIKE …
		// INCLUDING ALL copies no foreign key), dropped afterwards.
		base = &ingestBaseline{Table: "mountbench_scratch_" + b.runID}
		if _, err := b.db.NewRaw("CREATE TABLE ? (LIKE mount_states INCLUDING ALL)", bun.Ident(base.Table)).Exec(ctx); err != nil {
			return nil, fmt.Errorf("create scratch table: %w", err)
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, err := b.db.NewRaw("DROP TABLE IF EXISTS ?", bun.Ident(base.Table)).Exec(dctx); err != nil {
				b.logf("drop scratch table %s: %v", base.Table, err)
			}
		}()
		bsend = b.insertRows(bg, base.Table)
	}
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		w := b.runIngest(ctx, "mountd (warm-up)", g, send, b.cfg.Warmup)
		rep.Expected += w.Accepted
		rep.Duplicates += w.Duplicates
		if base != nil {
			base.Expected += b.runIngest(ctx, "baseline (warm-up)", bg, bsend, b.cfg.Warmup).Accepted
		}
	}
	var server, baseline []phase
	d := b.cfg.Duration / time.Duration(b.cfg.roundsOr(1))
	for r := range b.cfg.roundsOr(1) {
		b.logf("ingest: round %d of %d, mountd then the bun INSERT baseline, %s each (load %v)", r+1, b.cfg.roundsOr(1), d, loadAvg())
		server = append(server, b.runIngest(ctx, "mountd POST /api/v1/mounts/{uid}/states", g, send, d))
		if base != nil {
			baseline = append(baseline, b.runIngest(ctx, "baseline: bun multi-row INSERT into "+base.Table, bg, bsend, d))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.Server = mergePhases(server, false)
	rep.Expected += rep.Server.Accepted
	rep.Duplicates += rep.Server.Duplicates
	counted, err := b.countStates(ctx)
	if err != nil {
		return nil, err
	}
	rep.Counted = counted
	rep.Lost = max(0, rep.Expected-counted)
	rep.Extra = max(0, counted-rep.Expected)
	rep.Pass = rep.Lost == 0 && rep.Server.Errors == 0 && rep.Server.EntriesPerSec >= rep.TargetEntriesPerSec

	if base != nil {
		base.Phase = mergePhases(baseline, false)
		base.Expected += base.Phase.Accepted
		if err := b.db.NewRaw("SELECT count(*) FROM ?", bun.Ident(base.Table)).Scan(ctx, &base.Counted); err != nil {
			return nil, fmt.Errorf("count scratch table: %w", err)
		}
		base.Lost = max(0, base.Expected-base.Counted)
		rep.Baseline = base
		if base.Phase.EntriesPerSec > 0 {
			rep.ThroughputRatio = round(rep.Server.EntriesPerSec/base.Phase.EntriesPerSec, 3)
		}
		if base.Phase.Latency.P50 > 0 {
			rep.P50Ratio = round(rep.Server.Latency.P50/base.Phase.Latency.P50, 2)
			rep.P99Ratio = round(rep.Server.Latency.P99/base.Phase.Latency.P99, 2)
		}
	}
	return rep, nil
}

// countStates counts the entries stored for this run's mounts.
func (b *bench) countStates(ctx context.Context) (int64, error) {
	var n int64
	err := b.db.NewRaw("SELECT count(*) FROM mount_states WHERE mount_uid IN (?)", bun.In(b.uids)).Scan(ctx, &n)
	if err != nil {
		return 0, fmt.Errorf("count mount_states: %w", err)
	}
	return n, nil
}
