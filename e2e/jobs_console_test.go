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

// TestConsoleJobsInBrowser: an owner filters the fleet by an expression in
// headless Chromium (a malformed one refused under the box first), creates
// a job for the mounts it shows after a confirmation that counts them, and
// follows it on the jobs page: a phone's fetch and the mounts' receipts move
// its bars, its completion arrives live (accountEvents). A second job is
// cancelled from its page. MOUNTD_SCREENSHOTS=docs writes
// docs/console-jobs.png.
func TestConsoleJobsInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	devices := map[string]*device{}
	for i, uid := range []string{"MNT-0001", "MNT-0002", "MNT-0003", "MNT-0004"} {
		devices[uid] = newDevice(uid)
		associateWith(t, api, map[string]any{"uid": uid, "name": "Bay " + uid[len(uid)-1:], "devicePublicKey": devices[uid].publicKey()})
		reportStates(t, api, uid, []int{80, 65, 15, 9}[i], true, time.Now())
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	jobs := func() []gqlJob {
		t.Helper()
		return field[struct{ Jobs []gqlJob }](t, a.gql(t, `{ jobs { jobs { `+jobFields+` } } }`, nil), "jobs").Jobs
	}

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	// The confirmations are accepted, and their text kept.
	b.eval(`window.confirm = (text) => { window.__confirmed = text; return true }`)
	b.step("open the fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)), chromedp.WaitVisible(chromedp.CSS(`#expr`)))
	b.waitJS("the whole fleet", `document.querySelectorAll('#fleet tbody tr[data-uid]').length === 4 && document.getElementById('job-new').hidden`, 10*time.Second)

	// A malformed expression: the server's message under the box, no mounts.
	b.step("a malformed filter", chromedp.SendKeys(chromedp.CSS(`#expr`), "batteryLevel <"), chromedp.Click(chromedp.CSS(`#expr-apply`)))
	b.waitJS("refused under the box", `document.getElementById('expr-error').textContent !== '' && document.getElementById('expr-error').getAttribute('role') === 'alert' && `+
		`document.getElementById('expr').getAttribute('aria-invalid') === 'true' && document.querySelectorAll('#fleet tbody tr[data-uid]').length === 0 && document.getElementById('job-new').hidden`, 10*time.Second)
	b.eval(`document.getElementById('expr').value = ''`)
	b.step("the low batteries", chromedp.SendKeys(chromedp.CSS(`#expr`), "batteryLevel < 20 AND associationState = \"ASSOCIATED\""), chromedp.Click(chromedp.CSS(`#expr-apply`)))
	b.waitJS("the filtered fleet, in the URL", `[...document.querySelectorAll('#fleet tbody tr[data-uid]')].map((tr) => tr.dataset.uid).join() === 'MNT-0003,MNT-0004' && `+
		`document.getElementById('expr-error').textContent === '' && !document.getElementById('expr').hasAttribute('aria-invalid') && location.hash.includes('expr=batteryLevel') && !document.getElementById('job-new').hidden`, 10*time.Second)

	// A job for them.
	b.step("open the job form", chromedp.Click(chromedp.CSS(`#job-new`)), chromedp.WaitVisible(chromedp.CSS(`#job-form`)))
	b.eval(`{ const s = document.getElementById('job-code'); s.value = 'CONFIGURE_ALARM'; s.dispatchEvent(new Event('change')) }`)
	b.eval(`document.getElementById('job-param-alarmMode').value = 'SILENT'`)
	b.step("describe it", chromedp.SendKeys(chromedp.CSS(`#job-description`), "Quiet alarms on low batteries"))
	b.checkA11y("the fleet filtered by an expression, with the job form")
	// Submitted twice in a row (a double click): one job.
	b.eval("{ const f = document.getElementById('job-form'); f.requestSubmit(); f.requestSubmit() }")
	b.waitJS("created", `document.getElementById('job-created') !== null`, 10*time.Second)
	if text := b.evalString(`window.__confirmed`); !strings.Contains(text, "CONFIGURE_ALARM job for 2 mounts") {
		t.Fatalf("the confirmation says %q", text)
	}
	got := jobs()
	if len(got) != 1 || got[0].Targets != 2 || got[0].Code != "CONFIGURE_ALARM" || got[0].Params["alarmMode"] != "SILENT" || got[0].Filter == nil ||
		*got[0].Filter != `batteryLevel < 20 AND associationState = "ASSOCIATED"` || got[0].Description != "Quiet alarms on low batteries" {
		t.Fatalf("the job: %+v", got)
	}
	quiet := got[0]

	// A second job, for the others.
	b.eval(`document.getElementById('expr').value = ''`)
	b.step("the others", chromedp.SendKeys(chromedp.CSS(`#expr`), "batteryLevel >= 20"), chromedp.Click(chromedp.CSS(`#expr-apply`)))
	b.waitJS("the others shown", `[...document.querySelectorAll('#fleet tbody tr[data-uid]')].map((tr) => tr.dataset.uid).join() === 'MNT-0001,MNT-0002'`, 10*time.Second)
	b.eval(`{ const s = document.getElementById('job-code'); s.value = 'RELEASE_HELMET'; s.dispatchEvent(new Event('change')) }`)
	b.eval(`document.getElementById('job-description').value = 'Release every helmet'`)
	b.step("create the second", chromedp.Click(chromedp.CSS(`#job-form button[type=submit]`)))
	b.waitJS("the second created", `document.getElementById('job-created')?.textContent === 'Release every helmet'`, 10*time.Second)

	// The jobs page, live; its counts read again every second (the
	// console's hook window.__mountdRefreshMs).
	b.eval(`window.__mountdRefreshMs = 1000`)
	b.step("open the jobs", chromedp.Click(chromedp.CSS(`#nav a[data-view=jobs]`)), chromedp.WaitVisible(chromedp.CSS(`#jobs`)))
	row := `document.querySelector('#jobs tr[data-id="` + quiet.ID + `"]')`
	count := func(status string) string {
		return row + `?.querySelector('.progress-status[data-status=` + status + `] .progress-count')?.textContent`
	}
	b.waitJS("both listed, ACTIVE, pending", `document.querySelectorAll('#jobs tbody tr[data-id]').length === 2 && `+row+`?.dataset.state === 'ACTIVE' && `+count("pending")+` === '2 of 2'`, 10*time.Second)
	b.waitJS("the jobs page is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)

	// A phone passes MNT-0003: its command is issued there, then executed.
	pending := func(uid string) string {
		t.Helper()
		var out struct {
			Commands []struct{ ID, Code string } `json:"commands"`
		}
		if err := api.Do(context.Background(), http.MethodGet, "/mounts/"+uid+"/pending-commands", nil, &out); err != nil {
			t.Fatal(err)
		}
		for _, c := range out.Commands {
			if c.Code == "CONFIGURE_ALARM" {
				return c.ID
			}
		}
		t.Fatalf("%s's pending commands: %+v", uid, out)
		return ""
	}
	executed := pending("MNT-0003")
	b.waitJS("one issued (the counts are read again while ACTIVE)", count("issued")+` === '1 of 2' && `+count("pending")+` === '1 of 2'`, 20*time.Second)
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/MNT-0003/commands/receipts", receipts(devices["MNT-0003"].receipt(executed, "EXECUTED", "", time.Now())), nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("one executed, its bar half full", count("executed")+` === '1 of 2' && `+
		row+`.querySelector('.progress-status[data-status=executed] .progress-fill').style.width === '50%' && `+row+`.querySelector('.progress-status[data-status=refused] .progress-fill').style.width === '0%'`, 20*time.Second)
	b.screenshot(screenshotDir(t), "console-jobs.png")
	// MNT-0004 refuses for good: the job completes, shown at once.
	refused := pending("MNT-0004")
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/MNT-0004/commands/receipts", receipts(devices["MNT-0004"].receipt(refused, "REFUSED", "alarm busy", time.Now())), nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("COMPLETED live", row+`?.dataset.state === 'COMPLETED' && `+count("refused")+` === '1 of 2' && `+count("executed")+` === '1 of 2'`, 5*time.Second)
	b.checkA11y("the jobs page")

	// The second job's page: its mounts, and Cancel.
	second := `[...document.querySelectorAll('#jobs tbody tr[data-id]')].find((tr) => tr.dataset.id !== '` + quiet.ID + `')`
	b.eval(second + `.querySelector('a').click()`)
	b.waitJS("the job's page", `document.getElementById('job-title')?.textContent === 'Release every helmet' && `+
		`[...document.querySelectorAll('#job-mounts tbody tr')].map((tr) => tr.dataset.uid + ':' + tr.dataset.status).join() === 'MNT-0001:PENDING,MNT-0002:PENDING' && !document.getElementById('job-cancel').hidden`, 10*time.Second)
	b.checkA11y("a job's page")
	b.step("cancel it", chromedp.Click(chromedp.CSS(`#job-cancel`)))
	b.waitJS("cancelled", `document.getElementById('job-details').dataset.state === 'CANCELED' && document.getElementById('job-cancel').hidden && `+
		`document.getElementById('job-status').textContent === 'The job is cancelled.'`, 10*time.Second)
	if text := b.evalString(`window.__confirmed`); !strings.Contains(text, "Cancel the job “Release every helmet”") {
		t.Fatalf("the confirmation says %q", text)
	}
	states := map[string]string{}
	for _, j := range jobs() {
		states[j.Description] = j.State
	}
	if states["Release every helmet"] != "CANCELED" || states["Quiet alarms on low batteries"] != "COMPLETED" {
		t.Fatalf("the jobs' states: %v", states)
	}
	// A job that is not there, or a link with a malformed escape: the page
	// says so, with a retry, instead of loading for ever.
	for _, hash := range []string{"#/jobs/no-such-job", "#/jobs/%E0%A4%A"} {
		b.eval(`location.hash = '` + hash + `'`)
		b.waitJS("not found: "+hash, `document.getElementById('job-title')?.textContent === 'Job not found' && document.getElementById('job-retry') !== null`, 10*time.Second)
	}
	b.checkOrigin(in.base)
}
