package e2e

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// TestConsoleGrants acts on a mount's offline access in headless Chromium:
// an owner sees the active grants with their uses, the mount's offline
// status, filters the revoked ones, revokes a grant from the page and
// every grant of a rider (on both its mounts), and the list shows them
// revoked; a 403 from the server is said as such; a maintainer sees the
// list without a revoke button; the section passes axe-core; 21 active
// grants take two pages.
func TestConsoleGrants(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	const uid, other = "MNT-0001", "MNT-0002"
	device := newDevice(uid)
	associateWith(t, api, map[string]any{"uid": uid, "name": "Front door", "devicePublicKey": device.publicKey()})
	associateWith(t, api, map[string]any{"uid": other, "devicePublicKey": newDevice(other).publicKey()})
	notAfter := time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339)
	grant := func(mount, riderKey, label string) grantView {
		t.Helper()
		var g grantView
		if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+mount+"/grants", map[string]any{"riderKey": riderKey, "notAfter": notAfter, "label": label}, &g); err != nil {
			t.Fatal(err)
		}
		return g
	}
	anna, bob, carl := riderKeyHex(t), riderKeyHex(t), riderKeyHex(t)
	annaGrant := grant(uid, anna, "Anna")
	grant(other, bob, "Bob elsewhere")
	grant(uid, bob, "Bob")
	grant(uid, carl, "Carl <b>&amp;</b>") // shown as text, never as markup
	// upload is a phone uploading a use of Anna's grant the mount signed
	// (its counter-th), and what the mount's info said when status is not nil.
	upload := func(counter uint64, status map[string]any) {
		t.Helper()
		use := protocol.OfflineReceipt{UID: uid, GrantID: annaGrant.ID, Code: "RELEASE_HELMET", Nonce: protocol.NewNonce(), Outcome: "EXECUTED",
			Counter: counter, At: time.Now().UTC().Truncate(time.Millisecond).Add(-time.Minute)}
		body := map[string]any{"receipts": []any{map[string]any{"grantId": use.GrantID, "code": use.Code, "nonce": use.Nonce, "outcome": use.Outcome,
			"reason": "", "counter": use.Counter, "at": protocol.FormatTime(use.At),
			"signature": hex.EncodeToString(ed25519.Sign(device.key, []byte(protocol.BuildOfflineReceiptText(use))))}}}
		if status != nil {
			body["status"] = status
		}
		if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/offline-receipts", body, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Anna's phone used hers once with no network; a phone uploads it.
	upload(1, nil)
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "mia", "--role", "restricted", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	b.step("open the mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uid), chromedp.WaitVisible(chromedp.CSS(`#mount-grants`)))
	rows := `[...document.querySelectorAll('#grants tbody tr')]`
	shown := rows + `.map((tr) => tr.cells[1].textContent + ':' + tr.dataset.state).join(',')`
	b.waitJS("the active grants", shown+` === 'Carl <b>&amp;</b>:ACTIVE,Bob:ACTIVE,Anna:ACTIVE'`, 10*time.Second)
	row := func(label string) string {
		return rows + `.find((tr) => tr.cells[1].textContent === ` + strconv.Quote(label) + `)`
	}
	// Anna's: one use, and when; her key short, whole on hover.
	if got := b.evalString(row("Anna") + `.querySelector('td.uses').textContent + ' ' + ` + row("Anna") + `.cells[6].textContent.endsWith(' ago')`); got != "1 true" {
		t.Errorf("Anna's uses and last use: %q", got)
	}
	if got := b.evalString(row("Anna") + `.querySelector('code.rider-key').textContent`); got != anna[:8]+"…"+anna[len(anna)-8:] {
		t.Errorf("Anna's key shown as %q", got)
	}
	if got := b.evalString(row("Anna") + `.querySelector('code.rider-key').title`); got != anna {
		t.Errorf("Anna's key's title %q", got)
	}
	if got := b.evalString(row("Anna") + `.cells[4].textContent`); got != strconv.FormatInt(annaGrant.Epoch, 10) {
		t.Errorf("Anna's epoch %q", got)
	}
	// No phone has said what the mount holds.
	b.waitJS("the offline status", `document.querySelector('#mount-offline [data-offline]') !== null`, 5*time.Second)
	offlineShown := `document.querySelector('#mount-offline [data-offline]').dataset.offline + ': ' + document.getElementById('mount-offline').textContent`
	if got := b.evalString(offlineShown); !strings.HasPrefix(got, "none: Not reported yet") {
		t.Errorf("the offline status: %q", got)
	}
	// A phone uploads another use with what the mount's info said: both
	// show within seconds.
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	upload(2, map[string]any{"revocationVersion": 1, "logPending": 2, "timeTrusted": false})
	b.waitJS("the second use and the status", row("Anna")+`.querySelector('td.uses').textContent === '2' && (`+offlineShown+`).startsWith('reported: ')`, 10*time.Second)
	for field, want := range map[string]string{"revocationVersion": "version 1", "logPending": "2", "timeTrusted": "not trusted since its start"} {
		if got := b.text(`#mount-offline [data-field=` + field + `] dd`); got != want {
			t.Errorf("offline %s shown %q, want %q", field, got, want)
		}
	}
	filter := func(state string) {
		b.eval(`{ const s = document.getElementById('grant-state'); s.value = '` + state + `'; s.dispatchEvent(new Event('change')) }`)
	}
	filter("REVOKED")
	b.waitJS("no revoked grant yet", `document.getElementById('grants-empty').textContent === 'No revoked grants.' && !document.getElementById('grants-empty').hidden && `+rows+`.length === 0`, 5*time.Second)
	filter("ACTIVE")
	b.waitJS("the active grants again", shown+` === 'Carl <b>&amp;</b>:ACTIVE,Bob:ACTIVE,Anna:ACTIVE'`, 5*time.Second)

	// Revoke Carl's from the page, after the confirmation.
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return true }`)
	b.eval(row("Carl <b>&amp;</b>") + `.querySelector('[data-action=revoke]').click()`)
	b.waitJS("Carl's revoked", `document.getElementById('grants-status').textContent.startsWith('Revoked the grant of “Carl <b>&amp;</b>”') && `+shown+` === 'Bob:ACTIVE,Anna:ACTIVE'`, 5*time.Second)
	if got := b.evalString(`window.__confirmed`); !strings.Contains(got, "Revoke the grant of “Carl <b>&amp;</b>”") || !strings.Contains(got, uid) {
		t.Errorf("the confirmation asked %q", got)
	}

	// A 403 of the server is said as one: the revocation sent with a
	// maintainer's token.
	maintainer := in.token(a.creds, "openid", "sub", audItem, "role:restricted")
	b.eval(`{ const f = window.fetch; window.__fetch = f; window.fetch = (u, o) => f(u, u === '/api/v1/grants/revoke' ? { ...o, headers: { ...o.headers, Authorization: 'Bearer ` + maintainer + `' } } : o) }`)
	b.eval(row("Bob") + `.querySelector('[data-action=revoke-rider]').click()`)
	b.waitJS("the 403", `document.getElementById('grants-status').getAttribute('role') === 'alert' && document.getElementById('grants-status').textContent.startsWith("Only the account's owners may revoke grants (the server answered 403 FORBIDDEN")`, 5*time.Second)
	b.eval(`window.fetch = window.__fetch`)

	// Every grant of Bob's: on this mount and the other.
	b.eval(row("Bob") + `.querySelector('[data-action=revoke-rider]').click()`)
	b.waitJS("Bob's revoked", `document.getElementById('grants-status').textContent === 'Revoked 2 grants of rider `+bob[:8]+"…"+bob[len(bob)-8:]+`.' && `+shown+` === 'Anna:ACTIVE'`, 5*time.Second)
	if got := b.evalString(`window.__confirmed`); !strings.Contains(got, "every mount") {
		t.Errorf("the rider's confirmation asked %q", got)
	}
	var bobs struct {
		Grants []grantView `json:"grants"`
	}
	if err := api.Do(context.Background(), http.MethodGet, "/grants?"+url.Values{"riderKey": {bob}}.Encode(), nil, &bobs); err != nil {
		t.Fatal(err)
	}
	if len(bobs.Grants) != 2 || bobs.Grants[0].RevokedAt == nil || bobs.Grants[1].RevokedAt == nil {
		t.Fatalf("Bob's grants after revoking them from the console: %+v", bobs.Grants)
	}
	filter("REVOKED")
	b.waitJS("the revoked ones", shown+` === 'Carl <b>&amp;</b>:REVOKED,Bob:REVOKED'`, 5*time.Second)
	if n := b.evalString(`String(document.querySelectorAll('#grants [data-action=revoke]').length)`); n != "0" {
		t.Errorf("%s revoke buttons on revoked grants", n)
	}
	if got := b.evalString(row("Bob") + `.querySelector('td.state').textContent`); !strings.HasPrefix(got, "revoked 20") {
		t.Errorf("Bob's state cell %q; want revoked and when", got)
	}
	filter("")
	b.waitJS("all of them", shown+` === 'Carl <b>&amp;</b>:REVOKED,Bob:REVOKED,Anna:ACTIVE'`, 5*time.Second)
	// The guide's picture: the section at the top of the window.
	b.eval(`document.getElementById('mount-grants').scrollIntoView()`)
	b.screenshot(screenshotDir(t), "console-grants.png")
	b.checkA11y("a mount's grants")

	// A maintainer reads them, with no revoke button.
	m := newBrowserSession(t, chromium)
	m.signIn(in.base, "mia")
	m.step("open the mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uid), chromedp.WaitVisible(chromedp.CSS(`#mount-grants`)))
	m.waitJS("the active grant", shown+` === 'Anna:ACTIVE'`, 10*time.Second)
	m.eval(`{ const s = document.getElementById('grant-state'); s.value = ''; s.dispatchEvent(new Event('change')) }`)
	m.waitJS("all of them", shown+` === 'Carl <b>&amp;</b>:REVOKED,Bob:REVOKED,Anna:ACTIVE'`, 5*time.Second)
	if n := m.evalString(`String(document.querySelectorAll('#grants button[data-action^=revoke]').length + document.querySelectorAll('#grants thead th').length)`); n != "8" {
		t.Errorf("a maintainer's grants: %s revoke buttons and headings; want no button and 8 headings", n)
	}

	// Twenty more riders: the active grants take two pages, Anna's (the
	// oldest) alone on the second.
	for i := range 20 {
		grant(uid, riderKeyHex(t), "Rider "+strconv.Itoa(i))
	}
	filter("ACTIVE")
	b.waitJS("the first page", rows+`.length === 20 && document.querySelector('#grants-pager span').textContent === 'page 1 of 2 · 21 in all'`, 5*time.Second)
	b.step("the next page", chromedp.Click(chromedp.CSS(`#grants-pager [data-action=next]`)))
	b.waitJS("the second page", shown+` === 'Anna:ACTIVE' && document.querySelector('#grants-pager [data-action=next]').disabled`, 5*time.Second)
}
