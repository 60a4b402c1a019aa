package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// Offline access under load (docs/ble.md, "Offline access"): riders
// (--riders) hold a grant for each mount they use, requested online with
// the owner token; a share of them (--offline) has no network at the
// mounts, so the SDK falls back to the stored grant and the mount checks it
// alone. Meanwhile the owner revokes grants (--revoke), mounts restart
// (--restart-every) and phones die mid-upload (--kill-uploads). The
// counters that must stay 0: releases by a revoked grant after an online
// phone brought the mount a list newer than the revocation, honest riders
// refused, offline uses lost between the mounts and the server, mounts
// whose clock or list went back across a restart.

const (
	// maxRiders bounds --riders: each is a goroutine, an SDK client, its
	// upload queue and its grant keeper's files.
	maxRiders = 1000
	// maxMountsPerRider bounds --mounts-per-rider: a phone keeps a grant
	// for each, and a rider uses a few mounts.
	maxMountsPerRider = 16
	// drainTimeout bounds the end of a run with riders: the phones go
	// online, carry the mounts' offline logs and empty their queues.
	drainTimeout = 2 * time.Minute
	// maxUseSamples bounds the verification times kept for the percentiles
	// (a uniform sample past it).
	maxUseSamples = 1 << 16
	// watchEvery is how often the mounts' revocation versions are read.
	watchEvery = time.Second
	// restartPause is how long a restarting mount is off the air: what it
	// was handling when it went off ends within it.
	restartPause = 200 * time.Millisecond
	// grantMargin: grants stay valid this long past the run's end.
	grantMargin = time.Hour
	// maxGrantTTL is the owner's bound on a grant's validity.
	maxGrantTTL = 7 * 24 * time.Hour
)

// errNoNetwork is a phone's HTTP transport at a mount without network.
var errNoNetwork = errors.New("mountsim: no network here")

// errKilled is the answer a killed phone never saw (--kill-uploads).
var errKilled = errors.New("mountsim: the phone died during the upload")

// OfflineSummary is what the riders did (Summary.Offline).
type OfflineSummary struct {
	Riders          int   `json:"riders"`
	Grants          int   `json:"grants"`          // grants the riders hold (one per rider and mount)
	GrantErrors     int64 `json:"grantErrors"`     // grant requests that failed
	GrantBytes      int   `json:"grantBytes"`      // a grant's text and signature, the largest
	UseBytes        int   `json:"useBytes"`        // a use message (grant, code, challenge, proof), the largest
	Releases        int64 `json:"releases"`        // helmets released for riders
	ReleasesOffline int64 `json:"releasesOffline"` // ... by phones without network (a stored grant)
	// Uses of a revoked grant the mounts executed (allowed while no phone
	// brought the list), and those after an online phone holding a list
	// newer than the revocation had connected to the mount: must be 0.
	Revocations         int   `json:"revocations"`
	RevokedReleases     int64 `json:"revokedReleases"`
	RevokedAfterContact int64 `json:"revokedAfterContact"`
	RevokedRefused      int64 `json:"revokedRefused"` // attempts with a revoked grant the mounts refused
	// Riders refused though their grant was valid and unrevoked, held
	// since the mount's epoch, on a mount with trusted time: must be 0.
	HonestRefused int64            `json:"honestRefused"`
	RefusedBy     map[string]int64 `json:"refusedBy,omitempty"` // the mounts' refusals of uses, by reason
	// Offline uses: EXECUTED on the mounts, held by the server at the end
	// (the grants' uses), left in the mounts' logs after the drain, and
	// lost (executed, neither held nor left): must be 0.
	OfflineExecuted int64 `json:"offlineExecuted"`
	OfflineHeld     int64 `json:"offlineHeld"`
	OfflineInLogs   int64 `json:"offlineInLogs"`
	OfflineLost     int64 `json:"offlineLost"`
	OfflineExtra    int64 `json:"offlineExtra"` // held by the server, never executed: must be 0
	// Revocations whose mount's revocationVersion caught up within 1, 5
	// and 15 minutes, against what the passes allow; those not caught up
	// at the end.
	CaughtUp       []CatchUp `json:"caughtUp"`
	NotCaughtUp    int       `json:"notCaughtUp"`
	CatchUpP50Secs float64   `json:"catchUpP50Seconds"`
	// The mount's handling of a use (checks, signature, save), µs.
	UseP50Micros float64 `json:"useP50Micros"`
	UseP99Micros float64 `json:"useP99Micros"`
	UsesTimed    int64   `json:"usesTimed"`
	// BLE bytes of a connection's offline part (time token, revocation
	// list, offline log and acks, with the mount's answers), mean and
	// largest over the riders' connections, and the mean of each part.
	Connections    int64   `json:"connections"`
	ConnBytesMean  float64 `json:"connectionBytesMean"`
	ConnBytesMax   int64   `json:"connectionBytesMax"`
	TimeBytesMean  float64 `json:"timeBytesMean"`
	ListBytesMean  float64 `json:"listBytesMean"`
	LogBytesMean   float64 `json:"logBytesMean"`
	Restarts       int64   `json:"restarts"`
	RestartsBehind int64   `json:"restartsBehind"` // mounts whose clock, list or log went back: must be 0
	PassesCut      int64   `json:"passesCut"`      // passes cut by the mount's restart
	UploadsKilled  int64   `json:"uploadsKilled"`
	UploadsResumed int64   `json:"uploadsResumed"` // ... then carried on by a new client on the same state
}

// catchUpWindows are the times within which the summary tells the
// share of revocations that reached their mount.
var catchUpWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// CatchUp is the share of the revocations made at least Minutes before
// the run's end (Of) whose mount's revocationVersion reached them within
// Minutes, and the share the passes allow: a revoked grant's mount is
// passed by phones that carry lists as a Poisson process (the job phones
// at --phones/(--pass-every × mounts), each other online rider holding a
// live grant there at 1/(--pass-every × its mounts)), so the baseline is
// the mean over those revocations of 1 − e^(−rate × window).
type CatchUp struct {
	Minutes  float64 `json:"minutes"`
	Of       int     `json:"of"`
	Share    float64 `json:"share"`
	Baseline float64 `json:"baseline"`
}

// grantRec is one rider's grant, as the simulation follows it.
type grantRec struct {
	stored    sdk.StoredGrant
	online    bool      // its rider has network at the mounts
	rate      float64   // its rider's passes at this mount per second
	revokedAt time.Time // when the revocation was answered; zero: live
	version   int64     // the revocation list's version that holds it
	caughtAt  time.Time // when its mount's version reached version
}

// offline is the riders' shared record.
type offline struct {
	mu       sync.Mutex
	grants   map[string]*grantRec // id →
	byMount  map[string][]*grantRec
	fresh    map[string]time.Time // uid → newest list refresh of an online phone that then connected
	executed map[string]int64     // grant id → EXECUTED uses the mounts signed
	refused  map[string]int64     // the mounts' refusals of uses by reason
	took     []time.Duration      // verification times, a uniform sample
	timed    int64
	rng      *rand.Rand

	grantErrors, releases, releasesOffline                    atomic.Int64
	revokedExec, revokedAfter, revokedRefused, honestRefused  atomic.Int64
	restarts, restartsBehind, passesCut, killed, resumed      atomic.Int64
	conns, connBytes, connMax, timeBytes, listBytes, logBytes atomic.Int64
	grantBytes, useBytes                                      atomic.Int64
	executedTotal                                             atomic.Int64
	phoneRate                                                 float64 // the job phones\' passes at one mount per second
	held, inLogs, lost, extra                                 int64
}

func newOffline(seed uint64) *offline {
	return &offline{grants: map[string]*grantRec{}, byMount: map[string][]*grantRec{}, fresh: map[string]time.Time{},
		executed: map[string]int64{}, refused: map[string]int64{}, rng: rand.New(rand.NewPCG(seed, 0x6f66666c))}
}

// used is every simulated mount's OnUse: it times the use and counts what
// the mount answered.
func (o *offline) used(m *simmount.Mount, res protocol.BLEMessage, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.timed++
	if len(o.took) < maxUseSamples {
		o.took = append(o.took, took)
	} else if i := o.rng.Int64N(o.timed); i < maxUseSamples {
		o.took[i] = took
	}
	if res.Type != protocol.BLEMessageOffline || res.Outcome != protocol.OutcomeExecuted {
		o.refused[res.Reason]++
		return
	}
	o.executed[res.GrantID]++
	o.executedTotal.Add(1)
	g := o.grants[res.GrantID]
	if g == nil || g.revokedAt.IsZero() {
		return
	}
	o.revokedExec.Add(1)
	if o.fresh[m.UID()].After(g.revokedAt) {
		o.revokedAfter.Add(1)
	}
}

// passRate is how often phones that carry the revocation list pass g's
// mount after g's revocation (per second): the job phones, and the other
// riders with network holding a grant there not revoked by then.
func (o *offline) passRate(g *grantRec) float64 {
	rate := o.phoneRate
	for _, h := range o.byMount[g.stored.UID] {
		if h != g && h.online && (h.revokedAt.IsZero() || h.revokedAt.After(g.revokedAt)) {
			rate += h.rate
		}
	}
	return rate
}

// contact records an online phone at mount uid whose lists were refreshed
// at refreshed.
func (o *offline) contact(uid string, refreshed time.Time) {
	o.mu.Lock()
	if refreshed.After(o.fresh[uid]) {
		o.fresh[uid] = refreshed
	}
	o.mu.Unlock()
}

// revoked returns the grant's record when it was revoked.
func (o *offline) revoked(id string) (sdk.StoredGrant, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	g := o.grants[id]
	if g == nil || g.revokedAt.IsZero() {
		return sdk.StoredGrant{}, false
	}
	return g.stored, true
}

// phoneNet is a rider phone's HTTP transport: it fails at mounts without
// network, and kills the phone during a share of its offline-receipt
// uploads (the request reaches the server, the answer never the phone,
// and nothing of that client reaches the server afterwards).
type phoneNet struct {
	base   http.RoundTripper
	down   atomic.Bool
	dead   atomic.Bool
	killed atomic.Bool
	kill   func() bool // nil: never
}

func (n *phoneNet) RoundTrip(r *http.Request) (*http.Response, error) {
	if n.down.Load() || n.dead.Load() {
		if r.Body != nil {
			_ = r.Body.Close()
		}
		return nil, errNoNetwork
	}
	if n.kill != nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/offline-receipts") && n.kill() {
		n.dead.Store(true)
		if res, err := n.base.RoundTrip(r); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
		}
		n.killed.Store(true)
		return nil, errKilled
	}
	return n.base.RoundTrip(r)
}

// riderKeeper is a rider's grant keeper. For the mounts where the rider's
// grant was revoked it plays a tampered phone: it keeps the revoked grant
// and never holds the mount's revocation list, so the mount alone has to
// refuse it.
type riderKeeper struct {
	sdk.GrantKeeper
	mu     sync.Mutex
	banned map[string]sdk.StoredGrant // uid → the revoked grant kept
}

func (k *riderKeeper) ban(g sdk.StoredGrant) {
	k.mu.Lock()
	k.banned[g.UID] = g
	k.mu.Unlock()
}

func (k *riderKeeper) bannedAt(uid string) (sdk.StoredGrant, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	g, ok := k.banned[uid]
	return g, ok
}

func (k *riderKeeper) Grants() ([]sdk.StoredGrant, error) {
	gs, err := k.GrantKeeper.Grants()
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	gs = slices.DeleteFunc(gs, func(g sdk.StoredGrant) bool { _, ok := k.banned[g.UID]; return ok })
	for _, g := range k.banned {
		gs = append(gs, g)
	}
	return gs, nil
}

func (k *riderKeeper) DeleteGrant(id string) error {
	k.mu.Lock()
	for _, g := range k.banned {
		if g.ID == id {
			k.mu.Unlock()
			return nil
		}
	}
	k.mu.Unlock()
	return k.GrantKeeper.DeleteGrant(id)
}

func (k *riderKeeper) Revocations(uid string) (sdk.StoredRevocations, bool, error) {
	if _, ok := k.bannedAt(uid); ok {
		return sdk.StoredRevocations{}, false, nil
	}
	return k.GrantKeeper.Revocations(uid)
}

func (k *riderKeeper) PutRevocations(r sdk.StoredRevocations) error {
	if _, ok := k.bannedAt(r.UID); ok {
		return nil
	}
	return k.GrantKeeper.PutRevocations(r)
}

// rider is one rider's phone and the mounts it uses.
type rider struct {
	n       int
	rng     *rand.Rand
	offline bool    // no network at the mounts (--offline)
	units   []*unit // the mounts it holds a grant for
	dir     string
	radio   sdk.Radio
	keeper  *riderKeeper
	net     *phoneNet
	c       *sdk.Client
	killRng *rand.Rand
	killMu  sync.Mutex
}

// share reports whether the i-th item of kind falls in the share p,
// from the seed: the same seed picks the same riders.
func share(seed uint64, kind string, i int, p float64) bool {
	if p <= 0 {
		return false
	}
	h := sha256.Sum256(append(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, seed), uint64(i)), kind...))
	return float64(binary.BigEndian.Uint64(h[:8])>>11)/float64(1<<53) < p
}

// client is the rider's SDK client, made anew after a kill: same queue
// directory, same keeper, a new transport.
func (f *fleet) riderClient(r *rider) error {
	if r.c != nil {
		return nil
	}
	r.net = &phoneNet{base: f.api.http.Transport}
	if f.cfg.KillUploads > 0 && r.killRng != nil {
		r.net.kill = func() bool {
			if f.draining.Load() {
				return false
			}
			r.killMu.Lock()
			defer r.killMu.Unlock()
			return r.killRng.Float64() < f.cfg.KillUploads
		}
	}
	r.net.down.Store(false)
	hc := &http.Client{Transport: r.net, Timeout: requestTimeout, CheckRedirect: f.api.http.CheckRedirect}
	c, err := sdk.New(sdk.Config{BaseURL: strings.TrimRight(f.cfg.API, "/") + "/api/v1", TokenSource: f.api.owner.TokenSource(),
		Radio: r.radio, QueueDir: filepath.Join(r.dir, "queue"), Keeper: r.keeper, HTTPClient: hc, Logger: f.log,
		RetryMin: retryFirst, RetryMax: 5 * time.Second})
	if err != nil {
		return err
	}
	r.c = c
	return nil
}

// dropClient closes the rider's client (a killed app).
func (r *rider) dropClient() {
	if r.c != nil {
		r.net.dead.Store(true)
		_ = r.c.Close()
		r.c = nil
	}
}

// runRiders sets the riders up (a grant per mount, requested online),
// runs them, the revocations and the restarts until ctx ends, then drains:
// every phone online, the mounts' logs carried, the queues emptied; and
// reconciles the uses with the server's grants.
func (f *fleet) runRiders(ctx context.Context, air *sim.Air, start time.Time) error {
	root := ""
	if f.cfg.StateDir != "" {
		root = filepath.Join(f.cfg.StateDir, "riders")
	} else {
		dir, err := os.MkdirTemp("", "mountsim-riders-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		root = dir
	}
	seed := f.seed
	candidates := make([]*unit, 0, len(f.units))
	for _, u := range f.units {
		if !u.legacy && u.mount().Status().OwnerKey != nil {
			candidates = append(candidates, u)
		}
	}
	if len(candidates) == 0 {
		return errors.New("riders: no associated mount with a device key")
	}
	f.offline.mu.Lock()
	f.offline.phoneRate = float64(f.cfg.Phones) / (f.cfg.PassEvery.Seconds() * float64(len(candidates)))
	f.offline.mu.Unlock()
	notAfter := time.Now().Add(24 * time.Hour)
	if f.cfg.Duration > 0 {
		notAfter = start.Add(f.cfg.Duration + grantMargin)
	}
	if limit := time.Now().Add(maxGrantTTL - time.Minute); notAfter.After(limit) {
		notAfter = limit
	}
	riders := make([]*rider, f.cfg.Riders)
	for i := range riders {
		r := &rider{n: i + 1, rng: rand.New(rand.NewPCG(seed, uint64(i)+2<<32)),
			offline: share(seed, "offline", i, f.cfg.Offline),
			dir:     filepath.Join(root, fmt.Sprintf("rider-%03d", i+1)),
			radio:   &countingRadio{Radio: air.Central(), o: f.offline},
			killRng: rand.New(rand.NewPCG(seed, uint64(i)+3<<32))}
		k, err := sdk.NewFileKeeper(filepath.Join(r.dir, "grants"))
		if err != nil {
			return err
		}
		r.keeper = &riderKeeper{GrantKeeper: k, banned: map[string]sdk.StoredGrant{}}
		for _, j := range r.rng.Perm(len(candidates))[:min(f.cfg.MountsPerRider, len(candidates))] {
			r.units = append(r.units, candidates[j])
		}
		riders[i] = r
	}
	// Grants, online, at most Concurrency requests at once.
	var wg sync.WaitGroup
	sem := make(chan struct{}, f.cfg.Concurrency)
	for _, r := range riders {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			f.requestGrants(ctx, r, notAfter)
		})
	}
	wg.Wait()
	f.log.Info("riders up", "riders", len(riders), "grants", len(f.offline.grants), "offline riders", countTrue(riders))

	var bg sync.WaitGroup
	if f.cfg.Revoke > 0 {
		bg.Go(func() { f.revoke(ctx, riders, start) })
	}
	if f.cfg.RestartEvery > 0 {
		bg.Go(func() { f.restarts(ctx, air, seed) })
	}
	bg.Go(func() { f.watchRevocations(ctx) })
	for _, r := range riders {
		bg.Go(func() { f.ride(ctx, r) })
	}
	bg.Wait()

	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	f.drain(dctx, air, riders, root)
	rctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	f.reconcile(rctx)
	for _, r := range riders {
		r.dropClient()
	}
	return nil
}

func countTrue(rs []*rider) int {
	n := 0
	for _, r := range rs {
		if r.offline {
			n++
		}
	}
	return n
}

// requestGrants asks, online, for the rider's grant on each of its mounts;
// a mount whose grant fails is dropped from its round.
func (f *fleet) requestGrants(ctx context.Context, r *rider, notAfter time.Time) {
	if err := f.riderClient(r); err != nil {
		f.fail("", "rider", err)
		return
	}
	kept := r.units[:0]
	for _, u := range r.units {
		g, err := r.c.RequestGrant(ctx, u.mount().UID(), notAfter)
		if err != nil {
			if ctx.Err() == nil {
				f.offline.grantErrors.Add(1)
				f.fail(u.mount().UID(), "grant", err)
			}
			continue
		}
		kept = append(kept, u)
		f.offline.mu.Lock()
		rec := &grantRec{stored: g, online: !r.offline, rate: 1 / (f.cfg.PassEvery.Seconds() * float64(len(r.units)))}
		f.offline.grants[g.ID] = rec
		f.offline.byMount[g.UID] = append(f.offline.byMount[g.UID], rec)
		f.offline.mu.Unlock()
		maxInto(&f.offline.grantBytes, int64(len(g.Text)+len(g.Signature)))
	}
	r.units = kept
}

func maxInto(v *atomic.Int64, n int64) {
	for {
		old := v.Load()
		if n <= old || v.CompareAndSwap(old, n) {
			return
		}
	}
}

// ride is one rider's life: wait, walk to one of its mounts, release the
// helmet there, again.
func (f *fleet) ride(ctx context.Context, r *rider) {
	if len(r.units) == 0 {
		return
	}
	t := time.NewTimer(time.Duration(r.rng.ExpFloat64() * float64(f.cfg.PassEvery)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.ridePass(ctx, r, r.units[r.rng.IntN(len(r.units))])
		t.Reset(time.Duration(r.rng.ExpFloat64() * float64(f.cfg.PassEvery)))
	}
}

// ridePass: online between mounts (the grants and lists refreshed), then
// at the mount, with or without network, the helmet released.
func (f *fleet) ridePass(run context.Context, r *rider, u *unit) {
	if err := f.riderClient(r); err != nil {
		f.fail("", "rider", err)
		return
	}
	ctx, cancel := context.WithTimeout(run, passTimeout)
	defer cancel()
	m := u.mount()
	uid := m.UID()
	f.resume(ctx, r, "") // killed between mounts (the queue's uploads)
	refreshed := time.Now()
	refreshOK := r.c.RefreshGrants(ctx) == nil
	_, attacker := r.keeper.bannedAt(uid)
	offlineHere := r.offline || attacker
	// Whether the rider is honest here: its grant live, valid now, held at
	// the mount's epoch, and the mount's time trusted.
	st := m.Offline()
	honest := false
	if !attacker {
		gs, _ := r.keeper.Grants()
		for _, g := range gs {
			if g.UID == uid {
				_, revoked := f.offline.revoked(g.ID)
				now := st.Time
				honest = !revoked && st.TimeTrusted && !now.Before(g.NotBefore) && !now.After(g.NotAfter) && g.Epoch >= st.Epoch
			}
		}
	}
	restartsBefore := u.restarts.Load()
	r.net.down.Store(offlineHere)
	defer r.net.down.Store(false)
	if _, err := r.c.Connect(ctx, uid); err != nil {
		if errors.Is(err, sim.ErrBusy) || errors.Is(err, sdk.ErrNotFound) || errors.Is(err, sim.ErrNotFound) {
			f.phones.busy.Add(1)
			return
		}
		if run.Err() == nil {
			f.fail(uid, "rider connect", err)
		}
		return
	}
	out, err := r.c.ReleaseHelmet(ctx, uid)
	_ = r.c.Disconnect(uid)
	r.net.down.Store(false)
	var refused *sdk.RefusedError
	switch {
	case err == nil:
		f.offline.releases.Add(1)
		if out.Offline != offlineHere {
			// A phone with network falls back on a 5xx or a 401 only.
			f.log.Warn("a release went another way than the phone's network says", "uid", uid, "rider", r.n, "offline", out.Offline, "network", !offlineHere)
		}
		if out.Offline {
			f.offline.releasesOffline.Add(1)
		} else if refreshOK && u.restarts.Load() == restartsBefore {
			// The connection's routine wrote the list fetched now to the
			// mount before the release.
			f.offline.contact(uid, refreshed)
		}
	case errors.As(err, &refused) && attacker:
		f.offline.revokedRefused.Add(1)
	case errors.As(err, &refused) && honest:
		f.offline.honestRefused.Add(1)
		f.log.Error("an honest rider was refused", "uid", uid, "rider", r.n, "offline", offlineHere, "reason", refused.Reason)
	case errors.As(err, &refused):
		f.log.Debug("rider refused", "uid", uid, "rider", r.n, "reason", refused.Reason)
	case u.restarts.Load() != restartsBefore:
		f.offline.passesCut.Add(1)
	case run.Err() != nil:
	default:
		f.fail(uid, "release", err)
	}
	if f.cfg.ReturnAfter == 0 && !u.mount().Status().HelmetMounted {
		u.mount().ReturnHelmet()
	}
	f.resume(ctx, r, uid)
}

// resume: when an upload killed the rider's client, a new client on the
// same state goes on: its queue uploads what the old one left and, at a
// mount (uid not empty), it connects again, online, and carries the
// mount's log.
func (f *fleet) resume(ctx context.Context, r *rider, uid string) {
	if r.net == nil || !r.net.killed.Load() {
		return
	}
	f.offline.killed.Add(1)
	r.dropClient()
	if err := f.riderClient(r); err != nil {
		f.fail(uid, "rider", err)
		return
	}
	if uid == "" {
		f.offline.resumed.Add(1)
		return
	}
	if _, err := r.c.Connect(ctx, uid); err != nil {
		return // the mount is busy or restarting: its log waits for the next phone
	}
	defer func() { _ = r.c.Disconnect(uid) }()
	if _, err := r.c.UploadPending(ctx, uid); err == nil {
		f.offline.resumed.Add(1)
	} else if ctx.Err() == nil && !r.net.killed.Load() {
		f.fail(uid, "resume", err)
	}
}

// revoke revokes --revoke of the grants, one at a time, spread over the
// first two thirds of the run (or one every --pass-every without a
// --duration), by the owner over REST.
func (f *fleet) revoke(ctx context.Context, riders []*rider, start time.Time) {
	f.offline.mu.Lock()
	ids := make([]string, 0, len(f.offline.grants))
	for id := range f.offline.grants {
		ids = append(ids, id)
	}
	f.offline.mu.Unlock()
	slices.Sort(ids)
	rng := rand.New(rand.NewPCG(f.seed, 0x7265766f))
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	n := int(f.cfg.Revoke*float64(len(ids)) + 0.5)
	if n == 0 {
		return
	}
	every := f.cfg.PassEvery
	if f.cfg.Duration > 0 {
		every = time.Until(start.Add(f.cfg.Duration*2/3)) / time.Duration(n)
	}
	keepers := map[string]*riderKeeper{} // rider key → keeper
	for _, r := range riders {
		gs, _ := r.keeper.GrantKeeper.Grants()
		for _, g := range gs {
			keepers[g.RiderKey] = r.keeper
		}
	}
	t := time.NewTimer(max(every, time.Millisecond))
	defer t.Stop()
	for _, id := range ids[:n] {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		t.Reset(max(every, time.Millisecond))
		f.offline.mu.Lock()
		rec := f.offline.grants[id]
		f.offline.mu.Unlock()
		if err := f.api.call(ctx, f.api.owner, "POST", "/grants/"+id+"/revoke", nil, nil); err != nil {
			if !errors.Is(err, errNotSent) {
				f.fail(rec.stored.UID, "revoke", err)
			}
			continue
		}
		at := time.Now()
		if k := keepers[rec.stored.RiderKey]; k != nil {
			k.ban(rec.stored)
		}
		var list protocol.SignedText
		version := int64(0)
		if err := f.api.call(ctx, f.api.owner, "GET", "/mounts/"+rec.stored.UID+"/revocations", nil, &list); err != nil {
			f.fail(rec.stored.UID, "revocations", err)
		} else if rv, err := protocol.ParseRevocationsText(list.Text); err != nil {
			f.fail(rec.stored.UID, "revocations", err)
		} else {
			version = rv.Version
		}
		f.offline.mu.Lock()
		rec.revokedAt, rec.version = at, version
		f.offline.mu.Unlock()
	}
}

// watchRevocations notes when each revoked grant's mount reached the
// list version that holds it.
func (f *fleet) watchRevocations(ctx context.Context) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.checkCaughtUp()
	}
}

func (f *fleet) checkCaughtUp() {
	byUID := map[string]*unit{}
	for _, u := range f.units {
		byUID[u.cfg.UID] = u
	}
	f.offline.mu.Lock()
	var open []*grantRec
	for _, g := range f.offline.grants {
		if !g.revokedAt.IsZero() && g.caughtAt.IsZero() && g.version > 0 {
			open = append(open, g)
		}
	}
	f.offline.mu.Unlock()
	now := time.Now()
	for _, g := range open {
		u := byUID[g.stored.UID]
		if u == nil || u.mount().Offline().RevocationVersion < g.version {
			continue
		}
		f.offline.mu.Lock()
		g.caughtAt = now
		f.offline.mu.Unlock()
	}
}

// restarts restarts a random mount every --restart-every: off the air, a
// new simmount opened on the same store, on the air again. The clock may
// not fall below what the store held, nor the list or log go back.
func (f *fleet) restarts(ctx context.Context, air *sim.Air, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x72657374))
	t := time.NewTicker(f.cfg.RestartEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u := f.units[rng.IntN(len(f.units))]
		if u.legacy {
			continue
		}
		if err := f.restart(air, u); err != nil {
			f.fail(u.cfg.UID, "restart", err)
		}
	}
}

func (f *fleet) restart(air *sim.Air, u *unit) error {
	old := u.mount()
	air.Unregister(u.cfg.MACAddress)
	u.restarts.Add(1)
	time.Sleep(restartPause)
	before := old.Offline()
	saved, _, err := f.store.Load(u.cfg.UID)
	if err != nil {
		return err
	}
	m, err := simmount.Open(u.cfg)
	if err != nil {
		return err
	}
	u.m.Store(m)
	if err := air.Register(m); err != nil {
		return err
	}
	f.offline.restarts.Add(1)
	after := m.Offline()
	if after.Time.UnixMilli() < saved.Clock || after.RevocationVersion < before.RevocationVersion ||
		after.Epoch < before.Epoch || len(after.Log) < len(before.Log) {
		f.offline.restartsBehind.Add(1)
		f.log.Error("a mount went back across a restart", "uid", u.cfg.UID,
			"clock", after.Time, "saved", time.UnixMilli(saved.Clock), "version", after.RevocationVersion, "before", before.RevocationVersion,
			"log", len(after.Log), "logBefore", len(before.Log))
	}
	return nil
}

// drain ends a run with riders: every rider online empties its queue, and
// an online phone carries each mount's offline log to the server.
func (f *fleet) drain(ctx context.Context, air *sim.Air, riders []*rider, root string) {
	f.draining.Store(true)
	dir := filepath.Join(root, "drain")
	carrier := &rider{dir: dir, radio: air.Central(), rng: rand.New(rand.NewPCG(f.seed, 5))}
	k, err := sdk.NewFileKeeper(filepath.Join(dir, "grants"))
	if err == nil {
		carrier.keeper = &riderKeeper{GrantKeeper: k, banned: map[string]sdk.StoredGrant{}}
		err = f.riderClient(carrier)
	}
	if err != nil {
		f.fail("", "drain", err)
		return
	}
	defer carrier.dropClient()
	for _, u := range f.units {
		if u.legacy || len(u.mount().Offline().Log) == 0 {
			continue
		}
		uid := u.cfg.UID
		for try := 0; try < 3 && ctx.Err() == nil; try++ {
			if _, err := carrier.c.Connect(ctx, uid); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			_, err := carrier.c.UploadPending(ctx, uid)
			_ = carrier.c.Disconnect(uid)
			if err == nil && len(u.mount().Offline().Log) == 0 {
				break
			}
		}
	}
	// The riders' queues (receipts read offline, uploads cut).
	for _, r := range riders {
		f.resume(ctx, r, "")
		if err := f.riderClient(r); err != nil {
			continue
		}
		for r.c.Queued().Items > 0 && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		if n := r.c.Queued().Items; n > 0 {
			f.log.Warn("a rider's queue is not empty after the drain", "rider", r.n, "items", n)
		}
	}
	if n := carrier.c.Queued().Items; n > 0 {
		f.log.Warn("the drain phone's queue is not empty", "items", n)
	}
}

// reconcile reads each grant's uses from the server and sets held, left
// in logs, lost and extra.
func (f *fleet) reconcile(ctx context.Context) {
	inLogs := map[string]int64{}
	for _, u := range f.units {
		if u.legacy {
			continue
		}
		for _, e := range u.mount().Offline().Log {
			if e.Outcome == protocol.OutcomeExecuted {
				inLogs[e.GrantID]++
			}
		}
	}
	f.offline.mu.Lock()
	ids := make([]string, 0, len(f.offline.grants))
	for id := range f.offline.grants {
		ids = append(ids, id)
	}
	executed := maps.Clone(f.offline.executed)
	f.offline.mu.Unlock()
	var held, logs, lost, extra int64
	for _, id := range ids {
		var g struct {
			Uses int64 `json:"uses"`
		}
		if err := f.api.call(ctx, f.api.owner, "GET", "/grants/"+id, nil, &g); err != nil {
			f.fail("", "reconcile", err)
			continue
		}
		held += g.Uses
		logs += inLogs[id]
		switch d := executed[id] - g.Uses - inLogs[id]; {
		case d > 0:
			lost += d
			f.log.Error("offline uses lost", "grant", id, "executed", executed[id], "held", g.Uses, "inLog", inLogs[id])
		case executed[id] < g.Uses:
			extra += g.Uses - executed[id]
		}
	}
	f.offline.held, f.offline.inLogs, f.offline.lost, f.offline.extra = held, logs, lost, extra
}

// summary is the riders' part of the summary.
func (o *offline) summary(riders int, end time.Time) *OfflineSummary {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &OfflineSummary{Riders: riders, Grants: len(o.grants), GrantErrors: o.grantErrors.Load(),
		GrantBytes: int(o.grantBytes.Load()), UseBytes: int(o.useBytes.Load()),
		Releases: o.releases.Load(), ReleasesOffline: o.releasesOffline.Load(),
		RevokedReleases: o.revokedExec.Load(), RevokedAfterContact: o.revokedAfter.Load(), RevokedRefused: o.revokedRefused.Load(),
		HonestRefused: o.honestRefused.Load(), OfflineExecuted: o.executedTotal.Load(),
		OfflineHeld: o.held, OfflineInLogs: o.inLogs, OfflineLost: o.lost, OfflineExtra: o.extra,
		UsesTimed: o.timed, Connections: o.conns.Load(), ConnBytesMax: o.connMax.Load(),
		Restarts: o.restarts.Load(), RestartsBehind: o.restartsBehind.Load(), PassesCut: o.passesCut.Load(),
		UploadsKilled: o.killed.Load(), UploadsResumed: o.resumed.Load()}
	if len(o.refused) > 0 {
		s.RefusedBy = maps.Clone(o.refused)
	}
	if n := float64(s.Connections); n > 0 {
		s.ConnBytesMean = float64(o.connBytes.Load()) / n
		s.TimeBytesMean = float64(o.timeBytes.Load()) / n
		s.ListBytesMean = float64(o.listBytes.Load()) / n
		s.LogBytesMean = float64(o.logBytes.Load()) / n
	}
	took := slices.Clone(o.took)
	slices.Sort(took)
	s.UseP50Micros, s.UseP99Micros = micros(pct(took, 0.50)), micros(pct(took, 0.99))
	var delays []time.Duration
	s.CaughtUp = make([]CatchUp, len(catchUpWindows))
	for i, w := range catchUpWindows {
		s.CaughtUp[i].Minutes = w.Minutes()
	}
	for _, g := range o.grants {
		if g.revokedAt.IsZero() {
			continue
		}
		s.Revocations++
		d := g.caughtAt.Sub(g.revokedAt)
		if g.caughtAt.IsZero() {
			s.NotCaughtUp++
		} else {
			delays = append(delays, d)
		}
		rate := o.passRate(g)
		for i, w := range catchUpWindows {
			if end.Sub(g.revokedAt) < w {
				continue // not watched for that long
			}
			c := &s.CaughtUp[i]
			c.Of++
			if !g.caughtAt.IsZero() && d <= w {
				c.Share++
			}
			c.Baseline += 1 - math.Exp(-rate*w.Seconds())
		}
	}
	for i := range s.CaughtUp {
		if c := &s.CaughtUp[i]; c.Of > 0 {
			c.Share /= float64(c.Of)
			c.Baseline /= float64(c.Of)
		}
	}
	slices.Sort(delays)
	s.CatchUpP50Secs = pct(delays, 0.5).Seconds()
	return s
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// printOffline prints the riders' part of the summary.
func printOffline(w io.Writer, o *OfflineSummary) {
	fmt.Fprintf(w, "  riders %d, grants %d (errors %d, %d bytes), releases %d (offline %d)\n",
		o.Riders, o.Grants, o.GrantErrors, o.GrantBytes, o.Releases, o.ReleasesOffline)
	fmt.Fprintf(w, "  revocations %d: releases by a revoked grant %d, of which after an online phone brought the list %d (must be 0); refused %d\n",
		o.Revocations, o.RevokedReleases, o.RevokedAfterContact, o.RevokedRefused)
	fmt.Fprintf(w, "  honest riders refused %d (must be 0); mounts' refusals of uses %v\n", o.HonestRefused, o.RefusedBy)
	fmt.Fprintf(w, "  offline uses executed %d, held by the server %d, left in logs %d, lost %d (must be 0), extra %d (must be 0)\n",
		o.OfflineExecuted, o.OfflineHeld, o.OfflineInLogs, o.OfflineLost, o.OfflineExtra)
	for _, c := range o.CaughtUp {
		fmt.Fprintf(w, "  revocations caught up within %.0f min: %.0f%% of %d (the passes allow %.0f%%)\n", c.Minutes, 100*c.Share, c.Of, 100*c.Baseline)
	}
	fmt.Fprintf(w, "  revocations not caught up at the end %d, median catch-up %.0fs\n", o.NotCaughtUp, o.CatchUpP50Secs)
	fmt.Fprintf(w, "  use on the mount p50 %.0f µs, p99 %.0f µs (%d uses); use message %d bytes; connection's offline part %.0f bytes mean (time %.0f, list %.0f, log %.0f), %d max, %d connections\n",
		o.UseP50Micros, o.UseP99Micros, o.UsesTimed, o.UseBytes, o.ConnBytesMean, o.TimeBytesMean, o.ListBytesMean, o.LogBytesMean, o.ConnBytesMax, o.Connections)
	fmt.Fprintf(w, "  restarts %d (went back %d, must be 0; passes cut %d), uploads killed %d (resumed by a new client %d)\n",
		o.Restarts, o.RestartsBehind, o.PassesCut, o.UploadsKilled, o.UploadsResumed)
}
