package sdk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Errors of InstallFirmware; wrap-aware.
var (
	// ErrBadImage: the downloaded image does not match the command's size
	// or SHA-256 (nothing was sent), or the mount said so (a *RefusedError
	// with reason "bad image" then).
	ErrBadImage = errors.New("sdk: the firmware image does not match the command")
	// ErrNoFirmwareLink: the radio's link has no firmware characteristic.
	ErrNoFirmwareLink = errors.New("sdk: the link has no firmware characteristic")
	// ErrTransferLost: the mount no longer holds the transfer (it expired,
	// restarted, or another command took over); a new command is needed.
	ErrTransferLost = errors.New("sdk: the mount no longer holds the transfer")
)

// MaxInstallReconnects bounds how often one InstallFirmware reconnects
// after a lost link.
const MaxInstallReconnects = 20

// InstallProgress is called as the image goes out: sent bytes of total
// (sent may go back when the mount asks to resume from an earlier offset).
type InstallProgress func(sent, total int64)

// InstallOption configures InstallFirmware.
type InstallOption func(*installConfig)

type installConfig struct {
	progress    InstallProgress
	restartWait time.Duration
}

// WithProgress reports the bytes sent as the image streams.
func WithProgress(f InstallProgress) InstallOption {
	return func(c *installConfig) { c.progress = f }
}

// WithRestartWait bounds the wait for the mount to come back on the new
// revision after its receipt (default Config.RestartWait).
func WithRestartWait(d time.Duration) InstallOption {
	return func(c *installConfig) { c.restartWait = d }
}

// Installation is what InstallFirmware did.
type Installation struct {
	UID      string `json:"uid"`
	Revision string `json:"revision"`
	Size     int64  `json:"size"`
	// Result is the mount's answer at the end of the transfer (its receipt).
	Result CommandResult `json:"result"`
	// Report is the mount's signed states on the new revision, as uploaded;
	// nil when it did not come back.
	Report *protocol.SignedStates `json:"report,omitempty"`
	// Reconnects counts the links lost and resumed during the transfer.
	Reconnects int `json:"reconnects"`
	// Pending is how many of the uploads (receipt, report) wait in the queue.
	Pending int `json:"pending"`
}

// InstallFirmware installs software revision on the mount uid
// (docs/ble.md, "Firmware"): it gets a signed INSTALL_FIRMWARE (owners
// through /query; otherwise the one pending-commands offers), downloads
// the image (bounded by the command's size, its SHA-256 checked before
// anything is sent), writes the command, streams the image over the
// firmware characteristic, reconnecting and resuming from the mount's
// offset when the link drops, waits for the receipt and for the mount's
// signed report on the new revision (reconnecting after its restart), and
// uploads both through the upload queue. It connects by itself.
func (c *Client) InstallFirmware(ctx context.Context, uid, revision string, opts ...InstallOption) (Installation, error) {
	if err := c.api.validate(ctx, uid); err != nil {
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return Installation{UID: uid, Revision: revision}, err
	}
	if _, err := c.Connect(ctx, uid); err != nil {
		return Installation{UID: uid, Revision: revision}, err
	}
	cmd, err := c.installCommand(ctx, uid, revision)
	if err == nil {
		err = checkInstallCommand(cmd, uid, revision)
	}
	if err != nil {
		return Installation{UID: uid, Revision: revision}, err
	}
	inst, _, err := c.install(ctx, uid, cmd, opts...)
	return inst, err
}

// installCommand gets a signed INSTALL_FIRMWARE for revision: /query for
// owners; a token that may not query it finds it among pending-commands.
func (c *Client) installCommand(ctx context.Context, uid, revision string) (protocol.BLECommand, error) {
	cmd, err := c.api.command(ctx, uid, string(protocol.CmdInstallFirmware), map[string]string{"revision": revision})
	var apiErr *APIError
	if err == nil || !errors.As(err, &apiErr) || apiErr.Status != http.StatusForbidden {
		return cmd, err
	}
	var page struct {
		Commands []pendingCommand `json:"commands"`
	}
	if err := c.api.do(ctx, http.MethodGet, "/mounts/"+url.PathEscape(uid)+"/pending-commands", nil, &page); err != nil {
		return protocol.BLECommand{}, err
	}
	for _, pc := range page.Commands {
		if p, ok := protocol.ParsePayload(pc.Payload); ok && pc.Code == string(protocol.CmdInstallFirmware) && p.Params["revision"] == revision {
			return pc.BLECommand, nil
		}
	}
	return protocol.BLECommand{}, fmt.Errorf("sdk: no INSTALL_FIRMWARE for %s is offered to %s (and the token may not ask for one)", revision, uid)
}

// checkInstallCommand checks what the server signed before anything is
// downloaded or written: an INSTALL_FIRMWARE (code and payload) for uid
// and, when revision is set, for that revision.
func checkInstallCommand(cmd protocol.BLECommand, uid, revision string) error {
	p, ok := protocol.ParsePayload(cmd.Payload)
	switch {
	case !ok || cmd.Code != string(protocol.CmdInstallFirmware) || p.Code != string(protocol.CmdInstallFirmware):
		return fmt.Errorf("sdk: the server's command is not an INSTALL_FIRMWARE (code %q)", cmd.Code)
	case p.MountUID != uid:
		return fmt.Errorf("sdk: the server's INSTALL_FIRMWARE is for mount %s, not %s", p.MountUID, uid)
	case revision != "" && p.Params["revision"] != revision:
		return fmt.Errorf("sdk: the server's INSTALL_FIRMWARE is for revision %s, not %s", p.Params["revision"], revision)
	}
	return nil
}

// install runs a signed INSTALL_FIRMWARE (InstallFirmware's, or one Sync
// got from pending-commands) at a connected mount. written tells whether
// it got as far as writing the command to the mount: an error before
// (bad parameters, the download, a link without the firmware
// characteristic) left the mount untouched.
func (c *Client) install(ctx context.Context, uid string, cmd protocol.BLECommand, opts ...InstallOption) (inst Installation, written bool, err error) {
	cfg := installConfig{restartWait: c.cfg.RestartWait}
	for _, o := range opts {
		o(&cfg)
	}
	if err := checkInstallCommand(cmd, uid, ""); err != nil {
		return Installation{UID: uid}, false, err
	}
	p, _ := protocol.ParsePayload(cmd.Payload)
	revision, sum := p.Params["revision"], p.Params["sha256"]
	size, err := strconv.ParseInt(p.Params["size"], 10, 64)
	out := Installation{UID: uid, Revision: revision, Size: size}
	if err != nil || size <= 0 || size > protocol.FirmwareMaxSize || !protocol.ValidCommandParam(protocol.CmdInstallFirmware, "sha256", sum) {
		return out, false, fmt.Errorf("sdk: INSTALL_FIRMWARE with bad parameters (size %q)", p.Params["size"])
	}
	d, err := c.connected(uid)
	if err != nil {
		return out, false, err
	}
	image, err := c.download(ctx, d.info.ModelNumber, revision, size, sum)
	if err != nil {
		return out, false, err
	}
	if _, ok := d.link.(FirmwareLink); !ok {
		return out, false, ErrNoFirmwareLink
	}

	// The command: a refusal is final (its receipt is uploaded); an
	// acceptance is no receipt yet, the mount waits for the image.
	dl, err := c.write(ctx, d, cmd, nil)
	if dl.result == nil {
		return out, true, err
	}
	if !dl.result.Accepted {
		out.Result = resultOf(*dl.result)
		pending, uerr := c.up.carry(context.WithoutCancel(ctx), c.cfg.UploadWait, dl.uploads(uid))
		out.Pending = pending
		return out, true, errors.Join(err, uerr)
	}

	result, last, err := c.stream(ctx, uid, d, p.Nonce, revision, image, cfg, &out)
	var uploads []Upload
	if result != nil {
		out.Result = resultOf(*result)
		uploads = delivery{result: result}.uploads(uid)
		if !result.Accepted && err == nil {
			err = &RefusedError{Code: result.Code, Reason: result.Reason}
		}
	}
	if err == nil {
		var report *protocol.BLEMessage
		restarting := last
		if result == nil {
			restarting = nil // it restarted while the link was down: last is its new link
		}
		report, err = c.awaitRevision(ctx, uid, revision, restarting, cfg.restartWait)
		if report != nil {
			out.Report = reportOf(*report)
			uploads = append(uploads, Upload{UID: uid, States: out.Report})
		}
	}
	pending, uerr := c.up.carry(context.WithoutCancel(ctx), c.cfg.UploadWait, uploads)
	out.Pending = pending
	if uerr != nil {
		uerr = fmt.Errorf("sdk: the mount answered, but uploading what it said failed: %w", uerr)
	}
	return out, true, errors.Join(err, uerr)
}

// download fetches the image of revision through a download link, reading
// at most size bytes, and checks its size and SHA-256.
func (c *Client) download(ctx context.Context, model, revision string, size int64, sum string) ([]byte, error) {
	q := url.Values{"modelNumber": {model}, "softwareRevision": {revision}}
	var dl struct {
		DownloadLink string `json:"downloadLink"`
	}
	if err := c.api.do(ctx, http.MethodGet, "/firmware/download?"+q.Encode(), nil, &dl); err != nil {
		return nil, err
	}
	base, err := url.Parse(c.cfg.BaseURL + "/")
	if err != nil {
		return nil, err
	}
	link, err := base.Parse(dl.DownloadLink)
	if err != nil || dl.DownloadLink == "" {
		return nil, fmt.Errorf("sdk: bad download link %q", dl.DownloadLink)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link.String(), nil)
	if err != nil {
		return nil, err
	}
	res, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sdk: firmware download: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("sdk: firmware download answered %d", res.StatusCode)
	}
	image, err := io.ReadAll(io.LimitReader(res.Body, size+1))
	if err != nil {
		return nil, fmt.Errorf("sdk: firmware download: %w", err)
	}
	got := sha256.Sum256(image)
	if int64(len(image)) != size || hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("%w: downloaded %d bytes, sha256 %x", ErrBadImage, len(image), got[:8])
	}
	return image, nil
}

// stream sends image from the mount's offset on, reconnecting when the
// link drops, until the mount's result for nonce. It returns the device
// (link) it ended on.
func (c *Client) stream(ctx context.Context, uid string, d *device, nonce, revision string, image []byte,
	cfg installConfig, out *Installation) (*protocol.BLEMessage, *device, error) {
	size := int64(len(image))
	before := d.info.SoftwareRevision
	for {
		res, err := c.streamOnce(ctx, d, nonce, image, cfg)
		if errors.Is(err, ErrTransferLost) && before != revision && c.installedMeanwhile(ctx, d, revision) {
			// It completed unheard (the receipt lost, the restart still to
			// come or just done): its report will tell, on a fresh link
			// (this one's info was read before).
			nd, err := c.reconnect(ctx, uid, d)
			return nil, nd, err
		}
		if res != nil || err == nil || ctx.Err() != nil || !errors.Is(err, ErrNotConnected) {
			return res, d, err
		}
		if out.Reconnects >= MaxInstallReconnects {
			return nil, d, err
		}
		out.Reconnects++
		if d, err = c.reconnect(ctx, uid, d); err != nil {
			return nil, d, err
		}
		if d.info.SoftwareRevision == revision && before != revision {
			// It completed and restarted while the link was down: its
			// receipt is lost with it, its report will tell.
			return nil, d, nil
		}
		if cfg.progress != nil {
			cfg.progress(0, size)
		}
	}
}

// installedMeanwhile reads the info characteristic again: a mount that
// no longer holds the transfer because it finished it tells the new
// revision there (a link's info may be read just before that).
func (c *Client) installedMeanwhile(ctx context.Context, d *device, revision string) bool {
	d.writeMu.Lock()
	raw, err := d.link.ReadInfo(ctx)
	d.writeMu.Unlock()
	var info protocol.BLEInfo
	return err == nil && json.Unmarshal(raw, &info) == nil && info.SoftwareRevision == revision
}

// streamOnce is one link's share of a transfer. A lost link is an
// ErrNotConnected.
func (c *Client) streamOnce(ctx context.Context, d *device, nonce string, image []byte, cfg installConfig) (res *protocol.BLEMessage, err error) {
	fl := d.link.(FirmwareLink)
	msgs, stop := d.watch()
	defer stop()
	defer func() {
		// The mount restarts right after its result: the link may go while
		// the SDK still writes the last frame or reads the status, with the
		// result already read from it (it is in msgs once d.done is closed).
		if res == nil && errors.Is(err, ErrNotConnected) {
			<-d.done
			if m := resultIn(msgs, nonce); m != nil {
				res, err = m, nil
			}
		}
	}()
	lost := func(err error) error {
		select {
		case <-d.done:
			return fmt.Errorf("%w: %s disconnected", ErrNotConnected, d.uid)
		default:
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		_ = d.close() // an ATT request failed: the link is unusable
		<-d.done
		return fmt.Errorf("%w: %s: %v", ErrNotConnected, d.uid, err)
	}
	// status reads where the mount stands: the authority on the offset.
	status := func() (protocol.FirmwareStatus, error) {
		raw, err := d.readFirmware(ctx, fl)
		if err != nil {
			return protocol.FirmwareStatus{}, lost(err)
		}
		var st protocol.FirmwareStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return st, fmt.Errorf("sdk: firmware status: %w", err)
		}
		if st.State != protocol.FirmwareReceiving || st.Nonce != nonce || st.Size != int64(len(image)) {
			return st, ErrTransferLost
		}
		return st, nil
	}
	st, err := status()
	if err != nil {
		return nil, err
	}
	for len(d.acks) > 0 { // acknowledgements of an earlier link
		<-d.acks
	}
	size := int64(len(image))
	chunk := int64(protocol.FirmwareChunk(fl.MTU()))
	offset := st.Offset
	// resumed is the offset last read from the status: a "wrong offset"
	// at or below it is a late acknowledgement of a frame sent before that
	// read, and changes nothing. (The mount ignores frames it holds
	// already, so resending never causes more acknowledgements.)
	resumed := st.Offset
	// rewind answers a "wrong offset" (a frame lost on the way): the
	// status says where to resume.
	rewind := func(a protocol.FirmwareAck, always bool) error {
		if !always && a.Offset <= resumed {
			return nil
		}
		st, err := status()
		if err != nil {
			return err
		}
		resumed = st.Offset
		if st.Offset < offset {
			offset = st.Offset
			if cfg.progress != nil {
				cfg.progress(offset, size)
			}
		}
		return nil
	}
	const heldPoll = 100 * time.Millisecond
	held, heldMax := 0, int(c.cfg.ConfirmTimeout/heldPoll)+1
	wait := time.NewTimer(c.cfg.ConfirmTimeout)
	defer wait.Stop()
	for {
		for offset < size {
			select {
			case a := <-d.acks:
				switch a.Kind {
				case protocol.AckWrongOffset:
					err := rewind(a, false)
					if errors.Is(err, ErrTransferLost) {
						// Ended meanwhile (frames on the way completed it):
						// wait for its result on this link.
						offset = size
						continue
					}
					if err != nil {
						return nil, err
					}
					continue
				case protocol.AckNoTransfer:
					// The mount may not have noticed yet that the link this
					// transfer belonged to is gone: while the status still
					// shows it, wait and resume (bounded by ConfirmTimeout).
					if _, err := status(); err != nil {
						return nil, err
					}
					if held++; held > heldMax {
						return nil, fmt.Errorf("%w: %s (held by another link)", ErrTransferLost, a.Kind)
					}
					select {
					case <-ctx.Done():
						return nil, ctx.Err()
					case <-time.After(heldPoll):
					}
					for len(d.acks) > 0 { // answers to frames sent before
						<-d.acks
					}
					st, err := status()
					if err != nil {
						return nil, err
					}
					offset, resumed = st.Offset, st.Offset
					continue
				case protocol.AckExpired:
					return nil, fmt.Errorf("%w: %s", ErrTransferLost, a.Kind)
				}
			default:
			}
			end := min(offset+chunk, size)
			if err := d.writeFirmware(ctx, fl, protocol.FirmwareFrame(offset, image[offset:end])); err != nil {
				return nil, lost(err)
			}
			offset = end
			if cfg.progress != nil {
				cfg.progress(offset, size)
			}
		}
		// All sent: the mount answers the command's result (its receipt),
		// or says a frame was lost ("wrong offset"): the status tells
		// whether it still waits for bytes, and from where.
		wait.Reset(c.cfg.ConfirmTimeout)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-wait.C:
				return nil, fmt.Errorf("%w: no receipt after the image", ErrTimeout)
			case <-d.done: // the deferred check finds a result that came just before
				return nil, fmt.Errorf("%w: %s disconnected", ErrNotConnected, d.uid)
			case a := <-d.acks:
				switch a.Kind {
				case protocol.AckWrongOffset:
					err := rewind(a, true)
					switch {
					case errors.Is(err, ErrTransferLost):
						continue // it ended meanwhile: its result is on the way
					case err != nil:
						return nil, err
					case offset < size:
						break waiting
					}
				case protocol.AckNoTransfer, protocol.AckExpired:
					return nil, fmt.Errorf("%w: %s", ErrTransferLost, a.Kind)
				}
			case m := <-msgs:
				if m.Type == protocol.BLEMessageResult && m.Nonce == nonce {
					return &m, nil
				}
			}
		}
	}
}

// resultIn takes what msgs holds and returns the result for nonce, if any.
func resultIn(msgs <-chan protocol.BLEMessage, nonce string) *protocol.BLEMessage {
	for {
		select {
		case m := <-msgs:
			if m.Type == protocol.BLEMessageResult && m.Nonce == nonce {
				return &m
			}
		default:
			return nil
		}
	}
}

// reconnect waits for the old link to be gone and connects again, trying
// (at most every 100 ms) until ctx ends or Config.ReconnectWait passed;
// each attempt is bounded by Config.ConfirmTimeout.
func (c *Client) reconnect(ctx context.Context, uid string, old *device) (*device, error) {
	if old != nil {
		_ = old.close()
		<-old.done
		c.mu.Lock()
		if c.devices[uid] == old {
			delete(c.devices, uid)
		}
		c.mu.Unlock()
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ReconnectWait)
	defer cancel()
	for {
		attempt, stop := context.WithTimeout(ctx, c.cfg.ConfirmTimeout)
		_, err := c.Connect(attempt, uid)
		stop()
		if err == nil {
			if d, err := c.connected(uid); err == nil {
				return d, nil
			}
		} else if errors.Is(err, ErrClosed) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s did not come back: %v", ErrNotConnected, uid, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// awaitRevision waits, within wait, for the mount to come back after its
// restart and to notify states on revision; it returns that message.
// restarting is the link the receipt came on, which the restart drops;
// nil when the mount is back already.
func (c *Client) awaitRevision(ctx context.Context, uid, revision string, restarting *device, wait time.Duration) (*protocol.BLEMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	old := restarting
	if old != nil {
		select {
		case <-old.done: // the restart drops the link
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: the mount did not restart after its receipt", ErrTimeout)
		}
	}
	for {
		d, err := c.reconnect(ctx, uid, old)
		if err != nil {
			return nil, fmt.Errorf("sdk: the mount did not come back on %s: %w", revision, err)
		}
		old = d
		if d.info.SoftwareRevision != revision {
			return nil, fmt.Errorf("sdk: the mount came back on %s, not %s", d.info.SoftwareRevision, revision)
		}
		msgs, stop := d.watch()
		if m := d.lastStates(); m != nil && (m.SoftwareRevision == revision || m.Signature == "") {
			stop()
			return m, nil
		}
		for {
			select {
			case <-ctx.Done():
				stop()
				return nil, fmt.Errorf("%w: no report on %s", ErrTimeout, revision)
			case <-d.done:
			case m := <-msgs:
				if m.Type == protocol.BLEMessageStates && (m.SoftwareRevision == revision || m.Signature == "") {
					stop()
					return &m, nil
				}
				continue
			}
			break
		}
		stop()
	}
}
