package graph

import (
	"net/url"
	"strings"

	"github.com/coder/websocket"
)

// acceptOptions are the WebSocket handshake's options: the subprotocols,
// and the origins a browser may open a socket from besides the request's
// own host (same-origin, always allowed): the origin of publicURL (the
// address people use, MOUNTD_PUBLIC_URL, whatever Host a proxy passes on)
// and the patterns given. Every other Origin is refused with 403.
func acceptOptions(publicURL string, patterns []string) websocket.AcceptOptions {
	origins := append([]string(nil), patterns...)
	if o := publicOriginPattern(publicURL); o != "" {
		origins = append(origins, o)
	}
	return websocket.AcceptOptions{
		Subprotocols:   []string{"graphql-transport-ws", "graphql-ws"},
		OriginPatterns: origins,
	}
}

// publicOriginPattern is the origin of an absolute http(s) URL as a
// browser writes it in Origin (scheme://host, without the scheme's default
// port), as a github.com/coder/websocket pattern that matches it alone
// (its pattern characters escaped); "" when u is not such a URL.
func publicOriginPattern(u string) string {
	p, err := url.Parse(u)
	if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
		return ""
	}
	host := strings.ToLower(p.Host)
	if port := p.Port(); (p.Scheme == "http" && port == "80") || (p.Scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	var b strings.Builder
	for _, r := range p.Scheme + "://" + host {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
