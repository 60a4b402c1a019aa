package sim

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/mountd/mountd/protocol"
	"github.com/mountd/mountd/sdk"
)

// The socket protocol puts an Air in another process (mountsim) within
// reach of centrals elsewhere (mountctl, the SDK). One socket is one scan or
// one link, so closing it is stopping the scan or disconnecting. After a
// greeting both ways, every message is a 4-byte big-endian length, a type
// byte and a payload; frames travel verbatim, so the framing of docs/ble.md
// is exercised end to end. docs/ble.md lists the messages.
const (
	greeting = "MNTAIR1\n"
	maxWire  = 64 << 10

	msgScan      = 's' // central: scan; payload none
	msgConnect   = 'c' // central: connect; payload address
	msgRead      = 'r' // central: read info; payload none
	msgWrite     = 'w' // central: write a frame with response; payload frame
	msgAdvert    = 'a' // air: advertisement; payload BLEDevice JSON
	msgConnected = 'o' // air: link up; payload MTU as 2 bytes big-endian
	msgInfo      = 'i' // air: info value
	msgWritten   = 'k' // air: write response
	msgNotify    = 'n' // air: notified frame
	msgError     = 'e' // air: request failed; payload error code byte + text

	msgReadFirmware   = 'R' // central: read the firmware characteristic; answered msgFirmware or msgError
	msgWriteFirmware  = 'W' // central: write a firmware frame with response; answered msgWritten or msgError
	msgFirmware       = 'I' // air: the firmware characteristic's value
	msgNotifyFirmware = 'N' // air: notification of the firmware characteristic
)

// Error codes on the wire, so a remote central gets the same sentinels.
var wireErrors = []error{nil, ErrNotFound, ErrBusy, ErrClosed, ErrTooLong, ErrNoFirmware}

func errorPayload(err error) []byte {
	code := byte(0)
	for i, e := range wireErrors {
		if e != nil && errors.Is(err, e) {
			code = byte(i)
		}
	}
	return append([]byte{code}, err.Error()...)
}

func payloadError(p []byte) error {
	if len(p) == 0 {
		return errors.New("sim: remote error")
	}
	if int(p[0]) < len(wireErrors) && wireErrors[p[0]] != nil {
		return fmt.Errorf("%w (remote: %s)", wireErrors[p[0]], p[1:])
	}
	return fmt.Errorf("sim: remote: %s", p[1:])
}

func writeMsg(w io.Writer, typ byte, payload []byte) error {
	buf := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(1+len(payload)))
	buf[4] = typ
	copy(buf[5:], payload)
	_, err := w.Write(buf)
	return err
}

func readMsg(r io.Reader) (byte, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(head[:4])
	if n < 1 || n > maxWire {
		return 0, nil, fmt.Errorf("sim: message of %d bytes", n)
	}
	payload := make([]byte, n-1)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, err
	}
	return head[4], payload, nil
}

// splitAddr names the network of an address: "unix:PATH" or a path
// (containing a slash) is a Unix socket, anything else TCP HOST:PORT.
// A leading "sim://" (mountctl's --ble notation) is ignored.
func splitAddr(addr string) (network, address string) {
	addr = strings.TrimPrefix(addr, "sim://")
	switch {
	case strings.HasPrefix(addr, "unix:"):
		return "unix", strings.TrimPrefix(addr, "unix:")
	case strings.Contains(addr, "/"):
		return "unix", addr
	}
	return "tcp", addr
}

// Listen opens a listener for Serve at addr (see Dial for the notation). A
// Unix socket file left behind by a process that is gone is replaced.
func Listen(addr string) (net.Listener, error) {
	network, address := splitAddr(addr)
	if network == "unix" {
		if c, err := net.DialTimeout("unix", address, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("sim: %s is in use", address)
		} else if fi, serr := os.Stat(address); serr == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(address)
		}
	}
	return net.Listen(network, address)
}

// Serve exposes air on ln until ctx ends, then closes ln and every socket
// and returns nil.
func Serve(ctx context.Context, air *Air, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { <-ctx.Done(); ln.Close() }()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			serveConn(ctx, air, conn)
		}()
	}
}

// serveConn runs one socket: a scan or a link.
func serveConn(ctx context.Context, air *Air, conn net.Conn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer conn.Close()

	r := bufio.NewReader(conn)
	var mu sync.Mutex // one message at a time on the socket
	send := func(typ byte, p []byte) error {
		mu.Lock()
		defer mu.Unlock()
		return writeMsg(conn, typ, p)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	hello := make([]byte, len(greeting))
	if _, err := io.ReadFull(r, hello); err != nil || string(hello) != greeting {
		return
	}
	if _, err := io.WriteString(conn, greeting); err != nil {
		return
	}
	typ, payload, err := readMsg(r)
	if err != nil {
		return
	}
	conn.SetDeadline(time.Time{})

	switch typ {
	case msgScan:
		// The central ends a scan by closing the socket.
		go func() {
			_, _ = io.Copy(io.Discard, r)
			cancel()
		}()
		_ = air.Central().Scan(ctx, func(d protocol.BLEDevice) {
			raw, _ := json.Marshal(d)
			if send(msgAdvert, raw) != nil {
				cancel()
			}
		})
	case msgConnect:
		l, err := air.connect(ctx, string(payload))
		if err != nil {
			_ = send(msgError, errorPayload(err))
			return
		}
		defer l.close()
		if send(msgConnected, binary.BigEndian.AppendUint16(nil, uint16(l.mtu))) != nil {
			return
		}
		// Notifications flow on their own; the link ending closes the socket
		// once both characteristics forwarded what they held (a mount
		// notifies its result and then restarts: closing on the first one
		// to end lost the result).
		var forwarding sync.WaitGroup
		forward := func(ch <-chan []byte, typ byte) {
			for f := range ch {
				if send(typ, f) != nil {
					break
				}
			}
		}
		forwarding.Go(func() { forward(l.toCentral, msgNotify) })
		forwarding.Go(func() { forward(l.fwOut, msgNotifyFirmware) })
		go func() {
			forwarding.Wait()
			cancel()
		}()
		for {
			typ, payload, err := readMsg(r)
			if err != nil {
				return
			}
			switch typ {
			case msgRead:
				info, err := l.readInfo(ctx)
				if err != nil {
					err = send(msgError, errorPayload(err))
				} else {
					err = send(msgInfo, info)
				}
				if err != nil {
					return
				}
			case msgReadFirmware:
				v, err := l.readFirmware(ctx)
				if err != nil {
					err = send(msgError, errorPayload(err))
				} else {
					err = send(msgFirmware, v)
				}
				if err != nil {
					return
				}
			case msgWrite, msgWriteFirmware:
				ch := l.toPeripheral
				if typ == msgWriteFirmware {
					ch = l.fwIn
				}
				if err := l.writeTo(ctx, ch, payload); err != nil {
					err = send(msgError, errorPayload(err))
				} else {
					err = send(msgWritten, nil)
				}
				if err != nil {
					return
				}
			default:
				return
			}
		}
	}
}

// Remote is a central on an Air served by another process. It implements
// sdk.Radio; each Scan and each link uses a socket of its own.
type Remote struct {
	network, address string
}

var _ sdk.Radio = (*Remote)(nil)

// Dial returns a central for the Air served at addr: "HOST:PORT" (TCP),
// "unix:PATH" or a path with a slash (Unix socket); a "sim://" prefix is
// ignored. Nothing is opened until Scan or Connect, so a simulator started
// later, or restarted, is found.
func Dial(addr string) *Remote {
	n, a := splitAddr(addr)
	return &Remote{network: n, address: a}
}

// open dials and greets, within ctx.
func (rm *Remote) open(ctx context.Context, first byte, payload []byte) (net.Conn, *bufio.Reader, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, rm.network, rm.address)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: air at %s: %w", rm.address, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	fail := func(err error) (net.Conn, *bufio.Reader, error) {
		conn.Close()
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("sim: air at %s: %w", rm.address, err)
	}
	if _, err := io.WriteString(conn, greeting); err != nil {
		return fail(err)
	}
	r := bufio.NewReader(conn)
	hello := make([]byte, len(greeting))
	if _, err := io.ReadFull(r, hello); err != nil {
		return fail(err)
	}
	if string(hello) != greeting {
		return fail(errors.New("not a simulated air"))
	}
	if err := writeMsg(conn, first, payload); err != nil {
		return fail(err)
	}
	if !stop() {
		return fail(ctx.Err())
	}
	return conn, r, nil
}

// Scan reports advertisements until ctx ends, then returns nil. An error
// means the air could not be reached or went away.
func (rm *Remote) Scan(ctx context.Context, found func(protocol.BLEDevice)) error {
	conn, r, err := rm.open(ctx, msgScan, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	for {
		typ, payload, err := readMsg(r)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("sim: scan: %w", err)
		}
		var d protocol.BLEDevice
		if typ != msgAdvert || json.Unmarshal(payload, &d) != nil {
			return errors.New("sim: scan: unexpected message")
		}
		found(d)
	}
}

// Connect opens a link to the device at address through the remote air.
func (rm *Remote) Connect(ctx context.Context, address string) (sdk.BLELink, error) {
	conn, r, err := rm.open(ctx, msgConnect, []byte(address))
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	typ, payload, err := readMsg(r)
	if !stop() {
		conn.Close()
		return nil, ctx.Err()
	}
	switch {
	case err != nil:
		conn.Close()
		return nil, fmt.Errorf("sim: connect: %w", err)
	case typ == msgError:
		conn.Close()
		return nil, payloadError(payload)
	case typ != msgConnected || len(payload) != 2:
		conn.Close()
		return nil, errors.New("sim: connect: unexpected answer")
	}
	l := &remoteLink{
		conn:    conn,
		mtu:     int(binary.BigEndian.Uint16(payload)),
		frames:  make(chan []byte, 256),
		fwAcks:  make(chan []byte, 256),
		replies: make(chan reply, 1),
		done:    make(chan struct{}),
		closing: make(chan struct{}),
	}
	go l.read(r)
	return l, nil
}

type reply struct {
	typ     byte
	payload []byte
}

// remoteLink is a link over a socket. Like ATT, one request (read or write)
// is outstanding at a time; one abandoned midway (ctx ended) leaves the
// bearer unusable, so the link is closed, as ATT does after a timeout.
type remoteLink struct {
	conn    net.Conn
	mtu     int
	frames  chan []byte
	fwAcks  chan []byte
	replies chan reply
	done    chan struct{} // closed when the socket is gone
	closing chan struct{} // closed by Close
	once    sync.Once
	reqMu   sync.Mutex
}

func (l *remoteLink) read(r *bufio.Reader) {
	defer close(l.frames)
	defer close(l.fwAcks)
	defer close(l.done)
	defer l.conn.Close()
	for {
		typ, payload, err := readMsg(r)
		if err != nil {
			return
		}
		if typ == msgNotify || typ == msgNotifyFirmware {
			ch := l.frames
			if typ == msgNotifyFirmware {
				ch = l.fwAcks
			}
			select {
			case ch <- payload:
			case <-l.closing: // nobody reads any more: drop until the air hangs up
			}
			continue
		}
		select {
		case l.replies <- reply{typ, payload}:
		default: // an answer nobody asked for: the bearer is confused
			return
		}
	}
}

func (l *remoteLink) request(ctx context.Context, typ byte, payload []byte, want byte) ([]byte, error) {
	l.reqMu.Lock()
	defer l.reqMu.Unlock()
	select {
	case <-l.done:
		return nil, ErrClosed
	default:
	}
	if err := writeMsg(l.conn, typ, payload); err != nil {
		return nil, ErrClosed
	}
	select {
	case rep := <-l.replies:
		switch rep.typ {
		case want:
			return rep.payload, nil
		case msgError:
			return nil, payloadError(rep.payload)
		}
		l.conn.Close()
		return nil, errors.New("sim: unexpected answer")
	case <-l.done:
		return nil, ErrClosed
	case <-ctx.Done():
		l.conn.Close()
		return nil, ctx.Err()
	}
}

func (l *remoteLink) ReadInfo(ctx context.Context) ([]byte, error) {
	return l.request(ctx, msgRead, nil, msgInfo)
}

func (l *remoteLink) WriteFrame(ctx context.Context, frame []byte) error {
	if err := checkFrame(frame, l.mtu); err != nil {
		return err
	}
	_, err := l.request(ctx, msgWrite, frame, msgWritten)
	return err
}

func (l *remoteLink) ReadFirmware(ctx context.Context) ([]byte, error) {
	return l.request(ctx, msgReadFirmware, nil, msgFirmware)
}

func (l *remoteLink) WriteFirmware(ctx context.Context, frame []byte) error {
	if err := checkFrame(frame, l.mtu); err != nil {
		return err
	}
	_, err := l.request(ctx, msgWriteFirmware, frame, msgWritten)
	return err
}

func (l *remoteLink) FirmwareAcks() <-chan []byte { return l.fwAcks }

var _ sdk.FirmwareLink = (*remoteLink)(nil)

func (l *remoteLink) Frames() <-chan []byte { return l.frames }
func (l *remoteLink) MTU() int              { return l.mtu }

// Close disconnects. It half-closes the socket and waits (a little) for
// the air to hang up, so the device is free for another central once Close
// returns, as with the in-process central.
func (l *remoteLink) Close() error {
	l.once.Do(func() { close(l.closing) })
	if hc, ok := l.conn.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
		select {
		case <-l.done:
		case <-time.After(2 * time.Second):
		}
	}
	l.conn.Close()
	<-l.done
	return nil
}
