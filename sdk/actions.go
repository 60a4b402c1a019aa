package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/mountd/mountd/protocol"
)

// Outcome is what an action achieved: the mount's answer and the states it
// reported afterwards (sent on to the API).
type Outcome struct {
	Result CommandResult
	States []protocol.BLEStateEntry
}

// ReleaseHelmet unlocks the mount and waits until it reports the helmet
// gone and the lock open.
func (c *Client) ReleaseHelmet(ctx context.Context, uid string) (Outcome, error) {
	return c.run(ctx, uid, string(protocol.CmdReleaseHelmet), nil, func(s map[string]string) bool {
		return s[string(protocol.StateMountLocked)] == "0" && s[string(protocol.StateHelmetMounted)] == "0"
	})
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
// answer. No token check: the command came from the API already.
func (c *Client) Deliver(ctx context.Context, uid string, cmd protocol.BLECommand) (CommandResult, error) {
	d, err := c.connected(uid)
	if err != nil {
		return CommandResult{}, err
	}
	res, _, err := c.write(ctx, d, cmd, nil)
	return res, err
}

// run is every action's path: token check with the identity provider,
// command from the API, write over BLE, wait for the mount's confirmation,
// report the resulting states.
func (c *Client) run(ctx context.Context, uid, code string, params map[string]string, confirmed func(map[string]string) bool) (Outcome, error) {
	if err := c.api.validate(ctx, uid); err != nil {
		c.engine.publish(ErrorEvent{UID: uid, Err: err, At: time.Now()})
		return Outcome{}, err
	}
	d, err := c.connected(uid)
	if err != nil {
		return Outcome{}, err
	}
	cmd, err := c.api.command(ctx, uid, code, params)
	if err != nil {
		return Outcome{}, err
	}
	res, states, err := c.write(ctx, d, cmd, confirmed)
	if err != nil {
		return Outcome{Result: res}, err
	}
	if len(states) > 0 {
		if err := c.api.report(ctx, uid, states); err != nil {
			return Outcome{Result: res, States: states}, fmt.Errorf("sdk: the mount confirmed, but reporting its states failed: %w", err)
		}
	}
	return Outcome{Result: res, States: states}, nil
}

// write sends cmd and waits for the mount's result for its nonce, then (when
// confirmed is set) for states that satisfy it.
func (c *Client) write(ctx context.Context, d *device, cmd protocol.BLECommand, confirmed func(map[string]string) bool) (CommandResult, []protocol.BLEStateEntry, error) {
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	raw, err := json.Marshal(cmd)
	if err != nil {
		return CommandResult{}, nil, err
	}
	msgs, stop := d.watch()
	defer stop()
	if err := d.send(ctx, raw); err != nil {
		return CommandResult{}, nil, err
	}
	payload, _ := protocol.ParsePayload(cmd.Payload) // a malformed one is refused by the mount
	nonce := payload.Nonce
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConfirmTimeout)
	defer cancel()
	var result *CommandResult
	var last []protocol.BLEStateEntry
	for {
		select {
		case <-ctx.Done():
			if result != nil {
				return *result, last, fmt.Errorf("%w: no confirming state after %s", ErrTimeout, cmd.Code)
			}
			return CommandResult{}, nil, fmt.Errorf("%w: no answer to %s", ErrTimeout, cmd.Code)
		case <-d.done:
			return CommandResult{}, nil, fmt.Errorf("%w: %s disconnected", ErrNotConnected, d.uid)
		case m := <-msgs:
			switch {
			case m.Type == protocol.BLEMessageResult && m.Nonce == nonce:
				result = &CommandResult{Code: m.Code, Nonce: m.Nonce, Accepted: m.Accepted, Reason: m.Reason}
				if !m.Accepted {
					return *result, nil, &RefusedError{Code: m.Code, Reason: m.Reason}
				}
				if confirmed == nil {
					return *result, nil, nil // nothing further to wait for
				}
			case m.Type == protocol.BLEMessageStates && result != nil:
				last = m.States
				if confirmed(byCode(m.States)) {
					return *result, last, nil
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
}

// Associate associates a mount nearby with the token's account: it connects,
// reads the mount's info characteristic and requests the association with
// what the mount says of itself (serial number, MAC address, model, firmware
// and software revision; name is the operator's), delivers ASSOCIATE_OWNER
// over BLE and confirms. It needs an owner token.
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
	res, err := c.Deliver(ctx, uid, cmds[0])
	if err != nil {
		return Association{}, err
	}
	if !res.Accepted {
		return Association{Info: info, Delivered: res}, fmt.Errorf("sdk: the mount refused ASSOCIATE_OWNER: %s", res.Reason)
	}
	out := Association{Info: info, Delivered: res}
	if err := c.api.do(ctx, http.MethodPost, "/mounts/"+url.PathEscape(uid)+"/confirm-association", nil, &out.Mount); err != nil {
		return out, err
	}
	return out, nil
}

// AssociationRequest is the POST /mounts body for a mount as its info
// characteristic describes it; empty fields are left out, so the stored
// ones stay.
func AssociationRequest(info protocol.BLEInfo) map[string]any {
	body := map[string]any{"uid": info.UID}
	for field, v := range map[string]string{"serialNumber": info.SerialNumber, "macAddress": info.MACAddress,
		"modelNumber": info.ModelNumber, "firmwareRevision": info.FirmwareRevision, "softwareRevision": info.SoftwareRevision} {
		if v != "" {
			body[field] = v
		}
	}
	return body
}
