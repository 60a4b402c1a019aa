package e2e

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
)

// Rollouts over the API (docs/api.md, "Rollouts"), on both backends.

func (f fleet) rollout(t *testing.T, id string) rolloutView {
	t.Helper()
	return decode[rolloutView](t, f.ok(t, http.MethodGet, "/api/v1/rollouts/"+id, nil))
}

// checkUpdate asks check-update with token and answers "CODE REVISION".
func (in *instance) checkUpdate(t *testing.T, token string, q url.Values) string {
	t.Helper()
	res, raw := in.call(http.MethodGet, "/api/v1/firmware/check-update?"+q.Encode(), token, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("check-update?%s: %d %s", q.Encode(), res.StatusCode, raw)
	}
	v := decode[struct {
		Code    string       `json:"code"`
		Version *versionView `json:"version"`
	}](t, raw)
	if v.Version == nil {
		return v.Code
	}
	return v.Code + " " + v.Version.SoftwareRevision
}

// TestRolloutsEndToEnd: a rollout over four mounts of a model in two
// phases; the bodies the API refuses; one rollout per model; reads;
// what check-update?mountUid= answers an ELIGIBLE and a PENDING target;
// INSTALL_FIRMWARE asked by hand and offered to a phone; pause, resume
// and cancel and their conflicts; the ROLLOUT_PHASE_OPENED event;
// another account and restricted tokens refused.
func TestRolloutsEndToEnd(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.WebhookAllowPrivate = true // the receivers listen on loopback
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")
			model, otherModel := uniqueUID("HM"), uniqueUID("HX")
			old, _ := in.publish(t, model, "1.0.0", 64)
			target, _ := in.publish(t, model, "1.1.0", 96)
			in.publish(t, model, "1.2.0", 32)
			in.publish(t, model, "0.9.0", 16)
			in.runCLI("firmware", "deprecate", "--model", model, "--revision", "0.9.0")
			in.publish(t, otherModel, "1.1.0", 16)

			uids := []string{uniqueUID("R1"), uniqueUID("R2"), uniqueUID("R3"), uniqueUID("R4")}
			for _, uid := range uids {
				a.associate(t, uid, map[string]any{"modelNumber": model, "softwareRevision": "1.0.0", "devicePublicKey": newDevice(uid).publicKey()})
				a.confirm(t, uid)
			}
			keyless, there, elsewhere := uniqueUID("RK"), uniqueUID("RT"), uniqueUID("RO")
			a.associate(t, keyless, map[string]any{"modelNumber": model}) // no device key: never a target
			a.confirm(t, keyless)
			a.associate(t, there, map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "devicePublicKey": newDevice(there).publicKey()})
			a.confirm(t, there) // already on the revision
			a.associate(t, elsewhere, map[string]any{"modelNumber": otherModel, "devicePublicKey": newDevice(elsewhere).publicKey()})
			a.confirm(t, elsewhere)
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uids[0])
			maintainer := in.token(a.creds, "openid", "sub", audItem, "role:restricted")

			// Bad bodies: 400 naming the field, nothing created.
			for _, c := range []struct {
				body  map[string]any
				field string
			}{
				{map[string]any{"softwareRevision": "1.1.0"}, "modelNumber"},
				{map[string]any{"modelNumber": model}, "softwareRevision"},
				{map[string]any{"modelNumber": model, "softwareRevision": "9.9.9"}, "softwareRevision"},
				{map[string]any{"modelNumber": model, "softwareRevision": "0.9.0"}, "softwareRevision"}, // deprecated
				{map[string]any{"modelNumber": otherModel + "X", "softwareRevision": "1.1.0"}, "softwareRevision"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "phases": []int{10, 50}}, "phases"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "phases": []int{50, 10, 100}}, "phases"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "phases": []int{}}, "phases"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "phases": []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100}}, "phases"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "phases": "1,100"}, "phases"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "failureThreshold": 101}, "failureThreshold"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "failureThreshold": -1}, "failureThreshold"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "minSample": 0}, "minSample"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "healthWindow": "forever"}, "healthWindow"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "healthWindow": "169h"}, "healthWindow"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "healthWindow": 3600}, "healthWindow"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "requireIdle": "yes"}, "requireIdle"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "filter": "voltage < 3"}, "filter"},
				{map[string]any{"modelNumber": model, "softwareRevision": "1.1.0", "colour": "red"}, "colour"},
			} {
				res, raw := a.call(http.MethodPost, "/api/v1/rollouts", c.body)
				p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
				if !slices.Contains(fieldsOf(p), c.field) {
					t.Errorf("%v: fields %v, want %s", c.body, fieldsOf(p), c.field)
				}
			}
			if list := decode[struct{ Rollouts []rolloutView }](t, a.ok(t, http.MethodGet, "/api/v1/rollouts", nil)); len(list.Rollouts) != 0 {
				t.Fatalf("refused bodies created rollouts: %+v", list.Rollouts)
			}

			// Webhooks: the account's whole stream, and one mount's.
			all, scoped := newReceiver(t), newReceiver(t)
			for _, c := range []struct {
				r    *receiver
				body map[string]any
			}{{all, map[string]any{"url": all.URL}}, {scoped, map[string]any{"url": scoped.URL, "mountUids": []string{uids[0]}}}} {
				res, raw := a.call(http.MethodPost, "/api/v1/webhooks", c.body)
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
				}
				c.r.setSecret(decode[webhookView](t, raw).Secret)
			}

			res, raw := a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.1.0",
				"phases": []int{50, 100}, "failureThreshold": 25, "minSample": 2, "healthWindow": "30m", "requireIdle": false})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create: %d %s", res.StatusCode, raw)
			}
			ro := decode[rolloutView](t, raw)
			if ro.ID == "" || ro.State != "RUNNING" || ro.PausedReason != nil || ro.EndedAt != nil || ro.Targets != 4 ||
				ro.Counts != (rolloutCountsView{Pending: 2, Eligible: 2}) || ro.OpenPhase != 0 || !slices.Equal(ro.Phases, []int{50, 100}) ||
				ro.HealthWindow != "30m0s" || ro.RequireIdle || ro.FailureThreshold != 25 || ro.MinSample != 2 || ro.ModelNumber != model ||
				ro.SoftwareRevision != "1.1.0" || ro.Filter != "" {
				t.Fatalf("created %s", raw)
			}
			// One RUNNING or PAUSED rollout per model.
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.2.0"})
			wantProblem(t, res, raw, 409, "CONFLICT")
			// Another account may roll the same model out to its own mounts.
			other := decode[rolloutView](t, func() []byte {
				res, raw := b.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.1.0"})
				if res.StatusCode != http.StatusCreated {
					t.Fatalf("B's rollout: %d %s", res.StatusCode, raw)
				}
				return raw
			}())
			if other.Targets != 0 || other.State != "COMPLETED" || other.EndedAt == nil || other.Phases == nil || !other.RequireIdle ||
				other.HealthWindow != "1h0m0s" || other.FailureThreshold != 5 || other.MinSample != 10 {
				t.Fatalf("a rollout without targets, with the defaults: %+v", other)
			}

			// Reads.
			if got := a.rollout(t, ro.ID); got.Counts != ro.Counts || got.State != "RUNNING" {
				t.Fatalf("read %+v", got)
			}
			list := decode[struct {
				Rollouts   []rolloutView  `json:"rollouts"`
				Pagination map[string]int `json:"pagination"`
			}](t, a.ok(t, http.MethodGet, "/api/v1/rollouts?pageSize=10", nil))
			if len(list.Rollouts) != 1 || list.Rollouts[0].ID != ro.ID || list.Pagination["totalItems"] != 1 {
				t.Fatalf("list %+v", list)
			}
			targets := a.rolloutMounts(t, ro.ID)
			var eligible, pending []string
			for _, uid := range uids {
				tg, ok := targets[uid]
				switch {
				case !ok:
					t.Fatalf("%s is not a target: %+v", uid, targets)
				case tg.State == "ELIGIBLE" && tg.Phase == 0:
					eligible = append(eligible, uid)
				case tg.State == "PENDING" && tg.Phase == 1:
					pending = append(pending, uid)
				default:
					t.Fatalf("target %+v", tg)
				}
				if tg.CommandID != nil || tg.InstallingSince != nil || tg.Reason != nil {
					t.Fatalf("an untouched target %+v", tg)
				}
			}
			if len(targets) != 4 || len(eligible) != 2 || len(pending) != 2 {
				t.Fatalf("targets %+v", targets)
			}

			// check-update?mountUid=: the rollout's version for an ELIGIBLE
			// target; for a PENDING one, the catalogue below the rollout's.
			q := func(uid, rev string) url.Values {
				v := url.Values{"modelNumber": {model}, "mountUid": {uid}}
				if rev != "" {
					v.Set("softwareRevision", rev)
				}
				return v
			}
			for _, c := range []struct {
				token string
				q     url.Values
				want  string
			}{
				{a.token, q(eligible[0], "1.0.0"), "UPDATE_AVAILABLE 1.1.0"},
				{maintainer, q(eligible[1], "1.0.0"), "UPDATE_AVAILABLE 1.1.0"},
				{a.token, q(eligible[0], "1.1.0"), "UP_TO_DATE"},
				{a.token, q(pending[0], "1.0.0"), "UP_TO_DATE"},
				{a.token, q(pending[0], "0.9.0"), "MANDATORY_UPDATE 1.0.0"},
				{a.token, q(keyless, "1.0.0"), "UP_TO_DATE"},
				{a.token, url.Values{"modelNumber": {model}, "softwareRevision": {"1.0.0"}}, "UPDATE_AVAILABLE 1.2.0"},
			} {
				if got := in.checkUpdate(t, c.token, c.q); got != c.want {
					t.Errorf("check-update?%s: %s, want %s", c.q.Encode(), got, c.want)
				}
			}
			res, raw = b.call(http.MethodGet, "/api/v1/firmware/check-update?"+q(eligible[0], "1.0.0").Encode(), nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			// A rider's token for an ELIGIBLE mount, made once the phases
			// are known (which of uids is ELIGIBLE depends on their hashes).
			eligibleRider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+eligible[0])
			if got := in.checkUpdate(t, eligibleRider, q(eligible[0], "1.0.0")); got != "UPDATE_AVAILABLE 1.1.0" {
				t.Errorf("the rider's check-update: %s", got)
			}
			res, raw = in.call(http.MethodGet, "/api/v1/firmware/check-update?"+q(uids[1], "1.0.0").Encode(), rider, nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// INSTALL_FIRMWARE by hand: owners, a published revision of the
			// mount's model (deprecated allowed), the catalogue's sha256 and size.
			for _, rev := range []string{"1.1.0", "0.9.0"} {
				cmd := a.issue(t, pending[0], "code=INSTALL_FIRMWARE&revision="+rev)
				if cmd.Code != "INSTALL_FIRMWARE" || !strings.Contains(cmd.Payload, ";INSTALL_FIRMWARE;"+pending[0]+";revision="+rev+",sha256=") {
					t.Fatalf("INSTALL_FIRMWARE %s: %+v", rev, cmd)
				}
			}
			installed := decode[[]map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/mounts/"+pending[0]+"/query?code=INSTALL_FIRMWARE&revision=1.1.0", nil))
			if data, _ := installed[0]["data"].(map[string]any); data["revision"] != "1.1.0" || data["sha256"] != target.SHA256 ||
				data["size"] != "96" || data["expiresAt"] == nil {
				t.Fatalf("INSTALL_FIRMWARE data %+v", installed[0]["data"])
			}
			for _, c := range []struct {
				token, uid, query string
				status            int
				code, field       string
			}{
				{a.token, pending[0], "code=INSTALL_FIRMWARE", 400, "VALIDATION_FAILED", "revision"},
				{a.token, pending[0], "code=INSTALL_FIRMWARE&revision=9.9.9", 400, "VALIDATION_FAILED", "revision"},
				{a.token, pending[0], "code=INSTALL_FIRMWARE&revision=1.1.0&sha256=" + old.SHA256, 400, "VALIDATION_FAILED", "sha256"},
				{a.token, elsewhere, "code=INSTALL_FIRMWARE&revision=1.0.0", 400, "VALIDATION_FAILED", "revision"},
				{a.token, pending[0], "code=RELEASE_HELMET&revision=1.1.0", 400, "VALIDATION_FAILED", "revision"},
				{rider, uids[0], "code=INSTALL_FIRMWARE&revision=1.1.0", 403, "FORBIDDEN", ""},
				{maintainer, pending[0], "code=INSTALL_FIRMWARE&revision=1.1.0", 403, "FORBIDDEN", ""},
				{b.token, pending[0], "code=INSTALL_FIRMWARE&revision=1.1.0", 404, "MOUNT_NOT_FOUND", ""},
			} {
				res, raw := in.call(http.MethodGet, "/api/v1/mounts/"+c.uid+"/query?"+c.query, c.token, nil)
				p := wantProblem(t, res, raw, c.status, c.code)
				if c.field != "" && !slices.Contains(fieldsOf(p), c.field) {
					t.Errorf("%s: fields %v, want %s", c.query, fieldsOf(p), c.field)
				}
			}
			if cmd := a.issue(t, uids[0], "code=CONFIGURE_ALARM&alarmMode=ON&alarmSensitivity=LOW&alarmVolume=HIGH"); cmd.Code != "CONFIGURE_ALARM" {
				t.Fatalf("another code's query %+v", cmd)
			}

			// A phone near an ELIGIBLE target is offered the install; a
			// fetch is no outcome: the target stays ELIGIBLE, and a second
			// fetch hands out the same command (docs/api.md, "Jobs"
			// and "Rollouts"). The mount's signed EXECUTED receipt makes it
			// INSTALLING.
			offered := in.pending(t, maintainer, eligible[0])
			if len(offered) != 1 || offered[0].Code != "INSTALL_FIRMWARE" || offered[0].SignedToken == nil {
				t.Fatalf("pending commands of an ELIGIBLE target: %+v", offered)
			}
			if got := in.pending(t, maintainer, pending[0]); len(got) != 0 {
				t.Fatalf("a PENDING target is offered %+v", got)
			}
			if got := a.rolloutMounts(t, ro.ID)[eligible[0]]; got.State != "ELIGIBLE" || got.CommandID == nil ||
				*got.CommandID != offered[0].ID || got.InstallingSince != nil {
				t.Fatalf("the fetched target %+v", got)
			}
			if got := a.rollout(t, ro.ID).Counts; got != (rolloutCountsView{Pending: 2, Eligible: 2}) {
				t.Fatalf("counts after a fetch %+v", got)
			}
			if again := in.pending(t, maintainer, eligible[0]); len(again) != 1 || again[0].ID != offered[0].ID ||
				*again[0].SignedToken != *offered[0].SignedToken {
				t.Fatalf("fetched again: %+v, want %s again", again, offered[0].ID)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/"+eligible[0]+"/commands/receipts",
				receipts(newDevice(eligible[0]).receipt(offered[0].ID, "EXECUTED", "", time.Now())))
			if res.StatusCode != http.StatusOK {
				t.Fatalf("the install's receipt: %d %s", res.StatusCode, raw)
			}
			if got := a.rolloutMounts(t, ro.ID)[eligible[0]]; got.State != "INSTALLING" || got.CommandID == nil ||
				*got.CommandID != offered[0].ID || got.InstallingSince == nil {
				t.Fatalf("the executed target %+v", got)
			}
			if got := a.rollout(t, ro.ID).Counts; got != (rolloutCountsView{Pending: 2, Eligible: 1, Installing: 1}) {
				t.Fatalf("counts after the receipt %+v", got)
			}
			if got := in.checkUpdate(t, a.token, q(eligible[0], "1.0.0")); got != "UPDATE_AVAILABLE 1.1.0" {
				t.Errorf("check-update of an INSTALLING target: %s", got)
			}

			// The phase opened with the rollout: an account-level event.
			evs, ok := in.rolloutEventsUntil(t, a.token, "types=ROLLOUT_PHASE_OPENED", func(e rolloutEventView) bool {
				return e.UID == nil && e.Mount == nil && e.Rollout != nil && e.Rollout.ID == ro.ID && e.Rollout.OpenPhase == 0
			})
			if !ok {
				t.Fatalf("ROLLOUT_PHASE_OPENED in the log: %+v", evs)
			}
			all.waitFor(t, "ROLLOUT_PHASE_OPENED delivered", func(c []webhookCall) bool {
				return slices.Contains(types(c), "ROLLOUT_PHASE_OPENED ")
			})
			for _, e := range in.rolloutEvents(t, b.token, "types=ROLLOUT_PHASE_OPENED") {
				if e.Rollout != nil && e.Rollout.ID == ro.ID {
					t.Fatalf("another account reads %+v", e)
				}
			}

			// Another account and restricted tokens.
			for _, c := range []struct{ method, path string }{
				{http.MethodGet, "/api/v1/rollouts/" + ro.ID},
				{http.MethodGet, "/api/v1/rollouts/" + ro.ID + "/mounts"},
				{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/pause"},
				{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/resume"},
				{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/cancel"},
				{http.MethodGet, "/api/v1/rollouts/ro_nonexistent"},
			} {
				res, raw := b.call(c.method, c.path, nil)
				wantProblem(t, res, raw, 404, "ROLLOUT_NOT_FOUND")
			}
			if l := decode[struct{ Rollouts []rolloutView }](t, b.ok(t, http.MethodGet, "/api/v1/rollouts", nil)); len(l.Rollouts) != 1 || l.Rollouts[0].ID != other.ID {
				t.Fatalf("B lists %+v", l.Rollouts)
			}
			for _, token := range []string{rider, maintainer} {
				for _, c := range []struct {
					method, path string
					body         any
				}{
					{http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": otherModel, "softwareRevision": "1.1.0"}},
					{http.MethodGet, "/api/v1/rollouts", nil},
					{http.MethodGet, "/api/v1/rollouts/" + ro.ID, nil},
					{http.MethodGet, "/api/v1/rollouts/" + ro.ID + "/mounts", nil},
					{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/pause", nil},
					{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/resume", nil},
					{http.MethodPost, "/api/v1/rollouts/" + ro.ID + "/cancel", nil},
				} {
					res, raw := in.call(c.method, c.path, token, c.body)
					wantProblem(t, res, raw, 403, "FORBIDDEN")
				}
			}

			// Pause, resume, cancel, each in its state only.
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/resume", nil)
			wantProblem(t, res, raw, 409, "CONFLICT")
			paused := decode[rolloutView](t, a.ok(t, http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/pause", nil))
			if paused.State != "PAUSED" || paused.PausedReason == nil || *paused.PausedReason != "MANUAL" {
				t.Fatalf("paused %+v", paused)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/pause", nil)
			wantProblem(t, res, raw, 409, "CONFLICT")
			if got := in.pending(t, maintainer, eligible[1]); len(got) != 0 {
				t.Fatalf("a PAUSED rollout offers %+v", got)
			}
			// A PAUSED rollout offers nothing through check-update either:
			// its ELIGIBLE targets are capped below its version, as a
			// PENDING one (docs/api.md, "Rollouts").
			if got := in.checkUpdate(t, a.token, q(eligible[1], "1.0.0")); got != "UP_TO_DATE" {
				t.Errorf("check-update of an ELIGIBLE target under a PAUSED rollout: %s", got)
			}
			if got := in.checkUpdate(t, eligibleRider, q(eligible[0], "1.0.0")); got != "UP_TO_DATE" {
				t.Errorf("a rider's check-update of a target under a PAUSED rollout: %s", got)
			}
			if got := in.checkUpdate(t, a.token, q(pending[0], "1.0.0")); got != "UP_TO_DATE" {
				t.Errorf("check-update of a PENDING target under a PAUSED rollout: %s", got)
			}
			if evs, ok := in.rolloutEventsUntil(t, maintainer, "types=ROLLOUT_PAUSED", func(e rolloutEventView) bool {
				return e.Rollout != nil && e.Rollout.ID == ro.ID && e.Rollout.State == "PAUSED"
			}); !ok {
				t.Fatalf("ROLLOUT_PAUSED for the maintainer: %+v", evs)
			}
			for _, e := range in.rolloutEvents(t, rider, "") {
				if strings.HasPrefix(e.Type, "ROLLOUT_") {
					t.Fatalf("a rider reads %+v", e)
				}
			}
			all.waitFor(t, "ROLLOUT_PAUSED delivered", func(c []webhookCall) bool {
				return slices.Contains(types(c), "ROLLOUT_PAUSED ")
			})
			// The scoped webhook gets its mount's events, never the rollout's.
			a.report(t, uids[0], entry("BATTERY_LEVEL", "50", time.Now()))
			scopedCalls := scoped.waitFor(t, "the mount's report delivered", func(c []webhookCall) bool {
				return slices.Contains(types(c), "STATES_REPORTED "+uids[0])
			})
			if slices.ContainsFunc(scopedCalls, func(c webhookCall) bool { return strings.HasPrefix(c.Type, "ROLLOUT_") }) {
				t.Fatal("a webhook with mountUids received a rollout event")
			}
			// Still one per model while PAUSED.
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.2.0"})
			wantProblem(t, res, raw, 409, "CONFLICT")
			resumed := decode[rolloutView](t, a.ok(t, http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/resume", nil))
			if resumed.State != "RUNNING" || resumed.PausedReason != nil {
				t.Fatalf("resumed %+v", resumed)
			}
			if got := in.pending(t, maintainer, eligible[1]); len(got) != 1 || got[0].Code != "INSTALL_FIRMWARE" {
				t.Fatalf("a resumed rollout offers %+v", got)
			}
			if got := in.checkUpdate(t, a.token, q(eligible[1], "1.0.0")); got != "UPDATE_AVAILABLE 1.1.0" {
				t.Errorf("check-update of an ELIGIBLE target of a resumed rollout: %s", got)
			}
			canceled := decode[rolloutView](t, a.ok(t, http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/cancel", nil))
			if canceled.State != "CANCELED" || canceled.EndedAt == nil || canceled.PausedReason != nil {
				t.Fatalf("canceled %+v", canceled)
			}
			for _, verb := range []string{"pause", "resume", "cancel"} {
				res, raw := a.call(http.MethodPost, "/api/v1/rollouts/"+ro.ID+"/"+verb, nil)
				wantProblem(t, res, raw, 409, "CONFLICT")
			}
			if got := in.pending(t, maintainer, eligible[0]); len(got) != 0 {
				t.Fatalf("a CANCELED rollout offers %+v", got)
			}
			if got := in.checkUpdate(t, a.token, q(eligible[0], "1.0.0")); got != "UPDATE_AVAILABLE 1.2.0" {
				t.Errorf("check-update after the cancel: %s", got)
			}
			// The model is free again.
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts", map[string]any{"modelNumber": model, "softwareRevision": "1.2.0",
				"filter": `uid = "` + uids[0] + `"`})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("a new rollout after the cancel: %d %s", res.StatusCode, raw)
			}
			next := decode[rolloutView](t, raw)
			if next.Targets != 1 || next.Filter != `uid = "`+uids[0]+`"` {
				t.Fatalf("a filtered rollout %+v", next)
			}
			// Deprecating its version pauses it for good: nothing offered,
			// no resume; the operator's pause is in the account's audit log.
			_, said, err := in.tryCLI("firmware", "deprecate", "--model", model, "--revision", "1.2.0")
			if err != nil || !strings.Contains(said, "paused rollout "+next.ID+" of account "+a.creds.AccountID) {
				t.Fatalf("deprecate: %v, %q", err, said)
			}
			if got := decode[rolloutView](t, a.ok(t, http.MethodGet, "/api/v1/rollouts/"+next.ID, nil)); got.State != "PAUSED" || got.PausedReason == nil || *got.PausedReason != "MANUAL" {
				t.Fatalf("a rollout of a deprecated version %+v", got)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/rollouts/"+next.ID+"/resume", nil)
			wantProblem(t, res, raw, 409, "CONFLICT")
			if !strings.Contains(string(raw), "deprecated") {
				t.Fatalf("resume a deprecated version's rollout: %s", raw)
			}
			if got := in.pending(t, maintainer, uids[0]); len(got) != 0 {
				t.Fatalf("a deprecated version offered %+v", got)
			}
			if got := in.checkUpdate(t, a.token, q(uids[0], "1.0.0")); got != "UPDATE_AVAILABLE 1.1.0" {
				t.Errorf("check-update names a deprecated version to its target: %s", got)
			}
			// The log shows an entry once older transactions ended: waited for.
			pause, log, ok := eventually(t, func() []auditView {
				return a.auditREST(t, url.Values{"action": {"rollout.pause"}, "target": {"rollout:" + next.ID}}).Entries
			}, is("rollout.pause", "rollout:"+next.ID))
			if !ok || len(log) != 1 || pause.Details["reason"] != "firmware deprecated" || pause.Actor.Type != "cli" {
				t.Fatalf("the pause's audit entry %+v", log)
			}
		})
	}
}

// rolloutEventView is an event as GET /events shows it, uid and mount nullable.
type rolloutEventView struct {
	Type    string         `json:"type"`
	UID     *string        `json:"uid"`
	Mount   map[string]any `json:"mount"`
	Rollout *rolloutView   `json:"rollout"`
}

// rolloutEventsUntil reads the events until one passes, for up to 10 s: an
// event shows in the log once every older transaction of the cluster has
// ended, a moment after its own commit on a cluster busy with other tests.
func (in *instance) rolloutEventsUntil(t *testing.T, token, query string, pass func(rolloutEventView) bool) ([]rolloutEventView, bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		evs := in.rolloutEvents(t, token, query)
		if slices.ContainsFunc(evs, pass) || time.Now().After(deadline) {
			return evs, slices.ContainsFunc(evs, pass)
		}
	}
}

func (in *instance) rolloutEvents(t *testing.T, token, query string) []rolloutEventView {
	t.Helper()
	res, raw := in.call(http.MethodGet, "/api/v1/events?limit=1000&"+query, token, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("events?%s: %d %s", query, res.StatusCode, raw)
	}
	return decode[struct {
		Events []rolloutEventView `json:"events"`
	}](t, raw).Events
}
