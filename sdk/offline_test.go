package sdk_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// signingMount is a mount on a fake radio that signs what it says, as
// firmware with a device key does: a receipt for every command, then its
// states after RELEASE_HELMET. It does not check commands (the simulated
// firmware does); onCommand runs when one arrives.
type signingMount struct {
	uid       string
	key       ed25519.PrivateKey
	onCommand func()

	mu      sync.Mutex
	counter uint64
	at      time.Time
}

func newSigningMount(uid string) *signingMount {
	_, key, _ := ed25519.GenerateKey(nil)
	return &signingMount{uid: uid, key: key, at: time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)}
}

func (m *signingMount) publicKey() string {
	return hex.EncodeToString(m.key.Public().(ed25519.PublicKey))
}

func (m *signingMount) Scan(ctx context.Context, found func(protocol.BLEDevice)) error {
	found(protocol.BLEDevice{Address: "02:00:00:00:00:01", Name: protocol.BLENamePrefix + m.uid, MountUID: m.uid})
	<-ctx.Done()
	return ctx.Err()
}

func (m *signingMount) Connect(context.Context, string) (sdk.BLELink, error) {
	return &fakeLink{m: m, frames: make(chan []byte, 256)}, nil
}

// answer is what the mount notifies for one command.
func (m *signingMount) answer(raw []byte) [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	var cmd protocol.BLECommand
	_ = json.Unmarshal(raw, &cmd)
	p, _ := protocol.ParsePayload(cmd.Payload)
	m.counter++
	m.at = m.at.Add(time.Second)
	c := m.counter
	rc := protocol.Receipt{UID: m.uid, Nonce: p.Nonce, Outcome: protocol.OutcomeExecuted, Counter: c, At: m.at}
	result, _ := json.Marshal(protocol.BLEMessage{Type: protocol.BLEMessageResult, Code: cmd.Code, Nonce: p.Nonce, Accepted: true,
		Outcome: protocol.OutcomeExecuted, Counter: &c, At: protocol.FormatTime(m.at),
		Signature: protocol.Sign(m.key, protocol.BuildReceiptText(rc))})
	out := [][]byte{result}
	if cmd.Code == string(protocol.CmdReleaseHelmet) {
		m.counter++
		c := m.counter
		states := []protocol.BLEStateEntry{
			{Code: "MOUNT_LOCKED", Value: "0", OccurredAt: protocol.FormatTime(m.at)},
			{Code: "HELMET_MOUNTED", Value: "0", OccurredAt: protocol.FormatTime(m.at)},
		}
		rep := protocol.Report{UID: m.uid, Counter: c, SoftwareRevision: "2.1.0"}
		for _, s := range states {
			rep.Entries = append(rep.Entries, protocol.ReportEntry{Code: protocol.StateCode(s.Code), Value: s.Value, OccurredAt: m.at})
		}
		msg, _ := json.Marshal(protocol.BLEMessage{Type: protocol.BLEMessageStates, States: states, Counter: &c,
			SoftwareRevision: "2.1.0", Signature: protocol.Sign(m.key, protocol.BuildReportText(rep))})
		out = append(out, msg)
	}
	return out
}

type fakeLink struct {
	m      *signingMount
	frames chan []byte
	r      protocol.Reassembler
	once   sync.Once
}

func (l *fakeLink) ReadInfo(context.Context) ([]byte, error) {
	return json.Marshal(protocol.BLEInfo{UID: l.m.uid, SerialNumber: "SN-1", DevicePublicKey: l.m.publicKey()})
}

func (l *fakeLink) WriteFrame(_ context.Context, frame []byte) error {
	msg, done, err := l.r.Add(frame)
	if err != nil || !done {
		return err
	}
	if l.m.onCommand != nil {
		l.m.onCommand()
	}
	for _, n := range l.m.answer(msg) {
		for _, f := range protocol.SplitFrames(n, l.MTU()) {
			l.frames <- f
		}
	}
	return nil
}

func (l *fakeLink) Frames() <-chan []byte { return l.frames }
func (l *fakeLink) MTU() int              { return 247 }
func (l *fakeLink) Close() error {
	l.once.Do(func() { close(l.frames) })
	return nil
}

// fakeAPI answers what an action needs (discovery, userinfo, query) and
// takes reports and receipts, checking their signatures with the mount's
// key: only what the mount signed, unchanged, verifies.
type fakeAPI struct {
	t   *testing.T
	pub string // the device key pinned at the API
	// badSignaturesExpected: a refused signature is the test's point.
	badSignaturesExpected bool
	srv                   *httptest.Server

	mu      sync.Mutex
	got     []string // "r<counter>" and "s<counter>", in order of arrival
	fail503 map[int]bool
	posts   int
	// valid, when set, is the one token uploads are taken with; any
	// other gets 401.
	valid string
}

func newFakeAPI(t *testing.T, m *signingMount) *fakeAPI {
	a := &fakeAPI{t: t, pub: m.publicKey(), fail503: map[int]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"userinfo_endpoint": a.srv.URL + "/userinfo"})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"sub": "rider"})
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/query", func(w http.ResponseWriter, r *http.Request) {
		code := r.URL.Query().Get("code")
		now := time.Now()
		payload := protocol.BuildPayload(now, code, r.PathValue("uid"), nil, protocol.NewNonce())
		sig := strings.Repeat("0", 128)
		_ = json.NewEncoder(w).Encode([]protocol.BLECommand{{Code: code, Data: map[string]any{}, GeneratedAt: protocol.FormatTime(now),
			Payload: payload, SignedToken: &sig}})
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", func(w http.ResponseWriter, r *http.Request) {
		var body protocol.SignedStates
		if a.unauthorized(w, r) || a.refuse(w) || !a.decode(w, r, &body) {
			return
		}
		rep := protocol.Report{UID: r.PathValue("uid"), Counter: *body.Counter, SoftwareRevision: body.SoftwareRevision}
		for _, s := range body.States {
			at, _ := time.Parse(protocol.TimeLayout, s.OccurredAt)
			rep.Entries = append(rep.Entries, protocol.ReportEntry{Code: protocol.StateCode(s.Code), Value: s.Value, OccurredAt: at})
		}
		a.take(w, fmt.Sprintf("s%d", *body.Counter), protocol.BuildReportText(rep), body.Signature)
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/commands/receipts", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Receipts []protocol.UploadReceipt }
		if a.unauthorized(w, r) || a.refuse(w) || !a.decode(w, r, &body) {
			return
		}
		if len(body.Receipts) != 1 {
			http.Error(w, "one receipt a call", http.StatusBadRequest)
			return
		}
		rc := body.Receipts[0]
		at, _ := time.Parse(protocol.TimeLayout, rc.At)
		text := protocol.BuildReceiptText(protocol.Receipt{UID: r.PathValue("uid"), Nonce: rc.Nonce, Outcome: rc.Outcome,
			Reason: rc.Reason, Counter: rc.Counter, At: at})
		a.take(w, fmt.Sprintf("r%d", rc.Counter), text, rc.Signature)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// unauthorized answers 401 to an upload without the valid token.
func (a *fakeAPI) unauthorized(w http.ResponseWriter, r *http.Request) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.valid == "" || r.Header.Get("Access-Key") == a.valid {
		return false
	}
	http.Error(w, `{"status":401,"code":"UNAUTHENTICATED"}`, http.StatusUnauthorized)
	return true
}

// refuse answers 503 to the posts the test scripted so.
func (a *fakeAPI) refuse(w http.ResponseWriter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.posts++
	if a.fail503[a.posts] {
		http.Error(w, `{"status":503,"code":"UNAVAILABLE"}`, http.StatusServiceUnavailable)
		return true
	}
	return false
}

func (a *fakeAPI) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func (a *fakeAPI) take(w http.ResponseWriter, item, text, signature string) {
	if !protocol.Verify(a.pub, text, signature) {
		if !a.badSignaturesExpected {
			a.t.Errorf("%s: the signature does not verify: the SDK changed what the mount signed", item)
		}
		http.Error(w, `{"status":400,"code":"INVALID_SIGNATURE"}`, http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	a.got = append(a.got, item)
	a.mu.Unlock()
	_, _ = io.WriteString(w, `{"accepted":1,"duplicates":0}`)
}

func (a *fakeAPI) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// proxy carries TCP to the API until the network is cut: then it closes
// every connection, and those that come later at once.
type proxy struct {
	ln    net.Listener
	to    string
	cut   atomic.Bool
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newProxy(t *testing.T, to string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, to: to, conns: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.setCut(true) })
	return p
}

func (p *proxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.cut.Load() {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (p *proxy) setCut(cut bool) {
	p.cut.Store(cut)
	if !cut {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func riderToken(iss, uid string) string {
	claims, _ := json.Marshal(map[string]any{"iss": iss, "exp": time.Now().Add(time.Hour).Unix(),
		"scope": "openid sub urn:test:iam:org:project:id:p:aud role:restricted mount:" + uid})
	return "e30." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"
}

// A phone loses the network while it talks to the mount: the mount's
// receipts and reports wait in the queue, across a restart of the app, and
// reach the API once it answers again: each exactly once, oldest first,
// also when the API fails one of them on the way.
func TestUploadsOutliveTheNetworkAndTheApp(t *testing.T) {
	const uid = "M-0001"
	mount := newSigningMount(uid)
	api := newFakeAPI(t, mount)
	network := newProxy(t, api.srv.Listener.Addr().String())
	dir := t.TempDir()
	open := func() *sdk.Client {
		c, err := sdk.New(sdk.Config{BaseURL: network.url() + "/api/v1", Token: riderToken(api.srv.URL, uid), Radio: mount,
			QueueDir: dir, RetryMin: time.Hour, UploadWait: 5 * time.Second,
			HTTPClient: &http.Client{Timeout: 5 * time.Second},
			Logger:     slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Connect(context.Background(), uid); err != nil {
			t.Fatal(err)
		}
		return c
	}
	release := func(c *sdk.Client, wantPending int) {
		t.Helper()
		out, err := c.ReleaseHelmet(context.Background(), uid)
		if err != nil || out.Pending != wantPending {
			t.Fatalf("ReleaseHelmet = pending %d, %v; want %d pending, no error", out.Pending, err, wantPending)
		}
		if out.Result.Receipt == nil || out.Report == nil || out.Report.Signature == "" {
			t.Fatalf("the outcome lacks the mount's receipt or signed report: %+v", out)
		}
	}

	app := open()
	release(app, 0) // online: r1, s2 uploaded at once
	if got := api.received(); !slices.Equal(got, []string{"r1", "s2"}) {
		t.Fatalf("online: the API got %v", got)
	}

	// The network goes while the phone talks to the mount (after the
	// command came from the API), twice.
	mount.onCommand = func() { network.setCut(true) }
	release(app, 2) // r3, s4 queued
	network.setCut(false)
	release(app, 2) // r5, s6 queued behind them
	if s := app.Queued(); s.Items != 4 {
		t.Fatalf("queued %+v, want 4 items", s)
	}
	if err := app.Flush(context.Background()); err == nil {
		t.Fatal("Flush with the network cut = nil")
	}
	if err := app.Close(); err != nil {
		t.Fatal(err)
	}

	// The app starts again with the network back; the API fails the first
	// upload it is sent once (503): the flusher stops there and sends
	// nothing after it, and Flush goes on from it.
	mount.onCommand = nil
	api.mu.Lock()
	api.fail503[api.posts+1] = true
	api.mu.Unlock()
	network.setCut(false)
	app = open()
	defer app.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for app.Queued().Items > 0 {
		err := app.Flush(ctx)
		if err != nil && ctx.Err() != nil {
			t.Fatalf("Flush: %v", err)
		}
	}
	release(app, 0) // r7, s8: after the queue
	want := []string{"r1", "s2", "r3", "s4", "r5", "s6", "r7", "s8"}
	if got := api.received(); !slices.Equal(got, want) {
		t.Fatalf("the API got %v, want each exactly once, oldest first: %v", got, want)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.posts != len(want)+1 {
		t.Fatalf("the API was sent %d uploads, want %d (each once, and the one it failed once more)", api.posts, len(want)+1)
	}
}

// The association sends the device key the mount's info gives.
func TestAssociationRequestCarriesTheDeviceKey(t *testing.T) {
	key := strings.Repeat("ab", 32)
	body := sdk.AssociationRequest(protocol.BLEInfo{UID: "M-1", SerialNumber: "SN", DevicePublicKey: key})
	if body["devicePublicKey"] != key || body["serialNumber"] != "SN" {
		t.Fatalf("body = %v", body)
	}
	if _, ok := sdk.AssociationRequest(protocol.BLEInfo{UID: "M-1"})["devicePublicKey"]; ok {
		t.Fatal("a mount without a device key got one in the request")
	}
}

// A second client cannot open a queue directory in use.
func TestQueueDirInUse(t *testing.T) {
	dir := t.TempDir()
	cfg := sdk.Config{BaseURL: "http://127.0.0.1:1/api/v1", Token: "t", Radio: newSigningMount("M-1"), QueueDir: dir}
	a, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.New(cfg); !errors.Is(err, sdk.ErrQueueInUse) {
		t.Fatalf("second client: %v, want ErrQueueInUse", err)
	}
	_ = a.Close()
	b, err := sdk.New(cfg)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	_ = b.Close()
}

// An upload the API refuses (4xx) is dropped, said on the engine stream and
// in the action's error, and never sent again; what follows it goes on.
func TestRefusedUploadIsDroppedAndSaid(t *testing.T) {
	const uid = "M-0002"
	mount := newSigningMount(uid)
	api := newFakeAPI(t, mount)
	api.badSignaturesExpected = true
	c, err := sdk.New(sdk.Config{BaseURL: api.srv.URL + "/api/v1", Token: riderToken(api.srv.URL, uid), Radio: mount,
		QueueDir: t.TempDir(), RetryMin: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Connect(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	events := c.EngineEvents()

	// The mount signs with a key the API did not pin: every upload is
	// refused 400.
	good := mount.key
	_, mount.key, _ = ed25519.GenerateKey(nil)
	out, err := c.ReleaseHelmet(context.Background(), uid)
	var refused *sdk.UploadError
	if !errors.As(err, &refused) || out.Pending != 0 || !out.Result.Accepted {
		t.Fatalf("ReleaseHelmet = %+v, %v; want the refusal in the error, nothing pending", out, err)
	}
	drops := 0
	for len(events) > 0 {
		if e, ok := (<-events).(sdk.ErrorEvent); ok && errors.As(e.Err, &refused) {
			drops++
		}
	}
	if drops != 2 {
		t.Fatalf("%d refusals on the engine stream, want 2 (receipt and report)", drops)
	}
	if s := c.Queued(); s.Items != 0 {
		t.Fatalf("refused items stayed queued: %+v", s)
	}
	// Nothing is sent again; the next action's uploads go through.
	mount.key = good
	api.mu.Lock()
	posts := api.posts
	api.mu.Unlock()
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err = c.ReleaseHelmet(context.Background(), uid)
	if err != nil || out.Pending != 0 {
		t.Fatalf("ReleaseHelmet = %+v, %v", out, err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	if api.posts != posts+2 || len(api.got) != 2 {
		t.Fatalf("after the refusals the API was sent %d more uploads and took %v; want 2, the new ones", api.posts-posts, api.got)
	}
}

// switchingToken is a token source whose token the test replaces, as an
// app's source renews it.
type switchingToken struct {
	mu    sync.Mutex
	token string
	calls int
}

func (s *switchingToken) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	return &oauth2.Token{AccessToken: s.token}, nil
}

func (s *switchingToken) set(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.token = token
}

// With a TokenSource, a Client outlives its token: uploads the API refuses
// with 401 wait in the queue, and go with the source's next token.
func TestTokenSourceOutlivesATokenWithItsQueue(t *testing.T) {
	const uid = "M-0003"
	mount := newSigningMount(uid)
	api := newFakeAPI(t, mount)
	first := riderToken(api.srv.URL, uid)
	second := strings.TrimSuffix(first, "sig") + "renewed"
	api.valid = first
	src := &switchingToken{token: first}
	if _, err := sdk.New(sdk.Config{BaseURL: api.srv.URL + "/api/v1", Token: first, TokenSource: src, Radio: mount}); err == nil {
		t.Fatal("New took both Token and TokenSource")
	}
	c, err := sdk.New(sdk.Config{BaseURL: api.srv.URL + "/api/v1", TokenSource: src, Radio: mount,
		QueueDir: t.TempDir(), RetryMin: time.Hour, UploadWait: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Connect(context.Background(), uid); err != nil {
		t.Fatal(err)
	}
	if out, err := c.ReleaseHelmet(context.Background(), uid); err != nil || out.Pending != 0 {
		t.Fatalf("with the first token: %+v, %v", out, err)
	}
	// The API takes only the renewed token from here; the source still
	// gives the first: the uploads wait.
	api.mu.Lock()
	api.valid = second
	api.mu.Unlock()
	out, err := c.ReleaseHelmet(context.Background(), uid)
	if err != nil || out.Pending != 2 || !out.Result.Accepted {
		t.Fatalf("with a refused token: %+v, %v; want the receipt and report pending", out, err)
	}
	if q := c.Queued(); q.Items != 2 {
		t.Fatalf("queued %+v, want 2", q)
	}
	src.set(second)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("Flush with the renewed token: %v", err)
	}
	if q := c.Queued(); q.Items != 0 {
		t.Fatalf("queued after the renewal %+v", q)
	}
	if got := api.received(); len(got) != 4 {
		t.Fatalf("the API took %v; want 4 uploads", got)
	}
}
