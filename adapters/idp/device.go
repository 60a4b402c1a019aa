package idp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/mountd/mountd/core"
)

// deviceCookie marks a browser in which a username signed in (OWASP's
// device cookie, against lockout): such a browser is not held by the
// failed sign-ins of everyone else behind its address, only by its own
// username's.
const deviceCookie = "mountd_device"

// deviceCookieTTL is how long a browser stays known after a sign-in.
const deviceCookieTTL = 30 * 24 * time.Hour

// devices issues and checks device cookies: `<expiry unix s>.<HMAC>` over
// the username and the expiry, with a key of the installation, so that a
// cookie is good for one username and cannot be made up or moved to
// another. Every replica derives the same key.
type devices struct {
	key [32]byte
	now func() time.Time
}

// newDevices derives the cookies' key from secret (the installation's
// CryptoKey), apart from what zitadel uses it for.
func newDevices(secret [32]byte) *devices {
	m := hmac.New(sha256.New, secret[:])
	m.Write([]byte("mountd login device cookie"))
	d := &devices{now: time.Now}
	copy(d.key[:], m.Sum(nil))
	return d
}

func (d *devices) mac(username, expiry string) []byte {
	m := hmac.New(sha256.New, d.key[:])
	m.Write([]byte(core.NormalizeUsername(username) + "\x00" + expiry))
	return m.Sum(nil)
}

// known reports whether r carries a live device cookie of username.
func (d *devices) known(r *http.Request, username string) bool {
	c, err := r.Cookie(deviceCookie)
	if err != nil || len(c.Value) > 128 {
		return false
	}
	expiry, sum, ok := strings.Cut(c.Value, ".")
	exp, err := strconv.ParseInt(expiry, 10, 64)
	if !ok || err != nil || !d.now().Before(time.Unix(exp, 0)) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(sum)
	return err == nil && hmac.Equal(got, d.mac(username, expiry))
}

// set gives the browser a device cookie of username.
func (d *devices) set(w http.ResponseWriter, secure bool, username string) {
	expiry := strconv.FormatInt(d.now().Add(deviceCookieTTL).Unix(), 10)
	http.SetCookie(w, &http.Cookie{Name: deviceCookie, Value: expiry + "." + base64.RawURLEncoding.EncodeToString(d.mac(username, expiry)),
		Path: pathLogin, HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode, MaxAge: int(deviceCookieTTL / time.Second)})
}
