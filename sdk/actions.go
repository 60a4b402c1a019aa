package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Outcome is what an action achieved: the mount's answer and the states it
// notified afterwards, both carried to the API as the mount said them.
type Outcome struct {
	Result CommandResult
	States []protocol.BLEStateEntry
	// Report is the mount's states message as uploaded (signed fields
	// unchanged); nil when the mount notified none for this command.
	Report *protocol.SignedStates
	// Pending is how many of the action's uploads (the receipt, the
	// report) wait in the upload queue; 0 when the API has them all.
	Pending int
	// Offline is true when the action used a stored grant because the API
	// did not answer (Result then carries the mount's offline receipt).
	Offline bool
}

// ReleaseHelmet unlocks the mount and waits until it reports the helmet
// gone and the lock open. When the API does not answer (a network error,
// a 5xx, a 401 or an expired token; never a 403 or a 404) and the phone
// holds a grant for the mount, it uses the grant instead (Outcome.Offline):
// the mount judges it alone and signs an offline receipt, carried to the
// API with the mount's log.
func (c *Client) ReleaseHelmet(ctx context.Context, uid string) (Outcome, error) {
	out, err := c.run(ctx, uid, string(protocol.CmdReleaseHelmet), nil, helmetReleased)
	var down *apiDown
	if !errors.As(err, &down) {
		return out, err
	}
	g, ok := c.storedGrant(uid)
	if !ok {
		return out, err
	}
	return c.releaseOffline(ctx, uid, g)
}

// helmetReleased says whether latest states show the helmet gone and the
// lock open: what a RELEASE_HELMET waits for.
func helmetReleased(s map[string]string) bool {
	return s[string(protocol.StateMountLocked)] == "0" && s[string(protocol.StateHelmetMounted)] == "0"
}

// ConfigureAlarm sets the alarm's mode (OFF, ON, SILENT), sensitivity and
// volume (LOW, MEDIUM, HIGH).
func (c *Client) ConfigureAlarm(ctx context.Context, uid, mode, sensitivity, volume string) (Outcome, error) {
	return c.run(ctx, uid, string(protocol.CmdConfigureAlarm),
		map[string]string{"alarmMode": mode, "alarmSensitivity": sensitivity, "alarmVolume": volume}, nil)
}

// SetRFIDMode sets the NFC reader's mode (NORMAL, LEARN, DISABLED).
func (c *Client) SetRFIDMode(ctx context.Context, uid, mode string) (Outcome, error) {
	return c.run(ctx, uid, string(protocol.CmdSetRFIDMode), map[string]string{"rfidMode": mode}, nil)
}

// SyncNFCTags sends the mount its whole authorised tag list from the API.
func (c *Client) SyncNFCTags(ctx context.Context, uid string) (Outcome, error) {
	return c.run(ctx, uid, string(protocol.CmdSyncNfcTags), nil, nil)
}

// Deliver writes a command obtained elsewhere (an operator's
// ASSOCIATE_OWNER from POST /mounts) to a connected mount and waits for its
// answer. No token check: the command came from the API already. Nothing
// is uploaded: the result's Receipt (when the mount signed one) belongs to
// an association the API confirms afterwards; hand it to Upload then.
func (c *Client) Deliver(ctx context.Context, uid string, cmd protocol.BLECommand) (CommandResult, error) {
	d, err := c.connected(uid)
	if err != nil {
		return CommandResult{}, err
	}
	dl, err := c.write(ctx, d, cmd, nil)
	if dl.result == nil {
		return CommandResult{}, err
	}
	return resultOf(*dl.result), err // a refusal is a *RefusedError
}

// run is every action's path: token check with the identity provider,
// command from the API, write over BLE, wait for the mount's confirmation,
// upload its receipt and its states.
func (c *Client) run(ctx context.Context, uid, code string, params map[string]string, confirmed func(map[string]string) bool) (Outcome, error) {
	if err := c.api.validate(ctx, uid); err != nil {
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return Outcome{}, unanswered(ctx, err)
	}
	d, err := c.connected(uid)
	if err != nil {
		return Outcome{}, err
	}
	cmd, err := c.api.command(ctx, uid, code, params)
	if err != nil {
		return Outcome{}, unanswered(ctx, err)
	}
	c.freshen()
	dl, err := c.write(ctx, d, cmd, confirmed)
	var out Outcome
	if dl.result != nil {
		out.Result = resultOf(*dl.result)
	}
	if dl.states != nil {
		out.States = dl.states.States
		out.Report = reportOf(*dl.states)
	}
	pending, uerr := c.up.carry(ctx, c.cfg.UploadWait, dl.uploads(uid))
	out.Pending = pending
	if uerr != nil {
		err = errors.Join(err, fmt.Errorf("sdk: the mount answered, but uploading what it said failed: %w", uerr))
	}
	c.carryLog(ctx, d)
	return out, err
}

// delivery is what a mount notified about one command: its result and
// the states that followed it (the last of them), as received.
type delivery struct {
	result *protocol.BLEMessage
	states *protocol.BLEMessage
}

// uploads are what the mount said, in the order it said it: the receipt
// (a signed result only), then the states message.
func (dl delivery) uploads(uid string) []Upload {
	var out []Upload
	if dl.result != nil {
		if r := receiptOf(*dl.result); r != nil {
			out = append(out, Upload{UID: uid, Receipt: r})
		}
	}
	if dl.states != nil {
		out = append(out, Upload{UID: uid, States: reportOf(*dl.states)})
	}
	return out
}

// write sends cmd and waits for the mount's result for its nonce, then (when
// confirmed is set) for states that satisfy it. A refusal is a *RefusedError
// (with the result in the delivery).
func (c *Client) write(ctx context.Context, d *device, cmd protocol.BLECommand, confirmed func(map[string]string) bool) (delivery, error) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	payload, _ := protocol.ParsePayload(cmd.Payload) // a malformed one is refused by the mount
	nonce := payload.Nonce
	return c.exchange(ctx, d, cmd, cmd.Code, func(m protocol.BLEMessage) bool {
		return m.Type == protocol.BLEMessageResult && m.Nonce == nonce
	}, confirmed)
}

// exchange writes msg (as JSON; d.writeMu held) and waits for the mount's
// answer, the first message answer says is one, then (when confirmed is
// set) for states that satisfy it. An answer not accepted is a
// *RefusedError (with the answer in the delivery); what names the write in
// errors.
func (c *Client) exchange(ctx context.Context, d *device, msg any, what string, answer func(protocol.BLEMessage) bool,
	confirmed func(map[string]string) bool) (delivery, error) {
	var dl delivery
	raw, err := json.Marshal(msg)
	if err != nil {
		return dl, err
	}
	msgs, stop := d.watch()
	defer stop()
	if err := d.send(ctx, raw); err != nil {
		return dl, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConfirmTimeout)
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			if dl.result != nil {
				return dl, fmt.Errorf("%w: no confirming state after %s", ErrTimeout, what)
			}
			return dl, fmt.Errorf("%w: no answer to %s", ErrTimeout, what)
		case <-d.done:
			return dl, fmt.Errorf("%w: %s disconnected", ErrNotConnected, d.uid)
		case m := <-msgs:
			switch {
			case dl.result == nil && answer(m):
				dl.result = &m
				if !m.Accepted {
					return dl, &RefusedError{Code: m.Code, Reason: m.Reason}
				}
				if confirmed == nil {
					return dl, nil // nothing further to wait for
				}
			case m.Type == protocol.BLEMessageStates && dl.result != nil:
				dl.states = &m
				if confirmed(byCode(m.States)) {
					return dl, nil
				}
			}
		}
	}
}

func byCode(states []protocol.BLEStateEntry) map[string]string {
	out := make(map[string]string, len(states))
	for _, s := range states {
		out[s.Code] = s.Value
	}
	return out
}

// Association is what Associate did: the mount as the API confirmed it and
// the mount's answer to ASSOCIATE_OWNER.
type Association struct {
	Info      protocol.BLEInfo
	Delivered CommandResult
	Mount     json.RawMessage // the confirmed mount, as the API answered
	// Pending is how many of the mount's receipt and states wait in the
	// upload queue; 0 when the API has them all.
	Pending int
}

// Associate associates a mount nearby with the token's account: it connects,
// reads the mount's info characteristic and requests the association with
// what the mount says of itself (serial number, MAC address, model, firmware
// and software revision, device key; name is the operator's), delivers
// ASSOCIATE_OWNER over BLE, confirms, and then uploads the mount's receipt
// and the states it notified (its signatures verify against the device key
// only once the association is confirmed). It needs an owner token.
func (c *Client) Associate(ctx context.Context, uid, name string) (Association, error) {
	info, err := c.Connect(ctx, uid)
	if err != nil {
		return Association{}, err
	}
	body := AssociationRequest(info)
	if name != "" {
		body["name"] = name
	}
	var cmds []protocol.BLECommand
	if err := c.api.do(ctx, http.MethodPost, "/mounts", body, &cmds); err != nil {
		return Association{}, err
	}
	if len(cmds) != 1 || cmds[0].Code != string(protocol.CmdAssociateOwner) {
		return Association{}, fmt.Errorf("sdk: the API answered no ASSOCIATE_OWNER for %s", uid)
	}
	d, err := c.connected(uid)
	if err != nil {
		return Association{}, err
	}
	// The mount notifies its states after ASSOCIATE_OWNER: wait for them,
	// so that they are uploaded signed with the key just pinned.
	dl, err := c.write(ctx, d, cmds[0], func(map[string]string) bool { return true })
	out := Association{Info: info}
	if dl.result != nil {
		out.Delivered = resultOf(*dl.result)
	}
	if errors.Is(err, ErrTimeout) && out.Delivered.Accepted {
		err = nil // accepted, without states after it
	}
	if err != nil {
		return out, err
	}
	if err := c.api.do(ctx, http.MethodPost, "/mounts/"+url.PathEscape(uid)+"/confirm-association", nil, &out.Mount); err != nil {
		return out, err
	}
	pending, err := c.up.carry(ctx, c.cfg.UploadWait, dl.uploads(uid))
	out.Pending = pending
	if err != nil {
		return out, fmt.Errorf("sdk: associated, but uploading what the mount said failed: %w", err)
	}
	return out, nil
}

// AssociationRequest is the POST /mounts body for a mount as its info
// characteristic describes it, its device key (devicePublicKey) included;
// empty fields are left out, so the stored ones stay.
func AssociationRequest(info protocol.BLEInfo) map[string]any {
	body := map[string]any{"uid": info.UID}
	for field, v := range map[string]string{"serialNumber": info.SerialNumber, "macAddress": info.MACAddress,
		"modelNumber": info.ModelNumber, "firmwareRevision": info.FirmwareRevision, "softwareRevision": info.SoftwareRevision,
		"devicePublicKey": info.DevicePublicKey} {
		if v != "" {
			body[field] = v
		}
	}
	return body
}
