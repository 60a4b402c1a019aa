package sim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// echo is a peripheral that sends every message written to it back as a
// notification, so a round trip exercises the framing both ways.
type echo struct {
	uid   string
	conns chan sim.PeripheralConn
}

func newEcho(uid string) *echo { return &echo{uid: uid, conns: make(chan sim.PeripheralConn, 8)} }

func (e *echo) address() string { return "02:00:00:00:00:" + e.uid[len(e.uid)-2:] }

func (e *echo) Advertisement() protocol.BLEDevice {
	return protocol.BLEDevice{Address: e.address(), Name: protocol.BLENamePrefix + e.uid, MountUID: e.uid}
}

func (e *echo) Info() []byte { return []byte(`{"uid":"` + e.uid + `"}`) }

func (e *echo) Connected(c sim.PeripheralConn) {
	e.conns <- c
	var r protocol.Reassembler
	for {
		select {
		case <-c.Done():
			return
		case f := <-c.Frames():
			msg, done, err := r.Add(f)
			if err != nil || !done {
				continue
			}
			for _, out := range protocol.SplitFrames(msg, c.MTU()) {
				if c.Notify(out) != nil {
					return
				}
			}
		}
	}
}

// world is an air with echo devices E01..En, reachable in process and over
// a socket.
type world struct {
	air     *sim.Air
	devices []*echo
	addr    string
}

func newWorld(t *testing.T, n int, cfg sim.Config, network string) *world {
	t.Helper()
	if cfg.AdvertisingInterval == 0 {
		cfg.AdvertisingInterval = 20 * time.Millisecond
	}
	w := &world{air: sim.NewAir(cfg)}
	for i := 1; i <= n; i++ {
		e := newEcho(fmt.Sprintf("E%02d", i))
		if err := w.air.Register(e); err != nil {
			t.Fatal(err)
		}
		w.devices = append(w.devices, e)
	}
	addr := "127.0.0.1:0"
	if network == "unix" {
		addr = filepath.Join(t.TempDir(), "air.sock")
	}
	ln, err := sim.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	w.addr = ln.Addr().String()
	if network == "unix" {
		w.addr = "unix:" + w.addr
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, w.air, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return w
}

// radios are the ways a central reaches the air.
func radios(w *world) map[string]sdk.Radio {
	return map[string]sdk.Radio{"in-process": w.air.Central(), "socket": sim.Dial(w.addr)}
}

func scanFor(t *testing.T, r sdk.Radio, d time.Duration) map[string]protocol.BLEDevice {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	seen := map[string]protocol.BLEDevice{}
	if err := r.Scan(ctx, func(dev protocol.BLEDevice) {
		mu.Lock()
		seen[dev.Address] = dev
		mu.Unlock()
	}); err != nil {
		t.Fatalf("Scan: %v", err)
	}
	return seen
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// roundTrip sends msg over link and waits for the echo.
func roundTrip(t *testing.T, link sdk.BLELink, msg []byte) {
	t.Helper()
	ctx := ctxT(t)
	for _, f := range protocol.SplitFrames(msg, link.MTU()) {
		if err := link.WriteFrame(ctx, f); err != nil {
			t.Fatalf("WriteFrame: %v", err)
		}
	}
	var r protocol.Reassembler
	for {
		select {
		case f, ok := <-link.Frames():
			if !ok {
				t.Fatal("link closed before the echo")
			}
			got, done, err := r.Add(f)
			if err != nil {
				t.Fatal(err)
			}
			if done {
				if !bytes.Equal(got, msg) {
					t.Fatalf("echo %q, want %q", got, msg)
				}
				return
			}
		case <-ctx.Done():
			t.Fatal("no echo")
		}
	}
}

func waitClosed(t *testing.T, frames <-chan []byte) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("Frames not closed")
		}
	}
}

func TestScan(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		w := newWorld(t, 3, sim.Config{}, network)
		for name, radio := range radios(w) {
			t.Run(network+"/"+name, func(t *testing.T) {
				seen := scanFor(t, radio, 300*time.Millisecond)
				if len(seen) != 3 {
					t.Fatalf("saw %d devices: %v", len(seen), seen)
				}
				for _, e := range w.devices {
					d := seen[e.address()]
					if d.MountUID != e.uid || d.Name != "MNT-"+e.uid || d.RSSI > -40 || d.RSSI < -90 {
						t.Fatalf("advertisement %+v", d)
					}
				}
			})
		}
	}
}

func TestScanFollowsTheAir(t *testing.T) {
	w := newWorld(t, 2, sim.Config{}, "tcp")
	extra := newEcho("E09")
	if err := w.air.Register(extra); err != nil {
		t.Fatal(err)
	}
	if err := w.air.Register(newEcho("E09")); err == nil {
		t.Fatal("a second device with the same address was registered")
	}
	w.air.Unregister(w.devices[0].address())
	// A connected device (one link at most) stops advertising.
	link, err := w.air.Central().Connect(ctxT(t), w.devices[1].address())
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	for name, radio := range radios(w) {
		seen := scanFor(t, radio, 300*time.Millisecond)
		if len(seen) != 1 || seen[extra.address()].MountUID != "E09" {
			t.Fatalf("%s: saw %v", name, seen)
		}
	}
}

func TestScanEndsWithContext(t *testing.T) {
	w := newWorld(t, 1, sim.Config{}, "tcp")
	for name, radio := range radios(w) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- radio.Scan(ctx, func(protocol.BLEDevice) {}) }()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: scan did not end", name)
		}
	}
}

func TestLink(t *testing.T) {
	for _, network := range []string{"tcp", "unix"} {
		for _, mtu := range []int{23, 185} {
			w := newWorld(t, 1, sim.Config{MTU: mtu}, network)
			e := w.devices[0]
			for name, radio := range radios(w) {
				t.Run(fmt.Sprintf("%s/%s/mtu%d", network, name, mtu), func(t *testing.T) {
					link, err := radio.Connect(ctxT(t), e.address())
					if err != nil {
						t.Fatal(err)
					}
					peer := <-e.conns
					if link.MTU() != mtu || peer.MTU() != mtu {
						t.Fatalf("MTU %d/%d, want %d", link.MTU(), peer.MTU(), mtu)
					}
					info, err := link.ReadInfo(ctxT(t))
					if err != nil || string(info) != `{"uid":"E01"}` {
						t.Fatalf("info %q %v", info, err)
					}
					roundTrip(t, link, []byte("short"))
					roundTrip(t, link, bytes.Repeat([]byte("0123456789"), 400)) // 4000 bytes: wraps the sequence at MTU 23
					roundTrip(t, link, nil)
					if err := link.WriteFrame(ctxT(t), make([]byte, mtu-2)); !errors.Is(err, sim.ErrTooLong) {
						t.Fatalf("oversize frame: %v", err)
					}
					if err := peer.Notify(make([]byte, mtu-2)); !errors.Is(err, sim.ErrTooLong) {
						t.Fatalf("oversize notification: %v", err)
					}
					// Only one link at a time.
					if _, err := radio.Connect(ctxT(t), e.address()); !errors.Is(err, sim.ErrBusy) {
						t.Fatalf("second link: %v", err)
					}
					if err := link.Close(); err != nil {
						t.Fatal(err)
					}
					waitClosed(t, link.Frames())
					select {
					case <-peer.Done():
					case <-time.After(5 * time.Second):
						t.Fatal("peripheral did not see the link close")
					}
					if err := peer.Notify([]byte{0x80}); !errors.Is(err, sim.ErrClosed) {
						t.Fatalf("notify after close: %v", err)
					}
					if err := link.WriteFrame(ctxT(t), []byte{0x80}); !errors.Is(err, sim.ErrClosed) {
						t.Fatalf("write after close: %v", err)
					}
					if _, err := link.ReadInfo(ctxT(t)); !errors.Is(err, sim.ErrClosed) {
						t.Fatalf("read after close: %v", err)
					}
					// The device is free again.
					again, err := radio.Connect(ctxT(t), e.address())
					if err != nil {
						t.Fatalf("reconnect: %v", err)
					}
					<-e.conns
					again.Close()
				})
			}
		}
	}
}

func TestConnectErrors(t *testing.T) {
	w := newWorld(t, 1, sim.Config{}, "tcp")
	for name, radio := range radios(w) {
		if _, err := radio.Connect(ctxT(t), "02:00:00:00:00:99"); !errors.Is(err, sim.ErrNotFound) {
			t.Fatalf("%s: unknown address: %v", name, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := radio.Connect(ctx, w.devices[0].address()); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: cancelled connect: %v", name, err)
		}
	}
	// Nothing listening.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := sim.Dial(addr).Connect(ctxT(t), "x"); err == nil {
		t.Fatal("connect without an air")
	}
	if err := sim.Dial(addr).Scan(ctxT(t), func(protocol.BLEDevice) {}); err == nil {
		t.Fatal("scan without an air")
	}
}

func TestPeripheralDisconnects(t *testing.T) {
	w := newWorld(t, 2, sim.Config{}, "tcp")
	for name, radio := range radios(w) {
		t.Run(name, func(t *testing.T) {
			e := w.devices[0]
			link, err := radio.Connect(ctxT(t), e.address())
			if err != nil {
				t.Fatal(err)
			}
			peer := <-e.conns
			peer.Close()
			waitClosed(t, link.Frames())
			if err := link.WriteFrame(ctxT(t), []byte{0x80}); !errors.Is(err, sim.ErrClosed) {
				t.Fatalf("write after the peripheral left: %v", err)
			}
			link.Close()

			// Unregister drops links too.
			e2 := w.devices[1]
			link, err = radio.Connect(ctxT(t), e2.address())
			if err != nil {
				t.Fatal(err)
			}
			<-e2.conns
			w.air.Unregister(e2.address())
			waitClosed(t, link.Frames())
			link.Close()
			if err := w.air.Register(e2); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestSeveralCentrals(t *testing.T) {
	w := newWorld(t, 6, sim.Config{MaxLinks: 2}, "tcp")
	var wg sync.WaitGroup
	for i := range 12 { // two centrals per device, half of them remote
		wg.Add(1)
		go func() {
			defer wg.Done()
			var radio sdk.Radio = w.air.Central()
			if i%2 == 1 {
				radio = sim.Dial(w.addr)
			}
			e := w.devices[i/2]
			link, err := radio.Connect(ctxT(t), e.address())
			if err != nil {
				t.Error(err)
				return
			}
			defer link.Close()
			for n := range 5 {
				roundTrip(t, link, fmt.Appendf(nil, "central %d message %d %s", i, n, bytes.Repeat([]byte{'x'}, 10*n)))
			}
		}()
	}
	wg.Wait()
}

func TestServeStops(t *testing.T) {
	air := sim.NewAir(sim.Config{})
	e := newEcho("E01")
	air.Register(e)
	ln, err := sim.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.Serve(ctx, air, ln) }()
	radio := sim.Dial(ln.Addr().String())
	link, err := radio.Connect(ctxT(t), e.address())
	if err != nil {
		t.Fatal(err)
	}
	scanDone := make(chan error, 1)
	go func() { scanDone <- radio.Scan(context.Background(), func(protocol.BLEDevice) {}) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitClosed(t, link.Frames())
	if err := <-scanDone; err == nil {
		t.Fatal("a scan whose air stopped ended without error")
	}
}

func TestConnectionInterval(t *testing.T) {
	w := newWorld(t, 1, sim.Config{ConnectionInterval: 5 * time.Millisecond}, "tcp")
	link, err := w.air.Central().Connect(ctxT(t), w.devices[0].address())
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()
	start := time.Now()
	roundTrip(t, link, make([]byte, 19*4)) // 4 frames each way
	if d := time.Since(start); d < 40*time.Millisecond {
		t.Fatalf("8 ATT exchanges took %s, want at least 40ms", d)
	}
}
