package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// reportCPU posts a CPU temperature for uid.
func reportCPU(t *testing.T, api *client.Client, uid, value string) {
	t.Helper()
	states := []any{map[string]any{"code": "CPU_TEMPERATURE", "value": value, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": states}, nil); err != nil {
		t.Fatal(err)
	}
}

// ackOnScreen: every Acknowledge button on the alarms page is drawn whole
// within the window and within the box its table scrolls in.
const ackOnScreen = `[...document.querySelectorAll('#alarms button[data-action=acknowledge]')].every((b) => {
  const r = b.getBoundingClientRect(), box = b.closest('.scroll').getBoundingClientRect();
  return r.width > 0 && r.left >= 0 && r.right <= innerWidth && r.left >= box.left && r.right <= box.right })`

// TestConsoleAlarmsInBrowser: an owner works with presence and alarms in
// headless Chromium. The account has no rule: the rules editor offers the
// suggested ones and one click adds one; a rule is written in the form
// (a bad one refused first, the field marked); the fleet shows presence in
// a column and filters by it; an alarm raised by a report appears live on
// the alarms page and in the header's count, is acknowledged from there
// (still active), and is listed on its mount's page; a rule is disabled
// and deleted. The Acknowledge button is on the screen at 1280 and 390 px
// wide. A maintainer sees the alarms but no Acknowledge button.
// MOUNTD_SCREENSHOTS=docs writes docs/console-alarms.png.
func TestConsoleAlarmsInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	for i, uid := range []string{"MNT-0001", "MNT-0002", "MNT-0003"} {
		associate(t, api, uid)
		reportStates(t, api, uid, 80-10*i, true, time.Now())
	}
	// One waiting for confirmation, never heard from.
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-0004"}, nil); err != nil {
		t.Fatal(err)
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "max", "--role", "restricted", "--password-stdin")
	// What the server holds, read through GraphQL as the console reads it.
	alarms := func(mountUID string) []gqlAlarm {
		t.Helper()
		return field[struct{ Alarms []gqlAlarm }](t, a.gql(t, `query($m: ID) { alarms(mountUid: $m) { alarms { `+alarmFields+` } } }`,
			map[string]any{"m": mountUID}), "alarms").Alarms
	}
	rules := func() []gqlRule {
		t.Helper()
		return field[struct{ Rules []gqlRule }](t, a.gql(t, `{ alarmRules { rules { `+ruleFields+` } } }`, nil), "alarmRules").Rules
	}

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.eval(`window.confirm = () => true`)
	b.waitJS("the header counts no active alarm", `document.getElementById('alarm-count')?.dataset.count === '0' && !document.getElementById('alarm-count').hidden`, 10*time.Second)
	b.waitJS("the overview counts presence", `document.querySelector('#count-online .value')?.textContent === '3' && document.querySelector('#count-unknown .value')?.textContent === '1' && `+
		`document.querySelector('#count-alarms .value')?.textContent === '0'`, 10*time.Second)

	// The fleet: presence in a column, and a filter.
	b.step("open the fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("presence per mount", `document.querySelector('#fleet tr[data-uid="MNT-0001"] .c-presence')?.textContent === 'online' && `+
		`document.querySelector('#fleet tr[data-uid="MNT-0004"] .c-presence')?.textContent === 'unknown'`, 10*time.Second)
	b.eval(`{ const s = document.getElementById('presence'); s.value = 'UNKNOWN'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("filtered to mounts never heard from", `location.hash === '#/fleet?presence=UNKNOWN' && [...document.querySelectorAll('#fleet tbody tr[data-uid]')].map((tr) => tr.dataset.uid).join() === 'MNT-0004'`, 5*time.Second)

	// The rules editor: no rule yet, so the suggestions are offered, open.
	b.step("open the rules", chromedp.Click(chromedp.CSS(`#nav a[data-view=alarm-rules]`)), chromedp.WaitVisible(chromedp.CSS(`#alarm-rules`)))
	b.waitJS("the suggestions are offered", `document.getElementById('suggested').open && document.querySelectorAll('#suggested-rules li').length > 0`, 10*time.Second)
	if n := len(rules()); n != 0 {
		t.Fatalf("the account has %d rules before any was added: the suggestions are imposed", n)
	}
	suggestion := b.evalString(`document.querySelector('#suggested-rules li b').textContent`)
	b.step("add the first suggestion", chromedp.Click(chromedp.CSS(`#suggested-rules li button[data-action=add-suggested]`)))
	b.waitJS("the suggested rule is listed", `document.querySelectorAll('#alarm-rules tbody tr[data-id]').length === 1 && `+
		`document.querySelector('#suggested-rules li button').textContent === 'Added' && document.querySelector('#suggested-rules li button').disabled`, 10*time.Second)
	if got := rules(); len(got) != 1 || got[0].Name != suggestion {
		t.Fatalf("after adding the suggestion %q: %+v", suggestion, got)
	}

	// A rule of our own: a bad value first, refused with the field marked.
	b.step("write a rule", chromedp.SendKeys(chromedp.CSS(`#rule-name`), "Too hot"))
	b.eval(`{ const s = document.getElementById('rule-severity'); s.value = 'CRITICAL' }`)
	b.eval(`{ const s = document.querySelector('#rule-conditions [name=code]'); s.value = 'CPU_TEMPERATURE'; s.dispatchEvent(new Event('change')) }`)
	b.eval(`{ document.querySelector('#rule-conditions [name=op]').value = '>'; document.querySelector('#rule-conditions [name=value]').value = 'hot' }`)
	b.step("create it", chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.waitJS("the bad value is refused and marked", `document.querySelector('#rule-form-status.error') !== null && `+
		`document.querySelector('#rule-conditions [name=value]').getAttribute('aria-invalid') === 'true'`, 10*time.Second)
	b.eval(`document.querySelector('#rule-conditions [name=value]').value = '70'`)
	b.step("create it again", chromedp.Click(chromedp.CSS(`#rule-form button[type=submit]`)))
	b.waitJS("the rule is listed", `[...document.querySelectorAll('#alarm-rules tbody tr[data-id]')].some((tr) => tr.innerText.includes('Too hot') && tr.innerText.includes('CPU temperature > 70'))`, 10*time.Second)
	if got := rules(); len(got) != 2 || got[1].Name != "Too hot" {
		t.Fatalf("the rules: %+v", got)
	}

	// Edit the suggested rule: its threshold down to 15 %.
	ruleOf := func(name string) string {
		return `[...document.querySelectorAll('#alarm-rules tbody tr[data-id]')].find((tr) => tr.querySelector('td').textContent === '` + name + `')`
	}
	b.eval(ruleOf(suggestion) + `.querySelector('[data-action=edit]').click()`)
	b.waitJS("the form holds the rule", `document.getElementById('rule-name').value === '`+suggestion+`' && document.getElementById('rule-submit').textContent === 'Save changes' && `+
		`document.querySelectorAll('#rule-conditions li').length === 1 && document.querySelector('#rule-conditions [name=value]').value === '20'`, 5*time.Second)
	b.eval(`document.querySelector('#rule-conditions [name=value]').value = '15'`)
	b.step("save it", chromedp.Click(chromedp.CSS(`#rule-submit`)))
	b.waitJS("saved, the form new again, the focus on Edit", ruleOf(suggestion)+`.innerText.includes('Battery < 15%') && document.getElementById('rule-submit').textContent === 'Create rule' && `+
		`document.activeElement === `+ruleOf(suggestion)+`.querySelector('[data-action=edit]')`, 10*time.Second)
	if got := rules(); len(got) != 2 || got[0].Name != suggestion || *got[0].Conditions[0].Value != "15" || got[0].Severity != "WARNING" {
		t.Fatalf("after the edit: %+v", got)
	}

	// The alarms page: an alarm appears live, and in the header's count.
	b.step("open the alarms", chromedp.Click(chromedp.CSS(`#nav a[data-view=alarms]`)), chromedp.WaitVisible(chromedp.CSS(`#alarms`)))
	b.waitJS("the alarms page is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	reportCPU(t, api, "MNT-0002", "81.5")
	row := `document.querySelector('#alarms tr[data-uid="MNT-0002"]')`
	b.waitJS("the alarm appears live", row+`?.dataset.state === 'ACTIVE' && `+row+`.innerText.includes('Too hot') && `+row+`.innerText.includes('CPU 81.5 °C')`, 15*time.Second)
	b.waitJS("the header counts it", `document.getElementById('alarm-count').textContent === '1 active alarm'`, 10*time.Second)
	// One more, of another mount, one that cleared already, and one of
	// the suggested rule (battery below 20 %, a warning).
	reportCPU(t, api, "MNT-0003", "77")
	reportCPU(t, api, "MNT-0001", "72")
	reportCPU(t, api, "MNT-0001", "45")
	reportStates(t, api, "MNT-0001", 12, true, time.Now())
	b.waitJS("three active (the most severe first), one cleared", `[...document.querySelectorAll('#alarms tbody tr[data-id]')].map((tr) => tr.dataset.state + ':' + tr.dataset.severity).join() === `+
		`'ACTIVE:CRITICAL,ACTIVE:CRITICAL,ACTIVE:WARNING,CLEARED:CRITICAL'`, 15*time.Second)
	b.waitJS("the header counts three", `document.getElementById('alarm-count').textContent === '3 active alarms'`, 10*time.Second)
	b.waitJS("the counts", `document.getElementById('alarms-active').textContent === '3' && document.getElementById('alarms-unacknowledged').textContent === '3'`, 5*time.Second)

	// Acknowledge: the alarm stays active, acknowledged.
	b.step("acknowledge", chromedp.Click(chromedp.CSS(`#alarms tr[data-uid="MNT-0002"] button[data-action=acknowledge]`)))
	b.waitJS("acknowledged", row+`.dataset.state === 'ACTIVE' && !`+row+`.querySelector('button[data-action=acknowledge]') && `+row+`.querySelector('.ack').innerText.includes('by you') && `+
		`document.getElementById('alarms-unacknowledged').textContent === '2'`, 10*time.Second)
	var acked *gqlAlarm
	for _, al := range alarms("MNT-0002") {
		if al.State == "ACTIVE" {
			acked = &al
		}
	}
	if acked == nil || acked.AcknowledgedAt == nil {
		t.Fatalf("after acknowledging: %+v", alarms("MNT-0002"))
	}
	// Another alarm acknowledged by the API client, whose name is long:
	// on a desktop's screen (1280 px) the Acknowledge button left is on
	// the screen and the table needs no scrolling.
	for _, al := range alarms("MNT-0003") {
		if al.State == "ACTIVE" {
			a.gql(t, `mutation($id: ID!) { acknowledgeAlarm(id: $id) { id } }`, map[string]any{"id": al.ID})
		}
	}
	// It reads the client's name, never its id (issue 38).
	b.waitJS("acknowledged by the client, by name", `document.querySelector('#alarms tr[data-uid="MNT-0003"] .ack')?.innerText.includes(' by Demo Fleet API client') && `+
		`!document.querySelector('#alarms tr[data-uid="MNT-0003"]').innerText.includes('`+a.creds.ClientID+`') && `+
		`document.querySelectorAll('#alarms button[data-action=acknowledge]').length === 1`, 10*time.Second)
	b.waitJS("the Acknowledge button within the screen at 1280 px", `innerWidth === 1280 && `+ackOnScreen+` && `+
		`document.getElementById('alarms').parentElement.scrollWidth <= document.getElementById('alarms').parentElement.clientWidth`, 5*time.Second)
	b.screenshot(screenshotDir(t), "console-alarms.png")

	// Filtered by severity and mount, in the URL.
	b.eval(`{ const s = document.getElementById('alarm-severity'); s.value = 'WARNING'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("the warning only", `location.hash === '#/alarms?severity=WARNING' && [...document.querySelectorAll('#alarms tbody tr[data-id]')].map((tr) => tr.dataset.uid).join() === 'MNT-0001'`, 10*time.Second)
	b.step("a link to one mount's alarms", chromedp.Navigate(in.base+"/console/#/alarms?mount=MNT-0001"), chromedp.WaitVisible(chromedp.CSS(`#alarms`)))
	b.waitJS("only MNT-0001's", `document.getElementById('alarm-mount').value === 'MNT-0001' && [...document.querySelectorAll('#alarms tbody tr[data-id]')].map((tr) => tr.dataset.uid + ':' + tr.dataset.state).join() === 'MNT-0001:ACTIVE,MNT-0001:CLEARED'`, 10*time.Second)

	// A mount's page lists its alarms, live.
	b.step("open MNT-0003", chromedp.Navigate(in.base+"/console/#/mounts/MNT-0003"), chromedp.WaitVisible(chromedp.CSS(`#mount-alarms`)))
	b.waitJS("its alarm", `document.querySelector('#mount-alarms tr[data-id]')?.dataset.state === 'ACTIVE' && document.querySelector('#mount-presence').innerText.includes('online')`, 10*time.Second)
	b.waitJS("the mount page is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	reportCPU(t, api, "MNT-0003", "50")
	b.waitJS("cleared live", `document.querySelector('#mount-alarms tr[data-id]')?.dataset.state === 'CLEARED'`, 15*time.Second)
	b.waitJS("the header counts two", `document.getElementById('alarm-count').textContent === '2 active alarms'`, 10*time.Second)

	// Disable, then delete the rule: its alarm clears, the count drops.
	b.step("open the rules", chromedp.Navigate(in.base+"/console/#/alarm-rules"), chromedp.WaitVisible(chromedp.CSS(`#alarm-rules`)))
	b.waitJS("the rules are listed, the suggestions closed", `document.querySelectorAll('#alarm-rules tbody tr[data-id]').length === 2 && !document.getElementById('suggested').open`, 10*time.Second)
	ruleRow := `[...document.querySelectorAll('#alarm-rules tbody tr[data-id]')].find((tr) => tr.innerText.includes('Too hot'))`
	b.eval(ruleRow + `.querySelector('[data-action=toggle]').click()`)
	b.waitJS("disabled", ruleRow+`.dataset.enabled === 'false'`, 10*time.Second)
	b.waitJS("the header counts the battery's only", `document.getElementById('alarm-count').textContent === '1 active alarm'`, 10*time.Second)
	b.eval(ruleRow + `.querySelector('[data-action=delete]').click()`)
	b.waitJS("deleted", `document.querySelectorAll('#alarm-rules tbody tr[data-id]').length === 1`, 10*time.Second)
	if got := rules(); len(got) != 1 || got[0].Name != suggestion {
		t.Fatalf("after deleting: %+v", got)
	}
	// On a phone (390 px wide) the alarms and the rules fit: their tables
	// scroll in their own boxes.
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(in.base+"/console/#/alarms"), chromedp.WaitVisible(chromedp.CSS(`#alarms`)))
	b.waitJS("the alarms fit", `document.querySelector('#alarms tr[data-id]') !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.waitJS("the Acknowledge button within a phone's screen", `document.querySelectorAll('#alarms button[data-action=acknowledge]').length === 1 && `+ackOnScreen, 5*time.Second)
	b.step("the rules on a phone", chromedp.Navigate(in.base+"/console/#/alarm-rules"), chromedp.WaitVisible(chromedp.CSS(`#alarm-rules`)))
	b.waitJS("the rules fit", `document.querySelector('#alarm-rules tr[data-id]') !== null && document.querySelector('#rule-conditions li') !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.step("back to a desktop's screen", chromedp.EmulateReset())
	b.checkOrigin(in.base)

	// A maintainer reads the alarms, acknowledges none, manages no rules.
	m := newBrowserSession(t, chromium)
	m.signIn(in.base, "max")
	m.waitJS("the maintainer's header count", `document.getElementById('alarm-count')?.dataset.count === '1'`, 10*time.Second)
	m.waitJS("no rules in the navigation", `document.querySelector('#nav a[data-view=alarm-rules]').hidden && !document.querySelector('#nav a[data-view=alarms]').hidden`, time.Second)
	m.step("open the alarms", chromedp.Click(chromedp.CSS(`#nav a[data-view=alarms]`)), chromedp.WaitVisible(chromedp.CSS(`#alarms`)))
	m.waitJS("the alarms, no Acknowledge", `document.querySelectorAll('#alarms tbody tr[data-id]').length === 4 && !document.querySelector('#alarms button[data-action=acknowledge]')`, 10*time.Second)
	if txt := m.text(`#alarms`); !strings.Contains(txt, "Too hot") {
		t.Fatalf("the maintainer's alarms: %q", txt)
	}
}

// TestConsolePresenceInBrowser: with MOUNTD_OFFLINE_AFTER at 5 s, the
// fleet shows a mount online, then offline when MOUNT_OFFLINE arrives (no
// reload), then online again with the next report (MOUNT_ONLINE); its
// counts follow.
func TestConsolePresenceInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	cfg := testConfig(t.TempDir(), "")
	cfg.OfflineAfter = 5 * time.Second
	in := start(t, cfg)
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	associate(t, api, "MNT-0001")
	associate(t, api, "MNT-0002")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	reportStates(t, api, "MNT-0001", 70, true, time.Now())
	b.step("open the fleet", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	cell := func(uid string) string {
		return `document.querySelector('#fleet tr[data-uid="` + uid + `"] .c-presence')?.textContent`
	}
	b.waitJS("online and never heard from", cell("MNT-0001")+` === 'online' && `+cell("MNT-0002")+` === 'unknown' && `+
		`document.getElementById('count-online-fleet').textContent === '1'`, 10*time.Second)
	b.waitJS("the fleet is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	b.waitJS("offline, live", cell("MNT-0001")+` === 'offline' && document.getElementById('count-offline-fleet').textContent === '1'`, 40*time.Second)
	reportStates(t, api, "MNT-0001", 69, true, time.Now())
	b.waitJS("online again, live", cell("MNT-0001")+` === 'online' && document.getElementById('count-offline-fleet').textContent === '0'`, 15*time.Second)
}
