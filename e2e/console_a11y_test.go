package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// TestConsoleAccessibility runs axe-core (testdata/axe-core) in Chromium on
// every page of the console, signed out and as an owner with data on each
// page: no violation of serious or critical impact.
func TestConsoleAccessibility(t *testing.T) {
	chromium := testenv.Chromium(t)
	cfg := testConfig(t.TempDir(), "")
	cfg.WebhookAllowPrivate = true // the receiver listens on loopback
	cfg.WebhookRetryDelays = "1h"
	in := start(t, cfg)
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	var hook client.Webhook
	if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": receiver.URL, "description": "ops"}, &hook); err != nil {
		t.Fatal(err)
	}
	for i, uid := range []string{"MNT-0001", "MNT-0002"} {
		associate(t, api, uid)
		reportStates(t, api, uid, 60-50*i, true, time.Now().Add(-time.Hour))
		reportStates(t, api, uid, 55-50*i, false, time.Now())
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-0003"}, nil); err != nil {
		t.Fatal(err)
	}
	// A rule and an alarm of it, acknowledged, for the alarms pages.
	rule := field[gqlRule](t, in.gql(t, a.token, `mutation { createAlarmRule(input: {name: "Battery low", severity: CRITICAL,
		conditions: [{code: "BATTERY_LEVEL", op: "<", value: "20"}]}) { id } }`, nil), "createAlarmRule")
	reportStates(t, api, "MNT-0002", 12, false, time.Now())
	raised := field[struct{ Alarms []gqlAlarm }](t, in.gql(t, a.token, `query($r: ID) { alarms(ruleId: $r) { alarms { id } } }`, map[string]any{"r": rule.ID}), "alarms")
	if len(raised.Alarms) != 1 {
		t.Fatalf("alarms of the rule: %+v", raised)
	}
	in.gql(t, a.token, `mutation($id: ID!) { acknowledgeAlarm(id: $id) { id } }`, map[string]any{"id": raised.Alarms[0].ID})
	// A job, for the jobs pages.
	job := field[gqlJob](t, in.gql(t, a.token, `mutation { createJob(input: {code: "RELEASE_HELMET", filter: "batteryLevel < 20", description: "Release"}) { id } }`, nil), "createJob")
	in.publish(t, "HL-2", "1.0.0", 1024, "--available-since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	// A rollout, for the rollouts pages: no mount of the model, so it
	// completes at once.
	rollout := field[gqlRollout](t, in.gql(t, a.token, `mutation { createRollout(input: {modelNumber: "HL-2", softwareRevision: "1.0.0"}) { id } }`, nil), "createRollout")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.step("open the console", chromedp.Navigate(in.base+"/"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	b.checkA11y("the signed-out welcome")
	b.step("go to the login page", chromedp.Click(chromedp.CSS(`#signin`)), chromedp.WaitVisible(chromedp.CSS(`input[name=username]`)))
	b.checkA11y("the login page")
	b.step("sign in",
		chromedp.SendKeys(chromedp.CSS(`input[name=username]`), "ann"),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), personPassword),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#overview`)))

	pages := []struct{ name, hash, ready string }{
		{"the overview", "#/", `document.querySelector('#count-webhooks .value') !== null && document.querySelector('#count-alarms .value') !== null`},
		{"the fleet", "#/fleet", `document.querySelectorAll('#fleet tbody tr[data-uid]').length === 3`},
		{"a mount's page with its alarm", "#/mounts/MNT-0002", `document.querySelector('#mount-alarms tr[data-id]') !== null`},
		{"a mount's page", "#/mounts/MNT-0001", `document.querySelector('.uplot') !== null && document.body.innerText.includes('ASSOCIATE_OWNER') && document.querySelector('#mount-rollouts tbody tr') !== null`},
		{"the events", "#/events?type=all", `document.getElementById('connection').dataset.state === 'live'`},
		{"the webhooks", "#/webhooks", `document.querySelector('#webhooks tr[data-id]') !== null`},
		{"the firmware", "#/firmware", `document.querySelector('#firmware tbody tr td')?.textContent === 'HL-2'`},
		{"the association", "#/associate", `document.querySelector('input[name=uid]') !== null`},
		{"the alarms", "#/alarms", `document.querySelector('#alarms tr[data-id]') !== null && document.getElementById('connection').dataset.state === 'live'`},
		{"the jobs", "#/jobs", `document.querySelector('#jobs tr[data-id] .progress') !== null`},
		{"a job's page", "#/jobs/" + job.ID, `document.querySelector('#job-mounts tbody tr[data-uid]') !== null && document.getElementById('job-details') !== null`},
		{"the rollouts", "#/rollouts", `document.querySelector('#rollouts tr[data-id] .rollout-progress') !== null`},
		{"a rollout's page", "#/rollouts/" + rollout.ID, `document.querySelector('#rollout-phases li') !== null && document.querySelector('#rollout-mounts tbody tr') !== null`},
		{"the fleet with a refused expression", "#/fleet?expr=" + url.QueryEscape("batteryLevel <"), `document.getElementById('expr-error').textContent !== ''`},
		{"the audit log", "#/audit", `document.querySelector('#audit tbody tr td.details') !== null`},
		{"a mount not found", "#/mounts/NO-SUCH-MOUNT", `document.getElementById('mount-not-found') !== null`},
		{"the alarm rules", "#/alarm-rules", `document.querySelector('#alarm-rules tr[data-id]') !== null && document.querySelector('#suggested-rules li') !== null && document.querySelector('#rule-conditions li') !== null`},
	}
	for _, p := range pages {
		b.step("open "+p.name, chromedp.Navigate(in.base+"/console/"+p.hash))
		b.waitJS(p.name+" is ready", p.ready, 15*time.Second)
		b.checkA11y(p.name)
	}
	// The events paused.
	b.step("open the events", chromedp.Navigate(in.base+"/console/#/events"))
	b.waitJS("the events", `document.querySelector('#events tbody tr') !== null && document.getElementById('connection').dataset.state === 'live'`, 15*time.Second)
	b.step("pause them", chromedp.Click(chromedp.CSS(`#events-pause`)))
	b.checkA11y("the events paused")
	// The webhooks page with its editor and deliveries open.
	b.step("open the webhooks", chromedp.Navigate(in.base+"/console/#/webhooks"))
	b.waitJS("the webhook's row", `document.querySelector('#webhooks tr[data-id]') !== null`, 15*time.Second)
	b.step("open the editor and deliveries",
		chromedp.Click(chromedp.CSS(`#webhooks button[data-action=edit]`)), chromedp.WaitVisible(chromedp.CSS(`#edit-url`)),
		chromedp.Click(chromedp.CSS(`#webhooks button[data-action=deliveries]`)), chromedp.WaitVisible(chromedp.CSS(`#webhook-deliveries h2`)))
	b.checkA11y("the webhooks page with its editor and deliveries")
	// The firmware page with the form that starts a rollout open.
	b.step("open the firmware", chromedp.Navigate(in.base+"/console/#/firmware"))
	b.waitJS("the catalogue's start button", `document.querySelector('#firmware button.start-rollout') !== null`, 15*time.Second)
	b.step("open the rollout form", chromedp.Click(chromedp.CSS(`#firmware button.start-rollout`)), chromedp.WaitVisible(chromedp.CSS(`#rollout-form`)))
	b.checkA11y("the firmware page with the rollout form")
	// The rules editor with the suggestions open and a condition of each kind.
	b.step("open the rules", chromedp.Navigate(in.base+"/console/#/alarm-rules"))
	b.waitJS("the rules", `document.querySelector('#alarm-rules tr[data-id]') !== null && document.querySelector('#rule-conditions li') !== null`, 15*time.Second)
	b.eval(`document.getElementById('suggested').open = true`)
	for _, code := range []string{"HELMET_MOUNTED", "PRESENCE"} {
		b.step("add a condition", chromedp.Click(chromedp.CSS(`#add-condition`)))
		b.eval(`{ const s = [...document.querySelectorAll('#rule-conditions [name=code]')].pop(); s.value = '` + code + `'; s.dispatchEvent(new Event('change')) }`)
	}
	b.checkA11y("the rules editor with the suggestions and three conditions")
	// Last, as it changes the window's size: on a phone, the alarms as cards,
	// the header's menu open.
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(in.base+"/console/#/alarms"))
	b.waitJS("the alarms on a phone", `document.querySelector('#alarms tr[data-id]') !== null && getComputedStyle(document.getElementById('menu-toggle')).display !== 'none'`, 15*time.Second)
	b.step("open the menu", chromedp.Click(chromedp.CSS(`#menu-toggle`)), chromedp.WaitVisible(chromedp.CSS(`#nav a[data-view=fleet]`)))
	b.checkA11y("the alarms on a phone with the header's menu open")
}
