package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// TestConsoleCommandStatus: the mount page's command audit shows each
// command's status and moves it live when the mount's receipt arrives
// (EXECUTED, signed); latest values the mount did not sign are marked
// "unverified" on the mount page and in the fleet (their text stays the
// value), which a signed report takes away for good (an unsigned one
// after it changes nothing); the page passes axe-core with
// them.
func TestConsoleCommandStatus(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	const uid = "MNT-0001"
	d := newDevice(uid)
	associateWith(t, api, map[string]any{"uid": uid, "name": "Front door", "devicePublicKey": d.publicKey()})
	// The owner's unsigned report: stored, unverified.
	reportStates(t, api, uid, 80, true, time.Now().Add(-time.Hour))
	cmd := a.issue(t, uid, "code=RELEASE_HELMET")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.step("open the mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uid), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	row := `document.querySelector('#audit tbody tr[data-id="` + cmd.ID + `"]')`
	// "By" names the issuing client by its name, not its id.
	b.waitJS("the command is ISSUED, by the client's name", row+`?.dataset.status === 'ISSUED' && `+row+`.cells[3].textContent === 'ISSUED' && `+
		row+`.cells[2].textContent === 'Demo Fleet API client'`, 10*time.Second)
	b.waitJS("every latest value is marked unverified",
		`['batteryLevel', 'mountLocked', 'helmetMounted', 'cpuTemperature'].every((k) => !!document.querySelector('[data-value=' + k + '] .value.unverified'))`, 5*time.Second)
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	b.checkA11y("the mount page with statuses and badges")

	// The mount's receipt arrives: the row moves on by itself.
	now := time.Now()
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/commands/receipts", receipts(d.receipt(cmd.ID, "EXECUTED", "", now)), nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the command is EXECUTED, signed", row+`?.dataset.status === 'EXECUTED' && `+row+`.cells[3].textContent === 'EXECUTED (signed receipt)' && `+
		row+`.cells[4].textContent !== '—'`, 10*time.Second)

	// A signed battery report: its badge goes, the others stay.
	body := d.signedReport("", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "55", OccurredAt: now.UTC().Truncate(time.Millisecond)})
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", body, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("the battery is verified now", `!!(document.querySelector('[data-value=batteryLevel] .value').textContent === '55%' &&
	  !document.querySelector('[data-value=batteryLevel] .unverified') && document.querySelector('[data-value=mountLocked] .value.unverified') &&
	  getComputedStyle(document.querySelector('[data-value=mountLocked] .value'), '::after').content === '"unverified"')`, 10*time.Second)

	// The fleet marks the same.
	b.step("the fleet", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	fleetRow := `document.querySelector('#fleet tr[data-uid="` + uid + `"]')`
	b.waitJS("the fleet's badges", `!!(`+fleetRow+` && !`+fleetRow+`.querySelector('.c-batteryLevel.unverified') && `+fleetRow+`.querySelector('.c-mountLocked.unverified'))`, 10*time.Second)
	// A dot in the narrow cell, whose value is not cut; the counts say what it means.
	b.waitJS("the fleet's dots, said", `(() => { const c = `+fleetRow+`.querySelector('.c-mountLocked'); return c.scrollWidth <= c.clientWidth && `+
		`document.getElementById('count-unverified-fleet')?.textContent === '1 with values the mount did not sign' })()`, 10*time.Second)
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	// An owner's unsigned report no longer moves a value the mount has
	// signed (docs/api.md, "The truth from the mount"): once its unsigned lock value (never signed)
	// shows, the battery is still 55 %, without a dot.
	b.waitJS("the lock cell's text", `!!(window.lockBefore = `+fleetRow+`.querySelector('.c-mountLocked').textContent)`, 5*time.Second)
	reportStates(t, api, uid, 40, false, time.Now())
	b.waitJS("an unsigned report leaves the signed battery", `!!(`+fleetRow+`.querySelector('.c-mountLocked').textContent !== window.lockBefore && `+
		fleetRow+`.querySelector('.c-batteryLevel').textContent === '55%' && !`+fleetRow+`.querySelector('.c-batteryLevel.unverified'))`, 10*time.Second)
}
