// Package console serves the web console: a single-page application of
// plain ES modules and two small vendored libraries, embedded in the
// binary. Every request the page makes stays on mountd's origin (no CDN,
// no remote font), so it works on an air-gapped network, and nothing needs
// Node.js: the files are served as they are in static/.
package console

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
)

//go:embed static
var files embed.FS

// Config is what the page needs to sign in: its OpenID provider and client.
type Config struct {
	// Issuer is the OpenID provider's URL: mountd's own, or MOUNTD_ISSUER.
	Issuer string `json:"issuer"`
	// ClientID is the console's public client at that issuer.
	ClientID string `json:"clientId"`
}

// asset is one file, with its gzip form when that is smaller.
type asset struct {
	body, gzipped []byte
	contentType   string
}

// Handler serves the console under /console/ and its settings at
// /console/config.json.
type Handler struct {
	assets map[string]asset
	config []byte
	csp    string
}

// contentSecurityPolicy allows the page only its own origin: scripts,
// styles, and the API over fetch and WebSocket ('self' covers ws: and wss:
// of the same host); connect adds an external issuer, whose discovery and
// token endpoints the page calls.
func contentSecurityPolicy(connect string) string {
	return "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; " +
		"connect-src 'self'" + connect + "; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
}

// New loads the embedded files.
func New(cfg Config) (*Handler, error) {
	h := &Handler{csp: contentSecurityPolicy("")}
	if u, err := url.Parse(cfg.Issuer); err == nil && u.Host != "" {
		// mountd's own issuer is 'self' already; naming it again is harmless.
		h.csp = contentSecurityPolicy(" " + u.Scheme + "://" + u.Host)
	}
	var err error
	if h.config, err = json.Marshal(cfg); err != nil {
		return nil, err
	}
	h.assets, err = embeddedAssets()
	return h, err
}

// embeddedAssets reads and compresses the embedded files once per process:
// they never change, and compressing them at the best level costs a
// noticeable share of a server's start.
var embeddedAssets = sync.OnceValues(func() (map[string]asset, error) {
	assets := map[string]asset{}
	err := fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		a := asset{body: body, contentType: mime.TypeByExtension(path.Ext(p))}
		if a.contentType == "" {
			a.contentType = "application/octet-stream"
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(body)
		_ = zw.Close()
		if buf.Len() < len(body) {
			a.gzipped = buf.Bytes()
		}
		assets[strings.TrimPrefix(p, "static/")] = a
		return nil
	})
	return assets, err
})

// CompressedSize is what the page's files weigh over the wire, gzip where
// it helps (docs/performance.md).
func (h *Handler) CompressedSize() int {
	n := 0
	for _, a := range h.assets {
		if a.gzipped != nil {
			n += len(a.gzipped)
		} else {
			n += len(a.body)
		}
	}
	return n
}

// ServeHTTP serves /console/ (the page, also for any path that is not a
// file, so that links into the page work), its files and config.json.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/console/")
	hdr := w.Header()
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("Referrer-Policy", "no-referrer")
	// On every answer, so that the page is framed or loaded under no
	// other policy by whichever of its addresses it is opened at
	// (/console/, /console/index.html, a deep link).
	hdr.Set("Content-Security-Policy", h.csp)
	hdr.Set("X-Frame-Options", "DENY")
	if name == "config.json" {
		hdr.Set("Content-Type", "application/json")
		hdr.Set("Cache-Control", "no-cache")
		_, _ = w.Write(h.config)
		return
	}
	a, ok := h.assets[name]
	if !ok || name == "" {
		a = h.assets["index.html"]
	}
	hdr.Set("Content-Type", a.contentType)
	// Files change only with the binary; revalidating is cheap on loopback
	// and a proxy, and an upgrade is never served stale.
	hdr.Set("Cache-Control", "no-cache")
	hdr.Add("Vary", "Accept-Encoding")
	body := a.body
	if a.gzipped != nil && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		hdr.Set("Content-Encoding", "gzip")
		body = a.gzipped
	}
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}
