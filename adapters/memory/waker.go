package memory

import (
	"context"
	"sync"

	"github.com/mountd/mountd/core"
)

var _ core.EventWaker = (*Waker)(nil)

// wakeupBuffer is how many wake-ups a listener may leave unread before
// further ones are dropped (its next read of the log catches up anyway).
const wakeupBuffer = 64

// Waker is core.EventWaker within one process.
type Waker struct {
	mu        sync.Mutex
	listeners map[chan core.Cursor]struct{}
}

// NewWaker returns a waker without listeners.
func NewWaker() *Waker { return &Waker{listeners: map[chan core.Cursor]struct{}{}} }

// Wake hands c to every listener without waiting.
func (w *Waker) Wake(_ context.Context, c core.Cursor) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.listeners {
		select {
		case ch <- c:
		default:
		}
	}
	return nil
}

// Wakeups registers a listener until ctx ends; its channel closes then.
func (w *Waker) Wakeups(ctx context.Context) (<-chan core.Cursor, error) {
	ch := make(chan core.Cursor, wakeupBuffer)
	w.mu.Lock()
	w.listeners[ch] = struct{}{}
	w.mu.Unlock()
	context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.listeners, ch)
		close(ch)
	})
	return ch, nil
}
