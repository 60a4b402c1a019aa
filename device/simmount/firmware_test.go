package simmount_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/device/simmount"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// fwRig is an associated mount on an air, with a phone's links to it.
type fwRig struct {
	t     *testing.T
	ctx   context.Context
	air   *sim.Air
	m     *simmount.Mount
	store *simmount.MemoryStore
	clock *clock
	f     *fixture
}

func newFWRig(t *testing.T, failure string) *fwRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	r := &fwRig{t: t, ctx: ctx, air: sim.NewAir(sim.Config{AdvertisingInterval: 5 * time.Millisecond}),
		store: simmount.NewMemoryStore(), clock: &clock{t: time.Now()}}
	r.m = simmount.New(simmount.Config{UID: "M1", MACAddress: "02:00:00:00:00:01", Now: r.clock.Now,
		Store: r.store, FirmwareFailure: failure})
	if err := r.air.Register(r.m); err != nil {
		t.Fatal(err)
	}
	r.f = &fixture{m: r.m, clock: r.clock}
	r.f.pub, r.f.priv = newKey(t)
	if res := r.m.Handle(associate("M1", r.f.pub, "acc-1", r.clock.Now())); !res.Accepted {
		t.Fatalf("association refused: %+v", res)
	}
	return r
}

// fwLink is one link with its reassembled messages and acknowledgements.
type fwLink struct {
	sdk.FirmwareLink
	msgs <-chan protocol.BLEMessage
}

func (r *fwRig) connect() fwLink {
	r.t.Helper()
	l, err := r.air.Central().Connect(r.ctx, "02:00:00:00:00:01")
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { l.Close() })
	fl := fwLink{FirmwareLink: l.(sdk.FirmwareLink), msgs: closingMessages(l)}
	if m := fl.next(r.t); m.Type != protocol.BLEMessageStates { // the states on connection
		r.t.Fatalf("first message %+v", m)
	}
	return fl
}

// closingMessages reassembles a link's notifications and closes when the
// link does.
func closingMessages(link sdk.BLELink) <-chan protocol.BLEMessage {
	out := make(chan protocol.BLEMessage, 64)
	go func() {
		defer close(out)
		var r protocol.Reassembler
		for f := range link.Frames() {
			raw, done, err := r.Add(f)
			if err != nil || !done {
				continue
			}
			var msg protocol.BLEMessage
			if json.Unmarshal(raw, &msg) == nil {
				out <- msg
			}
		}
	}()
	return out
}

func (l fwLink) next(t *testing.T) protocol.BLEMessage {
	t.Helper()
	select {
	case m, ok := <-l.msgs:
		if !ok {
			t.Fatal("link closed")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	return protocol.BLEMessage{}
}

// send writes a framed command.
func (l fwLink) send(t *testing.T, ctx context.Context, raw []byte) {
	t.Helper()
	for _, f := range protocol.SplitFrames(raw, l.MTU()) {
		if err := l.WriteFrame(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
}

func (l fwLink) status(t *testing.T, ctx context.Context) protocol.FirmwareStatus {
	t.Helper()
	raw, err := l.ReadFirmware(ctx)
	var st protocol.FirmwareStatus
	if err == nil {
		err = json.Unmarshal(raw, &st)
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stream writes image[from:to] in frames.
func (l fwLink) stream(ctx context.Context, image []byte, from, to int) error {
	chunk := protocol.FirmwareChunk(l.MTU())
	for off := from; off < to; off += chunk {
		if err := l.WriteFirmware(ctx, protocol.FirmwareFrame(int64(off), image[off:min(off+chunk, to)])); err != nil {
			return err
		}
	}
	return nil
}

// lastAck waits for an acknowledgement of kind.
func (l fwLink) ack(t *testing.T, kind protocol.FirmwareAckKind) protocol.FirmwareAck {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case v, ok := <-l.FirmwareAcks():
			if !ok {
				t.Fatalf("link closed before %s", kind)
			}
			if a, ok := protocol.ParseFirmwareAck(v); ok && a.Kind == kind {
				return a
			}
		case <-deadline:
			t.Fatalf("no %s acknowledgement", kind)
		}
	}
}

func image(n int) ([]byte, map[string]string) {
	img := make([]byte, n)
	for i := range img {
		img[i] = byte(i * 7)
	}
	sum := sha256.Sum256(img)
	return img, map[string]string{"revision": "2.0.0", "sha256": hex.EncodeToString(sum[:]), "size": strconv.Itoa(n)}
}

func TestFirmwareInstallResumesAndRestarts(t *testing.T) {
	r := newFWRig(t, "")
	img, params := image(10_000)
	pubKey := r.m.BLEInfo().DevicePublicKey
	l := r.connect()
	if st := l.status(t, r.ctx); st.State != protocol.FirmwareIdle {
		t.Fatalf("status before: %+v", st)
	}
	cmd := r.f.signed(protocol.CmdInstallFirmware, params)
	l.send(t, r.ctx, cmd.build())
	if res := l.next(t); !res.Accepted || res.Signature != "" || res.Outcome != "" {
		t.Fatalf("INSTALL_FIRMWARE: %+v (want accepted, no receipt yet)", res)
	}
	if err := l.stream(r.ctx, img, 0, 5000); err != nil {
		t.Fatal(err)
	}
	if a := l.ack(t, protocol.AckProgress); a.Offset < protocol.FirmwareAckEvery {
		t.Fatalf("progress %+v", a)
	}
	// A frame at another offset is answered with the mount's.
	if err := l.WriteFirmware(r.ctx, protocol.FirmwareFrame(9000, img[9000:9010])); err != nil {
		t.Fatal(err)
	}
	if a := l.ack(t, protocol.AckWrongOffset); a.Offset != 5000 {
		t.Fatalf("wrong offset answered %+v, want 5000", a)
	}
	// The link drops; a new one reads where to resume, without the command again.
	if n := r.air.Drop("02:00:00:00:00:01"); n != 1 {
		t.Fatalf("dropped %d links", n)
	}
	l = r.connect()
	st := l.status(t, r.ctx)
	if st.State != protocol.FirmwareReceiving || st.Offset != 5000 || st.Nonce != cmd.nonce || st.Size != 10_000 || st.Revision != "2.0.0" {
		t.Fatalf("status after the drop: %+v", st)
	}
	counterBefore := r.m.Status().Counter
	if err := l.stream(r.ctx, img, int(st.Offset), len(img)); err != nil {
		t.Fatal(err)
	}
	res := l.next(t)
	if !res.Accepted || res.Outcome != protocol.OutcomeExecuted || res.Nonce != cmd.nonce || !verifyReceipt(t, pubKey, "M1", res) {
		t.Fatalf("receipt %+v", res)
	}
	// The mount restarts: the link drops; it comes back on 2.0.0 with its key.
	for range l.msgs {
	}
	if s := r.m.Status(); s.SoftwareRevision != "2.0.0" || s.Restarts != 1 {
		t.Fatalf("after install: %+v", s)
	}
	l = r.connect()
	raw, _ := l.ReadInfo(r.ctx)
	var info protocol.BLEInfo
	_ = json.Unmarshal(raw, &info)
	if info.SoftwareRevision != "2.0.0" || info.DevicePublicKey != pubKey {
		t.Fatalf("info after restart: %+v", info)
	}
	rep := r.m.Report()
	if rep.SoftwareRevision != "2.0.0" || *rep.Counter <= *res.Counter || *res.Counter <= counterBefore || !verifyReport(t, pubKey, "M1", rep) {
		t.Fatalf("report after restart: %+v (receipt counter %d)", rep, *res.Counter)
	}
	// Replay memory survived: the old command is refused, signed, counter rising.
	l.send(t, r.ctx, cmd.build())
	again := l.next(t)
	if again.Accepted || again.Reason != simmount.ReasonReplayed || *again.Counter <= *rep.Counter {
		t.Fatalf("replayed install: %+v", again)
	}
	// The store holds the new revision: a mount booted from it runs 2.0.0.
	m2 := simmount.New(simmount.Config{UID: "M1", MACAddress: "02:00:00:00:00:01", Store: r.store, Now: r.clock.Now})
	if got := m2.BLEInfo(); got.SoftwareRevision != "2.0.0" || got.DevicePublicKey != pubKey {
		t.Fatalf("rebooted from the store: %+v", got)
	}
}

func TestFirmwareRefusals(t *testing.T) {
	t.Run("bad image", func(t *testing.T) {
		r := newFWRig(t, "")
		img, params := image(3000)
		params["sha256"] = hex.EncodeToString(make([]byte, 32))
		l := r.connect()
		cmd := r.f.signed(protocol.CmdInstallFirmware, params)
		l.send(t, r.ctx, cmd.build())
		if res := l.next(t); !res.Accepted {
			t.Fatalf("command: %+v", res)
		}
		if err := l.stream(r.ctx, img, 0, len(img)); err != nil {
			t.Fatal(err)
		}
		res := l.next(t)
		if res.Accepted || res.Reason != simmount.ReasonBadImage || res.Outcome != protocol.OutcomeRefused ||
			!verifyReceipt(t, r.m.BLEInfo().DevicePublicKey, "M1", res) {
			t.Fatalf("receipt %+v", res)
		}
		l.ack(t, protocol.AckBadImage)
		if st := l.status(t, r.ctx); st.State != protocol.FirmwareIdle || r.m.Status().SoftwareRevision != "1.0.0" {
			t.Fatalf("after a bad image: %+v, %s", st, r.m.Status().SoftwareRevision)
		}
		// Frames now find no transfer.
		if err := l.WriteFirmware(r.ctx, protocol.FirmwareFrame(0, img[:10])); err != nil {
			t.Fatal(err)
		}
		l.ack(t, protocol.AckNoTransfer)
	})
	t.Run("too long", func(t *testing.T) {
		r := newFWRig(t, "")
		img, params := image(100)
		params["size"] = "50"
		l := r.connect()
		l.send(t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, params).build())
		l.next(t)
		if err := l.stream(r.ctx, img, 0, len(img)); err != nil {
			t.Fatal(err)
		}
		if res := l.next(t); res.Reason != simmount.ReasonBadImage {
			t.Fatalf("receipt %+v", res)
		}
	})
	t.Run("busy, size bound, expiry", func(t *testing.T) {
		r := newFWRig(t, "")
		img, params := image(1000)
		l := r.connect()
		l.send(t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, params).build())
		l.next(t)
		if err := l.stream(r.ctx, img, 0, 100); err != nil {
			t.Fatal(err)
		}
		_, other := image(2000)
		l.send(t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, other).build())
		if res := l.next(t); res.Reason != simmount.ReasonBusy || res.Outcome != protocol.OutcomeRefused {
			t.Fatalf("second image: %+v", res)
		}
		big := map[string]string{"revision": "2.0.0", "sha256": params["sha256"], "size": strconv.Itoa(protocol.FirmwareMaxSize + 1)}
		l.send(t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, big).build())
		if res := l.next(t); res.Reason != simmount.ReasonBadParameters {
			t.Fatalf("too large: %+v", res)
		}
		// A fresh command for the same image carries on from the offset.
		fresh := r.f.signed(protocol.CmdInstallFirmware, params)
		l.send(t, r.ctx, fresh.build())
		if res := l.next(t); !res.Accepted {
			t.Fatalf("same image again: %+v", res)
		}
		if st := l.status(t, r.ctx); st.Offset != 100 || st.Nonce != fresh.nonce {
			t.Fatalf("status %+v", st)
		}
		r.clock.Add(protocol.CommandLifetime + time.Second)
		if err := l.stream(r.ctx, img, 100, 200); err != nil {
			t.Fatal(err)
		}
		l.ack(t, protocol.AckExpired)
		if st := l.status(t, r.ctx); st.State != protocol.FirmwareIdle {
			t.Fatalf("status after expiry %+v", st)
		}
	})
}

// install runs a whole install on a fresh link and waits for the restart.
func (r *fwRig) install(revision string) {
	r.t.Helper()
	img, params := image(2000)
	params["revision"] = revision
	l := r.connect()
	l.send(r.t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, params).build())
	l.next(r.t)
	if err := l.stream(r.ctx, img, 0, len(img)); err != nil {
		r.t.Fatal(err)
	}
	if res := l.next(r.t); res.Outcome != protocol.OutcomeExecuted {
		r.t.Fatalf("receipt %+v", res)
	}
	for range l.msgs {
	}
}

func TestFirmwareFailureModes(t *testing.T) {
	t.Run("rollback", func(t *testing.T) {
		r := newFWRig(t, simmount.FailRollback)
		r.install("2.0.0")
		first, second, third := r.m.Report(), r.m.Report(), r.m.Report()
		if first.SoftwareRevision != "2.0.0" || second.SoftwareRevision != "1.0.0" || third.SoftwareRevision != "1.0.0" ||
			*second.Counter <= *first.Counter || *third.Counter <= *second.Counter {
			t.Fatalf("reports %s/%d, %s/%d, %s/%d", first.SoftwareRevision, *first.Counter,
				second.SoftwareRevision, *second.Counter, third.SoftwareRevision, *third.Counter)
		}
		if r.m.BLEInfo().SoftwareRevision != "1.0.0" {
			t.Fatal("info does not show the rollback")
		}
	})
	t.Run("silent", func(t *testing.T) {
		r := newFWRig(t, simmount.FailSilent)
		r.install("2.0.0")
		if !r.m.Silent() {
			t.Fatal("not silent")
		}
		ctx, cancel := context.WithTimeout(r.ctx, 100*time.Millisecond)
		defer cancel()
		heard := false
		_ = r.air.Central().Scan(ctx, func(protocol.BLEDevice) { heard = true })
		if heard {
			t.Fatal("a silent mount advertises")
		}
		if _, err := r.air.Central().Connect(r.ctx, "02:00:00:00:00:01"); err == nil {
			t.Fatal("a silent mount accepted a link")
		}
	})
}
