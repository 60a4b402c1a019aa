package idp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDeviceCookies: a device cookie is good for its username (in any
// case), until it expires, from the installation that issued it; not for
// another username, nor altered, nor from another installation.
func TestDeviceCookies(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	d := newDevices([32]byte{1})
	d.now = func() time.Time { return now }
	rec := httptest.NewRecorder()
	d.set(rec, true, "alice")
	c := rec.Result().Cookies()[0]
	if c.Name != deviceCookie || !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.Path != pathLogin {
		t.Fatalf("cookie %+v", c)
	}
	with := func(value string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, pathLogin, nil)
		r.AddCookie(&http.Cookie{Name: deviceCookie, Value: value})
		return r
	}
	other := newDevices([32]byte{2})
	other.now = d.now
	for _, tt := range []struct {
		name     string
		d        *devices
		value    string
		username string
		want     bool
	}{
		{"its username", d, c.Value, "alice", true},
		{"its username in capitals", d, c.Value, " Alice", true},
		{"another username", d, c.Value, "bob", false},
		{"altered", d, strings.Replace(c.Value, ".", "0.", 1), "alice", false},
		{"garbage", d, "x", "alice", false},
		{"another installation", other, c.Value, "alice", false},
	} {
		if got := tt.d.known(with(tt.value), tt.username); got != tt.want {
			t.Errorf("%s: known = %v, want %v", tt.name, got, tt.want)
		}
	}
	if d.known(httptest.NewRequest(http.MethodPost, pathLogin, nil), "alice") {
		t.Error("no cookie: known")
	}
	now = now.Add(deviceCookieTTL)
	if d.known(with(c.Value), "alice") {
		t.Error("expired: known")
	}
}
