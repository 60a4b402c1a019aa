package sdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// Upload is one thing the SDK carries from a mount to the API, exactly as
// the mount said it: a states message (POST /mounts/{uid}/states), a
// receipt (POST /mounts/{uid}/commands/receipts) or offline receipts of
// the mount's log (POST /mounts/{uid}/offline-receipts). Exactly one of
// States, Receipt and Offline is set.
type Upload struct {
	UID     string                  `json:"uid"`
	States  *protocol.SignedStates  `json:"states,omitempty"`
	Receipt *protocol.UploadReceipt `json:"receipt,omitempty"`
	Offline *OfflineUpload          `json:"offline,omitempty"`
}

// OfflineUpload is a batch of a mount's offline receipts, unchanged, and
// what its info characteristic said when they were carried.
type OfflineUpload struct {
	Receipts []protocol.UploadOfflineReceipt `json:"receipts"`
	Status   *OfflineStatus                  `json:"status,omitempty"`
}

// OfflineStatus is a mount's offline status as its info characteristic
// said it (told by a phone, not signed).
type OfflineStatus struct {
	RevocationVersion int64 `json:"revocationVersion"`
	LogPending        int   `json:"logPending"`
	TimeTrusted       bool  `json:"timeTrusted"`
}

func (u Upload) check() error {
	set := 0
	for _, ok := range []bool{u.States != nil, u.Receipt != nil, u.Offline != nil} {
		if ok {
			set++
		}
	}
	if u.UID == "" || set != 1 {
		return errors.New("sdk: an upload names a mount and carries one of states, a receipt, offline receipts")
	}
	if u.Offline != nil && (len(u.Offline.Receipts) == 0 || len(u.Offline.Receipts) > maxOfflineBatch) {
		return fmt.Errorf("sdk: an offline upload carries 1 to %d receipts", maxOfflineBatch)
	}
	return nil
}

func (u Upload) kind() string {
	switch {
	case u.Receipt != nil:
		return "receipt"
	case u.Offline != nil:
		return "offline receipts"
	}
	return "states"
}

// QueueStats is what the upload queue holds, and its bound.
type QueueStats struct {
	Items    int
	Bytes    int64
	MaxItems int
	MaxBytes int64
}

// UploadError is an upload the API refused with a 4xx answer (other than
// 401, 408 and 429): the item is dropped, never sent again.
type UploadError struct {
	Upload Upload
	Err    error // the API's answer, a *client.Error
}

func (e *UploadError) Error() string {
	return fmt.Sprintf("sdk: the API refused the %s of %s (dropped): %v", e.Upload.kind(), e.Upload.UID, e.Err)
}

func (e *UploadError) Unwrap() error { return e.Err }

// verdict is what an attempt at an upload decides for the item.
type verdict int

const (
	sent    verdict = iota // the API has it: remove it
	dropped                // the API refused it for good: remove it, log it
	kept                   // try again later: keep it, end the round
)

// judge applies the queue's rule to an attempt's error: success and 4xx
// remove the item; 5xx (502, 503 and 504 among them: a proxy whose replica
// is restarting) and network errors keep it. 401 (the token, not the item,
// is refused), 408 and 429 (the server's load) keep it too.
func judge(err error) verdict {
	if err == nil {
		return sent
	}
	switch st := client.StatusOf(err); {
	case st == 0, st >= 500, st < 400:
		return kept
	case st == http.StatusUnauthorized, st == http.StatusRequestTimeout, st == http.StatusTooManyRequests:
		return kept
	default:
		return dropped
	}
}

// send makes the API call of one upload. The API's answer to offline
// receipts goes to a.onOffline (nil: not needed).
func (a *apiClient) send(ctx context.Context, u Upload) error {
	path := "/mounts/" + url.PathEscape(u.UID)
	if u.Offline != nil {
		var answer offlineAnswer
		if err := a.do(ctx, http.MethodPost, path+"/offline-receipts", u.Offline, &answer); err != nil {
			return err
		}
		if a.onOffline != nil {
			a.onOffline(u.UID, answer)
		}
		return nil
	}
	if u.Receipt != nil {
		return a.do(ctx, http.MethodPost, path+"/commands/receipts",
			map[string]any{"receipts": []protocol.UploadReceipt{*u.Receipt}}, nil)
	}
	return a.do(ctx, http.MethodPost, path+"/states", u.States, nil)
}

// uploader carries uploads to the API: through the on-disk queue and its
// background flusher when the app named a queue directory, directly
// otherwise.
type uploader struct {
	q        *queue // nil: no queue
	send     func(context.Context, Upload) error
	reach    func(uid string) error // nil, or why the token cannot upload for uid now
	log      *slog.Logger
	onDrop   func(Upload, error)
	retryMin time.Duration
	retryMax time.Duration

	kick   chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	requested uint64 // rounds asked for
	finished  uint64 // the newest round that ended
	roundErr  error  // how it ended
	changed   chan struct{}
	watched   map[uint64]bool
	settled   map[uint64]error // watched items the API took (nil) or refused
}

func newUploader(q *queue, send func(context.Context, Upload) error, reach func(string) error, log *slog.Logger,
	onDrop func(Upload, error), retryMin, retryMax time.Duration) *uploader {
	ctx, cancel := context.WithCancel(context.Background())
	u := &uploader{q: q, send: send, reach: reach, log: log, onDrop: onDrop, retryMin: retryMin, retryMax: retryMax,
		kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel, done: make(chan struct{}),
		changed: make(chan struct{}), watched: map[uint64]bool{}, settled: map[uint64]error{}}
	if q == nil {
		close(u.done)
		return u
	}
	go u.run()
	if q.stats().Items > 0 {
		u.request() // what an earlier run left
	}
	return u
}

// request asks for a round and returns its number: the round that answers
// it starts after this call.
func (u *uploader) request() uint64 {
	u.mu.Lock()
	u.requested++
	n := u.requested
	u.mu.Unlock()
	select {
	case u.kick <- struct{}{}:
	default:
	}
	return n
}

// run is the background flusher: a round when asked, and after a round
// that could not finish, another after a wait that doubles from retryMin up
// to retryMax (with jitter), and is at least what the answer's Retry-After
// asked for (up to retryMax), until one finishes.
func (u *uploader) run() {
	defer close(u.done)
	var retry *time.Timer
	var retryC <-chan time.Time
	wait := time.Duration(0)
	for {
		select {
		case <-u.ctx.Done():
			if retry != nil {
				retry.Stop()
			}
			return
		case <-u.kick:
		case <-retryC:
		}
		if err := u.round(); err != nil && u.ctx.Err() == nil {
			wait = min(max(2*wait, u.retryMin), u.retryMax)
			d := client.RetryWait(err, wait, u.retryMax)
			u.log.Debug("sdk: uploads wait", "retryIn", d, "err", err)
			if retry == nil {
				retry = time.NewTimer(d)
			} else {
				retry.Reset(d)
			}
			retryC = retry.C
		} else {
			wait, retryC = 0, nil
		}
	}
}

// round uploads the queue oldest first, item by item, until it is empty
// or an item must wait (that error ends the round). Items for mounts the
// token cannot reach are left for a client whose token can.
func (u *uploader) round() error {
	u.mu.Lock()
	n := u.requested
	u.mu.Unlock()
	err := u.drain()
	u.mu.Lock()
	u.finished, u.roundErr = n, err
	u.broadcast()
	u.mu.Unlock()
	return err
}

func (u *uploader) drain() error {
	var after uint64
	for {
		if err := u.ctx.Err(); err != nil {
			return err
		}
		seq, ok := u.q.first(after)
		if !ok {
			return nil
		}
		after = seq
		item, err := u.q.read(seq)
		if err != nil && !errors.Is(err, errCorrupt) && !errors.Is(err, os.ErrNotExist) {
			return err // the disk, for now: the item stays
		}
		if err != nil {
			// A file that is not an item as this SDK writes them cannot
			// become one: it goes, with a log line.
			u.log.Warn("sdk: unreadable upload dropped from the queue", "seq", seq, "err", err)
			if err := u.q.remove(seq); err != nil {
				return err
			}
			u.settle(seq, fmt.Errorf("%w: %v", errCorrupt, err))
			continue
		}
		if u.reach != nil {
			if err := u.reach(item.UID); errors.Is(err, ErrMountNotAllowed) {
				continue // waits for a token that reaches this mount
			} else if err != nil {
				return err // the token as a whole: nothing can go now
			}
		}
		err = u.send(u.ctx, item)
		switch judge(err) {
		case sent:
			if err := u.q.remove(seq); err != nil {
				return err
			}
			u.settle(seq, nil)
		case dropped:
			if err := u.q.remove(seq); err != nil {
				return err
			}
			refused := &UploadError{Upload: item, Err: err}
			u.drop(refused)
			u.settle(seq, refused)
		default:
			return err
		}
	}
}

func (u *uploader) drop(e *UploadError) {
	u.log.Warn("sdk: the API refused an upload; dropped", "uid", e.Upload.UID, "kind", e.Upload.kind(), "err", e.Err)
	if u.onDrop != nil {
		u.onDrop(e.Upload, e)
	}
}

func (u *uploader) settle(seq uint64, err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.watched[seq] {
		delete(u.watched, seq)
		u.settled[seq] = err
		u.broadcast()
	}
}

// broadcast wakes whoever waits on changed; u.mu held.
func (u *uploader) broadcast() {
	close(u.changed)
	u.changed = make(chan struct{})
}

// flush asks for a round and waits for it: nil when it emptied the queue
// of what the token can upload.
func (u *uploader) flush(ctx context.Context) error {
	if u.q == nil {
		return nil
	}
	n := u.request()
	for {
		u.mu.Lock()
		finished, err, changed := u.finished, u.roundErr, u.changed
		u.mu.Unlock()
		if finished >= n {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-u.done:
			return ErrClosed
		case <-changed:
		}
	}
}

// carry uploads items in order, oldest first after what the queue holds.
// It returns how many of them still wait in the queue, and the API's
// refusals (*UploadError) and what kept items from the queue
// (ErrQueueFull) joined. Without a queue, it sends them once, directly:
// what fails is returned, not kept.
func (u *uploader) carry(ctx context.Context, wait time.Duration, items []Upload) (pending int, err error) {
	if len(items) == 0 {
		return 0, nil
	}
	if u.q == nil {
		var errs []error
		for _, it := range items {
			e := u.send(ctx, it)
			switch judge(e) {
			case sent:
			case dropped:
				refused := &UploadError{Upload: it, Err: e}
				u.drop(refused)
				errs = append(errs, refused)
			default:
				errs = append(errs, fmt.Errorf("sdk: the %s of %s was not uploaded: %w", it.kind(), it.UID, e))
			}
		}
		return 0, errors.Join(errs...)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var seqs []uint64
	var errs []error
	for _, it := range items {
		seq, e := u.add(it)
		if errors.Is(e, ErrQueueFull) {
			// The API may be back: make room, then try once more.
			_ = u.flush(ctx)
			seq, e = u.add(it)
		}
		if e != nil {
			u.log.Warn("sdk: an upload could not be queued", "uid", it.UID, "kind", it.kind(), "err", e)
			errs = append(errs, e)
			continue
		}
		seqs = append(seqs, seq)
	}
	if len(seqs) == 0 {
		return 0, errors.Join(errs...)
	}
	n := u.request()
wait:
	for {
		u.mu.Lock()
		left := 0
		for _, s := range seqs {
			if _, ok := u.settled[s]; !ok {
				left++
			}
		}
		finished, changed := u.finished, u.changed
		u.mu.Unlock()
		if left == 0 || finished >= n {
			break
		}
		select {
		case <-ctx.Done():
			break wait
		case <-u.done:
			break wait
		case <-changed:
		}
	}
	u.mu.Lock()
	for _, s := range seqs {
		if e, ok := u.settled[s]; ok {
			delete(u.settled, s)
			if e != nil {
				errs = append(errs, e)
			}
		} else {
			delete(u.watched, s)
			pending++
		}
	}
	u.mu.Unlock()
	return pending, errors.Join(errs...)
}

// add queues one upload, watched: its outcome is kept for carry. The
// flusher settles an item under u.mu, so it cannot settle this one before
// it is watched.
func (u *uploader) add(it Upload) (uint64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	seq, err := u.q.add(it)
	if err == nil {
		u.watched[seq] = true
	}
	return seq, err
}

// close stops the flusher (an upload in flight is abandoned and stays
// queued) and releases the queue.
func (u *uploader) close() error {
	u.cancel()
	<-u.done
	if u.q == nil {
		return nil
	}
	return u.q.close()
}

// Upload carries what a mount said to the API, in order, after what the
// queue already holds: a receipt of CommandResult.Receipt (a command
// delivered with Deliver, uploaded once the association is confirmed), or
// a states message. It waits for them up to Config.UploadWait and returns
// how many still wait in the queue (0: the API has them all). Errors: the
// API's refusals (*UploadError: 4xx, dropped), ErrQueueFull; without a
// QueueDir, whatever kept an item from the API.
func (c *Client) Upload(ctx context.Context, items ...Upload) (pending int, err error) {
	if err := c.open(); err != nil {
		return 0, err
	}
	for _, it := range items {
		if err := it.check(); err != nil {
			return 0, err
		}
	}
	return c.up.carry(ctx, c.cfg.UploadWait, items)
}

// Flush uploads the queue now, oldest first, item by item, and waits for
// that round: nil when the queue holds nothing the token can upload any
// more; the error that stopped the round otherwise (the API unreachable,
// a 5xx). The background flusher keeps trying after it either way. Without
// a QueueDir there is nothing to flush.
func (c *Client) Flush(ctx context.Context) error {
	if err := c.open(); err != nil {
		return err
	}
	return c.up.flush(ctx)
}

// Queued says what the upload queue holds (zero without a QueueDir).
func (c *Client) Queued() QueueStats {
	if c.up.q == nil {
		return QueueStats{}
	}
	return c.up.q.stats()
}

// receiptOf is the receipt in a result message: only a signed result
// (outcome, counter, signature) is one. Unsigned results (older firmware,
// or a refusal before the command's signature verified) are none.
func receiptOf(m protocol.BLEMessage) *protocol.UploadReceipt {
	if m.Type != protocol.BLEMessageResult || m.Outcome == "" || m.Signature == "" || m.Counter == nil {
		return nil
	}
	return &protocol.UploadReceipt{Nonce: m.Nonce, Outcome: m.Outcome, Reason: m.Reason, Counter: *m.Counter,
		At: m.At, Signature: m.Signature}
}

// reportOf is the body of POST /mounts/{uid}/states for a states message:
// its fields unchanged when the mount signed it; only the states when not
// (older firmware), as such reports always were.
func reportOf(m protocol.BLEMessage) *protocol.SignedStates {
	if m.Signature == "" {
		return &protocol.SignedStates{States: m.States}
	}
	return &protocol.SignedStates{States: m.States, Counter: m.Counter, SoftwareRevision: m.SoftwareRevision,
		Signature: m.Signature}
}
