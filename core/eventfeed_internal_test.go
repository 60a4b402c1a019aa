package core

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestFeedDropsQuietly: a long poll's subscriber (one slot: it wakes on the
// first event and reads the log) is ended without a warning by a burst of
// its account's events (a report's STATES_REPORTED and MOUNT_ONLINE, say,
// with a small fleet: every `mountctl events --follow` logged "too slow");
// a live stream that falls behind its buffer is dropped with the warning,
// naming its real buffer.
func TestFeedDropsQuietly(t *testing.T) {
	var log bytes.Buffer
	f := NewEventFeed(nil, nil, slog.New(slog.NewTextHandler(&log, nil)))
	poll := &feedSub{accountID: "acc_a", ch: make(chan *Event, 1), wakeOnly: true}
	stream := &feedSub{accountID: "acc_a", ch: make(chan *Event, 2)}
	f.subs["acc_a"] = map[*feedSub]struct{}{poll: {}}
	f.mu.Lock()
	for i := range 3 {
		f.dispatchLocked(&Event{ID: Cursor{Tx: 1, Seq: int64(i + 1)}, AccountID: "acc_a"})
	}
	f.mu.Unlock()
	if !poll.closed || len(poll.ch) != 1 {
		t.Errorf("the long poll's subscriber: closed %v with %d events, want closed with its one", poll.closed, len(poll.ch))
	}
	if log.Len() != 0 {
		t.Errorf("a long poll woken by a burst was logged:\n%s", log.String())
	}

	f.subs["acc_a"] = map[*feedSub]struct{}{stream: {}}
	f.mu.Lock()
	for i := range 3 {
		f.dispatchLocked(&Event{ID: Cursor{Tx: 2, Seq: int64(i + 1)}, AccountID: "acc_a"})
	}
	f.mu.Unlock()
	if !stream.closed || !strings.Contains(log.String(), "event subscriber too slow") || !strings.Contains(log.String(), "buffer=2") {
		t.Errorf("a stream behind its buffer: closed %v, log %q", stream.closed, log.String())
	}
}
