package e2e

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestConsoleWebhooksInBrowser: an owner manages webhooks from the console
// in headless Chromium: the list filtered by event type (in the URL, back
// restores it), a webhook edited, disabled and enabled, its secret rotated
// (shown once, with Copy), and a test delivery that reaches a real receiver,
// which verifies it with the new secret, the page showing the answer; a
// failing receiver's answer and a test too soon after another are shown too.
func TestConsoleWebhooksInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	cfg := testConfig(t.TempDir(), "")
	cfg.WebhookAllowPrivate = true // the receivers listen on loopback
	cfg.WebhookRetryDelays = "1h"
	in := start(t, cfg)
	a := newFleet(in, "Demo Fleet")
	ok, failing := newReceiver(t), newReceiver(t)
	failing.failures = 1
	create := func(r *receiver, body map[string]any) webhookView {
		t.Helper()
		res, raw := a.call(http.MethodPost, "/api/v1/webhooks", body)
		if res.StatusCode != http.StatusCreated {
			t.Fatalf("create: %d %s", res.StatusCode, raw)
		}
		hook := decode[webhookView](t, raw)
		r.setSecret(hook.Secret)
		return hook
	}
	deletes := create(ok, map[string]any{"url": ok.URL + "/deletes", "eventTypes": []string{"DELETED"}})
	all := create(failing, map[string]any{"url": failing.URL + "/all", "description": "everything"})
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	// The page asks before rotating and deleting: say yes.
	b.eval(`window.confirm = () => true`)
	rowOf := func(id string) string { return `document.querySelector('#webhooks tr[data-id="` + id + `"]')` }
	click := func(id, action string) {
		t.Helper()
		b.step(action+" "+id, chromedp.Click(chromedp.CSS(`#webhooks tr[data-id="`+id+`"] button[data-action=`+action+`]`)))
	}
	shown := `[...document.querySelectorAll('#webhooks tbody tr[data-id]')].map((tr) => tr.dataset.id).join(',')`
	get := func(id string) webhookView {
		t.Helper()
		return decode[webhookView](t, a.ok(t, http.MethodGet, "/api/v1/webhooks/"+id, nil))
	}

	b.step("open the webhooks", chromedp.Click(chromedp.CSS(`#nav a[data-view=webhooks]`)), chromedp.WaitVisible(chromedp.CSS(`#webhooks`)))
	b.waitJS("both webhooks listed", shown+` === '`+deletes.ID+`,`+all.ID+`'`, 10*time.Second)

	// Filtered by event type: a webhook for every type receives each.
	b.eval(`{ const s = document.getElementById('webhook-type'); s.value = 'ABANDONED'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("only the webhook that receives ABANDONED", `location.hash === '#/webhooks?type=ABANDONED' && `+shown+` === '`+all.ID+`'`, 5*time.Second)
	b.eval(`history.back()`)
	b.waitJS("back to every webhook", `location.hash === '#/webhooks' && document.getElementById('webhook-type').value === '' && `+shown+` === '`+deletes.ID+`,`+all.ID+`'`, 5*time.Second)
	b.step("a shared link to the DELETED filter", chromedp.Navigate(in.base+"/console/#/webhooks?type=DELETED"), chromedp.WaitVisible(chromedp.CSS(`#webhooks`)))
	b.waitJS("both receive DELETED", `document.getElementById('webhook-type').value === 'DELETED' && `+shown+` === '`+deletes.ID+`,`+all.ID+`'`, 10*time.Second)
	b.eval(`window.confirm = () => true`) // a new document

	// Edit: description, one more type, a mount.
	click(deletes.ID, "edit")
	b.step("fill the editor", chromedp.WaitVisible(chromedp.CSS(`#edit-description`)),
		chromedp.SendKeys(chromedp.CSS(`#edit-description`), "ops pager"),
		chromedp.Click(chromedp.CSS(`#webhook-editor input[value=ABANDONED]`)),
		chromedp.SendKeys(chromedp.CSS(`#edit-mounts`), "MNT-0001"),
		chromedp.Click(chromedp.CSS(`#webhook-editor button.primary`)))
	b.waitJS("the edit is saved, the focus back on Edit", `!document.getElementById('edit-url') && `+rowOf(deletes.ID)+`.innerText.includes('ops pager') && `+
		`document.activeElement === `+rowOf(deletes.ID)+`.querySelector('[data-action=edit]')`, 5*time.Second)
	if w := get(deletes.ID); w.Description != "ops pager" || !slices.Equal(w.EventTypes, []string{"ABANDONED", "DELETED"}) ||
		!slices.Equal(w.MountUIDs, []string{"MNT-0001"}) || w.URL != deletes.URL {
		t.Fatalf("after the edit: %+v", w)
	}

	// Disable, then enable.
	click(deletes.ID, "toggle")
	b.waitJS("disabled", rowOf(deletes.ID)+`.innerText.includes('disabled')`, 5*time.Second)
	if get(deletes.ID).Enabled {
		t.Fatal("the webhook is still enabled")
	}
	click(deletes.ID, "toggle")
	b.waitJS("enabled again", rowOf(deletes.ID)+`.querySelector('[data-action=toggle]').textContent === 'Disable'`, 5*time.Second)
	if !get(deletes.ID).Enabled {
		t.Fatal("the webhook is still disabled")
	}

	// Rotate: the new secret is shown once, copyable.
	click(deletes.ID, "rotate")
	b.waitJS("the new secret", `(document.getElementById('webhook-secret')?.textContent || '').startsWith('whsec_')`, 5*time.Second)
	secret := b.evalString(`document.getElementById('webhook-secret').textContent`)
	if secret == deletes.Secret {
		t.Fatal("the secret shown is the old one")
	}
	b.step("copy it", chromedp.Click(chromedp.CSS(`#copy-secret`)))
	b.waitJS("the copy is acknowledged", `document.querySelector('#webhook-notice [aria-live]').textContent !== ''`, 5*time.Second)

	// A test reaches the receiver, signed with the new secret.
	ok.setSecret(secret)
	click(deletes.ID, "test")
	b.waitJS("the test's answer", `document.getElementById('webhook-test-result')?.dataset.status === 'SUCCEEDED'`, 15*time.Second)
	if got := b.text(`#webhook-test-result`); !strings.Contains(got, "delivered") || !strings.Contains(got, "HTTP 200") {
		t.Fatalf("the test's answer reads %q", got)
	}
	calls := ok.waitFor(t, "the test delivery", func(c []webhookCall) bool { return len(c) == 1 })
	if calls[0].Type != "WEBHOOK_TEST" || calls[0].Data.WebhookID != deletes.ID {
		t.Fatalf("the receiver got %+v", calls[0])
	}
	// Again at once: refused, and the page says why.
	click(deletes.ID, "test")
	b.waitJS("the second test is refused", `document.querySelector('#webhook-notice .error')?.textContent.includes('once every')`, 10*time.Second)

	// A receiver that answers 500: the page shows the failure.
	click(all.ID, "test")
	b.waitJS("the failing test's answer", `document.getElementById('webhook-test-result')?.dataset.status === 'FAILED'`, 15*time.Second)
	if got := b.text(`#webhook-test-result`); !strings.Contains(got, "failed") || !strings.Contains(got, "HTTP 500") {
		t.Fatalf("the failing test's answer reads %q", got)
	}

	// On a phone (390 px wide) the page, its editor open, does not scroll
	// sideways: the table scrolls in its own box.
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844))
	click(deletes.ID, "edit")
	b.waitJS("the webhooks fit", `document.getElementById('edit-url') !== null && document.documentElement.scrollWidth <= 390`, 5*time.Second)
	b.step("back to a desktop's screen", chromedp.EmulateReset())

	// Delete.
	click(all.ID, "delete")
	b.waitJS("deleted", shown+` === '`+deletes.ID+`'`, 5*time.Second)
	b.checkOrigin(in.base)
}
