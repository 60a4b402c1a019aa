package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

type alarmEvent struct {
	Type  string    `json:"type"`
	UID   string    `json:"uid"`
	Alarm *gqlAlarm `json:"alarm"`
	Mount struct {
		Presence string `json:"presence"`
	} `json:"mount"`
}

// TestGraphQLAlarms: presence, alarm rules and alarms through GraphQL on
// both backends, with REST's rights and error codes: a rule created, a
// report raising its alarm (live on the owner's mountEvents, never on a
// rider's), the alarm listed and filtered, acknowledged (idempotent, still
// ACTIVE), cleared by a report; other accounts' rules and alarms are not
// found; restricted tokens refused as REST refuses them.
func TestGraphQLAlarms(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			m1, m2, quiet := uniqueUID("AL1"), uniqueUID("AL2"), uniqueUID("ALQ")
			a.associated(t, m1)
			a.associated(t, m2)
			a.associated(t, quiet)
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+m1)}
			maintainer := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted")}

			// Presence: UNKNOWN and no lastSeenAt before any report.
			type presence struct {
				LastSeenAt *string `json:"lastSeenAt"`
				Presence   string  `json:"presence"`
			}
			mountQ := `query($uid: ID!) { mount(uid: $uid) { lastSeenAt presence } }`
			if p := field[presence](t, a.gql(t, mountQ, map[string]any{"uid": quiet}), "mount"); p.Presence != "UNKNOWN" || p.LastSeenAt != nil {
				t.Fatalf("a mount never heard from: %+v", p)
			}

			// Invalid rules: VALIDATION_FAILED naming the field, as in REST.
			create := `mutation($in: CreateAlarmRuleInput!) { createAlarmRule(input: $in) { ` + ruleFields + ` } }`
			for _, tc := range []struct {
				name  string
				input map[string]any
				field string
			}{
				{"no conditions", map[string]any{"name": "x", "severity": "INFO", "conditions": []any{}}, "conditions"},
				{"an unknown op", map[string]any{"name": "x", "severity": "INFO", "conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "=~", "value": "1"}}}, "conditions[0].op"},
				{"a negative duration", map[string]any{"name": "x", "severity": "INFO", "forSeconds": -1, "conditions": []any{map[string]any{"presence": "OFFLINE"}}}, "forSeconds"},
				{"an empty name", map[string]any{"name": "", "severity": "INFO", "conditions": []any{map[string]any{"presence": "OFFLINE"}}}, "name"},
				{"a control character", map[string]any{"name": "x\x1b[2J", "severity": "INFO", "conditions": []any{map[string]any{"presence": "OFFLINE"}}}, "name"},
			} {
				r := a.gql(t, create, map[string]any{"in": tc.input})
				if r.code() != "VALIDATION_FAILED" || !strings.Contains(string(mustJSON(t, r.Errors[0].Extensions)), `"`+tc.field) {
					t.Errorf("%s: %+v", tc.name, r.Errors)
				}
			}

			// The suggested rules are offered, and each is a valid rule.
			suggested := field[[]gqlRule](t, a.gql(t, `{ suggestedAlarmRules { name severity conditions { code op value presence } forSeconds } }`, nil), "suggestedAlarmRules")
			if len(suggested) == 0 {
				t.Fatal("no suggested rules")
			}
			if r := b.gql(t, `{ alarmRules { rules { id } pagination { totalItems } } }`, nil); !strings.Contains(string(r.Data), `"totalItems":0`) {
				t.Fatalf("B's rules before any: %s %+v", r.Data, r.Errors)
			}
			for _, s := range suggested {
				conds := []map[string]any{}
				for _, c := range s.Conditions {
					if c.Presence != nil {
						conds = append(conds, map[string]any{"presence": *c.Presence})
					} else {
						conds = append(conds, map[string]any{"code": *c.Code, "op": *c.Op, "value": *c.Value})
					}
				}
				got := field[gqlRule](t, b.gql(t, create, map[string]any{"in": map[string]any{"name": s.Name, "severity": s.Severity,
					"forSeconds": s.ForSeconds, "conditions": conds}}), "createAlarmRule")
				if got.Name != s.Name || !got.Enabled || len(got.MountUIDs) != 0 {
					t.Fatalf("created from %+v: %+v", s, got)
				}
			}

			// Subscribers: the owner sees the alarm events, the rider never
			// does. Primed before A has a rule (priming reports any battery
			// level), then the battery set well above the rule's threshold.
			events := `subscription($uids: [ID!]) { mountEvents(uids: $uids) { type uid mount { uid batteryLevel presence } alarm { ` + alarmFields + ` } } }`
			owner, riding := in.wsReady(t, a.token), in.wsReady(t, rider.token)
			owner.Subscribe("o", events, map[string]any{"uids": []string{m1}})
			riding.Subscribe("r", events, map[string]any{"uids": []string{m1}})
			prime(t, a, m1, sub{owner, "o", "mountEvents"}, sub{riding, "r", "mountEvents"})
			a.report(t, m1, entry("BATTERY_LEVEL", "60", time.Now()))
			for _, c := range []sub{{owner, "o", "mountEvents"}, {riding, "r", "mountEvents"}} {
				if e := nextData[alarmEvent](t, c.c, c.id, c.field); e.Type != "STATES_REPORTED" {
					t.Fatalf("%s: %+v", c.id, e)
				}
			}

			// A rule of A.
			rule := field[gqlRule](t, a.gql(t, create, map[string]any{"in": map[string]any{"name": "Battery low", "severity": "CRITICAL",
				"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}}}), "createAlarmRule")
			if rule.ID == "" || rule.Severity != "CRITICAL" || rule.ForSeconds != 0 || !rule.Enabled || len(rule.Conditions) != 1 ||
				*rule.Conditions[0].Code != "BATTERY_LEVEL" || *rule.Conditions[0].Op != "<" || *rule.Conditions[0].Value != "20" || rule.Conditions[0].Presence != nil {
				t.Fatalf("created %+v", rule)
			}
			if got := field[gqlRule](t, a.gql(t, `query($id: ID!) { alarmRule(id: $id) { `+ruleFields+` } }`, map[string]any{"id": rule.ID}), "alarmRule"); got.Name != "Battery low" {
				t.Fatalf("alarmRule %+v", got)
			}
			page := field[struct {
				Rules      []gqlRule
				Pagination struct{ TotalItems int }
			}](t, a.gql(t, `{ alarmRules(pageSize: 5) { rules { id name } pagination { totalItems } } }`, nil), "alarmRules")
			if page.Pagination.TotalItems != 1 || page.Rules[0].ID != rule.ID {
				t.Fatalf("alarmRules %+v", page)
			}

			// Another account's rule: not found, whatever is asked of it.
			for _, q := range []string{
				`query($id: ID!) { alarmRule(id: $id) { id } }`,
				`mutation($id: ID!) { updateAlarmRule(id: $id, input: {enabled: false}) { id } }`,
				`mutation($id: ID!) { deleteAlarmRule(id: $id) }`,
			} {
				if r := b.gql(t, q, map[string]any{"id": rule.ID}); r.code() != "ALARM_RULE_NOT_FOUND" {
					t.Errorf("B: %s: %+v", q, r.Errors)
				}
			}
			// Restricted tokens manage no rules; a rider reads no alarms.
			for _, tc := range []struct {
				who   fleet
				query string
				code  string
			}{
				{rider, `{ alarmRules { rules { id } } }`, "FORBIDDEN"},
				{maintainer, `{ alarmRules { rules { id } } }`, "FORBIDDEN"},
				{maintainer, `{ suggestedAlarmRules { name } }`, "FORBIDDEN"},
				{maintainer, `mutation { createAlarmRule(input: {name: "x", severity: INFO, conditions: [{presence: OFFLINE}]}) { id } }`, "FORBIDDEN"},
				{rider, `{ alarms { alarms { id } } }`, "FORBIDDEN"},
			} {
				if r := tc.who.gql(t, tc.query, nil); r.code() != tc.code {
					t.Errorf("%s: %+v, want %s", tc.query, r.Errors, tc.code)
				}
			}

			// A report below the threshold raises an alarm, in the request.
			a.report(t, m1, entry("BATTERY_LEVEL", "15", time.Now()))
			active := `query($s: AlarmState, $sev: AlarmSeverity, $m: ID, $r: ID) { alarms(state: $s, severity: $sev, mountUid: $m, ruleId: $r) { alarms { ` + alarmFields + ` } pagination { totalItems } } }`
			type alarmPage struct {
				Alarms     []gqlAlarm
				Pagination struct{ TotalItems int }
			}
			list := field[alarmPage](t, a.gql(t, active, map[string]any{"s": "ACTIVE"}), "alarms")
			if list.Pagination.TotalItems != 1 {
				t.Fatalf("active alarms %+v", list)
			}
			alarm := list.Alarms[0]
			if alarm.RuleID != rule.ID || alarm.RuleName != "Battery low" || alarm.UID != m1 || alarm.Severity != "CRITICAL" || alarm.State != "ACTIVE" ||
				alarm.RaisedAt == "" || alarm.ClearedAt != nil || alarm.AcknowledgedAt != nil || alarm.AcknowledgedBy != nil || alarm.Values["BATTERY_LEVEL"] != "15" {
				t.Fatalf("the alarm %+v", alarm)
			}
			// The owner's subscription: the report, then the alarm.
			var raised *alarmEvent
			for raised == nil {
				e := nextData[alarmEvent](t, owner, "o", "mountEvents")
				if e.Type == "ALARM_RAISED" {
					raised = &e
				} else if e.Type != "STATES_REPORTED" {
					t.Fatalf("owner's event %+v", e)
				}
			}
			if raised.UID != m1 || raised.Alarm == nil || raised.Alarm.ID != alarm.ID || raised.Alarm.Values["BATTERY_LEVEL"] != "15" || raised.Mount.Presence != "ONLINE" {
				t.Fatalf("ALARM_RAISED %+v", raised)
			}

			// Filters.
			for _, tc := range []struct {
				vars map[string]any
				want int
			}{
				{map[string]any{"sev": "CRITICAL"}, 1}, {map[string]any{"sev": "WARNING"}, 0},
				{map[string]any{"m": m1}, 1}, {map[string]any{"m": m2}, 0},
				{map[string]any{"r": rule.ID}, 1}, {map[string]any{"s": "CLEARED"}, 0},
			} {
				if got := field[alarmPage](t, a.gql(t, active, tc.vars), "alarms"); got.Pagination.TotalItems != tc.want {
					t.Errorf("alarms %v: %d, want %d", tc.vars, got.Pagination.TotalItems, tc.want)
				}
			}
			// A state or severity outside the enum: GraphQL's own validation.
			for _, body := range []map[string]any{
				{"query": `{ alarms(state: OPEN) { alarms { id } } }`},
				{"query": active, "variables": map[string]any{"sev": "FATAL"}},
			} {
				res, raw := in.call(http.MethodPost, "/graphql", a.token, body)
				if r := decode[gqlResponse](t, raw); res.StatusCode != http.StatusUnprocessableEntity || r.code() != "GRAPHQL_VALIDATION_FAILED" {
					t.Errorf("%v: %d %s", body, res.StatusCode, raw)
				}
			}
			// A maintainer reads them; B does not see A's.
			if got := field[alarmPage](t, maintainer.gql(t, active, nil), "alarms"); got.Pagination.TotalItems != 1 {
				t.Fatalf("the maintainer's alarms %+v", got)
			}
			if got := field[alarmPage](t, b.gql(t, active, map[string]any{"m": m1}), "alarms"); got.Pagination.TotalItems != 0 {
				t.Fatalf("B's alarms of A's mount %+v", got)
			}

			// Acknowledge: owners only; another account's alarm is not found.
			ack := `mutation($id: ID!) { acknowledgeAlarm(id: $id) { ` + alarmFields + ` } }`
			for _, tc := range []struct {
				who  fleet
				id   string
				code string
			}{
				{maintainer, alarm.ID, "FORBIDDEN"}, {rider, alarm.ID, "FORBIDDEN"},
				{b, alarm.ID, "ALARM_NOT_FOUND"}, {a, "no-such-alarm", "ALARM_NOT_FOUND"},
			} {
				if r := tc.who.gql(t, ack, map[string]any{"id": tc.id}); r.code() != tc.code {
					t.Errorf("acknowledge %s: %+v, want %s", tc.id, r.Errors, tc.code)
				}
			}
			acked := field[gqlAlarm](t, a.gql(t, ack, map[string]any{"id": alarm.ID}), "acknowledgeAlarm")
			if acked.State != "ACTIVE" || acked.AcknowledgedAt == nil || acked.AcknowledgedBy == nil || *acked.AcknowledgedBy == "" {
				t.Fatalf("acknowledged %+v", acked)
			}
			again := field[gqlAlarm](t, a.gql(t, ack, map[string]any{"id": alarm.ID}), "acknowledgeAlarm")
			if *again.AcknowledgedAt != *acked.AcknowledgedAt || again.State != "ACTIVE" {
				t.Fatalf("acknowledged again %+v, first %+v", again, acked)
			}
			// Still low: no second alarm for the same episode.
			a.report(t, m1, entry("BATTERY_LEVEL", "14", time.Now()))
			// Back up: cleared.
			a.report(t, m1, entry("BATTERY_LEVEL", "60", time.Now()))
			cleared := field[alarmPage](t, a.gql(t, active, map[string]any{"r": rule.ID}), "alarms")
			if cleared.Pagination.TotalItems != 1 || cleared.Alarms[0].State != "CLEARED" || cleared.Alarms[0].ClearedAt == nil || cleared.Alarms[0].AcknowledgedAt == nil {
				t.Fatalf("after the battery came back: %+v", cleared)
			}

			// The owner saw ACKNOWLEDGED (once), the reports and CLEARED, in order.
			var types []string
			for len(types) == 0 || types[len(types)-1] != "ALARM_CLEARED" {
				e := nextData[alarmEvent](t, owner, "o", "mountEvents")
				if strings.HasPrefix(e.Type, "ALARM_") && (e.Alarm == nil || e.Alarm.ID != alarm.ID) {
					t.Fatalf("%s about %+v", e.Type, e.Alarm)
				}
				types = append(types, e.Type)
			}
			if got := strings.Join(types, ","); got != "ALARM_ACKNOWLEDGED,STATES_REPORTED,STATES_REPORTED,ALARM_CLEARED" {
				t.Fatalf("the owner's events: %s", got)
			}
			// The rider saw the three reports of its mount and nothing else.
			for i := range 3 {
				if e := nextData[alarmEvent](t, riding, "r", "mountEvents"); e.Type != "STATES_REPORTED" || e.Alarm != nil {
					t.Fatalf("the rider's event %d: %+v", i, e)
				}
			}
			riding.Quiet(300 * time.Millisecond)
			owner.Quiet(100 * time.Millisecond)

			// Presence after reports: ONLINE, heard from now.
			if p := field[presence](t, a.gql(t, mountQ, map[string]any{"uid": m1}), "mount"); p.Presence != "ONLINE" || p.LastSeenAt == nil {
				t.Fatalf("a mount just heard from: %+v", p)
			}

			// Update: disable, name, mounts (an empty list: every mount).
			upd := `mutation($id: ID!, $in: UpdateAlarmRuleInput!) { updateAlarmRule(id: $id, input: $in) { ` + ruleFields + ` } }`
			u := field[gqlRule](t, a.gql(t, upd, map[string]any{"id": rule.ID, "in": map[string]any{"enabled": false, "name": "Battery very low", "mountUids": []string{m1}}}), "updateAlarmRule")
			if u.Enabled || u.Name != "Battery very low" || len(u.MountUIDs) != 1 || u.Severity != "CRITICAL" || len(u.Conditions) != 1 {
				t.Fatalf("updated %+v", u)
			}
			u = field[gqlRule](t, a.gql(t, upd, map[string]any{"id": rule.ID, "in": map[string]any{"mountUids": []string{}}}), "updateAlarmRule")
			if u.Enabled || len(u.MountUIDs) != 0 || u.Name != "Battery very low" {
				t.Fatalf("updated again %+v", u)
			}
			if r := a.gql(t, upd, map[string]any{"id": rule.ID, "in": map[string]any{"forSeconds": 86401}}); r.code() != "VALIDATION_FAILED" {
				t.Fatalf("forSeconds 86401: %+v", r.Errors)
			}

			// Delete: gone, and a second delete is not found.
			del := `mutation($id: ID!) { deleteAlarmRule(id: $id) }`
			if r := a.gql(t, del, map[string]any{"id": rule.ID}); string(r.Data) != `{"deleteAlarmRule":true}` {
				t.Fatalf("delete %s %+v", r.Data, r.Errors)
			}
			if r := a.gql(t, del, map[string]any{"id": rule.ID}); r.code() != "ALARM_RULE_NOT_FOUND" {
				t.Fatalf("delete again %+v", r.Errors)
			}
		})
	}
}
