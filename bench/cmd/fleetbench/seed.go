package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/client"
)

// createAccount creates the fleet's account with mountd's own command, as
// an operator does.
func createAccount(ctx context.Context, cfg config) (meta, error) {
	if cfg.Mountd == "" {
		return meta{}, errors.New("seeding needs --mountd (the binary, for `mountd accounts create`)")
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, cfg.Mountd, "accounts", "create", "--name", fmt.Sprintf("fleetbench %d", cfg.Mounts), "--json")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return meta{}, fmt.Errorf("mountd accounts create: %w: %s", err, out.Bytes())
	}
	var m meta
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		return meta{}, fmt.Errorf("mountd accounts create: %w: %s", err, out.Bytes())
	}
	return m, nil
}

// seed onboards the fleet through the API as its devices and their owner
// would: each mount is associated (POST /mounts, with its model), confirmed
// and sends one report of the four codes. It returns how long it took.
func seed(ctx context.Context, cfg config, api *client.Client) (time.Duration, error) {
	start := time.Now()
	var (
		done     atomic.Int64
		firstErr error
		once     sync.Once
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	for range cfg.SeedClients {
		wg.Go(func() {
			for i := range next {
				if err := onboard(ctx, api, i); err != nil {
					once.Do(func() { firstErr = err; cancel() })
					return
				}
				done.Add(1)
			}
		})
	}
	progress := time.NewTicker(10 * time.Second)
	defer progress.Stop()
feed:
	for i := range cfg.Mounts {
		for {
			select {
			case next <- i:
				continue feed
			case <-progress.C:
				n := done.Load()
				logf("seeded %d of %d mounts, %.0f/s", n, cfg.Mounts, float64(n)/time.Since(start).Seconds())
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return time.Since(start), ctx.Err()
}

// onboard associates, confirms and reports mount i.
func onboard(ctx context.Context, api *client.Client, i int) error {
	uid, v := uidOf(i), valuesOf(i)
	steps := []struct {
		path string
		body any
	}{
		{"/mounts", map[string]string{"uid": uid, "name": fmt.Sprintf("Mount %d", i),
			"serialNumber": fmt.Sprintf("SN%07d", i), "modelNumber": v.Model, "firmwareRevision": "1.4.2"}},
		{"/mounts/" + uid + "/confirm-association", nil},
		{"/mounts/" + uid + "/states", json.RawMessage(v.report(time.Now()))},
	}
	for _, s := range steps {
		if err := withRetries(ctx, func() error { return api.Do(ctx, http.MethodPost, s.path, s.body, nil) }); err != nil {
			return fmt.Errorf("POST %s: %w", s.path, err)
		}
	}
	return nil
}

// withRetries retries a call the server could not answer now (503, 429),
// waiting as it says, five times at most.
func withRetries(ctx context.Context, call func() error) error {
	for attempt := 1; ; attempt++ {
		err := call()
		if err == nil || !client.Transient(err) || attempt == 5 {
			return err
		}
		select {
		case <-time.After(client.RetryWait(err, 200*time.Millisecond<<attempt, 10*time.Second)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// settle waits until mountd has announced every lapse (each seeded mount
// goes OFFLINE --offline-after after its report, and the presence sweep
// then writes its MOUNT_OFFLINE) and has swept every command the seed
// issued (UNCONFIRMED at its TTL), then vacuums and analyses the database,
// so that no sweep runs during the measurement and a restored dump and a
// fresh seed are measured in the same state. It reads mountd's tables:
// mounts.last_seen_at and offline_announced; when it cannot (a later
// layout), it says so and does not wait: a restored fleet was settled
// before its dump.
func settle(ctx context.Context, cfg config) (time.Duration, error) {
	db, err := openDB(cfg.DatabaseURL)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	start := time.Now()
	deadline := start.Add(cfg.OfflineAfter + 15*time.Minute)
	for {
		var pending int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM mounts
			WHERE last_seen_at IS NOT NULL AND NOT offline_announced AND owner_account_id IS NOT NULL`).Scan(&pending); err != nil {
			logf("cannot count the lapses to announce (%v): not waiting for the presence sweep", err)
			break
		}
		// The seed's ASSOCIATE_OWNER commands get no receipt: the command
		// sweep turns them UNCONFIRMED at their TTL (run.sh gives mountd
		// 1m), 500 a statement; a restored dump's all at once. Measured
		// while it runs, the reads would be measured beside it.
		var issued int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM commands WHERE status = 'ISSUED'`).Scan(&issued); err != nil {
			logf("cannot count the issued commands (%v): not waiting for the command sweep", err)
		}
		if pending == 0 && issued == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d mounts still not announced OFFLINE and %d commands ISSUED after %s: is MOUNTD_OFFLINE_AFTER %s, as --offline-after says, and MOUNTD_COMMAND_TTL short?",
				pending, issued, time.Since(start).Round(time.Second), cfg.OfflineAfter)
		}
		logf("waiting for the sweeps: %d mounts not announced OFFLINE yet, %d commands ISSUED", pending, issued)
		select {
		case <-time.After(5 * time.Second):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	t0 := time.Now()
	if !cfg.Vacuum {
		logf("settled: every mount OFFLINE and announced (waited %s); no VACUUM (--vacuum=false)", t0.Sub(start).Round(time.Second))
		return time.Since(start), nil
	}
	if _, err := db.ExecContext(ctx, "VACUUM (ANALYZE)"); err != nil {
		return 0, fmt.Errorf("vacuum: %w", err)
	}
	logf("settled: every mount OFFLINE and announced (waited %s), VACUUM (ANALYZE) in %s",
		t0.Sub(start).Round(time.Second), time.Since(t0).Round(100*time.Millisecond))
	return time.Since(start), nil
}
