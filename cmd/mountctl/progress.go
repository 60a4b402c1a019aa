package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress counts a transfer's bytes and shows a bar on w once it has
// taken more than a second: a quick one stays silent, and so does one whose
// stderr is not a terminal (the constructors return nil then). With rows
// set it shows them too (an export's rows, counted by its caller).
type progress struct {
	w     io.Writer
	size  int64 // -1: unknown
	now   func() time.Time
	start time.Time
	done  int64
	bar   *progressbar.ProgressBar
	rows  func() int64
	label string // what the bar says; default "downloading"
}

// newProgress is a download's progress of size bytes on stderr, nil when
// stderr is not a terminal (a script's log keeps no bar).
func newProgress(size int64) *progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{w: os.Stderr, size: size, now: time.Now}
}

// newRowProgress is an export's progress on stderr: bytes and rows, its
// size unknown; nil as newProgress.
func newRowProgress(rows func() int64) *progress {
	if !term.IsTerminal(int(os.Stderr.Fd())) {
		return nil
	}
	return &progress{w: os.Stderr, size: -1, now: time.Now, rows: rows}
}

func (p *progress) Write(b []byte) (int, error) {
	if p.start.IsZero() {
		p.start = p.now()
	}
	p.done += int64(len(b))
	if p.bar == nil && p.now().Sub(p.start) > time.Second {
		p.bar = progressbar.NewOptions64(p.size, progressbar.OptionSetWriter(p.w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription(p.describe()), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(p.w, "\n") }))
		_ = p.bar.Set64(p.done)
	} else if p.bar != nil {
		if p.rows != nil {
			p.bar.Describe(p.describe())
		}
		_ = p.bar.Add(len(b))
	}
	return len(b), nil
}

// Set moves the count to n (an install that resumes may go back).
func (p *progress) Set(n int64) {
	if p.start.IsZero() {
		p.start = p.now()
	}
	p.done = n
	if p.bar == nil && p.now().Sub(p.start) > time.Second {
		p.bar = progressbar.NewOptions64(p.size, progressbar.OptionSetWriter(p.w), progressbar.OptionShowBytes(true),
			progressbar.OptionSetDescription(p.describe()), progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(p.w, "\n") }))
	}
	if p.bar != nil {
		_ = p.bar.Set64(n)
	}
}

func (p *progress) describe() string {
	if p.label != "" {
		return p.label
	}
	if p.rows == nil {
		return "downloading"
	}
	return fmt.Sprintf("exporting: %d rows", p.rows())
}

// Finish ends the bar's line, if a bar was shown.
func (p *progress) Finish() {
	if p != nil && p.bar != nil {
		_ = p.bar.Finish() // its completion writes the newline
	}
}
