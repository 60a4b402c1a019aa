// Package graphiql serves GraphiQL for /graphql from files embedded in the
// binary, so that the page works without internet (an air-gapped
// installation, a laptop on a train). The vendored files, their versions
// and licences are in assets/; scripts/vendor-graphiql.sh refreshes them.
package graphiql

import (
	"bufio"
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed assets page.html
var files embed.FS

// Handler serves the page at /graphiql and its assets under
// /graphiql/assets/. The page loads nothing from elsewhere, and its
// Content-Security-Policy says so to the browser.
func Handler() http.Handler {
	assets, err := fs.Sub(files, "assets")
	if err != nil {
		panic(err)
	}
	page := renderPage()
	static := http.StripPrefix("/graphiql/assets/", http.FileServerFS(assets))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/graphiql":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Header().Set("Cache-Control", "no-cache")
			w.Header().Set("Content-Security-Policy", contentSecurityPolicy)
			_, _ = w.Write(page)
		case strings.HasPrefix(r.URL.Path, "/graphiql/assets/") && !strings.HasSuffix(r.URL.Path, "/"):
			// Names carry no version: revalidate daily rather than forever.
			w.Header().Set("Cache-Control", "public, max-age=86400")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			static.ServeHTTP(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

// contentSecurityPolicy allows this server only: scripts and styles from
// /graphiql/assets (GraphiQL sets inline styles), requests to /graphql over
// HTTP and WebSocket.
const contentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"img-src 'self' data:; font-src 'self' data:; connect-src 'self' ws: wss:; worker-src 'self' blob:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// renderPage fills the page's integrity attributes from assets/SRI, which
// the vendoring script checked against the pinned hashes.
func renderPage() []byte {
	sri := map[string]string{}
	raw, err := files.ReadFile("assets/SRI")
	if err != nil {
		panic(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if name, hash, ok := strings.Cut(sc.Text(), "  "); ok {
			sri[name] = hash
		}
	}
	tmpl := template.Must(template.ParseFS(files, "page.html"))
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, map[string]string{
		"CSS":      sri["graphiql.min.css"],
		"React":    sri["react.production.min.js"],
		"ReactDOM": sri["react-dom.production.min.js"],
		"GraphiQL": sri["graphiql.min.js"],
	}); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
