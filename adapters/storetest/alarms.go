package storetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// alarmClock is a clock moved by hand.
type alarmClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *alarmClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *alarmClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type idleScheduler struct{}

func (idleScheduler) Schedule(context.Context, string, time.Time) error { return nil }
func (idleScheduler) Cancel(context.Context, string) error              { return nil }
func (idleScheduler) Run(ctx context.Context, _ func(context.Context, string)) error {
	<-ctx.Done()
	return nil
}

// alarmWorld is one replica's services over store with a shared clock.
type alarmWorld struct {
	store  Store
	mounts *core.MountService
	alarms *core.AlarmService
	clock  *alarmClock
}

const testOfflineAfter = 15 * time.Minute

func newAlarmWorld(t *testing.T, store Store, clock *alarmClock) *alarmWorld {
	t.Helper()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	mounts := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: idleScheduler{},
		Waker: memory.NewWaker(), Window: core.AssociationWindow(10 * time.Minute), Logger: logger})
	mounts.SetClock(clock.Now)
	alarms := core.NewAlarmService(core.AlarmDeps{Store: store, Mounts: mounts, Waker: memory.NewWaker(), Logger: logger,
		OfflineAfter: core.OfflineAfter(testOfflineAfter)})
	alarms.SetClock(clock.Now)
	return &alarmWorld{store: store, mounts: mounts, alarms: alarms, clock: clock}
}

func ownerPrincipal(t *testing.T, store Store, name string) core.Principal {
	t.Helper()
	acc, err := core.NewAccountService(store, nil).Create(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
		Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
}

func (w *alarmWorld) associate(t *testing.T, p core.Principal, uid string) {
	t.Helper()
	ctx := context.Background()
	if _, err := w.mounts.RequestAssociation(ctx, p, uid, core.MountFields{}); err != nil {
		t.Fatalf("request %s: %v", uid, err)
	}
	if _, err := w.mounts.ConfirmAssociation(ctx, p, uid); err != nil {
		t.Fatalf("confirm %s: %v", uid, err)
	}
}

func (w *alarmWorld) report(t *testing.T, p core.Principal, uid string, at time.Time, kv ...string) {
	t.Helper()
	var in []core.StateInput
	for i := 0; i+1 < len(kv); i += 2 {
		in = append(in, core.StateInput{Code: kv[i], Value: kv[i+1], OccurredAt: at, HasOccurredAt: true})
	}
	if _, err := w.mounts.ReportStates(context.Background(), p, uid, in, nil); err != nil {
		t.Fatalf("report %s %v: %v", uid, kv, err)
	}
}

func countEvents(t *testing.T, store Store, typ core.EventType, uid string) int {
	t.Helper()
	events, _, err := store.ReadEvents(context.Background(), core.EventQuery{Types: []core.EventType{typ}, Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if uid == "" || e.UID == uid {
			n++
		}
	}
	return n
}

// countEventsWhen is countEvents once want of them are there, or what is
// there after untilSettled's wait.
func countEventsWhen(t *testing.T, store Store, typ core.EventType, uid string, want int) int {
	t.Helper()
	var n int
	untilSettled(func() bool { n = countEvents(t, store, typ, uid); return n >= want })
	return n
}

func strp[T any](v T) *T { return &v }

// alarmRules: CRUD, validation and ownership of rules, as stored.
func alarmRules(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w := newAlarmWorld(t, store, clock)
	a, b := ownerPrincipal(t, store, "A"), ownerPrincipal(t, store, "B")
	conds := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20.0"}}
	r, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("WARNING"), Conditions: &conds})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Enabled || r.Conditions[0].Value != "20" || r.MountUIDs == nil || !r.CreatedAt.Equal(clock.Now()) {
		t.Fatalf("created %+v", r)
	}
	got, err := w.alarms.Rule(ctx, a, r.ID)
	if err != nil || got.Name != "low" || got.Revision != r.Revision || !slices.Equal(got.Conditions, r.Conditions) {
		t.Fatalf("Rule = %+v, %v", got, err)
	}
	if _, err := w.alarms.Rule(ctx, b, r.ID); core.ErrorCode(err) != core.CodeAlarmRuleNotFound {
		t.Fatalf("another account's rule: %v", err)
	}
	if _, err := w.alarms.UpdateRule(ctx, b, r.ID, core.AlarmRuleInput{Name: strp("x")}); core.ErrorCode(err) != core.CodeAlarmRuleNotFound {
		t.Fatalf("another account's update: %v", err)
	}
	if err := w.alarms.DeleteRule(ctx, b, r.ID); core.ErrorCode(err) != core.CodeAlarmRuleNotFound {
		t.Fatalf("another account's delete: %v", err)
	}
	up, err := w.alarms.UpdateRule(ctx, a, r.ID, core.AlarmRuleInput{Name: strp("renamed"), Enabled: strp(false)})
	if err != nil || up.Name != "renamed" || up.Enabled || up.Revision != r.Revision+1 {
		t.Fatalf("UpdateRule = %+v, %v", up, err)
	}
	rules, pg, err := w.alarms.ListRules(ctx, a, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(rules) != 1 || pg.TotalItems != 1 || rules[0].Name != "renamed" || rules[0].Enabled {
		t.Fatalf("ListRules = %+v %+v %v", rules, pg, err)
	}
	if rules, _, _ := w.alarms.ListRules(ctx, b, core.Page{CurrentPage: 1, PageSize: 10}); len(rules) != 0 {
		t.Fatalf("B sees %+v", rules)
	}
	// At most 50 per account.
	for i := 1; i < core.MaxAlarmRulesPerAccount; i++ {
		if _, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp(fmt.Sprint("r", i)), Severity: strp("INFO"), Conditions: &conds}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("one too many"), Severity: strp("INFO"), Conditions: &conds}); core.ErrorCode(err) != core.CodeValidation {
		t.Fatalf("51st rule: %v", err)
	}
	if err := w.alarms.DeleteRule(ctx, a, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.alarms.Rule(ctx, a, r.ID); core.ErrorCode(err) != core.CodeAlarmRuleNotFound {
		t.Fatalf("deleted rule: %v", err)
	}
	entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: a.AccountID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	actions := map[core.AuditAction]int{}
	for _, e := range entries {
		actions[e.Action]++
	}
	if actions[core.AuditAlarmRuleCreate] != core.MaxAlarmRulesPerAccount || actions[core.AuditAlarmRuleUpdate] != 1 || actions[core.AuditAlarmRuleDelete] != 1 {
		t.Fatalf("audit actions %v", actions)
	}
}

// presenceAndAlarms: lastSeenAt, MOUNT_OFFLINE/ONLINE and an alarm's life
// (raise, acknowledge, clear) through the store.
func presenceAndAlarms(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w := newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	w.associate(t, a, "P1")
	m, err := w.mounts.Mount(ctx, a, "P1")
	if err != nil || m.Presence != core.PresenceUnknown || !m.LastSeenAt.IsZero() {
		t.Fatalf("before reports: %+v %v", m, err)
	}
	conds := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	rule, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("CRITICAL"), Conditions: &conds, ForSeconds: strp(60)})
	if err != nil {
		t.Fatal(err)
	}
	start := clock.Now()
	w.report(t, a, "P1", start, "BATTERY_LEVEL", "15")
	m, _ = w.mounts.Mount(ctx, a, "P1")
	if m.Presence != core.PresenceOnline || !m.LastSeenAt.Equal(start) {
		t.Fatalf("after a report: %+v", m)
	}
	if countEvents(t, store, core.EventMountOnline, "P1") != 0 {
		t.Fatal("MOUNT_ONLINE after the first report")
	}
	clock.Advance(59 * time.Second)
	if _, err := w.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countEvents(t, store, core.EventAlarmRaised, "P1"); n != 0 {
		t.Fatalf("raised before forSeconds: %d", n)
	}
	clock.Advance(time.Second)
	if _, err := w.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	alarms, pg, err := w.alarms.ListAlarms(ctx, a, core.AlarmFilter{State: strp(core.AlarmActive)}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(alarms) != 1 || pg.TotalItems != 1 {
		t.Fatalf("active alarms %+v %v", alarms, err)
	}
	al := alarms[0]
	if al.RuleID != rule.ID || al.RuleName != "low" || al.UID != "P1" || al.Severity != core.SeverityCritical ||
		!al.RaisedAt.Equal(clock.Now()) || al.Values["BATTERY_LEVEL"] != "15" {
		t.Fatalf("alarm %+v", al)
	}
	// Acknowledge: once, idempotent, does not clear.
	for range 2 {
		got, err := w.alarms.Acknowledge(ctx, a, al.ID)
		if err != nil || got.State != core.AlarmActive || got.AcknowledgedBy != a.ClientID || !got.AcknowledgedAt.Equal(clock.Now()) ||
			got.AcknowledgedByName != "A API client" {
			t.Fatalf("Acknowledge = %+v, %v; want by %s, named by its client's name", got, err, a.ClientID)
		}
	}
	if n := countEventsWhen(t, store, core.EventAlarmAcknowledged, "P1", 1); n != 1 {
		t.Fatalf("ALARM_ACKNOWLEDGED %d times", n)
	}
	if acked, _, err := store.ReadEvents(ctx, core.EventQuery{Types: []core.EventType{core.EventAlarmAcknowledged}, Limit: 10}); err != nil ||
		len(acked) != 1 || acked[0].Alarm == nil || acked[0].Alarm.AcknowledgedByName != "A API client" {
		t.Fatalf("ALARM_ACKNOWLEDGED events %+v, %v", acked, err)
	}
	b := ownerPrincipal(t, store, "B")
	if _, err := w.alarms.Acknowledge(ctx, b, al.ID); core.ErrorCode(err) != core.CodeAlarmNotFound {
		t.Fatalf("another account acknowledges: %v", err)
	}
	// A report older than the last one changes no latest value.
	clock.Advance(time.Second)
	w.report(t, a, "P1", start.Add(-time.Second), "BATTERY_LEVEL", "80")
	if active(t, w, a) != 1 {
		t.Fatal("an older report cleared the alarm")
	}
	// The lapse: one MOUNT_OFFLINE at lastSeenAt + offlineAfter, whoever sweeps.
	seen := clock.Now()
	clock.Advance(testOfflineAfter)
	m, _ = w.mounts.Mount(ctx, a, "P1")
	if m.Presence != core.PresenceOffline {
		t.Fatalf("presence at the lapse: %s", m.Presence)
	}
	for range 2 {
		if _, err := w.alarms.SweepAlarms(ctx); err != nil {
			t.Fatal(err)
		}
	}
	events, _, _ := store.ReadEvents(ctx, core.EventQuery{Types: []core.EventType{core.EventMountOffline}, Limit: 10})
	if len(events) != 1 || !events[0].OccurredAt.Equal(seen.Add(testOfflineAfter)) || events[0].AccountID != a.AccountID {
		t.Fatalf("MOUNT_OFFLINE events %+v", events)
	}
	// Back: MOUNT_ONLINE, and a value that ends the alarm.
	w.report(t, a, "P1", clock.Now(), "BATTERY_LEVEL", "90")
	if countEventsWhen(t, store, core.EventMountOnline, "P1", 1) != 1 || active(t, w, a) != 0 {
		t.Fatal("no MOUNT_ONLINE or alarm still active")
	}
	cleared, _, _ := w.alarms.ListAlarms(ctx, a, core.AlarmFilter{State: strp(core.AlarmCleared)}, core.Page{CurrentPage: 1, PageSize: 10})
	if len(cleared) != 1 || !cleared[0].ClearedAt.Equal(clock.Now()) || cleared[0].AcknowledgedBy == "" || cleared[0].AcknowledgedByName != "A API client" {
		t.Fatalf("cleared %+v", cleared)
	}
	events, _, _ = store.ReadEvents(ctx, core.EventQuery{Types: []core.EventType{core.EventAlarmCleared}, Limit: 10})
	if len(events) != 1 || events[0].Alarm == nil || events[0].Alarm.ID != al.ID || events[0].Alarm.State != core.AlarmCleared {
		t.Fatalf("ALARM_CLEARED events %+v", events)
	}
	// A receipt-free, report-free mount stays UNKNOWN; an abandoned one
	// starts over.
	if err := w.mounts.AbandonMount(ctx, a, "P1"); err != nil {
		t.Fatal(err)
	}
	w.associate(t, a, "P1")
	m, _ = w.mounts.Mount(ctx, a, "P1")
	if m.Presence != core.PresenceUnknown {
		t.Fatalf("after a new association: %s", m.Presence)
	}
	// CLEARED alarms leave after the retention.
	clock.Advance(core.AlarmRetention - time.Hour)
	if _, err := w.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := w.alarms.ListAlarms(ctx, a, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); len(got) != 1 {
		t.Fatalf("before the retention: %d alarms", len(got))
	}
	clock.Advance(2 * time.Hour)
	if _, err := w.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := w.alarms.ListAlarms(ctx, a, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); len(got) != 0 {
		t.Fatalf("after the retention: %+v", got)
	}
}

func active(t *testing.T, w *alarmWorld, p core.Principal) int {
	t.Helper()
	alarms, _, err := w.alarms.ListAlarms(context.Background(), p, core.AlarmFilter{State: strp(core.AlarmActive)}, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(alarms)
}

// racingSweeps: replicas sweeping at once announce a lapse once and raise
// an episode's alarm once.
func racingSweeps(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w1 := newAlarmWorld(t, store, clock)
	w2 := newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	conds := []core.AlarmCondition{{Presence: core.PresenceOffline}}
	if _, err := w1.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("silent"), Severity: strp("WARNING"), Conditions: &conds, ForSeconds: strp(600)}); err != nil {
		t.Fatal(err)
	}
	hot := []core.AlarmCondition{{Code: core.StateCPUTemperature, Op: ">", Value: "70"}}
	if _, err := w1.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("hot"), Severity: strp("CRITICAL"), Conditions: &hot, ForSeconds: strp(30)}); err != nil {
		t.Fatal(err)
	}
	uids := []string{"R1", "R2", "R3"}
	for _, uid := range uids {
		w1.associate(t, a, uid)
		w1.report(t, a, uid, clock.Now(), "CPU_TEMPERATURE", "80")
	}
	sweepBoth := func() {
		var wg sync.WaitGroup
		for _, w := range []*alarmWorld{w1, w2, w1, w2} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := w.alarms.SweepAlarms(ctx); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	clock.Advance(31 * time.Second)
	sweepBoth()
	clock.Advance(testOfflineAfter + 10*time.Minute)
	sweepBoth()
	sweepBoth()
	for _, uid := range uids {
		if n := countEventsWhen(t, store, core.EventMountOffline, uid, 1); n != 1 {
			t.Errorf("%s: MOUNT_OFFLINE %d times", uid, n)
		}
		if n := countEventsWhen(t, store, core.EventAlarmRaised, uid, 2); n != 2 {
			t.Errorf("%s: ALARM_RAISED %d times, want 2 (hot, silent)", uid, n)
		}
	}
	if n := active(t, w1, a); n != 6 {
		t.Fatalf("%d active alarms, want 6", n)
	}
}

// --- The property test ---------------------------------------------------

// alarmModel is what must be open: a mount's values, presence and owner,
// and per rule and mount since when the conditions hold.
type alarmModel struct {
	owner    map[string]string // uid → account ("" none)
	latest   map[[2]string]map[core.StateCode]core.StateEntry
	lastSeen map[string]time.Time
	rules    map[string]core.AlarmRule
	// holds[rule/uid]: since when the conditions hold; fresh says an
	// evaluation saw them turn true (so the alarm is owed at since+for).
	since map[[2]string]time.Time
	fresh map[[2]string]bool
}

func (m *alarmModel) presence(uid string, now time.Time) core.Presence {
	return core.PresenceAt(m.lastSeen[uid], testOfflineAfter, now)
}

func (m *alarmModel) holds(r core.AlarmRule, uid string, now time.Time) bool {
	if !r.Enabled || m.owner[uid] != r.AccountID || (len(r.MountUIDs) > 0 && !slices.Contains(r.MountUIDs, uid)) {
		return false
	}
	latest := map[core.StateCode]string{}
	for c, e := range m.latest[[2]string{uid, r.AccountID}] {
		latest[c] = e.Value
	}
	return r.Holds(latest, m.presence(uid, now))
}

// change re-evaluates every rule on uid at an instant where its values or
// presence change (evaluated: the service looked at it then).
func (m *alarmModel) change(uid string, at time.Time, evaluated bool) {
	for id, r := range m.rules {
		k := [2]string{id, uid}
		_, was := m.since[k]
		switch h := m.holds(r, uid, at); {
		case !h:
			delete(m.since, k)
			delete(m.fresh, k)
		case !was:
			m.since[k], m.fresh[k] = at, evaluated
		}
	}
}

// restart starts a rule's evaluation afresh at now.
func (m *alarmModel) restart(id string, now time.Time, uids []string) {
	for _, uid := range uids {
		k := [2]string{id, uid}
		delete(m.since, k)
		delete(m.fresh, k)
		if r, ok := m.rules[id]; ok && m.holds(r, uid, now) {
			// A rule with a presence condition is evaluated at once on
			// the mounts already OFFLINE; others at their next report.
			m.since[k] = now
			m.fresh[k] = slices.ContainsFunc(r.Conditions, func(c core.AlarmCondition) bool { return c.Presence != "" })
		}
	}
}

func alarmProperty(t *testing.T, store Store) {
	seeds := []uint64{1, 2, uint64(time.Now().UnixNano())}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			runAlarmProperty(t, store, seed, 250)
		})
	}
}

func runAlarmProperty(t *testing.T, store Store, seed uint64, steps int) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 17))
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC).Add(time.Duration(seed%1000) * time.Hour)}
	w := newAlarmWorld(t, store, clock)
	acct := []core.Principal{ownerPrincipal(t, store, fmt.Sprint("PA", seed)), ownerPrincipal(t, store, fmt.Sprint("PB", seed))}
	uids := []string{fmt.Sprintf("Q%d-1", seed%100000), fmt.Sprintf("Q%d-2", seed%100000), fmt.Sprintf("Q%d-3", seed%100000)}
	model := &alarmModel{owner: map[string]string{}, latest: map[[2]string]map[core.StateCode]core.StateEntry{},
		lastSeen: map[string]time.Time{}, rules: map[string]core.AlarmRule{}, since: map[[2]string]time.Time{}, fresh: map[[2]string]bool{}}
	byAccount := map[string]core.Principal{}
	for _, p := range acct {
		byAccount[p.AccountID] = p
	}
	for _, uid := range uids {
		w.associate(t, acct[0], uid)
		model.owner[uid] = acct[0].AccountID
	}
	templates := [][]core.AlarmCondition{
		{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}},
		{{Presence: core.PresenceOffline}},
		{{Code: core.StateMountLocked, Op: "==", Value: "1"}, {Code: core.StateHelmetMounted, Op: "==", Value: "0"}},
		{{Code: core.StateCPUTemperature, Op: ">", Value: "70"}},
		{{Presence: core.PresenceOffline}, {Code: core.StateBatteryLevel, Op: "<=", Value: "15"}},
	}
	durations := []int{0, 0, 60, 300, 900}
	values := map[core.StateCode][]string{core.StateBatteryLevel: {"10", "15", "50", "90"}, core.StateCPUTemperature: {"40", "75"},
		core.StateMountLocked: {"0", "1"}, core.StateHelmetMounted: {"0", "1"}}
	codes := []core.StateCode{core.StateBatteryLevel, core.StateCPUTemperature, core.StateMountLocked, core.StateHelmetMounted}
	ruleIDs := func() []string {
		ids := make([]string, 0, len(model.rules))
		for id := range model.rules {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids
	}
	var trace []string
	fail := func(format string, args ...any) {
		t.Helper()
		last := trace[max(0, len(trace)-40):]
		t.Fatalf("seed %d, the last steps:\n%s\n"+format, append([]any{seed, strings.Join(last, "\n")}, args...)...)
	}
	for step := 0; step < steps; step++ {
		now := clock.Now()
		switch op := rng.IntN(100); {
		case op < 40: // a report from a mount's owner
			uid := uids[rng.IntN(len(uids))]
			owner := model.owner[uid]
			if owner == "" {
				continue
			}
			ago := []time.Duration{0, 0, 0, time.Minute, 5 * time.Minute, 20 * time.Minute}[rng.IntN(6)]
			at := now.Add(-ago).Truncate(time.Millisecond)
			var kv []string
			for _, c := range codes {
				if rng.IntN(2) == 0 {
					vs := values[c]
					kv = append(kv, string(c), vs[rng.IntN(len(vs))])
				}
			}
			if len(kv) == 0 {
				kv = []string{string(core.StateBatteryLevel), "50"}
			}
			trace = append(trace, fmt.Sprintf("%s report %s %v -%s", now.Format("15:04:05"), uid, kv, ago))
			w.report(t, byAccount[owner], uid, at, kv...)
			key := [2]string{uid, owner}
			if model.latest[key] == nil {
				model.latest[key] = map[core.StateCode]core.StateEntry{}
			}
			for i := 0; i < len(kv); i += 2 {
				e := core.StateEntry{Code: core.StateCode(kv[i]), Value: kv[i+1], OccurredAt: at}
				if old, ok := model.latest[key][e.Code]; !ok || core.Newer(e, old) {
					model.latest[key][e.Code] = e
				}
			}
			if ago < testOfflineAfter {
				model.lastSeen[uid] = now
			}
			model.change(uid, now, true)
		case op < 62: // time passes; the sweep runs
			d := []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 14 * time.Minute, 20 * time.Minute}[rng.IntN(6)]
			trace = append(trace, fmt.Sprintf("%s advance %s", now.Format("15:04:05"), d))
			// Lapses inside the step change presence at their instant.
			for _, uid := range uids {
				seen := model.lastSeen[uid]
				lapse := seen.Add(testOfflineAfter)
				if !seen.IsZero() && lapse.After(now) && !lapse.After(now.Add(d)) {
					model.change(uid, lapse, model.owner[uid] != "")
				}
			}
			clock.Advance(d)
			if _, err := w.alarms.SweepAlarms(ctx); err != nil {
				fail("sweep: %v", err)
			}
		case op < 72: // a rule is created
			if len(model.rules) >= 6 {
				continue
			}
			p := acct[rng.IntN(5)/4] // mostly the first account
			conds := slices.Clone(templates[rng.IntN(len(templates))])
			in := core.AlarmRuleInput{Name: strp(fmt.Sprint("rule", step)), Severity: strp("WARNING"), Conditions: &conds,
				ForSeconds: strp(durations[rng.IntN(len(durations))])}
			if rng.IntN(3) == 0 {
				in.MountUIDs = &[]string{uids[rng.IntN(len(uids))]}
			}
			r, err := w.alarms.CreateRule(ctx, p, in)
			if err != nil {
				fail("create rule: %v", err)
			}
			trace = append(trace, fmt.Sprintf("%s create %s %+v for %d on %v", now.Format("15:04:05"), r.ID, conds, r.ForSeconds, r.MountUIDs))
			model.rules[r.ID] = r
			model.restart(r.ID, now, uids)
		case op < 85: // a rule is changed
			ids := ruleIDs()
			if len(ids) == 0 {
				continue
			}
			r := model.rules[ids[rng.IntN(len(ids))]]
			var in core.AlarmRuleInput
			switch rng.IntN(4) {
			case 0:
				in.Name = strp(r.Name + "'")
			case 1:
				in.ForSeconds = strp(durations[rng.IntN(len(durations))])
			case 2:
				in.Enabled = strp(!r.Enabled)
			case 3:
				conds := slices.Clone(templates[rng.IntN(len(templates))])
				in.Conditions = &conds
			}
			before := activeIDs(t, w, byAccount[r.AccountID], r.ID)
			up, err := w.alarms.UpdateRule(ctx, byAccount[r.AccountID], r.ID, in)
			if err != nil {
				fail("update rule: %v", err)
			}
			trace = append(trace, fmt.Sprintf("%s update %s → %+v for %d enabled %v", now.Format("15:04:05"), r.ID, up.Conditions, up.ForSeconds, up.Enabled))
			model.rules[r.ID] = up
			if up.Revision != r.Revision {
				model.restart(r.ID, now, uids)
				// Its alarms are cleared (a presence rule may raise anew
				// at once on a mount OFFLINE already).
				for _, id := range activeIDs(t, w, byAccount[r.AccountID], r.ID) {
					if slices.Contains(before, id) {
						fail("rule %s changed but alarm %s stays ACTIVE", r.ID, id)
					}
				}
			}
		case op < 90: // a rule is deleted
			ids := ruleIDs()
			if len(ids) == 0 {
				continue
			}
			r := model.rules[ids[rng.IntN(len(ids))]]
			if err := w.alarms.DeleteRule(ctx, byAccount[r.AccountID], r.ID); err != nil {
				fail("delete rule: %v", err)
			}
			trace = append(trace, fmt.Sprintf("%s delete %s", now.Format("15:04:05"), r.ID))
			delete(model.rules, r.ID)
			model.restart(r.ID, now, uids)
			if n := activeOf(t, w, byAccount[r.AccountID], r.ID); n != 0 {
				fail("rule %s deleted but %d alarms stay ACTIVE", r.ID, n)
			}
		default: // a mount is abandoned, or claimed again
			uid := uids[rng.IntN(len(uids))]
			if owner := model.owner[uid]; owner != "" {
				if err := w.mounts.AbandonMount(ctx, byAccount[owner], uid); err != nil {
					fail("abandon: %v", err)
				}
				trace = append(trace, fmt.Sprintf("%s abandon %s", now.Format("15:04:05"), uid))
				model.owner[uid] = ""
				model.lastSeen[uid] = time.Time{}
				model.change(uid, now, true)
			} else {
				p := acct[rng.IntN(2)]
				w.associate(t, p, uid)
				trace = append(trace, fmt.Sprintf("%s associate %s to %s", now.Format("15:04:05"), uid, p.AccountID))
				model.owner[uid] = p.AccountID
				model.change(uid, now, false)
			}
		}
		checkAlarmModel(t, w, model, acct, uids, fail)
	}
	raised, cleared := countEvents(t, store, core.EventAlarmRaised, ""), countEvents(t, store, core.EventAlarmCleared, "")
	t.Logf("seed %d: %d steps, %d alarms raised, %d cleared, %d lapses announced", seed, steps, raised, cleared,
		countEvents(t, store, core.EventMountOffline, ""))
}

func activeIDs(t *testing.T, w *alarmWorld, p core.Principal, ruleID string) []string {
	t.Helper()
	alarms, _, err := w.alarms.ListAlarms(context.Background(), p, core.AlarmFilter{State: strp(core.AlarmActive), RuleID: &ruleID}, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range alarms {
		out = append(out, a.ID)
	}
	return out
}

func activeOf(t *testing.T, w *alarmWorld, p core.Principal, ruleID string) int {
	t.Helper()
	alarms, _, err := w.alarms.ListAlarms(context.Background(), p, core.AlarmFilter{State: strp(core.AlarmActive), RuleID: &ruleID}, core.Page{CurrentPage: 1, PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	return len(alarms)
}

// checkAlarmModel: every ACTIVE alarm's conditions hold and have held for
// forSeconds; every episode an evaluation saw start and that has held for
// forSeconds has exactly one ACTIVE alarm; each alarm was raised once and
// cleared at most once.
func checkAlarmModel(t *testing.T, w *alarmWorld, model *alarmModel, accts []core.Principal, uids []string, fail func(string, ...any)) {
	t.Helper()
	ctx := context.Background()
	now := w.clock.Now()
	open := map[[2]string]core.Alarm{}
	for _, p := range accts {
		all, _, err := w.alarms.ListAlarms(ctx, p, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: core.MaxPageSize})
		if err != nil {
			fail("list alarms: %v", err)
		}
		for _, a := range all {
			if a.State != core.AlarmActive {
				continue
			}
			k := [2]string{a.RuleID, a.UID}
			if _, dup := open[k]; dup {
				fail("two ACTIVE alarms for %v", k)
			}
			open[k] = a
			r, ok := model.rules[a.RuleID]
			if !ok || !model.holds(r, a.UID, now) {
				fail("alarm %s (%s on %s) ACTIVE but its conditions do not hold (rule %+v)", a.ID, a.RuleID, a.UID, r)
			}
			since, ok := model.since[k]
			if !ok || since.Add(time.Duration(r.ForSeconds)*time.Second).After(a.RaisedAt) {
				fail("alarm %s raised at %s, conditions hold since %s (%v), forSeconds %d", a.ID, a.RaisedAt, since, ok, r.ForSeconds)
			}
		}
	}
	for k, since := range model.since {
		r := model.rules[k[0]]
		if model.fresh[k] && !since.Add(time.Duration(r.ForSeconds)*time.Second).After(now) {
			if _, ok := open[k]; !ok {
				fail("rule %s on %s holds since %s for %ds: no ACTIVE alarm at %s", k[0], k[1], since, r.ForSeconds, now)
			}
		}
	}
	// Each alarm raised once, cleared at most once and only if CLEARED.
	// On PostgreSQL the log shows an event once every older transaction of
	// the cluster ended, and other packages' tests share it: the read is
	// repeated, for up to 5 s, while an open alarm's ALARM_RAISED is not
	// shown yet.
	var raised, cleared map[string]int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		events, _, err := w.store.ReadEvents(ctx, core.EventQuery{Types: []core.EventType{core.EventAlarmRaised, core.EventAlarmCleared}, Limit: 100000})
		if err != nil {
			fail("events: %v", err)
		}
		raised, cleared = map[string]int{}, map[string]int{}
		for _, e := range events {
			if e.Alarm == nil {
				fail("%s without its alarm", e.Type)
			}
			if e.Type == core.EventAlarmRaised {
				raised[e.Alarm.ID]++
			} else {
				cleared[e.Alarm.ID]++
			}
		}
		shown := true
		for _, a := range open {
			shown = shown && raised[a.ID] > 0
		}
		if shown || time.Now().After(deadline) {
			break
		}
	}
	for id, n := range raised {
		if n != 1 || cleared[id] > 1 {
			fail("alarm %s raised %d, cleared %d times", id, n, cleared[id])
		}
	}
	for _, a := range open {
		if cleared[a.ID] != 0 || raised[a.ID] != 1 {
			fail("ACTIVE alarm %s has %d ALARM_CLEARED, %d ALARM_RAISED", a.ID, cleared[a.ID], raised[a.ID])
		}
	}
	_ = uids
}

// alarmListing: newest first, the filters, pages, and the acknowledgement
// in the audit log.
func alarmListing(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w := newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	low := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	hot := []core.AlarmCondition{{Code: core.StateCPUTemperature, Op: ">=", Value: "70"}}
	r1, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("INFO"), Conditions: &low})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("hot"), Severity: strp("CRITICAL"), Conditions: &hot})
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"L1", "L2"} {
		w.associate(t, a, uid)
		clock.Advance(time.Second)
		w.report(t, a, uid, clock.Now(), "BATTERY_LEVEL", "5")
		clock.Advance(time.Second)
		w.report(t, a, uid, clock.Now(), "CPU_TEMPERATURE", "70")
	}
	list := func(f core.AlarmFilter, page core.Page) ([]string, int) {
		t.Helper()
		alarms, pg, err := w.alarms.ListAlarms(ctx, a, f, page)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, al := range alarms {
			out = append(out, al.UID+"/"+al.RuleName)
		}
		return out, pg.TotalItems
	}
	all := core.Page{CurrentPage: 1, PageSize: 10}
	if got, n := list(core.AlarmFilter{}, all); n != 4 || !slices.Equal(got, []string{"L2/hot", "L2/low", "L1/hot", "L1/low"}) {
		t.Fatalf("all alarms %v (%d)", got, n)
	}
	if got, _ := list(core.AlarmFilter{Severity: strp(core.SeverityCritical)}, all); !slices.Equal(got, []string{"L2/hot", "L1/hot"}) {
		t.Fatalf("critical %v", got)
	}
	if got, _ := list(core.AlarmFilter{MountUID: strp("L1")}, all); !slices.Equal(got, []string{"L1/hot", "L1/low"}) {
		t.Fatalf("L1 %v", got)
	}
	if got, _ := list(core.AlarmFilter{RuleID: &r1.ID}, all); !slices.Equal(got, []string{"L2/low", "L1/low"}) {
		t.Fatalf("rule low %v", got)
	}
	if got, n := list(core.AlarmFilter{}, core.Page{CurrentPage: 2, PageSize: 3}); n != 4 || !slices.Equal(got, []string{"L1/low"}) {
		t.Fatalf("page 2 %v (%d)", got, n)
	}
	// Disabling a rule clears its alarms at once.
	if _, err := w.alarms.UpdateRule(ctx, a, r2.ID, core.AlarmRuleInput{Enabled: strp(false)}); err != nil {
		t.Fatal(err)
	}
	if got, _ := list(core.AlarmFilter{State: strp(core.AlarmActive)}, all); !slices.Equal(got, []string{"L2/low", "L1/low"}) {
		t.Fatalf("active after disabling hot %v", got)
	}
	if got, _ := list(core.AlarmFilter{State: strp(core.AlarmCleared)}, all); !slices.Equal(got, []string{"L2/hot", "L1/hot"}) {
		t.Fatalf("cleared after disabling hot %v", got)
	}
	alarms, _, _ := w.alarms.ListAlarms(ctx, a, core.AlarmFilter{MountUID: strp("L1"), RuleID: &r1.ID}, all)
	if _, err := w.alarms.Acknowledge(ctx, a, alarms[0].ID); err != nil {
		t.Fatal(err)
	}
	entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: a.AccountID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(entries, func(e core.AuditEntry) bool {
		return e.Action == core.AuditAlarmAcknowledge && e.Target == "alarm:"+alarms[0].ID
	}) {
		t.Fatalf("no alarm.acknowledge entry in %+v", entries)
	}
}

// alarmsLeaveWithTheMount: delete, abandon and expiry clear the alarms of
// the account the mount leaves, in the request that ends the association
// or, should that fail, at the next sweep.
func alarmsLeaveWithTheMount(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w := newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	low := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	if _, err := w.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("INFO"), Conditions: &low}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"D1", "D2"} {
		w.associate(t, a, uid)
	}
	// D3 stays IDLE: its window lapses.
	if _, err := w.mounts.RequestAssociation(ctx, a, "D3", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"D1", "D2", "D3"} {
		w.report(t, a, uid, clock.Now(), "BATTERY_LEVEL", "5")
	}
	if n := active(t, w, a); n != 3 {
		t.Fatalf("%d active alarms, want 3", n)
	}
	if err := w.mounts.DeleteMount(ctx, a, "D1"); err != nil {
		t.Fatal(err)
	}
	if err := w.mounts.AbandonMount(ctx, a, "D2"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(11 * time.Minute)
	if _, err := w.mounts.SweepLapsed(ctx); err != nil {
		t.Fatal(err)
	}
	if n := active(t, w, a); n != 0 {
		t.Fatalf("%d alarms stay ACTIVE after the mounts left", n)
	}
	for _, uid := range []string{"D1", "D2", "D3"} {
		if n := countEventsWhen(t, store, core.EventAlarmCleared, uid, 1); n != 1 {
			t.Errorf("%s: ALARM_CLEARED %d times", uid, n)
		}
	}
	// Another account claims D2: nothing of A's follows it, and its
	// presence starts UNKNOWN.
	b := ownerPrincipal(t, store, "B")
	w.associate(t, b, "D2")
	m, err := w.mounts.Mount(ctx, b, "D2")
	if err != nil || m.Presence != core.PresenceUnknown {
		t.Fatalf("D2 for B: %+v %v", m, err)
	}
	if _, err := w.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countEvents(t, store, core.EventMountOffline, ""); n != 0 {
		t.Fatalf("MOUNT_OFFLINE for mounts without an association: %d", n)
	}
}

// racingReports: concurrent reports of one mount, on two replicas, flip
// an alarm; whatever their interleaving, what is open at the end matches
// the latest value, and every alarm was raised once and cleared at most
// once.
func racingReports(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w1, w2 := newAlarmWorld(t, store, clock), newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	low := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	if _, err := w1.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("INFO"), Conditions: &low}); err != nil {
		t.Fatal(err)
	}
	w1.associate(t, a, "RR")
	base := clock.Now()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := []*alarmWorld{w1, w2}[i%2]
			v := []string{"5", "50"}[i%2]
			in := []core.StateInput{{Code: "BATTERY_LEVEL", Value: v, OccurredAt: base.Add(time.Duration(i) * time.Millisecond), HasOccurredAt: true}}
			if _, err := w.mounts.ReportStates(ctx, a, "RR", in, nil); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	// The latest entry (i = 15) says 50: nothing may stay open.
	if n := active(t, w1, a); n != 0 {
		t.Fatalf("%d alarms ACTIVE after the latest value ended them", n)
	}
	raised, cleared := countEvents(t, store, core.EventAlarmRaised, "RR"), countEvents(t, store, core.EventAlarmCleared, "RR")
	if raised != cleared {
		t.Fatalf("raised %d, cleared %d", raised, cleared)
	}
}

// staleRuleCache: a replica whose cached rules predate a rule made on
// another replica does not close that rule's alarm (it reads the rules
// again), neither in a report nor in a sweep.
func staleRuleCache(t *testing.T, store Store) {
	ctx := context.Background()
	clock := &alarmClock{now: time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}
	w1, w2 := newAlarmWorld(t, store, clock), newAlarmWorld(t, store, clock)
	a := ownerPrincipal(t, store, "A")
	w1.associate(t, a, "SC")
	w2.report(t, a, "SC", clock.Now(), "BATTERY_LEVEL", "50") // w2 caches "no rules"
	low := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	if _, err := w1.alarms.CreateRule(ctx, a, core.AlarmRuleInput{Name: strp("low"), Severity: strp("INFO"), Conditions: &low, ForSeconds: strp(30)}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second)
	w1.report(t, a, "SC", clock.Now(), "BATTERY_LEVEL", "5")
	clock.Advance(time.Second)
	w2.report(t, a, "SC", clock.Now(), "BATTERY_LEVEL", "6")
	clock.Advance(30 * time.Second)
	if _, err := w2.alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if n := active(t, w1, a); n != 1 {
		t.Fatalf("%d active alarms, want 1", n)
	}
	if n := countEvents(t, store, core.EventAlarmCleared, "SC"); n != 0 {
		t.Fatalf("a stale cache cleared the alarm %d times", n)
	}
}
