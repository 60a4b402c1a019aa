package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// TestFirmwareInstall: mountctl firmware install streams the image to a
// simulated mount on a served air, resumes after the link is cut midway,
// and uploads the receipt and the report on the new revision.
func TestFirmwareInstall(t *testing.T) {
	const uid, mac = "M-1", "02:00:00:00:00:01"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	pub, owner, _ := ed25519.GenerateKey(nil)
	m := simmount.New(simmount.Config{UID: uid, MACAddress: mac})
	key := hex.EncodeToString(pub)
	now := time.Now()
	assoc, _ := json.Marshal(protocol.BLECommand{Code: string(protocol.CmdAssociateOwner), GeneratedAt: protocol.FormatTime(now),
		Data:    map[string]any{"accountId": "acc-1", "publicKey": key},
		Payload: protocol.BuildPayload(now, string(protocol.CmdAssociateOwner), uid, map[string]string{"accountId": "acc-1", "publicKey": key}, protocol.NewNonce())})
	if res := m.Handle(assoc); !res.Accepted {
		t.Fatalf("association: %+v", res)
	}
	air := sim.NewAir(sim.Config{AdvertisingInterval: 5 * time.Millisecond})
	if err := air.Register(m); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "air.sock")
	ln, err := sim.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = sim.Serve(ctx, air, ln) }()

	image := make([]byte, 40_000)
	for i := range image {
		image[i] = byte(i * 13)
	}
	sum := sha256.Sum256(image)
	params := map[string]string{"revision": "2.0.0", "sha256": hex.EncodeToString(sum[:]), "size": strconv.Itoa(len(image))}

	var mu sync.Mutex
	var receipts []protocol.UploadReceipt
	var revisions []string
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"userinfo_endpoint": srv.URL + "/userinfo"})
	})
	mux.HandleFunc("GET /userinfo", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"sub":"owner"}`) })
	mux.HandleFunc("GET /api/v1/mounts/{uid}/query", func(w http.ResponseWriter, r *http.Request) {
		at, nonce := time.Now(), protocol.NewNonce()
		payload := protocol.BuildPayload(at, "INSTALL_FIRMWARE", uid, params, nonce)
		sig := protocol.Sign(owner, payload)
		_ = json.NewEncoder(w).Encode([]protocol.BLECommand{{Code: "INSTALL_FIRMWARE", Data: map[string]any{}, GeneratedAt: protocol.FormatTime(at),
			Payload: payload, SignedToken: &sig}})
	})
	mux.HandleFunc("GET /api/v1/firmware/download", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"downloadLink":"/api/v1/firmware/blobs/img","expiresAt":"2030-01-01T00:00:00.000Z"}`)
	})
	mux.HandleFunc("GET /api/v1/firmware/blobs/img", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(image) })
	mux.HandleFunc("POST /api/v1/mounts/{uid}/commands/receipts", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Receipts []protocol.UploadReceipt }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		receipts = append(receipts, body.Receipts...)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"accepted":1,"duplicates":0}`)
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", func(w http.ResponseWriter, r *http.Request) {
		var body protocol.SignedStates
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		revisions = append(revisions, body.SoftwareRevision)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"accepted":4,"duplicates":0}`)
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	claims, _ := json.Marshal(map[string]any{"iss": srv.URL, "exp": time.Now().Add(time.Hour).Unix(),
		"scope": "openid sub urn:mountd:iam:org:project:id:mountd:aud"})
	token := "e30." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"

	// The link is cut once, a quarter of the way.
	dropped := make(chan int, 1)
	go func() {
		for ctx.Err() == nil {
			var st protocol.FirmwareStatus
			_ = json.Unmarshal(m.FirmwareStatus(), &st)
			if st.Offset > 10_000 {
				dropped <- air.Drop(mac)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()

	var stdout, stderr bytes.Buffer
	err = newCommand(&stdout, &stderr).Run(ctx, []string{"mountctl", "--api", srv.URL, "--token", token, "--ble", "sim://" + sock,
		"--json", "firmware", "install", uid, "--revision", "2.0.0", "--restart-wait", "10s"})
	if err != nil {
		t.Fatalf("firmware install: %v (%s)", err, stderr.String())
	}
	var inst sdk.Installation
	if err := json.Unmarshal(stdout.Bytes(), &inst); err != nil {
		t.Fatalf("output %q: %v", stdout.String(), err)
	}
	select {
	case n := <-dropped:
		t.Logf("cut %d links, %d reconnects", n, inst.Reconnects)
		if n == 1 && inst.Reconnects < 1 {
			t.Errorf("the link was cut, but %d reconnects", inst.Reconnects)
		}
	default: // the transfer was done before the cut: nothing to resume
	}
	if !inst.Result.Accepted || inst.Report == nil || inst.Report.SoftwareRevision != "2.0.0" {
		t.Fatalf("installation %+v", inst)
	}
	if got := m.Status(); got.SoftwareRevision != "2.0.0" || got.Restarts != 1 {
		t.Fatalf("mount %+v", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(receipts) != 1 || receipts[0].Outcome != protocol.OutcomeExecuted || len(revisions) != 1 || revisions[0] != "2.0.0" {
		t.Fatalf("uploaded receipts %+v, reports on %v", receipts, revisions)
	}
}

// TestFirmwareInstallProgress: an install's bar goes back when the mount
// asks to resume from an earlier offset, and names what it does.
func TestFirmwareInstallProgress(t *testing.T) {
	var out bytes.Buffer
	clock := time.Unix(1_700_000_000, 0)
	p := &progress{w: &out, size: 1000, now: func() time.Time { return clock }, label: "installing"}
	p.Set(100)
	clock = clock.Add(2 * time.Second)
	p.Set(600)
	p.Set(300)
	if p.done != 300 || !bytes.Contains(out.Bytes(), []byte("installing")) {
		t.Fatalf("done %d, bar %q", p.done, out.String())
	}
}
