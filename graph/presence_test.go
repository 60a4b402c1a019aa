package graph

import (
	"testing"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/graph/model"
)

// TestEventMountPresence: an event's mount's presence is the one the log
// computed, else what MOUNT_OFFLINE and MOUNT_ONLINE say, else computed
// from its lastSeenAt at the event's occurredAt.
func TestEventMountPresence(t *testing.T) {
	r := &Resolver{OfflineAfter: core.OfflineAfter(15 * time.Minute), Cursors: core.NewCursorCodec([32]byte{1})}
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		e    core.Event
		want model.Presence
	}{
		{"computed by the log", core.Event{Type: core.EventStatesReported, Mount: core.Mount{Presence: core.PresenceOffline, LastSeenAt: at}}, model.PresenceOffline},
		{"never heard from", core.Event{Type: core.EventStatesReported}, model.PresenceUnknown},
		{"heard within the threshold", core.Event{Type: core.EventStatesReported, Mount: core.Mount{LastSeenAt: at.Add(-14 * time.Minute)}}, model.PresenceOnline},
		{"at the lapse", core.Event{Type: core.EventAlarmRaised, Mount: core.Mount{LastSeenAt: at.Add(-15 * time.Minute)}}, model.PresenceOffline},
		{"MOUNT_OFFLINE without lastSeenAt", core.Event{Type: core.EventMountOffline}, model.PresenceOffline},
		{"MOUNT_ONLINE without lastSeenAt", core.Event{Type: core.EventMountOnline}, model.PresenceOnline},
	} {
		tc.e.OccurredAt = at
		if got := r.toMountEvent(tc.e, true).Mount.Presence; got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestAlarmConversions: rules and alarms as GraphQL shows them, and a
// rule's input as core takes it (a list left out stays nil; an empty one
// is empty).
func TestAlarmConversions(t *testing.T) {
	rule := toAlarmRule(core.AlarmRule{ID: "r1", Name: "n", Severity: core.SeverityWarning, Conditions: []core.AlarmCondition{
		{Code: core.StateBatteryLevel, Op: "<", Value: "20"}, {Presence: core.PresenceOffline}}})
	if len(rule.MountUids) != 0 || rule.MountUids == nil || *rule.Conditions[0].Code != "BATTERY_LEVEL" || rule.Conditions[0].Presence != nil ||
		rule.Conditions[1].Code != nil || rule.Conditions[1].Value != nil || *rule.Conditions[1].Presence != model.PresenceOffline {
		t.Fatalf("rule %+v", rule)
	}
	a := toAlarm(core.Alarm{ID: "a1", State: core.AlarmActive, Values: map[string]string{"BATTERY_LEVEL": "15"}})
	if a.Values["BATTERY_LEVEL"] != "15" || a.ClearedAt != nil || a.AcknowledgedBy != nil || a.AcknowledgedAt != nil {
		t.Fatalf("alarm %+v", a)
	}
	off := model.PresenceOffline
	in := alarmRuleInput(nil, nil, []model.AlarmConditionInput{{Presence: &off}}, nil, []string{}, nil)
	if in.Name != nil || in.Severity != nil || in.MountUIDs == nil || len(*in.MountUIDs) != 0 || (*in.Conditions)[0].Presence != core.PresenceOffline {
		t.Fatalf("input %+v", in)
	}
	if in := alarmRuleInput(nil, nil, nil, nil, nil, nil); in.Conditions != nil || in.MountUIDs != nil {
		t.Fatalf("empty input %+v", in)
	}
}
