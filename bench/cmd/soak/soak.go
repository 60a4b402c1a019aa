package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/client"
)

const (
	fromRevision = "1.0.0"
	toRevision   = "2.0.0"
	ownModel     = "SOAK-OWN"
)

// soak sets the fleet up, runs the load and the faults for --duration,
// lets things settle and reconciles.
func (d *deployment) soak(ctx context.Context, runID string) (*report, error) {
	cfg := d.cfg
	tag := strings.ToUpper(runID)
	d.modelB = "SOAKB-" + tag
	for _, rev := range []string{fromRevision, toRevision} {
		if err := d.publish(ctx, d.modelB, rev); err != nil {
			return nil, err
		}
	}
	nA, nB := cfg.Mounts-cfg.RolloutMounts, cfg.RolloutMounts
	prefixA, prefixB := "SA"+tag, "SB"+tag
	for i := 1; i <= nA; i++ {
		d.uidsA = append(d.uidsA, fmt.Sprintf("%s-%04d", prefixA, i))
	}
	for i := 1; i <= nB; i++ {
		d.uidsB = append(d.uidsB, fmt.Sprintf("%s-%04d", prefixB, i))
	}
	for i := range cfg.OwnMounts {
		d.uidsOwn = append(d.uidsOwn, fmt.Sprintf("SO%s-%04d", tag, i))
	}
	start := time.Now()
	if err := d.onboardOwn(ctx); err != nil {
		return nil, err
	}
	logf("%d own mounts associated in %.1f s", len(d.uidsOwn), time.Since(start).Seconds())

	// The alarm rule the own mounts trip: low battery, at once.
	var rule struct {
		ID string `json:"id"`
	}
	if err := d.api.Do(ctx, http.MethodPost, "/alarm-rules", map[string]any{"name": "soak low battery", "severity": "WARNING",
		"conditions": []map[string]string{{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}, "forSeconds": 0,
		"mountUids": d.uidsOwn}, &rule); err != nil {
		return nil, fmt.Errorf("create the alarm rule: %w", err)
	}

	// Webhooks: one on every event of the first 100 own mounts (a webhook
	// names 100 at most), one on the alarm, command, job and rollout events
	// of every mount.
	hooks := []hookSpec{
		{name: "own-mounts", mountUids: d.uidsOwn[:min(100, len(d.uidsOwn))]},
		{name: "outcomes", eventTypes: []string{"ALARM_RAISED", "ALARM_CLEARED", "COMMAND_EXECUTED", "COMMAND_REFUSED",
			"COMMAND_UNCONFIRMED", "JOB_COMPLETED", "ROLLOUT_PHASE_OPENED", "ROLLOUT_PAUSED", "ROLLOUT_COMPLETED"}},
	}
	for i := range hooks {
		rcv, srv, err := newReceiver(hooks[i].name)
		if err != nil {
			return nil, err
		}
		defer srv.Close()
		hooks[i].rcv = rcv
		var created struct {
			Secret string `json:"secret"`
		}
		body := map[string]any{"url": rcv.url, "description": "soak " + hooks[i].name}
		if hooks[i].eventTypes != nil {
			body["eventTypes"] = hooks[i].eventTypes
		}
		if hooks[i].mountUids != nil {
			body["mountUids"] = hooks[i].mountUids
		}
		if err := d.api.Do(ctx, http.MethodPost, "/webhooks", body, &created); err != nil {
			return nil, fmt.Errorf("create webhook %s: %w", hooks[i].name, err)
		}
		if err := rcv.setSecret(created.Secret); err != nil {
			return nil, err
		}
	}

	// The fleets: A reports, B (its own model and busier phones) runs the job
	// and the rollout.
	simArgs := func(n int, prefix, model string, phones int, every time.Duration, seed int) []string {
		return []string{"--mounts", strconv.Itoa(n), "--prefix", prefix, "--model", model, "--software-revision", fromRevision,
			"--air", "", "--api", d.base, "--associate", "--report-interval", cfg.ReportInterval.String(), "--battery-drain", "0",
			"--phones", strconv.Itoa(phones), "--pass-every", every.String(), "--seed", strconv.Itoa(seed),
			"--concurrency", "16", "--json", "--log-level", "warn"}
	}
	simA, err := startSim(cfg.Mountsim, "A", d.certFile, d.clientID, d.secret, filepath.Join(d.dir, "mountsim-A.log"),
		simArgs(nA, prefixA, "SOAKA-"+tag, cfg.Phones, cfg.PassEvery, 1))
	if err != nil {
		return nil, err
	}
	simB, err := startSim(cfg.Mountsim, "B", d.certFile, d.clientID, d.secret, filepath.Join(d.dir, "mountsim-B.log"),
		simArgs(nB, prefixB, d.modelB, cfg.RolloutPhones, cfg.RolloutPassEvery, 2))
	if err != nil {
		simA.stop()
		return nil, err
	}
	var simOut [2]json.RawMessage
	simsStopped := false
	stopSims := func() {
		if !simsStopped {
			simsStopped = true
			simOut[0], simOut[1] = simA.stop(), simB.stop()
		}
	}
	defer stopSims()
	// Associated and reporting, as the API sees them.
	for _, f := range []struct {
		model string
		n     int
		s     *sim
	}{{"SOAKA-" + tag, nA, simA}, {d.modelB, nB, simB}} {
		if err := d.waitReporting(ctx, f.model, f.n, f.s); err != nil {
			return nil, err
		}
	}
	logf("fleets A (%d) and B (%d) associated and reporting, %.0f s after the start", nA, nB, time.Since(start).Seconds())

	// The run's first cursor: the subscriptions start after it, the feed is
	// read from it.
	var tail struct {
		Next string `json:"next"`
	}
	if err := d.api.Do(ctx, http.MethodGet, "/events?tail=1", nil, &tail); err != nil {
		return nil, fmt.Errorf("the feed's head: %w", err)
	}
	c0 := tail.Next
	subs := d.subscribers(c0)
	subCtx, stopSubs := context.WithCancel(context.WithoutCancel(ctx))
	var subWG sync.WaitGroup
	for _, s := range subs {
		api := d.newClient()
		subWG.Go(func() { s.run(subCtx, api) })
	}
	defer func() { stopSubs(); subWG.Wait() }()

	t0 := time.Now()
	loadCtx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	rep := &reporters{api: d.api, uids: d.uidsOwn, interval: cfg.OwnInterval, statuses: &d.statuses, acked: map[entryKey]string{}}
	var repWG sync.WaitGroup
	repWG.Go(func() { rep.run(loadCtx) })

	logf("%d subscribers and %d followers from %s; load for %s", cfg.Subscribers, cfg.Followers, c0, cfg.Duration)

	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		d.runFaults(loadCtx, t0)
	}()
	// The job and the rollout start during the run, so that the Redis
	// failover and the PostgreSQL restart find them under way.
	var job, rollout created
	jobAt := time.NewTimer(time.Duration(cfg.JobAt * float64(cfg.Duration)))
	rolloutAt := time.NewTimer(time.Duration(cfg.RolloutAt * float64(cfg.Duration)))
	progress := time.NewTicker(30 * time.Second)
	end := time.NewTimer(cfg.Duration)
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-end.C:
			break loop
		case <-jobAt.C:
			if err := d.create(ctx, "/jobs", map[string]any{"code": "SET_RFID_MODE", "params": map[string]string{"rfidMode": "NORMAL"},
				"mountUids": d.uidsB, "description": "soak " + runID}, &job); err != nil {
				return nil, fmt.Errorf("create the job: %w", err)
			}
			job.at = time.Since(t0)
			logf("%.0f s: job %s over %d mounts", job.at.Seconds(), job.ID, nB)
		case <-rolloutAt.C:
			if err := d.create(ctx, "/rollouts", map[string]any{"modelNumber": d.modelB, "softwareRevision": toRevision,
				"phases": []int{10, 50, 100}, "minSample": 10, "failureThreshold": 5, "healthWindow": cfg.HealthWindow.String(),
				"requireIdle": true}, &rollout); err != nil {
				return nil, fmt.Errorf("create the rollout: %w", err)
			}
			rollout.at = time.Since(t0)
			logf("%.0f s: rollout %s of %s over %d mounts (healthWindow %s)", rollout.at.Seconds(), rollout.ID, d.modelB, nB, cfg.HealthWindow)
		case <-progress.C:
			logf("%.0f s: %d own reports acknowledged, %d given up; %s", time.Since(t0).Seconds(), rep.reports.Load(), rep.unacked.Load(), subsLine(subs))
		}
	}
	progress.Stop()
	stopLoad()
	<-faultsDone
	repWG.Wait()
	if job.ID == "" || rollout.ID == "" {
		return nil, errors.New("the run ended before the job and the rollout were created")
	}
	loadSeconds := time.Since(t0).Seconds()
	for _, r := range d.replicas {
		if err := r.ready(context.WithoutCancel(ctx), 2*time.Minute); err != nil {
			logf("%v", err)
		}
	}
	logf("load stopped after %.0f s: %d own reports acknowledged, %d given up; settling (at most %s)", loadSeconds,
		rep.reports.Load(), rep.unacked.Load(), cfg.Settle)

	// The job and the rollout need fleet B's phones: they pass on until
	// both ended or --settle.
	settleCtx := context.WithoutCancel(ctx)
	deadline := time.Now().Add(cfg.Settle)
	var jobView jobView
	var roView rolloutView
	for {
		errJ := d.api.Do(settleCtx, http.MethodGet, "/jobs/"+job.ID, nil, &jobView)
		errR := d.api.Do(settleCtx, http.MethodGet, "/rollouts/"+rollout.ID, nil, &roView)
		if errJ == nil && errR == nil && jobView.State != "ACTIVE" && roView.State != "RUNNING" {
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	stopSims()
	logf("job %s, rollout %s (%+v); mountsim stopped", jobView.State, roView.State, roView.Counts)

	// The feed to its head, then the deliveries until each subscriber and
	// receiver has what it should of it, or --settle again.
	feed, next, err := d.readFeed(settleCtx, c0)
	if err != nil {
		return nil, err
	}
	settleEnd := time.Now().Add(cfg.Settle)
	for time.Now().Before(settleEnd) {
		if subsCaughtUp(subs, feed) && hooksCaughtUp(hooks, feed) {
			break
		}
		time.Sleep(2 * time.Second)
	}
	stopSubs()
	subWG.Wait()
	// Events after the settle point may have reached some: they count as
	// known (not phantom) but not as due.
	later, _, err := d.readFeed(settleCtx, next)
	if err != nil {
		return nil, err
	}

	r := &report{Started: t0.UTC(), LoadSeconds: loadSeconds, Mounts: cfg.Mounts, OwnMounts: cfg.OwnMounts, Subscribers: len(subs),
		FullSubscribers: cfg.FullSubscribers, Replicas: 3, ReadReplica: cfg.ReadReplica, HealthWindow: cfg.HealthWindow.String(),
		Faults: d.faults, Statuses: d.statuses.snapshot()}
	r.Mountsim = map[string]json.RawMessage{"A": validJSON(simOut[0]), "B": validJSON(simOut[1])}
	r.Own = ownRow{Acknowledged: rep.reports.Load(), GivenUp: rep.unacked.Load(), Retries: rep.retries.Load()}
	r.JobCreatedAt, r.RolloutCreatedAt = job.at.Seconds(), rollout.at.Seconds()
	if err := d.reconcile(settleCtx, r, rep, feed, later, subs, hooks, jobView, roView, rule.ID); err != nil {
		return nil, err
	}
	for _, rp := range d.replicas {
		r.Kills += int(rp.killed.Load())
		r.Crashes += int(rp.crashed.Load())
	}
	return r, nil
}

// created is what the job's and the rollout's creation answered, and when
// in the run.
type created struct {
	ID string `json:"id"`
	at time.Duration
}

// create POSTs body to path, again only when mountd answered 503 or 429
// (nothing was created): another failure may have created it.
func (d *deployment) create(ctx context.Context, path string, body, out any) error {
	for attempt := 1; ; attempt++ {
		err := d.api.Do(ctx, http.MethodPost, path, body, out)
		s := client.StatusOf(err)
		if err == nil || (s != http.StatusServiceUnavailable && s != http.StatusTooManyRequests) || attempt == 10 {
			return err
		}
		time.Sleep(client.RetryWait(err, time.Second, 5*time.Second))
	}
}

// hookSpec is a webhook of the run and its receiver.
type hookSpec struct {
	name       string
	eventTypes []string
	mountUids  []string
	rcv        *receiver
}

// wants tells whether the webhook selects e.
func (h hookSpec) wants(e feedEvent) bool {
	if h.eventTypes != nil && !contains(h.eventTypes, e.Type) {
		return false
	}
	return h.mountUids == nil || contains(h.mountUids, e.uid())
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func validJSON(raw json.RawMessage) json.RawMessage {
	if json.Valid(raw) {
		return raw
	}
	q, _ := json.Marshal(string(raw))
	return q
}

// publish puts a random image in the catalogue as model's revision.
func (d *deployment) publish(ctx context.Context, model, revision string) error {
	data := make([]byte, 16<<10)
	_, _ = rand.Read(data)
	path := filepath.Join(d.dir, "image-"+revision+".bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	_, err := d.admin(ctx, "firmware", "publish", "--local-blobs", "--model", model, "--revision", revision, "--file", path,
		"--available-since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), "--json")
	return err
}

// onboardOwn associates and confirms the own mounts, 16 at a time.
func (d *deployment) onboardOwn(ctx context.Context) error {
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	sem := make(chan struct{}, 16)
	for i, uid := range d.uidsOwn {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for _, s := range []struct {
				path string
				body any
			}{
				{"/mounts", map[string]string{"uid": uid, "name": "Soak " + strconv.Itoa(i), "serialNumber": uid, "modelNumber": ownModel,
					"firmwareRevision": "1.0.0"}},
				{"/mounts/" + uid + "/confirm-association", nil},
			} {
				if err := withRetries(ctx, func() error { return d.api.Do(ctx, http.MethodPost, s.path, s.body, nil) }); err != nil {
					once.Do(func() { firstErr = fmt.Errorf("POST %s: %w", s.path, err) })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// withRetries retries a call the server could not answer now, five times at most.
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

// waitReporting waits until n mounts of model are associated and have
// reported (requireIdle reads their latest lock and helmet).
func (d *deployment) waitReporting(ctx context.Context, model string, n int, s *sim) error {
	filter := fmt.Sprintf(`modelNumber = "%s" AND batteryLevel > 0`, model)
	deadline := time.Now().Add(15 * time.Minute)
	for {
		var page struct {
			Pagination struct {
				TotalItems int `json:"totalItems"`
			} `json:"pagination"`
		}
		err := d.api.Do(ctx, http.MethodGet, "/mounts?pageSize=1&filter="+url.QueryEscape(filter), nil, &page)
		if err == nil && page.Pagination.TotalItems >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleet %s: %d of %d mounts reporting after 15 minutes (%v)", model, page.Pagination.TotalItems, n, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return fmt.Errorf("mountsim %s ended early: %v (see %s)", s.name, s.err, d.dir)
		case <-time.After(2 * time.Second):
		}
	}
}

// subscribers are the consoles: the first --full-subscribers on every
// mount, the others each on --watch mounts drawn from the own mounts and
// both fleets (a fixed seed: the same sets every run); then the feed's
// followers.
func (d *deployment) subscribers(c0 string) []*subscriber {
	all := append(append(append([]string(nil), d.uidsOwn...), d.uidsA...), d.uidsB...)
	rng := mrand.New(mrand.NewPCG(41, 4))
	subs := make([]*subscriber, d.cfg.Subscribers)
	for i := range subs {
		subs[i] = &subscriber{n: i, after: c0}
		if i >= d.cfg.FullSubscribers {
			seen := map[string]bool{}
			for len(subs[i].uids) < min(d.cfg.Watch, len(all)) {
				// Half of them own mounts: those whose reports are known.
				pool := all
				if len(subs[i].uids)%2 == 0 {
					pool = d.uidsOwn
				}
				uid := pool[rng.IntN(len(pool))]
				if !seen[uid] {
					seen[uid] = true
					subs[i].uids = append(subs[i].uids, uid)
				}
			}
		}
	}
	for i := range d.cfg.Followers {
		subs = append(subs, &subscriber{n: d.cfg.Subscribers + i, feed: true, after: c0})
	}
	return subs
}

func subsLine(subs []*subscriber) string {
	events, reconnects := 0, 0
	for _, s := range subs {
		s.mu.Lock()
		events += len(s.received)
		reconnects += s.reconnects
		s.mu.Unlock()
	}
	return fmt.Sprintf("subscribers received %d events, reconnected %d times", events, reconnects)
}

// runFaults kills a replica every --kill-every (in turn), fails a Redis
// master over at --redis-at and restarts PostgreSQL at --pg-at of the run.
func (d *deployment) runFaults(ctx context.Context, t0 time.Time) {
	cfg := d.cfg
	at := func(share float64) <-chan time.Time {
		if share < 0 {
			return nil
		}
		return time.After(time.Until(t0.Add(time.Duration(share * float64(cfg.Duration)))))
	}
	redisAt, pgAt := at(cfg.RedisAt), at(cfg.PGAt)
	kill := time.NewTicker(cfg.KillEvery)
	defer kill.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for kills := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-kill.C:
			r := d.replicas[kills%len(d.replicas)]
			kills++
			began := time.Now()
			err := r.kill()
			// Ready in the background: the next fault does not wait for it.
			wg.Go(func() {
				if err == nil {
					err = r.ready(context.WithoutCancel(ctx), 2*time.Minute)
				}
				d.fault(began.Sub(t0), fmt.Sprintf("replica %d SIGKILLed and restarted", r.n), time.Since(began), err)
			})
		case <-redisAt:
			wg.Go(func() {
				began := time.Now()
				what, took, err := redisFailover(context.WithoutCancel(ctx), cfg.clusterURL, cfg.RedisFault)
				if what == "" {
					what = "Redis master failover"
				}
				d.fault(began.Sub(t0), what, took, err)
			})
		case <-pgAt:
			wg.Go(func() {
				began := time.Now()
				took, err := pgRestart(context.WithoutCancel(ctx), cfg.pgBin, cfg.pgData, cfg.PGMode)
				d.fault(began.Sub(t0), "PostgreSQL restarted (pg_ctl restart -m "+cfg.PGMode+")", took, err)
			})
		}
	}
}
