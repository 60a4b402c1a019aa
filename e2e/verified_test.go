package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/protocol"
)

// TestVerifiedValuesOutrankUnsigned (issue 37 item 6, docs/api.md, "The truth from the mount"): an
// owner posts MOUNT_LOCKED=1, HELMET_MOUNTED=1 unsigned, dated 290 s ahead;
// the mount's own signed report "unlocked, helmet out" then decides what
// every reader sees: GET /mounts/{uid}, the fleet filter, GraphQL's
// unverifiedStates, the alarms, and the rollout's requireIdle, which no
// longer offers INSTALL_FIRMWARE. Unsigned entries, newer still, change
// nothing more; the mount's next signed report does. On both backends (the
// latest values are cached in Redis on the second).
func TestVerifiedValuesOutrankUnsigned(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			model, uid := uniqueUID("HV"), uniqueUID("V1")
			in.publish(t, model, "1.0.0", 16)
			in.publish(t, model, "1.1.0", 16)
			d := newDevice(uid)
			a.associate(t, uid, map[string]any{"modelNumber": model, "softwareRevision": "1.0.0", "devicePublicKey": d.publicKey()})
			a.confirm(t, uid)
			res, raw := a.call(http.MethodPost, "/api/v1/alarm-rules", map[string]any{"name": "helmet out", "severity": "WARNING",
				"conditions": []any{map[string]any{"code": "HELMET_MOUNTED", "op": "==", "value": "0"}}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("alarm rule: %d %s", res.StatusCode, raw)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.1.0",
				"phases": []int{100}, "requireIdle": true})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("rollout: %d %s", res.StatusCode, raw)
			}

			type view struct{ locked, helmet, unverified, filtered, alarms, installs string }
			see := func() view {
				t.Helper()
				m := a.get(t, uid)
				show := func(b *bool) string {
					if b == nil {
						return "null"
					}
					if *b {
						return "1"
					}
					return "0"
				}
				v := view{locked: show(m.MountLocked), helmet: show(m.HelmetMounted)}
				g := a.gql(t, `query($uid: ID!) { mount(uid: $uid) { unverifiedStates } }`, map[string]any{"uid": uid})
				var data struct {
					Mount struct{ UnverifiedStates []string } `json:"mount"`
				}
				if len(g.Errors) > 0 || json.Unmarshal(g.Data, &data) != nil {
					t.Fatalf("graphql: %+v %s", g.Errors, g.Data)
				}
				slices.Sort(data.Mount.UnverifiedStates)
				v.unverified = strings.Join(data.Mount.UnverifiedStates, ",")
				for _, f := range []string{"mountLocked = true", "mountLocked = false"} {
					list := decode[struct {
						Mounts []mountView `json:"mounts"`
					}](t, a.ok(t, http.MethodGet, "/api/v1/mounts?filter="+url.QueryEscape(f), nil))
					for _, m := range list.Mounts {
						if m.UID == uid {
							v.filtered += f
						}
					}
				}
				alarms := decode[struct {
					Alarms []map[string]any `json:"alarms"`
				}](t, a.ok(t, http.MethodGet, "/api/v1/alarms?state=ACTIVE&mountUid="+uid, nil))
				v.alarms = strconv.Itoa(len(alarms.Alarms))
				for _, c := range in.pending(t, a.token, uid) {
					v.installs += c.Code
				}
				return v
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			ahead := now.Add(290 * time.Second)
			a.report(t, uid, entry("MOUNT_LOCKED", "1", ahead), entry("HELMET_MOUNTED", "1", ahead))
			// Nothing signed yet: the unsigned values count. (Pending
			// commands are not asked here: a fetch would start the install.)
			if m := a.get(t, uid); m.MountLocked == nil || !*m.MountLocked || m.HelmetMounted == nil || !*m.HelmetMounted {
				t.Fatalf("before any signed report: %+v", m)
			}

			signed := func(locked, helmet string, at time.Time) {
				t.Helper()
				res, raw := a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states", d.signedReport("1.0.0",
					protocol.ReportEntry{Code: "MOUNT_LOCKED", Value: locked, OccurredAt: at},
					protocol.ReportEntry{Code: "HELMET_MOUNTED", Value: helmet, OccurredAt: at}))
				if res.StatusCode != http.StatusOK {
					t.Fatalf("signed report: %d %s", res.StatusCode, raw)
				}
			}
			signed("0", "0", now)
			want := view{locked: "0", helmet: "0", unverified: "", filtered: "mountLocked = false", alarms: "1", installs: ""}
			if got := see(); got != want {
				t.Fatalf("after the signed report: %+v, want %+v", got, want)
			}
			// Unsigned entries newer still change nothing.
			a.report(t, uid, entry("MOUNT_LOCKED", "1", ahead.Add(time.Second)), entry("HELMET_MOUNTED", "1", ahead.Add(time.Second)))
			if got := see(); got != want {
				t.Fatalf("after newer unsigned entries: %+v, want %+v", got, want)
			}
			// The mount's own word moves them.
			signed("1", "1", now.Add(time.Second))
			want = view{locked: "1", helmet: "1", unverified: "", filtered: "mountLocked = true", alarms: "0", installs: "INSTALL_FIRMWARE"}
			if got := see(); got != want {
				t.Fatalf("after the mount's next signed report: %+v, want %+v", got, want)
			}
		})
	}
}

// TestReplayedReportKeepsRevision (issue 37 item 5, docs/api.md, "The truth from the mount"): an old
// signed report relayed again (only duplicates, a lower counter), or one
// uploaded late, no longer sets the mount's softwareRevision back.
func TestReplayedReportKeepsRevision(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			uid := uniqueUID("RP")
			d := newDevice(uid)
			a.associate(t, uid, map[string]any{"softwareRevision": "1.0.0", "devicePublicKey": d.publicKey()})
			a.confirm(t, uid)
			at := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			post := func(body map[string]any) string {
				t.Helper()
				res, raw := a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states", body)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("report: %d %s", res.StatusCode, raw)
				}
				return string(raw)
			}
			old := d.signedReport("1.0.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "90", OccurredAt: at})
			late := d.signedReport("1.0.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "89", OccurredAt: at.Add(time.Second)})
			post(old)
			post(d.signedReport("1.1.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "80", OccurredAt: at.Add(time.Minute)}))
			if m := a.get(t, uid); m.SoftwareRevision != "1.1.0" {
				t.Fatalf("the newer report's revision: %q", m.SoftwareRevision)
			}
			if raw := strings.TrimSpace(post(old)); raw != `{"accepted":0,"duplicates":1}` {
				t.Fatalf("the replay: %s", raw)
			}
			if m := a.get(t, uid); m.SoftwareRevision != "1.1.0" {
				t.Fatalf("a replayed report set the revision back to %q", m.SoftwareRevision)
			}
			post(late)
			if m := a.get(t, uid); m.SoftwareRevision != "1.1.0" {
				t.Fatalf("a late older report set the revision back to %q", m.SoftwareRevision)
			}
		})
	}
}

// TestPartialSignedReportKeepsVerifiedMarks (issue 38 item 2): a mount's
// signed report of all four codes, then a signed report of battery and
// temperature only. The second report's STATES_REPORTED event carries the
// mount as its stored latest values leave it: lock and helmet still
// verified, so unverifiedStates is empty in the log (GraphQL events,
// REST /events) and in a live subscription. On both backends.
func TestPartialSignedReportKeepsVerifiedMarks(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			uid := uniqueUID("PV")
			d := newDevice(uid)
			a.associate(t, uid, map[string]any{"softwareRevision": "1.0.0", "devicePublicKey": d.publicKey()})
			a.confirm(t, uid)
			cursor := field[string](t, a.gql(t, `{ eventCursor }`, nil), "eventCursor")
			c := in.wsReady(t, a.token)
			c.Subscribe("s", `subscription($uids: [ID!], $after: ID) { mountEvents(uids: $uids, after: $after) {
				type uid mount { mountLocked helmetMounted batteryLevel unverifiedStates } } }`,
				map[string]any{"uids": []string{uid}, "after": cursor})
			at := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			for _, report := range []map[string]any{
				d.signedReport("1.0.0", protocol.ReportEntry{Code: "MOUNT_LOCKED", Value: "1", OccurredAt: at},
					protocol.ReportEntry{Code: "HELMET_MOUNTED", Value: "1", OccurredAt: at},
					protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "90", OccurredAt: at},
					protocol.ReportEntry{Code: "CPU_TEMPERATURE", Value: "41.5", OccurredAt: at}),
				d.signedReport("1.0.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "89", OccurredAt: at.Add(time.Second)},
					protocol.ReportEntry{Code: "CPU_TEMPERATURE", Value: "42", OccurredAt: at.Add(time.Second)}),
			} {
				if res, raw := a.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states", report); res.StatusCode != http.StatusOK {
					t.Fatalf("signed report: %d %s", res.StatusCode, raw)
				}
			}
			type eventMount struct {
				MountLocked, HelmetMounted *bool
				BatteryLevel               *int
				UnverifiedStates           []string
			}
			type event struct {
				Type, UID string
				Mount     eventMount
			}
			check := func(where string, e event, battery int) {
				t.Helper()
				if e.Type != "STATES_REPORTED" || e.Mount.MountLocked == nil || !*e.Mount.MountLocked || e.Mount.HelmetMounted == nil ||
					!*e.Mount.HelmetMounted || e.Mount.BatteryLevel == nil || *e.Mount.BatteryLevel != battery || len(e.Mount.UnverifiedStates) != 0 {
					t.Fatalf("%s: %+v (unverifiedStates %v); want locked, helmet in, battery %d, nothing unverified", where, e, e.Mount.UnverifiedStates, battery)
				}
			}
			for _, battery := range []int{90, 89} {
				check("subscription", nextData[event](t, c, "s", "mountEvents"), battery)
			}
			page := decodeField[struct{ Events []event }](t, a.gql(t, `query($uid: ID) { events(mountUid: $uid, types: [STATES_REPORTED]) {
				events { type uid mount { mountLocked helmetMounted batteryLevel unverifiedStates } } } }`, map[string]any{"uid": uid}), "events")
			if len(page.Events) != 2 {
				t.Fatalf("GraphQL events: %+v", page.Events)
			}
			check("GraphQL events", page.Events[1], 89)
			rest := a.events(t, url.Values{"mountUid": {uid}, "types": {"STATES_REPORTED"}})
			if len(rest.Events) != 2 {
				t.Fatalf("REST events: %+v", rest.Events)
			}
			if m := rest.Events[1].Mount; m.MountLocked == nil || !*m.MountLocked || m.HelmetMounted == nil || !*m.HelmetMounted {
				t.Fatalf("REST events' mount: %+v", m)
			}
			c.Quiet(200 * time.Millisecond)
		})
	}
}
