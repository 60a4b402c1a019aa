package protocol_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mountd/mountd/protocol"
)

// message returns n bytes that differ from frame to frame, so a frame
// delivered twice or in the wrong place changes the reassembled bytes.
func message(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/19)
	}
	return b
}

// reassemble feeds every frame and returns the one message they complete.
func reassemble(t *testing.T, frames [][]byte) []byte {
	t.Helper()
	var r protocol.Reassembler
	for i, f := range frames {
		msg, done, err := r.Add(f)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if done != (i == len(frames)-1) {
			t.Fatalf("frame %d of %d: done=%v", i, len(frames), done)
		}
		if done {
			return msg
		}
	}
	t.Fatal("no frame completed the message")
	return nil
}

func TestSplitFrames(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		mtu    int
		frames int
		chunk  int // payload bytes per full frame
	}{
		{"empty message is one last frame", 0, 23, 1, 19},
		{"one byte", 1, 23, 1, 19},
		{"one under a frame", 18, 23, 1, 19},
		{"exactly one frame", 19, 23, 1, 19},
		{"one over a frame", 20, 23, 2, 19},
		{"exactly two frames", 38, 23, 2, 19},
		{"one over two frames", 39, 23, 3, 19},
		{"large MTU exact", 243, 247, 1, 243},
		{"large MTU one over", 244, 247, 2, 243},
		{"smallest useful MTU", 3, 5, 3, 1},
		{"MTU too small falls back to the default", 20, 4, 2, 19},
		{"zero MTU falls back to the default", 19, 0, 1, 19},
		{"128 frames use every sequence number once", 128 * 19, 23, 128, 19},
		{"129 frames wrap to sequence 0", 128*19 + 1, 23, 129, 19},
		{"300 frames wrap twice", 300 * 19, 23, 300, 19},
		{"largest message", protocol.MaxBLEMessage, 23, (protocol.MaxBLEMessage + 18) / 19, 19},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := message(tt.size)
			frames := protocol.SplitFrames(msg, tt.mtu)
			if len(frames) != tt.frames {
				t.Fatalf("%d frames, want %d", len(frames), tt.frames)
			}
			for i, f := range frames {
				last := i == len(frames)-1
				if got, want := f[0]&0x7f, byte(i%128); got != want {
					t.Fatalf("frame %d: sequence %d, want %d", i, got, want)
				}
				if (f[0]&0x80 != 0) != last {
					t.Fatalf("frame %d: last bit %v", i, !last)
				}
				if len(f)-1 > tt.chunk || (!last && len(f)-1 != tt.chunk) {
					t.Fatalf("frame %d: %d payload bytes, chunk %d", i, len(f)-1, tt.chunk)
				}
			}
			if got := reassemble(t, frames); !bytes.Equal(got, msg) {
				t.Fatalf("round trip changed the message (%d bytes, want %d)", len(got), len(msg))
			}
		})
	}
}

func TestSplitFramesDoesNotAlias(t *testing.T) {
	msg := message(40)
	frames := protocol.SplitFrames(msg, 23)
	msg[0] = ^msg[0]
	if frames[0][1] == msg[0] {
		t.Fatal("a frame shares memory with the message")
	}
}

func TestReassemblerRefuses(t *testing.T) {
	three := protocol.SplitFrames(message(50), 23) // sequences 0, 1, 2|last
	tests := []struct {
		name   string
		frames [][]byte
		errAt  int // index of the frame that must fail; -1 for none
		done   int // index of the frame that completes a message; -1 for none
	}{
		{"empty frame", [][]byte{{}}, 0, -1},
		{"first frame not 0", [][]byte{three[1]}, 0, -1},
		{"gap", [][]byte{three[0], three[2]}, 1, -1},
		{"duplicate", [][]byte{three[0], three[1], three[1]}, 2, -1},
		{"lone last frame out of sequence", [][]byte{three[2]}, 0, -1},
		{"a new message restarts a partial one", [][]byte{three[0], three[1], three[0], three[1], three[2]}, -1, 4},
		{"after an error the next message is whole", [][]byte{three[0], three[2], three[0], three[1], three[2]}, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r protocol.Reassembler
			for i, f := range tt.frames {
				msg, done, err := r.Add(f)
				if (err != nil) != (i == tt.errAt) {
					t.Fatalf("frame %d: err %v", i, err)
				}
				if err != nil && !errors.Is(err, protocol.ErrFrame) {
					t.Fatalf("frame %d: %v is not ErrFrame", i, err)
				}
				if done != (i == tt.done) {
					t.Fatalf("frame %d: done=%v", i, done)
				}
				if done && !bytes.Equal(msg, message(50)) {
					t.Fatalf("frame %d: wrong message", i)
				}
			}
		})
	}
}

func TestReassemblerOversize(t *testing.T) {
	frames := protocol.SplitFrames(message(protocol.MaxBLEMessage+1), 247)
	var r protocol.Reassembler
	var failed bool
	for i, f := range frames {
		_, done, err := r.Add(f)
		if done {
			t.Fatalf("frame %d completed an oversize message", i)
		}
		if err != nil {
			if !errors.Is(err, protocol.ErrFrame) || i != len(frames)-1 {
				t.Fatalf("frame %d of %d: %v", i, len(frames), err)
			}
			failed = true
		}
	}
	if !failed {
		t.Fatal("an oversize message was not refused")
	}
	// The reassembler starts afresh.
	small := protocol.SplitFrames([]byte(`{"type":"states"}`), 23)
	for i, f := range small {
		msg, done, err := r.Add(f)
		if err != nil || done != (i == len(small)-1) || (done && string(msg) != `{"type":"states"}`) {
			t.Fatalf("after oversize: frame %d: %q %v %v", i, msg, done, err)
		}
	}
}

func TestReassemblerEmptyMessage(t *testing.T) {
	var r protocol.Reassembler
	msg, done, err := r.Add([]byte{0x80})
	if err != nil || !done || len(msg) != 0 {
		t.Fatalf("got %q %v %v", msg, done, err)
	}
}

// FuzzFrames checks the round trip for any message and MTU, and that no
// frame exceeds what one ATT write or notification carries.
func FuzzFrames(f *testing.F) {
	f.Add([]byte(""), uint16(23))
	f.Add([]byte(`{"code":"RELEASE_HELMET"}`), uint16(23))
	f.Add(message(5000), uint16(5))
	f.Add(message(300), uint16(247))
	f.Add(message(20), uint16(0))
	f.Fuzz(func(t *testing.T, msg []byte, mtu uint16) {
		if len(msg) > protocol.MaxBLEMessage {
			return
		}
		frames := protocol.SplitFrames(msg, int(mtu))
		limit := int(mtu) - 3
		if limit < 2 {
			limit = protocol.BLEDefaultMTU - 3
		}
		var r protocol.Reassembler
		for i, fr := range frames {
			if len(fr) > limit || len(fr) == 0 {
				t.Fatalf("frame %d: %d bytes for MTU %d", i, len(fr), mtu)
			}
			got, done, err := r.Add(fr)
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if done != (i == len(frames)-1) {
				t.Fatalf("frame %d of %d: done=%v", i, len(frames), done)
			}
			if done && !bytes.Equal(got, msg) {
				t.Fatalf("round trip: %d bytes, want %d", len(got), len(msg))
			}
		}
	})
}
