package sdk_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// firmwareAPI adds the firmware side to the fake jobs API: /query for
// INSTALL_FIRMWARE (403 when restricted), the download link and its blob,
// and the revisions of the reports uploaded.
type firmwareAPI struct {
	*syncFixture
	image      []byte
	served     []byte // what the blob answers (image unless corrupted)
	restricted bool

	mu        sync.Mutex
	revisions []string
	queries   int
}

func newFirmwareAPI(t *testing.T, size int, offers ...offer) *firmwareAPI {
	f := &firmwareAPI{syncFixture: newSyncFixture(t, offers...)}
	f.image = make([]byte, size)
	for i := range f.image {
		f.image[i] = byte(i*31 + 7)
	}
	f.served = f.image
	jobs := f.api.srv.Config.Handler
	mux := http.NewServeMux()
	mux.Handle("/", jobs)
	mux.HandleFunc("GET /api/v1/mounts/{uid}/query", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.queries++
		f.mu.Unlock()
		if f.restricted {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"status":403,"code":"FORBIDDEN","detail":"restricted"}`)
			return
		}
		if r.URL.Query().Get("code") != "INSTALL_FIRMWARE" || r.URL.Query().Get("revision") != "2.0.0" {
			http.Error(w, `{"status":400,"code":"VALIDATION_FAILED"}`, http.StatusBadRequest)
			return
		}
		f.api.mu.Lock()
		raw := f.api.sign(offer{code: "INSTALL_FIRMWARE", params: f.params()})
		f.api.mu.Unlock()
		_, _ = w.Write(append(append([]byte("["), raw...), ']'))
	})
	mux.HandleFunc("GET /api/v1/firmware/download", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("softwareRevision") != "2.0.0" || r.URL.Query().Get("modelNumber") != "MNT-SIM" {
			http.Error(w, `{"status":404,"code":"FIRMWARE_NOT_FOUND"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"downloadLink": "/api/v1/firmware/blobs/abc?sig=x",
			"expiresAt": protocol.FormatTime(time.Now().Add(time.Minute)), "version": map[string]any{"softwareRevision": "2.0.0"}})
	})
	mux.HandleFunc("GET /api/v1/firmware/blobs/abc", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(f.served)
	})
	mux.HandleFunc("POST /api/v1/mounts/{uid}/states", func(w http.ResponseWriter, r *http.Request) {
		var body protocol.SignedStates
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.mu.Lock()
		f.revisions = append(f.revisions, body.SoftwareRevision)
		f.mu.Unlock()
		_, _ = io.WriteString(w, `{"accepted":4,"duplicates":0}`)
	})
	f.api.srv.Config.Handler = mux
	return f
}

// params are the INSTALL_FIRMWARE parameters of the image, as the catalogue holds them.
func (f *firmwareAPI) params() map[string]string {
	sum := sha256.Sum256(f.image)
	return map[string]string{"revision": "2.0.0", "sha256": hex.EncodeToString(sum[:]), "size": strconv.Itoa(len(f.image))}
}

// droppingRadio cuts the link (from the air, as a phone out of range)
// once, at the after-th firmware frame.
type droppingRadio struct {
	sdk.Radio
	air     *sim.Air
	after   int64
	written *atomic.Int64
}

func (r droppingRadio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := r.Radio.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return &droppingLink{FirmwareLink: l.(sdk.FirmwareLink), r: r, address: address}, nil
}

type droppingLink struct {
	sdk.FirmwareLink
	r       droppingRadio
	address string
}

func (l *droppingLink) WriteFirmware(ctx context.Context, frame []byte) error {
	if l.r.written.Add(1) == l.r.after {
		l.r.air.Drop(l.address)
	}
	return l.FirmwareLink.WriteFirmware(ctx, frame)
}

func TestInstallFirmwareResumesAfterADroppedLink(t *testing.T) {
	f := newFirmwareAPI(t, 6000)
	pubKey := f.mount.Status().DevicePublicKey
	var written atomic.Int64
	c := f.phone(t, "", func(r sdk.Radio) sdk.Radio {
		return droppingRadio{Radio: r, air: f.air, after: 100, written: &written}
	})
	var mu sync.Mutex
	var last, total int64
	calls := 0
	inst, err := c.InstallFirmware(context.Background(), f.mount.UID(), "2.0.0", sdk.WithProgress(func(sent, all int64) {
		mu.Lock()
		defer mu.Unlock()
		last, total = sent, all
		calls++
	}), sdk.WithRestartWait(10*time.Second))
	if err != nil {
		t.Fatalf("InstallFirmware: %v", err)
	}
	if inst.Reconnects < 1 || !inst.Result.Accepted || inst.Result.Receipt == nil || inst.Report == nil ||
		inst.Report.SoftwareRevision != "2.0.0" || inst.Pending != 0 {
		t.Fatalf("installation %+v", inst)
	}
	if last != 6000 || total != 6000 || calls < 2 {
		t.Errorf("progress: last %d of %d after %d calls", last, total, calls)
	}
	// Frames were not all sent twice: the transfer resumed, it did not restart.
	chunk := int64(protocol.FirmwareChunk(protocol.BLEDefaultMTU))
	if n := written.Load(); n > (6000/chunk)+5 {
		t.Errorf("%d frames written for %d frames of image", n, 6000/chunk+1)
	}
	if st := f.mount.Status(); st.SoftwareRevision != "2.0.0" || st.Restarts != 1 || st.DevicePublicKey != pubKey {
		t.Fatalf("mount after install: %+v", st)
	}
	receipts, _ := f.api.got()
	if len(receipts) != 1 || receipts[0].Outcome != protocol.OutcomeExecuted || receipts[0].Nonce != inst.Result.Nonce {
		t.Fatalf("receipts uploaded: %+v", receipts)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.revisions) != 1 || f.revisions[0] != "2.0.0" {
		t.Fatalf("reports uploaded on %v, want one on 2.0.0", f.revisions)
	}
}

func TestInstallFirmwareRefusesABadDownload(t *testing.T) {
	f := newFirmwareAPI(t, 3000)
	f.served = append(append([]byte(nil), f.image[:2999]...), 0xff)
	c := f.phone(t, "", nil)
	before := f.mount.Status()
	_, err := c.InstallFirmware(context.Background(), f.mount.UID(), "2.0.0")
	if !errors.Is(err, sdk.ErrBadImage) {
		t.Fatalf("InstallFirmware: %v, want ErrBadImage", err)
	}
	if after := f.mount.Status(); after.Accepted != before.Accepted || after.Refused != before.Refused || after.SoftwareRevision != "1.0.0" {
		t.Fatalf("the mount was written to: %+v", after)
	}
	// A download longer than the command's size is cut at it, and refused too.
	f.served = append(append([]byte(nil), f.image...), f.image...)
	if _, err := c.InstallFirmware(context.Background(), f.mount.UID(), "2.0.0"); !errors.Is(err, sdk.ErrBadImage) {
		t.Fatalf("a longer image: %v", err)
	}
}

// A rider's phone (no /query for INSTALL_FIRMWARE) running Sync installs
// the firmware pending-commands offers, with the other commands.
func TestSyncInstallsFirmware(t *testing.T) {
	f := newFirmwareAPI(t, 2500)
	f.restricted = true
	f.api.offers = []offer{
		{code: "SET_RFID_MODE", params: map[string]string{"rfidMode": "LEARN"}, jobID: "job-1"},
		{code: "INSTALL_FIRMWARE", params: f.params(), jobID: "rollout-1"},
	}
	c := f.phone(t, "", nil)
	sum, err := c.Sync(context.Background(), f.mount.UID())
	if err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if len(sum.Commands) != 2 || sum.Commands[0].Outcome != sdk.SyncExecuted || sum.Commands[1].Outcome != sdk.SyncExecuted {
		t.Fatalf("summary %+v", sum)
	}
	if st := f.mount.Status(); st.SoftwareRevision != "2.0.0" || st.Settings.RFIDMode != "LEARN" {
		t.Fatalf("mount after Sync: %+v", st)
	}
	if receipts, _ := f.api.got(); len(receipts) != 2 {
		t.Fatalf("receipts %+v", receipts)
	}
	// InstallFirmware with the rider's token finds the command among pending-commands.
	f.image = append(f.image, 1)
	f.served = f.image
	f.api.mu.Lock()
	f.api.offers = []offer{{code: "INSTALL_FIRMWARE", params: f.params()}}
	f.api.mu.Unlock()
	inst, err := c.InstallFirmware(context.Background(), f.mount.UID(), "2.0.0", sdk.WithRestartWait(5*time.Second))
	if err != nil || !inst.Result.Accepted {
		t.Fatalf("InstallFirmware through pending-commands: %+v, %v", inst, err)
	}
}

// corruptingLink flips a byte of the first firmware frame, as a broken
// radio would: the mount's SHA-256 check catches it.
type corruptingRadio struct{ sdk.Radio }

func (r corruptingRadio) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	l, err := r.Radio.Connect(ctx, address)
	if err != nil {
		return nil, err
	}
	return &corruptingLink{FirmwareLink: l.(sdk.FirmwareLink)}, nil
}

type corruptingLink struct {
	sdk.FirmwareLink
	done bool
}

func (l *corruptingLink) WriteFirmware(ctx context.Context, frame []byte) error {
	if !l.done {
		l.done = true
		frame = append([]byte(nil), frame...)
		frame[len(frame)-1] ^= 0xff
	}
	return l.FirmwareLink.WriteFirmware(ctx, frame)
}

// The mount refuses an image damaged on the way: a *RefusedError with
// reason "bad image", its signed receipt uploaded, the revision unchanged.
func TestInstallFirmwareBadImageRefused(t *testing.T) {
	f := newFirmwareAPI(t, 1000)
	c := f.phone(t, "", func(r sdk.Radio) sdk.Radio { return corruptingRadio{r} })
	inst, err := c.InstallFirmware(context.Background(), f.mount.UID(), "2.0.0")
	var refused *sdk.RefusedError
	if !errors.As(err, &refused) || refused.Reason != "bad image" || inst.Result.Receipt == nil {
		t.Fatalf("InstallFirmware: %+v, %v", inst, err)
	}
	if st := f.mount.Status(); st.SoftwareRevision != "1.0.0" || st.Restarts != 0 {
		t.Fatalf("mount %+v", st)
	}
	if receipts, _ := f.api.got(); len(receipts) != 1 || receipts[0].Outcome != protocol.OutcomeRefused || receipts[0].Reason != "bad image" {
		t.Fatalf("receipts %+v", receipts)
	}
}
