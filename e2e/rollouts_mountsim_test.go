package e2e

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
)

// Rollouts end to end (docs/api.md, "Rollouts"): mountd serving on both
// backends, the real mountsim with phones passing the mounts and
// installing what pending-commands offers them with the SDK's Sync, and
// the rollout's gates watched through REST only.

// simRolloutView is a Rollout as REST shows it.
type simRolloutView struct {
	ID               string  `json:"id"`
	ModelNumber      string  `json:"modelNumber"`
	SoftwareRevision string  `json:"softwareRevision"`
	State            string  `json:"state"`
	PausedReason     *string `json:"pausedReason"`
	Phases           []int   `json:"phases"`
	OpenPhase        int     `json:"openPhase"`
	Targets          int     `json:"targets"`
	Counts           struct {
		Pending    int `json:"pending"`
		Eligible   int `json:"eligible"`
		Installing int `json:"installing"`
		Healthy    int `json:"healthy"`
		Failed     int `json:"failed"`
	} `json:"counts"`
	CreatedAt string  `json:"createdAt"`
	EndedAt   *string `json:"endedAt"`
}

// simTargetView is a rollout's target as REST shows it.
type simTargetView struct {
	UID             string  `json:"uid"`
	State           string  `json:"state"`
	Phase           int     `json:"phase"`
	CommandID       *string `json:"commandId"`
	InstallingSince *string `json:"installingSince"`
	Reason          *string `json:"reason"`
}

// simRolloutEvent is an account-level rollout event in GET /events.
type simRolloutEvent struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	OccurredAt string          `json:"occurredAt"`
	UID        *string         `json:"uid"`
	Rollout    *simRolloutView `json:"rollout"`
}

// simCommand is a command in GET /mounts/{uid}/commands.
type simCommand struct {
	ID          string         `json:"id"`
	Code        string         `json:"code"`
	Data        map[string]any `json:"data"`
	GeneratedAt string         `json:"generatedAt"`
	Status      string         `json:"status"`
	RolloutID   string         `json:"rolloutId"`
}

// rolloutSimSummary is the part of mountsim's summary these tests read.
type rolloutSimSummary struct {
	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errorsByKind"`
	Passes       int64            `json:"passes"`
	Installed    int64            `json:"firmwareInstalled"`
	LinksCut     int64            `json:"firmwareLinksCut"`
	Resumed      int64            `json:"firmwareResumed"`
	StartedOver  int64            `json:"firmwareStartedOver"`
	Raw          json.RawMessage  `json:"-"`
	Log          string           `json:"-"` // mountsim's warnings
}

// rolloutRig is one backend's mountd, an account, the firmware catalogue
// (FROM, the mounts' revision, and TO, the rollout's) and a mountsim
// fleet's state directory, so that mountsim can be restarted on the same
// mounts.
type rolloutRig struct {
	t        *testing.T
	in       *instance
	a        fleet
	bin      string
	model    string
	from, to string
	prefix   string
	mounts   int
	stateDir string
}

const (
	rolloutFrom = "1.0.0"
	rolloutTo   = "2.0.0"
)

func newRolloutRig(t *testing.T, cfg app.Config, mounts int) *rolloutRig {
	t.Helper()
	bin := mountsimBinary(t)
	in := start(t, cfg)
	r := &rolloutRig{t: t, in: in, a: newFleet(in, "Rollouts e2e"), bin: bin, model: "HM-R", from: rolloutFrom, to: rolloutTo,
		prefix: "RO", mounts: mounts, stateDir: t.TempDir()}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	in.publish(t, r.model, r.from, 2048, "--available-since", past)
	in.publish(t, r.model, r.to, 6000, "--available-since", past)
	return r
}

// rolloutSim is one run of mountsim over the rig's fleet.
type rolloutSim struct {
	t         *testing.T
	cmd       *exec.Cmd
	out, errs bytes.Buffer
	stopped   bool
}

// sim starts mountsim over the rig's fleet, each mount reporting every
// 2 s, with 2 phones passing a mount every 100 ms each, and extra flags
// (--associate the first time, the failure flags).
func (r *rolloutRig) sim(extra ...string) *rolloutSim {
	t := r.t
	t.Helper()
	args := append([]string{"--mounts", strconv.Itoa(r.mounts), "--prefix", r.prefix, "--model", r.model,
		"--software-revision", r.from, "--air", "", "--api", r.in.base, "--state-dir", r.stateDir,
		"--report-interval", "2s", "--battery-drain", "0", "--phones", "2", "--pass-every", "100ms",
		"--json", "--log-level", "warn"}, extra...)
	s := &rolloutSim{t: t, cmd: exec.Command(r.bin, args...)}
	s.cmd.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+r.a.creds.ClientID, "MOUNTSIM_CLIENT_SECRET="+r.a.creds.ClientSecret)
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !s.stopped {
			_ = s.cmd.Process.Kill()
			_ = s.cmd.Wait()
		}
	})
	return s
}

// stop ends mountsim and reads its summary.
func (s *rolloutSim) stop() rolloutSimSummary {
	s.t.Helper()
	s.stopped = true
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	var sum rolloutSimSummary
	if err := json.Unmarshal(s.out.Bytes(), &sum); err != nil {
		s.t.Fatalf("mountsim summary %q: %v\n%s", s.out.String(), err, s.errs.String())
	}
	sum.Raw, sum.Log = bytes.TrimSpace(s.out.Bytes()), s.errs.String()
	return sum
}

// waitReporting waits until every mount of the fleet is ASSOCIATED and
// reported its battery (so the rollout's targets and requireIdle see
// them).
func (r *rolloutRig) waitReporting() {
	r.t.Helper()
	f := fmt.Sprintf(`modelNumber = "%s" AND batteryLevel > 0`, r.model)
	waitForStep(r.t, "the fleet reporting", func() bool {
		res, raw := r.a.call(http.MethodGet, "/api/v1/mounts?pageSize=100&filter="+url.QueryEscape(f), nil)
		if res.StatusCode != http.StatusOK {
			r.t.Fatalf("mounts?filter: %d %s", res.StatusCode, raw)
		}
		return decode[struct {
			Pagination struct {
				TotalItems int `json:"totalItems"`
			} `json:"pagination"`
		}](r.t, raw).Pagination.TotalItems == r.mounts
	})
}

func (r *rolloutRig) create(body map[string]any) simRolloutView {
	r.t.Helper()
	body["modelNumber"], body["softwareRevision"] = r.model, r.to
	res, raw := r.a.call(http.MethodPost, "/api/v1/rollouts", body)
	if res.StatusCode != http.StatusCreated {
		r.t.Fatalf("create rollout %v: %d %s", body, res.StatusCode, raw)
	}
	ro := decode[simRolloutView](r.t, raw)
	if ro.State != "RUNNING" || ro.Targets != r.mounts {
		r.t.Fatalf("created rollout %s", raw)
	}
	return ro
}

func (r *rolloutRig) rollout(id string) simRolloutView {
	r.t.Helper()
	return decode[simRolloutView](r.t, r.a.ok(r.t, http.MethodGet, "/api/v1/rollouts/"+id, nil))
}

// waitRollout polls the rollout until cond holds (for up to a minute).
func (r *rolloutRig) waitRollout(id, what string, cond func(simRolloutView) bool) simRolloutView {
	r.t.Helper()
	var ro simRolloutView
	waitForStep(r.t, what, func() bool {
		ro = r.rollout(id)
		return cond(ro)
	})
	return ro
}

func (r *rolloutRig) action(id, action string) simRolloutView {
	r.t.Helper()
	return decode[simRolloutView](r.t, r.a.ok(r.t, http.MethodPost, "/api/v1/rollouts/"+id+"/"+action, nil))
}

// targets lists the rollout's targets by uid.
func (r *rolloutRig) targets(id string) map[string]simTargetView {
	r.t.Helper()
	out := map[string]simTargetView{}
	for page := 1; ; page++ {
		raw := r.a.ok(r.t, http.MethodGet, fmt.Sprintf("/api/v1/rollouts/%s/mounts?pageSize=100&currentPage=%d", id, page), nil)
		p := decode[struct {
			Mounts     []simTargetView `json:"mounts"`
			Pagination struct {
				TotalPages int `json:"totalPages"`
			} `json:"pagination"`
		}](r.t, raw)
		for _, m := range p.Mounts {
			out[m.UID] = m
		}
		if page >= p.Pagination.TotalPages {
			return out
		}
	}
}

// events lists the rollout's events, oldest first.
func (r *rolloutRig) events(id string) []simRolloutEvent {
	r.t.Helper()
	var out []simRolloutEvent
	q := url.Values{"limit": {"1000"}, "types": {"ROLLOUT_PHASE_OPENED,ROLLOUT_PAUSED,ROLLOUT_COMPLETED"}}
	for {
		page := decode[struct {
			Events []simRolloutEvent `json:"events"`
			Next   string            `json:"next"`
		}](r.t, r.a.ok(r.t, http.MethodGet, "/api/v1/events?"+q.Encode(), nil))
		for _, e := range page.Events {
			if e.Rollout == nil || e.UID != nil {
				r.t.Fatalf("rollout event without its rollout or with a uid: %+v", e)
			}
			if e.Rollout.ID == id {
				out = append(out, e)
			}
		}
		if len(page.Events) == 0 || page.Next == "" {
			return out
		}
		q.Set("after", page.Next)
	}
}

// eventsEnding polls the rollout's events until the last one is last:
// on PostgreSQL an event shows in the log only once every older
// transaction of the cluster ended, so it may follow the state it tells.
func (r *rolloutRig) eventsEnding(id, last string) []simRolloutEvent {
	r.t.Helper()
	var events []simRolloutEvent
	waitForStep(r.t, "the rollout's events up to "+last, func() bool {
		events = r.events(id)
		got := eventTypeList(events)
		return len(got) > 0 && got[len(got)-1] == last
	})
	return events
}

// installs lists the INSTALL_FIRMWARE commands ever signed for uid.
func (r *rolloutRig) installs(uid string) []simCommand {
	r.t.Helper()
	var out []simCommand
	for page := 1; ; page++ {
		raw := r.a.ok(r.t, http.MethodGet, fmt.Sprintf("/api/v1/mounts/%s/commands?pageSize=100&currentPage=%d", uid, page), nil)
		p := decode[struct {
			Commands   []simCommand `json:"commands"`
			Pagination struct {
				TotalPages int `json:"totalPages"`
			} `json:"pagination"`
		}](r.t, raw)
		for _, c := range p.Commands {
			if c.Code == "INSTALL_FIRMWARE" {
				out = append(out, c)
			}
		}
		if page >= p.Pagination.TotalPages {
			return out
		}
	}
}

// phaseOpened maps each phase index to the time its ROLLOUT_PHASE_OPENED
// says it opened.
func phaseOpened(t *testing.T, events []simRolloutEvent) map[int]time.Time {
	t.Helper()
	out := map[int]time.Time{}
	for _, e := range events {
		if e.Type != "ROLLOUT_PHASE_OPENED" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, e.OccurredAt)
		if err != nil {
			t.Fatalf("event time %q: %v", e.OccurredAt, err)
		}
		if _, dup := out[e.Rollout.OpenPhase]; dup {
			t.Fatalf("phase %d opened twice: %+v", e.Rollout.OpenPhase, events)
		}
		out[e.Rollout.OpenPhase] = at
	}
	return out
}

// checkOffers asserts that no mount was offered the install before its
// phase opened: a target of a phase that never opened has no
// INSTALL_FIRMWARE at all, and every INSTALL_FIRMWARE of the others was
// signed at or after its phase's ROLLOUT_PHASE_OPENED. It returns how
// many commands each uid got.
func (r *rolloutRig) checkOffers(id string, targets map[string]simTargetView, opened map[int]time.Time) map[string]int {
	r.t.Helper()
	out := map[string]int{}
	for uid, tg := range targets {
		cmds := r.installs(uid)
		out[uid] = len(cmds)
		at, open := opened[tg.Phase]
		if !open && len(cmds) > 0 {
			r.t.Errorf("%s (phase %d, never opened) was offered the install %d times", uid, tg.Phase, len(cmds))
			continue
		}
		for _, c := range cmds {
			gen, err := time.Parse(time.RFC3339Nano, c.GeneratedAt)
			if err != nil {
				r.t.Fatalf("generatedAt %q: %v", c.GeneratedAt, err)
			}
			if gen.Before(at.Add(-time.Millisecond)) {
				r.t.Errorf("%s (phase %d, opened %s) was offered the install at %s", uid, tg.Phase, at, gen)
			}
			if c.Data["revision"] != r.to {
				r.t.Errorf("%s: INSTALL_FIRMWARE %v", uid, c.Data)
			}
		}
	}
	return out
}

// checkHealthy asserts that every HEALTHY target proved the update: the
// mount is on the new revision (only a verified report sets it) and it
// has a verified state entry received after its install began.
func (r *rolloutRig) checkHealthy(targets map[string]simTargetView) {
	r.t.Helper()
	for uid, tg := range targets {
		if tg.State != "HEALTHY" {
			continue
		}
		m := decode[[]mountView](r.t, r.a.ok(r.t, http.MethodGet, "/api/v1/mounts/"+uid, nil))
		if len(m) != 1 || m[0].SoftwareRevision != r.to {
			r.t.Errorf("HEALTHY %s: %+v", uid, m)
		}
		if tg.InstallingSince == nil {
			r.t.Errorf("HEALTHY %s never installed: %+v", uid, tg)
			continue
		}
		q := url.Values{"from": {*tg.InstallingSince}, "pageSize": {"100"}}
		states := decode[struct {
			States []struct {
				Verified bool `json:"verified"`
			} `json:"states"`
		}](r.t, r.a.ok(r.t, http.MethodGet, "/api/v1/mounts/"+uid+"/states?"+q.Encode(), nil)).States
		if !slices.ContainsFunc(states, func(s struct {
			Verified bool `json:"verified"`
		}) bool {
			return s.Verified
		}) {
			r.t.Errorf("HEALTHY %s has no verified state since its install (%s)", uid, *tg.InstallingSince)
		}
	}
}

func eventTypeList(events []simRolloutEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s(%d)", e.Type, e.Rollout.OpenPhase)
	}
	return out
}

// TestRolloutOverMountsimClean: a rollout with failures nowhere opens its
// three phases one after the other and completes; every mount installed
// it, proved it with a verified report and is on the new revision. Phones
// lose their link to the mount midway through half of the transfers
// (mountsim --drop-link-rate): the SDK reconnects and the transfer goes on
// from the offset the mount holds, never from 0.
func TestRolloutOverMountsimClean(t *testing.T) {
	t.Parallel()
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRolloutRig(t, mk(t), 20)
			sim := r.sim("--associate", "--seed", "19", "--drop-link-rate", "0.5")
			r.waitReporting()
			ro := r.create(map[string]any{"phases": []int{10, 50, 100}, "failureThreshold": 5, "minSample": 2,
				"healthWindow": "5s", "requireIdle": true})
			ro = r.waitRollout(ro.ID, "the rollout COMPLETED", func(ro simRolloutView) bool {
				if ro.State != "RUNNING" && ro.State != "COMPLETED" {
					t.Fatalf("rollout %+v", ro)
				}
				return ro.State == "COMPLETED"
			})
			if ro.Counts.Healthy != r.mounts || ro.Counts.Failed+ro.Counts.Pending+ro.Counts.Eligible+ro.Counts.Installing != 0 ||
				ro.OpenPhase != 2 || ro.EndedAt == nil {
				t.Fatalf("completed rollout %+v", ro)
			}
			events := r.eventsEnding(ro.ID, "ROLLOUT_COMPLETED(2)")
			want := []string{"ROLLOUT_PHASE_OPENED(0)", "ROLLOUT_PHASE_OPENED(1)", "ROLLOUT_PHASE_OPENED(2)", "ROLLOUT_COMPLETED(2)"}
			if got := eventTypeList(events); !slices.Equal(got, want) {
				t.Fatalf("events %v, want %v", got, want)
			}
			targets := r.targets(ro.ID)
			if len(targets) != r.mounts {
				t.Fatalf("%d targets", len(targets))
			}
			for uid, tg := range targets {
				if tg.State != "HEALTHY" || tg.CommandID == nil {
					t.Errorf("target %s %+v", uid, tg)
				}
			}
			r.checkOffers(ro.ID, targets, phaseOpened(t, events))
			r.checkHealthy(targets)
			sum := sim.stop()
			if sum.Errors != 0 {
				t.Fatalf("mountsim: %s\n%s", sum.Raw, sum.Log)
			}
			if sum.LinksCut == 0 || sum.Resumed == 0 || sum.StartedOver != 0 || sum.Installed < int64(r.mounts) {
				t.Fatalf("mountsim: links cut %d, transfers resumed %d, started over %d, installs %d\n%s\n%s",
					sum.LinksCut, sum.Resumed, sum.StartedOver, sum.Installed, sum.Raw, sum.Log)
			}
			t.Logf("links cut %d, transfers resumed from their offset %d, installs %d", sum.LinksCut, sum.Resumed, sum.Installed)
		})
	}
}

// TestRolloutOverMountsimBadThenResumed: half of the mounts fail after
// the install (rolling back, or going silent); the rollout pauses itself
// before its last phase opens, offers nothing while paused, and no mount
// of an unopened phase was ever offered the install. Then the failures
// stop (mountsim restarted on the same mounts without them), a person
// resumes it, and it opens its next phases and completes.
func TestRolloutOverMountsimBadThenResumed(t *testing.T) {
	t.Parallel()
	// Each backend with one way of failing (the way is the simulated
	// mount's; the gates are the store's): both backends, both ways, in
	// the time of two runs.
	modes := map[string]string{"embedded": "rollback", "postgres+redis": "silent"}
	for name, mk := range backends(t) {
		mode := modes[name]
		t.Run(name+"/"+mode, func(t *testing.T) {
			t.Parallel()
			r := newRolloutRig(t, mk(t), 30)
			sim := r.sim("--associate", "--seed", "20", "--firmware-failure-rate", "0.5", "--firmware-failure", mode)
			r.waitReporting()
			ro := r.create(map[string]any{"phases": []int{10, 50, 100}, "failureThreshold": 20, "minSample": 3,
				"healthWindow": "5s", "requireIdle": false})
			ro = r.waitRollout(ro.ID, "the rollout PAUSED", func(ro simRolloutView) bool {
				if ro.State != "RUNNING" && ro.State != "PAUSED" {
					t.Fatalf("rollout %+v", ro)
				}
				return ro.State == "PAUSED"
			})
			if ro.PausedReason == nil || *ro.PausedReason != "FAILURE_THRESHOLD" || ro.OpenPhase >= len(ro.Phases)-1 || ro.Counts.Failed == 0 {
				t.Fatalf("paused rollout %+v", ro)
			}
			paused := ro
			// While paused, nothing is offered to any target, whatever
			// its state.
			for uid, tg := range r.targets(ro.ID) {
				for _, c := range r.in.pending(t, r.a.token, uid) {
					if c.Code == "INSTALL_FIRMWARE" {
						t.Fatalf("paused rollout offered %s (%s) the install", uid, tg.State)
					}
				}
			}
			// The installs under way are decided at their window's end,
			// paused or not; then the failures stop.
			ro = r.waitRollout(ro.ID, "no target INSTALLING", func(ro simRolloutView) bool { return ro.Counts.Installing == 0 })
			if ro.State != "PAUSED" || ro.OpenPhase != paused.OpenPhase {
				t.Fatalf("paused rollout moved: %+v", ro)
			}
			events := r.eventsEnding(ro.ID, fmt.Sprintf("ROLLOUT_PAUSED(%d)", ro.OpenPhase))
			if got := eventTypeList(events); len(got) != ro.OpenPhase+2 {
				t.Fatalf("events before the resume: %v", got)
			}
			targets := r.targets(ro.ID)
			r.checkOffers(ro.ID, targets, phaseOpened(t, events))
			r.checkHealthy(targets)
			failedAtPause := ro.Counts.Failed
			if sum := sim.stop(); sum.Errors != 0 {
				t.Fatalf("mountsim: %s\n%s", sum.Raw, sum.Log)
			}
			sim = r.sim("--seed", "21")

			if ro = r.action(ro.ID, "resume"); ro.State != "RUNNING" || ro.PausedReason != nil {
				t.Fatalf("resumed rollout %+v", ro)
			}
			ro = r.waitRollout(ro.ID, "the resumed rollout COMPLETED", func(ro simRolloutView) bool {
				if ro.State != "RUNNING" && ro.State != "COMPLETED" {
					t.Fatalf("rollout %+v", ro)
				}
				return ro.State == "COMPLETED"
			})
			if ro.Counts.Failed != failedAtPause || ro.Counts.Healthy+ro.Counts.Failed != r.mounts || ro.OpenPhase != 2 {
				t.Fatalf("completed rollout %+v (failed at the pause: %d)", ro, failedAtPause)
			}
			events = r.eventsEnding(ro.ID, "ROLLOUT_COMPLETED(2)")
			if got := eventTypeList(events); !slices.Contains(got, "ROLLOUT_PHASE_OPENED(2)") {
				t.Fatalf("events %v", eventTypeList(events))
			}
			targets = r.targets(ro.ID)
			for uid, tg := range targets {
				if tg.State == "FAILED" && (tg.Reason == nil || *tg.Reason == "") {
					t.Errorf("FAILED %s without a reason", uid)
				}
				want := map[string]string{"rollback": "rollback", "silent": "no report on the new revision"}[mode]
				if tg.State == "FAILED" && tg.Reason != nil && *tg.Reason != want {
					t.Errorf("FAILED %s: %q, want %q", uid, *tg.Reason, want)
				}
			}
			r.checkOffers(ro.ID, targets, phaseOpened(t, events))
			r.checkHealthy(targets)
			if sum := sim.stop(); sum.Errors != 0 {
				t.Fatalf("mountsim after the restart: %s\n%s", sum.Raw, sum.Log)
			}
		})
	}
}

// TestRolloutThroughFaults: while a rollout's first phase installs, Redis
// is killed (and started again two seconds later) and PostgreSQL
// terminates every connection of the service three times. The rollout
// still completes: each phase opened once, one ROLLOUT_COMPLETED, every
// target HEALTHY on a verified report (its decisions are transactions
// the sweep retries; its events go through the log, not Redis).
func TestRolloutThroughFaults(t *testing.T) {
	t.Parallel()
	redisAddr := freeAddr(t)
	redis := startRedis(t, redisAddr)
	dbURL := testenv.PostgresURL(t)
	cfg := testConfig(t.TempDir(), dbURL)
	cfg.RedisURL = "redis://" + redisAddr + "/0"
	r := newRolloutRig(t, cfg, 10)
	sim := r.sim("--associate", "--seed", "23")
	r.waitReporting()
	ro := r.create(map[string]any{"phases": []int{50, 100}, "failureThreshold": 50, "minSample": 1,
		"healthWindow": "3s", "requireIdle": false})
	r.waitRollout(ro.ID, "a first install under way", func(ro simRolloutView) bool { return ro.Counts.Installing+ro.Counts.Healthy > 0 })

	redis.kill()
	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(os.Getenv("MOUNTD_TEST_DATABASE_URL"))))
	defer admin.Close()
	dbName := dbURL[strings.LastIndex(dbURL, "/")+1:]
	for range 3 {
		if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, dbName); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(time.Second)
	startRedis(t, redisAddr)

	ro = r.waitRollout(ro.ID, "the rollout COMPLETED after the faults", func(ro simRolloutView) bool {
		if ro.State != "RUNNING" && ro.State != "COMPLETED" {
			t.Fatalf("rollout %+v", ro)
		}
		return ro.State == "COMPLETED"
	})
	if ro.Counts.Healthy != r.mounts || ro.OpenPhase != 1 {
		t.Fatalf("completed rollout %+v", ro)
	}
	events := r.eventsEnding(ro.ID, "ROLLOUT_COMPLETED(1)")
	want := []string{"ROLLOUT_PHASE_OPENED(0)", "ROLLOUT_PHASE_OPENED(1)", "ROLLOUT_COMPLETED(1)"}
	if got := eventTypeList(events); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	targets := r.targets(ro.ID)
	r.checkOffers(ro.ID, targets, phaseOpened(t, events))
	r.checkHealthy(targets)
	// The phones saw the faults (503s they retried); what counts is above.
	sum := sim.stop()
	t.Logf("mountsim errors during the faults: %v", sum.ErrorsByKind)
}
