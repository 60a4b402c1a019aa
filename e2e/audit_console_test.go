package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// TestConsoleAuditInBrowser: an owner opens the audit page from the
// navigation in headless Chromium and reads the account's changes newest
// first (GET /api/v1/audit?tail=100), older ones on request, the details
// wrapping, filters them by action and by actor (into the URL, so that back
// returns), and the person's own change names the person; a restricted
// user has no audit page.
func TestConsoleAuditInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Audit Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	ctx := context.Background()
	if err := api.Do(ctx, http.MethodPost, "/mounts", map[string]any{"uid": "AUD-1", "name": "Front"}, nil); err != nil {
		t.Fatal(err)
	}
	// 101 changes in all: a first page of 100 and one more to load.
	for i := range 100 {
		if err := api.Do(ctx, http.MethodPatch, "/mounts/AUD-1", map[string]any{"name": fmt.Sprintf("Front %d", i)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "rita", "--role", "restricted",
		"--mount", "AUD-1", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	rows := `document.querySelectorAll('#audit tbody tr').length`
	b.step("open the audit page", chromedp.Click(chromedp.CSS(`#nav a[data-view=audit]`)), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	// The newest hundred first (the users created, then the renames).
	b.waitJS("the newest hundred", rows+` === 100 && !document.getElementById('audit-more').hidden && location.hash === '#/audit'`, 10*time.Second)
	b.waitJS("newest first", `[...document.querySelectorAll('#audit tbody tr')].slice(0, 3).map((tr) => tr.dataset.action).join() === 'user.create,user.create,mount.update' && `+
		`document.querySelector('#audit tbody tr').querySelector('.details').textContent.includes('username="rita"') && !document.querySelector('#audit tr[data-action="mount.request-association"]')`, time.Second)
	// A long entry's details wrap in their column; the table fits its box
	// at 1280 px, and the page does not scroll sideways on a phone.
	b.waitJS("the details wrap", `getComputedStyle(document.querySelector('#audit td.details')).whiteSpace === 'normal' && `+
		`innerWidth === 1280 && document.getElementById('audit').parentElement.scrollWidth <= document.getElementById('audit').parentElement.clientWidth`, time.Second)
	b.step("load older", chromedp.Click(chromedp.CSS(`#audit-more`)))
	// The users created and the second of them: the account's own log.
	b.waitJS("every entry, the oldest last", rows+` === 103 && document.getElementById('audit-more').hidden && `+
		`document.querySelector('#audit tbody tr:last-child').dataset.action === 'mount.request-association'`, 10*time.Second)
	b.waitJS("the operator's entries", `[...document.querySelectorAll('#audit tbody tr[data-action="user.create"]')].every((tr) => tr.cells[1].textContent.endsWith('(cli)'))`, time.Second)
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844))
	b.waitJS("the audit fits a phone", `document.documentElement.scrollWidth <= 390`, 5*time.Second)
	b.step("back to a desktop's screen", chromedp.EmulateReset())

	b.eval(`{ const s = document.getElementById('audit-action'); s.value = 'mount.request-association'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("filtered by action", `location.hash === '#/audit?action=mount.request-association' && `+rows+` === 1`, 10*time.Second)

	// A change by the person, then the person's entries alone.
	b.step("the person abandons the mount", chromedp.Navigate(in.base+"/console/#/mounts/AUD-1"), chromedp.WaitVisible(chromedp.CSS(`#abandon`)))
	b.eval(`window.confirm = () => true; document.getElementById('abandon').click()`)
	b.waitJS("the mount is gone", `location.hash !== '#/mounts/AUD-1'`, 10*time.Second)
	userID := b.evalString(`JSON.parse(atob(JSON.parse(sessionStorage.getItem('tokens')).access.split('.')[1].replace(/-/g, '+').replace(/_/g, '/'))).sub`)
	b.step("the person's entries", chromedp.Navigate(in.base+"/console/#/audit?actor="+userID), chromedp.WaitVisible(chromedp.CSS(`#audit`)))
	b.waitJS("the abandon, by ann", rows+` === 1 && document.querySelector('#audit tbody tr').dataset.action === 'mount.abandon' && `+
		`document.querySelector('#audit tbody tr').cells[1].textContent === 'ann (user)' && document.getElementById('audit-actor').value === '`+userID+`'`, 10*time.Second)
	b.step("back", chromedp.NavigateBack())
	b.checkOrigin(in.base)

	r := newBrowserSession(t, chromium)
	r.signIn(in.base, "rita")
	r.waitJS("no audit link", `document.querySelector('#nav a[data-view=audit]').hidden`, 5*time.Second)
	r.step("the audit page by its address", chromedp.Navigate(in.base+"/console/#/audit"))
	r.waitJS("the overview instead", `document.getElementById('overview') !== null && !document.getElementById('audit')`, 10*time.Second)
}
