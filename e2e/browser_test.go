package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// One headless Chromium serves every browser test of the process (a
// launch costs seconds of CPU); each session gets a browser context of
// its own, with its own cookies and storage, as a fresh profile had.
var (
	chromiumOnce sync.Once
	chromiumCtx  context.Context
	chromiumErr  error
	chromiumStop = func() {}
)

// newBrowserTab opens a tab in a new browser context of the shared
// Chromium, closed (with its context) when the test ends or after limit.
func newBrowserTab(t testing.TB, chromium string, limit time.Duration) context.Context {
	t.Helper()
	chromiumOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mountd-chromium-")
		if err != nil {
			chromiumErr = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
			chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
			chromedp.UserDataDir(dir), chromedp.WindowSize(1280, 860))
		allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		browser, cancel := chromedp.NewContext(allocCtx)
		chromiumStop = func() { cancel(); cancelAlloc(); os.RemoveAll(dir) }
		if err := chromedp.Do(browser); err != nil {
			chromiumErr = fmt.Errorf("start Chromium: %w", err)
			return
		}
		chromiumCtx = browser
	})
	if chromiumErr != nil {
		t.Fatal(chromiumErr)
	}
	ctx, cancel := chromedp.NewContext(chromiumCtx, chromedp.WithNewBrowserContext())
	ctx, cancelTimeout := context.WithTimeout(ctx, limit)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	return ctx
}

// browserSession is one headless Chromium with its own profile, recording
// every request the page makes.
type browserSession struct {
	t        testing.TB
	ctx      context.Context
	mu       sync.Mutex
	requests []string
	console  []string // the page's console messages and uncaught exceptions, for a failure's report
}

func newBrowserSession(t testing.TB, chromium string) *browserSession {
	t.Helper()
	ctx := newBrowserTab(t, chromium, 120*time.Second)
	b := &browserSession{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, e.Request.URL)
		case *runtime.EventConsoleAPICalled:
			var args []string
			for _, a := range e.Args {
				args = append(args, strings.Trim(string(a.Value), `"`)+a.Description)
			}
			b.console = append(b.console, string(e.Type)+": "+strings.Join(args, " "))
		case *runtime.EventExceptionThrown:
			text := e.ExceptionDetails.Text
			if x := e.ExceptionDetails.Exception; x != nil {
				text += " " + x.Description
			}
			b.console = append(b.console, "exception: "+text)
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
		// What the page showed and said: CI keeps the log, not the screenshot.
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`location.href + "\n" + (document.querySelector("main")?.innerText ?? "").slice(0, 3000)`))
		b.mu.Lock()
		said := strings.Join(b.console[max(0, len(b.console)-20):], "\n")
		requests := strings.Join(b.requests[max(0, len(b.requests)-10):], "\n")
		b.mu.Unlock()
		b.t.Fatalf("%s: %v (screenshot in %s)\nthe page:\n%s\nits console:\n%s\nits last requests:\n%s", what, err, shot, text, said, requests)
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

// evalString evaluates js for a string.
func (b *browserSession) evalString(js string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return s
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
		chromedp.WaitVisible(chromedp.CSS(`#overview`)))
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

// screenshotDir is where a test writes its screenshots: docs/ with
// MOUNTD_SCREENSHOTS=docs (the guide's), the directory it names when it
// is an absolute path (to look at them), else a temporary directory.
func screenshotDir(t *testing.T) string {
	switch dir := os.Getenv("MOUNTD_SCREENSHOTS"); {
	case dir == "docs":
		return "../docs"
	case filepath.IsAbs(dir):
		return dir
	}
	return t.TempDir()
}

// axeSource is axe-core, vendored for the tests only (testdata/axe-core).
const axeSource = "testdata/axe-core/axe.min.js"

// axeViolation is one rule axe-core found broken, with the elements that
// break it.
type axeViolation struct {
	ID      string `json:"id"`
	Impact  string `json:"impact"`
	Help    string `json:"help"`
	HelpURL string `json:"helpUrl"`
	Nodes   []struct {
		Target         json.RawMessage `json:"target"`
		HTML           string          `json:"html"`
		FailureSummary string          `json:"failureSummary"`
	} `json:"nodes"`
}

// checkA11y runs axe-core on the page as it is now and fails the test for
// every serious or critical violation, printing each with its elements.
func (b *browserSession) checkA11y(page string) {
	b.t.Helper()
	src, err := os.ReadFile(axeSource)
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void](string(src))); err != nil {
		b.t.Fatalf("%s: inject axe-core: %v", page, err)
	}
	violations, err := chromedp.Run(ctx, chromedp.Evaluate[[]axeViolation](
		`axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations)`, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: run axe-core: %v", page, err)
	}
	var report strings.Builder
	for _, v := range violations {
		if v.Impact != "serious" && v.Impact != "critical" {
			b.t.Logf("%s: axe-core: %s (%s): %s, %d elements", page, v.ID, v.Impact, v.Help, len(v.Nodes))
			continue
		}
		fmt.Fprintf(&report, "\n  %s (%s): %s\n    %s", v.ID, v.Impact, v.Help, v.HelpURL)
		for _, n := range v.Nodes {
			fmt.Fprintf(&report, "\n    - %s %s\n      %s", n.Target, n.HTML, strings.ReplaceAll(n.FailureSummary, "\n", "\n      "))
		}
	}
	if report.Len() > 0 {
		b.t.Errorf("axe-core finds serious or critical violations on %s:%s", page, report.String())
	}
}
