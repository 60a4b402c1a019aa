package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/security"
	"github.com/chromedp/chromedp"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// TestNginxDeployment runs the shipped nginx configuration in front of two
// mountd processes on PostgreSQL and Redis: the operator flow over HTTPS
// (token, association, reports, a command, the event feed), a GraphQL
// subscription over a WebSocket through the proxy that sees a report made
// through the other replica, a browser's WebSocket (with an Origin, as the
// console opens it) through the proxy and one of a foreign origin refused,
// the console in Chromium signed in through the proxy with its socket
// live, the body limit at the proxy, and the plain HTTP redirect.
func TestNginxDeployment(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisURL, _ := testenv.RedisURL(t)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	addrs := []string{freeAddr(t), freeAddr(t)}
	base, plain, _ := startNginx(t, addrs, certFile, keyFile) // the replicas' public URL is nginx's
	env := replicaEnv(t, dbURL, redisURL, base, "MOUNTD_TRUSTED_PROXIES=127.0.0.1", "MOUNTD_RATE_LIMIT=10000/m")
	first := startProc(t, addrs[0], env)
	startProc(t, addrs[1], env)

	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var c credentials
	if err := json.Unmarshal([]byte(first.admin(t, "accounts", "create", "--name", "Through nginx", "--json")), &c); err != nil {
		t.Fatal(err)
	}
	api := client.New(base, client.CredentialsSource(client.ClientCredentials(base, c.ClientID, c.ClientSecret,
		[]string{"openid", "sub", audItem}), hc), client.Options{HTTPClient: hc})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A subscriber, its socket through the proxy to one of the replicas. The
	// protocol acknowledges the socket, not the subscription: a subscription
	// without a cursor starts wherever the log is when the server gets to it,
	// which on a loaded machine can be after the reports below. So it starts
	// from a cursor taken before them and cannot miss one, however late.
	var start struct {
		Next string `json:"next"`
	}
	if err := api.Do(ctx, http.MethodGet, "/events", nil, &start); err != nil {
		t.Fatalf("the feed's cursor through nginx: %v", err)
	}
	events := make(chan string, 16)
	ready := make(chan struct{})
	subErr := make(chan error, 1)
	go func() {
		subErr <- api.Subscribe(ctx, `subscription($after: ID) { mountEvents(after: $after) { type uid states { value } } }`,
			map[string]any{"after": start.Next}, func() { close(ready) }, func(raw json.RawMessage) error {
				events <- string(raw)
				return nil
			})
	}()
	select {
	case <-ready:
	case err := <-subErr:
		t.Fatalf("the subscription did not start through nginx: %v", err)
	case <-ctx.Done():
		t.Fatal("the subscription did not start through nginx")
	}
	// seeReports waits for n more STATES_REPORTED events.
	seeReports := func(n int) {
		t.Helper()
		for seen := 0; seen < n; {
			select {
			case ev := <-events:
				if strings.Contains(ev, `"STATES_REPORTED"`) {
					seen++
				}
			case err := <-subErr:
				t.Fatalf("the subscription ended after %d of %d reports: %v", seen, n, err)
			case <-ctx.Done():
				t.Fatalf("the subscriber saw %d of %d reports", seen, n)
			}
		}
	}

	// The operator flow; least_conn spreads the requests over both replicas.
	associate(t, api, "MNT-NGX")
	for i := range 4 {
		reportStates(t, api, "MNT-NGX", 60+i, true, time.Now().Add(time.Duration(i)*time.Millisecond))
	}
	var m []struct { // GET /mounts/{uid} answers an array (docs/api.md, "Mount lifecycle")
		UID              string `json:"uid"`
		AssociationState string `json:"associationState"`
	}
	if err := api.Do(ctx, http.MethodGet, "/mounts/MNT-NGX", nil, &m); err != nil || len(m) != 1 || m[0].AssociationState != "ASSOCIATED" {
		t.Fatalf("mount through nginx: %+v %v", m, err)
	}
	if err := api.Do(ctx, http.MethodGet, "/mounts/MNT-NGX/query?code=RELEASE_HELMET", nil, nil); err != nil {
		t.Fatalf("a command through nginx: %v", err)
	}
	var feed struct {
		Events []struct {
			Type string `json:"type"`
		} `json:"events"`
	}
	// The feed answers settled events only (those of transactions older
	// than any still in flight on the database): on a busy machine the
	// last ones may come a moment later.
	for {
		err := api.Do(ctx, http.MethodGet, "/events?limit=50", nil, &feed)
		if err == nil && len(feed.Events) >= 6 {
			break
		}
		if err != nil || ctx.Err() != nil {
			t.Fatalf("event feed through nginx: %d events, %v", len(feed.Events), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	seeReports(4)
	// The subscription is live now (it delivered the newest events): one
	// more report, through either replica, reaches it through the feed.
	reportStates(t, api, "MNT-NGX", 70, true, time.Now().Add(10*time.Millisecond))
	seeReports(1)

	// A browser's socket through the proxy, as the console and GraphiQL
	// open it: an Origin of the public URL (nginx's address), the
	// graphql-transport-ws subprotocol, acknowledged, and the events since
	// the cursor as data. A page of any other origin is refused.
	tok, err := api.Token()
	if err != nil {
		t.Fatal(err)
	}
	browser, err := wsprototest.Dial(t, base+"/graphql", wsprototest.Options{HTTPClient: hc, Header: http.Header{"Origin": {base}}})
	if err != nil {
		t.Fatalf("a WebSocket from the console's origin through nginx: %v", err)
	}
	browser.Init(map[string]any{"Access-Key": tok})
	browser.Subscribe("1", `subscription($after: ID) { mountEvents(after: $after) { type uid } }`, map[string]any{"after": start.Next})
	if e := nextData[struct{ UID string }](t, browser, "1", "mountEvents"); e.UID != "MNT-NGX" {
		t.Fatalf("the browser's subscription through nginx: %+v", e)
	}
	browser.Complete("1")
	for _, origin := range []string{"https://evil.example", strings.Replace(base, "https://", "http://", 1)} {
		if _, err := wsprototest.Dial(t, base+"/graphql", wsprototest.Options{HTTPClient: hc, Header: http.Header{"Origin": {origin}}}); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
			t.Fatalf("a WebSocket from %s through nginx: %v; want HTTP 403", origin, err)
		}
	}

	// The console itself through nginx: a person signs in at the proxy's
	// address and the page's socket goes live, every request to that origin.
	first.adminInput(t, personPassword+"\n", "users", "create", "--account", c.AccountID, "--username", "ann", "--role", "owner", "--password-stdin")
	b := newBrowserSession(t, testenv.Chromium(t))
	b.step("trust the test certificate", chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
		_, err := chromedp.Call(ctx, security.SetIgnoreCertificateErrors, security.SetIgnoreCertificateErrorsParams{Ignore: true})
		return err
	}))
	b.signIn(base, "ann")
	b.step("the fleet", chromedp.Click(chromedp.CSS(`#nav a[data-view=fleet]`)))
	b.waitJS("the fleet lists the mount", `document.querySelector('#fleet tr[data-uid="MNT-NGX"]') !== null`, 10*time.Second)
	b.waitJS("the console's socket is live through nginx", `document.getElementById('connection').dataset.state === 'live'`, 20*time.Second)
	b.checkOrigin(base)

	// The proxy refuses a body over 1 MiB before it reaches mountd.
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/mounts", strings.NewReader(strings.Repeat("x", 2<<20)))
	req.Header.Set("Content-Type", "application/json")
	if res, err := hc.Do(req); err != nil || res.StatusCode != http.StatusRequestEntityTooLarge || res.Header.Get("Content-Type") == "application/problem+json" {
		t.Fatalf("a 2 MiB body: %v %v, want 413", res, err)
	}
	// Plain HTTP is sent to HTTPS.
	if res, err := hc.Get(plain + "/console/"); err != nil || res.StatusCode != http.StatusMovedPermanently ||
		!strings.HasPrefix(res.Header.Get("Location"), base+"/console/") {
		t.Fatalf("plain HTTP: %v %v", res, err)
	}
}

// TestNginxForwardsHeaders runs both shipped nginx configurations in front
// of an upstream that records what it is sent: every location passes on
// the client's Host, its address (X-Forwarded-For) and the scheme
// (X-Forwarded-Proto), /graphql the WebSocket handshake too. A location
// that sets a header of its own drops all those of the server block, and
// mountd then refuses every browser's WebSocket (a foreign Host) and
// throttles the proxy instead of its clients.
func TestNginxForwardsHeaders(t *testing.T) {
	type seen struct{ host, forwardedFor, proto, upgrade, connection string }
	got := make(chan seen, 16)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.Host, r.Header.Get("X-Forwarded-For"), r.Header.Get("X-Forwarded-Proto"),
			r.Header.Get("Upgrade"), strings.ToLower(r.Header.Get("Connection"))}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer upstream.Close()
	up := strings.TrimPrefix(upstream.URL, "http://")

	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	httpsAddr, composeAddr := freeAddr(t), freeAddr(t)
	runNginx(t, shippedNginx(t, "mountd.conf", map[string]string{
		"server 127.0.0.1:8081 ":        "server " + up + " ",
		"server 127.0.0.1:8082 ":        "server " + up + " ",
		"listen 80;":                    "listen " + freeAddr(t) + ";",
		"listen 443 ssl http2;":         "listen " + httpsAddr + " ssl;",
		"listen [::]:80;":               "",
		"listen [::]:443 ssl http2;":    "",
		"/etc/ssl/mountd/fullchain.pem": certFile,
		"/etc/ssl/mountd/privkey.pem":   keyFile,
	}), httpsAddr)
	runNginx(t, shippedNginx(t, "compose.conf", map[string]string{
		"server mountd-1:8080 ": "server " + up + " ",
		"server mountd-2:8080 ": "server " + up + " ",
		"listen 80;":            "listen " + composeAddr + ";",
	}), composeAddr)

	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, proxy := range []struct {
		name, base, host, proto string
	}{
		{"mountd.conf", "https://" + httpsAddr, "127.0.0.1", "https"}, // $host: without the port
		{"compose.conf", "http://" + composeAddr, composeAddr, "http"},
	} {
		for _, tc := range []struct {
			method, path string
			upgrade      bool
		}{
			{http.MethodGet, "/api/v1/mounts", false},
			{http.MethodPost, "/graphql", false},
			{http.MethodGet, "/graphql", true},
			{http.MethodGet, "/api/v1/events", false},
			{http.MethodGet, "/console/", false},
		} {
			name := fmt.Sprintf("%s %s %s upgrade=%v", proxy.name, tc.method, tc.path, tc.upgrade)
			req, _ := http.NewRequest(tc.method, proxy.base+tc.path, nil)
			if tc.upgrade {
				req.Header.Set("Connection", "Upgrade")
				req.Header.Set("Upgrade", "websocket")
			}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			res.Body.Close()
			var s seen
			select {
			case s = <-got:
			default:
				t.Fatalf("%s: %s, and nothing reached the upstream", name, res.Status)
			}
			want := seen{proxy.host, "127.0.0.1", proxy.proto, "", ""}
			if tc.upgrade {
				want.upgrade, want.connection = "websocket", "upgrade"
			}
			if s != want {
				t.Errorf("%s: the upstream saw %+v; want %+v", name, s, want)
			}
		}
	}
}
