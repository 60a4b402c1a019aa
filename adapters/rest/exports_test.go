package rest

import (
	"encoding/json"
	"testing"
)

// TestCSVCell: the console's rule for cells a spreadsheet would run as a
// formula, and RFC 4180 quoting.
func TestCSVCell(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"Front", "Front"},
		{"=1+2", "'=1+2"},
		{"+1+2", "'+1+2"},
		{"-1+2", "'-1+2"},
		{"@SUM(A1)", "'@SUM(A1)"},
		{"\tx", "'\tx"},
		{"\rx", "\"'\rx\""},
		{"-12.5", "-12.5"},
		{"-5", "-5"},
		{"a,b", `"a,b"`},
		{`say "hi"`, `"say ""hi"""`},
		{"two\nlines", "\"two\nlines\""},
		{" padded", `" padded"`},
		{"=a,b", `"'=a,b"`},
		{"x=1", "x=1"},
	} {
		if got := string(appendCSVCell(nil, tc.in)); got != tc.want {
			t.Errorf("cell %q = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestJSONString: the hand-written quoting of state lines is encoding/json's.
func TestJSONString(t *testing.T) {
	for _, s := range []string{"", "M-1", "a\"b", `back\slash`, "ctl\x01", "<&>", "ünï", "\u2028"} {
		want, _ := json.Marshal(s)
		if got := string(appendJSONString(nil, s)); got != string(want) {
			t.Errorf("%q = %s, want %s", s, got, want)
		}
	}
}
