package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// Offline access (CONTRACT §21; docs/ble.md, "Offline access"): a grant
// is a right, signed by the mount's owner key, that the phone keeps
// (Config.GrantDir or Config.Keeper) and carries to the mount when the API
// does not answer; the mount checks it alone and signs a receipt of every
// use, which any phone carries back to the API.
//
// On every connection to a mount with offline access the SDK writes a
// time token (when the API answers), then the newest revocation list it
// has if the mount's is older; after every action it carries the mount's
// log: the offline receipts the mount notifies are uploaded (queued when
// the API does not answer) and the API's ack written back.

const (
	// maxOfflineBatch bounds the offline receipts of one upload: a queued
	// item stays under maxItemBytes and the ack fits one BLE message.
	maxOfflineBatch = 100
	// listRefreshEvery: after a successful API call, the revocation lists
	// of the mounts the phone holds grants for are fetched again when
	// they were last fetched longer ago than this.
	listRefreshEvery = time.Minute
	// listRefreshWait bounds one background refresh of the lists.
	listRefreshWait = 30 * time.Second
	// maxHeldAcks bounds the acks waiting for their mount (oldest go).
	maxHeldAcks = 256
	// acksFile, in the queue directory, keeps them across restarts.
	acksFile = "acks.json"
)

// ErrNoKeeper: the Client has neither GrantDir nor Keeper, so no offline
// access.
var ErrNoKeeper = errors.New("sdk: no grant keeper (Config.GrantDir or Config.Keeper)")

// offlineAnswer is the API's answer to POST /mounts/{uid}/offline-receipts.
type offlineAnswer struct {
	Accepted   int `json:"accepted"`
	Duplicates int `json:"duplicates"`
	Rejected   []struct {
		Nonce  string `json:"nonce"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
	} `json:"rejected"`
	Ack *protocol.SignedText `json:"ack"`
}

// apiDown is an action's API call that did not answer in a way that lets
// ReleaseHelmet fall back to a stored grant (fallsBack).
type apiDown struct{ err error }

func (e *apiDown) Error() string { return e.err.Error() }
func (e *apiDown) Unwrap() error { return e.err }

// unanswered marks err as apiDown when it lets an action fall back.
func unanswered(ctx context.Context, err error) error {
	if fallsBack(ctx, err) {
		return &apiDown{err: err}
	}
	return err
}

// fallsBack applies §21's rule: a stored grant may stand in for the API on
// a network error (no answer: from the API, its identity provider or the
// token's source), a 5xx, or a 401 (an expired token too); never on a 403,
// a 404 or any other answer, nor when the caller gave up.
func fallsBack(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrMountNotAllowed) {
		return false
	}
	switch st := client.StatusOf(err); {
	case st == http.StatusUnauthorized || st >= 500:
		return true
	case st != 0:
		return false
	}
	var noAnswer *url.Error
	return errors.Is(err, errTokenExpired) || errors.As(err, &noAnswer)
}

// grantAnswer is a Grant as the API answers it.
type grantAnswer struct {
	ID        string     `json:"id"`
	UID       string     `json:"uid"`
	NotAfter  time.Time  `json:"notAfter"`
	RevokedAt *time.Time `json:"revokedAt"`
	Text      string     `json:"text"`
	Signature string     `json:"signature"`
}

// stored is the grant as a phone keeps it: its text must be a grant text
// of the same id and mount, and the rest is read from it (what the mount
// will check).
func (g grantAnswer) stored() (StoredGrant, error) {
	p, err := protocol.ParseGrantText(g.Text)
	if err != nil || p.ID != g.ID || p.UID != g.UID {
		return StoredGrant{}, fmt.Errorf("sdk: the API answered grant %q with a text that is not its own", g.ID)
	}
	return StoredGrant{ID: p.ID, UID: p.UID, RiderKey: p.RiderKey, Rights: p.Rights, NotBefore: p.NotBefore,
		NotAfter: p.NotAfter, Epoch: p.Epoch, Text: g.Text, Signature: g.Signature}, nil
}

func (c *Client) needKeeper() error {
	if c.keeper == nil {
		return ErrNoKeeper
	}
	return c.open()
}

// RiderKey is the phone's rider key as riderKey hex (the uncompressed
// SEC1 point, 130 lowercase hex): what an operator names in a grant. The
// key is made on first use and kept by the keeper.
func (c *Client) RiderKey() (string, error) {
	if err := c.needKeeper(); err != nil {
		return "", err
	}
	key, err := c.keeper.RiderKey()
	if err != nil {
		return "", err
	}
	return protocol.RiderKeyHex(publicKey(key))
}

// RequestGrant asks the API for a grant of RELEASE_HELMET on mount uid for
// this phone's rider key, valid from now to notAfter, and keeps it (it
// replaces the mount's previous grant), with the mount's revocation list.
// The token must be allowed to create grants there (an owner's, or a
// rider's token limited to the mount, within MOUNTD_GRANT_MAX_TTL).
func (c *Client) RequestGrant(ctx context.Context, uid string, notAfter time.Time) (StoredGrant, error) {
	riderKey, err := c.RiderKey()
	if err != nil {
		return StoredGrant{}, err
	}
	var answer grantAnswer
	body := map[string]any{"riderKey": riderKey, "notAfter": notAfter.UTC().Format(time.RFC3339Nano)}
	if err := c.api.do(ctx, http.MethodPost, "/mounts/"+url.PathEscape(uid)+"/grants", body, &answer); err != nil {
		return StoredGrant{}, err
	}
	g, err := answer.stored()
	if err != nil {
		return StoredGrant{}, err
	}
	if g.UID != uid || g.RiderKey != riderKey {
		return StoredGrant{}, fmt.Errorf("sdk: the API answered a grant of %s for another key", g.UID)
	}
	if err := c.keeper.PutGrant(g); err != nil {
		return g, err
	}
	if err := c.keepList(ctx, uid); err != nil {
		c.cfg.Logger.Debug("sdk: no revocation list with the grant", "uid", uid, "err", err)
	}
	return g, nil
}

// RefreshGrants fetches each grant held again (a re-signed text replaces
// the one held; a revoked, expired or unknown grant is dropped) and the
// revocation list of each mount a grant is kept for. It goes on past a
// grant the API does not answer for (kept as it is) and returns those
// errors joined.
func (c *Client) RefreshGrants(ctx context.Context) error {
	if err := c.needKeeper(); err != nil {
		return err
	}
	grants, err := c.keeper.Grants()
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range grants {
		var answer grantAnswer
		err := c.api.do(ctx, http.MethodGet, "/grants/"+url.PathEscape(g.ID), nil, &answer)
		switch {
		case client.StatusOf(err) == http.StatusNotFound:
			errs = append(errs, c.keeper.DeleteGrant(g.ID))
			continue
		case err != nil:
			errs = append(errs, fmt.Errorf("sdk: grant %s: %w", g.ID, err))
		case answer.RevokedAt != nil || !answer.NotAfter.After(time.Now()):
			errs = append(errs, c.keeper.DeleteGrant(g.ID))
			continue
		default:
			fresh, err := answer.stored()
			if err == nil {
				err = c.keeper.PutGrant(fresh)
			}
			errs = append(errs, err)
		}
		if err := c.keepList(ctx, g.UID); err != nil {
			errs = append(errs, fmt.Errorf("sdk: revocation list of %s: %w", g.UID, err))
		}
	}
	c.mu.Lock()
	c.listsAt = time.Now()
	c.mu.Unlock()
	return errors.Join(errs...)
}

// refreshLists fetches the revocation list of every mount the phone holds
// a grant for.
func (c *Client) refreshLists(ctx context.Context) error {
	grants, err := c.keeper.Grants()
	if err != nil {
		return err
	}
	var errs []error
	for _, g := range grants {
		if err := c.keepList(ctx, g.UID); err != nil {
			errs = append(errs, fmt.Errorf("sdk: revocation list of %s: %w", g.UID, err))
			if !client.Transient(err) {
				continue
			}
			break // the API does not answer: the others would not either
		}
	}
	return errors.Join(errs...)
}

// freshen starts a background refresh of the lists after a successful API
// call, when the last was longer ago than listRefreshEvery (one at a
// time; Close waits for it).
func (c *Client) freshen() {
	if c.keeper == nil {
		return
	}
	c.mu.Lock()
	if c.closed || c.refreshing || (!c.listsAt.IsZero() && time.Since(c.listsAt) < listRefreshEvery) {
		c.mu.Unlock()
		return
	}
	c.refreshing, c.listsAt = true, time.Now()
	c.bg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.bg.Done()
		ctx, cancel := context.WithTimeout(c.bgCtx, listRefreshWait)
		defer cancel()
		if err := c.refreshLists(ctx); err != nil {
			c.cfg.Logger.Debug("sdk: revocation lists not refreshed", "err", err)
		}
		c.mu.Lock()
		c.refreshing = false
		c.mu.Unlock()
	}()
}

// fetchList is the mount's current revocation list from the API.
func (c *Client) fetchList(ctx context.Context, uid string) (StoredRevocations, error) {
	var st protocol.SignedText
	if err := c.api.do(ctx, http.MethodGet, "/mounts/"+url.PathEscape(uid)+"/revocations", nil, &st); err != nil {
		return StoredRevocations{}, err
	}
	r, err := protocol.ParseRevocationsText(st.Text)
	if err != nil || r.UID != uid {
		return StoredRevocations{}, fmt.Errorf("sdk: the API answered no revocation list of %s", uid)
	}
	return StoredRevocations{UID: uid, Version: r.Version, Epoch: r.Epoch, Text: st.Text, Signature: st.Signature}, nil
}

// keepList fetches the mount's list and keeps it.
func (c *Client) keepList(ctx context.Context, uid string) error {
	r, err := c.fetchList(ctx, uid)
	if err != nil {
		return err
	}
	return c.keeper.PutRevocations(r)
}

// fetchKept fetches the mount's list and keeps it when the phone holds a
// grant there; nil when the API did not answer one.
func (c *Client) fetchKept(ctx context.Context, uid string) *StoredRevocations {
	r, err := c.fetchList(ctx, uid)
	if err != nil {
		c.cfg.Logger.Debug("sdk: no revocation list", "uid", uid, "err", err)
		return nil
	}
	if _, holds := c.storedGrant(uid); holds {
		if err := c.keeper.PutRevocations(r); err != nil {
			c.cfg.Logger.Warn("sdk: revocation list not kept", "uid", uid, "err", err)
		}
	}
	c.freshen()
	return &r
}

// storedGrant is the grant held for uid, if any.
func (c *Client) storedGrant(uid string) (StoredGrant, bool) {
	if c.keeper == nil {
		return StoredGrant{}, false
	}
	grants, err := c.keeper.Grants()
	if err != nil {
		c.cfg.Logger.Warn("sdk: grants unreadable", "err", err)
		return StoredGrant{}, false
	}
	for _, g := range grants {
		if g.UID == uid {
			return g, true
		}
	}
	return StoredGrant{}, false
}

// heldList is the newest revocation list the phone has for uid: the one
// fetched now (online is set) or the keeper's.
func (c *Client) heldList(uid string, online *StoredRevocations) (StoredRevocations, bool) {
	var held StoredRevocations
	ok := false
	if c.keeper != nil {
		var err error
		if held, ok, err = c.keeper.Revocations(uid); err != nil {
			c.cfg.Logger.Warn("sdk: revocation list unreadable", "uid", uid, "err", err)
			ok = false
		}
	}
	if online != nil && (!ok || online.newer(held)) {
		return *online, true
	}
	return held, ok
}

// readInfo reads the info characteristic again: a fresh challenge and the
// mount's offline status. d.writeMu held.
func (c *Client) readInfo(ctx context.Context, d *device) (protocol.BLEInfo, error) {
	raw, err := d.link.ReadInfo(ctx)
	var info protocol.BLEInfo
	if err == nil {
		err = json.Unmarshal(raw, &info)
	}
	if err == nil && info.UID != d.uid {
		err = fmt.Errorf("sdk: the device is mount %q, not %q", info.UID, d.uid)
	}
	return info, err
}

// writeSigned writes a text the server signed (a time token, a list, an
// ack) and waits for the mount's result. d.writeMu held.
func (c *Client) writeSigned(ctx context.Context, d *device, typ string, st protocol.SignedText) error {
	_, err := c.exchange(ctx, d, protocol.BLESignedText{Type: typ, Text: st.Text, Signature: st.Signature}, "the "+typ,
		func(m protocol.BLEMessage) bool { return m.Type == protocol.BLEMessageResult && m.Code == typ }, nil)
	return err
}

// writeList writes list to the mount when the mount's (by its info) is
// older. d.writeMu held.
func (c *Client) writeList(ctx context.Context, d *device, info protocol.BLEInfo, list StoredRevocations) {
	if !list.newer(StoredRevocations{Epoch: info.Epoch, Version: info.RevocationVersion}) {
		return
	}
	if err := c.writeSigned(ctx, d, protocol.BLEWriteRevocations, protocol.SignedText{Text: list.Text, Signature: list.Signature}); err != nil {
		c.cfg.Logger.Warn("sdk: the mount did not take the revocation list", "uid", d.uid, "err", err)
	}
}

// prepare is the start of every connection to a mount with offline
// access: a time token for the challenge of the info just read (when the
// API answers), then the newest revocation list if the mount's is older,
// then the acks held for it. Each step is best effort, bounded by
// ConfirmTimeout.
func (c *Client) prepare(ctx context.Context, d *device) {
	if d.info.Challenge == "" {
		return // firmware without offline access
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ConfirmTimeout)
	defer cancel()
	d.writeMu.Lock()
	defer d.writeMu.Unlock()
	path := "/mounts/" + url.PathEscape(d.uid)
	var tok protocol.SignedText
	err := c.api.do(ctx, http.MethodGet, path+"/time?nonce="+url.QueryEscape(d.info.Challenge), nil, &tok)
	if err != nil {
		c.cfg.Logger.Debug("sdk: no time token", "uid", d.uid, "err", err)
	} else if werr := c.writeSigned(ctx, d, protocol.BLEWriteTime, tok); werr != nil {
		c.cfg.Logger.Warn("sdk: the mount did not take the time token", "uid", d.uid, "err", werr)
	}
	var online *StoredRevocations
	if err == nil || client.StatusOf(err) != 0 { // no answer at all: the list would get none either
		online = c.fetchKept(ctx, d.uid)
	}
	if list, ok := c.heldList(d.uid, online); ok {
		c.writeList(ctx, d, d.info, list)
	}
	if _, err := c.writeAcks(ctx, d); err != nil {
		c.cfg.Logger.Debug("sdk: acks not written", "uid", d.uid, "err", err)
	}
}

// releaseOffline releases the helmet with the stored grant g: it reads a
// fresh challenge, writes the newest list it holds if the mount's is
// older, writes the use with its proof and waits for the mount's answer
// (an offline receipt, or an unsigned refusal) and, when it executed, for
// the states showing the helmet gone. Then it carries the mount's log.
func (c *Client) releaseOffline(ctx context.Context, uid string, g StoredGrant) (Outcome, error) {
	d, err := c.connected(uid)
	if err != nil {
		return Outcome{}, err
	}
	key, err := c.keeper.RiderKey()
	if err != nil {
		return Outcome{}, err
	}
	code := string(protocol.CmdReleaseHelmet)
	dl, err := func() (delivery, error) {
		d.writeMu.Lock()
		defer d.writeMu.Unlock()
		info, err := c.readInfo(ctx, d)
		if err != nil {
			return delivery{}, err
		}
		if info.Challenge == "" {
			return delivery{}, fmt.Errorf("sdk: mount %s has no offline access", uid)
		}
		if list, ok := c.heldList(uid, nil); ok {
			c.writeList(ctx, d, info, list)
		}
		nonce := info.Challenge
		proof, err := protocol.SignRider(key, protocol.BuildUseText(uid, g.ID, code, nonce))
		if err != nil {
			return delivery{}, err
		}
		use := protocol.BLEUse{Type: protocol.BLEWriteUse, Grant: g.Text, GrantSignature: g.Signature, Code: code,
			Nonce: nonce, Proof: proof}
		return c.exchange(ctx, d, use, "the offline "+code, func(m protocol.BLEMessage) bool {
			return m.Nonce == nonce && (m.Type == protocol.BLEMessageOffline || m.Type == protocol.BLEMessageResult)
		}, helmetReleased)
	}()
	out := Outcome{Offline: true}
	if dl.result != nil {
		out.Result = resultOf(*dl.result)
	}
	if dl.states != nil {
		out.States = dl.states.States
		out.Report = reportOf(*dl.states)
	}
	pending, uerr := c.up.carry(ctx, c.cfg.UploadWait, dl.uploads(uid))
	out.Pending = pending
	if uerr != nil && !c.queued() {
		c.cfg.Logger.Debug("sdk: the states of an offline use were not uploaded", "uid", uid, "err", uerr)
	}
	c.carryLog(ctx, d)
	return out, err
}

func (c *Client) queued() bool { return c.up.q != nil }

// UploadPending carries a connected mount's offline log: the acks the
// phone holds for it are written, the offline receipts it notified on this
// connection are uploaded (queued when the API does not answer, to be
// acknowledged at a later connection) with what its info says, and the
// API's ack is written back, so that the mount drops them. It returns how
// many receipts the mount was told are acknowledged. Actions carry the log
// by themselves; this is for a phone that connects only to carry it.
func (c *Client) UploadPending(ctx context.Context, uid string) (int, error) {
	d, err := c.connected(uid)
	if err != nil {
		return 0, err
	}
	return c.uploadPending(ctx, d)
}

// carryLog is UploadPending after an action, on firmware with offline
// access: what fails is reported on the engine stream, not to the action.
func (c *Client) carryLog(ctx context.Context, d *device) {
	if d.info.Challenge == "" {
		return
	}
	if _, err := c.uploadPending(ctx, d); err != nil {
		c.engine.publish(ErrorEvent{UID: d.uid, Err: err, At: time.Now()})
	}
}

func (c *Client) uploadPending(ctx context.Context, d *device) (int, error) {
	d.writeMu.Lock()
	acked, err := c.writeAcks(ctx, d)
	var info protocol.BLEInfo
	if err == nil {
		info, err = c.readInfo(ctx, d)
	}
	d.writeMu.Unlock()
	if err != nil {
		return acked, err
	}
	// The mount streams its log after its first states, one receipt per
	// message: wait for as many as it says wait, within ConfirmTimeout.
	wctx, cancel := context.WithTimeout(ctx, c.cfg.ConfirmTimeout)
	d.waitHeard(wctx, info.LogPending)
	cancel()
	status := &OfflineStatus{RevocationVersion: info.RevocationVersion, LogPending: info.LogPending, TimeTrusted: info.TimeTrusted}
	var uploads []Upload
	for batch := range slices.Chunk(d.toCarry(), maxOfflineBatch) {
		uploads = append(uploads, Upload{UID: d.uid, Offline: &OfflineUpload{Receipts: batch, Status: status}})
	}
	_, uerr := c.up.carry(ctx, c.cfg.UploadWait, uploads)
	d.writeMu.Lock()
	n, werr := c.writeAcks(ctx, d)
	d.writeMu.Unlock()
	return acked + n, errors.Join(uerr, werr)
}

// writeAcks writes the acks held for the mount and forgets those it
// answered (a refusal other than a storage failure included: it would
// refuse them again); it returns how many receipts they acknowledged.
// d.writeMu held.
func (c *Client) writeAcks(ctx context.Context, d *device) (int, error) {
	n := 0
	for _, ack := range c.acks.forMount(d.uid) {
		err := c.writeSigned(ctx, d, protocol.BLEWriteAck, ack)
		var refused *RefusedError
		switch {
		case err == nil:
			parsed, _ := protocol.ParseAckText(ack.Text)
			d.acked(parsed.Nonces)
			n += len(parsed.Nonces)
		case errors.As(err, &refused) && refused.Reason != "storage failure":
			c.cfg.Logger.Warn("sdk: the mount refused an ack; dropped", "uid", d.uid, "reason", refused.Reason)
		default:
			return n, err
		}
		c.acks.remove(d.uid, ack)
	}
	return n, nil
}

// toCarry takes the offline receipts heard and not yet handed to the
// uploader or acknowledged, as upload bodies, and marks them carried.
func (d *device) toCarry() []protocol.UploadOfflineReceipt {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []protocol.UploadOfflineReceipt
	for i, h := range d.offline {
		if h.carried || h.acked || h.msg.Counter == nil {
			continue
		}
		m := h.msg
		out = append(out, protocol.UploadOfflineReceipt{GrantID: m.GrantID, Code: m.Code, UploadReceipt: protocol.UploadReceipt{
			Nonce: m.Nonce, Outcome: m.Outcome, Reason: m.Reason, Counter: *m.Counter, At: m.At, Signature: m.Signature}})
		d.offline[i].carried = true
	}
	return out
}

// acked marks the receipts of nonces as acknowledged on the mount.
func (d *device) acked(nonces []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, h := range d.offline {
		if slices.Contains(nonces, h.msg.Nonce) {
			d.offline[i].acked = true
		}
	}
}

// waitHeard waits until at least n offline receipts not acknowledged were
// heard, or ctx ends.
func (d *device) waitHeard(ctx context.Context, n int) {
	msgs, stop := d.watch()
	defer stop()
	for {
		d.mu.Lock()
		have := 0
		for _, h := range d.offline {
			if !h.acked {
				have++
			}
		}
		d.mu.Unlock()
		if have >= n {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-d.done:
			return
		case <-msgs:
		}
	}
}

// onOffline takes the API's answer to uploaded offline receipts: its ack
// waits for the next connection to the mount (or is written at once by
// the UploadPending that uploaded them).
func (c *Client) onOffline(uid string, answer offlineAnswer) {
	for _, r := range answer.Rejected {
		c.cfg.Logger.Warn("sdk: the API rejected an offline receipt", "uid", uid, "nonce", r.Nonce, "code", r.Code, "detail", r.Detail)
	}
	if answer.Ack != nil {
		c.acks.add(uid, *answer.Ack)
	}
}

// heldAcks are the API's acks not yet written to their mounts, kept in
// the queue directory (acks.json) when there is one.
type heldAcks struct {
	path string // "": in memory only
	log  *slog.Logger

	mu   sync.Mutex
	acks []heldAck // oldest first, at most maxHeldAcks
}

type heldAck struct {
	UID string              `json:"uid"`
	Ack protocol.SignedText `json:"ack"`
}

func openAcks(dir string, log *slog.Logger) *heldAcks {
	h := &heldAcks{log: log}
	if dir == "" {
		return h
	}
	h.path = filepath.Join(dir, acksFile)
	raw, err := os.ReadFile(h.path)
	if err == nil {
		err = json.Unmarshal(raw, &h.acks)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("sdk: held acks unreadable; dropped", "err", err)
		h.acks = nil
	}
	if len(h.acks) > maxHeldAcks {
		h.acks = h.acks[len(h.acks)-maxHeldAcks:]
	}
	return h
}

func (h *heldAcks) add(uid string, ack protocol.SignedText) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acks = append(h.acks, heldAck{UID: uid, Ack: ack})
	if len(h.acks) > maxHeldAcks {
		h.acks = slices.Delete(h.acks, 0, len(h.acks)-maxHeldAcks)
	}
	h.saveLocked()
}

func (h *heldAcks) forMount(uid string) []protocol.SignedText {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []protocol.SignedText
	for _, a := range h.acks {
		if a.UID == uid {
			out = append(out, a.Ack)
		}
	}
	return out
}

func (h *heldAcks) remove(uid string, ack protocol.SignedText) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acks = slices.DeleteFunc(h.acks, func(a heldAck) bool { return a.UID == uid && a.Ack == ack })
	h.saveLocked()
}

func (h *heldAcks) saveLocked() {
	if h.path == "" {
		return
	}
	raw, err := json.Marshal(h.acks)
	if err == nil {
		err = writeAtomic(filepath.Dir(h.path), filepath.Base(h.path), raw)
	}
	if err != nil {
		h.log.Warn("sdk: held acks not saved", "err", err)
	}
}
