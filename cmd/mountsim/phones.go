package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// resumeWatch tells, for the summary, how transfers went on after a cut:
// the first frame a later link (any phone's) writes to that mount starts
// at an offset above 0 (resumed where the mount stood) or at 0 (started
// over).
type resumeWatch struct {
	mu                 sync.Mutex
	cutAt              map[string]int64 // address → offset of the frame the cut stopped, when above 0
	resumed, restarted atomic.Int64
}

func (w *resumeWatch) cutBefore(address string, offset int64) {
	if offset <= 0 {
		return // nothing had gone over: no resumption to tell
	}
	w.mu.Lock()
	if w.cutAt == nil {
		w.cutAt = map[string]int64{}
	}
	w.cutAt[address] = offset
	w.mu.Unlock()
}

func (w *resumeWatch) firstFrame(address string, offset int64) {
	w.mu.Lock()
	_, cut := w.cutAt[address]
	delete(w.cutAt, address)
	w.mu.Unlock()
	switch {
	case !cut:
	case offset > 0:
		w.resumed.Add(1)
	default:
		w.restarted.Add(1)
	}
}

// passTimeout bounds one pass: connecting, the Sync (at most
// sdk.MaxSyncCommands commands) and its uploads. A phone walks on after it.
const passTimeout = 2 * time.Minute

// installRestartWait bounds a phone's wait for a mount to come back after
// a firmware install: a simulated mount restarts at once, and one failing
// silent never comes back, so the phone walks on sooner than an app would.
const installRestartWait = 5 * time.Second

// phoneCounters are what the phones did, for the summary.
type phoneCounters struct {
	passes, synced                   atomic.Int64 // passes; those whose Sync ended without error
	commands, executed, refused      atomic.Int64 // pending commands run, and how they ended
	unanswered, skipped, left, queue atomic.Int64 // no answer; not written (an install that could not start); left for later (bound, lost link); uploads waiting at the end
	busy                             atomic.Int64 // passes that found the mount's link taken by another phone
	installed, cut, silent           atomic.Int64 // firmware installs executed; links cut midway; mounts silent after one
	resumes                          resumeWatch  // transfers after a cut: resumed or started over
}

// phone is one rider's phone walking past mounts: an SDK client on the air
// with the maintainer token, its upload queue in a directory of its own.
type phone struct {
	n     int
	rng   *rand.Rand
	radio sdk.Radio
	dir   string
	c     *sdk.Client
}

// runPhones runs cfg.Phones phones until ctx ends. Each passes a mount
// chosen at random among the associated ones, with exponentially
// distributed times between its passes (mean cfg.PassEvery, a Poisson
// process per phone), and runs Sync there: the mount executes what jobs
// wait for it and the receipts go to the API.
func (f *fleet) runPhones(ctx context.Context, air *sim.Air) error {
	root := ""
	if f.cfg.StateDir != "" {
		root = filepath.Join(f.cfg.StateDir, "phones")
	} else {
		dir, err := os.MkdirTemp("", "mountsim-phones-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	seed := f.cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	// Every phone's queue directory first: a phone never runs while the
	// directories of its fellows may still be removed on an error.
	phones := make([]*phone, f.cfg.Phones)
	for i := range phones {
		phones[i] = &phone{n: i + 1, rng: rand.New(rand.NewPCG(seed, uint64(i))), radio: air.Central(),
			dir: filepath.Join(root, fmt.Sprintf("phone-%03d", i+1))}
		if f.cfg.DropLinkRate > 0 {
			// Each link that carries firmware is cut, with probability
			// rate, after a random number of frames (1 to 200).
			rng, rate := rand.New(rand.NewPCG(seed, uint64(i)+1<<32)), f.cfg.DropLinkRate
			var mu sync.Mutex
			phones[i].radio = sim.CuttingRadio{Radio: phones[i].radio, Air: air,
				After: func() int64 {
					mu.Lock()
					defer mu.Unlock()
					if rng.Float64() < rate {
						return 1 + rng.Int64N(200)
					}
					return -1
				},
				Cut: func(address string, offset int64) {
					f.phones.cut.Add(1)
					f.phones.resumes.cutBefore(address, offset)
				},
				FirstFrame: f.phones.resumes.firstFrame}
		}
		if err := os.MkdirAll(phones[i].dir, 0o700); err != nil {
			return err
		}
	}
	var wg sync.WaitGroup
	for _, p := range phones {
		wg.Go(func() { f.walk(ctx, p) })
	}
	wg.Wait()
	return nil
}

// walk is one phone's life: wait, pass a mount, again.
func (f *fleet) walk(ctx context.Context, p *phone) {
	defer func() {
		if p.c != nil {
			f.phones.queue.Add(int64(p.c.Queued().Items))
			_ = p.c.Close()
		}
	}()
	t := time.NewTimer(f.nextPass(p))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if u := f.pickMount(p); u != nil {
			f.pass(ctx, p, u)
		}
		t.Reset(f.nextPass(p))
	}
}

func (f *fleet) nextPass(p *phone) time.Duration {
	return time.Duration(p.rng.ExpFloat64() * float64(f.cfg.PassEvery))
}

// pickMount is a random associated mount (a phone's app shows those the
// account has); nil when none is.
func (f *fleet) pickMount(p *phone) *unit {
	for range 8 {
		if u := f.units[p.rng.IntN(len(f.units))]; u.mount().Status().OwnerKey != nil {
			return u
		}
	}
	return nil
}

// pass connects to the mount, runs Sync and walks on.
func (f *fleet) pass(run context.Context, p *phone, u *unit) {
	if err := f.phoneClient(p); err != nil {
		f.fail(u.mount().UID(), "pass", err)
		return
	}
	f.phones.passes.Add(1)
	ctx, cancel := context.WithTimeout(run, passTimeout)
	defer cancel()
	uid := u.mount().UID()
	restarts := u.restarts.Load()
	if _, err := p.c.Connect(ctx, uid); err != nil {
		if errors.Is(err, sim.ErrBusy) || errors.Is(err, sdk.ErrNotFound) || errors.Is(err, sim.ErrNotFound) {
			// Another phone holds the mount's one link, or the mount is not
			// heard (it failed silent after an update; the phone's scan had
			// seen it before): the phone walks on.
			f.phones.busy.Add(1)
			return
		}
		if run.Err() != nil {
			return // the run ended mid-pass: no failure of the mount's
		}
		f.fail(uid, "connect", err)
		return
	}
	defer func() { _ = p.c.Disconnect(uid) }()
	sum, err := p.c.Sync(ctx, uid)
	f.phones.commands.Add(int64(len(sum.Commands)))
	f.phones.executed.Add(int64(sum.Count(sdk.SyncExecuted)))
	f.phones.refused.Add(int64(sum.Count(sdk.SyncRefused)))
	f.phones.unanswered.Add(int64(sum.Count(sdk.SyncNoAnswer)))
	f.phones.skipped.Add(int64(sum.Count(sdk.SyncSkipped)))
	f.phones.left.Add(int64(sum.Offered - len(sum.Commands)))
	installed := false
	for _, c := range sum.Commands {
		if c.Code == string(protocol.CmdInstallFirmware) && c.Outcome == sdk.SyncExecuted {
			f.phones.installed.Add(1)
			installed = true
		}
	}
	if err != nil {
		if run.Err() != nil {
			return // the run ended mid-pass, as for a connect above; a pass that outlasted passTimeout is a failure
		}
		if u.restarts.Load() != restarts {
			f.offline.passesCut.Add(1) // the mount restarted under the phone (--restart-every)
			return
		}
		if installed {
			// The mount executed the install but did not report on the new
			// revision afterwards (it went silent, or rolled back first):
			// what a rollout must notice, not a simulator error.
			f.phones.silent.Add(1)
			f.log.Debug("no report on the new revision after an install", "uid", uid, "err", err)
			return
		}
		f.fail(uid, "sync", err)
		return
	}
	f.phones.synced.Add(1)
	if len(sum.Commands) > 0 {
		f.log.Debug("phone synced a mount", "phone", p.n, "uid", uid, "commands", len(sum.Commands),
			"executed", sum.Count(sdk.SyncExecuted), "refused", sum.Count(sdk.SyncRefused), "pending", sum.Pending)
	}
}

// phoneClient makes the phone's SDK client once, on the maintainer
// token's source: the SDK takes each call's token from it, so the client
// outlives the tokens (an hour each) and its queue with it.
func (f *fleet) phoneClient(p *phone) error {
	if p.c != nil {
		return nil
	}
	c, err := sdk.New(sdk.Config{BaseURL: strings.TrimRight(f.cfg.API, "/") + "/api/v1", TokenSource: f.api.maintainer.TokenSource(),
		Radio: p.radio, QueueDir: p.dir, HTTPClient: f.api.http, Logger: f.log, RestartWait: installRestartWait})
	if err != nil {
		return err
	}
	p.c = c
	return nil
}
