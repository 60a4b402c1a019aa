package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
)

// Config is everything the flags set.
type Config struct {
	Mounts                                    int
	Prefix                                    string
	Air                                       string
	API, ClientID, ClientSecret               string
	ProjectID, IDPName                        string
	ReportInterval                            time.Duration
	Associate, ResetOwners                    bool // ResetOwners: every mount's physical reset first
	ReturnAfter                               time.Duration
	Concurrency                               int
	Duration                                  time.Duration
	MTU, MaxLinks                             int
	AdvInterval, ConnInterval                 time.Duration
	BatteryDrain                              float64
	Model, FirmwareRevision, SoftwareRevision string
	LogLevel                                  string
	JSON                                      bool
	Legacy                                    int    // the last Legacy mounts run older firmware
	StateDir                                  string // mounts' states as files; empty: memory
	Forge                                     bool
	Phones                                    int           // phones passing mounts and running their pending commands
	PassEvery                                 time.Duration // mean time between two passes of a phone
	Seed                                      uint64        // the phones' choices; 0: random
	// FirmwareFailureRate is the share of mounts (0 to 1, chosen from Seed
	// by uid) that fail after an installed update, as FirmwareFailure says.
	FirmwareFailureRate float64
	FirmwareFailure     string  // simmount.FailRollback (default) or simmount.FailSilent
	DropLinkRate        float64 // share of a phone's firmware links cut midway

	// Offline access (offline.go): riders, each with a grant on
	// MountsPerRider mounts; the share Offline of them without network at
	// the mounts; the share Revoke of the grants revoked during the run; a
	// mount restarted every RestartEvery; the share KillUploads of the
	// riders' offline-receipt uploads killed with their app.
	Riders, MountsPerRider       int
	Offline, Revoke, KillUploads float64
	RestartEvery                 time.Duration
}

// failsAfterUpdate says whether the mount uid is among the rate share that
// fails after an update: SHA-256 of the seed and the uid, so the same seed
// picks the same mounts.
func failsAfterUpdate(seed uint64, uid string, rate float64) bool {
	if rate <= 0 {
		return false
	}
	sum := sha256.Sum256(append(binary.BigEndian.AppendUint64(nil, seed), uid...))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11)/float64(1<<53) < rate
}

// maxRiderMounts bounds the mount: items of the one rider token --forge
// uses: a token per mount would run into the identity provider's limit on
// client authentications, and a scope of thousands of items helps nobody.
const maxRiderMounts = 16

// maxPhones bounds --phones: each is a goroutine, an SDK client and an
// upload queue directory.
const maxPhones = 1000

// Summary is what a run did, printed when it stops.
type Summary struct {
	Mounts           int              `json:"mounts"`
	Air              string           `json:"air,omitempty"`
	Associated       int64            `json:"associated"` // mounts holding an owner key at the end
	Reports          int64            `json:"reports"`
	NotAssociated    int64            `json:"reportsNotAssociated"` // answered 404: paused, not counted as errors
	EntriesAccepted  int64            `json:"entriesAccepted"`
	Duplicates       int64            `json:"duplicates"`
	Errors           int64            `json:"errors"`
	ErrorsByKind     map[string]int64 `json:"errorsByKind,omitempty"`
	CommandsAccepted int              `json:"commandsAccepted"`
	CommandsRefused  int              `json:"commandsRefused"`
	Legacy           int              `json:"legacy"`        // mounts on older firmware (nothing signed)
	SignedReports    int64            `json:"signedReports"` // reports carrying the mount's signature
	Receipts         int64            `json:"receipts"`      // receipts uploaded
	ReceiptsAccepted int64            `json:"receiptsAccepted"`
	// Attempts made again after no answer or a 502, 503, 504, 408 or 429
	// (a replica restarting behind a proxy): a report or receipt is kept
	// and tried again until the API answers it, so these are not errors.
	UploadsRetried int64 `json:"uploadsRetried"`
	// --forge: altered or unsigned reports for mounts with a device key,
	// refused as they must be (403 SIGNATURE_REQUIRED, 400
	// INVALID_SIGNATURE), or accepted (a hole: must stay 0). Other answers
	// count as errors ("forge ...").
	ForgedReports  int64 `json:"forgedReports"`
	ForgedRefused  int64 `json:"forgedRefused"`
	ForgedAccepted int64 `json:"forgedAccepted"`
	// --phones: passes made, those whose Sync ended well, and those that
	// found the mount's link taken (or did not hear it: failed silent); the pending commands run and how they
	// ended; commands left for a later pass (the Sync bound, a lost link);
	// uploads still queued on the phones at the end.
	Passes             int64 `json:"passes"`
	PassesSynced       int64 `json:"passesSynced"`
	PassesBusy         int64 `json:"passesBusy"`
	JobCommands        int64 `json:"jobCommands"`
	JobExecuted        int64 `json:"jobExecuted"`
	JobRefused         int64 `json:"jobRefused"`
	JobUnanswered      int64 `json:"jobUnanswered"`
	JobSkipped         int64 `json:"jobSkipped"`
	JobLeft            int64 `json:"jobLeft"`
	PhoneUploadsQueued int64 `json:"phoneUploadsQueued"`
	// Firmware: mounts set to fail after an update (--firmware-failure-rate),
	// installs the phones ran to the end (receipt EXECUTED), links cut
	// midway (--drop-link-rate), installs after which the mount did not
	// report on the new revision (it went silent, or had rolled back).
	FirmwareFailing   int   `json:"firmwareFailing"`
	FirmwareInstalled int64 `json:"firmwareInstalled"`
	FirmwareLinksCut  int64 `json:"firmwareLinksCut"`
	FirmwareSilent    int64 `json:"firmwareNoReport"`
	// After a cut that stopped a transfer past its first byte, the next
	// link to that mount (any phone's) resumed from the mount's offset
	// (above 0) or started over from 0 (a lost transfer: must stay rare).
	FirmwareResumed   int64 `json:"firmwareResumed"`
	FirmwareRestarted int64 `json:"firmwareStartedOver"`
	// --riders: offline access (OfflineSummary).
	Offline *OfflineSummary `json:"offline,omitempty"`
	Seconds float64         `json:"seconds"`
}

// identity is the deterministic name of the i-th mount (from 1): uid,
// serial number and a locally administered MAC whose middle bytes come from
// the prefix, so two fleets with different prefixes do not collide.
func identity(prefix string, i int) (uid, serial, mac string) {
	h := fnv.New32a()
	h.Write([]byte(prefix))
	p := h.Sum32()
	uid = fmt.Sprintf("%s-%04d", prefix, i)
	serial = fmt.Sprintf("SN-%s-%06d", prefix, i)
	mac = fmt.Sprintf("02:%02X:%02X:%02X:%02X:%02X", byte(p>>16), byte(p>>8), byte(p), byte(i>>8), byte(i))
	return
}

// mount is the mount as it runs now.
func (u *unit) mount() *simmount.Mount { return u.m.Load() }

// unit is one mount of the fleet and its reporting state.
type unit struct {
	m       atomic.Pointer[simmount.Mount] // swapped when the mount restarts (--restart-every)
	cfg     simmount.Config                // what it was opened with, to open it again
	changed chan struct{}                  // a state change waits to be reported
	legacy  bool
	rider   bool // the rider token names it: --forge also tries unsigned reports
	forged  int  // forging attempts so far (they alternate kinds)

	// Set when the API answered 404 for the mount's current owner key:
	// reports wait for a new association (a new key) or for the back-off.
	restarts atomic.Int64 // restarts so far (--restart-every)

	refusedKey ed25519.PublicKey
	retryAt    time.Time
	backoff    time.Duration
}

type fleet struct {
	cfg   Config
	log   *slog.Logger
	units []*unit
	api   *apiClient // nil: nothing is reported

	associated, reports, accepted, duplicates, errs atomic.Int64
	notFound                                        atomic.Int64 // reports answered 404 (paused, not errors)
	signed, receipts, receiptsAccepted              atomic.Int64
	retried                                         atomic.Int64 // uploads' attempts after a transient failure
	forged, forgedRefused, forgedAccepted           atomic.Int64
	kindsMu                                         sync.Mutex
	kinds                                           map[string]int64
	phones                                          phoneCounters
	failing                                         int // mounts that fail after an update
	offline                                         *offline
	draining                                        atomic.Bool // the riders' drain: no more kills
	store                                           simmount.Store
	seed                                            uint64 // cfg.Seed, or a random one
}

func run(ctx context.Context, cfg Config, stdout, stderr io.Writer, ready chan<- string) error {
	if cfg.Mounts < 1 || cfg.Mounts > 65535 {
		return errors.New("--mounts must be from 1 to 65535")
	}
	if cfg.ReportInterval <= 0 {
		return errors.New("--report-interval must be positive")
	}
	if cfg.Legacy < 0 || cfg.Legacy > cfg.Mounts {
		return errors.New("--legacy must be from 0 to --mounts")
	}
	if cfg.Phones < 0 || cfg.Phones > maxPhones {
		return fmt.Errorf("--phones must be from 0 to %d", maxPhones)
	}
	if cfg.Riders < 0 || cfg.Riders > maxRiders {
		return fmt.Errorf("--riders must be from 0 to %d", maxRiders)
	}
	if cfg.MountsPerRider < 1 || cfg.MountsPerRider > maxMountsPerRider {
		return fmt.Errorf("--mounts-per-rider must be from 1 to %d", maxMountsPerRider)
	}
	for _, p := range []float64{cfg.Offline, cfg.Revoke, cfg.KillUploads} {
		if p < 0 || p > 1 {
			return errors.New("--offline, --revoke and --kill-uploads must be from 0 to 1")
		}
	}
	if cfg.RestartEvery < 0 {
		return errors.New("--restart-every must not be negative")
	}
	if (cfg.Phones > 0 || cfg.Riders > 0) && cfg.PassEvery <= 0 {
		return errors.New("--pass-every must be positive")
	}
	if cfg.FirmwareFailureRate < 0 || cfg.FirmwareFailureRate > 1 || cfg.DropLinkRate < 0 || cfg.DropLinkRate > 1 {
		return errors.New("--firmware-failure-rate and --drop-link-rate must be from 0 to 1")
	}
	switch cfg.FirmwareFailure {
	case "":
		cfg.FirmwareFailure = simmount.FailRollback
	case simmount.FailRollback, simmount.FailSilent:
	default:
		return fmt.Errorf("--firmware-failure must be %s or %s", simmount.FailRollback, simmount.FailSilent)
	}
	var store simmount.Store
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return fmt.Errorf("--state-dir: %w", err)
		}
		store = simmount.DirStore{Dir: cfg.StateDir}
	} else {
		store = simmount.NewMemoryStore() // a restarted mount resumes from it
	}
	cfg.Concurrency = max(cfg.Concurrency, 1)
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	start := time.Now()
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}

	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	f := &fleet{cfg: cfg, log: log, kinds: map[string]int64{}, offline: newOffline(seed), store: store, seed: seed}
	credentials := cfg.API != "" && cfg.ClientID != ""
	if !credentials && cfg.Associate {
		return errors.New("--associate needs --api, --client-id and --client-secret")
	} else if !credentials {
		log.Warn("no credentials (--client-id, --client-secret): states are not reported")
	}
	if !credentials && cfg.Phones > 0 {
		return errors.New("--phones needs --api, --client-id and --client-secret")
	}
	if cfg.Riders > 0 && !cfg.Associate {
		return errors.New("--riders needs --associate (grants are for associated mounts)")
	}

	drain := cfg.BatteryDrain
	if drain == 0 {
		drain = -1 // simmount reads zero as its default
	}
	air := sim.NewAir(sim.Config{MTU: cfg.MTU, AdvertisingInterval: cfg.AdvInterval, ConnectionInterval: cfg.ConnInterval, MaxLinks: cfg.MaxLinks})
	var riderMounts []string
	for i := 1; i <= cfg.Mounts; i++ {
		uid, serial, mac := identity(cfg.Prefix, i)
		u := &unit{changed: make(chan struct{}, 1), legacy: i > cfg.Mounts-cfg.Legacy}
		failure := ""
		if failsAfterUpdate(cfg.Seed, uid, cfg.FirmwareFailureRate) {
			failure = cfg.FirmwareFailure
			f.failing++
		}
		mcfg := simmount.Config{
			FirmwareFailure: failure,
			UID:             uid, SerialNumber: serial, MACAddress: mac, ModelNumber: cfg.Model,
			FirmwareRevision: cfg.FirmwareRevision, SoftwareRevision: cfg.SoftwareRevision,
			Battery: 60 + float64(i%41), BatteryDrain: drain, Legacy: u.legacy, Store: store,
			OnChange: func(m *simmount.Mount) { f.onChange(ctx, u) },
			OnUse:    f.offline.used,
		}
		m, err := simmount.Open(mcfg)
		if err != nil {
			return err
		}
		u.cfg = mcfg
		u.m.Store(m)
		if err := air.Register(m); err != nil {
			return err
		}
		if cfg.Forge && !u.legacy && len(riderMounts) < maxRiderMounts {
			u.rider = true
			riderMounts = append(riderMounts, uid)
		}
		f.units = append(f.units, u)
	}
	if credentials {
		f.api = newAPIClient(cfg, riderMounts)
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var airAddr string
	if cfg.Air != "" {
		ln, err := sim.Listen(cfg.Air)
		if err != nil {
			return fmt.Errorf("air: %w", err)
		}
		airAddr = ln.Addr().String()
		if ln.Addr().Network() == "unix" {
			airAddr = "unix:" + airAddr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sim.Serve(ctx, air, ln); err != nil {
				log.Error("air stopped", "err", err)
			}
		}()
	}
	log.Info("fleet up", "mounts", cfg.Mounts, "legacy", cfg.Legacy, "first", f.units[0].mount().UID(), "last", f.units[len(f.units)-1].mount().UID(), "air", airAddr)

	if cfg.ResetOwners {
		for _, u := range f.units {
			if err := u.mount().ResetOwner(); err != nil {
				return fmt.Errorf("reset %s: %w", u.mount().UID(), err)
			}
		}
	}
	if cfg.Associate {
		f.associateAll(ctx)
	}
	if f.api != nil {
		for _, u := range f.units {
			wg.Add(1)
			go func() {
				defer wg.Done()
				f.reportLoop(ctx, u)
			}()
		}
	}
	if cfg.Phones > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f.runPhones(ctx, air); err != nil {
				log.Error("phones stopped", "err", err)
			}
		}()
	}
	ridersDone := make(chan struct{})
	if cfg.Riders > 0 {
		go func() {
			defer close(ridersDone)
			if err := f.runRiders(ctx, air, start); err != nil {
				log.Error("riders stopped", "err", err)
				f.fail("", "riders", err)
			}
		}()
	} else {
		close(ridersDone)
	}
	if ready != nil {
		ready <- airAddr
	}
	<-ctx.Done()
	<-ridersDone // the riders' drain and reconciliation, on a context of their own
	cancel()
	wg.Wait()

	sum := f.summary(time.Since(start))
	sum.Air = airAddr
	if cfg.Riders > 0 {
		sum.Offline = f.offline.summary(cfg.Riders, time.Now())
	}
	if cfg.JSON {
		return json.NewEncoder(stdout).Encode(sum)
	}
	fmt.Fprintf(stdout, "mounts %d, associated %d, reports %d (not associated on the server %d), entries accepted %d, duplicates %d, errors %d, commands accepted %d, refused %d, in %.1fs\n",
		sum.Mounts, sum.Associated, sum.Reports, sum.NotAssociated, sum.EntriesAccepted, sum.Duplicates, sum.Errors, sum.CommandsAccepted, sum.CommandsRefused, sum.Seconds)
	fmt.Fprintf(stdout, "  legacy mounts %d, signed reports %d, receipts uploaded %d (accepted %d), uploads retried %d\n", sum.Legacy, sum.SignedReports, sum.Receipts, sum.ReceiptsAccepted, sum.UploadsRetried)
	if cfg.Phones > 0 {
		fmt.Fprintf(stdout, "  phones %d: passes %d (synced %d, mount busy %d), job commands run %d: executed %d, refused %d, unanswered %d, skipped %d; left for later %d; uploads queued %d\n",
			cfg.Phones, sum.Passes, sum.PassesSynced, sum.PassesBusy, sum.JobCommands, sum.JobExecuted, sum.JobRefused, sum.JobUnanswered, sum.JobSkipped, sum.JobLeft, sum.PhoneUploadsQueued)
	}
	if cfg.Phones > 0 || cfg.FirmwareFailureRate > 0 {
		fmt.Fprintf(stdout, "  firmware: mounts failing after an update %d (%s), installs %d, links cut %d (then resumed %d, started over %d), no report on the new revision %d\n",
			sum.FirmwareFailing, cfg.FirmwareFailure, sum.FirmwareInstalled, sum.FirmwareLinksCut, sum.FirmwareResumed, sum.FirmwareRestarted, sum.FirmwareSilent)
	}
	if o := sum.Offline; o != nil {
		printOffline(stdout, o)
	}
	if cfg.Forge {
		fmt.Fprintf(stdout, "  forged reports %d, refused %d, accepted %d\n", sum.ForgedReports, sum.ForgedRefused, sum.ForgedAccepted)
	}
	kinds := make([]string, 0, len(sum.ErrorsByKind))
	for k := range sum.ErrorsByKind {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(stdout, "  errors %s: %d\n", k, sum.ErrorsByKind[k])
	}
	return nil
}

// onChange runs when a mount's lock or helmet changed: report it at once
// and, when the helmet left, bring it back later if asked to.
func (f *fleet) onChange(ctx context.Context, u *unit) {
	select {
	case u.changed <- struct{}{}:
	default:
	}
	if f.cfg.ReturnAfter > 0 && !u.mount().Status().HelmetMounted {
		time.AfterFunc(f.cfg.ReturnAfter, func() {
			if ctx.Err() == nil {
				u.mount().ReturnHelmet()
			}
		})
	}
}

// reportLoop reports a mount's states every interval (±20%), starting at a
// random point of the first interval so a fleet does not report in step,
// and at once after a change.
func (f *fleet) reportLoop(ctx context.Context, u *unit) {
	jitter := func() time.Duration {
		return time.Duration(float64(f.cfg.ReportInterval) * (0.8 + 0.4*rand.Float64()))
	}
	t := time.NewTimer(time.Duration(rand.Int64N(int64(f.cfg.ReportInterval))))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-u.changed:
		}
		f.report(ctx, u)
		t.Reset(jitter())
	}
}

// report sends the mount's states, only while it is associated: a mount
// learns that from the ASSOCIATE_OWNER it receives (from this simulator or
// a phone), and the API's 404 tells when the account no longer owns it.
// A report that meets no answer or a 502, 503 or 504 is kept and sent
// again (apiClient.keep) before the mount's next one.
func (f *fleet) report(ctx context.Context, u *unit) {
	key := u.mount().Status().OwnerKey
	switch {
	case key == nil:
		return // never associated: nobody to report to
	case u.refusedKey != nil && bytes.Equal(key, u.refusedKey) && time.Now().Before(u.retryAt):
		return // refused for this association; wait for a new one or the back-off
	}
	if u.mount().Silent() {
		return // failed silent after an update: it says nothing more
	}
	// The mount's states message, relayed unchanged: signed unless legacy.
	msg := u.mount().Report()
	body := protocol.SignedStates{States: msg.States, Counter: msg.Counter, SoftwareRevision: msg.SoftwareRevision, Signature: msg.Signature}
	var res struct {
		Accepted   int64 `json:"accepted"`
		Duplicates int64 `json:"duplicates"`
	}
	err := f.api.keep(ctx, f.api.maintainer, "POST", "/mounts/"+u.mount().UID()+"/states", body, &res, f.retry)
	if errors.Is(err, errNotSent) {
		return
	}
	f.reports.Add(1)
	if msg.Signature != "" {
		f.signed.Add(1)
	}
	if client.StatusOf(err) == http.StatusNotFound {
		// Not (or no longer) this account's mount: back off, doubling up to
		// 32 intervals, and start over when the mount is associated again.
		if !bytes.Equal(key, u.refusedKey) {
			u.refusedKey, u.backoff = key, f.cfg.ReportInterval
			f.log.Info("the API does not know the mount as this account's: reports paused", "uid", u.mount().UID())
		} else {
			u.backoff = min(2*u.backoff, 32*f.cfg.ReportInterval)
		}
		u.retryAt = time.Now().Add(u.backoff)
		f.notFound.Add(1)
		return
	}
	if err != nil {
		f.fail(u.mount().UID(), "report", err)
		return
	}
	u.refusedKey = nil
	f.accepted.Add(res.Accepted)
	f.duplicates.Add(res.Duplicates)
	if f.cfg.Forge && msg.Signature != "" {
		f.forge(ctx, u, body)
	}
}

// forge plays a phone that wants the server to believe something the
// mount did not say, right after the mount's genuine report went in: in
// turn an unsigned report with a rider token (only for the mounts the
// rider token names; 403 SIGNATURE_REQUIRED) and the mount's signed
// report altered (400 INVALID_SIGNATURE). Owner and maintainer tokens may
// report unsigned entries (stored unverified), so an unsigned forgery is
// only refused for a rider token.
func (f *fleet) forge(ctx context.Context, u *unit, genuine protocol.SignedStates) {
	forged := genuine
	forged.States = slices.Clone(genuine.States)
	// "Helmet back, locked" is the lie a rider would tell; when that is
	// the truth already, the battery is moved instead.
	lie := false
	for i, e := range forged.States {
		if (e.Code == string(protocol.StateMountLocked) || e.Code == string(protocol.StateHelmetMounted)) && e.Value != "1" {
			forged.States[i].Value, lie = "1", true
		}
	}
	if !lie {
		for i, e := range forged.States {
			if e.Code == string(protocol.StateBatteryLevel) {
				forged.States[i].Value = "100"
				if e.Value == "100" {
					forged.States[i].Value = "99"
				}
			}
		}
	}
	c, want := f.api.maintainer, "400 INVALID_SIGNATURE"
	if u.rider {
		c = f.api.rider
		if u.forged%2 == 0 {
			forged = protocol.SignedStates{States: forged.States}
			want = "403 SIGNATURE_REQUIRED"
		}
	}
	u.forged++
	err := f.api.call(ctx, c, "POST", "/mounts/"+u.mount().UID()+"/states", forged, nil)
	switch {
	case errors.Is(err, errNotSent):
		return
	case err == nil:
		f.forged.Add(1)
		f.forgedAccepted.Add(1)
		f.log.Error("a forged report was accepted", "uid", u.mount().UID(), "want", want, "signed", forged.Signature != "")
	case errorKind(err) == want:
		f.forged.Add(1)
		f.forgedRefused.Add(1)
	default:
		f.forged.Add(1)
		f.fail(u.mount().UID(), "forge", err)
	}
}

// fail counts an error by kind and logs the first of each kind at warn.
func (f *fleet) fail(uid, what string, err error) {
	f.errs.Add(1)
	kind := what + " " + errorKind(err)
	f.kindsMu.Lock()
	f.kinds[kind]++
	first := f.kinds[kind] == 1
	f.kindsMu.Unlock()
	lv := slog.LevelDebug
	if first {
		lv = slog.LevelWarn
	}
	f.log.Log(context.Background(), lv, what+" failed", "uid", uid, "err", err)
}

// associateRefused is a mount's refusal of its ASSOCIATE_OWNER (a mount
// that holds another server's owner key: "bad handover").
type associateRefused struct{ reason string }

func (e *associateRefused) Error() string { return "the mount refused ASSOCIATE_OWNER: " + e.reason }

// associateAll associates and confirms every mount with an owner token,
// giving each mount its ASSOCIATE_OWNER straight away (no phone needed).
func (f *fleet) associateAll(ctx context.Context) {
	var wg sync.WaitGroup
	next := make(chan *unit)
	for range f.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for u := range next {
				if err := f.associate(ctx, u.mount()); errors.Is(err, errNotSent) {
					continue
				} else if err != nil {
					f.fail(u.mount().UID(), "associate", err)
				} else {
					f.associated.Add(1)
				}
			}
		}()
	}
	for _, u := range f.units {
		select {
		case next <- u:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	f.log.Info("association done", "associated", f.associated.Load(), "of", len(f.units))
}

func (f *fleet) associate(ctx context.Context, m *simmount.Mount) error {
	info := m.BLEInfo()
	body := map[string]string{
		"uid": info.UID, "serialNumber": info.SerialNumber, "macAddress": info.MACAddress,
		"firmwareRevision": info.FirmwareRevision, "softwareRevision": info.SoftwareRevision, "modelNumber": info.ModelNumber,
	}
	if info.DevicePublicKey != "" { // the mount's own key, pinned to this association
		body["devicePublicKey"] = info.DevicePublicKey
	}
	var cmds []json.RawMessage
	if err := f.api.call(ctx, f.api.owner, "POST", "/mounts", body, &cmds); err != nil {
		return err
	}
	var receipts []protocol.UploadReceipt
	delivered := false
	for _, raw := range cmds {
		var c protocol.BLECommand
		if json.Unmarshal(raw, &c) != nil || c.Code != string(protocol.CmdAssociateOwner) {
			continue
		}
		res := m.Handle(raw)
		if !res.Accepted {
			return &associateRefused{reason: res.Reason}
		}
		receipts = append(receipts, receiptOf(res)...)
		delivered = true
	}
	if !delivered {
		return errors.New("no ASSOCIATE_OWNER in the answer")
	}
	if err := f.api.call(ctx, f.api.owner, "POST", "/mounts/"+m.UID()+"/confirm-association", nil, nil); err != nil {
		return err
	}
	f.uploadReceipts(ctx, m.UID(), receipts)
	return nil
}

// receiptOf is the receipt a result message carries: none when the mount
// did not sign it (older firmware, a refusal before the signature check).
func receiptOf(res protocol.BLEMessage) []protocol.UploadReceipt {
	if res.Signature == "" || res.Counter == nil {
		return nil
	}
	return []protocol.UploadReceipt{{Nonce: res.Nonce, Outcome: res.Outcome, Reason: res.Reason, Counter: *res.Counter, At: res.At, Signature: res.Signature}}
}

// retry counts an upload's attempt after a transient failure.
func (f *fleet) retry() { f.retried.Add(1) }

// uploadReceipts hands the mount's receipts to the API, with the token
// that reports its states, kept through transient failures as reports
// are. A failure counts as an error ("receipt ..."); the association
// stands.
func (f *fleet) uploadReceipts(ctx context.Context, uid string, receipts []protocol.UploadReceipt) {
	if len(receipts) == 0 {
		return
	}
	var res struct {
		Accepted   int64 `json:"accepted"`
		Duplicates int64 `json:"duplicates"`
	}
	err := f.api.keep(ctx, f.api.maintainer, "POST", "/mounts/"+uid+"/commands/receipts", map[string]any{"receipts": receipts}, &res, f.retry)
	if errors.Is(err, errNotSent) {
		return
	}
	f.receipts.Add(int64(len(receipts)))
	if err != nil {
		f.fail(uid, "receipt", err)
		return
	}
	f.receiptsAccepted.Add(res.Accepted)
}

func (f *fleet) summary(d time.Duration) Summary {
	s := Summary{
		Mounts: len(f.units), Reports: f.reports.Load(), NotAssociated: f.notFound.Load(),
		EntriesAccepted: f.accepted.Load(), Duplicates: f.duplicates.Load(), Errors: f.errs.Load(),
		Legacy: f.cfg.Legacy, SignedReports: f.signed.Load(), Receipts: f.receipts.Load(), ReceiptsAccepted: f.receiptsAccepted.Load(),
		UploadsRetried: f.retried.Load(),
		ForgedReports:  f.forged.Load(), ForgedRefused: f.forgedRefused.Load(), ForgedAccepted: f.forgedAccepted.Load(),
		Passes: f.phones.passes.Load(), PassesSynced: f.phones.synced.Load(), PassesBusy: f.phones.busy.Load(),
		JobCommands: f.phones.commands.Load(), JobExecuted: f.phones.executed.Load(), JobRefused: f.phones.refused.Load(),
		JobUnanswered: f.phones.unanswered.Load(), JobSkipped: f.phones.skipped.Load(), JobLeft: f.phones.left.Load(),
		PhoneUploadsQueued: f.phones.queue.Load(),
		FirmwareFailing:    f.failing, FirmwareInstalled: f.phones.installed.Load(),
		FirmwareLinksCut: f.phones.cut.Load(), FirmwareSilent: f.phones.silent.Load(),
		FirmwareResumed: f.phones.resumes.resumed.Load(), FirmwareRestarted: f.phones.resumes.restarted.Load(),
		Seconds: d.Seconds(),
	}
	f.kindsMu.Lock()
	if len(f.kinds) > 0 {
		s.ErrorsByKind = make(map[string]int64, len(f.kinds))
		for k, v := range f.kinds {
			s.ErrorsByKind[strings.TrimSpace(k)] = v
		}
	}
	f.kindsMu.Unlock()
	for _, u := range f.units {
		st := u.mount().Status()
		if st.OwnerKey != nil { // associated by this simulator or by a phone
			s.Associated++
		}
		s.CommandsAccepted += st.Accepted
		s.CommandsRefused += st.Refused
	}
	return s
}
