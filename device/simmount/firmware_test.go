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
	r := &fwRig{t: t, ctx: ctx, air: sim.NewAir(sim.Config{AdvertisingInterval: 5 * time.Millisecond, MaxLinks: 2}),
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

// nextAck is the next acknowledgement, whatever its kind.
func (l fwLink) nextAck(t *testing.T) protocol.FirmwareAck {
	t.Helper()
	select {
	case v := <-l.FirmwareAcks():
		a, ok := protocol.ParseFirmwareAck(v)
		if !ok {
			t.Fatalf("acknowledgement %x", v)
		}
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no acknowledgement")
	}
	return protocol.FirmwareAck{}
}

// ack waits for an acknowledgement of kind.
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
	// A frame the mount holds already (a phone resending after a late
	// acknowledgement) is ignored without a word; one overlapping the
	// offset gives its new tail; a frame past a gap is answered with the
	// mount's offset.
	frames := [][]byte{
		protocol.FirmwareFrame(1000, img[1000:1010]),
		protocol.FirmwareFrame(4996, img[4996:5012]),
		protocol.FirmwareFrame(9000, img[9000:9010]),
	}
	for _, f := range frames {
		if err := l.WriteFirmware(r.ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if a := l.nextAck(t); a.Kind != protocol.AckWrongOffset || a.Offset != 5012 {
		t.Fatalf("after an old frame, an overlapping one and a gap: %+v, want wrong offset 5012 only", a)
	}
	if err := l.stream(r.ctx, img, 5012, 5028); err != nil {
		t.Fatal(err)
	}
	// The frames are taken in the mount's own time: the drop comes once
	// the mount holds them (the test is of the resume, not of the race).
	for deadline := time.Now().Add(5 * time.Second); l.status(t, r.ctx).Offset != 5028; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the mount never took the frames up to 5028")
		}
	}
	// The link drops; a new one reads where to resume, without the command again.
	if n := r.air.Drop("02:00:00:00:00:01"); n != 1 {
		t.Fatalf("dropped %d links", n)
	}
	l = r.connect()
	st := l.status(t, r.ctx)
	if st.State != protocol.FirmwareReceiving || st.Offset != 5028 || st.Nonce != cmd.nonce || st.Size != 10_000 || st.Revision != "2.0.0" {
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
		// The transfer lives while frames come, past its command's
		// lifetime: it ends only FirmwareIdleTimeout after the last frame.
		off := 100
		for elapsed := time.Duration(0); elapsed <= protocol.CommandLifetime; elapsed += protocol.FirmwareIdleTimeout - time.Second {
			r.clock.Add(protocol.FirmwareIdleTimeout - time.Second)
			if err := l.stream(r.ctx, img, off, off+16); err != nil {
				t.Fatal(err)
			}
			off += 16
			r.waitOffset(l, int64(off))
		}
		r.clock.Add(protocol.FirmwareIdleTimeout)
		if err := l.stream(r.ctx, img, off, off+16); err != nil {
			t.Fatal(err)
		}
		l.ack(t, protocol.AckExpired)
		if st := l.status(t, r.ctx); st.State != protocol.FirmwareIdle {
			t.Fatalf("status after expiry %+v", st)
		}
	})
}

// waitOffset waits until the mount took the frames up to offset.
func (r *fwRig) waitOffset(l fwLink, offset int64) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := l.status(r.t, r.ctx)
		if st.Offset == offset {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("status %+v, want offset %d", st, offset)
		}
		time.Sleep(time.Millisecond)
	}
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

// A transfer belongs to the link whose command opened it: another
// phone's frames get "no transfer" while that link lives; once it is
// gone, the next link resumes it.
func TestFirmwareTransferBelongsToItsLink(t *testing.T) {
	r := newFWRig(t, "")
	img, params := image(100)
	a, b := r.connect(), r.connect()
	cmd := r.f.signed(protocol.CmdInstallFirmware, params)
	a.send(t, r.ctx, cmd.build())
	if res := a.next(t); !res.Accepted {
		t.Fatalf("INSTALL_FIRMWARE: %+v", res)
	}
	if err := b.stream(r.ctx, img, 0, 16); err != nil {
		t.Fatal(err)
	}
	if ack := b.nextAck(t); ack.Kind != protocol.AckNoTransfer {
		t.Fatalf("another link's frame: %+v, want no transfer", ack)
	}
	if err := a.stream(r.ctx, img, 0, 32); err != nil {
		t.Fatal(err)
	}
	if st := b.status(t, r.ctx); st.State != protocol.FirmwareReceiving {
		t.Fatalf("status %+v", st)
	}
	// The link that opened it drops: the other one carries on.
	a.Close()
	for range a.msgs {
	}
	st := b.status(t, r.ctx)
	if err := b.stream(r.ctx, img, int(st.Offset), len(img)); err != nil {
		t.Fatal(err)
	}
	if res := b.next(t); res.Nonce != cmd.nonce || res.Outcome != protocol.OutcomeExecuted {
		t.Fatalf("receipt %+v", res)
	}
}

// The acknowledgements and the messages leave in the order the mount made
// them: "complete" before the receipt, every time.
func TestFirmwareCompleteBeforeReceipt(t *testing.T) {
	for i := range 20 {
		r := newFWRig(t, "")
		img, params := image(64)
		params["revision"] = "2.0." + strconv.Itoa(i+1)
		l := r.connect()
		l.send(t, r.ctx, r.f.signed(protocol.CmdInstallFirmware, params).build())
		l.next(t)
		if err := l.stream(r.ctx, img, 0, len(img)); err != nil {
			t.Fatal(err)
		}
		if res := l.next(t); res.Outcome != protocol.OutcomeExecuted {
			t.Fatalf("receipt %+v", res)
		}
		select {
		case v := <-l.FirmwareAcks():
			if a, _ := protocol.ParseFirmwareAck(v); a.Kind != protocol.AckComplete {
				t.Fatalf("ack %+v, want complete", a)
			}
		default:
			t.Fatalf("run %d: the receipt came before the complete acknowledgement", i)
		}
	}
}
