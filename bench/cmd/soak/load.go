package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mountd/mountd/client"
)

// statusCounts counts the answers the tool's own requests got, by status
// (0: no answer: the connection failed or timed out).
type statusCounts struct {
	mu sync.Mutex
	m  map[int]int
}

func (s *statusCounts) add(err error) {
	code := http.StatusOK
	if err != nil {
		code = client.StatusOf(err)
	}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[int]int{}
	}
	s.m[code]++
	s.mu.Unlock()
}

func (s *statusCounts) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.m {
		out[strconv.Itoa(k)] = v
	}
	return out
}

// entryKey is one state entry: what the history must hold.
type entryKey struct {
	UID, Code string
	AtMs      int64
}

// reporters send the tool's own mounts' reports through nginx and keep
// what was acknowledged (a 2xx answer: accepted or duplicates), so that
// the reconciliation knows exactly which entries the history must hold;
// mountsim does not tell which of its reports were acknowledged.
type reporters struct {
	api      *client.Client
	uids     []string
	interval time.Duration
	statuses *statusCounts

	mu      sync.Mutex
	acked   map[entryKey]string // → the value sent
	reports atomic.Int64        // acknowledged reports
	unacked atomic.Int64        // reports given up without a 2xx (their outcome unknown)
	retries atomic.Int64
}

// battery is own mount i's battery in its n-th report: low (below the
// alarm rule's 20) for two reports in six, so that each mount's alarm is
// raised and cleared every six reports.
func battery(i, n int) int {
	if (n+i)%6 < 2 {
		return 10 + i%5
	}
	return 50 + i%40
}

func (r *reporters) run(ctx context.Context) {
	var wg sync.WaitGroup
	for i, uid := range r.uids {
		wg.Go(func() {
			// Spread the first reports over an interval.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(rand.Int64N(int64(r.interval)))):
			}
			t := time.NewTicker(r.interval)
			defer t.Stop()
			for n := 0; ; n++ {
				r.report(ctx, i, n, uid)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
}

// report sends one report of uid, again while the outcome is unknown (the
// same body: entries are idempotent), five tries at most.
func (r *reporters) report(ctx context.Context, i, n int, uid string) {
	at := time.Now().UTC().Truncate(time.Millisecond)
	ts := at.Format("2006-01-02T15:04:05.000Z07:00")
	bat, temp := strconv.Itoa(battery(i, n)), strconv.FormatFloat(30+float64(n%20)/2, 'f', 1, 64)
	body := map[string]any{"states": []map[string]string{
		{"code": "BATTERY_LEVEL", "value": bat, "occurredAt": ts},
		{"code": "CPU_TEMPERATURE", "value": temp, "occurredAt": ts},
	}}
	for attempt := 1; attempt <= 5; attempt++ {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err := r.api.Do(rctx, http.MethodPost, "/mounts/"+uid+"/states", body, nil)
		cancel()
		r.statuses.add(err)
		if err == nil {
			r.mu.Lock()
			r.acked[entryKey{uid, "BATTERY_LEVEL", at.UnixMilli()}] = bat
			r.acked[entryKey{uid, "CPU_TEMPERATURE", at.UnixMilli()}] = temp
			r.mu.Unlock()
			r.reports.Add(1)
			return
		}
		if s := client.StatusOf(err); s >= 400 && s < 500 && s != http.StatusTooManyRequests {
			logf("report %s: %v", uid, err)
			break
		}
		r.retries.Add(1)
		time.Sleep(client.RetryWait(err, time.Duration(attempt)*500*time.Millisecond, 5*time.Second))
	}
	r.unacked.Add(1)
}

// subscriber is one console: a graphql-transport-ws subscription to
// mountEvents through nginx that, after any disconnect, subscribes again
// after the last event it received (CONTRACT §12); or, with feed, a
// client following GET /events with long polls (wait=30), each after the
// last answer's next.
type subscriber struct {
	n     int
	uids  []string // nil: every mount
	feed  bool
	after string // the run's first cursor, then the last event's

	mu         sync.Mutex
	received   []string // event ids in the order received
	reconnects int
	lastErr    string
	reasons    map[string]int // why it reconnected
}

// disconnected counts a reconnection and its reason.
func (s *subscriber) disconnected(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reconnects++
	s.lastErr = reason
	if s.reasons == nil {
		s.reasons = map[string]int{}
	}
	if len(reason) > 100 {
		reason = reason[:100]
	}
	s.reasons[reason]++
}

const subscription = `subscription($after: ID, $uids: [ID!]) { mountEvents(uids: $uids, after: $after) { id type uid } }`

func (s *subscriber) run(ctx context.Context, api *client.Client) {
	if s.feed {
		s.follow(ctx, api)
		return
	}
	for ctx.Err() == nil {
		s.mu.Lock()
		vars := map[string]any{"after": s.after}
		s.mu.Unlock()
		if s.uids != nil {
			vars["uids"] = s.uids
		}
		err := api.Subscribe(ctx, subscription, vars, nil, func(data json.RawMessage) error {
			var d struct {
				MountEvents struct {
					ID string `json:"id"`
				} `json:"mountEvents"`
			}
			if err := json.Unmarshal(data, &d); err != nil {
				return err
			}
			s.mu.Lock()
			s.received = append(s.received, d.MountEvents.ID)
			s.after = d.MountEvents.ID
			s.mu.Unlock()
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.disconnected(err.Error())
		} else {
			s.disconnected("completed by the server")
		}
		// 200 consoles do not all come back in the same millisecond.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(200+rand.IntN(1800)) * time.Millisecond):
		}
	}
}

// follow reads the feed with long polls until ctx ends; a failed poll is
// made again with the same cursor.
func (s *subscriber) follow(ctx context.Context, api *client.Client) {
	for ctx.Err() == nil {
		var page struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
			Next string `json:"next"`
		}
		q := url.Values{"after": {s.after}, "limit": {"1000"}, "wait": {"30"}}
		if err := api.Do(ctx, http.MethodGet, "/events?"+q.Encode(), nil, &page); err != nil {
			if ctx.Err() != nil {
				return
			}
			s.disconnected(err.Error())
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		s.mu.Lock()
		for _, e := range page.Events {
			s.received = append(s.received, e.ID)
		}
		s.after = page.Next
		s.mu.Unlock()
	}
}

// snapshot is what the subscriber received, how often it reconnected and
// its last error.
func (s *subscriber) snapshot() (received []string, reconnects int, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.received...), s.reconnects, s.lastErr
}

// receiver is a webhook endpoint: it records each delivery's event id and
// checks its Standard Webhooks signature.
type receiver struct {
	name   string
	url    string
	secret atomic.Value // []byte: the key, once the webhook exists

	mu        sync.Mutex
	got       map[string]int // event id → deliveries
	types     map[string]string
	badSig    int
	malformed int
}

func newReceiver(name string) (*receiver, *http.Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	r := &receiver{name: name, url: "http://" + l.Addr().String() + "/hook", got: map[string]int{}, types: map[string]string{}}
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return r, srv, nil
}

func (r *receiver) setSecret(secret string) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return fmt.Errorf("webhook secret: %w", err)
	}
	r.secret.Store(key)
	return nil
}

// ServeHTTP records a delivery; a bad signature is counted and answered
// 401 (mountd then retries it, as it would for a real endpoint).
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	id, ts := req.Header.Get("webhook-id"), req.Header.Get("webhook-timestamp")
	key, _ := r.secret.Load().([]byte)
	if !verify(key, id, ts, body, req.Header.Get("webhook-signature")) {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var msg struct {
		Type string `json:"type"`
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Data.ID != id {
		r.mu.Lock()
		r.malformed++
		r.mu.Unlock()
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got[id]++
	r.types[id] = msg.Type
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// verify checks a Standard Webhooks signature header (space-separated
// "v1,<base64>" items, one of which must match).
func verify(key []byte, id, ts string, body []byte, header string) bool {
	if key == nil || id == "" || ts == "" {
		return false
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(id + "." + ts + "."))
	mac.Write(body)
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	for _, sig := range strings.Fields(header) {
		if v, ok := strings.CutPrefix(sig, "v1,"); ok && hmac.Equal([]byte(v), []byte(want)) {
			return true
		}
	}
	return false
}

func (r *receiver) snapshot() (got map[string]int, badSig, malformed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	got = make(map[string]int, len(r.got))
	for k, v := range r.got {
		got[k] = v
	}
	return got, r.badSig, r.malformed
}

// sim is a running mountsim.
type sim struct {
	name string
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{} // closed when it exited
	err  error         // its exit, once done
}

// startSim runs mountsim with args against the nginx base, trusting the
// run's certificate through SSL_CERT_FILE, with the account's credentials.
func startSim(bin, name, certFile, clientID, secret, logPath string, args []string) (*sim, error) {
	s := &sim{name: name, done: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = append(os.Environ(), "SSL_CERT_FILE="+certFile, "MOUNTSIM_CLIENT_ID="+clientID, "MOUNTSIM_CLIENT_SECRET="+secret)
	s.cmd.Stdout = &s.out
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("mountsim %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(log, sc.Text())
		}
		log.Close()
		s.err = s.cmd.Wait()
		close(s.done)
	}()
	return s, nil
}

// stop ends mountsim with SIGTERM and returns its JSON summary.
func (s *sim) stop() json.RawMessage {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(2 * time.Minute):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	return json.RawMessage(bytes.TrimSpace(s.out.Bytes()))
}
