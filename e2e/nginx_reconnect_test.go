package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
)

// TestNginxMountctlReconnects runs mountctl's `watch` and `events --follow`
// through the shipped nginx configuration in front of two replicas on
// PostgreSQL and Redis, and stops the replica carrying each one's
// connection, with SIGTERM and with SIGKILL, restarting it after. Reports
// made through nginx after each stop still reach both, and each prints
// every report's event once, in the log's order (compared by event id
// with the log).
//
// Where each connection is: watch's WebSocket is on the replica whose
// mountd_graphql_ws_connections is 1; the long poll pending at a stop is
// the first /api/v1/events request nginx logs after a marker request sent
// just before the stop (nothing else ends a long poll meanwhile), and it
// was on the upstream nginx waited on for over half a second (it is a
// second old at the stop; an upstream that failed at once, such as a
// kept connection to a replica restarted since, is not it).
func TestNginxMountctlReconnects(t *testing.T) {
	bin := mountctlBinary(t)
	dbURL := testenv.PostgresURL(t)
	redisURL, prefix := testenv.RedisURL(t)
	certFile, keyFile, pool := selfSigned(t, t.TempDir())
	addrs := []string{freeAddr(t), freeAddr(t)}
	base, _, accessLog := startNginx(t, addrs, certFile, keyFile)
	env := replicaEnv(t, dbURL, redisURL, base, "MOUNTD_TRUSTED_PROXIES=127.0.0.1", "MOUNTD_RATE_LIMIT=10000/m",
		"MOUNTD_REDIS_PREFIX="+prefix) // the last of a name wins
	procs := []*proc{startProc(t, addrs[0], env), startProc(t, addrs[1], env)}

	var creds credentials
	if err := json.Unmarshal([]byte(procs[0].admin(t, "accounts", "create", "--name", "Behind nginx", "--json")), &creds); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	api := client.New(base, client.CredentialsSource(client.ClientCredentials(base, creds.ClientID, creds.ClientSecret,
		[]string{"openid", "sub", audItem}), hc), client.Options{HTTPClient: hc})
	const uid = "NGX-RECONNECT"
	associate(t, api, uid)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	run := func(args ...string) (stdout, stderr *syncBuffer, wait func()) {
		cmd := exec.CommandContext(ctx, bin, args...)
		// SSL_CERT_FILE: mountctl trusts the test's certificate as Go's
		// TLS does any system one.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + base, "SSL_CERT_FILE=" + certFile,
			"MOUNTCTL_CLIENT_ID=" + creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + creds.ClientSecret}
		stdout, stderr = &syncBuffer{}, &syncBuffer{}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return stdout, stderr, func() { _ = cmd.Wait() }
	}
	watchOut, watchErr, waitWatch := run("--json", "watch", uid)
	followOut, followErr, waitFollow := run("--json", "events", "--follow", "--types", "STATES_REPORTED", "--mount", uid,
		"--cursor-file", filepath.Join(t.TempDir(), "cursor"))
	defer func() { cancel(); waitWatch(); waitFollow() }()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(watchErr.String(), "watching mount") ||
		!strings.Contains(followErr.String(), "following"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("mountctl did not start:\nwatch: %s\nevents: %s", watchErr, followErr)
		}
	}
	// watch says so once its subscription is sent; give the server a moment
	// to register it (it has no cursor before its first report).
	time.Sleep(time.Second)

	var want []string // battery values reported, acknowledged
	post := func(n int) {
		t.Helper()
		for range n {
			v := strconv.Itoa(len(want) + 1)
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				err := api.Do(ctx, http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{map[string]any{
					"code": "BATTERY_LEVEL", "value": v, "occurredAt": time.Now().UTC().Format(time.RFC3339Nano)}}}, nil)
				if err == nil {
					break
				}
				// nginx answers 502 when it met the stopped replica on a
				// connection it kept (a POST is not passed on once sent).
				if s := client.StatusOf(err); s != http.StatusBadGateway && s != http.StatusServiceUnavailable || time.Now().After(deadline) {
					t.Fatalf("report %s through nginx: %v", v, err)
				}
			}
			want = append(want, v)
		}
	}
	// waitAll waits until watch and events --follow printed every report.
	waitAll := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			w, f := battery(watchOut.String()), battery(followOut.String())
			if slices.Equal(w, want) && slices.Equal(f, want) {
				return
			}
			if time.Now().After(deadline) || len(w) > len(want) || len(f) > len(want) {
				t.Fatalf("%s: want %v\nwatch printed  %v (stderr: %s)\nevents printed %v (stderr: %s)\nreplicas:\n%s\n%s",
					what, want, w, watchErr, f, followErr, procs[0].out, procs[1].out)
			}
		}
	}
	post(3)
	waitAll("before any stop")

	// wsOn is the replica carrying watch's socket.
	wsOn := func() int {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			n := []float64{wsConnections(t, procs[0]), wsConnections(t, procs[1])}
			switch {
			case n[0] == 1 && n[1] == 0:
				return 0
			case n[0] == 0 && n[1] == 1:
				return 1
			case time.Now().After(deadline):
				t.Fatalf("watch's socket: %v on the replicas", n)
			}
		}
	}
	marker := 0
	mark := func() string {
		marker++
		m := fmt.Sprintf("/healthz?marker=%d", marker)
		res, err := hc.Get(base + m)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return m
	}

	// Rounds go on until, for each signal, each command has had its
	// connection on the stopped replica.
	type carried struct{ watch, follow bool }
	seen := map[syscall.Signal]*carried{syscall.SIGTERM: {}, syscall.SIGKILL: {}}
	round := 0
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		for i := 0; !seen[sig].watch || !seen[sig].follow; i++ {
			if round++; i == 4 {
				t.Fatalf("%v: after %d stops, watch carried %v, events carried %v", sig, i, seen[sig].watch, seen[sig].follow)
			}
			// The replica carrying the socket: the stop before moved both
			// connections to it (the long poll pending then is passed on
			// or ends, and the next goes to the replica left), so from the
			// second stop on, each stop carries both, alternately on each.
			ws := wsOn()
			target := ws
			time.Sleep(time.Second) // the long poll pending now is a second old at the stop
			before := mark()
			p := procs[target]
			if err := p.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			_ = p.cmd.Wait()
			post(2)
			waitAll(fmt.Sprintf("round %d: %v to the replica at %s", round, sig, addrs[target]))
			poll, upstreams, err := pollAfter(accessLog, before)
			if err != nil {
				t.Fatal(err)
			}
			seen[sig].watch = seen[sig].watch || target == ws
			seen[sig].follow = seen[sig].follow || poll == addrs[target]
			t.Logf("round %d: %v to %s; watch's socket was on %s, the pending long poll on %s (nginx: %s)", round, sig, addrs[target], addrs[ws], poll, upstreams)
			procs[target] = startProc(t, addrs[target], env)
		}
	}
	// A long poll may not notice (a stopping replica answers it, nginx
	// passes a GET on when a replica drops it); a socket does.
	if !strings.Contains(watchErr.String(), "reconnected") {
		t.Errorf("watch never reconnected:\n%s", watchErr)
	}

	// The ids printed are the log's, once each, in order.
	var logged []string
	for after := ""; ; {
		var page struct {
			Events []eventView `json:"events"`
			Next   string      `json:"next"`
		}
		q := "/events?types=STATES_REPORTED&mountUid=" + uid + "&limit=100"
		if after != "" {
			q += "&after=" + after
		}
		if err := api.Do(ctx, http.MethodGet, q, nil, &page); err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Events {
			logged = append(logged, e.ID)
		}
		if len(page.Events) == 0 {
			break
		}
		after = page.Next
	}
	if len(logged) != len(want) {
		t.Fatalf("the log holds %d reports of %s; %d were acknowledged", len(logged), uid, len(want))
	}
	for name, out := range map[string]string{"watch": watchOut.String(), "events --follow": followOut.String()} {
		if got := eventIDs(out); !slices.Equal(got, logged) {
			t.Errorf("%s printed the events\n%v\nthe log holds\n%v", name, got, logged)
		}
	}
}

// wsConnections reads mountd_graphql_ws_connections from p's own address.
func wsConnections(t *testing.T, p *proc) float64 {
	t.Helper()
	res, err := http.Get(p.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "mountd_graphql_ws_connections "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	t.Fatal("no mountd_graphql_ws_connections in /metrics")
	return 0
}

// pollAfter returns the upstream that the first event-feed request
// logged after the request for marker waited on for over half a second
// ("" when none did), and its log line's upstreams, statuses and times.
func pollAfter(accessLog, marker string) (carrier, upstreams string, err error) {
	raw, err := os.ReadFile(accessLog)
	if err != nil {
		return "", "", err
	}
	after := false
	for line := range strings.Lines(string(raw)) {
		f := strings.Split(strings.TrimSpace(line), "|")
		if len(f) != 5 {
			continue
		}
		if f[0] == marker {
			after = true
			continue
		}
		if !after || !strings.HasPrefix(f[0], "/api/v1/events?") {
			continue
		}
		addrs, times := strings.Split(f[1], ","), strings.Split(f[3], ",")
		for i := range min(len(addrs), len(times)) {
			if d, err := strconv.ParseFloat(strings.TrimSpace(times[i]), 64); err == nil && d > 0.5 {
				carrier = strings.TrimSpace(addrs[i])
			}
		}
		return carrier, strings.Join(f[1:], " | "), nil
	}
	return "", "", errors.New("nginx logged no event-feed request after " + marker)
}

// eventIDs reads the id of each of mountctl's --json lines, in order.
func eventIDs(out string) []string {
	var ids []string
	for line := range strings.Lines(out) {
		var ev struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.ID != "" {
			ids = append(ids, ev.ID)
		}
	}
	return ids
}
