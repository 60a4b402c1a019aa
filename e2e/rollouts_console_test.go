package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// TestConsoleRolloutsInBrowser: an owner starts a rollout from the
// firmware page in headless Chromium (the version's model and revision
// filled in, the other settings chosen, after a confirmation), follows it
// on its page (its phases, its mounts by state, its mounts), pauses and
// resumes it, sees it pause itself live when a mount of the open phase
// refuses the install (ROLLOUT_PAUSED over accountEvents; the page's timer
// is switched off, so only the event can show it), finds it on the
// rollouts page and cancels it. The form warns of a downgrade and starts
// afresh for another version; a rollout not found says so, with a retry.
// A mount's page lists its rollouts: one that rolled back FAILED by the
// rollback, beside its install's EXECUTED receipt. MOUNTD_SCREENSHOTS=docs writes
// docs/console-rollouts.png.
func TestConsoleRolloutsInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	in.publish(t, "HL-2", "1.3.0", 1<<20, "--available-since", past)
	in.publish(t, "HL-2", "1.4.0", 1<<20, "--available-since", past)
	in.publish(t, "HL-2", "1.5.0", 1<<20, "--available-since", past)
	devices := map[string]*device{}
	for i := range 6 {
		uid := fmt.Sprintf("MNT-%04d", i+1)
		devices[uid] = newDevice(uid)
		associateWith(t, api, map[string]any{"uid": uid, "name": "Bay " + fmt.Sprint(i+1), "modelNumber": "HL-2", "devicePublicKey": devices[uid].publicKey()})
		at := time.Now().UTC().Truncate(time.Millisecond)
		report := devices[uid].signedReport("1.4.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: fmt.Sprint(90 - 7*i), OccurredAt: at},
			protocol.ReportEntry{Code: "MOUNT_LOCKED", Value: "1", OccurredAt: at}, protocol.ReportEntry{Code: "HELMET_MOUNTED", Value: "1", OccurredAt: at})
		if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", report, nil); err != nil {
			t.Fatal(err)
		}
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	rollouts := func() []gqlRollout {
		t.Helper()
		return field[struct{ Rollouts []gqlRollout }](t, a.gql(t, `{ rollouts { rollouts { `+gqlRolloutFields+` } } }`, nil), "rollouts").Rollouts
	}

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	// The confirmations are accepted, and their text kept.
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return true }`)

	// The firmware page: a Start rollout button per version, the form
	// filled in with the version's model and revision.
	b.step("open the firmware", chromedp.Click(chromedp.CSS(`#nav a[data-view=firmware]`)))
	startButton := `#firmware tr[data-model="HL-2"][data-revision="1.5.0"] button.start-rollout`
	b.waitJS("the catalogue with its buttons", `document.querySelector('`+startButton+`') !== null && document.getElementById('rollout-form').hidden`, 10*time.Second)
	// 1.3.0 is older than what the fleet runs: the form warns of the
	// downgrade, and so does its confirmation.
	older := `#firmware tr[data-model="HL-2"][data-revision="1.3.0"] button.start-rollout`
	b.step("open the form for 1.3.0", chromedp.Click(chromedp.CSS(older)), chromedp.WaitVisible(chromedp.CSS(`#rollout-form`)))
	b.waitJS("the downgrade said", `!document.getElementById('rollout-downgrade').hidden && `+
		`document.getElementById('rollout-downgrade').textContent === '6 mounts of HL-2 run a newer revision (up to 1.4.0): the rollout would take them back to 1.3.0.'`, 5*time.Second)
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return false }`)
	b.step("submit it, declined", chromedp.Click(chromedp.CSS(`#rollout-form button[type=submit]`)))
	if text := b.evalString(`window.__confirmed`); !strings.Contains(text, "Start rolling out 1.3.0 to the HL-2 mounts") || !strings.Contains(text, "back to 1.3.0") {
		t.Fatalf("the confirmation says %q", text)
	}
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return true }`)
	b.eval(`document.getElementById('rollout-phases-input').value = '7'`)
	b.eval(`document.getElementById('rollout-form-status').say('left over', true)`)
	// Opened for another version, the form starts afresh.
	b.step("start a rollout of 1.5.0", chromedp.Click(chromedp.CSS(startButton)), chromedp.WaitVisible(chromedp.CSS(`#rollout-form`)))
	b.waitJS("the form as at first", `document.getElementById('rollout-phases-input').value === '1, 10, 50, 100' && document.getElementById('rollout-downgrade').hidden && `+
		`document.getElementById('rollout-form-status').textContent === ''`, 5*time.Second)
	b.waitJS("the form filled in", `document.getElementById('rollout-model').value === 'HL-2' && document.getElementById('rollout-revision').value === '1.5.0' && `+
		`document.activeElement === document.getElementById('rollout-phases-input') && document.getElementById('rollout-form-title').textContent.includes('1.5.0')`, 5*time.Second)
	b.eval(`document.getElementById('rollout-phases-input').value = ''`)
	b.eval(`document.getElementById('rollout-threshold').value = ''`)
	b.eval(`document.getElementById('rollout-min-sample').value = ''`)
	b.step("choose the settings",
		chromedp.SendKeys(chromedp.CSS(`#rollout-phases-input`), "50, 100"),
		chromedp.SendKeys(chromedp.CSS(`#rollout-threshold`), "40"),
		chromedp.SendKeys(chromedp.CSS(`#rollout-min-sample`), "1"),
		chromedp.Click(chromedp.CSS(`#rollout-idle`)))
	b.checkA11y("the firmware page with the rollout form")
	b.step("start it", chromedp.Click(chromedp.CSS(`#rollout-form button[type=submit]`)))
	b.waitJS("started", `document.getElementById('rollout-created')?.textContent === 'HL-2 → 1.5.0'`, 10*time.Second)
	if text := b.evalString(`window.__confirmed`); !strings.Contains(text, "Start rolling out 1.5.0 to the HL-2 mounts") {
		t.Fatalf("the confirmation says %q", text)
	}
	got := rollouts()
	if len(got) != 1 || got[0].Targets != 6 || !slices.Equal(got[0].Phases, []int{50, 100}) || got[0].FailureThreshold != 40 || got[0].MinSample != 1 ||
		got[0].HealthWindow != "1h0m0s" || got[0].RequireIdle || got[0].Filter != nil || got[0].State != "RUNNING" || got[0].Counts.Eligible != 3 {
		t.Fatalf("the rollout: %+v", got)
	}
	ro := got[0]

	// Its page. The timer that reads it again is switched off from here
	// (the console's hook window.__mountdRefreshMs): what changes without
	// an action of the page comes from its events.
	b.eval(`window.__mountdRefreshMs = 0`)
	b.step("open the rollout", chromedp.Click(chromedp.CSS(`#rollout-created`)))
	details := `document.getElementById('rollout-details')`
	count := func(state string) string {
		return `document.querySelector('#rollout-counts .progress-status[data-status=` + state + `] .progress-count')?.textContent`
	}
	phase := func(i int) string {
		return fmt.Sprintf(`document.querySelector('#rollout-phases li[data-phase="%d"]')`, i)
	}
	buttons := func(pause, resume, cancel bool) string {
		return fmt.Sprintf(`document.getElementById('rollout-pause').disabled === %v && document.getElementById('rollout-resume').disabled === %v && document.getElementById('rollout-cancel').disabled === %v`,
			!pause, !resume, !cancel)
	}
	b.waitJS("the rollout's page", `document.getElementById('rollout-title')?.textContent === 'HL-2 → 1.5.0' && `+details+`?.dataset.state === 'RUNNING' && `+
		phase(0)+`?.dataset.status === 'open' && `+phase(0)+`.getAttribute('aria-current') === 'step' && `+phase(0)+`.textContent.includes('3 mounts') && `+
		phase(1)+`?.dataset.status === 'waiting' && `+count("eligible")+` === '3 of 6' && `+count("pending")+` === '3 of 6' && `+
		`document.querySelectorAll('#rollout-mounts tbody tr[data-uid]').length === 6 && `+buttons(true, false, true), 10*time.Second)
	b.waitJS("the rollout's page is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	b.checkA11y("a rollout's page")
	// The page does not move when its connection changes, or the count of
	// alarms arrives (the connection's badge rewrapped the bar once, and a
	// click on Cancel at that moment missed).
	if tops := b.evalString(`(() => { const c = document.getElementById('connection'), a = document.getElementById('alarm-count');
		const was = [c.hidden, c.textContent, c.className, a.hidden, a.textContent, a.className]; const tops = [];
		for (const [hidden, text, cls] of [[false, 'live', 'live'], [false, 'connecting…', 'connecting'], [false, 'reconnecting…', 'down'], [true, '', '']]) {
			c.hidden = hidden; c.textContent = text; c.className = 'connection ' + cls; tops.push(document.getElementById('rollout-cancel').getBoundingClientRect().top) }
		for (const [hidden, text, cls] of [[true, '', ''], [false, '999 active alarms', 'attention'], [false, '1 active alarm', '']]) {
			a.hidden = hidden; a.textContent = text; a.className = 'alarm-count ' + cls; tops.push(document.getElementById('rollout-cancel').getBoundingClientRect().top) }
		[c.hidden, c.textContent, c.className, a.hidden, a.textContent, a.className] = was; return String(new Set(tops).size) })()`); tops != "1" {
		t.Fatalf("the page moves with the connection's or the alarms' badge: %s positions of Cancel", tops)
	}

	// Pause and resume.
	b.step("pause it", chromedp.Click(chromedp.CSS(`#rollout-pause`)))
	b.waitJS("paused", details+`.dataset.state === 'PAUSED' && document.querySelector('#rollout-details .paused-reason')?.textContent === 'paused by a person' && `+
		phase(0)+`.dataset.status === 'open, paused' && document.getElementById('rollout-status').textContent.startsWith('The rollout is paused') && `+buttons(false, true, true), 10*time.Second)
	b.step("resume it", chromedp.Click(chromedp.CSS(`#rollout-resume`)))
	b.waitJS("resumed", details+`.dataset.state === 'RUNNING' && document.querySelector('#rollout-details .paused-reason') === null && `+buttons(true, false, true), 10*time.Second)

	// Phones pass two mounts of the open phase; one installs, the other
	// refuses the image: more than 40% of one decided mount failed, and the
	// rollout pauses itself, shown live.
	var open []string
	for uid, tg := range a.rolloutTargets(t, ro.ID) {
		if tg.State == "ELIGIBLE" {
			open = append(open, uid)
		}
	}
	slices.Sort(open)
	if len(open) != 3 {
		t.Fatalf("the open phase: %v", open)
	}
	install := func(uid string) string {
		t.Helper()
		for _, c := range in.pending(t, a.token, uid) {
			if c.Code == "INSTALL_FIRMWARE" {
				return c.ID
			}
		}
		t.Fatalf("%s is not offered the install", uid)
		return ""
	}
	// The first executes it (INSTALLING: a fetch alone is no outcome).
	executed := install(open[0])
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+open[0]+"/commands/receipts", receipts(devices[open[0]].receipt(executed, "EXECUTED", "", time.Now())), nil); err != nil {
		t.Fatal(err)
	}
	refused := install(open[1])
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+open[1]+"/commands/receipts", receipts(devices[open[1]].receipt(refused, "REFUSED", "bad image", time.Now())), nil); err != nil {
		t.Fatal(err)
	}
	failed := `document.querySelector('#rollout-mounts tr[data-uid="` + open[1] + `"]')`
	b.waitJS("paused by itself, live", details+`.dataset.state === 'PAUSED' && document.querySelector('#rollout-details .paused-reason')?.textContent === 'too many failures' && `+
		count("failed")+` === '1 of 6' && `+count("installing")+` === '1 of 6' && `+count("eligible")+` === '1 of 6' && `+
		failed+`?.dataset.state === 'FAILED' && `+failed+`.textContent.includes('bad image') && `+buttons(false, true, true)+` && `+
		`document.getElementById('rollout-status').textContent.startsWith('The rollout paused itself: more than 40%') && document.getElementById('rollout-status').getAttribute('role') === 'alert'`, 10*time.Second)
	// The whole page in the picture.
	b.step("a window the page's height", chromedp.EmulateViewport(1280, 1180))
	b.screenshot(screenshotDir(t), "console-rollouts.png")
	b.step("the window as it was", chromedp.EmulateViewport(1280, 860))

	// The mount that executed the install reports the new revision, then
	// the old one with a higher counter: a rollback. Its page shows its
	// rollout FAILED by the rollback beside the install's EXECUTED, and the
	// refusing mount's page the refusal.
	for _, revision := range []string{"1.5.0", "1.4.0"} {
		at := time.Now().UTC().Truncate(time.Millisecond)
		if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+open[0]+"/states",
			devices[open[0]].signedReport(revision, protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "77", OccurredAt: at}), nil); err != nil {
			t.Fatal(err)
		}
	}
	if tg := a.rolloutTargets(t, ro.ID)[open[0]]; tg.State != "FAILED" || tg.Reason == nil || *tg.Reason != "rollback" {
		t.Fatalf("after the rollback %+v", tg)
	}
	b.eval(`location.hash = '#/mounts/` + open[0] + `'`)
	mine := `document.querySelector('#mount-rollouts tr[data-rollout="` + ro.ID + `"]')`
	installRow := `document.querySelector('#firmware-installs tr[data-id="` + executed + `"]')`
	auditRow := `document.querySelector('#audit tr[data-id="` + executed + `"]')`
	b.waitJS("the mount's rollout, failed by the rollback", mine+`?.dataset.state === 'FAILED' && `+mine+`.dataset.reason === 'rollback' && `+
		mine+`.textContent.includes('1.5.0') && `+mine+`.textContent.includes('failed: rollback') && `+mine+`.textContent.includes('paused') && `+
		installRow+`?.dataset.status === 'EXECUTED' && `+installRow+`.dataset.outcome === 'FAILED' && `+installRow+`.textContent.includes('1.5.0') && `+
		installRow+`.textContent.includes('failed: rollback') && `+auditRow+`?.dataset.status === 'EXECUTED' && `+auditRow+`.textContent.includes('rollout: failed: rollback')`, 10*time.Second)
	b.checkA11y("a mount's page with its rollouts")
	// Laid out afresh on a phone's screen (the charts take their width once).
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Reload())
	b.waitJS("the mount's rollouts fit", mine+`?.dataset.state === 'FAILED' && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	// The page's hooks again, as the reload dropped them.
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return true }`)
	b.eval(`window.__mountdRefreshMs = 0`)
	b.eval(`document.getElementById('mount-firmware').scrollIntoView()`)
	b.screenshot(screenshotDir(t), "mount-rollouts-390.png")
	b.step("the window as it was", chromedp.EmulateViewport(1280, 860))
	b.eval(`location.hash = '#/mounts/` + open[1] + `'`)
	refusedRow := `document.querySelector('#mount-rollouts tr[data-rollout="` + ro.ID + `"]')`
	b.waitJS("the refusing mount's rollout", `document.getElementById('mount-uid')?.textContent === '`+open[1]+`' && `+refusedRow+`?.dataset.state === 'FAILED' && `+
		refusedRow+`.dataset.reason === 'refused: bad image' && document.querySelector('#firmware-installs tr[data-id="`+refused+`"]')?.dataset.status === 'REFUSED'`, 10*time.Second)
	b.eval(`document.getElementById('mount-firmware').scrollIntoView()`)
	b.screenshot(screenshotDir(t), "mount-rollouts-1280.png")

	// The rollouts page.
	b.step("open the rollouts", chromedp.Click(chromedp.CSS(`#nav a[data-view=rollouts]`)))
	row := `document.querySelector('#rollouts tr[data-id="` + ro.ID + `"]')`
	b.waitJS("listed, paused, with its progress", row+`?.dataset.state === 'PAUSED' && `+row+`.querySelector('.rollout-words').textContent === '2 of 6 decided, 2 failed' && `+
		row+`.querySelector('.rollout-seg.failed').style.width !== '0%' && `+row+`.textContent.includes('1 of 2') && document.querySelector('#nav a[data-view=rollouts]').getAttribute('aria-current') === 'page'`, 10*time.Second)
	b.checkA11y("the rollouts page")

	// Cancelled from its page.
	b.eval(row + `.querySelector('a').click()`)
	b.waitJS("the rollout's page again", details+`?.dataset.state === 'PAUSED' && `+buttons(false, true, true), 10*time.Second)
	// As before the pause: acted on once the page follows its events, so
	// that the click does not meet the subscription's start.
	b.waitJS("the rollout's page is live again", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	b.step("cancel it", chromedp.Click(chromedp.CSS(`#rollout-cancel`)))
	b.waitJS("cancelled", details+`.dataset.state === 'CANCELED' && `+buttons(false, false, false)+` && document.getElementById('rollout-status').textContent === 'The rollout is cancelled.' && `+
		phase(0)+`.dataset.status === 'stopped' && `+phase(1)+`.dataset.status === 'never opened' && `+details+`.textContent.includes('Ended')`, 10*time.Second)
	if text := b.evalString(`window.__confirmed`); !strings.Contains(text, "Cancel the rollout of 1.5.0 to the HL-2 mounts?") {
		t.Fatalf("the confirmation says %q", text)
	}
	if got := rollouts(); len(got) != 1 || got[0].State != "CANCELED" || got[0].EndedAt == nil {
		t.Fatalf("the rollout: %+v", got)
	}

	// On a phone's screen the pages fit its width (tables scroll in their cards).
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844))
	b.waitJS("the rollout's page fits", details+`?.dataset.state === 'CANCELED' && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.step("the rollouts on a phone", chromedp.Navigate(in.base+"/console/#/rollouts"))
	b.waitJS("the rollouts page fits", row+` !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.step("the firmware on a phone", chromedp.Navigate(in.base+"/console/#/firmware"))
	b.waitJS("the start buttons", `document.querySelector('`+startButton+`') !== null`, 10*time.Second)
	b.eval(`document.querySelector('` + startButton + `').click()`)
	b.waitJS("the rollout form fits", `!document.getElementById('rollout-form').hidden && document.documentElement.scrollWidth <= 390`, 10*time.Second)

	// A rollout that is not there, or a link with a malformed escape: the
	// page says so, with a retry, instead of loading for ever.
	for _, hash := range []string{"#/rollouts/no-such-rollout", "#/rollouts/%E0%A4%A"} {
		b.eval(`location.hash = '` + hash + `'`)
		b.waitJS("not found: "+hash, `document.getElementById('rollout-title')?.textContent === 'Rollout not found' && document.getElementById('rollout-retry') !== null && `+
			`document.getElementById('rollout-error').getAttribute('role') === 'alert'`, 10*time.Second)
	}
	b.step("try again", chromedp.Click(chromedp.CSS(`#rollout-retry`)))
	b.waitJS("still not found", `document.getElementById('rollout-title')?.textContent === 'Rollout not found' && document.getElementById('rollout-retry') !== null`, 10*time.Second)
	b.checkA11y("a rollout not found")
	b.checkOrigin(in.base)
}

// TestConsoleRolloutOfADeprecatedVersion: once the operator deprecates a
// rollout's version (which pauses it), its page says so and offers no
// Resume (the server would refuse it), only Cancel.
func TestConsoleRolloutOfADeprecatedVersion(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	in.publish(t, "HL-2", "1.4.0", 1<<10, "--available-since", past)
	in.publish(t, "HL-2", "1.5.0", 1<<10, "--available-since", past)
	for i := range 2 {
		uid := fmt.Sprintf("MNT-%04d", i+1)
		associateWith(t, api, map[string]any{"uid": uid, "modelNumber": "HL-2", "softwareRevision": "1.4.0", "devicePublicKey": newDevice(uid).publicKey()})
	}
	var ro gqlRollout
	if err := api.Do(context.Background(), http.MethodPost, "/rollouts", map[string]any{"modelNumber": "HL-2", "softwareRevision": "1.5.0", "phases": []int{100}}, &ro); err != nil || ro.ID == "" {
		t.Fatalf("create the rollout: %+v, %v", ro, err)
	}
	if _, said, err := in.tryCLI("firmware", "deprecate", "--model", "HL-2", "--revision", "1.5.0"); err != nil || !strings.Contains(said, ro.ID) {
		t.Fatalf("deprecate: %v, %q", err, said)
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.eval(`window.confirm = () => true`)
	b.step("open the rollout", chromedp.Navigate(in.base+"/console/#/rollouts/"+ro.ID))
	details := `document.getElementById('rollout-details')`
	b.waitJS("paused, said deprecated, no resume", details+`?.dataset.state === 'PAUSED' && `+
		`document.getElementById('rollout-deprecated')?.textContent.startsWith('Version 1.5.0 is deprecated') && `+
		`document.getElementById('rollout-pause').disabled && document.getElementById('rollout-resume').disabled && !document.getElementById('rollout-cancel').disabled`, 10*time.Second)
	b.waitJS("live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	b.checkA11y("a rollout of a deprecated version")
	b.step("cancel it", chromedp.Click(chromedp.CSS(`#rollout-cancel`)))
	b.waitJS("cancelled, the note gone", details+`?.dataset.state === 'CANCELED' && document.getElementById('rollout-deprecated') === null`, 10*time.Second)
}
