package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
)

// TestTerminalText: the server's text reaches the terminal with its
// control characters escaped, in human output and in JSON, which stays the
// same JSON.
func TestTerminalText(t *testing.T) {
	for _, tc := range []struct{ name, in, human string }{
		{"plain", "Front rack – rear", "Front rack – rear"},
		{"layout", "a\tb\n", "a\tb\n"},
		{"escape sequence", "low\x1b[2Jbattery", `low\x1b[2Jbattery`},
		{"window title", "x\x1b]0;owned\x07", `x\x1b]0;owned\x07`},
		{"carriage return", "ok\rFAIL", `ok\x0dFAIL`},
		{"DEL", "a\x7f", `a\x7f`},
		{"C1 CSI", "a\u009b2J", `a\u009b2J`},
		{"not UTF-8", "a\x9b2J", "a\uFFFD2J"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var human bytes.Buffer
			jsonOut := false
			p := &printer{w: &human, json: &jsonOut}
			if err := p.print(nil, func(w io.Writer) { fmt.Fprint(w, tc.in) }); err != nil || human.String() != tc.human {
				t.Errorf("human: %q, %v; want %q", human.String(), err, tc.human)
			}
			var js bytes.Buffer
			jsonOut = true
			p.w = &js
			if err := p.print(map[string]string{"name": tc.in}, nil); err != nil {
				t.Fatal(err)
			}
			var back map[string]string
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatalf("JSON %q: %v", js.String(), err)
			}
			if want := strings.ToValidUTF8(tc.in, "\uFFFD"); back["name"] != want {
				t.Errorf("JSON reads back %q, want %q", back["name"], want)
			}
			for _, b := range js.Bytes() {
				if b < 0x20 && b != '\n' {
					t.Errorf("JSON holds a raw control byte: %q", js.String())
				}
			}
			if bytes.Contains(js.Bytes(), []byte("\u009b")) {
				t.Errorf("JSON holds a raw C1 control: %q", js.String())
			}
		})
	}
}
