package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/rest/openapitest"
	"github.com/mountd/mountd/graph/wsproto/wsprototest"
)

// do sends req and checks the answer against the OpenAPI document, so the
// document cannot drift from what the server does.
func (in *instance) do(req *http.Request) (*http.Response, []byte) {
	in.t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		in.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	openapitest.New(in.t).Check(in.t, req, res, body)
	return res, body
}

// call sends an API request with a token; body may be nil, a string (sent
// as is) or a value (sent as JSON).
func (in *instance) call(method, path, token string, body any) (*http.Response, []byte) {
	in.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		raw, _ := json.Marshal(b)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, in.base+path, r)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Access-Key", token)
	}
	return in.do(req)
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
	Errors []struct {
		Field   string `json:"field"`
		Message string `json:"message"`
	} `json:"errors"`
}

// wantProblem checks a problem+json answer's status and code.
func wantProblem(t testing.TB, res *http.Response, body []byte, status int, code string) problem {
	t.Helper()
	var p problem
	if res.StatusCode != status || res.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s; want %d problem+json %s", res.StatusCode, res.Header.Get("Content-Type"), body, status, code)
	}
	if err := json.Unmarshal(body, &p); err != nil || p.Code != code || p.Status != status || p.Type != "about:blank" {
		t.Fatalf("problem %s; want code %s", body, code)
	}
	return p
}

// fieldsOf lists a problem's field names.
func fieldsOf(p problem) []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

func decode[T any](t testing.TB, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	return v
}

// metric reads one unlabelled metric from /metrics.
func (in *instance) metric(t *testing.T, name string) float64 {
	t.Helper()
	_, raw := in.call(http.MethodGet, "/metrics", "", nil)
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, name+" ") {
			v, _ := strconv.ParseFloat(strings.TrimPrefix(line, name+" "), 64)
			return v
		}
	}
	t.Fatalf("no %s in /metrics", name)
	return 0
}

// metricValue reads one sample from a Prometheus text page; -1 when absent.
func metricValue(page, sample string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(page)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []struct {
		Message    string         `json:"message"`
		Path       []any          `json:"path"`
		Extensions map[string]any `json:"extensions"`
	} `json:"errors"`
}

// code returns the first error's extensions.code, or "".
func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

func (in *instance) gql(t *testing.T, token, query string, vars map[string]any) gqlResponse {
	t.Helper()
	res, raw := in.call(http.MethodPost, "/graphql", token, map[string]any{"query": query, "variables": vars})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("graphql: %d %s", res.StatusCode, raw)
	}
	return decode[gqlResponse](t, raw)
}

// gql posts a GraphQL operation with the fleet's token.
func (f fleet) gql(t *testing.T, query string, vars map[string]any) gqlResponse {
	t.Helper()
	return f.in.gql(t, f.token, query, vars)
}

// field decodes the data's field, failing on any error.
func field[T any](t *testing.T, r gqlResponse, name string) T {
	t.Helper()
	if len(r.Errors) > 0 {
		t.Fatalf("%s: errors %+v", name, r.Errors)
	}
	var d map[string]json.RawMessage
	if err := json.Unmarshal(r.Data, &d); err != nil || d[name] == nil {
		t.Fatalf("%s: data %s (%v)", name, r.Data, err)
	}
	var v T
	if err := json.Unmarshal(d[name], &v); err != nil {
		t.Fatalf("%s: %v in %s", name, err, d[name])
	}
	return v
}

// decodeField decodes one root field of a GraphQL response.
func decodeField[T any](t *testing.T, r gqlResponse, field string) T {
	t.Helper()
	fields := decode[map[string]json.RawMessage](t, r.Data)
	return decode[T](t, fields[field])
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// dialWS opens a socket to the instance's /graphql.
func (in *instance) dialWS(t *testing.T, opts wsprototest.Options) *wsprototest.Client {
	t.Helper()
	return wsprototest.MustDial(t, in.base+"/graphql", opts)
}

// wsReady opens a graphql-transport-ws socket authenticated with token.
func (in *instance) wsReady(t *testing.T, token string) *wsprototest.Client {
	t.Helper()
	c := in.dialWS(t, wsprototest.Options{})
	c.Init(map[string]any{"Access-Key": token})
	return c
}

// data decodes a next message for id: {"data":{field: T}} without errors.
func data[T any](t *testing.T, m wsprototest.Message, id, field string) T {
	t.Helper()
	var res struct {
		Data   map[string]json.RawMessage `json:"data"`
		Errors []any                      `json:"errors"`
	}
	if m.Type != "next" || m.ID != id || json.Unmarshal(m.Payload, &res) != nil || len(res.Errors) > 0 || res.Data[field] == nil {
		t.Fatalf("got %s; want next %s with %s", m, id, field)
	}
	var v T
	if err := json.Unmarshal(res.Data[field], &v); err != nil {
		t.Fatalf("decode %s: %v", m, err)
	}
	return v
}

// nextData waits for the next message and decodes it as data.
func nextData[T any](t *testing.T, c *wsprototest.Client, id, field string) T {
	t.Helper()
	return data[T](t, c.Next(), id, field)
}

const (
	stateSubscription = `subscription($uid: ID!) { mountStateChanged(uid: $uid) {
		uid occurredAt states { code value occurredAt receivedAt }
		mount { uid associationState batteryLevel cpuTemperature mountLocked helmetMounted } } }`
	eventsSubscription = `subscription($uids: [ID!]) { mountEvents(uids: $uids) {
		type uid occurredAt mount { uid associationState batteryLevel } } }`
)

type wsMount struct {
	UID              string   `json:"uid"`
	AssociationState string   `json:"associationState"`
	BatteryLevel     *int     `json:"batteryLevel"`
	CPUTemperature   *float64 `json:"cpuTemperature"`
	MountLocked      *bool    `json:"mountLocked"`
	HelmetMounted    *bool    `json:"helmetMounted"`
}

type stateEvent struct {
	UID        string `json:"uid"`
	OccurredAt string `json:"occurredAt"`
	States     []struct {
		Code       string  `json:"code"`
		Value      string  `json:"value"`
		OccurredAt string  `json:"occurredAt"`
		ReceivedAt *string `json:"receivedAt"`
	} `json:"states"`
	Mount wsMount `json:"mount"`
}

type mountEvent struct {
	Type       string  `json:"type"`
	UID        string  `json:"uid"`
	OccurredAt string  `json:"occurredAt"`
	Mount      wsMount `json:"mount"`
}

// sub is a subscription on a socket: its id and root field.
type sub struct {
	c     *wsprototest.Client
	id    string
	field string
}

// prime makes sure every subscription is live before a test relies on it:
// the server registers a subscription asynchronously, so it reports
// BATTERY_LEVEL n, n+1, ... on uid through f until each subscription has
// delivered one, then consumes the events of the later reports too. Each
// subscription must see the reports on uid (mountStateChanged(uid) or
// mountEvents); several may share a socket.
func prime(t *testing.T, f fleet, uid string, subs ...sub) {
	t.Helper()
	// Each priming reports its own range of battery levels, so that a late
	// event of an earlier one is told apart.
	base := int(primings.Add(20)%80) + 1
	k := 0                         // reports made so far
	seen := make([]int, len(subs)) // last battery level received; 0: none yet
	var clients []*wsprototest.Client
	for _, s := range subs {
		if !slices.Contains(clients, s.c) {
			clients = append(clients, s.c)
		}
	}
	// read takes one message from c within d and records it.
	read := func(c *wsprototest.Client, d time.Duration) bool {
		m, err := c.NextWithin(d)
		if err != nil {
			return false
		}
		i := slices.IndexFunc(subs, func(s sub) bool { return s.c == c && s.id == m.ID })
		if i < 0 {
			t.Fatalf("unexpected %s while priming", m)
		}
		b := batteryOf(t, m, subs[i]) - base + 1
		if b < 1 || b > k {
			// An event of an earlier priming (or a report made after it,
			// carrying its value), delivered late on a busy machine.
			return true
		}
		if seen[i] != 0 && b != seen[i]+1 {
			t.Fatalf("primer event %d after %d", b, seen[i])
		}
		seen[i] = b
		return true
	}
	live := func(c *wsprototest.Client) bool {
		for i, s := range subs {
			if (c == nil || s.c == c) && seen[i] == 0 {
				return false
			}
		}
		return true
	}
	for !live(nil) {
		if k++; k > 40 {
			t.Fatalf("subscriptions not live after %d reports", k-1)
		}
		f.report(t, uid, entry("BATTERY_LEVEL", strconv.Itoa(base+k-1), time.Now()))
		deadline := time.Now().Add(250 * time.Millisecond)
		for _, c := range clients {
			for !live(c) && read(c, max(time.Until(deadline), time.Millisecond)) {
			}
		}
	}
	for i, s := range subs {
		for seen[i] < k {
			if !read(s.c, wsprototest.DefaultTimeout) {
				t.Fatalf("subscription %s: no event for report %d", s.id, seen[i]+1)
			}
		}
	}
}

// primings moves each priming's battery levels to another range of 20.
var primings atomic.Int64

func batteryOf(t *testing.T, m wsprototest.Message, s sub) int {
	t.Helper()
	e := data[mountEvent](t, m, s.id, s.field) // mountStateChanged has no type
	if (e.Type != "" && e.Type != "STATES_REPORTED") || e.Mount.BatteryLevel == nil {
		t.Fatalf("primer event %s", m)
	}
	return *e.Mount.BatteryLevel
}

// settledGoroutines counts goroutines once idle HTTP connections are gone.
func settledGoroutines() int {
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	return runtime.NumGoroutine()
}

// waitGoroutines polls until the goroutine count is back to base.
func waitGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := settledGoroutines()
		if n <= base {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
		}
	}
}
