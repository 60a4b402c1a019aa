package sdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// grantsAPI is the API side of offline access, faked with the owner key
// the simulated mount holds: signed commands, time tokens, revocation
// lists and acks. While status is set, every /api/v1 call answers it.
type grantsAPI struct {
	uid   string
	owner ed25519.PrivateKey
	srv   *httptest.Server

	status   atomic.Int32 // every /api/v1 call answers it
	idp      atomic.Int32 // the userinfo endpoint answers it
	mu       sync.Mutex
	received []protocol.UploadOfflineReceipt
	statuses []sdk.OfflineStatus
	revoked  []string
	version  int64
	grants   map[string]any // GET /grants/{id}: the answer; absent: 404
}

func newGrantsAPI(t *testing.T, uid string, owner ed25519.PrivateKey) *grantsAPI {
	a := &grantsAPI{uid: uid, owner: owner, version: 1}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"userinfo_endpoint": a.srv.URL + "/userinfo"})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) {
		if st := int(a.idp.Load()); st != 0 {
			w.WriteHeader(st)
			return
		}
		_, _ = io.WriteString(w, `{"sub":"phone"}`)
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/query", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		payload := protocol.BuildPayload(now, r.URL.Query().Get("code"), uid, nil, protocol.NewNonce())
		sig := protocol.Sign(owner, payload)
		_ = json.NewEncoder(w).Encode([]protocol.BLECommand{{Code: r.URL.Query().Get("code"), GeneratedAt: protocol.FormatTime(now),
			Data: map[string]any{"expiresAt": protocol.FormatTime(now.Add(5 * time.Minute))}, Payload: payload, SignedToken: &sig}})
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/time", func(w http.ResponseWriter, r *http.Request) {
		a.signed(w, protocol.BuildTimeText(uid, time.Now(), r.URL.Query().Get("nonce")))
	})
	mux.HandleFunc("GET /api/v1/mounts/{uid}/revocations", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		text := protocol.BuildRevocationsText(protocol.Revocations{UID: uid, Version: a.version, Epoch: 1, GrantIDs: a.revoked})
		a.mu.Unlock()
		a.signed(w, text)
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/offline-receipts", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Receipts []protocol.UploadOfflineReceipt
			Status   *sdk.OfflineStatus
		}
		if json.NewDecoder(r.Body).Decode(&body) != nil || body.Status == nil || len(body.Receipts) > 500 {
			http.Error(w, `{"status":400,"code":"VALIDATION_FAILED"}`, http.StatusBadRequest)
			return
		}
		nonces := make([]string, len(body.Receipts))
		for i, rc := range body.Receipts {
			nonces[i] = rc.Nonce
		}
		a.mu.Lock()
		a.received = append(a.received, body.Receipts...)
		a.statuses = append(a.statuses, *body.Status)
		a.mu.Unlock()
		text := protocol.BuildAckText(uid, nonces)
		_ = json.NewEncoder(w).Encode(map[string]any{"accepted": len(nonces), "duplicates": 0, "rejected": []any{},
			"ack": map[string]string{"text": text, "signature": protocol.Sign(owner, text)}})
	})
	mux.HandleFunc("GET /api/v1/grants/{id}", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		g, ok := a.grants[r.PathValue("id")]
		a.mu.Unlock()
		if !ok {
			http.Error(w, `{"status":404,"code":"GRANT_NOT_FOUND"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(g)
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{}`) })
	mux.HandleFunc("POST /api/v1/mounts/{uid}/commands/receipts", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{}`) })
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if st := int(a.status.Load()); st != 0 && strings.HasPrefix(r.URL.Path, "/api/v1/") {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(st)
			fmt.Fprintf(w, `{"status":%d,"code":"X","detail":"as the test says"}`, st)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *grantsAPI) signed(w http.ResponseWriter, text string) {
	_ = json.NewEncoder(w).Encode(protocol.SignedText{Text: text, Signature: protocol.Sign(a.owner, text)})
}

func (a *grantsAPI) got() ([]protocol.UploadOfflineReceipt, []sdk.OfflineStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]protocol.UploadOfflineReceipt(nil), a.received...), append([]sdk.OfflineStatus(nil), a.statuses...)
}

// cuttable is a phone's network: while cut, nothing gets through.
type cuttable struct{ cut *atomic.Bool }

func (c cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errors.New("network is unreachable")
	}
	return http.DefaultTransport.RoundTrip(r)
}

// grantPhone is an SDK client whose keeper holds a grant of the fixture's
// mount, signed with its owner key, for the client's own rider key.
func grantPhone(t *testing.T, f *syncFixture, api *grantsAPI, cut *atomic.Bool, queueDir string, keeper sdk.GrantKeeper) *sdk.Client {
	t.Helper()
	c, err := sdk.New(sdk.Config{BaseURL: api.srv.URL + "/api/v1", Token: riderToken(api.srv.URL, f.mount.UID()),
		Radio: f.air.Central(), HTTPClient: &http.Client{Transport: cuttable{cut}, Timeout: 5 * time.Second},
		QueueDir: queueDir, Keeper: keeper, RetryMin: time.Hour, UploadWait: 2 * time.Second, ConfirmTimeout: 3 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// putGrant signs a grant of the mount for riderKey and keeps it.
func putGrant(t *testing.T, keeper sdk.GrantKeeper, uid, riderKey string, owner ed25519.PrivateKey) sdk.StoredGrant {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	g := protocol.Grant{UID: uid, ID: protocol.NewGrantID(), RiderKey: riderKey, Rights: []string{"RELEASE_HELMET"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Epoch: 1}
	text := protocol.BuildGrantText(g)
	sg := sdk.StoredGrant{ID: g.ID, UID: uid, RiderKey: riderKey, Rights: g.Rights, NotBefore: g.NotBefore, NotAfter: g.NotAfter,
		Epoch: 1, Text: text, Signature: protocol.Sign(owner, text)}
	if err := keeper.PutGrant(sg); err != nil {
		t.Fatal(err)
	}
	return sg
}

// ReleaseHelmet uses the stored grant when the API does not answer: no
// network, a 5xx, a 401; never when it answers 403 or 404.
func TestReleaseFallsBackToAStoredGrant(t *testing.T) {
	cases := []struct {
		name     string
		network  bool // the phone has none
		status   int  // the API answers this
		idp      int  // the identity provider's userinfo answers this
		fallback bool
	}{
		{name: "identity provider 401", idp: http.StatusUnauthorized, fallback: true},
		{name: "identity provider 503", idp: http.StatusServiceUnavailable, fallback: true},
		{name: "identity provider 403", idp: http.StatusForbidden},
		{name: "network error", network: true, fallback: true},
		{name: "500", status: http.StatusInternalServerError, fallback: true},
		{name: "503", status: http.StatusServiceUnavailable, fallback: true},
		{name: "401", status: http.StatusUnauthorized, fallback: true},
		{name: "403", status: http.StatusForbidden},
		{name: "404", status: http.StatusNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newSyncFixture(t)
			api := newGrantsAPI(t, f.mount.UID(), f.api.owner)
			var cut atomic.Bool
			keeper, err := sdk.NewFileKeeper(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			c := grantPhone(t, f, api, &cut, "", keeper)
			riderKey, err := c.RiderKey()
			if err != nil {
				t.Fatal(err)
			}
			g := putGrant(t, keeper, f.mount.UID(), riderKey, f.api.owner)
			if _, err := c.Connect(context.Background(), f.mount.UID()); err != nil {
				t.Fatal(err)
			}
			cut.Store(tc.network)
			api.status.Store(int32(tc.status))
			api.idp.Store(int32(tc.idp))

			out, err := c.ReleaseHelmet(context.Background(), f.mount.UID())
			log := f.mount.Offline().Log
			if !tc.fallback {
				if out.Offline || client.StatusOf(err) != max(tc.status, tc.idp) || !f.mount.Status().HelmetMounted || len(log) != 0 {
					t.Fatalf("ReleaseHelmet = %+v, %v; helmet mounted %v, log %d: want the answer %d, nothing on the mount",
						out, err, f.mount.Status().HelmetMounted, len(log), max(tc.status, tc.idp))
				}
				return
			}
			if err != nil || !out.Offline || !out.Result.Accepted || out.Result.Code != "RELEASE_HELMET" {
				t.Fatalf("ReleaseHelmet = %+v, %v; want released offline", out, err)
			}
			// The receipt waits in the mount's log, or the API (answering
			// uploads while its identity provider does not) acknowledged it.
			uploaded, _ := api.got()
			if len(log) == 0 && len(uploaded) == 1 {
				log = []protocol.BLEMessage{{GrantID: uploaded[0].GrantID, Outcome: uploaded[0].Outcome, Nonce: uploaded[0].Nonce}}
			}
			if f.mount.Status().HelmetMounted || len(log) != 1 || log[0].GrantID != g.ID || log[0].Outcome != protocol.OutcomeExecuted ||
				log[0].Nonce != out.Result.Nonce {
				t.Fatalf("mount: helmet mounted %v, log %+v, uploaded %+v; want released, one EXECUTED receipt of grant %s",
					f.mount.Status().HelmetMounted, log, uploaded, g.ID)
			}
		})
	}
}

// Offline receipts the API could not take wait in the queue across a
// restart of the app; once they are uploaded, their ack waits for the
// next connection to the mount, which then drops them from its log.
func TestOfflineReceiptsOutliveTheApp(t *testing.T) {
	f := newSyncFixture(t)
	api := newGrantsAPI(t, f.mount.UID(), f.api.owner)
	var cut atomic.Bool
	queueDir := t.TempDir()
	keeper, _ := sdk.NewFileKeeper(t.TempDir())
	c := grantPhone(t, f, api, &cut, queueDir, keeper)
	riderKey, _ := c.RiderKey()
	putGrant(t, keeper, f.mount.UID(), riderKey, f.api.owner)
	cut.Store(true)
	if _, err := c.Connect(context.Background(), f.mount.UID()); err != nil {
		t.Fatal(err)
	}
	out, err := c.ReleaseHelmet(context.Background(), f.mount.UID())
	if err != nil || !out.Offline {
		t.Fatalf("ReleaseHelmet = %+v, %v", out, err)
	}
	if q := c.Queued(); q.Items < 1 {
		t.Fatalf("queue %+v: want the offline receipt waiting", q)
	}
	_ = c.Close()

	cut.Store(false)
	c = grantPhone(t, f, api, &cut, queueDir, keeper) // the app again, away from the mount
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	received, statuses := api.got()
	if len(received) != 1 || received[0].Nonce != out.Result.Nonce || len(statuses) != 1 || statuses[0].LogPending != 1 {
		t.Fatalf("API got %+v with %+v; want the one receipt, logPending 1", received, statuses)
	}
	if n := len(f.mount.Offline().Log); n != 1 {
		t.Fatalf("the mount's log holds %d before the phone comes back, want 1", n)
	}
	cut.Store(true) // back at the mount, without network: the ack was kept
	if _, err := c.Connect(context.Background(), f.mount.UID()); err != nil {
		t.Fatal(err)
	}
	if n := len(f.mount.Offline().Log); n != 0 {
		t.Fatalf("the mount's log holds %d after the ack, want 0", n)
	}
}

// Another phone, online, carries a mount's log it did not make, and the
// mount drops what the API acknowledged.
func TestUploadPendingCarriesTheLog(t *testing.T) {
	f := newSyncFixture(t)
	api := newGrantsAPI(t, f.mount.UID(), f.api.owner)
	var cut, online atomic.Bool
	cut.Store(true)
	keeper, _ := sdk.NewFileKeeper(t.TempDir())
	rider := grantPhone(t, f, api, &cut, "", keeper)
	riderKey, _ := rider.RiderKey()
	putGrant(t, keeper, f.mount.UID(), riderKey, f.api.owner)
	if _, err := rider.Connect(context.Background(), f.mount.UID()); err != nil {
		t.Fatal(err)
	}
	if out, err := rider.ReleaseHelmet(context.Background(), f.mount.UID()); err != nil || !out.Offline {
		t.Fatalf("ReleaseHelmet = %+v, %v", out, err)
	}
	_ = rider.Disconnect(f.mount.UID())

	other := grantPhone(t, f, api, &online, "", nil)
	if _, err := other.Connect(context.Background(), f.mount.UID()); err != nil {
		t.Fatal(err)
	}
	n, err := other.UploadPending(context.Background(), f.mount.UID())
	if err != nil || n != 1 {
		t.Fatalf("UploadPending = %d, %v; want 1 acknowledged", n, err)
	}
	if received, _ := api.got(); len(received) != 1 || len(f.mount.Offline().Log) != 0 {
		t.Fatalf("API got %d receipts, the mount's log holds %d; want 1 and 0", len(received), len(f.mount.Offline().Log))
	}
	if _, err := rider.RiderKey(); err != nil {
		t.Fatal(err)
	}
	if _, err := other.RiderKey(); !errors.Is(err, sdk.ErrNoKeeper) {
		t.Fatalf("RiderKey without a keeper = %v, want ErrNoKeeper", err)
	}
}

// The file keeper keeps its files 0600 in a 0700 directory, the same
// rider key across openings, one grant per mount.
func TestFileKeeper(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "grants")
	k, err := sdk.NewFileKeeper(dir)
	if err != nil {
		t.Fatal(err)
	}
	key, err := k.RiderKey()
	if err != nil {
		t.Fatal(err)
	}
	_, owner, _ := ed25519.GenerateKey(nil)
	pub, _ := protocol.RiderKeyHex(key.Public().(*ecdsa.PublicKey))
	first := putGrant(t, k, "M-1", pub, owner)
	second := putGrant(t, k, "M-1", pub, owner)
	other := putGrant(t, k, "M-2", pub, owner)
	if err := k.PutRevocations(sdk.StoredRevocations{UID: "M-1", Version: 2, Epoch: 1, Text: "t", Signature: "s"}); err != nil {
		t.Fatal(err)
	}

	again, err := sdk.NewFileKeeper(dir)
	if err != nil {
		t.Fatal(err)
	}
	key2, _ := again.RiderKey()
	pub2, _ := protocol.RiderKeyHex(key2.Public().(*ecdsa.PublicKey))
	grants, _ := again.Grants()
	if pub2 != pub || len(grants) != 2 || grants[0].ID != second.ID || grants[1].ID != other.ID {
		t.Fatalf("reopened: key %v, grants %+v; want the same key and grants %s, %s (not %s)", pub2 == pub, grants, second.ID, other.ID, first.ID)
	}
	if err := again.DeleteGrant(other.ID); err != nil {
		t.Fatal(err)
	}
	if grants, _ := again.Grants(); len(grants) != 1 {
		t.Fatalf("after DeleteGrant: %+v", grants)
	}
	info, err := os.Stat(dir)
	if err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, %v; want 0700", info.Mode().Perm(), err)
	}
	files := 0
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		files++
		info, err := d.Info()
		if err == nil && info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", d.Name(), info.Mode().Perm())
		}
		return err
	})
	if err != nil || files != 3 {
		t.Fatalf("%d files (%v), want the key, the grants and the lists", files, err)
	}
}

// A keeper keeps the highest (epoch, version) list of a mount.
func TestFileKeeperKeepsTheNewestList(t *testing.T) {
	cases := []struct {
		name           string
		version, epoch int64
		kept           bool
	}{
		{"older version", 4, 2, false},
		{"same", 5, 2, false},
		{"newer version", 6, 2, true},
		{"older epoch, higher version", 9, 1, false},
		{"newer epoch, lower version", 3, 3, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k, err := sdk.NewFileKeeper(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			held := sdk.StoredRevocations{UID: "M-1", Version: 5, Epoch: 2, Text: "held", Signature: "s"}
			if err := k.PutRevocations(held); err != nil {
				t.Fatal(err)
			}
			if err := k.PutRevocations(sdk.StoredRevocations{UID: "M-1", Version: tc.version, Epoch: tc.epoch, Text: "new", Signature: "s"}); err != nil {
				t.Fatal(err)
			}
			got, ok, err := k.Revocations("M-1")
			if err != nil || !ok || (got.Text == "new") != tc.kept {
				t.Fatalf("held %+v (%v, %v); kept the new one: want %v", got, ok, err, tc.kept)
			}
			if _, ok, _ := k.Revocations("M-2"); ok {
				t.Fatal("a list for a mount never given")
			}
		})
	}
}

// RefreshGrants keeps what the API answers for each grant held: a text
// signed again replaces the one held; a revoked, expired or unknown grant
// goes; the list of each mount kept comes along.
func TestRefreshGrants(t *testing.T) {
	f := newSyncFixture(t)
	api := newGrantsAPI(t, f.mount.UID(), f.api.owner)
	var online atomic.Bool
	keeper, _ := sdk.NewFileKeeper(t.TempDir())
	c := grantPhone(t, f, api, &online, "", keeper)
	riderKey, _ := c.RiderKey()
	answer := func(g sdk.StoredGrant, text string, revoked bool, notAfter time.Time) map[string]any {
		out := map[string]any{"id": g.ID, "uid": g.UID, "riderKey": g.RiderKey, "rights": g.Rights, "notBefore": g.NotBefore,
			"notAfter": notAfter, "epoch": g.Epoch, "text": text, "signature": protocol.Sign(f.api.owner, text), "revokedAt": nil}
		if revoked {
			out["revokedAt"] = time.Now()
		}
		return out
	}
	kept := putGrant(t, keeper, "M-0001", riderKey, f.api.owner)
	resigned := protocol.Grant{UID: kept.UID, ID: kept.ID, RiderKey: riderKey, Rights: kept.Rights, NotBefore: kept.NotBefore,
		NotAfter: kept.NotAfter, Epoch: 7}
	newText := protocol.BuildGrantText(resigned)
	revoked := putGrant(t, keeper, "M-0002", riderKey, f.api.owner)
	expired := putGrant(t, keeper, "M-0003", riderKey, f.api.owner)
	putGrant(t, keeper, "M-0004", riderKey, f.api.owner) // unknown to the API
	api.grants = map[string]any{
		kept.ID:    answer(kept, newText, false, kept.NotAfter),
		revoked.ID: answer(revoked, revoked.Text, true, revoked.NotAfter),
		expired.ID: answer(expired, expired.Text, false, time.Unix(1, 0)),
	}
	if err := c.RefreshGrants(context.Background()); err != nil {
		t.Fatalf("RefreshGrants: %v", err)
	}
	held, _ := keeper.Grants()
	if len(held) != 1 || held[0].ID != kept.ID || held[0].Text != newText || held[0].Epoch != 7 {
		t.Fatalf("held after RefreshGrants: %+v; want %s alone, signed again at epoch 7", held, kept.ID)
	}
	if list, ok, _ := keeper.Revocations("M-0001"); !ok || list.Version != 1 {
		t.Fatalf("the list of M-0001: %+v %v", list, ok)
	}
}
