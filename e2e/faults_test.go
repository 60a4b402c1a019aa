package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/core"
)

// The fault tests run mountd as real processes (built from this package)
// on the test PostgreSQL and on a Redis of their own, and kill them.

// replicaEnv is what every replica of one deployment shares.
// faultCursors reads the event ids of replicas started with replicaEnv's
// master key, to check their order.
var faultCursors = func() *core.CursorCodec {
	sealer, err := keyring.NewSealer(bytes.Repeat([]byte{0xcd}, 32))
	if err != nil {
		panic(err)
	}
	return core.NewCursorCodec(sealer.DerivedKey("event cursors"))
}()

// follower follows mountEvents from a cursor, resuming from the last event
// it received whenever its socket ends, and keeps every event once.
type follower struct {
	mu     sync.Mutex
	events []eventView
	dups   int
	order  int
	notes  []string
}

// run follows from the account's position when it is called (its
// eventCursor), so that no event made after run returns is missed however
// late the socket opens.
func (f *follower) run(ctx context.Context, t *testing.T, api *client.Client) {
	tok, err := api.Token()
	if err != nil {
		t.Fatal(err)
	}
	// The process is reached over its address only: an instance's helpers
	// need no more than that.
	proc := &instance{t: t, base: api.Base()}
	cursor := decodeField[string](t, proc.gql(t, tok, `{ eventCursor }`, nil), "eventCursor")
	go f.follow(ctx, api, cursor)
}

// follow subscribes after the cursor and resumes from its last event
// whenever the socket ends, until ctx does.
func (f *follower) follow(ctx context.Context, api *client.Client, after string) {
	const q = `subscription($after: ID) { mountEvents(after: $after) { id type uid states { value } } }`
	for ctx.Err() == nil {
		err := api.Subscribe(ctx, q, map[string]any{"after": after}, nil, func(data json.RawMessage) error {
			var next struct{ MountEvents eventView }
			if err := json.Unmarshal(data, &next); err != nil {
				return err
			}
			e := next.MountEvents
			f.mu.Lock()
			defer f.mu.Unlock()
			if slices.ContainsFunc(f.events, func(x eventView) bool { return x.ID == e.ID }) {
				f.dups++
				return nil
			}
			if n := len(f.events); n > 0 {
				prev, _ := faultCursors.Decode(f.events[n-1].ID)
				cur, _ := faultCursors.Decode(e.ID)
				if !prev.Before(cur) {
					f.order++
					f.notes = append(f.notes, fmt.Sprintf("%+v (%s %v) after %+v (%s %v)", cur, e.Type, e.States, prev, f.events[n-1].Type, f.events[n-1].States))
				}
			}
			f.events = append(f.events, e)
			after = e.ID
			return nil
		})
		f.mu.Lock()
		f.notes = append(f.notes, fmt.Sprintf("socket ended after %d events: %v", len(f.events), err))
		f.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// values returns the battery values of the reports the follower received.
func (f *follower) values() (vals []string, dups, disorder int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.events {
		if e.Type == "STATES_REPORTED" {
			for _, s := range e.States {
				vals = append(vals, s.Value)
			}
		}
	}
	return vals, f.dups, f.order
}

// waitValues waits until the follower has every value in want.
func (f *follower) waitValues(t *testing.T, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, dups, disorder := f.values()
		if dups > 0 || disorder > 0 {
			f.mu.Lock()
			t.Errorf("the follower got %d duplicates and %d events out of order: %v", dups, disorder, f.notes)
			f.mu.Unlock()
			return
		}
		// Values repeat (reports cycle through 0..100): compare counts,
		// so that a follower still catching up is not taken for one that
		// lost reports.
		counts := map[string]int{}
		for _, v := range got {
			counts[v]++
		}
		missing := 0
		for _, w := range want {
			if counts[w]--; counts[w] < 0 {
				missing++
			}
		}
		if missing == 0 {
			if len(got) != len(want) {
				t.Fatalf("the follower got %d reports, %d were acknowledged", len(got), len(want))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v the follower misses %d of %d acknowledged reports", within, missing, len(want))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestFaultRedisKilled: Redis is killed (SIGKILL) and restarted while
// reports are posted and a subscriber with a cursor listens. The API keeps
// answering, no acknowledged report is lost, and the subscriber, resuming
// from its last cursor, receives every one exactly once, in order.
func TestFaultRedisKilled(t *testing.T) {
	redisAddr := freeAddr(t)
	redis := startRedis(t, redisAddr)
	addr := freeAddr(t)
	p := startProc(t, addr, replicaEnv(t, testenv.PostgresURL(t), "redis://"+redisAddr+"/0", "http://"+addr))
	api, _ := p.ownerClient(t, "Fleet")
	uid := "FR-1"
	associate(t, api, uid)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &follower{}
	f.run(ctx, t, api)

	base := time.Now().Add(-time.Hour)
	var (
		acked   []string
		slowest time.Duration
	)
	for i := 0; i < 300; i++ {
		switch i {
		case 100:
			redis.kill()
		case 200:
			redis = startRedis(t, redisAddr)
		}
		began := time.Now()
		if report(t, api, uid, i%101, base.Add(time.Duration(i)*time.Millisecond)) {
			acked = append(acked, fmt.Sprint(i%101))
		}
		slowest = max(slowest, time.Since(began))
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d of 300 reports acknowledged; the slowest took %v", len(acked), slowest)
	if len(acked) < 250 {
		t.Errorf("only %d of 300 reports were acknowledged with Redis away for a third of them", len(acked))
	}
	f.waitValues(t, acked, 20*time.Second)
	if t.Failed() {
		t.Log(p.out.String())
	}
}

// TestFaultReplicaKilled: two replicas on one PostgreSQL and Redis; the one
// the reports go to is killed (SIGKILL) right after its last commit. Every
// acknowledged event still reaches a subscriber of the other replica and a
// webhook endpoint.
func TestFaultReplicaKilled(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisURL, _ := testenv.RedisURL(t)
	addrA, addrB := freeAddr(t), freeAddr(t)
	env := replicaEnv(t, dbURL, redisURL, "http://"+addrA, "MOUNTD_WEBHOOK_ALLOW_PRIVATE=true", "MOUNTD_WEBHOOK_RETRY_DELAYS=100ms,200ms,500ms,1s")
	a := startProc(t, addrA, env)
	b := startProc(t, addrB, env)
	onA, creds := a.ownerClient(t, "Fleet")
	uid := "FK-1"
	associate(t, onA, uid)

	rcv := newReceiver(t)
	var hook webhookView
	if err := onA.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"STATES_REPORTED"}}, &hook); err != nil {
		t.Fatal(err)
	}
	rcv.setSecret(hook.Secret)

	// The subscriber and its tokens come from B, the replica that survives.
	onB := b.clientFor(creds)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &follower{}
	f.run(ctx, t, onB)

	base := time.Now().Add(-time.Hour)
	var acked []string
	for i := range 100 {
		if report(t, onA, uid, i, base.Add(time.Duration(i)*time.Millisecond)) {
			acked = append(acked, fmt.Sprint(i))
		}
	}
	a.kill() // SIGKILL right after the last acknowledged commit
	f.waitValues(t, acked, 20*time.Second)
	rcv.waitFor(t, "every acknowledged report at the webhook", func(calls []webhookCall) bool {
		var got []string
		for _, call := range calls {
			for _, s := range call.Data.States {
				got = append(got, s.Value)
			}
		}
		for _, w := range acked {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	})
}

// TestFaultDatabaseConnectionsTerminated: PostgreSQL terminates every
// connection of the service under load. Requests fail cleanly (503 with
// Retry-After, never 500) and the service recovers without a restart.
func TestFaultDatabaseConnectionsTerminated(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisURL, _ := testenv.RedisURL(t)
	addr := freeAddr(t)
	p := startProc(t, addr, replicaEnv(t, dbURL, redisURL, "http://"+addr))
	api, _ := p.ownerClient(t, "Fleet")
	associate(t, api, "FD-1")

	admin := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(os.Getenv("MOUNTD_TEST_DATABASE_URL"))))
	defer admin.Close()
	dbName := dbURL[strings.LastIndex(dbURL, "/")+1:]

	var (
		ok, unavailable, other atomic.Int64
		wg                     sync.WaitGroup
		stop                   = make(chan struct{})
		n                      atomic.Int64
	)
	base := time.Now().Add(-time.Hour)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := n.Add(1)
				err := api.Do(context.Background(), http.MethodPost, "/mounts/FD-1/states", map[string]any{"states": []any{
					map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(i % 101), "occurredAt": base.Add(time.Duration(i) * time.Millisecond).Format(time.RFC3339Nano)}}}, nil)
				switch {
				case err == nil:
					ok.Add(1)
				case client.StatusOf(err) == http.StatusServiceUnavailable:
					unavailable.Add(1)
				default:
					other.Add(1)
					t.Errorf("under terminated connections: %v", err)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	for range 3 {
		if _, err := admin.Exec(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, dbName); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	before := ok.Load()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	t.Logf("acknowledged %d, 503 %d, other %d", ok.Load(), unavailable.Load(), other.Load())
	if ok.Load() == before {
		t.Fatal("no report acknowledged after the connections were terminated: the service did not recover")
	}
	if err := api.Do(context.Background(), http.MethodGet, "/mounts/FD-1", nil, nil); err != nil {
		t.Fatalf("a read after recovery: %v", err)
	}
}

// TestFaultSigterm: SIGTERM during load. Requests in flight complete, and a
// webhook attempt that is pending (a retry not yet due, or one being made
// when the process stops) is still pending for the next start.
func TestFaultSigterm(t *testing.T) {
	dbURL := testenv.PostgresURL(t)
	redisURL, _ := testenv.RedisURL(t)
	addr := freeAddr(t)
	env := replicaEnv(t, dbURL, redisURL, "http://"+addr, "MOUNTD_WEBHOOK_ALLOW_PRIVATE=true", "MOUNTD_WEBHOOK_RETRY_DELAYS=1h")
	p := startProc(t, addr, env)
	api, creds := p.ownerClient(t, "Fleet")
	associate(t, api, "FS-1")
	rcv := newReceiver(t)
	rcv.failures = 1 << 30 // always 500: the retry waits an hour
	var hook webhookView
	if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"STATES_REPORTED"}}, &hook); err != nil {
		t.Fatal(err)
	}
	rcv.setSecret(hook.Secret)
	deliveries := func() []deliveryView {
		var page struct{ Deliveries []deliveryView }
		if err := api.Do(context.Background(), http.MethodGet, "/webhooks/"+hook.ID+"/deliveries?pageSize=100", nil, &page); err != nil {
			t.Fatal(err)
		}
		return page.Deliveries
	}
	base := time.Now().Add(-time.Hour)
	if !report(t, api, "FS-1", 1, base) {
		t.Fatal("first report refused")
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if ds := deliveries(); len(ds) == 2 && ds[0].Status == "PENDING" && ds[1].Status == "FAILED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retry pending: %+v", deliveries())
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Load, then SIGTERM: every request sent before the signal is answered.
	var (
		wg      sync.WaitGroup
		answers atomic.Int64
		broken  atomic.Int64
	)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := api.Do(context.Background(), http.MethodPost, "/mounts/FS-1/states", map[string]any{"states": []any{
				map[string]any{"code": "BATTERY_LEVEL", "value": fmt.Sprint(i + 2), "occurredAt": base.Add(time.Duration(i+2) * time.Millisecond).Format(time.RFC3339Nano)}}}, nil)
			if err != nil {
				broken.Add(1)
				return
			}
			answers.Add(1)
		}()
	}
	time.Sleep(20 * time.Millisecond)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("mountd exited with %v after SIGTERM:\n%s", err, p.out.String())
	}
	t.Logf("answered %d, refused (after the listener closed) %d", answers.Load(), broken.Load())
	if answers.Load() == 0 {
		t.Fatal("no request in flight completed")
	}

	p2 := startProc(t, addr, env)
	api = p2.clientFor(creds)
	ds := deliveries()
	pending := 0
	for _, d := range ds {
		if d.Status == "PENDING" {
			pending++
		}
	}
	if pending == 0 {
		t.Fatalf("no attempt pending after the restart: %+v", ds)
	}
}

// TestFaultJobsWithRedisAndReceiverDown: with Redis killed and the webhook
// receiver failing its first deliveries, jobs are created, listed and
// fetched at the mount, and the JOB_COMPLETED of a job without targets
// still reaches the receiver once it recovers (the feed polls the log when
// no wake-up comes; deliveries are retried).
func TestFaultJobsWithRedisAndReceiverDown(t *testing.T) {
	redisAddr := freeAddr(t)
	redis := startRedis(t, redisAddr)
	addr := freeAddr(t)
	p := startProc(t, addr, replicaEnv(t, testenv.PostgresURL(t), "redis://"+redisAddr+"/0", "http://"+addr,
		"MOUNTD_WEBHOOK_ALLOW_PRIVATE=true", "MOUNTD_WEBHOOK_RETRY_DELAYS=100ms,200ms,500ms,1s"))
	api, _ := p.ownerClient(t, "Fleet")
	uid := "FJ-1"
	associate(t, api, uid)
	rcv := newReceiver(t)
	var hook webhookView
	if err := api.Do(context.Background(), http.MethodPost, "/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"JOB_COMPLETED"}}, &hook); err != nil {
		t.Fatal(err)
	}
	rcv.setSecret(hook.Secret)
	rcv.mu.Lock()
	rcv.failures = 2
	rcv.mu.Unlock()

	redis.kill()
	var job jobView
	if err := api.Do(context.Background(), http.MethodPost, "/jobs", map[string]any{"code": "RELEASE_HELMET", "mountUids": []string{uid}}, &job); err != nil {
		t.Fatalf("create a job with Redis down: %v", err)
	}
	var pending struct {
		Commands []struct {
			JobID string `json:"jobId"`
		} `json:"commands"`
	}
	if err := api.Do(context.Background(), http.MethodGet, "/mounts/"+uid+"/pending-commands", nil, &pending); err != nil ||
		len(pending.Commands) != 1 || pending.Commands[0].JobID != job.ID {
		t.Fatalf("pending commands with Redis down: %+v %v", pending, err)
	}
	var none jobView
	if err := api.Do(context.Background(), http.MethodPost, "/jobs", map[string]any{"code": "RELEASE_HELMET", "filter": `modelNumber = "none"`}, &none); err != nil ||
		none.State != "COMPLETED" {
		t.Fatalf("a job without targets with Redis down: %+v %v", none, err)
	}
	rcv.waitFor(t, "JOB_COMPLETED after two failed deliveries, Redis down", func(calls []webhookCall) bool {
		return len(calls) > 0 && calls[0].Type == "JOB_COMPLETED"
	})
	if t.Failed() {
		t.Log(p.out.String())
	}
}
