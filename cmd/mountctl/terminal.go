package main

import (
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// terminalText writes text for a terminal: what the server sent (names,
// descriptions, reasons, error details) is printed as it is, but its
// control characters are shown escaped (\x1b, \u009b) and bytes that are
// not UTF-8 as U+FFFD, so that no text of the server's can move the
// cursor, retitle the window or hide a line. Newlines and tabs pass: the
// output's own layout uses them. With json set it writes JSON, which
// escapes C0 controls itself but not C1 ones (U+0080–U+009F, CSI among
// them): those become \u00XX escapes, the same JSON string. Each Write is
// taken on its own (fmt, tabwriter and encoding/json never split a
// character between writes).
type terminalText struct {
	w    io.Writer
	json bool
}

func (t terminalText) Write(p []byte) (int, error) {
	out := make([]byte, 0, len(p))
	for b := p; len(b) > 0; {
		r, n := utf8.DecodeRune(b)
		switch {
		case t.json && r >= 0x80 && r <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, r)
		case t.json:
			out = append(out, b[:n]...)
		case r == utf8.RuneError && n == 1:
			out = utf8.AppendRune(out, utf8.RuneError)
		case r == '\n' || r == '\t':
			out = append(out, b[0])
		case unicode.IsControl(r) && r < 0x80:
			out = fmt.Appendf(out, `\x%02x`, r)
		case unicode.IsControl(r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}
