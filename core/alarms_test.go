package core_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func battery(v string, at time.Time) core.StateEntry {
	return core.StateEntry{Code: core.StateBatteryLevel, Value: v, OccurredAt: at}
}

// summary is what a decision does, in words, for the table below.
func summary(c core.WatchChanges) string {
	var parts []string
	if c.ResetSeen {
		parts = append(parts, "reset")
	}
	if !c.Seen.IsZero() {
		parts = append(parts, "seen@"+c.Seen.Sub(t0).String())
	}
	if c.AnnounceOffline {
		parts = append(parts, "announce")
	}
	for _, t := range c.Open {
		parts = append(parts, fmt.Sprintf("open %s %s since@%s due@%s", t.RuleID, t.State, t.Since.Sub(t0), t.DueAt.Sub(t0)))
	}
	for _, t := range c.Raise {
		parts = append(parts, "raise "+t.ID)
	}
	for _, t := range c.Close {
		parts = append(parts, "close "+t.ID+" "+string(t.State))
	}
	for _, e := range c.Events {
		s := string(e.Type) + "@" + e.OccurredAt.Sub(t0).String()
		if e.Alarm != nil {
			s += " " + e.Alarm.RuleID
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// TestDecideWatch: every transition of one mount's evaluation with a
// clock given by hand (a pure function: no store).
func TestDecideWatch(t *testing.T) {
	const after = 15 * time.Minute
	low := core.AlarmRule{ID: "low", AccountID: "A", Name: "low", Severity: core.SeverityWarning, Enabled: true, Revision: 1,
		Conditions: []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}}
	lowFor := low
	lowFor.ID, lowFor.ForSeconds = "lowFor", 60
	silent := core.AlarmRule{ID: "silent", AccountID: "A", Enabled: true, Revision: 1, ForSeconds: 300,
		Conditions: []core.AlarmCondition{{Presence: core.PresenceOffline}}}
	only := low
	only.ID, only.MountUIDs = "only", []string{"OTHER"}
	mount := core.Mount{UID: "M", OwnerID: "A", State: core.StateAssociated, LastSeenAt: t0}
	track := func(rule core.AlarmRule, state core.AlarmState, since time.Time) core.AlarmTrack {
		return core.AlarmTrack{Alarm: core.Alarm{ID: "t-" + rule.ID, AccountID: "A", RuleID: rule.ID, UID: "M", State: state},
			Since: since, DueAt: since.Add(time.Duration(rule.ForSeconds) * time.Second), RuleRevision: rule.Revision}
	}
	gone := mount
	gone.OwnerID, gone.State = "", core.StateInactive
	other := mount
	other.OwnerID = "B"
	for _, tc := range []struct {
		name      string
		w         core.MountWatch
		rules     []core.AlarmRule
		now       time.Time
		mode      core.WatchMode
		want      string
		wantAlarm map[string]string
	}{
		{name: "first report: heard, no MOUNT_ONLINE",
			w:   core.MountWatch{Mount: core.Mount{UID: "M", OwnerID: "A", State: core.StateAssociated}},
			now: t0, mode: core.WatchHeard, want: "seen@0s"},
		{name: "heard while ONLINE",
			w: core.MountWatch{Mount: mount}, now: t0.Add(time.Minute), mode: core.WatchHeard, want: "seen@1m0s"},
		{name: "heard after an announced lapse: MOUNT_ONLINE",
			w: core.MountWatch{Mount: mount, OfflineAnnounced: true}, now: t0.Add(time.Hour), mode: core.WatchHeard,
			want: "seen@1h0m0s; MOUNT_ONLINE@1h0m0s"},
		{name: "heard after a lapse no sweep announced: both, in order",
			w: core.MountWatch{Mount: mount}, now: t0.Add(time.Hour), mode: core.WatchHeard,
			want: "seen@1h0m0s; MOUNT_OFFLINE@15m0s; MOUNT_ONLINE@1h0m0s"},
		{name: "sweep before the lapse: nothing",
			w: core.MountWatch{Mount: mount}, now: t0.Add(after - time.Millisecond), want: ""},
		{name: "sweep at the lapse: announced at the lapse",
			w: core.MountWatch{Mount: mount}, now: t0.Add(after + 7*time.Second), want: "announce; MOUNT_OFFLINE@15m0s"},
		{name: "sweep after the announcement: nothing more",
			w: core.MountWatch{Mount: mount, OfflineAnnounced: true}, now: t0.Add(time.Hour), want: ""},
		{name: "a late report (not heard) does not bring the mount back",
			w: core.MountWatch{Mount: mount, OfflineAnnounced: true}, now: t0.Add(time.Hour), mode: core.WatchValues, want: ""},
		{name: "conditions true, forSeconds 0: raised at once with the values",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("15", t0)}},
			rules: []core.AlarmRule{low}, now: t0, mode: core.WatchHeard,
			want:      "seen@0s; open low ACTIVE since@0s due@0s; ALARM_RAISED@0s low",
			wantAlarm: map[string]string{"BATTERY_LEVEL": "15"}},
		{name: "conditions true, forSeconds 60: pending",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("15", t0)}},
			rules: []core.AlarmRule{lowFor}, now: t0, mode: core.WatchHeard,
			want: "seen@0s; open lowFor PENDING since@0s due@1m0s"},
		{name: "pending not yet due",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("15", t0)}, Tracks: []core.AlarmTrack{track(lowFor, core.AlarmPending, t0)}},
			rules: []core.AlarmRule{lowFor}, now: t0.Add(59 * time.Second), want: ""},
		{name: "pending due: raised in place",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("15", t0)}, Tracks: []core.AlarmTrack{track(lowFor, core.AlarmPending, t0)}},
			rules: []core.AlarmRule{lowFor}, now: t0.Add(time.Minute), want: "raise t-lowFor; ALARM_RAISED@1m0s lowFor"},
		{name: "conditions false: pending forgotten without an event",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("50", t0)}, Tracks: []core.AlarmTrack{track(lowFor, core.AlarmPending, t0)}},
			rules: []core.AlarmRule{lowFor}, now: t0.Add(time.Second), mode: core.WatchHeard, want: "seen@1s; close t-lowFor PENDING"},
		{name: "conditions false: active cleared",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("50", t0)}, Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			rules: []core.AlarmRule{low}, now: t0.Add(time.Second), mode: core.WatchHeard,
			want: "seen@1s; close t-low CLEARED; ALARM_CLEARED@1s low"},
		{name: "still true: nothing new",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("10", t0)}, Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			rules: []core.AlarmRule{low}, now: t0.Add(time.Second), mode: core.WatchHeard, want: "seen@1s"},
		{name: "the latest by occurredAt decides, not the newest report",
			w: core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("10", t0), battery("90", t0.Add(-time.Minute))},
				Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			rules: []core.AlarmRule{low}, now: t0.Add(time.Second), mode: core.WatchValues, want: ""},
		{name: "rule deleted or disabled: cleared",
			w:   core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("10", t0)}, Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			now: t0.Add(time.Second), want: "close t-low CLEARED; ALARM_CLEARED@1s low"},
		{name: "rule of another revision: cleared and started afresh",
			w: core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("10", t0)},
				Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			rules: []core.AlarmRule{func() core.AlarmRule { r := low; r.Revision = 2; return r }()}, now: t0.Add(time.Second),
			want: "open low ACTIVE since@1s due@1s; close t-low CLEARED; ALARM_CLEARED@1s low; ALARM_RAISED@1s low"},
		{name: "rule for other mounts: not evaluated",
			w:     core.MountWatch{Mount: mount, Latest: []core.StateEntry{battery("10", t0)}},
			rules: []core.AlarmRule{only}, now: t0, mode: core.WatchHeard, want: "seen@0s"},
		{name: "mount left the account: cleared, lastSeenAt forgotten",
			w:     core.MountWatch{Mount: gone, Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			rules: []core.AlarmRule{low}, now: t0.Add(time.Second), want: "reset; close t-low CLEARED; ALARM_CLEARED@1s low"},
		{name: "mount claimed by another account: A's alarms cleared",
			w:   core.MountWatch{Mount: other, Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			now: t0.Add(time.Second), want: "close t-low CLEARED; ALARM_CLEARED@1s low"},
		{name: "mount deleted: cleared",
			w:   core.MountWatch{Tracks: []core.AlarmTrack{track(low, core.AlarmActive, t0)}},
			now: t0.Add(time.Second), want: "close t-low CLEARED; ALARM_CLEARED@1s low"},
		{name: "presence rule: held from the lapse",
			w:     core.MountWatch{Mount: mount},
			rules: []core.AlarmRule{silent}, now: t0.Add(after + 10*time.Second),
			want: "announce; open silent PENDING since@15m0s due@20m0s; MOUNT_OFFLINE@15m0s"},
		{name: "presence rule: due at lapse + forSeconds",
			w:     core.MountWatch{Mount: mount, OfflineAnnounced: true, Tracks: []core.AlarmTrack{track(silent, core.AlarmPending, t0.Add(after))}},
			rules: []core.AlarmRule{silent}, now: t0.Add(after + 5*time.Minute), want: "raise t-silent; ALARM_RAISED@20m0s silent"},
		{name: "presence rule: a report ends it",
			w:     core.MountWatch{Mount: mount, OfflineAnnounced: true, Tracks: []core.AlarmTrack{track(silent, core.AlarmActive, t0.Add(after))}},
			rules: []core.AlarmRule{silent}, now: t0.Add(time.Hour), mode: core.WatchHeard,
			want: "seen@1h0m0s; close t-silent CLEARED; MOUNT_ONLINE@1h0m0s; ALARM_CLEARED@1h0m0s silent"},
		{name: "new association: lastSeenAt starts over",
			w: core.MountWatch{Mount: mount, OfflineAnnounced: true}, now: t0.Add(time.Hour), mode: core.WatchNewAssociation,
			want: "reset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := core.DecideWatch(tc.w, tc.rules, tc.now, tc.mode, after)
			if got := summary(c); got != tc.want {
				t.Fatalf("\n got %s\nwant %s", got, tc.want)
			}
			if tc.wantAlarm != nil {
				if len(c.Open) != 1 || fmt.Sprint(c.Open[0].Values) != fmt.Sprint(tc.wantAlarm) || !c.Open[0].RaisedAt.Equal(tc.now) {
					t.Fatalf("alarm %+v", c.Open)
				}
			}
		})
	}
}

func TestValidateAlarmRule(t *testing.T) {
	ok := core.AlarmRule{Name: "r", Severity: core.SeverityInfo, Conditions: []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}}
	many := make([]string, core.MaxAlarmRuleMounts+1)
	for i := range many {
		many[i] = fmt.Sprint("M", i)
	}
	for _, tc := range []struct {
		name  string
		edit  func(r *core.AlarmRule)
		field string
	}{
		{"valid", func(*core.AlarmRule) {}, ""},
		{"presence", func(r *core.AlarmRule) { r.Conditions = []core.AlarmCondition{{Presence: core.PresenceOffline}} }, ""},
		{"flags", func(r *core.AlarmRule) {
			r.Conditions = []core.AlarmCondition{{Code: core.StateMountLocked, Op: "==", Value: "1"}, {Code: core.StateHelmetMounted, Op: "!=", Value: "1"}}
		}, ""},
		{"empty name", func(r *core.AlarmRule) { r.Name = "" }, "name"},
		{"long name", func(r *core.AlarmRule) { r.Name = strings.Repeat("n", 101) }, "name"},
		{"name of 100 characters", func(r *core.AlarmRule) { r.Name = strings.Repeat("é", 100) }, ""},
		{"name with an escape sequence", func(r *core.AlarmRule) { r.Name = "low\x1b[2Jbattery" }, "name"},
		{"name with a newline", func(r *core.AlarmRule) { r.Name = "low\nbattery" }, "name"},
		{"name with a tab", func(r *core.AlarmRule) { r.Name = "low\tbattery" }, "name"},
		{"name with DEL", func(r *core.AlarmRule) { r.Name = "low\x7f" }, "name"},
		{"name with a C1 control", func(r *core.AlarmRule) { r.Name = "low\u009b2J" }, "name"},
		{"name not UTF-8", func(r *core.AlarmRule) { r.Name = "low\xff" }, "name"},
		{"severity", func(r *core.AlarmRule) { r.Severity = "LOUD" }, "severity"},
		{"no conditions", func(r *core.AlarmRule) { r.Conditions = nil }, "conditions"},
		{"eleven conditions", func(r *core.AlarmRule) { r.Conditions = slices.Repeat(r.Conditions, 11) }, "conditions"},
		{"code", func(r *core.AlarmRule) { r.Conditions[0].Code = "SPEED" }, "conditions[0].code"},
		{"op", func(r *core.AlarmRule) { r.Conditions[0].Op = "=~" }, "conditions[0].op"},
		{"battery range", func(r *core.AlarmRule) { r.Conditions[0].Value = "101" }, "conditions[0].value"},
		{"temperature text", func(r *core.AlarmRule) {
			r.Conditions[0] = core.AlarmCondition{Code: core.StateCPUTemperature, Op: ">", Value: "hot"}
		}, "conditions[0].value"},
		{"flag value", func(r *core.AlarmRule) {
			r.Conditions[0] = core.AlarmCondition{Code: core.StateMountLocked, Op: "==", Value: "true"}
		}, "conditions[0].value"},
		{"presence ONLINE", func(r *core.AlarmRule) { r.Conditions[0] = core.AlarmCondition{Presence: core.PresenceOnline} }, "conditions[0].presence"},
		{"both kinds", func(r *core.AlarmRule) { r.Conditions[0].Presence = core.PresenceOffline }, "conditions[0]"},
		{"negative forSeconds", func(r *core.AlarmRule) { r.ForSeconds = -1 }, "forSeconds"},
		{"forSeconds over a day", func(r *core.AlarmRule) { r.ForSeconds = 86401 }, "forSeconds"},
		{"too many mounts", func(r *core.AlarmRule) { r.MountUIDs = many }, "mountUids"},
		{"bad uid", func(r *core.AlarmRule) { r.MountUIDs = []string{"a b"} }, "mountUids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			r.Conditions = slices.Clone(ok.Conditions)
			tc.edit(&r)
			err := core.ValidateAlarmRule(r)
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var e *core.Error
			if !asError(err, &e) || e.Code != core.CodeValidation || !slices.ContainsFunc(e.Fields, func(f core.FieldError) bool { return f.Field == tc.field }) {
				t.Fatalf("err %v, want a failure on %s", err, tc.field)
			}
		})
	}
	for i, in := range core.SuggestedAlarmRules() {
		r := core.AlarmRule{Name: *in.Name, Severity: core.Severity(*in.Severity), Conditions: *in.Conditions, ForSeconds: *in.ForSeconds, MountUIDs: *in.MountUIDs}
		if err := core.ValidateAlarmRule(r); err != nil {
			t.Errorf("suggested rule %d: %v", i, err)
		}
	}
	if n := len(core.SuggestedAlarmRules()); n != 4 {
		t.Errorf("%d suggested rules", n)
	}
}

// TestAlarmAccess: owners manage rules and acknowledge; maintainers read
// alarms; restricted tokens with mounts see neither alarms nor their events.
func TestAlarmAccess(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	alarms := core.NewAlarmService(core.AlarmDeps{Store: f.store, Mounts: f.svc, Waker: f.meter,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	alarms.SetClock(f.clock.Now)
	maintainer := core.Principal{AccountID: f.owner.AccountID, ClientID: "maint",
		Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{}, Scopes: []string{}}}
	name, sev := "low", "WARNING"
	conds := []core.AlarmCondition{{Code: core.StateBatteryLevel, Op: "<", Value: "20"}}
	in := core.AlarmRuleInput{Name: &name, Severity: &sev, Conditions: &conds}
	for _, p := range []core.Principal{maintainer, f.rider} {
		if _, err := alarms.CreateRule(ctx, p, in); core.ErrorCode(err) != core.CodeForbidden {
			t.Fatalf("create by %s: %v", p.ClientID, err)
		}
		if _, _, err := alarms.ListRules(ctx, p, core.Page{CurrentPage: 1, PageSize: 10}); core.ErrorCode(err) != core.CodeForbidden {
			t.Fatalf("list rules by %s: %v", p.ClientID, err)
		}
		if _, err := alarms.Acknowledge(ctx, p, "alm_x"); core.ErrorCode(err) != core.CodeForbidden {
			t.Fatalf("acknowledge by %s: %v", p.ClientID, err)
		}
	}
	if _, _, err := alarms.ListAlarms(ctx, f.rider, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("rider lists alarms: %v", err)
	}
	if _, err := alarms.CreateRule(ctx, f.owner, in); err != nil {
		t.Fatal(err)
	}
	f.associate(t, "M1", "")
	if _, err := f.svc.ReportStates(ctx, f.owner, "M1", []core.StateInput{{Code: "BATTERY_LEVEL", Value: "5",
		OccurredAt: f.clock.Now(), HasOccurredAt: true}}, nil); err != nil {
		t.Fatal(err)
	}
	list, _, err := alarms.ListAlarms(ctx, maintainer, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("maintainer lists %+v, %v", list, err)
	}
	if _, _, err := alarms.ListAlarms(ctx, f.other, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); err != nil {
		t.Fatal(err)
	} else if l, _, _ := alarms.ListAlarms(ctx, f.other, core.AlarmFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); len(l) != 0 {
		t.Fatalf("another account sees %+v", l)
	}
	events := core.NewEventService(core.NewEventFeed(f.store, f.meter, slog.New(slog.DiscardHandler)), f.store, f.svc, slog.New(slog.DiscardHandler))
	types := func(p core.Principal) []core.EventType {
		page, err := events.Events(ctx, p, core.EventsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []core.EventType
		for _, e := range page.Events {
			out = append(out, e.Type)
		}
		return out
	}
	if got := types(f.owner); !slices.Contains(got, core.EventAlarmRaised) {
		t.Fatalf("owner's events %v", got)
	}
	if got := types(f.rider); slices.Contains(got, core.EventAlarmRaised) || !slices.Contains(got, core.EventStatesReported) {
		t.Fatalf("rider's events %v", got)
	}
	page, err := events.Events(ctx, f.rider, core.EventsRequest{Types: []core.EventType{core.EventAlarmRaised}})
	if err != nil || len(page.Events) != 0 {
		t.Fatalf("rider asking for ALARM_RAISED: %+v, %v", page.Events, err)
	}
}

// TestLastSeenAt: reports and receipt uploads of the association move
// lastSeenAt, duplicates included; what is older than the offline
// threshold does not; presence flips exactly at the lapse.
func TestLastSeenAt(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	alarms := core.NewAlarmService(core.AlarmDeps{Store: f.store, Mounts: f.svc, Waker: f.meter,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), OfflineAfter: core.OfflineAfter(10 * time.Minute)})
	alarms.SetClock(f.clock.Now)
	f.associate(t, "M1", "")
	seen := func() (time.Time, core.Presence) {
		t.Helper()
		m, err := f.svc.Mount(ctx, f.owner, "M1")
		if err != nil {
			t.Fatal(err)
		}
		return m.LastSeenAt, m.Presence
	}
	if at, p := seen(); !at.IsZero() || p != core.PresenceUnknown {
		t.Fatalf("before anything: %s %s", at, p)
	}
	report := func(occurred time.Time) {
		t.Helper()
		if _, err := f.svc.ReportStates(ctx, f.owner, "M1", []core.StateInput{{Code: "BATTERY_LEVEL", Value: "50",
			OccurredAt: occurred, HasOccurredAt: true}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	first := f.clock.Now()
	report(first)
	if at, p := seen(); !at.Equal(first) || p != core.PresenceOnline {
		t.Fatalf("after a report: %s %s", at, p)
	}
	f.clock.Advance(time.Minute)
	report(first) // a duplicate: still heard
	if at, _ := seen(); !at.Equal(first.Add(time.Minute)) {
		t.Fatalf("a duplicate did not count: %s", at)
	}
	f.clock.Advance(time.Minute)
	report(f.clock.Now().Add(-11 * time.Minute)) // a late queue: not heard
	if at, _ := seen(); !at.Equal(first.Add(time.Minute)) {
		t.Fatalf("a late report counted: %s", at)
	}
	// A receipt upload is heard too.
	c := f.query(t, "M1")
	f.clock.Advance(time.Minute)
	if _, err := f.svc.UploadReceipts(ctx, f.owner, "M1", []core.ReceiptInput{f.receipt("M1", c.ID, "EXECUTED", "", 1, false)}); err != nil {
		t.Fatal(err)
	}
	last := f.clock.Now()
	if at, _ := seen(); !at.Equal(last) {
		t.Fatalf("a receipt did not count: %s", at)
	}
	f.clock.Advance(10*time.Minute - time.Millisecond)
	if _, p := seen(); p != core.PresenceOnline {
		t.Fatalf("before the lapse: %s", p)
	}
	f.clock.Advance(time.Millisecond)
	if _, p := seen(); p != core.PresenceOffline {
		t.Fatalf("at the lapse: %s", p)
	}
	if n := len(f.events(t, core.EventMountOffline)); n != 0 {
		t.Fatalf("MOUNT_OFFLINE before a sweep: %d", n)
	}
	if _, err := alarms.SweepAlarms(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := f.events(t, core.EventMountOffline); len(ev) != 1 || !ev[0].OccurredAt.Equal(last.Add(10*time.Minute)) {
		t.Fatalf("MOUNT_OFFLINE %+v", ev)
	}
	f.clock.Advance(time.Minute)
	report(f.clock.Now())
	if ev := f.events(t, core.EventMountOnline); len(ev) != 1 || !ev[0].OccurredAt.Equal(f.clock.Now()) {
		t.Fatalf("MOUNT_ONLINE %+v", ev)
	}
}
