package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/core"
)

// onboardReport is fleet onboarding: every client takes a new uid, asks for
// its association (POST /mounts), confirms it and sends the mount's first
// report (one entry per code), then takes the next uid. The baseline makes
// the same three changes through the store alone (bunstore's ClaimMount,
// ConfirmAssociation and InsertStates, each with its event), from the same
// number of goroutines in this process: what the database part costs.
type onboardReport struct {
	Clients  int     `json:"clients"`
	Server   phase   `json:"server"`
	Baseline *phase  `json:"baseline,omitempty"`
	Ratio    float64 `json:"throughputRatio,omitempty"`
	// Associated and Stored are counted in the database afterwards for the
	// server's phase (warm-up included): mounts ASSOCIATED to the account
	// and entries stored for them; Lost is what was acknowledged and is
	// not there.
	Acknowledged int64   `json:"acknowledged"`
	Associated   int64   `json:"associated"`
	Stored       int64   `json:"stored"`
	Lost         int64   `json:"lost"`
	TargetPerSec float64 `json:"targetMountsPerSec"`
	Pass         bool    `json:"pass"`
}

// onboardSend onboards mount number n; status names a failure.
type onboardSend func(ctx context.Context, w *ingestWorker, n int64) (status string, err error)

// runOnboard runs a closed loop for d; Requests counts onboarded mounts.
func (b *bench) runOnboard(ctx context.Context, target string, seq *atomic.Int64, send onboardSend, d time.Duration) phase {
	ph := phase{Target: target, LoadAvg: loadAvg(), Statuses: map[string]int{}}
	var (
		mu   sync.Mutex
		lats []time.Duration
		ok   atomic.Int64
		wg   sync.WaitGroup
	)
	cpu0 := b.cpu.sample()
	start := time.Now()
	deadline := start.Add(d)
	for range b.cfg.OnboardClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &ingestWorker{}
			local := make([]time.Duration, 0, 1024)
			statuses := map[string]int{}
			var firstErr string
			for ctx.Err() == nil && time.Now().Before(deadline) {
				n := seq.Add(1) - 1
				t0 := time.Now()
				status, err := send(ctx, w, n)
				local = append(local, time.Since(t0))
				if err != nil {
					statuses[status]++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				ok.Add(1)
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
	ph.Accepted = ok.Load()
	ph.RequestsPerSec = round(float64(ph.Accepted)/elapsed.Seconds(), 1)
	ph.Latency = summarize(lats)
	ph.lats = lats
	return ph
}

// onboardUID names mount n of a run; prefix tells the server's from the
// baseline's.
func (b *bench) onboardUID(prefix string, n int64) string {
	return fmt.Sprintf("%s-%s-%07d", prefix, b.runID, n)
}

// firstReport is the body of a mount's first report: one entry per code.
func firstReport(at time.Time) []byte {
	ts := at.UTC().Format(rfc3339Millis)
	return []byte(`{"states":[{"code":"BATTERY_LEVEL","value":"87","occurredAt":"` + ts +
		`"},{"code":"CPU_TEMPERATURE","value":"41.5","occurredAt":"` + ts +
		`"},{"code":"MOUNT_LOCKED","value":"1","occurredAt":"` + ts +
		`"},{"code":"HELMET_MOUNTED","value":"0","occurredAt":"` + ts + `"}]}`)
}

// post sends one authorised POST and reads the answer into w.resp.
func (b *bench) post(ctx context.Context, w *ingestWorker, url string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return "request", err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Access-Key", b.token)
	res, err := b.client.Do(req)
	if err != nil {
		return "transport", err
	}
	w.resp.Reset()
	_, err = w.resp.ReadFrom(io.LimitReader(res.Body, 1<<20))
	res.Body.Close()
	if err != nil {
		return "transport", err
	}
	if res.StatusCode != http.StatusOK {
		return strconv.Itoa(res.StatusCode), fmt.Errorf("POST %s: %d %.300s", url, res.StatusCode, w.resp.Bytes())
	}
	return "", nil
}

// onboardHTTP onboards through mountd's API.
func (b *bench) onboardHTTP(ctx context.Context, w *ingestWorker, n int64) (string, error) {
	uid := b.onboardUID("ob", n)
	if status, err := b.post(ctx, w, b.cfg.Base+"/api/v1/mounts", []byte(`{"uid":"`+uid+`"}`)); err != nil {
		return "mounts " + status, err
	}
	if status, err := b.post(ctx, w, b.cfg.Base+"/api/v1/mounts/"+uid+"/confirm-association", nil); err != nil {
		return "confirm " + status, err
	}
	if status, err := b.post(ctx, w, b.cfg.Base+"/api/v1/mounts/"+uid+"/states", firstReport(time.Now())); err != nil {
		return "states " + status, err
	}
	return "", nil
}

// onboardStore makes the same three changes through the store alone.
func (b *bench) onboardStore(ctx context.Context, _ *ingestWorker, n int64) (string, error) {
	uid := b.onboardUID("os", n)
	now := time.Now().UTC().Truncate(time.Millisecond)
	key := core.MountKey{ID: "k" + strconv.FormatInt(n, 16), PublicKey: bytes.Repeat([]byte{7}, 32), SealedPrivateKey: "sealed"}
	ev := &core.Event{Type: core.EventAssociationRequested, UID: uid, AccountID: b.accountID, OccurredAt: now}
	if _, err := b.store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: b.accountID, Key: key, Now: now,
		Deadline: now.Add(10 * time.Minute)}, ev); err != nil {
		return "claim", err
	}
	ev = &core.Event{Type: core.EventAssociationConfirmed, UID: uid, AccountID: b.accountID, OccurredAt: now}
	if _, ok, err := b.store.ConfirmAssociation(ctx, uid, b.accountID, now, ev); err != nil || !ok {
		return "confirm", fmt.Errorf("confirm %s: %v %v", uid, ok, err)
	}
	entries := make([]core.StateEntry, 0, 4)
	for i, v := range []string{"87", "41.5", "1", "0"} {
		entries = append(entries, core.StateEntry{Code: core.StateCodes[i], Value: v, OccurredAt: now, ReceivedAt: now})
	}
	ev = &core.Event{Type: core.EventStatesReported, UID: uid, AccountID: b.accountID, OccurredAt: now}
	if _, _, err := b.store.InsertStates(ctx, uid, b.accountID, entries, ev); err != nil {
		return "states", err
	}
	return "", nil
}

// onboardScenario measures onboarding through mountd and through the store
// alone in --rounds alternating rounds, then counts what mountd stored.
func (b *bench) onboardScenario(ctx context.Context) (*onboardReport, error) {
	rep := &onboardReport{Clients: b.cfg.OnboardClients, TargetPerSec: 894}
	var seq, bseq atomic.Int64
	b.quiet(ctx)
	if b.cfg.Warmup > 0 {
		rep.Acknowledged += b.runOnboard(ctx, "mountd (warm-up)", &seq, b.onboardHTTP, b.cfg.Warmup).Accepted
		if b.cfg.Baseline {
			b.runOnboard(ctx, "store (warm-up)", &bseq, b.onboardStore, b.cfg.Warmup)
		}
	}
	var server, baseline []phase
	d := b.cfg.Duration / time.Duration(b.cfg.roundsOr(1))
	for r := range b.cfg.roundsOr(1) {
		b.logf("onboard: round %d of %d, mountd then the store alone, %s each (load %v)", r+1, b.cfg.roundsOr(1), d, loadAvg())
		server = append(server, b.runOnboard(ctx, "mountd POST /mounts, confirm-association, first report", &seq, b.onboardHTTP, d))
		if b.cfg.Baseline {
			baseline = append(baseline, b.runOnboard(ctx, "baseline: bunstore ClaimMount, ConfirmAssociation, InsertStates", &bseq, b.onboardStore, d))
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	rep.Server = mergePhases(server, true)
	rep.Acknowledged += rep.Server.Accepted
	prefix := "ob-" + b.runID + "-%"
	if err := b.db.NewRaw("SELECT count(*) FROM mounts WHERE uid LIKE ? AND owner_account_id = ? AND association_state = 'ASSOCIATED'",
		prefix, b.accountID).Scan(ctx, &rep.Associated); err != nil {
		return nil, fmt.Errorf("count mounts: %w", err)
	}
	if err := b.db.NewRaw("SELECT count(*) FROM mount_states WHERE mount_uid LIKE ? AND account_id = ?",
		prefix, b.accountID).Scan(ctx, &rep.Stored); err != nil {
		return nil, fmt.Errorf("count states: %w", err)
	}
	// Every acknowledged onboarding left an associated mount with its four
	// entries; a failed one may have left part of it.
	rep.Lost = max(0, rep.Acknowledged-rep.Associated) + max(0, 4*rep.Acknowledged-rep.Stored)
	rep.Pass = rep.Lost == 0 && rep.Server.Errors == 0 && rep.Server.RequestsPerSec >= rep.TargetPerSec
	if b.cfg.Baseline {
		base := mergePhases(baseline, true)
		rep.Baseline = &base
		if base.RequestsPerSec > 0 {
			rep.Ratio = round(rep.Server.RequestsPerSec/base.RequestsPerSec, 3)
		}
	}
	return rep, nil
}
