package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// TestConsoleMountPage acts from a mount's page in headless Chromium: the
// identity fields, the lock and helmet timeline (and its changes after a
// report, live), rename with a validation error first, a command signed
// (the signature verifies with the mount's owner key) and listed in the
// audit, NFC tags synchronised both ways with a bad uid refused first; a
// restricted user sees no owner action; every control is labelled, and the
// page fits 390 px.
func TestConsoleMountPage(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	const uid = "MNT-0001"
	deviceKey := newDevice(uid).publicKey()
	ownerKey := associateWith(t, api, map[string]any{"uid": uid, "name": "Front door", "modelNumber": "HL-2", "serialNumber": "SN-77001",
		"macAddress": "AA:BB:CC:DD:EE:01", "firmwareRevision": "1.4.0", "softwareRevision": "2.1.3", "devicePublicKey": deviceKey})
	associate(t, api, "MNT-0002")
	// A day's reports: locked, unlocked, locked; the helmet
	// present, absent, present (reportStates: present on even batteries).
	for i, h := range []int{18, 11, 5} {
		reportStates(t, api, uid, 80+i, i != 1, time.Now().Add(-time.Duration(h)*time.Hour))
	}
	// And a temperature between, for fractional labels on its axis.
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{map[string]any{"code": "CPU_TEMPERATURE",
		"value": "41.25", "occurredAt": time.Now().Add(-4 * time.Hour).UTC().Format(time.RFC3339Nano)}}}, nil); err != nil {
		t.Fatal(err)
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "rita", "--role", "restricted",
		"--mount", "MNT-0002", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.step("open the mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uid), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))

	// Identity, with the device key's fingerprint (its first 16 hex
	// characters in groups of four; the whole key on hover).
	fingerprint := deviceKey[0:4] + " " + deviceKey[4:8] + " " + deviceKey[8:12] + " " + deviceKey[12:16]
	for field, want := range map[string]string{"serialNumber": "SN-77001", "macAddress": "AA:BB:CC:DD:EE:01", "modelNumber": "HL-2",
		"firmwareRevision": "1.4.0", "softwareRevision": "2.1.3", "devicePublicKey": fingerprint} {
		if got := b.text(`#identity [data-field=` + field + `] dd`); got != want {
			t.Errorf("identity %s = %q, want %q", field, got, want)
		}
	}
	if got := b.evalString(`document.querySelector('#identity [data-field=devicePublicKey] code').title`); got != deviceKey {
		t.Errorf("the device key's title %q, want %q", got, deviceKey)
	}
	if got := b.text(`#mount-title`); got != "Front door MNT-0001" {
		t.Errorf("title %q", got)
	}

	// The timeline: three changes of each, locked and present now; its
	// summary and its list of changes say so in words.
	bands := func(code string) string {
		return `[...document.querySelectorAll('#timeline .tl-row[data-code=` + code + `] rect')].map((r) => r.dataset.value || '?').join('')`
	}
	b.waitJS("the timeline's bands", bands("MOUNT_LOCKED")+` === '?101' && `+bands("HELMET_MOUNTED")+` === '?101'`, 10*time.Second)
	summary := b.text(`#timeline-summary`)
	for _, want := range []string{"Lock: locked", "3 changes, locked now.", "Helmet: present", "3 changes, present now."} {
		if !strings.Contains(summary, want) {
			t.Errorf("timeline summary %q lacks %q", summary, want)
		}
	}
	if got := b.evalString(`document.querySelector('#timeline [role=img]').getAttribute('aria-describedby')`); got != "timeline-summary" {
		t.Errorf("the timeline is described by %q", got)
	}
	// The charts: every y axis label fits its axis (41.5°C was cut off),
	// no legend below; the value under the cursor shows beside the title.
	clipped := `[...document.querySelectorAll('#mount-charts [data-chart]')].map((box) => { const u = box.plot, y = u.axes[1];
		const ctx = document.createElement('canvas').getContext('2d'); ctx.font = y.font[0];
		const widest = Math.max(...y._values.map((v) => ctx.measureText(v).width));
		return widest + y.ticks.size + y.gap > y._size ? box.dataset.chart + ': ' + y._values.join(' ') + ' in ' + y._size + 'px' : '' }).join('')`
	b.waitJS("the charts drawn", `document.querySelectorAll('#mount-charts [data-chart]').length === 2 && [...document.querySelectorAll('#mount-charts [data-chart]')].every((b) => b.plot?.axes[1]._values?.length)`, 10*time.Second)
	if got := b.evalString(clipped); got != "" {
		t.Errorf("clipped y axis labels: %s", got)
	}
	if n := b.evalString(`String(document.querySelectorAll('#mount-charts .u-legend').length)`); n != "0" {
		t.Errorf("%s legends below the charts", n)
	}
	b.eval(`{ const box = document.querySelector('#mount-charts [data-chart="CPU temperature"]'); box.plot.setCursor({ left: 5, top: 5 }) }`)
	if got := b.text(`#mount-charts [data-chart="CPU temperature"] .chart-readout`); !strings.HasPrefix(got, "41 °C at ") {
		t.Errorf("the value under the cursor: %q", got)
	}
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	// A report (unlocked, helmet absent) draws itself after a moment.
	reportStates(t, api, uid, 83, false, time.Now())
	b.waitJS("the new report's bands", bands("MOUNT_LOCKED")+` === '?1010' && `+bands("HELMET_MOUNTED")+` === '?1010'`, 15*time.Second)
	b.waitJS("the new report's words", `document.getElementById('timeline-summary').textContent.includes('unlocked now') &&
	  document.getElementById('timeline-summary').textContent.includes('absent now') &&
	  document.querySelectorAll('#timeline-changes tbody tr').length === 8`, 5*time.Second)

	// Every control is labelled.
	unlabelled := `[...document.querySelectorAll('main input, main select, main textarea')].filter((el) => !el.labels.length && !el.getAttribute('aria-label')).map((el) => el.id || el.name).join(',')`
	if got := b.evalString(unlabelled); got != "" {
		t.Errorf("unlabelled controls: %s", got)
	}

	// Rename: too long first, the field's error shown; then by keyboard.
	b.eval(`{ const i = document.getElementById('rename-input'); i.value = 'x'.repeat(101); document.getElementById('rename').requestSubmit() }`)
	b.waitJS("the name's error", `document.getElementById('rename-status').textContent === 'name must be at most 100 characters' &&
	  document.getElementById('rename-status').getAttribute('role') === 'alert' && document.getElementById('rename-input').getAttribute('aria-invalid') === 'true'`, 5*time.Second)
	b.eval(`document.getElementById('rename-input').value = ''`)
	b.step("rename by keyboard", chromedp.SendKeys(chromedp.CSS(`#rename-input`), "Back door"), chromedp.KeyEvent("\r"))
	b.waitJS("renamed", `document.getElementById('mount-name').textContent === 'Back door' && document.getElementById('rename-status').textContent.startsWith('Renamed')`, 5*time.Second)

	// A command with its parameters: the signed command to carry, and the audit.
	b.eval(`{ const s = document.getElementById('command-code'); s.value = 'CONFIGURE_ALARM'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("the alarm's parameters", `['alarmMode', 'alarmSensitivity', 'alarmVolume'].every((p) => document.getElementById('param-' + p)?.labels.length === 1)`, time.Second)
	b.eval(`{ document.getElementById('param-alarmMode').value = 'SILENT'; document.getElementById('param-alarmVolume').value = 'HIGH'; document.getElementById('command-form').requestSubmit() }`)
	b.waitJS("the signed command", `document.getElementById('command-payload')?.textContent.includes(';CONFIGURE_ALARM;MNT-0001;alarmMode=SILENT,alarmSensitivity=LOW,alarmVolume=HIGH;')`, 5*time.Second)
	var carried struct {
		Code        string `json:"code"`
		Payload     string `json:"payload"`
		SignedToken string `json:"signedToken"`
		Data        struct {
			ExpiresAt string `json:"expiresAt"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(b.evalString(`document.getElementById('command-text').value`)), &carried); err != nil {
		t.Fatalf("the command to carry is not JSON: %v", err)
	}
	sig, _ := hex.DecodeString(carried.SignedToken)
	if carried.Code != "CONFIGURE_ALARM" || carried.Data.ExpiresAt == "" || carried.Payload != b.text(`#command-payload`) ||
		!ed25519.Verify(ownerKey, []byte(carried.Payload), sig) {
		t.Fatalf("the command to carry does not verify: %+v", carried)
	}
	b.waitJS("the audit lists it, by the person's username", `document.querySelector('#audit tbody tr')?.dataset.code === 'CONFIGURE_ALARM' &&
		document.querySelector('#audit tbody tr').cells[2].textContent === 'ann'`, 5*time.Second)
	// The README's picture: the page down to the signed command, on a tall screen.
	b.step("a tall screen", chromedp.EmulateViewport(1280, 1900))
	b.screenshot(screenshotDir(t), "console-mount.png")
	b.step("back to the usual screen", chromedp.EmulateReset())
	b.step("copy it", chromedp.Click(chromedp.CSS(`#command-copy`)))
	b.waitJS("copied or selected", `document.getElementById('command-copied').textContent !== ''`, 5*time.Second)
	// A bad parameter is the server's error, by field, and no command.
	b.eval(`{ const s = document.getElementById('command-code'); s.value = 'ADD_NFC_TAG'; s.dispatchEvent(new Event('change'));
	  document.getElementById('param-tagUid').value = 'zz'; document.getElementById('command-form').requestSubmit() }`)
	b.waitJS("the tag uid's error", `document.getElementById('command-status').textContent === 'tagUid must be a tag uid of 4, 7 or 10 bytes in hexadecimal' && !document.getElementById('command-payload')`, 5*time.Second)

	// NFC tags: a bad uid is refused and marked; then two synchronised, one named.
	addTag := func(tagUID, name string) {
		b.step("add a tag", chromedp.Click(chromedp.CSS(`#nfc-add`)))
		b.eval(`{ const li = document.querySelector('#nfc-tags li:last-child'); li.querySelector('[name=uid]').value = ` + strconv.Quote(tagUID) +
			`; li.querySelector('[name=tagName]').value = ` + strconv.Quote(name) + ` }`)
	}
	addTag("04:a2:2b:1a", "Ann's card")
	addTag("0102030405060", "")
	b.eval(`document.getElementById('nfc-form').requestSubmit()`)
	b.waitJS("the bad uid is marked", `document.getElementById('nfc-status').textContent === 'Tag 0102030405060 must be a tag uid of 4, 7 or 10 bytes in hexadecimal.' &&
	  document.querySelector('#nfc-tags li:last-child [name=uid]').getAttribute('aria-invalid') === 'true'`, 5*time.Second)
	b.eval(`{ document.querySelector('#nfc-tags li:last-child [name=uid]').value = '01020304050607'; document.getElementById('nfc-form').requestSubmit() }`)
	b.waitJS("synchronised", `document.getElementById('nfc-status').textContent === 'Synchronised: 2 added, 0 removed, 1 renamed.'`, 5*time.Second)
	tagsOnPage := `[...document.querySelectorAll('#nfc-tags li')].map((li) => li.querySelector('[name=uid]').value + '=' + li.querySelector('[name=tagName]').value).sort().join(',')`
	if got := b.evalString(tagsOnPage); got != "01020304050607=,04A22B1A=Ann's card" {
		t.Fatalf("tags shown after the sync: %q", got)
	}
	type tagView struct {
		UID       string   `json:"uid"`
		Name      string   `json:"name"`
		MountUIDs []string `json:"mountUids"`
	}
	serverTags := func() string {
		var page struct{ Tags []tagView }
		if err := api.Do(context.Background(), http.MethodGet, "/nfc-tags?pageSize=100", nil, &page); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tg := range page.Tags {
			out = append(out, tg.UID+"="+tg.Name+"@"+strings.Join(tg.MountUIDs, "+"))
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	if got := serverTags(); got != "01020304050607=@MNT-0001,04A22B1A=Ann's card@MNT-0001" {
		t.Fatalf("tags on the server: %q", got)
	}
	// Removed from the list and synchronised: unlinked, still in the account.
	b.eval(`[...document.querySelectorAll('#nfc-tags li')].find((li) => li.querySelector('[name=uid]').value === '01020304050607').querySelector('button').click();
	  document.getElementById('nfc-form').requestSubmit()`)
	b.waitJS("one removed", `document.getElementById('nfc-status').textContent === 'Synchronised: 0 added, 1 removed.' && document.querySelectorAll('#nfc-tags li').length === 1`, 5*time.Second)
	if got := serverTags(); got != "01020304050607=@,04A22B1A=Ann's card@MNT-0001" {
		t.Fatalf("tags on the server after removing one: %q", got)
	}

	// The fleet shows the new name.
	b.step("the fleet", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("the fleet's new name", `document.querySelector('#fleet tr[data-uid="MNT-0001"]')?.innerText.includes('Back door')`, 10*time.Second)

	// On a phone the page does not scroll sideways.
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(in.base+"/console/#/mounts/"+uid), chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	b.waitJS("the mount page fits", `document.querySelector('#timeline .tl-row rect') !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.step("back to a desktop's screen", chromedp.EmulateReset())
	b.checkOrigin(in.base)

	// A restricted user: commands for its mount, and no owner action.
	r := newBrowserSession(t, chromium)
	r.signIn(in.base, "rita")
	r.step("open rita's mount", chromedp.Navigate(in.base+"/console/#/mounts/MNT-0002"), chromedp.WaitVisible(chromedp.CSS(`#command-form`)))
	r.waitJS("the page has loaded", `document.querySelector('#identity [data-field=serialNumber]') !== null && document.querySelector('#nfc-tags li') !== null`, 10*time.Second)
	if got := r.text(`#identity [data-field=devicePublicKey] dd`); got != "None pinned (unsigned reports)" {
		t.Errorf("a mount without a device key shows %q", got)
	}
	r.waitJS("no owner actions", `!document.getElementById('rename') && !document.getElementById('nfc-form') && !document.getElementById('nfc-add') &&
	  !document.getElementById('audit') && !document.getElementById('abandon')`, time.Second)
	r.eval(`document.getElementById('command-form').requestSubmit()`)
	r.waitJS("rita's signed command", `document.getElementById('command-payload')?.textContent.includes(';RELEASE_HELMET;MNT-0002;;')`, 5*time.Second)
}

// TestConsoleFirmwareCounts: the firmware page counts the mounts running
// each software revision per model, says how each stands in the catalogue,
// leaves abandoned (INACTIVE) mounts out, and fits 390 px.
func TestConsoleFirmwareCounts(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	in.publish(t, "HL-2", "2.0.0", 1024)
	in.publish(t, "HL-2", "2.1.3", 1024)
	in.publish(t, "HM-1", "1.1.0", 1024)
	n := 0
	add := func(model, revision string, count int) {
		for range count {
			n++
			associateWith(t, api, map[string]any{"uid": "MNT-" + strconv.Itoa(n), "modelNumber": model, "softwareRevision": revision, "firmwareRevision": "9.9.9"})
		}
	}
	add("HL-2", "2.1.3", 3)
	add("HL-2", "2.0.0", 2)
	add("HM-1", "1.0.0", 2)
	add("HM-1", "0.9.0-beta", 1)
	// One abandoned: not counted; one never confirmed, with nothing known: counted.
	if err := api.Do(context.Background(), http.MethodDelete, "/mounts/MNT-5/abandon", nil, nil); err != nil {
		t.Fatal(err)
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-NEW"}, nil); err != nil {
		t.Fatal(err)
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.step("open the firmware", chromedp.Click(chromedp.CSS(`#nav a[data-view=firmware]`)), chromedp.WaitVisible(chromedp.CSS(`#firmware-fleet`)))
	rows := `[...document.querySelectorAll('#firmware-fleet tbody tr')].map((tr) => [tr.dataset.model, tr.dataset.revision, tr.querySelector('.count').textContent, tr.lastChild.textContent].join(' ')).join('|')`
	want := "  1 |HL-2 2.1.3 3 latest|HL-2 2.0.0 1 update available|HM-1 1.0.0 2 update available|HM-1 0.9.0-beta 1 update available"
	b.waitJS("the counts", `document.getElementById('firmware-fleet-note').textContent === '8 mounts counted.'`, 10*time.Second)
	if got := b.evalString(rows); got != want {
		t.Fatalf("firmware in the fleet:\n got %q\nwant %q", got, want)
	}
	if got := b.evalString(`[...document.querySelectorAll('#firmware tbody tr')].length + ''`); got != "3" {
		t.Fatalf("catalogue rows %s", got)
	}
	b.screenshot(screenshotDir(t), "console-firmware.png")
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(in.base+"/console/#/firmware"), chromedp.WaitVisible(chromedp.CSS(`#firmware-fleet`)))
	b.waitJS("the firmware page fits", `document.querySelector('#firmware-fleet .count') !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
}
