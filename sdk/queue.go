package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// The upload queue on disk: one file per item, named by a sequence number
// that only grows (20 decimal digits, so that names sort as numbers do; the
// last one given out is kept in a file of its own, so it goes on growing
// after a restart with an empty queue),
// written to a temporary file, synced, renamed into place and the directory
// synced. A crash mid-write leaves a temporary file, never a half item; the
// temporary files are removed when the queue opens. A lock file keeps a
// second Client (in this process or another) off the same directory.

const (
	itemSuffix = ".item"
	tempPrefix = ".tmp-"
	lockName   = "lock"
	// seqName holds the last sequence number given out, so that numbers
	// keep growing across restarts, also once the queue was empty.
	seqName = "seq"
	// maxItemBytes bounds one item on disk: a states message is at most
	// protocol.MaxBLEMessage (16 KiB) and its envelope is small.
	maxItemBytes = 64 << 10
)

// Errors of the upload queue; wrap-aware (errors.Is).
var (
	// ErrQueueFull: the queue holds QueueMaxItems items or QueueMaxBytes
	// bytes; the new item was not kept (the older ones are).
	ErrQueueFull = errors.New("sdk: the upload queue is full")
	// ErrQueueInUse: another Client (in this process or another) has the
	// queue directory open.
	ErrQueueInUse = errors.New("sdk: the upload queue directory is in use by another client")
)

// queue is the bounded on-disk queue of uploads. Safe for concurrent use.
type queue struct {
	dir      string
	lock     *os.File
	maxItems int
	maxBytes int64

	mu    sync.Mutex
	items []queued // ascending seq
	bytes int64
	next  uint64
}

type queued struct {
	seq  uint64
	size int64
}

// openQueue opens (creating it when needed) the queue in dir. Leftover
// temporary files (a crash mid-write) are removed.
func openQueue(dir string, maxItems int, maxBytes int64) (*queue, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sdk: upload queue: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sdk: upload queue: %w", err)
	}
	if err := lockFile(lock); err != nil {
		lock.Close()
		if errors.Is(err, errLocked) {
			return nil, fmt.Errorf("%w: %s", ErrQueueInUse, dir)
		}
		return nil, fmt.Errorf("sdk: upload queue: lock %s: %w", dir, err)
	}
	q := &queue{dir: dir, lock: lock, maxItems: maxItems, maxBytes: maxBytes, next: 1}
	entries, err := os.ReadDir(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("sdk: upload queue: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, tempPrefix):
			_ = os.Remove(filepath.Join(dir, name)) // a write that never completed
		case strings.HasSuffix(name, itemSuffix) && e.Type().IsRegular():
			seq, err := strconv.ParseUint(strings.TrimSuffix(name, itemSuffix), 10, 64)
			if err != nil || itemName(seq) != name {
				continue // not ours
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			q.items = append(q.items, queued{seq: seq, size: info.Size()})
			q.bytes += info.Size()
			q.next = max(q.next, seq+1)
		}
	}
	slices.SortFunc(q.items, func(a, b queued) int { return cmpSeq(a.seq, b.seq) })
	if raw, err := os.ReadFile(filepath.Join(dir, seqName)); err == nil {
		if last, err := strconv.ParseUint(strings.TrimSpace(string(raw)), 10, 64); err == nil {
			q.next = max(q.next, last+1)
		}
	}
	return q, nil
}

func cmpSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func itemName(seq uint64) string { return fmt.Sprintf("%020d%s", seq, itemSuffix) }

// add stores u durably as the newest item and returns its sequence number.
// A full queue refuses it with ErrQueueFull.
func (q *queue) add(u Upload) (uint64, error) {
	data, err := json.Marshal(u)
	if err != nil {
		return 0, err
	}
	if len(data) > maxItemBytes {
		return 0, fmt.Errorf("sdk: upload of %d bytes is over the %d a queued item may have", len(data), maxItemBytes)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lock == nil {
		return 0, ErrClosed
	}
	if len(q.items)+1 > q.maxItems || q.bytes+int64(len(data)) > q.maxBytes {
		return 0, fmt.Errorf("%w (%d items, %d bytes; at most %d items, %d bytes)", ErrQueueFull, len(q.items), q.bytes, q.maxItems, q.maxBytes)
	}
	seq := q.next
	q.next++
	if err := writeAtomic(q.dir, seqName, []byte(strconv.FormatUint(seq, 10))); err != nil {
		return 0, fmt.Errorf("sdk: upload queue: %w", err)
	}
	if err := writeAtomic(q.dir, itemName(seq), data); err != nil {
		return 0, fmt.Errorf("sdk: upload queue: %w", err)
	}
	q.items = append(q.items, queued{seq: seq, size: int64(len(data))})
	q.bytes += int64(len(data))
	return seq, nil
}

// writeAtomic writes data to dir/name through a synced temporary file
// renamed into place, then syncs the directory.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

// first returns the oldest item after seq (0: the oldest of all).
func (q *queue) first(after uint64) (uint64, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, _ := slices.BinarySearchFunc(q.items, after+1, func(it queued, seq uint64) int { return cmpSeq(it.seq, seq) })
	if i == len(q.items) {
		return 0, false
	}
	return q.items[i].seq, true
}

// read returns the item seq as stored.
func (q *queue) read(seq uint64) (Upload, error) {
	data, err := os.ReadFile(filepath.Join(q.dir, itemName(seq)))
	if err != nil {
		return Upload{}, err
	}
	var u Upload
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		return Upload{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	if err := u.check(); err != nil {
		return Upload{}, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return u, nil
}

var errCorrupt = errors.New("sdk: unreadable queue item")

// remove deletes the item seq durably (the directory synced) before it
// returns, so that an item acknowledged by the API is never sent again as
// a new one after a restart.
func (q *queue) remove(seq uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := os.Remove(filepath.Join(q.dir, itemName(seq))); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sdk: upload queue: %w", err)
	}
	if err := syncDir(q.dir); err != nil {
		return fmt.Errorf("sdk: upload queue: %w", err)
	}
	if i, ok := slices.BinarySearchFunc(q.items, seq, func(it queued, seq uint64) int { return cmpSeq(it.seq, seq) }); ok {
		q.bytes -= q.items[i].size
		q.items = slices.Delete(q.items, i, i+1)
	}
	return nil
}

// has reports whether item seq is still queued.
func (q *queue) has(seq uint64) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	_, ok := slices.BinarySearchFunc(q.items, seq, func(it queued, seq uint64) int { return cmpSeq(it.seq, seq) })
	return ok
}

// stats returns how many items and bytes the queue holds.
func (q *queue) stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueStats{Items: len(q.items), Bytes: q.bytes, MaxItems: q.maxItems, MaxBytes: q.maxBytes}
}

// close releases the directory's lock.
func (q *queue) close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lock == nil {
		return nil
	}
	err := q.lock.Close() // closing the descriptor releases the lock
	q.lock = nil
	return err
}
