package main

import (
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress counts a download's bytes and shows a bar on w once the download
// has taken more than a second: a quick one stays silent, and so does one
// whose stderr is not a terminal (newProgress returns nil then).
type progress struct {
	w     io.Writer
	size  int64
	now   func() time.Time
	start time.Time
	done  int64
	bar   *progressbar.ProgressBar
}

// newProgress is a progress of size bytes on stderr, nil when stderr is not
// a terminal (a script's log keeps no bar).
func newProgress(size int64) *progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{w: os.Stderr, size: size, now: time.Now}
}

func (p *progress) Write(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = p.now()
	}
	p.done += int64(len(b))
	if p.bar == nil && p.now().Sub(p.start) > time.Second {
		p.bar = progressbar.NewOptions64(p.size, progressbar.OptionSetWriter(p.w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription("downloading"), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(p.w, "\n") }))
		_ = p.bar.Set64(p.done)
	} else if p.bar != nil {
		_ = p.bar.Add(len(b))
	}
	return len(b), nil
}
