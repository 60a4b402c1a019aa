package bunstore

import "testing"

// TestArrayLiterals: the report's arrays are PostgreSQL array literals
// whatever the values hold (they are validated before, but the literal
// must not depend on it).
func TestArrayLiterals(t *testing.T) {
	text := func(vs ...string) string {
		var b []byte
		for i, v := range vs {
			b = appendArrayText(b, i, len(vs), v)
		}
		return string(b)
	}
	for _, tt := range []struct{ got, want string }{
		{text("BATTERY_LEVEL"), `{"BATTERY_LEVEL"}`},
		{text("1", "-0.5", ""), `{"1","-0.5",""}`},
		{text(`a"b`, `c\d`, "NULL", "{x,y}"), `{"a\"b","c\\d","NULL","{x,y}"}`},
	} {
		if tt.got != tt.want {
			t.Errorf("got %s, want %s", tt.got, tt.want)
		}
	}
	var b []byte
	for i, v := range []int64{1732608000000, -5, 0} {
		b = appendArrayInt(b, i, 3, v)
	}
	if string(b) != "{1732608000000,-5,0}" {
		t.Errorf("integers: %s", b)
	}
}
