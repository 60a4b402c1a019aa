package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// downloadCSV clicks the fleet's CSV button and returns the file the page
// built (its Blob, caught on its way to URL.createObjectURL).
func (b *browserSession) downloadCSV() string {
	b.t.Helper()
	return b.saved(`document.getElementById('csv').click()`)
}

// saved runs click, which saves a file, and returns the file (its Blob,
// caught on its way to URL.createObjectURL).
func (b *browserSession) saved(click string) string {
	b.t.Helper()
	b.eval(`window.__csv = undefined; if (!window.__blobHook) { window.__blobHook = true; const orig = URL.createObjectURL;
	  URL.createObjectURL = (blob) => { blob.text().then((t) => { window.__csv = t; }); return orig(blob); }; }
	  ` + click)
	b.waitJS("the file is saved", `typeof window.__csv === 'string'`, 10*time.Second)
	return b.evalString(`window.__csv`)
}

// TestConsoleInBrowser signs people in to the console in headless Chromium
// and watches the fleet live: a report appears without a reload, reports
// made while the page's socket is cut appear after it reconnects, nothing
// is asked of another origin, and a restricted user sees only its mount and
// no owner actions, and of another mount only that it is not found. The
// header is one line at 1280 px and a menu at 390 px; the events page opens
// on the log's last events, then live, and pauses. MOUNTD_SCREENSHOTS=docs writes the guide's screenshots.
func TestConsoleInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	cfg := testConfig(t.TempDir(), "")
	cfg.WebhookAllowPrivate = true // the receivers listen on loopback
	cfg.WebhookRetryDelays = "1h"
	in := start(t, cfg)
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	// Two webhooks, one of them failing: the overview counts one.
	var failing client.Webhook
	for _, status := range []int{http.StatusNoContent, http.StatusInternalServerError} {
		receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
		t.Cleanup(receiver.Close)
		if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": receiver.URL}, &failing); err != nil {
			t.Fatal(err)
		}
	}
	uids := []string{"MNT-0001", "MNT-0002", "MNT-0003"}
	for i, uid := range uids {
		if i == 0 {
			if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": uid, "name": "Front door",
				"modelNumber": "HL-2", "serialNumber": "SN-77001", "firmwareRevision": "1.4.0", "softwareRevision": "2.1.3"}, nil); err != nil {
				t.Fatal(err)
			}
			if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/confirm-association", nil, nil); err != nil {
				t.Fatal(err)
			}
		} else {
			associate(t, api, uid)
		}
		reportStates(t, api, uid, 80-30*i, i == 0, time.Now().Add(-time.Duration(i)*time.Minute))
	}
	// For the overview: a mount low on battery with its helmet out, silent
	// for two hours, and one waiting for confirmation that never reported.
	associate(t, api, "MNT-0004")
	reportStates(t, api, "MNT-0004", 15, false, time.Now().Add(-2*time.Hour))
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-0005"}, nil); err != nil {
		t.Fatal(err)
	}
	// Reported 19.5, shown 20: not below 20, in the overview's count as in the fleet.
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uids[2]+"/states", map[string]any{"states": []any{map[string]any{
		"code": "BATTERY_LEVEL", "value": "19.5", "occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}}}, nil); err != nil {
		t.Fatal(err)
	}
	// A day of history for the first mount's charts, one report an hour.
	for hour := 23; hour >= 1; hour-- {
		reportStates(t, api, uids[0], 100-3*hour+hour%4, hour%3 == 0, time.Now().Add(-time.Duration(hour)*time.Hour))
	}
	// The page looks at the newest 50 deliveries, as this does: the
	// newest may all be attempts not yet made while the sender catches up.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var page struct{ Deliveries []struct{ Status string } }
		if err := api.Do(context.Background(), http.MethodGet, "/webhooks/"+failing.ID+"/deliveries?pageSize=50", nil, &page); err != nil {
			t.Fatal(err)
		}
		if slices.ContainsFunc(page.Deliveries, func(d struct{ Status string }) bool { return d.Status == "FAILED" }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failed delivery: %+v", page.Deliveries)
		}
		time.Sleep(50 * time.Millisecond)
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "rita", "--role", "restricted",
		"--mount", uids[1], "--password-stdin")
	shots := screenshotDir(t)

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	row := func(uid string) string { return `document.querySelector('#fleet tr[data-uid="` + uid + `"]')` }
	shownUIDs := `[...document.querySelectorAll('#fleet tbody tr[data-uid]')].map((tr) => tr.dataset.uid).join(',')`

	// The overview, the signed-in home: its counts are the fleet's.
	b.waitJS("the overview's counts", `document.getElementById('count-all')?.querySelector('.value').textContent === '5'`, 10*time.Second)
	for id, want := range map[string]string{"count-associated": "4", "count-idle": "1", "count-low": "1", "count-helmet": "1", "count-silent": "2",
		"count-online": "3", "count-offline": "0", "count-unknown": "2"} {
		b.waitJS(id, `document.querySelector('#`+id+` .value')?.textContent === '`+want+`'`, 10*time.Second)
	}
	b.waitJS("one webhook failing", `document.querySelector('#count-webhooks .value')?.textContent === '1'`, 10*time.Second)
	b.screenshot(shots, "console-overview.png")
	// The header is one line on a desktop's screen, the account's name in
	// full, and no menu button.
	b.waitJS("a one-line header at 1280 px", `innerWidth === 1280 && `+oneLineHeader+` && getComputedStyle(document.getElementById('menu-toggle')).display === 'none' && `+
		`document.getElementById('who').scrollWidth <= document.getElementById('who').clientWidth`, 5*time.Second)
	// A count's link opens the fleet filtered, the filter in the URL; back
	// returns to the overview.
	b.step("open the low battery count", chromedp.Click(chromedp.CSS(`#count-low`)))
	b.waitJS("the fleet filtered to low battery", `location.hash === '#/fleet?battery=low' && document.getElementById('low')?.checked && `+shownUIDs+` === 'MNT-0004'`, 10*time.Second)
	b.eval(`history.back()`)
	b.waitJS("back to the overview", `document.getElementById('overview') !== null && !document.getElementById('fleet')`, 5*time.Second)
	// The overview counts again on request.
	reportStates(t, api, uids[1], 5, false, time.Now())
	b.step("count again", chromedp.Click(chromedp.CSS(`#refresh`)))
	b.waitJS("two low on battery", `document.querySelector('#count-low .value')?.textContent === '2'`, 10*time.Second)
	// Each count opens the fleet showing as many mounts: the server's
	// filter counts what the page's test shows.
	for _, id := range []string{"count-all", "count-associated", "count-idle", "count-low", "count-helmet", "count-silent", "count-online", "count-offline", "count-unknown"} {
		b.waitJS(id+" counted", `document.querySelector('#`+id+` .value') !== null`, 10*time.Second)
		want := b.evalString(`document.querySelector('#` + id + ` .value').textContent`)
		b.eval(`location.hash = document.getElementById('` + id + `').getAttribute('href')`)
		b.waitJS(id+" opens the fleet showing "+want, `document.getElementById('fleet')?.dataset.count === '`+want+`' && document.getElementById('shown').textContent === '`+want+`'`, 10*time.Second)
		b.eval(`history.back()`)
		b.waitJS("back to the overview", `document.getElementById('overview') !== null && !document.getElementById('fleet')`, 5*time.Second)
	}
	b.step("open the silent count", chromedp.Click(chromedp.CSS(`#count-silent`)))
	b.waitJS("the fleet filtered to silent mounts", `location.hash === '#/fleet?report=silent' && `+shownUIDs+` === 'MNT-0004,MNT-0005'`, 10*time.Second)
	// A filter chosen on the page goes into the URL; back restores the previous one.
	b.eval(`{ const s = document.getElementById('state'); s.value = 'IDLE'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("IDLE and silent", `location.hash === '#/fleet?state=IDLE&report=silent' && `+shownUIDs+` === 'MNT-0005'`, 5*time.Second)
	b.eval(`history.back()`)
	b.waitJS("back to silent only", `location.hash === '#/fleet?report=silent' && document.getElementById('state').value === '' && `+shownUIDs+` === 'MNT-0004,MNT-0005'`, 5*time.Second)

	// The CSV holds the rows shown, in the columns shown; a hidden column
	// stays hidden on the next visit (localStorage).
	if got, want := b.downloadCSV(), "UID,Name,Model,Serial,State,Battery,Lock,Helmet,CPU,Firmware,Software,Presence,Last report\r\n"; !strings.HasPrefix(got, want) ||
		strings.Count(got, "\r\n") != 3 || !strings.Contains(got, "\r\nMNT-0004,,,,ASSOCIATED,15,false,false,") || !strings.Contains(got, "\r\nMNT-0005,,,,IDLE,,,,,,,UNKNOWN,\r\n") {
		t.Fatalf("the CSV of the silent mounts:\n%s", got)
	}
	b.eval(`{ const c = document.querySelector('input[data-column=serialNumber]'); c.checked = false; c.dispatchEvent(new Event('change')) }`)
	b.step("the whole fleet", chromedp.Navigate(in.base+"/console/#/fleet?q=front"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("searched by name", shownUIDs+` === 'MNT-0001' && document.getElementById('search').value === 'front'`, 10*time.Second)
	b.waitJS("the serial number column stays hidden", `getComputedStyle(document.querySelector('#fleet th.c-serialNumber')).display === 'none'`, 5*time.Second)
	if got := b.downloadCSV(); !strings.HasPrefix(got, "UID,Name,Model,State,") || !strings.Contains(got, "\r\nMNT-0001,Front door,HL-2,ASSOCIATED,80,true,true,") ||
		!strings.Contains(got, ",1.4.0,2.1.3,") || strings.Count(got, "\r\n") != 2 {
		t.Fatalf("the CSV of the search:\n%s", got)
	}
	b.eval(`{ const c = document.querySelector('input[data-column=serialNumber]'); c.checked = true; c.dispatchEvent(new Event('change')) }`)
	// The server's export of the whole fleet, every field (owners).
	if got := b.saved(`document.querySelector('#export-fleet button[data-format=csv]').click()`); !strings.HasPrefix(got, mountsHeader+"\r\n") ||
		!strings.Contains(got, "\r\nMNT-0001,Front door,") {
		t.Fatalf("the fleet's export:\n%s", got)
	}
	// One export control, which says which is which: the rows shown (a CSV
	// made here) or the server's export of the whole filter, which takes
	// the expression and not the search.
	if got := b.evalString(`[...document.querySelectorAll('main button, main summary')].filter((el) => /export|csv/i.test(el.textContent) && !el.closest('#export-menu')).map((el) => el.textContent).join('|')`); got != "" {
		t.Errorf("export controls outside the one menu: %s", got)
	}
	b.step("open the export menu", chromedp.Click(chromedp.CSS(`#export-menu summary`)))
	b.waitJS("the menu says which is which", `document.getElementById('export-rows-title').textContent === 'Rows shown (CSV)' && `+
		`document.getElementById('export-rows-say').textContent === '1 mount, the columns shown, made in the browser' && `+
		`document.getElementById('export-fleet-title').textContent === 'Whole filter (server export)' && `+
		`document.getElementById('export-server-say').textContent === 'The whole fleet, every field; the search and boxes do not apply.'`, 5*time.Second)
	b.checkA11y("the fleet's export menu")
	b.step("close the export menu", chromedp.Click(chromedp.CSS(`#export-menu summary`)))
	b.eval(`{ document.getElementById('expr').value = 'batteryLevel < 10'; document.getElementById('expr-form').requestSubmit() }`)
	b.waitJS("filtered by the expression", `document.getElementById('search').value === 'front' && document.querySelectorAll('#fleet tbody tr[data-uid]').length === 0`, 10*time.Second)
	b.step("open the export menu", chromedp.Click(chromedp.CSS(`#export-menu summary`)))
	b.waitJS("the menu names the expression", `document.getElementById('export-rows-say').textContent.startsWith('0 mounts') && `+
		`document.getElementById('export-server-say').textContent === 'Every mount “batteryLevel < 10” selects, every field; the search and boxes do not apply.'`, 5*time.Second)
	if got := b.saved(`document.querySelector('#export-fleet button[data-format=csv]').click()`); !strings.HasPrefix(got, mountsHeader+"\r\n") ||
		strings.Count(got, "\r\n") != 2 || !strings.Contains(got, "\r\nMNT-0002,") {
		t.Fatalf("the export of the filter:\n%s", got)
	}
	if got := b.evalString(`document.getElementById('export-menu').open + ' ' + document.querySelector('#export-menu + .export-status').textContent`); got != "false saved mounts.csv" {
		t.Errorf("after the export: %s", got)
	}
	b.step("clear the expression", chromedp.Click(chromedp.CSS(`#expr-clear`)))
	if got := b.evalString(`localStorage.getItem('mountd.console.hiddenColumns')`); got != "[]" {
		t.Fatalf("hidden columns kept as %q", got)
	}
	b.step("the whole fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)))
	b.waitJS("the owner's fleet offers association", `document.getElementById('associate-link')?.getAttribute('href') === '#/associate'`, 5*time.Second)
	b.waitJS("the fleet lists the account's mounts", row(uids[0])+` && `+row(uids[2])+` !== null`, 10*time.Second)
	b.waitJS("the socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	if got := b.text(`#fleet tr[data-uid="MNT-0001"] .battery`); got != "80%" {
		t.Fatalf("battery cell %q, want 80%%", got)
	}

	// A report through REST appears on the open page, without a reload.
	// (How fast is for the benchmark; a loaded machine says nothing of it.)
	reportStates(t, api, uids[0], 42, true, time.Now())
	b.waitJS("a report appears live", row(uids[0])+`.querySelector('.battery').textContent === '42%'`, 30*time.Second)

	// The network is cut: the page's socket closes and new ones fail;
	// reports made meanwhile appear once it is back.
	b.eval(`window.__offline = true; window.__sockets.forEach((s) => s.close())`)
	b.waitJS("the page shows the cut", `document.getElementById('connection').dataset.state !== 'live'`, 5*time.Second)
	for i, v := range []int{41, 40, 39} {
		reportStates(t, api, uids[0], v, true, time.Now().Add(time.Duration(i)*time.Millisecond))
	}
	time.Sleep(500 * time.Millisecond)
	b.eval(`window.__offline = false`)
	b.waitJS("the page reconnects", `document.getElementById('connection').dataset.state === 'live'`, 15*time.Second)
	b.waitJS("reports made while cut appear", row(uids[0])+`.querySelector('.battery').textContent === '39%'`, 5*time.Second)
	b.screenshot(shots, "console-fleet.png")

	// A mount's page: live values, history charts, the command audit.
	b.step("open a mount", chromedp.Navigate(in.base+"/console/#/mounts/MNT-0001"), chromedp.WaitVisible(chromedp.CSS(`.uplot`)))
	if got := b.text(`#mount-uid`); got != "MNT-0001" {
		t.Fatalf("mount page title %q", got)
	}
	b.waitJS("the command audit lists the association", `document.body.innerText.includes('ASSOCIATE_OWNER')`, 5*time.Second)
	if got := b.saved(`document.querySelector('#export-history button[data-format=ndjson]').click()`); !strings.HasPrefix(got, `{"uid":"MNT-0001","code":`) ||
		!strings.HasSuffix(got, `"verified":false}`+"\n") {
		t.Fatalf("the mount's history export:\n%s", got)
	}

	// The events page opens with the log's last events, newest first, then
	// adds live ones on top; state reports are left out unless asked for.
	eventRows := `[...document.querySelectorAll('#events tbody tr')]`
	event := func(typ, uid string) string {
		return `document.querySelector('#events tr[data-type="` + typ + `"][data-uid="` + uid + `"]')`
	}
	top := func(typ, uid string) string {
		return `document.querySelector('#events tbody tr')?.dataset.type === '` + typ + `' && document.querySelector('#events tbody tr').dataset.uid === '` + uid + `'`
	}
	b.step("open the events", chromedp.Navigate(in.base+"/console/#/events"), chromedp.WaitVisible(chromedp.CSS(`#events`)))
	b.waitJS("the history, newest first, without state reports", event("ASSOCIATION_REQUESTED", "MNT-0005")+` !== null && `+top("ASSOCIATION_REQUESTED", "MNT-0005")+` && `+
		eventRows+`.length <= 50 && `+eventRows+`.findIndex((tr) => tr.dataset.type === 'ASSOCIATION_CONFIRMED' && tr.dataset.uid === 'MNT-0001') > 0 && `+
		`!document.querySelector('#events tr[data-type="STATES_REPORTED"]')`, 10*time.Second)
	b.waitJS("the events' socket is live", `document.getElementById('connection').dataset.state === 'live'`, 10*time.Second)
	reportStates(t, api, uids[1], 55, false, time.Now())
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-0006"}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("a live event on top", top("ASSOCIATION_REQUESTED", "MNT-0006")+` && !document.querySelector('#events tr[data-type="STATES_REPORTED"]')`, 10*time.Second)
	// Paused, new events wait until Resume.
	b.step("pause", chromedp.Click(chromedp.CSS(`#events-pause`)))
	b.waitJS("paused", `document.getElementById('events-pause').getAttribute('aria-pressed') === 'true'`, time.Second)
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": "MNT-0007"}, nil); err != nil {
		t.Fatal(err)
	}
	b.waitJS("held while paused", `document.getElementById('events-pause').textContent === 'Resume (1 new)'`, 10*time.Second)
	b.waitJS("nothing added while paused", top("ASSOCIATION_REQUESTED", "MNT-0006")+` && `+event("ASSOCIATION_REQUESTED", "MNT-0007")+` === null`, time.Second)
	b.step("resume", chromedp.Click(chromedp.CSS(`#events-pause`)))
	b.waitJS("the held event on top", top("ASSOCIATION_REQUESTED", "MNT-0007")+` && document.getElementById('events-pause').textContent === 'Pause'`, 5*time.Second)
	b.eval(`{ const s = document.getElementById('event-type'); s.value = 'all'; s.dispatchEvent(new Event('change')) }`)
	b.waitJS("any type loads the state reports too", `location.hash === '#/events?type=all' && `+event("STATES_REPORTED", uids[1])+` !== null && `+eventRows+`.length <= 50 && `+top("ASSOCIATION_REQUESTED", "MNT-0007"), 10*time.Second)
	b.eval(`{ const u = document.getElementById('event-mount'); u.value = 'MNT-0006'; u.dispatchEvent(new Event('change')) }`)
	b.waitJS("filtered by mount", `location.hash === '#/events?type=all&mount=MNT-0006' && `+eventRows+`.length === 1 && `+top("ASSOCIATION_REQUESTED", "MNT-0006"), 10*time.Second)

	// By keyboard: a column heading sorts on Enter, into the URL.
	b.step("the fleet again", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("the fleet's rows", row(uids[0])+` !== null`, 10*time.Second)
	b.step("sort by battery with the keyboard", chromedp.Focus(chromedp.CSS(`#fleet th.c-batteryLevel`)), chromedp.KeyEvent("\r"))
	b.waitJS("sorted by battery", `location.hash === '#/fleet?sort=batteryLevel' && document.querySelector('#fleet th.c-batteryLevel').getAttribute('aria-sort') === 'ascending' && `+
		shownUIDs+` === 'MNT-0004,MNT-0003,MNT-0001,MNT-0002,MNT-0005,MNT-0006,MNT-0007'`, 5*time.Second)

	// On a phone (390 px wide) the page does not scroll sideways: the
	// navigation wraps and the fleet's table scrolls in its own box.
	phone := t.TempDir()
	b.step("a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(in.base+"/console/#/"), chromedp.WaitVisible(chromedp.CSS(`#overview`)))
	b.waitJS("the overview fits", `document.getElementById('count-all') !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	// The navigation folds into a menu: closed at first, open on the
	// button, closed again by the link taken.
	b.waitJS("the menu button, the navigation folded", `getComputedStyle(document.getElementById('menu-toggle')).display !== 'none' && `+
		`getComputedStyle(document.getElementById('nav')).display === 'none' && document.getElementById('signout').getClientRects().length === 0 && `+
		`document.getElementById('bar').getBoundingClientRect().height < 60`, 5*time.Second)
	b.screenshot(phone, "console-phone-overview.png")
	b.step("open the menu", chromedp.Click(chromedp.CSS(`#menu-toggle`)))
	b.waitJS("the menu open", `document.getElementById('menu-toggle').getAttribute('aria-expanded') === 'true' && getComputedStyle(document.getElementById('nav')).display !== 'none' && `+
		`document.querySelector('#nav a[data-view=fleet]').getBoundingClientRect().right <= 390 && document.getElementById('signout').getClientRects().length > 0 && document.documentElement.scrollWidth <= 390`, 5*time.Second)
	b.screenshot(phone, "console-phone-menu.png")
	b.step("a link in the menu", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("the menu closed", `document.getElementById('menu-toggle').getAttribute('aria-expanded') === 'false' && getComputedStyle(document.getElementById('nav')).display === 'none'`, 5*time.Second)
	b.step("the fleet on a phone", chromedp.Navigate(in.base+"/console/#/fleet"), chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
	b.waitJS("the fleet fits", row(uids[0])+` !== null && document.documentElement.scrollWidth <= 390`, 10*time.Second)
	b.screenshot(phone, "console-phone-fleet.png")
	b.step("back to a desktop's screen", chromedp.EmulateReset())

	// GraphiQL in the same tab carries the person's token along.
	b.step("open GraphiQL", chromedp.Navigate(in.base+"/graphiql"), chromedp.WaitVisible(chromedp.CSS(`.graphiql-container`)))
	b.waitJS("the person's token fills Access-Key", `[...document.querySelectorAll('.graphiql-editor-tool .CodeMirror')].some((e) => e.CodeMirror.getValue().includes('"Access-Key": "ey'))`, 10*time.Second)
	b.checkOrigin(in.base)

	// A restricted user: only its mount, no owner actions.
	r := newBrowserSession(t, chromium)
	r.signIn(in.base, "rita")
	r.waitJS("rita's overview", `document.querySelector('#count-all .value')?.textContent === '1' && !document.getElementById('count-webhooks')`, 10*time.Second)
	r.step("rita's fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)))
	r.waitJS("rita's fleet", `document.querySelectorAll('#fleet tbody tr[data-uid]').length === 1 && `+row(uids[1])+` !== null`, 10*time.Second)
	r.waitJS("no owner actions", `!document.getElementById('associate-link') && !document.getElementById('export-fleet') && document.querySelector('#nav [data-owner]').hidden`, time.Second)
	r.step("open rita's mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uids[1]), chromedp.WaitVisible(chromedp.CSS(`#mount-uid`)))
	r.waitJS("no abandon button nor export", `!document.getElementById('abandon') && !document.getElementById('export-history')`, time.Second)
	// A mount that is not hers says so, and never shows an empty page of it.
	r.eval(`window.__skeleton = false; new MutationObserver(() => { if (document.getElementById('mount-uid') || document.getElementById('identity')) window.__skeleton = true })
	  .observe(document.getElementById('main'), { childList: true, subtree: true }); location.hash = '#/mounts/` + uids[0] + `'`)
	r.waitJS("not found, no skeleton", `document.getElementById('mount-not-found') !== null && !document.getElementById('mount-uid') && !document.getElementById('identity') && `+
		`!document.querySelector('#main form') && !window.__skeleton`, 10*time.Second)
	time.Sleep(300 * time.Millisecond) // nothing arrives late either
	r.waitJS("still no skeleton", `!window.__skeleton && document.querySelectorAll('#main .card').length === 1`, time.Second)

	// Signing out ends the sign-in: the page is signed out, and the refresh
	// token it held no longer works.
	refresh, err := chromedp.Run(r.ctx, chromedp.Evaluate[string](`JSON.parse(sessionStorage.getItem('tokens')).refresh`))
	if err != nil || refresh == "" {
		t.Fatalf("the page's refresh token: %q %v", refresh, err)
	}
	r.step("sign out", chromedp.Click(chromedp.CSS(`#signout`)), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	if status, _ := in.refreshPerson(t, refresh); status != http.StatusBadRequest {
		t.Fatalf("refresh after signing out: %d, want 400", status)
	}
	r.checkOrigin(in.base)
}

// oneLineHeader: the header is one line: every item of it shown sits on
// the brand's line.
const oneLineHeader = `(() => {
  const bar = document.getElementById('bar'), brand = bar.querySelector('.brand').getBoundingClientRect();
  const mid = (r) => r.top + r.height / 2;
  return [...bar.querySelectorAll('nav a, .alarm-count, .connection, #who, #signout')].filter((e) => e.getClientRects().length)
    .every((e) => Math.abs(mid(e.getBoundingClientRect()) - mid(brand)) < 8) && bar.getBoundingClientRect().height < 50;
})()`
