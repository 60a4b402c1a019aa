package proxies

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Parse reads MOUNTD_TRUSTED_PROXIES: addresses or CIDR
// prefixes separated by commas.
func Parse(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return nil, fmt.Errorf("trusted proxies: %q is neither an address nor a CIDR prefix", part)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// ClientAddress makes r.RemoteAddr the client's address when the request
// came through a trusted reverse proxy: X-Forwarded-For is read from the
// right, past the trusted proxies, and the first address not trusted is
// the client (addresses further left are the client's word, not the
// proxies'). Throttles per source address (sign-in, client secrets) then
// count clients, not the proxy. Without trusted proxies the header is
// ignored: anyone could write it.
func ClientAddress(next http.Handler, trusted []netip.Prefix) http.Handler {
	if len(trusted) == 0 {
		return next
	}
	isTrusted := func(a netip.Addr) bool {
		a = a.Unmap()
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, err := netip.ParseAddrPort(r.RemoteAddr)
		if err != nil || !isTrusted(peer.Addr()) {
			next.ServeHTTP(w, r)
			return
		}
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // garbage: keep the proxy's address
			}
			if !isTrusted(a) || i == 0 {
				r2 := r.Clone(r.Context())
				r2.RemoteAddr = net.JoinHostPort(a.Unmap().String(), "0")
				next.ServeHTTP(w, r2)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
