package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/client"
	"github.com/mountd/mountd/protocol"
)

// api is a fake API for the queue: it records what it took, and answers
// each attempt from a script (nil: success).
type api struct {
	mu      sync.Mutex
	got     []string // receipt nonces and report counters, in order
	tries   int
	answers map[string]error // by item name, every attempt
	once    map[string]error // by item name, the next attempt only
}

func newAPI() *api { return &api{answers: map[string]error{}, once: map[string]error{}} }

func name(u Upload) string {
	if u.Receipt != nil {
		return "r" + u.Receipt.Nonce
	}
	return fmt.Sprintf("s%d", *u.States.Counter)
}

func (a *api) send(_ context.Context, u Upload) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tries++
	n := name(u)
	if err, ok := a.once[n]; ok {
		delete(a.once, n)
		return err
	}
	if err := a.answers[n]; err != nil {
		return err
	}
	a.got = append(a.got, n)
	return nil
}

func (a *api) received() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

func report(uid string, counter uint64) Upload {
	return Upload{UID: uid, States: &protocol.SignedStates{Counter: &counter, SoftwareRevision: "1.0.0", Signature: "ab",
		States: []protocol.BLEStateEntry{{Code: "MOUNT_LOCKED", Value: "0", OccurredAt: "2026-11-26T10:00:00.000Z"}}}}
}

func receipt(uid, nonce string) Upload {
	return Upload{UID: uid, Receipt: &protocol.UploadReceipt{Nonce: nonce, Outcome: "EXECUTED", Counter: 1,
		At: "2026-11-26T10:00:00.000Z", Signature: "ab"}}
}

type harness struct {
	t       *testing.T
	dir     string
	api     *api
	reach   func(string) error
	dropped []Upload
	q       *queue
	u       *uploader
}

func newHarness(t *testing.T, dir string, maxItems int, maxBytes int64) *harness {
	t.Helper()
	h := &harness{t: t, dir: dir, api: newAPI()}
	h.open(maxItems, maxBytes)
	return h
}

// open starts the queue and its flusher over h.dir, as a new Client does.
// The flusher retries after an hour: the tests flush themselves.
func (h *harness) open(maxItems int, maxBytes int64) {
	h.t.Helper()
	q, err := openQueue(h.dir, maxItems, maxBytes)
	if err != nil {
		h.t.Fatal(err)
	}
	h.q = q
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h.u = newUploader(q, h.api.send, func(uid string) error {
		if h.reach != nil {
			return h.reach(uid)
		}
		return nil
	}, log, func(u Upload, _ error) { h.dropped = append(h.dropped, u) }, time.Hour, time.Hour)
	h.t.Cleanup(func() { _ = h.u.close() })
}

func (h *harness) add(items ...Upload) {
	h.t.Helper()
	for _, it := range items {
		if _, err := h.q.add(it); err != nil {
			h.t.Fatal(err)
		}
	}
}

func (h *harness) flush() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.u.flush(ctx)
}

func eq(t *testing.T, what string, got, want []string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestQueueUploadsOldestFirst(t *testing.T) {
	h := newHarness(t, t.TempDir(), 100, 1<<20)
	h.add(receipt("M-1", "n1"), report("M-1", 2), receipt("M-2", "n3"), report("M-2", 4))
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	eq(t, "received", h.api.received(), []string{"rn1", "s2", "rn3", "s4"})
	if s := h.q.stats(); s.Items != 0 || s.Bytes != 0 {
		t.Fatalf("after the flush the queue holds %+v", s)
	}
	if files, _ := filepath.Glob(filepath.Join(h.dir, "*"+itemSuffix)); len(files) != 0 {
		t.Fatalf("item files left: %v", files)
	}
}

func TestQueueSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, 100, 1<<20)
	h.api.answers["rn1"] = &client.Error{Status: 503}
	h.add(receipt("M-1", "n1"), report("M-1", 2), report("M-1", 3))
	if err := h.flush(); client.StatusOf(err) != 503 {
		t.Fatalf("flush = %v, want the 503", err)
	}
	if err := h.u.close(); err != nil {
		t.Fatal(err)
	}

	// The app starts again: the same items, in the same order, and new
	// ones after them.
	q, err := openQueue(dir, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if s := q.stats(); s.Items != 3 || q.next != 4 {
		t.Fatalf("after the restart the queue holds %d items, next %d; want 3, 4", s.Items, q.next)
	}
	_ = q.close()
	h.api.answers = map[string]error{}
	h.open(100, 1<<20) // its flusher starts on what it finds
	h.add(report("M-1", 4))
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	eq(t, "received", h.api.received(), []string{"rn1", "s2", "s3", "s4"})

	// Emptied, and started again: the numbers go on from where they were.
	_ = h.u.close()
	h.open(100, 1<<20)
	seq, err := h.q.add(report("M-1", 5))
	if err != nil || seq != 5 {
		t.Fatalf("first item after a restart with an empty queue: %d, %v; want 5", seq, err)
	}
}

func TestQueueJudgesEachAnswer(t *testing.T) {
	network := fmt.Errorf("cannot reach mountd: %w", errors.New("connection refused"))
	cases := []struct {
		name string
		err  error
		drop bool
	}{
		{"400 INVALID_SIGNATURE", &client.Error{Status: 400, Code: "INVALID_SIGNATURE"}, true},
		{"403 SIGNATURE_REQUIRED", &client.Error{Status: 403, Code: "SIGNATURE_REQUIRED"}, true},
		{"404 COMMAND_NOT_FOUND", &client.Error{Status: 404, Code: "COMMAND_NOT_FOUND"}, true},
		{"413", &client.Error{Status: 413}, true},
		{"401: the token, not the item", &client.Error{Status: 401}, false},
		{"408", &client.Error{Status: 408}, false},
		{"429", &client.Error{Status: 429}, false},
		{"500", &client.Error{Status: 500}, false},
		{"503", &client.Error{Status: 503}, false},
		{"network", network, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, t.TempDir(), 100, 1<<20)
			h.api.answers["s2"] = c.err
			h.add(receipt("M-1", "n1"), report("M-1", 2), report("M-1", 3))
			err := h.flush()
			if c.drop {
				// Dropped and logged; the items after it go on.
				if err != nil {
					t.Fatalf("flush = %v", err)
				}
				eq(t, "received", h.api.received(), []string{"rn1", "s3"})
				if len(h.dropped) != 1 || name(h.dropped[0]) != "s2" {
					t.Fatalf("dropped %v, want s2", h.dropped)
				}
				tries := h.api.tries
				if err := h.flush(); err != nil || h.api.tries != tries {
					t.Fatalf("a dropped item was tried again (%d tries, then %d; %v)", tries, h.api.tries, err)
				}
				return
			}
			// Kept, and nothing after it goes before it.
			if err == nil {
				t.Fatal("flush = nil, want the error that stopped it")
			}
			eq(t, "received", h.api.received(), []string{"rn1"})
			if s := h.q.stats(); s.Items != 2 {
				t.Fatalf("queue holds %d items, want 2", s.Items)
			}
			delete(h.api.answers, "s2")
			if err := h.flush(); err != nil {
				t.Fatal(err)
			}
			eq(t, "received", h.api.received(), []string{"rn1", "s2", "s3"})
		})
	}
}

func TestQueueIsBounded(t *testing.T) {
	t.Run("items", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 3, 1<<20)
		h.add(report("M-1", 1), report("M-1", 2), report("M-1", 3))
		if _, err := h.q.add(report("M-1", 4)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("4th item: %v, want ErrQueueFull", err)
		}
		if err := h.flush(); err != nil {
			t.Fatal(err)
		}
		h.add(report("M-1", 5)) // room again
		if err := h.flush(); err != nil {
			t.Fatal(err)
		}
		eq(t, "received", h.api.received(), []string{"s1", "s2", "s3", "s5"}) // the refused one never was queued
	})
	t.Run("bytes", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 100, 400)
		h.add(report("M-1", 1), report("M-1", 2)) // 167 bytes each
		if _, err := h.q.add(report("M-1", 3)); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("3rd item (%d bytes queued): %v, want ErrQueueFull", h.q.stats().Bytes, err)
		}
	})
	t.Run("one item", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 100, 1<<30)
		big := report("M-1", 1)
		big.States.Signature = strings.Repeat("a", maxItemBytes)
		if _, err := h.q.add(big); err == nil {
			t.Fatal("an item over 64 KiB was queued")
		}
	})
	t.Run("a full queue refuses what an action carries", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 1, 1<<20)
		h.api.answers["s1"] = &client.Error{Status: 503}
		h.add(report("M-1", 1))
		pending, err := h.u.carry(context.Background(), time.Second, []Upload{report("M-1", 2)})
		if pending != 0 || !errors.Is(err, ErrQueueFull) {
			t.Fatalf("carry = %d, %v; want 0, ErrQueueFull", pending, err)
		}
	})
}

func TestQueueIgnoresHalfWrittenFiles(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, dir, 100, 1<<20)
	h.add(report("M-1", 1), report("M-1", 2), report("M-1", 3))
	_ = h.u.close()

	// A crash in the middle of writing item 4 leaves its temporary file;
	// item 2's content is cut short (a file system that lost its tail).
	if err := os.WriteFile(filepath.Join(dir, tempPrefix+"123"), []byte(`{"uid":"M-1","sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, itemName(2)), []byte(`{"uid":"M-1","states":{"sta`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not an item"), 0o600); err != nil {
		t.Fatal(err)
	}
	q, err := openQueue(dir, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, tempPrefix+"123")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the temporary file is still there: %v", err)
	}
	if s := q.stats(); s.Items != 3 {
		t.Fatalf("queue holds %d items, want 3 (the temporary file is none)", s.Items)
	}
	_ = q.close()
	h.open(100, 1<<20)
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	eq(t, "received", h.api.received(), []string{"s1", "s3"})
	if s := h.q.stats(); s.Items != 0 {
		t.Fatalf("queue holds %d items, want 0", s.Items)
	}
}

func TestQueueOneClientAtATime(t *testing.T) {
	dir := t.TempDir()
	q, err := openQueue(dir, 10, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := openQueue(dir, 10, 1<<20); !errors.Is(err, ErrQueueInUse) {
		t.Fatalf("second open: %v, want ErrQueueInUse", err)
	}
	if err := q.close(); err != nil {
		t.Fatal(err)
	}
	q2, err := openQueue(dir, 10, 1<<20)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	_ = q2.close()
}

func TestQueueLeavesOtherMountsForTheirToken(t *testing.T) {
	h := newHarness(t, t.TempDir(), 100, 1<<20)
	h.reach = func(uid string) error {
		if uid != "M-2" {
			return ErrMountNotAllowed
		}
		return nil
	}
	h.add(report("M-1", 1), report("M-2", 2), report("M-1", 3), report("M-2", 4))
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	eq(t, "received", h.api.received(), []string{"s2", "s4"})
	if s := h.q.stats(); s.Items != 2 {
		t.Fatalf("queue holds %d items, want M-1's 2", s.Items)
	}
	h.reach = nil // a token for M-1
	if err := h.flush(); err != nil {
		t.Fatal(err)
	}
	eq(t, "received", h.api.received(), []string{"s2", "s4", "s1", "s3"})
}

func TestCarry(t *testing.T) {
	t.Run("queued items the API takes", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 100, 1<<20)
		pending, err := h.u.carry(context.Background(), 10*time.Second, []Upload{receipt("M-1", "n1"), report("M-1", 2)})
		if pending != 0 || err != nil {
			t.Fatalf("carry = %d, %v", pending, err)
		}
		eq(t, "received", h.api.received(), []string{"rn1", "s2"})
	})
	t.Run("queued items the API cannot take now", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 100, 1<<20)
		h.api.answers["rn1"] = &client.Error{Status: 502}
		pending, err := h.u.carry(context.Background(), 10*time.Second, []Upload{receipt("M-1", "n1"), report("M-1", 2)})
		if pending != 2 || err != nil {
			t.Fatalf("carry = %d, %v; want 2 pending, no error", pending, err)
		}
	})
	t.Run("a refusal", func(t *testing.T) {
		h := newHarness(t, t.TempDir(), 100, 1<<20)
		h.api.answers["s2"] = &client.Error{Status: 400, Code: "INVALID_SIGNATURE"}
		pending, err := h.u.carry(context.Background(), 10*time.Second, []Upload{receipt("M-1", "n1"), report("M-1", 2)})
		var refused *UploadError
		if pending != 0 || !errors.As(err, &refused) || name(refused.Upload) != "s2" {
			t.Fatalf("carry = %d, %v; want 0 pending and s2 refused", pending, err)
		}
	})
	t.Run("without a queue", func(t *testing.T) {
		a := newAPI()
		a.answers["s2"] = &client.Error{Status: 503}
		u := newUploader(nil, a.send, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, time.Hour, time.Hour)
		pending, err := u.carry(context.Background(), time.Second, []Upload{receipt("M-1", "n1"), report("M-1", 2)})
		if pending != 0 || client.StatusOf(err) != 503 {
			t.Fatalf("carry = %d, %v; want the 503 returned", pending, err)
		}
		eq(t, "received", a.received(), []string{"rn1"})
	})
}

func TestMessagesToUploads(t *testing.T) {
	n := uint64(7)
	signed := protocol.BLEMessage{Type: protocol.BLEMessageStates, Counter: &n, SoftwareRevision: "2.0.0", Signature: "ff",
		States: []protocol.BLEStateEntry{{Code: "MOUNT_LOCKED", Value: "1", OccurredAt: "2026-11-26T10:00:00.000Z"}}}
	if r := reportOf(signed); *r.Counter != 7 || r.SoftwareRevision != "2.0.0" || r.Signature != "ff" || len(r.States) != 1 {
		t.Fatalf("signed report = %+v", r)
	}
	legacy := signed
	legacy.Signature, legacy.Counter, legacy.SoftwareRevision = "", nil, "2.0.0"
	if r := reportOf(legacy); r.Counter != nil || r.SoftwareRevision != "" || r.Signature != "" || len(r.States) != 1 {
		t.Fatalf("unsigned report = %+v, want the states alone", r)
	}
	result := protocol.BLEMessage{Type: protocol.BLEMessageResult, Code: "RELEASE_HELMET", Nonce: "n", Reason: "stale command",
		Outcome: "REFUSED", Counter: &n, At: "2026-11-26T10:00:00.000Z", Signature: "ee"}
	if r := receiptOf(result); r == nil || *r != (protocol.UploadReceipt{Nonce: "n", Outcome: "REFUSED", Reason: "stale command",
		Counter: 7, At: "2026-11-26T10:00:00.000Z", Signature: "ee"}) {
		t.Fatalf("receipt = %+v", r)
	}
	unsigned := protocol.BLEMessage{Type: protocol.BLEMessageResult, Code: "RELEASE_HELMET", Reason: "bad signature"}
	if r := receiptOf(unsigned); r != nil {
		t.Fatalf("an unsigned result made a receipt: %+v", r)
	}
}

// TestQueueOutlastsAProxysGatewayErrors: behind a proxy whose replica
// restarts, an upload is answered 502, 503 (with Retry-After) and 504
// before the API takes it. The queue keeps it through all three, waits
// what Retry-After asks before the next attempt, and delivers it exactly
// once; nothing is dropped.
func TestQueueOutlastsAProxysGatewayErrors(t *testing.T) {
	var mu sync.Mutex
	var attempts []time.Time
	taken := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/mounts/M-1/states" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		switch len(attempts) {
		case 1: // nginx's own page
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html><body><center><h1>502 Bad Gateway</h1></center></body></html>")
		case 2:
			w.Header().Set("Content-Type", "application/problem+json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":503,"code":"UNAVAILABLE","detail":"busy"}`)
		case 3:
			w.WriteHeader(http.StatusGatewayTimeout)
		default:
			taken++
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"accepted":1,"duplicates":0}`)
		}
	}))
	defer srv.Close()
	api := newAPIClient(srv.URL+"/api/v1", client.StaticToken("token"), srv.Client())
	q, err := openQueue(t.TempDir(), 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var dropped []Upload
	u := newUploader(q, api.send, nil, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(up Upload, _ error) { dropped = append(dropped, up) }, 10*time.Millisecond, 5*time.Second)
	defer u.close()

	pending, err := u.carry(context.Background(), 50*time.Millisecond, []Upload{report("M-1", 7)})
	if pending != 1 || err != nil {
		t.Fatalf("carry = %d, %v; want 1 pending (kept), no error", pending, err)
	}
	for deadline := time.Now().Add(10 * time.Second); q.stats().Items > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			mu.Lock()
			t.Fatalf("still queued after %d attempts", len(attempts))
		}
	}
	// A further round has nothing to send.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := u.flush(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if taken != 1 || len(attempts) != 4 || len(dropped) != 0 {
		t.Fatalf("taken %d times in %d attempts, dropped %v; want taken once in 4, none dropped", taken, len(attempts), dropped)
	}
	if gap := attempts[2].Sub(attempts[1]); gap < time.Second {
		t.Fatalf("tried again %v after a 503 with Retry-After: 1", gap)
	}
	if gap := attempts[1].Sub(attempts[0]); gap > time.Second {
		t.Fatalf("tried again only %v after a 502: the back-off starts at 10 ms", gap)
	}
}
