package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

// cuttableProxy forwards TCP connections to target until cut, after which
// it refuses new ones and drops the open ones: a database that goes away.
type cuttableProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *cuttableProxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestDatabaseDown: when PostgreSQL cannot be reached, REST answers 503
// UNAVAILABLE with Retry-After, GraphQL codes the error UNAVAILABLE, and
// the token endpoint answers 503 temporarily_unavailable, never a 500.
func TestDatabaseDown(t *testing.T) {
	u, err := url.Parse(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCuttableProxy(t, u.Host)
	u.Host = proxy.ln.Addr().String()
	in := start(t, testConfig(t.TempDir(), u.String()))
	a := newFleet(in, "A")
	a.associate(t, "DOWN1", nil)
	res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://receiver.example/hook"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
	}
	hook := decode[struct {
		ID string `json:"id"`
	}](t, raw)

	proxy.cut()

	for _, path := range []string{"GET /api/v1/mounts/DOWN1", "GET /api/v1/audit", "GET /api/v1/exports/mounts",
		"GET /api/v1/exports/states?mountUid=DOWN1", "POST /api/v1/webhooks/" + hook.ID + "/test",
		"GET /api/v1/alarm-rules", "GET /api/v1/alarms", "GET /api/v1/mounts/DOWN1/commands/0123456789abcdef0123456789abcdef",
		"POST /api/v1/alarm-rules", "GET /api/v1/jobs", "POST /api/v1/jobs", "GET /api/v1/jobs/job_0123456789abcdef01234567",
		"GET /api/v1/mounts/DOWN1/pending-commands", "GET /api/v1/mounts?filter=batteryLevel%20%3C%2020"} {
		method, target, _ := strings.Cut(path, " ")
		var body any
		switch {
		case target == "/api/v1/alarm-rules" && method == http.MethodPost:
			body = map[string]any{"name": "low", "severity": "WARNING", "conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}}
		case target == "/api/v1/jobs" && method == http.MethodPost:
			body = map[string]any{"code": "RELEASE_HELMET", "filter": "batteryLevel < 20"}
		}
		res, raw := a.call(method, target, body)
		wantProblem(t, res, raw, 503, "UNAVAILABLE")
		if res.Header.Get("Retry-After") == "" {
			t.Fatalf("%s: 503 without Retry-After", path)
		}
	}
	res, raw = a.call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "DOWN2"})
	wantProblem(t, res, raw, 503, "UNAVAILABLE")
	if r := a.gql(t, `{ mounts { mounts { uid } } }`, nil); r.code() != "UNAVAILABLE" {
		t.Fatalf("GraphQL with the database down: %+v", r.Errors)
	}
	res, body := in.tokenRequest(url.Values{"grant_type": {"client_credentials"}, "client_id": {a.creds.ClientID},
		"client_secret": {a.creds.ClientSecret}, "scope": {"openid"}}, nil)
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") == "" {
		t.Fatalf("token endpoint with the database down: %d %s", res.StatusCode, body)
	}
}

// TestFloodAuditExportsWebhookTest: 1,000 requests at once to the audit
// log, both exports, a webhook's test delivery, jobs and rollouts answer each 200 or 429
// (the export slots, the test delivery's pace, the account's rate), never a
// 5xx; afterwards the export slots are free again.
func TestFloodAuditExportsWebhookTest(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	a.associated(t, "FL1")
	// A mount a rollout can target: its model has a newer revision.
	in.publish(t, "FLM", "1.0.0", 16)
	in.publish(t, "FLM", "1.1.0", 16)
	a.associate(t, "FL2", map[string]any{"modelNumber": "FLM", "softwareRevision": "1.0.0", "devicePublicKey": newDevice("FL2").publicKey()})
	a.confirm(t, "FL2")
	res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": "https://receiver.example/hook"})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
	}
	hook := decode[struct {
		ID string `json:"id"`
	}](t, raw)
	targets := []string{"GET /api/v1/audit?limit=1000", "GET /api/v1/exports/mounts", "GET /api/v1/exports/states?mountUid=FL1",
		"POST /api/v1/webhooks/" + hook.ID + "/test", "GET /api/v1/alarms?state=ACTIVE", "GET /api/v1/alarm-rules",
		"POST /api/v1/alarm-rules", "GET /api/v1/mounts/FL1/commands?pageSize=100",
		"POST /api/v1/jobs", "GET /api/v1/mounts/FL1/pending-commands", "GET /api/v1/jobs?pageSize=100",
		"GET /api/v1/mounts?filter=" + url.QueryEscape(`batteryLevel < 20 OR NOT (presence = "OFFLINE" AND modelNumber != "HM-1")`),
		"POST /api/v1/rollouts", "GET /api/v1/rollouts?pageSize=100", "GET /api/v1/firmware/check-update?modelNumber=FLM&mountUid=FL2",
		"GET /api/v1/mounts/FL2/pending-commands"}
	var (
		mu       sync.Mutex
		statuses = map[string]int{}
		wg       sync.WaitGroup
	)
	for i := range 1000 {
		wg.Go(func() {
			method, target, _ := strings.Cut(targets[i%len(targets)], " ")
			var body any
			switch {
			case method == http.MethodPost && target == "/api/v1/alarm-rules":
				body = map[string]any{"name": fmt.Sprint("rule ", i), "severity": "INFO",
					"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}}
			case method == http.MethodPost && target == "/api/v1/jobs":
				body = map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{"FL1"}, "description": fmt.Sprint("job ", i)}
			case method == http.MethodPost && target == "/api/v1/rollouts":
				body = map[string]any{"modelNumber": "FLM", "softwareRevision": "1.1.0", "requireIdle": false}
			}
			res, raw := a.call(method, target, body)
			mu.Lock()
			defer mu.Unlock()
			statuses[fmt.Sprintf("%s %d", target, res.StatusCode)]++
			// 201 a created rule or job, 400 past the 50 rules of an
			// account, 409 past its 50 active jobs.
			if res.StatusCode != http.StatusOK && res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusTooManyRequests &&
				!(res.StatusCode == http.StatusBadRequest && target == "/api/v1/alarm-rules" && method == http.MethodPost) &&
				!(res.StatusCode == http.StatusConflict && (target == "/api/v1/jobs" || target == "/api/v1/rollouts") && method == http.MethodPost) {
				t.Errorf("%s %s: %d %.200s", method, target, res.StatusCode, raw)
			}
		})
	}
	wg.Wait()
	t.Logf("statuses: %v", statuses)
	// 125 parallel creations, at most 50 rules an account: the bound holds.
	var rules struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	if err := json.Unmarshal(a.ok(t, http.MethodGet, "/api/v1/alarm-rules", nil), &rules); err != nil || rules.Pagination.TotalItems != 50 {
		t.Fatalf("rules after the flood: %+v %v", rules, err)
	}
	// The same for jobs: at most 50 ACTIVE.
	var jobs struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	if err := json.Unmarshal(a.ok(t, http.MethodGet, "/api/v1/jobs", nil), &jobs); err != nil || jobs.Pagination.TotalItems != core.MaxActiveJobsPerAccount {
		t.Fatalf("jobs after the flood: %+v %v", jobs, err)
	}
	// One running rollout per model: of the parallel creations one won.
	var rollouts struct {
		Pagination struct {
			TotalItems int `json:"totalItems"`
		} `json:"pagination"`
	}
	if err := json.Unmarshal(a.ok(t, http.MethodGet, "/api/v1/rollouts", nil), &rollouts); err != nil || rollouts.Pagination.TotalItems != 1 {
		t.Fatalf("rollouts after the flood: %+v %v", rollouts, err)
	}
	// The slots are released when each export ends: a new one is served
	// once the account's rate allows it again.
	deadline := time.Now().Add(70 * time.Second)
	for {
		res, raw := a.call(http.MethodGet, "/api/v1/exports/mounts", nil)
		if res.StatusCode == http.StatusOK {
			break
		}
		if res.StatusCode != http.StatusTooManyRequests || time.Now().After(deadline) {
			t.Fatalf("export after the flood: %d %s", res.StatusCode, raw)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
