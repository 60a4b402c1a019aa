package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// fleet is an account with an owner token on an instance.
type fleet struct {
	in    *instance
	creds credentials
	token string
}

func newFleet(in *instance, name string) fleet {
	c := in.createAccount(name)
	return fleet{in: in, creds: c, token: in.ownerToken(c)}
}

func (f fleet) call(method, path string, body any) (*http.Response, []byte) {
	f.in.t.Helper()
	return f.in.call(method, path, f.token, body)
}

// ok calls and insists on 200.
func (f fleet) ok(t *testing.T, method, path string, body any) []byte {
	t.Helper()
	res, raw := f.call(method, path, body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	return raw
}

// noContent calls and insists on 204.
func (f fleet) noContent(t *testing.T, method, path string, body any) {
	t.Helper()
	res, raw := f.call(method, path, body)
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
}

// associate requests and returns the ASSOCIATE_OWNER command.
func (f fleet) associate(t *testing.T, uid string, extra map[string]any) commandView {
	t.Helper()
	body := map[string]any{"uid": uid}
	for k, v := range extra {
		body[k] = v
	}
	res, raw := f.call(http.MethodPost, "/api/v1/mounts", body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("associate %s: %d %s", uid, res.StatusCode, raw)
	}
	cmds := decode[[]commandView](t, raw)
	if len(cmds) != 1 || cmds[0].Code != "ASSOCIATE_OWNER" || cmds[0].SignedToken != nil {
		t.Fatalf("associate answer %s", raw)
	}
	return cmds[0]
}

func (f fleet) confirm(t *testing.T, uid string) mountView {
	t.Helper()
	res, raw := f.call(http.MethodPost, "/api/v1/mounts/"+uid+"/confirm-association", nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("confirm %s: %d %s", uid, res.StatusCode, raw)
	}
	return decode[mountView](t, raw)
}

// associated creates an account's ASSOCIATED mount.
func (f fleet) associated(t *testing.T, uid string) {
	t.Helper()
	f.associate(t, uid, nil)
	f.confirm(t, uid)
}

func (f fleet) get(t *testing.T, uid string) mountView {
	t.Helper()
	res, raw := f.call(http.MethodGet, "/api/v1/mounts/"+uid, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("get %s: %d %s", uid, res.StatusCode, raw)
	}
	list := decode[[]mountView](t, raw)
	if len(list) != 1 {
		t.Fatalf("get %s: %s", uid, raw)
	}
	return list[0]
}

func (f fleet) report(t *testing.T, uid string, states ...map[string]any) map[string]int {
	t.Helper()
	res, raw := f.call(http.MethodPost, "/api/v1/mounts/"+uid+"/states", map[string]any{"states": states})
	if res.StatusCode != http.StatusOK {
		t.Fatalf("report %s: %d %s", uid, res.StatusCode, raw)
	}
	return decode[map[string]int](t, raw)
}

func entry(code, value string, at time.Time) map[string]any {
	return map[string]any{"code": code, "value": value, "occurredAt": at.Format(time.RFC3339Nano)}
}

// command fetches a signed command as the API returns it.
func (f fleet) command(t *testing.T, uid, code string) protocol.BLECommand {
	t.Helper()
	cmds := decode[[]protocol.BLECommand](t, f.ok(t, "GET", "/api/v1/mounts/"+uid+"/query?code="+code, nil))
	return cmds[0]
}

func (f fleet) commandByID(t *testing.T, uid, id string) lifecycleView {
	t.Helper()
	res, raw := f.call(http.MethodGet, "/api/v1/mounts/"+uid+"/commands/"+id, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("command %s: %d %s", id, res.StatusCode, raw)
	}
	return decode[lifecycleView](t, raw)
}

// issue asks for a command and answers it.
func (f fleet) issue(t *testing.T, uid, query string) lifecycleView {
	t.Helper()
	res, raw := f.call(http.MethodGet, "/api/v1/mounts/"+uid+"/query?"+query, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("query %s: %d %s", query, res.StatusCode, raw)
	}
	cmds := decode[[]lifecycleView](t, raw)
	if len(cmds) != 1 {
		t.Fatalf("query answer %s", raw)
	}
	return cmds[0]
}

func (f fleet) events(t *testing.T, query url.Values) eventPageView {
	t.Helper()
	return decode[eventPageView](t, f.ok(t, http.MethodGet, "/api/v1/events?"+query.Encode(), nil))
}

func (f fleet) alarms(t *testing.T, query url.Values) alarmPageView {
	t.Helper()
	return decode[alarmPageView](t, f.ok(t, http.MethodGet, "/api/v1/alarms?"+query.Encode(), nil))
}

type alarmPageView struct {
	Alarms     []alarmView    `json:"alarms"`
	Pagination map[string]int `json:"pagination"`
}

func (f fleet) createRule(t *testing.T, body map[string]any) alarmRuleView {
	t.Helper()
	res, raw := f.call(http.MethodPost, "/api/v1/alarm-rules", body)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create rule %v: %d %s", body, res.StatusCode, raw)
	}
	return decode[alarmRuleView](t, raw)
}

func lowBattery(uid string) map[string]any {
	return map[string]any{"name": "Battery low", "severity": "WARNING", "forSeconds": 0, "mountUids": []string{uid},
		"conditions": []any{map[string]any{"code": "BATTERY_LEVEL", "op": "<", "value": "20"}}}
}

func (f fleet) createJob(t *testing.T, body map[string]any) jobView {
	t.Helper()
	res, raw := f.call(http.MethodPost, "/api/v1/jobs", body)
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create job %v: %d %s", body, res.StatusCode, raw)
	}
	return decode[jobView](t, raw)
}

// pending fetches a mount's pending commands with token.
func (in *instance) pending(t *testing.T, token, uid string) []pendingView {
	t.Helper()
	res, raw := in.call(http.MethodGet, "/api/v1/mounts/"+uid+"/pending-commands", token, nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("pending-commands %s: %d %s", uid, res.StatusCode, raw)
	}
	return decode[struct {
		Commands []pendingView `json:"commands"`
	}](t, raw).Commands
}

func (f fleet) rolloutMounts(t *testing.T, id string) map[string]rolloutTargetView {
	t.Helper()
	page := decode[struct {
		Mounts     []rolloutTargetView `json:"mounts"`
		Pagination map[string]int      `json:"pagination"`
	}](t, f.ok(t, http.MethodGet, "/api/v1/rollouts/"+id+"/mounts?pageSize=100", nil))
	out := map[string]rolloutTargetView{}
	for _, m := range page.Mounts {
		out[m.UID] = m
	}
	if page.Pagination["totalItems"] != len(page.Mounts) {
		t.Fatalf("rollout mounts: %d listed of %d", len(page.Mounts), page.Pagination["totalItems"])
	}
	return out
}

type rolloutTargetView struct {
	UID             string  `json:"uid"`
	State           string  `json:"state"`
	Phase           int     `json:"phase"`
	CommandID       *string `json:"commandId"`
	InstallingSince *string `json:"installingSince"`
	Reason          *string `json:"reason"`
}

// rolloutTargets answers a rollout's targets over GraphQL, by uid.
func (f fleet) rolloutTargets(t *testing.T, id string) map[string]gqlRolloutTarget {
	t.Helper()
	page := field[struct{ Mounts []gqlRolloutTarget }](t, f.gql(t, `query($id: ID!) { rolloutMounts(id: $id, pageSize: 100) {
		mounts { uid state phase commandId installingSince reason } } }`, map[string]any{"id": id}), "rolloutMounts")
	out := map[string]gqlRolloutTarget{}
	for _, m := range page.Mounts {
		out[m.UID] = m
	}
	return out
}

// auditREST reads the account's whole log through the API.
func (f fleet) auditREST(t *testing.T, query url.Values) auditPageView {
	t.Helper()
	if query == nil {
		query = url.Values{}
	}
	if !query.Has("limit") {
		query.Set("limit", "1000")
	}
	return decode[auditPageView](t, f.ok(t, http.MethodGet, "/api/v1/audit?"+query.Encode(), nil))
}

// eventually reads the log until it holds the entry pass picks. On
// PostgreSQL an entry is read once every older transaction of the cluster
// has ended (the log's order, docs/architecture.md), which other tests'
// transactions may delay by a moment.
func eventually(t *testing.T, read func() []auditView, pass func(auditView) bool) (auditView, []auditView, bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := read()
		for _, e := range log {
			if pass(e) {
				return e, log, true
			}
		}
		if time.Now().After(deadline) {
			return auditView{}, log, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// okUntil GETs path until pass holds of the body, for at most 10 s, and
// returns the last body: a read of the event log right after a write, as
// eventually is for the audit log.
func (f fleet) okUntil(t *testing.T, path string, pass func(body []byte) bool) ([]byte, bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		body := f.ok(t, http.MethodGet, path, nil)
		if pass(body) {
			return body, true
		}
		if time.Now().After(deadline) {
			return body, false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func is(action, target string) func(auditView) bool {
	return func(e auditView) bool { return e.Action == action && e.Target == target }
}

// uniqueUID gives a mount uid no other test uses: the Redis scheduler and
// event channel are shared by every instance on the test Redis.
func uniqueUID(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// device is a mount's own key pair and its message counter.
type device struct {
	uid     string
	key     ed25519.PrivateKey
	counter uint64
}

func newDevice(uid string) *device {
	seed := sha256.Sum256([]byte("device " + uid))
	return &device{uid: uid, key: ed25519.NewKeyFromSeed(seed[:])}
}

func (d *device) publicKey() string { return hex.EncodeToString(d.key.Public().(ed25519.PublicKey)) }

// signedReport is a states message as the mount signs it, relayed unchanged.
func (d *device) signedReport(revision string, entries ...protocol.ReportEntry) map[string]any {
	d.counter++
	states := make([]any, len(entries))
	for i, e := range entries {
		states[i] = entry(string(e.Code), e.Value, e.OccurredAt)
	}
	text := protocol.BuildReportText(protocol.Report{UID: d.uid, Counter: d.counter, SoftwareRevision: revision, Entries: entries})
	return map[string]any{"states": states, "counter": d.counter, "softwareRevision": revision, "signature": protocol.Sign(d.key, text)}
}

// receipt is a result message as the mount signs it.
func (d *device) receipt(nonce, outcome, reason string, at time.Time) map[string]any {
	d.counter++
	at = at.UTC().Truncate(time.Millisecond)
	text := protocol.BuildReceiptText(protocol.Receipt{UID: d.uid, Nonce: nonce, Outcome: outcome, Reason: reason, Counter: d.counter, At: at})
	return map[string]any{"nonce": nonce, "outcome": outcome, "reason": reason, "counter": d.counter,
		"at": protocol.FormatTime(at), "signature": protocol.Sign(d.key, text)}
}

func receipts(rs ...any) map[string]any { return map[string]any{"receipts": rs} }

func associate(t testing.TB, api *client.Client, uid string) {
	t.Helper()
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", map[string]any{"uid": uid}, nil); err != nil {
		t.Fatal(err)
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/confirm-association", nil, nil); err != nil {
		t.Fatal(err)
	}
}

// associateWith requests an association with body's fields, confirms it
// and answers the mount's owner public key (from ASSOCIATE_OWNER).
func associateWith(t *testing.T, api *client.Client, body map[string]any) ed25519.PublicKey {
	t.Helper()
	var cmds []struct {
		Data struct {
			PublicKey string `json:"publicKey"`
		} `json:"data"`
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts", body, &cmds); err != nil {
		t.Fatal(err)
	}
	if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+body["uid"].(string)+"/confirm-association", nil, nil); err != nil {
		t.Fatal(err)
	}
	key, err := hex.DecodeString(cmds[0].Data.PublicKey)
	if err != nil || len(key) != ed25519.PublicKeySize {
		t.Fatalf("ASSOCIATE_OWNER public key %q: %v", cmds[0].Data.PublicKey, err)
	}
	return key
}

// report posts one BATTERY_LEVEL value; ok says whether it was
// acknowledged. Any answer but 200 or 503 with Retry-After fails the test.
func report(t *testing.T, api *client.Client, uid string, value int, at time.Time) bool {
	err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{
		map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(value), "occurredAt": at.Format(time.RFC3339Nano)}}}, nil)
	if err == nil {
		return true
	}
	if client.StatusOf(err) == http.StatusServiceUnavailable {
		return false
	}
	if strings.Contains(err.Error(), "cannot reach mountd") {
		return false
	}
	t.Errorf("report %d: %v", value, err)
	return false
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

// fill posts n reports of one entry to uid, 8 at a time.
func fill(b *testing.B, api *client.Client, uid string, n int, base time.Time) {
	b.Helper()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				if err := api.Do(context.Background(), http.MethodPost, "/mounts/"+uid+"/states", map[string]any{"states": []any{
					map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(i % 101), "occurredAt": base.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)}}}, nil); err != nil {
					b.Error(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

func mustSDK(t *testing.T, base, token string, radio sdk.Radio) *sdk.Client {
	t.Helper()
	c, err := sdk.New(sdk.Config{BaseURL: base, Token: token, Radio: radio, ConfirmTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitForStep polls cond for up to a minute.
func waitForStep(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after a minute", what)
		}
	}
}

// seedHistory inserts n history entries of uid for accountID straight
// into the database (the API would take minutes).
func seedHistory(t *testing.T, store *bunstore.Store, uid, accountID string, n int) {
	t.Helper()
	start := time.Now().Add(-48 * time.Hour).UnixMilli()
	series := `WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < ? - 1) SELECT i FROM s`
	if store.Postgres() {
		series = `SELECT generate_series(0, ? - 1) AS i`
	}
	const batch = 25_000 // a statement well inside the driver's read timeout
	for from := 0; from < n; from += batch {
		_, err := store.DB().ExecContext(context.Background(), `INSERT INTO mount_states (mount_uid, account_id, code, occurred_at, value, received_at)
			SELECT ?, ?, 'BATTERY_LEVEL', ? + i, CAST(i % 101 AS TEXT), ? + i FROM (`+series+`) AS g`,
			uid, accountID, start+int64(from), start+int64(from), min(batch, n-from))
		if err != nil {
			t.Fatal(err)
		}
	}
}
