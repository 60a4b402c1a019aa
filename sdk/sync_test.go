package sdk_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// offer is a command the fake jobs API offers: signed afresh at every
// fetch, unless again repeats the first offer's exact command (a replay).
type offer struct {
	code   string
	params map[string]string
	jobID  string
	again  bool
}

// jobsAPI is the API side of Sync, faked: it signs pending commands with
// the owner key the simulated mount was associated with, and takes
// receipts and reports, checking the mount's signatures.
type jobsAPI struct {
	t      *testing.T
	uid    string
	owner  ed25519.PrivateKey
	device string // the mount's device key
	srv    *httptest.Server

	mu       sync.Mutex
	offers   []offer
	first    json.RawMessage
	receipts []protocol.UploadReceipt
	reports  int
	down     bool // receipts and reports answer 503
}

func newJobsAPI(t *testing.T, m *simmount.Mount, owner ed25519.PrivateKey) *jobsAPI {
	a := &jobsAPI{t: t, uid: m.UID(), owner: owner, device: m.Status().DevicePublicKey}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"userinfo_endpoint": a.srv.URL + "/userinfo"})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"sub":"phone"}`)
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/pending-commands", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		defer a.mu.Unlock()
		cmds := make([]json.RawMessage, 0, len(a.offers))
		for _, o := range a.offers {
			if o.again && a.first != nil {
				cmds = append(cmds, a.first)
				continue
			}
			raw := a.sign(o)
			if a.first == nil {
				a.first = raw
			}
			cmds = append(cmds, raw)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"commands": cmds})
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/commands/receipts", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Receipts []protocol.UploadReceipt }
		if a.unavailable(w) || json.NewDecoder(r.Body).Decode(&body) != nil {
			return
		}
		for _, rc := range body.Receipts {
			at, _ := time.Parse(protocol.TimeLayout, rc.At)
			text := protocol.BuildReceiptText(protocol.Receipt{UID: a.uid, Nonce: rc.Nonce, Outcome: rc.Outcome, Reason: rc.Reason, Counter: rc.Counter, At: at})
			if !protocol.Verify(a.device, text, rc.Signature) {
				t.Errorf("receipt %d: the signature does not verify", rc.Counter)
			}
		}
		a.mu.Lock()
		a.receipts = append(a.receipts, body.Receipts...)
		a.mu.Unlock()
		fmt.Fprintf(w, `{"accepted":%d,"duplicates":0}`, len(body.Receipts))
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", func(w http.ResponseWriter, r *http.Request) {
		if a.unavailable(w) {
			return
		}
		a.mu.Lock()
		a.reports++
		a.mu.Unlock()
		_, _ = io.WriteString(w, `{"accepted":2,"duplicates":0}`)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// sign makes the REST Command of an offer, signed as docs/api.md, "Commands",
// says.
func (a *jobsAPI) sign(o offer) json.RawMessage {
	now := time.Now()
	nonce := protocol.NewNonce()
	payload := protocol.BuildPayload(now, o.code, a.uid, o.params, nonce)
	sig := protocol.Sign(a.owner, payload)
	data := map[string]any{"expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))}
	for k, v := range o.params {
		data[k] = v
	}
	raw, _ := json.Marshal(map[string]any{"id": nonce, "jobId": o.jobID, "code": o.code, "data": data,
		"generatedAt": protocol.FormatTime(now), "payload": payload, "signedToken": sig, "status": "ISSUED"})
	return raw
}

func (a *jobsAPI) unavailable(w http.ResponseWriter) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		http.Error(w, `{"status":503,"code":"UNAVAILABLE"}`, http.StatusServiceUnavailable)
	}
	return a.down
}

func (a *jobsAPI) got() (receipts []protocol.UploadReceipt, reports int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]protocol.UploadReceipt(nil), a.receipts...), a.reports
}

// syncFixture is one simulated mount, associated, on the air, and the fake
// API that holds its owner key.
type syncFixture struct {
	mount *simmount.Mount
	air   *sim.Air
	api   *jobsAPI
}

func newSyncFixture(t *testing.T, offers ...offer) *syncFixture {
	const uid = "M-0001"
	pub, owner, _ := ed25519.GenerateKey(nil)
	m := simmount.New(simmount.Config{UID: uid, MACAddress: "02:00:00:00:00:01"})
	key := hex.EncodeToString(pub)
	now := time.Now()
	assoc, _ := json.Marshal(protocol.BLECommand{Code: string(protocol.CmdAssociateOwner), GeneratedAt: protocol.FormatTime(now),
		Data:    map[string]any{"accountId": "acc-1", "publicKey": key, "expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))},
		Payload: protocol.BuildPayload(now, string(protocol.CmdAssociateOwner), uid, map[string]string{"accountId": "acc-1", "publicKey": key}, protocol.NewNonce())})
	if res := m.Handle(assoc); !res.Accepted {
		t.Fatalf("ASSOCIATE_OWNER refused: %s", res.Reason)
	}
	air := sim.NewAir(sim.Config{AdvertisingInterval: 5 * time.Millisecond})
	if err := air.Register(m); err != nil {
		t.Fatal(err)
	}
	f := &syncFixture{mount: m, air: air, api: newJobsAPI(t, m, owner)}
	f.api.offers = offers
	return f
}

// phone is a connected SDK client on the fixture's air (radio, when set,
// wraps the air's central).
func (f *syncFixture) phone(t *testing.T, queueDir string, radio func(sdk.Radio) sdk.Radio) *sdk.Client {
	var r sdk.Radio = f.air.Central()
	if radio != nil {
		r = radio(r)
	}
	c, err := sdk.New(sdk.Config{BaseURL: f.api.srv.URL + "/api/v1", Token: riderToken(f.api.srv.URL, f.mount.UID()), Radio: r,
		QueueDir: queueDir, RetryMin: time.Hour, UploadWait: 2 * time.Second, ConfirmTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Connect(context.Background(), f.mount.UID()); err != nil {
		t.Fatal(err)
	}
	return c
}

// A phone near a mount runs its pending commands one by one: what the
// mount executes and what it refuses (bad parameters, a replayed command)
// is in the summary, and every receipt, with the report that follows a
// release, reaches the API signed as the mount signed it.
func TestSyncRunsPendingCommands(t *testing.T) {
	f := newSyncFixture(t,
		offer{code: "CONFIGURE_ALARM", params: map[string]string{"alarmMode": "ON", "alarmSensitivity": "HIGH", "alarmVolume": "LOW"}, jobID: "job-1"},
		offer{code: "RELEASE_HELMET", jobID: "job-2"},
		offer{code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "SIDEWAYS"}, jobID: "job-3"},
		offer{again: true, jobID: "job-1"},
	)
	c := f.phone(t, "", nil)
	sum, err := c.Sync(context.Background(), f.mount.UID())
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	want := []struct {
		job     string
		outcome sdk.SyncOutcome
		reason  string
	}{{"job-1", sdk.SyncExecuted, ""}, {"job-2", sdk.SyncExecuted, ""}, {"job-3", sdk.SyncRefused, "bad parameters"}, {"job-1", sdk.SyncRefused, "replayed nonce"}}
	if sum.Offered != 4 || len(sum.Commands) != len(want) {
		t.Fatalf("summary %+v, want 4 offered and run", sum)
	}
	for i, w := range want {
		got := sum.Commands[i]
		if got.JobID != w.job || got.Outcome != w.outcome || got.Reason != w.reason || len(got.ID) != 32 {
			t.Errorf("command %d: %+v, want job %s %s %q", i, got, w.job, w.outcome, w.reason)
		}
	}
	if sum.Commands[0].ID != sum.Commands[3].ID {
		t.Errorf("the replay has id %s, the original %s", sum.Commands[3].ID, sum.Commands[0].ID)
	}
	receipts, reports := f.api.got()
	if len(receipts) != 4 || reports != 1 || sum.Pending != 0 {
		t.Fatalf("API got %d receipts and %d reports, %d pending; want 4, 1, 0", len(receipts), reports, sum.Pending)
	}
	if st := f.mount.Status(); st.HelmetMounted || st.Settings.AlarmMode != "ON" {
		t.Errorf("mount after Sync: %+v", st)
	}
	if sum.Count(sdk.SyncExecuted) != 2 || sum.Count(sdk.SyncRefused) != 2 {
		t.Errorf("counts: %d executed, %d refused", sum.Count(sdk.SyncExecuted), sum.Count(sdk.SyncRefused))
	}
}

// A server offering far more than a job system would (1,000 commands)
// gets MaxSyncCommands run; the rest is left to the next phone.
func TestSyncIsBounded(t *testing.T) {
	offers := make([]offer, 1000)
	for i := range offers {
		offers[i] = offer{code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "NORMAL"}, jobID: fmt.Sprintf("job-%d", i)}
	}
	f := newSyncFixture(t, offers...)
	c := f.phone(t, "", nil)
	sum, err := c.Sync(context.Background(), f.mount.UID())
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	receipts, _ := f.api.got()
	if sum.Offered != 1000 || len(sum.Commands) != sdk.MaxSyncCommands || sum.Count(sdk.SyncExecuted) != sdk.MaxSyncCommands || len(receipts) != sdk.MaxSyncCommands {
		t.Fatalf("offered %d, ran %d (%d executed), %d receipts; want 1000 offered and %d of each",
			sum.Offered, len(sum.Commands), sum.Count(sdk.SyncExecuted), len(receipts), sdk.MaxSyncCommands)
	}
}

// cuttingRadio loses the link as the after+1-th command is written: the
// mount never gets it.
type cuttingRadio struct {
	sdk.Radio
	after int
}

func (r cuttingRadio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := r.Radio.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return &cuttingLink{BLELink: l, after: r.after}, nil
}

type cuttingLink struct {
	sdk.BLELink
	after, written int
	r              protocol.Reassembler
}

func (l *cuttingLink) WriteFrame(ctx context.Context, frame []byte) error {
	if _, done, _ := l.r.Add(frame); done {
		l.written++
		if l.written > l.after {
			return l.BLELink.Close()
		}
	}
	return l.BLELink.WriteFrame(ctx, frame)
}

// The link is lost at the third of five commands: Sync stops with
// ErrNotConnected, and what the mount said about the first two still
// reaches the API.
func TestSyncStopsWhenTheLinkIsLost(t *testing.T) {
	offers := make([]offer, 5)
	for i := range offers {
		offers[i] = offer{code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "LEARN"}, jobID: fmt.Sprintf("job-%d", i)}
	}
	f := newSyncFixture(t, offers...)
	c := f.phone(t, "", func(r sdk.Radio) sdk.Radio { return cuttingRadio{Radio: r, after: 2} })
	sum, err := c.Sync(context.Background(), f.mount.UID())
	if !errors.Is(err, sdk.ErrNotConnected) {
		t.Fatalf("Sync: %v, want ErrNotConnected", err)
	}
	if sum.Offered != 5 || len(sum.Commands) != 3 || sum.Count(sdk.SyncExecuted) != 2 || sum.Commands[2].Outcome != sdk.SyncNoAnswer {
		t.Fatalf("summary %+v: want 5 offered, 2 executed, the third without answer", sum)
	}
	if receipts, _ := f.api.got(); len(receipts) != 2 {
		t.Fatalf("API got %d receipts, want 2", len(receipts))
	}
}

// Offline, the receipts wait in the queue (Pending) and reach the API
// when it answers again.
func TestSyncQueuesReceiptsOffline(t *testing.T) {
	f := newSyncFixture(t,
		offer{code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "DISABLED"}, jobID: "job-1"},
		offer{code: "RELEASE_HELMET", jobID: "job-2"},
	)
	c := f.phone(t, t.TempDir(), nil)
	f.api.mu.Lock()
	f.api.down = true
	f.api.mu.Unlock()
	sum, err := c.Sync(context.Background(), f.mount.UID())
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if sum.Count(sdk.SyncExecuted) != 2 || sum.Pending != 3 {
		t.Fatalf("summary %+v: want 2 executed, 3 uploads pending (2 receipts, 1 report)", sum)
	}
	f.api.mu.Lock()
	f.api.down = false
	f.api.mu.Unlock()
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if receipts, reports := f.api.got(); len(receipts) != 2 || reports != 1 || c.Queued().Items != 0 {
		t.Fatalf("after Flush: %d receipts, %d reports, %d queued", len(receipts), reports, c.Queued().Items)
	}
}
