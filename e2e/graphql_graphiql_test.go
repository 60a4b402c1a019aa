package e2e

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
)

// TestGraphiQLInBrowser loads /graphiql in headless Chromium as a person
// would: every asset comes from this server (nothing from a CDN, the page
// works offline), the Access-Key header is offered, the schema loads once
// a token is in it (the documentation explorer lists the query fields),
// and a query runs.
func TestGraphiQLInBrowser(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")

	ctx := newBrowserTab(t, chromium, 90*time.Second)

	var (
		mu       sync.Mutex
		requests []string
		failed   []string
	)
	base, _ := url.Parse(in.base)
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			requests = append(requests, e.Request.URL)
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 && !strings.HasSuffix(e.Response.URL, "/graphql") {
				failed = append(failed, e.Response.URL)
			}
		case *network.EventLoadingFailed:
			failed = append(failed, e.ErrorText)
		}
	}); err != nil {
		t.Fatalf("start Chromium: %v", err)
	}

	step := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, a); err != nil {
			shot := filepath.Join(os.TempDir(), "graphiql-failure.png")
			if png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot()); err == nil {
				_ = os.WriteFile(shot, png, 0o644)
			}
			t.Fatalf("%s: %v (screenshot in %s)", what, err, shot)
		}
	}
	load := chromedp.Steps(
		chromedp.WaitVisible(chromedp.CSS(`.graphiql-container`)),
		// the schema request has answered (401 without a token) once the
		// result pane shows something
		chromedp.Sleep(500*time.Millisecond),
	)
	if err := chromedp.Do(ctx, chromedp.Navigate(in.base+"/graphiql"), load); err != nil {
		t.Fatalf("load GraphiQL: %v", err)
	}
	headers, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.graphiql-editor-tool`)))
	if err != nil || !strings.Contains(headers, "Access-Key") {
		t.Fatalf("the headers editor does not offer Access-Key: %q %v", headers, err)
	}

	// A person pastes a token into the headers editor and re-fetches the
	// schema; the editors are CodeMirror instances, set as typing would.
	query := "{ me { accountId role } }"
	setEditor := func(editor, text string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector(`+jsString(editor+" .CodeMirror")+`).CodeMirror.setValue(`+jsString(text)+`); true`))
			return err
		})
	}
	// (the variables editor shares the tool pane, hidden)
	step("enter the token", setEditor(".graphiql-editor-tool .graphiql-editor:not(.hidden)", `{"Access-Key": "`+a.token+`"}`))
	step("enter a query", setEditor(".graphiql-query-editor", query))
	step("re-fetch the schema", chromedp.Click(chromedp.CSS(`button[aria-label="Re-fetch GraphQL schema"]`)))
	step("open the documentation explorer", chromedp.Click(chromedp.CSS(`button[aria-label="Show Documentation Explorer"]`)))
	step("see the root types", chromedp.WaitVisible(chromedp.CSS(`.graphiql-doc-explorer-type-name`)))
	step("open Query", chromedp.Click(chromedp.CSS(`.graphiql-doc-explorer a.graphiql-doc-explorer-type-name`)))
	step("see Query's fields", chromedp.WaitVisible(chromedp.CSS(`.graphiql-doc-explorer-field-name`)))
	docs, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.graphiql-doc-explorer`)))
	if err != nil || !strings.Contains(docs, "mounts") || !strings.Contains(docs, "nfcTags") {
		t.Fatalf("the documentation explorer does not list the query fields: %q %v", docs, err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`.graphiql-execute-button`)),
		chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](`(document.querySelector('.result-window') || {innerText: ''}).innerText.includes('accountId')`,
				chromedp.WithPollingTimeout(20*time.Second)))
			return err
		}),
	); err != nil {
		t.Fatalf("run a query through GraphiQL: %v", err)
	}
	result, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`.result-window`)))
	if err != nil || !strings.Contains(result, a.creds.AccountID) || !strings.Contains(result, "owner") {
		t.Fatalf("query result %q %v", result, err)
	}

	mu.Lock()
	defer mu.Unlock()
	for _, r := range requests {
		u, err := url.Parse(r)
		if err != nil || (u.Scheme != "data" && u.Host != base.Host) {
			t.Errorf("the page asked another origin: %s", r)
		}
	}
	if len(failed) > 0 {
		t.Errorf("requests failed: %v", failed)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// TestGraphiQLFromConsole opens GraphiQL from the console as a signed-in
// person: its first schema request already carries the person's token (the
// page opens with the schema, not on a 401), and nothing it stores outlives
// the sign-in: after signing out, localStorage holds no token (neither one
// an earlier version of the page kept there).
func TestGraphiQLFromConsole(t *testing.T) {
	chromium := testenv.Chromium(t)
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	in.runCLIInput(t, personPassword+"\n", "users", "create", "--account", a.creds.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")

	b := newBrowserSession(t, chromium)
	type exchange struct {
		accessKey string
		status    int64
	}
	var (
		mu        sync.Mutex
		exchanges []*exchange
		byID      = map[network.RequestID]*exchange{}
	)
	if err := chromedp.Listen(b.ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			// GraphiQL's own requests: the console's (its live views read
			// the event log's head as they connect) may still be under way.
			if strings.HasSuffix(e.Request.URL, "/graphql") && e.Request.Method == "POST" && strings.Contains(e.DocumentURL, "/graphiql") {
				x := &exchange{}
				for k, v := range e.Request.Headers {
					if strings.EqualFold(k, "Access-Key") {
						x.accessKey, _ = v.(string)
					}
				}
				exchanges = append(exchanges, x)
				byID[e.RequestID] = x
			}
		case *network.EventResponseReceived:
			if x := byID[e.RequestID]; x != nil {
				x.status = e.Response.Status
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	b.signIn(in.base, "ann")
	token, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.parse(sessionStorage.getItem('tokens')).access`))
	if err != nil || token == "" {
		t.Fatalf("the console's token: %q %v", token, err)
	}
	mu.Lock()
	exchanges, byID = nil, map[network.RequestID]*exchange{} // the console's own
	mu.Unlock()

	// What an earlier version of the page kept in localStorage is removed.
	headers := jsString(`{"Access-Key": "` + token + `"}`)
	b.eval(`localStorage.setItem('graphiql:headers', ` + headers + `); localStorage.setItem('graphiql:tabState', JSON.stringify({activeTabIndex: 0,
		tabs: [{id: 'old', hash: null, title: 'old', query: '{ me { name } }', variables: null, headers: ` + headers + `, operationName: null, response: null}]}))`)

	b.step("open GraphiQL", chromedp.Navigate(in.base+"/graphiql"), chromedp.WaitVisible(chromedp.CSS(`.graphiql-container`)))
	b.step("open the documentation explorer", chromedp.Click(chromedp.CSS(`button[aria-label="Show Documentation Explorer"]`)))
	b.step("see the schema without re-fetching it", chromedp.WaitVisible(chromedp.CSS(`.graphiql-doc-explorer-type-name`)))
	mu.Lock()
	if len(exchanges) == 0 {
		mu.Unlock()
		t.Fatal("GraphiQL sent no request")
	}
	first := *exchanges[0]
	mu.Unlock()
	if first.accessKey != token || first.status != 200 {
		t.Fatalf("GraphiQL's first request carried Access-Key %.12q and got %d; want the console's token and 200", first.accessKey, first.status)
	}

	// A query run, GraphiQL saves what it saves; then the person signs out.
	b.step("run a query", chromedp.Click(chromedp.CSS(`.graphiql-execute-button`)))
	b.waitJS("the query is answered", `(document.querySelector('.result-window') || {innerText: ''}).innerText.includes('"data"')`, 10*time.Second)
	b.step("back to the console", chromedp.Navigate(in.base+"/console/"), chromedp.WaitVisible(chromedp.CSS(`#signout`)))
	b.step("sign out", chromedp.Click(chromedp.CSS(`#signout`)), chromedp.WaitVisible(chromedp.CSS(`#signin`)))
	stored, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify(Object.assign({}, localStorage))`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, token) || strings.Contains(stored, token[len(token)-20:]) {
		t.Fatalf("localStorage keeps the token after signing out: %.300s", stored)
	}
	if !strings.Contains(stored, "graphiql") {
		t.Fatalf("GraphiQL stored nothing at all (the check proves nothing): %.300s", stored)
	}
}
