package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// offlineSwitch is run in the page before its own scripts: it keeps the
// page's WebSockets in window.__sockets and, while window.__offline is
// set, points new ones at a closed port, as a cut network would fail them.
const offlineSwitch = `(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  window.WebSocket = function (url, protocols) {
    const ws = new Native(window.__offline ? "ws://127.0.0.1:9/" : url, protocols);
    window.__sockets.push(ws);
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
})();`

// browserSession is one headless Chromium with its own profile, recording
// every request the page makes.
type browserSession struct {
	t        testing.TB
	ctx      context.Context
	mu       sync.Mutex
	requests []string
}

func newBrowserSession(t testing.TB, chromium string) *browserSession {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 860))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 120*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	b := &browserSession{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			b.mu.Lock()
			b.requests = append(b.requests, e.Request.URL)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}
	b.step("install the offline switch", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: offlineSwitch})
		return err
	}))
	return b
}

// step runs actions, failing the test with a screenshot when they fail.
func (b *browserSession) step(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		shot := filepath.Join(os.TempDir(), "console-failure.png")
		if png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot()); err == nil {
			_ = os.WriteFile(shot, png, 0o644)
		}
		b.t.Fatalf("%s: %v (screenshot in %s)", what, err, shot)
	}
}

// waitJS polls a JavaScript condition.
func (b *browserSession) waitJS(what, cond string, timeout time.Duration) time.Duration {
	b.t.Helper()
	began := time.Now()
	b.step(what, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(timeout), chromedp.WithPollingInterval(10*time.Millisecond)))
		return err
	}))
	return time.Since(began)
}

func (b *browserSession) eval(js string) {
	b.t.Helper()
	b.step("run "+js, chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](js+"; true"))
		return err
	}))
}

func (b *browserSession) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("read %s: %v", sel, err)
	}
	return s
}

// signIn opens mountd's root as a person would and signs in on the login
// page, first with a wrong password.
func (b *browserSession) signIn(base, username string) {
	b.t.Helper()
	b.step("open the console", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	if shown, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`getComputedStyle(document.getElementById('nav')).display !== 'none'`)); err != nil || shown {
		b.t.Errorf("signed out, the console shows its navigation (%v)", err)
	}
	b.step("go to the login page", chromedp.Click(chromedp.CSS(`#signin`)), chromedp.WaitVisible(chromedp.CSS(`input[name=username]`)))
	b.step("a wrong password",
		chromedp.SendKeys(chromedp.CSS(`input[name=username]`), username),
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), "not the password"),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`.message`)))
	if msg := b.text(`.message`); !strings.Contains(msg, "The username or the password is wrong.") {
		b.t.Fatalf("wrong password message %q", msg)
	}
	b.step("sign in",
		chromedp.SendKeys(chromedp.CSS(`input[name=password]`), personPassword),
		chromedp.Click(chromedp.CSS(`button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`#fleet`)))
}

// checkOrigin fails for any request that left the given origins: mountd's,
// and the identity provider's when it is another.
func (b *browserSession) checkOrigin(bases ...string) {
	b.t.Helper()
	hosts := map[string]bool{}
	for _, base := range bases {
		u, _ := url.Parse(base)
		hosts[u.Host] = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.requests {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "data" && !hosts[u.Host]) {
			b.t.Errorf("the page asked another origin: %s", r)
		}
	}
	if len(b.requests) == 0 {
		b.t.Error("no requests recorded")
	}
}

// screenshot saves the page to dir/name.
func (b *browserSession) screenshot(dir, name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// TestConsoleInBrowser signs people in to the console in headless Chromium
// and watches the fleet live: a report appears without a reload, reports
// made while the page's socket is cut appear after it reconnects, nothing
// is asked of another origin, and a restricted user sees only its mount and
// no owner actions. MOUNTD_SCREENSHOTS=docs writes the README's screenshots.
func TestConsoleInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "Demo Fleet")
	api := client.New(in.base, client.StaticToken(a.token))
	uids := []string{"MNT-0001", "MNT-0002", "MNT-0003"}
	for i, uid := range uids {
		associate(t, api, uid)
		reportStates(t, api, uid, 80-30*i, i == 0, time.Now().Add(-time.Duration(i)*time.Minute))
	}
	// A day of history for the first mount's charts, one report an hour.
	for hour := 23; hour >= 1; hour-- {
		reportStates(t, api, uids[0], 100-3*hour+hour%4, hour%3 == 0, time.Now().Add(-time.Duration(hour)*time.Hour))
	}
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "rita", "--role", "restricted",
		"--mount", uids[1], "--password-stdin")
	shots := t.TempDir()
	if os.Getenv("MOUNTD_SCREENSHOTS") == "docs" {
		shots = "../../docs"
	}

	b := newBrowserSession(t, chromium)
	b.signIn(in.base, "ann")
	row := func(uid string) string { return `document.querySelector('#fleet tr[data-uid="` + uid + `"]')` }
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
	b.screenshot(shots, "console-mount.png")

	// GraphiQL in the same tab carries the person's token along.
	b.step("open GraphiQL", chromedp.Navigate(in.base+"/graphiql"), chromedp.WaitVisible(chromedp.CSS(`.graphiql-container`)))
	b.waitJS("the person's token fills Access-Key", `[...document.querySelectorAll('.graphiql-editor-tool .CodeMirror')].some((e) => e.CodeMirror.getValue().includes('"Access-Key": "ey'))`, 10*time.Second)
	b.checkOrigin(in.base)

	// A restricted user: only its mount, no owner actions.
	r := newBrowserSession(t, chromium)
	r.signIn(in.base, "rita")
	r.waitJS("rita's fleet", `document.querySelectorAll('#fleet tbody tr[data-uid]').length === 1 && `+row(uids[1])+` !== null`, 10*time.Second)
	r.waitJS("no owner actions", `!document.getElementById('associate') && document.querySelector('#nav [data-owner]').hidden`, time.Second)
	r.step("open rita's mount", chromedp.Navigate(in.base+"/console/#/mounts/"+uids[1]), chromedp.WaitVisible(chromedp.CSS(`#mount-uid`)))
	r.waitJS("no abandon button", `!document.getElementById('abandon')`, time.Second)

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

// reportStates posts battery and lock states for uid.
func reportStates(t *testing.T, api *client.Client, uid string, battery int, locked bool, at time.Time) {
	t.Helper()
	at = at.UTC().Truncate(time.Millisecond)
	states := []any{
		map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(battery), "occurredAt": at.Format(time.RFC3339Nano)},
		map[string]any{"code": "MOUNT_LOCKED", "value": map[bool]string{true: "1", false: "0"}[locked], "occurredAt": at.Format(time.RFC3339Nano)},
		map[string]any{"code": "HELMET_MOUNTED", "value": map[bool]string{true: "1", false: "0"}[battery%2 == 0], "occurredAt": at.Format(time.RFC3339Nano)},
		map[string]any{"code": "CPU_TEMPERATURE", "value": fmt.Sprintf("%.1f", 38+float64(battery%7)), "occurredAt": at.Format(time.RFC3339Nano)},
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": states}, nil); err != nil {
		t.Fatal(err)
	}
}
