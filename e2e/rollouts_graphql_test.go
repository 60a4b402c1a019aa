package e2e

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

type gqlRolloutEvent struct {
	ID      string      `json:"id"`
	Type    string      `json:"type"`
	Rollout *gqlRollout `json:"rollout"`
	Job     *gqlJob     `json:"job"`
}

// TestGraphQLRollouts: rollouts through GraphQL with REST's rules. A
// rollout of a published revision targets the model's associated mounts
// with a device key, split into phases; it is paused, resumed and
// cancelled, each refused in the wrong state; its events reach
// accountEvents (replayed after a cursor, then live; a maintainer's too,
// never another account's; a rider is refused), never mountEvents nor the
// events query; its INSTALL_FIRMWARE carries rolloutId; mountRollouts
// lists a mount's rollouts of the caller's account only. Another
// account's rollout is ROLLOUT_NOT_FOUND, a maintainer is refused (create,
// pause, resume, cancel), an
// unpublished revision is VALIDATION_FAILED on softwareRevision and a
// second rollout of the model CONFLICT.
func TestGraphQLRollouts(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a, b := newFleet(in, "A"), newFleet(in, "B")
	maintainer := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted")}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	v1, _ := in.publish(t, "RL-1", "1.0.0", 1000, "--available-since", past)
	v2, _ := in.publish(t, "RL-1", "2.0.0", 2000, "--available-since", past)
	var uids []string
	for i := range 4 {
		uid := uniqueUID("RL")
		uids = append(uids, uid)
		extra := map[string]any{"modelNumber": "RL-1", "devicePublicKey": newDevice(uid).publicKey()}
		if i == 3 {
			delete(extra, "devicePublicKey") // never a target: it could not prove the update
		}
		a.associate(t, uid, extra)
		a.confirm(t, uid)
	}
	other := uniqueUID("RL")
	a.associate(t, other, map[string]any{"modelNumber": "RL-2", "devicePublicKey": newDevice(other).publicKey()})
	a.confirm(t, other)
	// B has a mount of the model too, for a rollout of its own at the end.
	bMount := uniqueUID("RL")
	b.associate(t, bMount, map[string]any{"modelNumber": "RL-1", "devicePublicKey": newDevice(bMount).publicKey()})
	b.confirm(t, bMount)
	rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+uids[0])}
	bFrom := field[string](t, b.gql(t, `{ eventCursor }`, nil), "eventCursor")

	from := field[struct{ Next string }](t, a.gql(t, `{ events(limit: 1000) { next } }`, nil), "events").Next
	create := `mutation($in: RolloutInput!) { createRollout(input: $in) { ` + gqlRolloutFields + ` } }`
	in1 := map[string]any{"modelNumber": "RL-1", "softwareRevision": "2.0.0", "phases": []int{50, 100}, "failureThreshold": 50,
		"minSample": 1, "healthWindow": "5m", "requireIdle": false}
	if r := a.gql(t, create, map[string]any{"in": map[string]any{"modelNumber": "RL-1", "softwareRevision": "9.9.9"}}); r.code() != "VALIDATION_FAILED" ||
		!strings.Contains(string(mustJSON(t, r.Errors[0].Extensions)), `"field":"softwareRevision"`) {
		t.Fatalf("an unpublished revision: %+v", r.Errors)
	}
	if r := maintainer.gql(t, create, map[string]any{"in": in1}); r.code() != "FORBIDDEN" {
		t.Fatalf("a maintainer creates: %+v", r.Errors)
	}
	ro := field[gqlRollout](t, a.gql(t, create, map[string]any{"in": in1}), "createRollout")
	if ro.State != "RUNNING" || ro.Targets != 3 || ro.Counts.Eligible+ro.Counts.Pending != 3 || ro.Counts.Eligible != 2 || ro.OpenPhase != 0 ||
		!slices.Equal(ro.Phases, []int{50, 100}) || ro.FailureThreshold != 50 || ro.MinSample != 1 || ro.HealthWindow != "5m0s" || ro.RequireIdle ||
		ro.PausedReason != nil || ro.EndedAt != nil || ro.Filter != nil || ro.ModelNumber != "RL-1" || ro.SoftwareRevision != "2.0.0" {
		t.Fatalf("created %+v", ro)
	}
	if r := a.gql(t, create, map[string]any{"in": in1}); r.code() != "CONFLICT" {
		t.Fatalf("a second rollout of the model: %+v", r.Errors)
	}
	targets := a.rolloutTargets(t, ro.ID)
	var eligible []string
	for _, uid := range uids[:3] {
		tg, ok := targets[uid]
		switch {
		case !ok:
			t.Fatalf("%s is not a target: %+v", uid, targets)
		case tg.State == "ELIGIBLE" && tg.Phase == 0:
			eligible = append(eligible, uid)
		case tg.State != "PENDING" || tg.Phase != 1 || tg.CommandID != nil || tg.InstallingSince != nil || tg.Reason != nil:
			t.Fatalf("target %+v", tg)
		}
	}
	if len(targets) != 3 || len(eligible) != 2 {
		t.Fatalf("targets %+v", targets)
	}
	listed := field[struct{ Rollouts []gqlRollout }](t, a.gql(t, `{ rollouts { rollouts { `+gqlRolloutFields+` } } }`, nil), "rollouts").Rollouts
	if len(listed) != 1 || listed[0].ID != ro.ID {
		t.Fatalf("rollouts %+v", listed)
	}
	for _, q := range []string{`query($id: ID!) { rollout(id: $id) { id } }`, `query($id: ID!) { rolloutMounts(id: $id) { mounts { uid } } }`,
		`mutation($id: ID!) { pauseRollout(id: $id) { id } }`, `mutation($id: ID!) { resumeRollout(id: $id) { id } }`, `mutation($id: ID!) { cancelRollout(id: $id) { id } }`} {
		if r := b.gql(t, q, map[string]any{"id": ro.ID}); r.code() != "ROLLOUT_NOT_FOUND" {
			t.Errorf("B: %s: %+v", q, r.Errors)
		}
	}
	if r := maintainer.gql(t, `{ rollouts { rollouts { id } } }`, nil); r.code() != "FORBIDDEN" {
		t.Errorf("a maintainer's rollouts: %+v", r.Errors)
	}

	// A phone passing a mount of the open phase gets the install, signed
	// for the rollout; the command audit names it.
	pending := in.pending(t, a.token, eligible[0])
	if len(pending) != 1 || pending[0].Code != "INSTALL_FIRMWARE" {
		t.Fatalf("pending %+v", pending)
	}
	cmds := field[struct {
		Commands []struct {
			ID, Code  string
			RolloutID *string
			JobID     *string
			Data      map[string]any
		}
	}](t, a.gql(t, `query($uid: ID!) { mountCommands(uid: $uid) { commands { id code rolloutId jobId data } } }`, map[string]any{"uid": eligible[0]}), "mountCommands")
	var install bool
	for _, c := range cmds.Commands {
		if c.Code == "INSTALL_FIRMWARE" {
			install = true
			if c.RolloutID == nil || *c.RolloutID != ro.ID || c.JobID != nil || c.Data["revision"] != "2.0.0" || c.Data["sha256"] != v2.SHA256 || c.Data["size"] != "2000" {
				t.Fatalf("the install %+v", c)
			}
		}
	}
	if !install {
		t.Fatalf("no INSTALL_FIRMWARE in the audit: %+v", cmds)
	}
	// A fetch is no outcome: the target stays ELIGIBLE, its command
	// recorded (docs/api.md, "Rollouts").
	if tg := a.rolloutTargets(t, ro.ID)[eligible[0]]; tg.State != "ELIGIBLE" || tg.CommandID == nil || tg.InstallingSince != nil {
		t.Fatalf("after the fetch %+v", tg)
	}

	// An owner's install by hand names the revision only; the catalogue
	// gives the rest. A maintainer gets it through pending-commands only.
	const byHand = `mutation($uid: ID!) { issueCommand(uid: $uid, code: "INSTALL_FIRMWARE", params: {revision: "1.0.0"}) { code data rolloutId } }`
	issued := field[[]struct {
		Code      string
		Data      map[string]any
		RolloutID *string
	}](t, a.gql(t, byHand, map[string]any{"uid": uids[2]}), "issueCommand")
	if len(issued) != 1 || issued[0].Code != "INSTALL_FIRMWARE" || issued[0].Data["revision"] != "1.0.0" || issued[0].Data["sha256"] != v1.SHA256 ||
		issued[0].Data["size"] != "1000" || issued[0].RolloutID != nil {
		t.Fatalf("by hand %+v", issued)
	}
	if r := maintainer.gql(t, byHand, map[string]any{"uid": uids[2]}); r.code() != "FORBIDDEN" {
		t.Fatalf("a maintainer's install by hand: %+v", r.Errors)
	}

	// A maintainer may not pause, resume or cancel it.
	for _, m := range []string{"pauseRollout", "resumeRollout", "cancelRollout"} {
		if r := maintainer.gql(t, `mutation($id: ID!) { `+m+`(id: $id) { id } }`, map[string]any{"id": ro.ID}); r.code() != "FORBIDDEN" {
			t.Errorf("a maintainer's %s: %+v", m, r.Errors)
		}
	}

	// Pause, resume, cancel, each refused in the wrong state.
	change := func(mutation string) (gqlRollout, string) {
		t.Helper()
		r := a.gql(t, `mutation($id: ID!) { `+mutation+`(id: $id) { `+gqlRolloutFields+` } }`, map[string]any{"id": ro.ID})
		if r.code() != "" {
			return gqlRollout{}, r.code()
		}
		return field[gqlRollout](t, r, mutation), ""
	}
	if got, code := change("pauseRollout"); code != "" || got.State != "PAUSED" || got.PausedReason == nil || *got.PausedReason != "MANUAL" {
		t.Fatalf("paused %+v %s", got, code)
	}
	if _, code := change("pauseRollout"); code != "CONFLICT" {
		t.Fatalf("paused twice: %s", code)
	}

	// The events so far, replayed after the cursor; then live.
	const accountSub = `subscription($after: ID) { accountEvents(after: $after, types: [ROLLOUT_PHASE_OPENED, ROLLOUT_PAUSED, ROLLOUT_COMPLETED]) {
		id type occurredAt rollout { ` + gqlRolloutFields + ` } job { id } } }`
	owner := in.wsReady(t, a.token)
	owner.Subscribe("acc", accountSub, map[string]any{"after": from})
	opened := nextData[gqlRolloutEvent](t, owner, "acc", "accountEvents")
	if opened.Type != "ROLLOUT_PHASE_OPENED" || opened.Rollout == nil || opened.Rollout.ID != ro.ID || opened.Rollout.OpenPhase != 0 || opened.Job != nil {
		t.Fatalf("replayed %+v", opened)
	}
	if e := nextData[gqlRolloutEvent](t, owner, "acc", "accountEvents"); e.Type != "ROLLOUT_PAUSED" || e.Rollout == nil || e.Rollout.State != "PAUSED" ||
		e.Rollout.PausedReason == nil || *e.Rollout.PausedReason != "MANUAL" {
		t.Fatalf("the pause %+v", e)
	}
	// A maintainer (restricted without mounts) follows them too; a rider
	// (restricted to mounts) is refused, the socket staying open.
	maint := in.wsReady(t, maintainer.token)
	maint.Subscribe("acc", accountSub, map[string]any{"after": from})
	if e := nextData[gqlRolloutEvent](t, maint, "acc", "accountEvents"); e.Type != "ROLLOUT_PHASE_OPENED" || e.Rollout == nil || e.Rollout.ID != ro.ID {
		t.Fatalf("a maintainer's %+v", e)
	}
	if e := nextData[gqlRolloutEvent](t, maint, "acc", "accountEvents"); e.Type != "ROLLOUT_PAUSED" || e.Rollout == nil || e.Rollout.ID != ro.ID {
		t.Fatalf("a maintainer's %+v", e)
	}
	riding := in.wsReady(t, rider.token)
	riding.Subscribe("acc", accountSub, nil)
	if m := riding.Expect("error"); len(m.Errors()) != 1 || m.Errors()[0].Code() != "FORBIDDEN" {
		t.Fatalf("a rider: %s", m)
	}
	if got, code := change("resumeRollout"); code != "" || got.State != "RUNNING" || got.PausedReason != nil {
		t.Fatalf("resumed %+v %s", got, code)
	}
	if _, code := change("resumeRollout"); code != "CONFLICT" {
		t.Fatalf("resumed twice: %s", code)
	}
	if got, code := change("cancelRollout"); code != "" || got.State != "CANCELED" || got.EndedAt == nil {
		t.Fatalf("cancelled %+v %s", got, code)
	}
	for _, m := range []string{"cancelRollout", "pauseRollout", "resumeRollout"} {
		if _, code := change(m); code != "CONFLICT" {
			t.Fatalf("%s after cancel: %s", m, code)
		}
	}
	// A new rollout of the model may start now; its phase opens live.
	next := field[gqlRollout](t, a.gql(t, create, map[string]any{"in": in1}), "createRollout")
	for {
		e := nextData[gqlRolloutEvent](t, owner, "acc", "accountEvents")
		if e.Rollout == nil {
			t.Fatalf("an event without its rollout: %+v", e)
		}
		if e.Type == "ROLLOUT_PHASE_OPENED" && e.Rollout.ID == next.ID {
			break
		}
	}

	// B's accountEvents, from before A's first rollout, never carried A's:
	// the first event B gets is that of a rollout of its own.
	bSub := in.wsReady(t, b.token)
	bSub.Subscribe("acc", accountSub, map[string]any{"after": bFrom})
	mine := field[gqlRollout](t, b.gql(t, create, map[string]any{"in": in1}), "createRollout")
	if e := nextData[gqlRolloutEvent](t, bSub, "acc", "accountEvents"); e.Rollout == nil || e.Rollout.ID != mine.ID || e.Rollout.ID == ro.ID || e.Rollout.ID == next.ID {
		t.Fatalf("B's first event %+v, want its rollout %s", e, mine.ID)
	}

	// A mount's rollouts: the account's own, newest first with the target;
	// never another account's, of the same mount or of its own; owners only.
	type mountRollout struct {
		Rollout gqlRollout
		Target  gqlRolloutTarget
	}
	const mountRollouts = `query($uid: ID!, $n: Int) { mountRollouts(uid: $uid, pageSize: $n) { rollouts { rollout { ` + gqlRolloutFields + ` }
		target { uid state phase commandId installingSince reason } } pagination { totalItems } } }`
	rolloutsOf := func(f fleet, uid string) []mountRollout {
		t.Helper()
		return field[struct{ Rollouts []mountRollout }](t, f.gql(t, mountRollouts, map[string]any{"uid": uid}), "mountRollouts").Rollouts
	}
	if got := rolloutsOf(a, eligible[0]); len(got) != 2 || got[0].Rollout.ID != next.ID || got[1].Rollout.ID != ro.ID ||
		got[1].Rollout.State != "CANCELED" || got[1].Target.UID != eligible[0] || got[1].Target.CommandID == nil || got[1].Target.Phase != 0 {
		t.Fatalf("A's rollouts of %s: %+v", eligible[0], got)
	}
	if got := rolloutsOf(a, bMount); len(got) != 0 {
		t.Fatalf("A sees B's rollout of B's mount: %+v", got)
	}
	if got := rolloutsOf(b, eligible[0]); len(got) != 0 {
		t.Fatalf("B sees A's rollouts of A's mount: %+v", got)
	}
	if got := rolloutsOf(b, bMount); len(got) != 1 || got[0].Rollout.ID != mine.ID || got[0].Target.UID != bMount {
		t.Fatalf("B's rollouts of its mount: %+v", got)
	}
	for name, f := range map[string]fleet{"a maintainer": maintainer, "a rider": rider} {
		if r := f.gql(t, mountRollouts, map[string]any{"uid": uids[0]}); r.code() != "FORBIDDEN" {
			t.Errorf("%s's mountRollouts: %+v", name, r.Errors)
		}
	}
	if r := a.gql(t, mountRollouts, map[string]any{"uid": uids[0], "n": 0}); r.code() != "VALIDATION_FAILED" {
		t.Errorf("mountRollouts(pageSize: 0): %+v", r.Errors)
	}

	// mountEvents and the events query never carry the rollout's events.
	events := in.wsReady(t, a.token)
	events.Subscribe("ev", `subscription($after: ID) { mountEvents(after: $after) { id type uid } }`, map[string]any{"after": from})
	a.report(t, uids[0], entry("BATTERY_LEVEL", "79", time.Now()))
	for {
		e := nextData[struct{ Type, UID string }](t, events, "ev", "mountEvents")
		if e.UID == "" || strings.HasPrefix(e.Type, "ROLLOUT_") {
			t.Fatalf("mountEvents carried %+v", e)
		}
		if e.UID == uids[0] && e.Type == "STATES_REPORTED" {
			break
		}
	}
	page := field[struct{ Events []struct{ Type, UID string } }](t, a.gql(t, `query($after: ID) { events(after: $after, limit: 1000) { events { type uid } } }`,
		map[string]any{"after": from}), "events")
	for _, e := range page.Events {
		if e.UID == "" || strings.HasPrefix(e.Type, "ROLLOUT_") {
			t.Fatalf("the events query carried %+v", e)
		}
	}
}

// A webhook of the ROLLOUT_* events made over REST reads back over
// GraphQL, and asking the events query for them answers no event rather
// than an error.
func TestGraphQLKnowsRolloutEvents(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	types := []string{"ROLLOUT_PHASE_OPENED", "ROLLOUT_PAUSED", "ROLLOUT_COMPLETED"}
	res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://receiver.example/hook", "eventTypes": types})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
	}
	r := a.gql(t, `{ webhooks { webhooks { eventTypes } } events(types: [ROLLOUT_PHASE_OPENED, ROLLOUT_PAUSED, ROLLOUT_COMPLETED]) { events { type } } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("errors: %+v", r.Errors)
	}
	var d struct {
		Webhooks struct {
			Webhooks []struct{ EventTypes []string }
		}
		Events struct{ Events []struct{ Type string } }
	}
	if err := json.Unmarshal(r.Data, &d); err != nil || len(d.Webhooks.Webhooks) != 1 || !slices.Equal(d.Webhooks.Webhooks[0].EventTypes, types) || len(d.Events.Events) != 0 {
		t.Fatalf("data %s (%v)", r.Data, err)
	}
}
