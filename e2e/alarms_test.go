package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
)

// alarmEventView is an event with the alarm of ALARM_* events.
type alarmEventView struct {
	ID    string     `json:"id"`
	Type  string     `json:"type"`
	UID   string     `json:"uid"`
	Alarm *alarmView `json:"alarm"`
}

// TestAlarmRulesAPI covers docs/api.md, "Presence and alarms: endpoints",
// on both backends: presence on the Mount, rule CRUD, bad input (always a
// 4xx naming the field, never a 500), rights of riders, maintainers and
// other accounts.
func TestAlarmRulesAPI(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			uid := uniqueUID("AL")
			a.associated(t, uid)

			// Presence: UNKNOWN and null before any report, ONLINE after one.
			if m := a.get(t, uid); m.Presence != "UNKNOWN" || m.LastSeenAt != nil {
				t.Fatalf("before any report: presence %q, lastSeenAt %v", m.Presence, m.LastSeenAt)
			}
			a.report(t, uid, entry("BATTERY_LEVEL", "80", time.Now().Add(-time.Minute)))
			if m := a.get(t, uid); m.Presence != "ONLINE" || m.LastSeenAt == nil {
				t.Fatalf("after a report: presence %q, lastSeenAt %v", m.Presence, m.LastSeenAt)
			}

			rule := a.createRule(t, lowBattery(uid))
			if rule.ID == "" || rule.Name != "Battery low" || rule.Severity != "WARNING" || !rule.Enabled || rule.ForSeconds != 0 ||
				!slices.Equal(rule.MountUIDs, []string{uid}) || len(rule.Conditions) != 1 ||
				rule.Conditions[0] != (client.AlarmCondition{Code: "BATTERY_LEVEL", Op: "<", Value: "20"}) || rule.CreatedAt == "" {
				t.Fatalf("created %+v", rule)
			}
			offline := a.createRule(t, map[string]any{"name": "Offline", "severity": "CRITICAL", "forSeconds": 600,
				"conditions": []any{map[string]any{"presence": "OFFLINE"}}})
			if len(offline.MountUIDs) != 0 || offline.MountUIDs == nil || offline.Conditions[0] != (client.AlarmCondition{Presence: "OFFLINE"}) || offline.ForSeconds != 600 {
				t.Fatalf("created %+v", offline)
			}
			if got := decode[alarmRuleView](t, a.ok(t, http.MethodGet, "/api/v1/alarm-rules/"+rule.ID, nil)); got.ID != rule.ID || got.Name != rule.Name {
				t.Fatalf("get %+v", got)
			}
			list := decode[struct {
				Rules      []alarmRuleView `json:"rules"`
				Pagination map[string]int  `json:"pagination"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/alarm-rules", nil))
			if len(list.Rules) != 2 || list.Pagination["totalItems"] != 2 {
				t.Fatalf("list %+v", list)
			}
			patched := decode[alarmRuleView](t, a.ok(t, http.MethodPatch, "/api/v1/alarm-rules/"+offline.ID,
				map[string]any{"name": "Gone quiet", "enabled": false}))
			if patched.Name != "Gone quiet" || patched.Enabled || patched.Severity != "CRITICAL" || patched.ForSeconds != 600 {
				t.Fatalf("patched %+v", patched)
			}
			if list := decode[struct{ Rules []alarmRuleView }](t, a.ok(t, http.MethodGet, "/api/v1/alarm-rules?pageSize=1&currentPage=2", nil)); len(list.Rules) != 1 {
				t.Fatalf("page 2 of 1: %+v", list)
			}

			// The suggested rules are in POST's form: the first one creates as it is.
			suggested := decode[struct {
				Rules []map[string]any `json:"rules"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/alarm-rules/suggested", nil))
			if len(suggested.Rules) == 0 {
				t.Fatal("no suggested rules")
			}
			for _, s := range suggested.Rules {
				if _, has := s["id"]; has || s["name"] == "" || len(s["conditions"].([]any)) == 0 {
					t.Fatalf("suggested %+v", s)
				}
			}
			a.noContent(t, http.MethodDelete, "/api/v1/alarm-rules/"+a.createRule(t, suggested.Rules[0]).ID, nil)

			// Bad bodies: each a 400 naming the field, never a 500.
			cond := func(kv ...any) []any {
				c := map[string]any{}
				for i := 0; i < len(kv); i += 2 {
					c[kv[i].(string)] = kv[i+1]
				}
				return []any{c}
			}
			valid := lowBattery(uid)
			with := func(k string, v any) map[string]any {
				out := map[string]any{}
				for kk, vv := range valid {
					out[kk] = vv
				}
				if v == nil {
					delete(out, k)
				} else {
					out[k] = v
				}
				return out
			}
			eleven := make([]any, 11)
			for i := range eleven {
				eleven[i] = map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": fmt.Sprint(i)}
			}
			for i, c := range []struct {
				body  any
				field string
			}{
				{`{`, ""},
				{`[]`, ""},
				{`{} {}`, ""},
				{map[string]any{}, ""},
				{with("colour", "red"), "colour"},
				{with("name", ""), "name"},
				{with("name", nil), "name"},
				{with("name", 7), "name"},
				{with("name", "low\x1b[2Jbattery"), "name"}, // control characters would reach terminals
				{with("name", "low\nbattery"), "name"},
				{with("severity", "LOUD"), "severity"},
				{with("severity", nil), "severity"},
				{with("conditions", nil), "conditions"},
				{with("conditions", []any{}), "conditions"},
				{with("conditions", eleven), "conditions"},
				{with("conditions", "BATTERY_LEVEL<20"), "conditions"},
				{with("conditions", []any{"BATTERY_LEVEL<20"}), "conditions[0]"},
				{with("conditions", cond("code", "BATTERY_LEVEL", "op", "<>", "value", "20")), "conditions[0].op"},
				{with("conditions", cond("code", "BATTERY_LEVEL", "value", "20")), "conditions[0].op"},
				{with("conditions", cond("code", "VOLTAGE", "op", "<", "value", "20")), "conditions[0].code"},
				{with("conditions", cond("code", "BATTERY_LEVEL", "op", "<", "value", 20)), "conditions[0].value"},
				{with("conditions", cond("code", "BATTERY_LEVEL", "op", "<", "value", "low")), "conditions[0].value"},
				{with("conditions", cond("code", "MOUNT_LOCKED", "op", "==", "value", "2")), "conditions[0].value"},
				{with("conditions", cond("presence", "ONLINE")), "conditions[0].presence"},
				{with("conditions", cond("presence", "OFFLINE", "code", "BATTERY_LEVEL")), ""},
				{with("conditions", cond("code", "BATTERY_LEVEL", "op", "<", "value", "20", "colour", "red")), "conditions[0].colour"},
				{with("forSeconds", -1), "forSeconds"},
				{with("forSeconds", 86401), "forSeconds"},
				{with("forSeconds", "10"), "forSeconds"},
				{with("forSeconds", 1.5), "forSeconds"},
				{with("mountUids", "x"), "mountUids"},
				{with("enabled", "yes"), "enabled"},
			} {
				res, raw := a.call(http.MethodPost, "/api/v1/alarm-rules", c.body)
				p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
				if c.field != "" && !slices.ContainsFunc(p.Errors, func(e struct {
					Field   string `json:"field"`
					Message string `json:"message"`
				}) bool {
					return e.Field == c.field
				}) {
					t.Errorf("bad body %d %v: errors %+v, want field %s", i, c.body, p.Errors, c.field)
				}
			}
			for _, body := range []any{map[string]any{"conditions": []any{}}, map[string]any{"forSeconds": -5},
				map[string]any{"severity": "LOUD"}, map[string]any{"colour": "red"}, `[]`} {
				res, raw := a.call(http.MethodPatch, "/api/v1/alarm-rules/"+rule.ID, body)
				wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			}
			if got := decode[alarmRuleView](t, a.ok(t, http.MethodGet, "/api/v1/alarm-rules/"+rule.ID, nil)); got.Name != rule.Name || len(got.Conditions) != 1 {
				t.Fatalf("a refused PATCH changed the rule: %+v", got)
			}
			for _, q := range []string{"state=OPEN", "severity=LOUD", "pageSize=0", "colour=red"} {
				res, raw := a.call(http.MethodGet, "/api/v1/alarms?"+q, nil)
				wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			}

			// Rights: rules are the owner's; alarms the owner's and maintainer's.
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)}
			maintainer := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted")}
			for _, c := range []struct {
				who          fleet
				method, path string
				body         any
				status       int
				code         string
			}{
				{rider, http.MethodPost, "/api/v1/alarm-rules", lowBattery(uid), 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/alarm-rules", nil, 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/alarm-rules/" + rule.ID, nil, 403, "FORBIDDEN"},
				{rider, http.MethodPatch, "/api/v1/alarm-rules/" + rule.ID, map[string]any{"enabled": false}, 403, "FORBIDDEN"},
				{rider, http.MethodDelete, "/api/v1/alarm-rules/" + rule.ID, nil, 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/alarm-rules/suggested", nil, 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/alarms", nil, 403, "FORBIDDEN"},
				{rider, http.MethodGet, "/api/v1/alarms?mountUid=" + uid, nil, 403, "FORBIDDEN"},
				{maintainer, http.MethodPost, "/api/v1/alarm-rules", lowBattery(uid), 403, "FORBIDDEN"},
				{maintainer, http.MethodGet, "/api/v1/alarm-rules", nil, 403, "FORBIDDEN"},
				{maintainer, http.MethodDelete, "/api/v1/alarm-rules/" + rule.ID, nil, 403, "FORBIDDEN"},
				{maintainer, http.MethodGet, "/api/v1/alarms", nil, 200, ""},
				{b, http.MethodGet, "/api/v1/alarm-rules/" + rule.ID, nil, 404, "ALARM_RULE_NOT_FOUND"},
				{b, http.MethodPatch, "/api/v1/alarm-rules/" + rule.ID, map[string]any{"enabled": false}, 404, "ALARM_RULE_NOT_FOUND"},
				{b, http.MethodDelete, "/api/v1/alarm-rules/" + rule.ID, nil, 404, "ALARM_RULE_NOT_FOUND"},
				{a, http.MethodGet, "/api/v1/alarm-rules/nope", nil, 404, "ALARM_RULE_NOT_FOUND"},
				{a, http.MethodPost, "/api/v1/alarms/nope/acknowledge", nil, 404, "ALARM_NOT_FOUND"},
			} {
				res, raw := c.who.call(c.method, c.path, c.body)
				if c.code == "" {
					if res.StatusCode != c.status {
						t.Errorf("%s %s: %d %s, want %d", c.method, c.path, res.StatusCode, raw, c.status)
					}
					continue
				}
				wantProblem(t, res, raw, c.status, c.code)
			}
			if got := decode[struct{ Rules []alarmRuleView }](t, b.ok(t, http.MethodGet, "/api/v1/alarm-rules", nil)); len(got.Rules) != 0 {
				t.Fatalf("B lists A's rules: %+v", got.Rules)
			}

			a.noContent(t, http.MethodDelete, "/api/v1/alarm-rules/"+offline.ID, nil)
			res, raw := a.call(http.MethodGet, "/api/v1/alarm-rules/"+offline.ID, nil)
			wantProblem(t, res, raw, 404, "ALARM_RULE_NOT_FOUND")
			res, raw = a.call(http.MethodDelete, "/api/v1/alarm-rules/"+offline.ID, nil)
			wantProblem(t, res, raw, 404, "ALARM_RULE_NOT_FOUND")

			// At most 50 rules per account.
			c := newFleet(in, "C")
			for i := range 50 {
				c.createRule(t, with("name", fmt.Sprintf("rule %d", i)))
			}
			res, raw = c.call(http.MethodPost, "/api/v1/alarm-rules", lowBattery(uid))
			wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
		})
	}
}

// TestAlarmsRaiseClearAcknowledge: a rule raises an alarm in the request
// of the report that makes its conditions true and clears it with the
// report that ends them; acknowledging is idempotent and does not clear;
// deleting a rule clears its alarm; the webhook and the owner's event log
// carry the alarm, a rider's never does; other accounts see nothing.
func TestAlarmsRaiseClearAcknowledge(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")
			uid, other := uniqueUID("AL"), uniqueUID("AL")
			a.associated(t, uid)
			a.associated(t, other)
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uid)}
			maintainer := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted")}

			hooks := newReceiver(t)
			res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": hooks.URL,
				"eventTypes": []string{"ALARM_RAISED", "ALARM_CLEARED", "ALARM_ACKNOWLEDGED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("webhook: %d %s", res.StatusCode, raw)
			}
			hooks.setSecret(decode[webhookView](t, raw).Secret)

			rule := a.createRule(t, lowBattery(uid))
			wide := a.createRule(t, map[string]any{"name": "Battery under 60", "severity": "INFO",
				"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "60"}}})
			now := time.Now()
			a.report(t, uid, entry("BATTERY_LEVEL", "15", now.Add(-3*time.Minute)), entry("MOUNT_LOCKED", "1", now.Add(-3*time.Minute)))
			a.report(t, other, entry("BATTERY_LEVEL", "90", now.Add(-3*time.Minute)))

			// Raised in the report's request: listed at once.
			active := a.alarms(t, url.Values{"state": {"ACTIVE"}, "ruleId": {rule.ID}})
			if len(active.Alarms) != 1 {
				t.Fatalf("after a report of 15: %+v", active)
			}
			alarm := active.Alarms[0]
			if alarm.RuleID != rule.ID || alarm.RuleName != "Battery low" || alarm.UID != uid || alarm.Severity != "WARNING" ||
				alarm.State != "ACTIVE" || alarm.ClearedAt != nil || alarm.AcknowledgedAt != nil || alarm.AcknowledgedBy != nil ||
				alarm.Values["BATTERY_LEVEL"] != "15" || alarm.Values["MOUNT_LOCKED"] != "1" || alarm.RaisedAt == "" {
				t.Fatalf("alarm %+v", alarm)
			}
			if all := a.alarms(t, url.Values{"state": {"ACTIVE"}}); len(all.Alarms) != 2 || all.Pagination["totalItems"] != 2 {
				t.Fatalf("two rules hold on %s, none on %s: %+v", uid, other, all)
			}
			for q, want := range map[string]int{"severity=WARNING": 1, "severity=CRITICAL": 0, "mountUid=" + other: 0,
				"mountUid=" + uid: 2, "state=CLEARED": 0, "ruleId=" + wide.ID: 1} {
				v, _ := url.ParseQuery(q)
				if got := a.alarms(t, v); len(got.Alarms) != want {
					t.Errorf("alarms?%s: %d, want %d", q, len(got.Alarms), want)
				}
			}
			if got := maintainer.alarms(t, nil); len(got.Alarms) != 2 {
				t.Fatalf("the maintainer lists %+v", got)
			}
			if got := b.alarms(t, nil); len(got.Alarms) != 0 {
				t.Fatalf("B lists A's alarms: %+v", got)
			}
			res, raw = b.call(http.MethodPost, "/api/v1/alarms/"+alarm.ID+"/acknowledge", nil)
			wantProblem(t, res, raw, 404, "ALARM_NOT_FOUND")
			res, raw = maintainer.call(http.MethodPost, "/api/v1/alarms/"+alarm.ID+"/acknowledge", nil)
			wantProblem(t, res, raw, 403, "FORBIDDEN")
			res, raw = rider.call(http.MethodPost, "/api/v1/alarms/"+alarm.ID+"/acknowledge", nil)
			wantProblem(t, res, raw, 403, "FORBIDDEN")

			// Acknowledge: idempotent, and the alarm stays ACTIVE.
			acked := decode[alarmView](t, a.ok(t, http.MethodPost, "/api/v1/alarms/"+alarm.ID+"/acknowledge", nil))
			if acked.State != "ACTIVE" || acked.AcknowledgedAt == nil || acked.AcknowledgedBy == nil || *acked.AcknowledgedBy == "" {
				t.Fatalf("acknowledged %+v", acked)
			}
			again := decode[alarmView](t, a.ok(t, http.MethodPost, "/api/v1/alarms/"+alarm.ID+"/acknowledge", nil))
			if *again.AcknowledgedAt != *acked.AcknowledgedAt || *again.AcknowledgedBy != *acked.AcknowledgedBy || again.State != "ACTIVE" {
				t.Fatalf("acknowledged twice: %+v, then %+v", acked, again)
			}

			// A report that ends the conditions clears the alarm; the wider
			// rule still holds. Deleting that rule clears its alarm.
			a.report(t, uid, entry("BATTERY_LEVEL", "50", now.Add(-2*time.Minute)))
			got := a.alarms(t, url.Values{"ruleId": {rule.ID}})
			if len(got.Alarms) != 1 || got.Alarms[0].ID != alarm.ID || got.Alarms[0].State != "CLEARED" || got.Alarms[0].ClearedAt == nil ||
				got.Alarms[0].AcknowledgedAt == nil || got.Alarms[0].Values["BATTERY_LEVEL"] != "15" {
				t.Fatalf("after a report of 50: %+v", got)
			}
			wideAlarms := a.alarms(t, url.Values{"ruleId": {wide.ID}, "state": {"ACTIVE"}})
			if len(wideAlarms.Alarms) != 1 {
				t.Fatalf("the rule under 60: %+v", wideAlarms)
			}
			a.noContent(t, http.MethodDelete, "/api/v1/alarm-rules/"+wide.ID, nil)
			if got := a.alarms(t, url.Values{"state": {"ACTIVE"}}); len(got.Alarms) != 0 {
				t.Fatalf("active after the rule's deletion: %+v", got)
			}
			// The next episode is a new alarm, newest first.
			a.report(t, uid, entry("BATTERY_LEVEL", "12", now.Add(-time.Minute)))
			got = a.alarms(t, url.Values{"ruleId": {rule.ID}})
			if len(got.Alarms) != 2 || got.Alarms[0].ID == alarm.ID || got.Alarms[0].State != "ACTIVE" || got.Alarms[1].ID != alarm.ID {
				t.Fatalf("a second episode: %+v", got)
			}

			// The webhook received every change with its alarm.
			calls := hooks.waitFor(t, "the alarm's events", func(c []webhookCall) bool {
				return slices.ContainsFunc(c, func(c webhookCall) bool {
					return c.Type == "ALARM_CLEARED" && c.Data.Alarm != nil && c.Data.Alarm.ID == alarm.ID
				}) &&
					slices.ContainsFunc(c, func(c webhookCall) bool { return c.Type == "ALARM_ACKNOWLEDGED" }) &&
					slices.ContainsFunc(c, func(c webhookCall) bool {
						return c.Type == "ALARM_RAISED" && c.Data.Alarm != nil && c.Data.Alarm.ID == got.Alarms[0].ID
					})
			})
			raised, acks := 0, 0
			for _, c := range calls {
				if c.Data.Alarm == nil || c.Data.UID != uid || c.Data.Alarm.UID != uid || c.Data.Mount.Presence != "ONLINE" {
					t.Fatalf("a webhook call without its alarm: %+v", c)
				}
				if c.Data.Alarm.ID == alarm.ID {
					switch c.Type {
					case "ALARM_RAISED":
						raised++
						if c.Data.Alarm.State != "ACTIVE" || c.Data.Alarm.Values["BATTERY_LEVEL"] != "15" || c.Data.Alarm.RuleName != "Battery low" {
							t.Errorf("ALARM_RAISED carries %+v", c.Data.Alarm)
						}
					case "ALARM_ACKNOWLEDGED":
						acks++
						if c.Data.Alarm.AcknowledgedAt == nil {
							t.Errorf("ALARM_ACKNOWLEDGED carries %+v", c.Data.Alarm)
						}
					case "ALARM_CLEARED":
						if c.Data.Alarm.State != "CLEARED" {
							t.Errorf("ALARM_CLEARED carries %+v", c.Data.Alarm)
						}
					}
				}
			}
			if raised != 1 || acks != 1 {
				t.Errorf("the first alarm was raised %d and acknowledged %d times in the webhook's calls", raised, acks)
			}

			// The owner's event log has them, filtered by type, with the alarm.
			ownerEvents := decode[struct{ Events []alarmEventView }](t, a.ok(t, http.MethodGet,
				"/api/v1/events?limit=1000&types=ALARM_RAISED,ALARM_CLEARED,ALARM_ACKNOWLEDGED", nil))
			var seen []string
			for _, e := range ownerEvents.Events {
				if e.Alarm == nil || !strings.HasPrefix(e.Type, "ALARM_") {
					t.Fatalf("owner's alarm events: %+v", e)
				}
				seen = append(seen, e.Type)
			}
			for _, want := range []string{"ALARM_RAISED", "ALARM_CLEARED", "ALARM_ACKNOWLEDGED"} {
				if !slices.Contains(seen, want) {
					t.Errorf("the owner's events lack %s: %v", want, seen)
				}
			}
			// A rider with mount items never receives ALARM_*, though it
			// sees its mount's other events.
			for _, q := range []string{"limit=1000", "limit=1000&mountUid=" + uid, "limit=1000&types=ALARM_RAISED,ALARM_CLEARED,ALARM_ACKNOWLEDGED,STATES_REPORTED"} {
				res, raw := rider.call(http.MethodGet, "/api/v1/events?"+q, nil)
				if res.StatusCode != http.StatusOK {
					if res.StatusCode >= 500 {
						t.Fatalf("rider events?%s: %d %s", q, res.StatusCode, raw)
					}
					continue
				}
				riderEvents := decode[struct{ Events []alarmEventView }](t, raw)
				states := 0
				for _, e := range riderEvents.Events {
					if strings.HasPrefix(e.Type, "ALARM_") || e.Alarm != nil {
						t.Fatalf("the rider received %+v", e)
					}
					if e.Type == "STATES_REPORTED" {
						states++
					}
				}
				if states == 0 {
					t.Errorf("rider events?%s: no STATES_REPORTED of its mount either: %+v", q, riderEvents.Events)
				}
			}
		})
	}
}

// TestPresenceOverREST: with MOUNTD_OFFLINE_AFTER at 2 s, a mount heard
// once goes OFFLINE at the lapse (MOUNT_OFFLINE in the event log at that
// instant, a presence rule's alarm raised by the sweep), and the next
// report brings it back (MOUNT_ONLINE, the alarm cleared).
func TestPresenceOverREST(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the sweep")
	}
	t.Parallel() // it waits for the sweep: other waits overlap
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := newConfig(t)
			cfg.OfflineAfter = 2 * time.Second
			in := start(t, cfg)
			a := newFleet(in, "A")
			uid := uniqueUID("PR")
			a.associated(t, uid)
			rule := a.createRule(t, map[string]any{"name": "Quiet", "severity": "CRITICAL", "mountUids": []string{uid},
				"conditions": []any{map[string]any{"presence": "OFFLINE"}}})
			a.report(t, uid, entry("BATTERY_LEVEL", "70", time.Now()))
			m := a.get(t, uid)
			if m.Presence != "ONLINE" || m.LastSeenAt == nil {
				t.Fatalf("after a report: %q %v", m.Presence, m.LastSeenAt)
			}
			seen, err := time.Parse(time.RFC3339Nano, *m.LastSeenAt)
			if err != nil {
				t.Fatal(err)
			}

			// The sweep announces the lapse within 30 s of it.
			var offline *alarmEventView
			deadline := time.Now().Add(45 * time.Second)
			for offline == nil && time.Now().Before(deadline) {
				page := decode[struct {
					Events []struct {
						alarmEventView
						OccurredAt string    `json:"occurredAt"`
						Mount      mountView `json:"mount"`
					} `json:"events"`
				}](t, a.ok(t, http.MethodGet, "/api/v1/events?types=MOUNT_OFFLINE&wait=5&mountUid="+uid, nil))
				for _, e := range page.Events {
					at, _ := time.Parse(time.RFC3339Nano, e.OccurredAt)
					if !at.Equal(seen.Add(cfg.OfflineAfter)) {
						t.Errorf("MOUNT_OFFLINE at %s, want lastSeenAt %s + 2s", e.OccurredAt, *m.LastSeenAt)
					}
					offline = &e.alarmEventView
				}
			}
			if offline == nil {
				t.Fatal("no MOUNT_OFFLINE within 45 s")
			}
			if m := a.get(t, uid); m.Presence != "OFFLINE" || m.LastSeenAt == nil || *m.LastSeenAt != seen.UTC().Format("2006-01-02T15:04:05.000Z") {
				t.Fatalf("after the lapse: %q %v", m.Presence, m.LastSeenAt)
			}
			var raised []alarmView
			for deadline := time.Now().Add(35 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				if raised = a.alarms(t, url.Values{"ruleId": {rule.ID}, "state": {"ACTIVE"}}).Alarms; len(raised) > 0 {
					break
				}
			}
			if len(raised) != 1 || raised[0].UID != uid {
				t.Fatalf("the presence rule's alarm: %+v", raised)
			}

			// Heard again: ONLINE, MOUNT_ONLINE, the alarm cleared in the request.
			a.report(t, uid, entry("BATTERY_LEVEL", "69", time.Now()))
			if m := a.get(t, uid); m.Presence != "ONLINE" {
				t.Fatalf("heard again: %q", m.Presence)
			}
			// An event shows in the log once every older transaction of the
			// (busy, shared) cluster has ended: read until it settles.
			var online struct{ Events []alarmEventView }
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				online = decode[struct{ Events []alarmEventView }](t, a.ok(t, http.MethodGet, "/api/v1/events?types=MOUNT_ONLINE,MOUNT_OFFLINE&mountUid="+uid, nil))
				if len(online.Events) >= 2 || time.Now().After(deadline) {
					break
				}
			}
			if got := len(online.Events); got < 2 || online.Events[0].Type != "MOUNT_OFFLINE" || online.Events[1].Type != "MOUNT_ONLINE" {
				t.Fatalf("presence events: %+v", online.Events)
			}
			if got := a.alarms(t, url.Values{"ruleId": {rule.ID}}).Alarms; len(got) != 1 || got[0].State != "CLEARED" {
				t.Fatalf("after the mount was heard again: %+v", got)
			}
		})
	}
}
