// Package webhook delivers events to operator servers over HTTP, signed as
// the Standard Webhooks specification says, and refuses targets inside the
// operator's network unless MOUNTD_WEBHOOK_ALLOW_PRIVATE allows them: the
// check is made on the address actually dialled, so a name that resolves
// elsewhere at delivery time (DNS rebinding) gains nothing.
package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/telemetry"
)

var (
	_ core.WebhookSender  = (*Sender)(nil)
	_ core.WebhookTargets = Targets{}
)

// forbidden4 are IPv4 ranges that are no public receiver, besides those
// netip classifies (loopback, private, link-local, multicast).
var forbidden4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("100.64.0.0/10"), // shared address space (CGNAT): inside a carrier's network
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments (DS-Lite, NAT64 discovery)
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking: lab networks
	netip.MustParsePrefix("240.0.0.0/4"),   // reserved, with the broadcast address 255.255.255.255
}

// forbidden6 are IPv6 ranges refused whole: forms that carry an IPv4
// address to a translator or stack of the operator's network, and the
// deprecated site-local range.
var forbidden6 = []netip.Prefix{
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated), with :: and ::1
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated (SIIT)
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64 (RFC 8215): the operator's own translator
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// The well-known NAT64 prefix (RFC 6052) and 6to4 reach the IPv4 address
// they embed through a gateway: they are judged by that address, so that
// an IPv6-only deployment behind DNS64 still reaches public receivers
// while 64:ff9b::127.0.0.1 or 64:ff9b::10.0.0.1 is refused.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Forbidden reports whether ip is no place for a webhook: loopback,
// private, link-local, unspecified, multicast, broadcast, shared or
// reserved address space, in IPv4 or any IPv6 form that carries it.
func Forbidden(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("") // a zoned address matches no prefix
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsUnspecified() || ip.IsMulticast() || ip.IsInterfaceLocalMulticast() || !ip.IsValid() {
		return true
	}
	b := ip.As16()
	switch {
	case ip.Is4():
		return inAny(forbidden4, ip)
	case inAny(forbidden6, ip):
		return true
	case nat64.Contains(ip):
		return Forbidden(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(ip):
		return Forbidden(netip.AddrFrom4([4]byte(b[2:6])))
	}
	return false
}

func inAny(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// The refusals name the setting that allows such targets, and never the
// address a name resolved to: the operator's internal DNS is no business
// of whoever registers a webhook.
var (
	errForbidden = errors.New("the target is a loopback, private or link-local address, " +
		"allowed only when the server runs with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true")
	errResolvesForbidden = errors.New("the host resolves to a loopback, private or link-local address, " +
		"allowed only when the server runs with MOUNTD_WEBHOOK_ALLOW_PRIVATE=true")
)

// Targets checks webhook URLs when they are set.
type Targets struct {
	// AllowPrivate lets webhooks reach the operator's own network.
	AllowPrivate bool
	// Resolver looks names up; nil: net.DefaultResolver.
	Resolver Resolver
}

// Resolver looks a host name up; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Check refuses a host that is, or resolves to, a forbidden address. A
// name that does not resolve now is accepted: the dialler checks again at
// every delivery.
func (t Targets) Check(ctx context.Context, u *url.URL) error {
	if t.AllowPrivate {
		return nil
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if Forbidden(ip) {
			return errForbidden
		}
		return nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return errForbidden
	}
	var r Resolver = net.DefaultResolver
	if t.Resolver != nil {
		r = t.Resolver
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if Forbidden(ip) {
			return errResolvesForbidden
		}
	}
	return nil
}

// maxResponse bounds what is read of a receiver's answer, and
// maxResponseHeaders its headers (net/http's default is 10 MiB per
// response: 20 receivers answering with megabytes of short header lines
// took gigabytes).
const (
	maxResponse        = 64 << 10
	maxResponseHeaders = 16 << 10
)

// Sender makes delivery attempts over HTTP.
type Sender struct {
	client  *http.Client
	now     func() time.Time
	cursors *core.CursorCodec // the event's id, webhook-id, as clients see it
}

// NewSender returns a sender whose connections may reach forbidden
// addresses only when allowPrivate is set.
func NewSender(allowPrivate bool, cursors *core.CursorCodec) *Sender {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		dialer.Control = func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil || Forbidden(ap.Addr()) {
				return errForbidden
			}
			return nil
		}
	}
	transport := &http.Transport{
		Proxy:                  nil, // a proxy would dial for us, past the check
		DialContext:            dialer.DialContext,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  core.WebhookTimeout,
		MaxResponseHeaderBytes: maxResponseHeaders,
		// As many idle connections to one host as attempts a replica makes
		// to one account's webhooks (core's cap): with fewer, a burst
		// dialled a new connection for most attempts and closed it after.
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 32,
		IdleConnTimeout:     90 * time.Second,
	}
	var rt http.RoundTripper = transport
	if telemetry.Enabled() {
		rt = otelhttp.NewTransport(transport, otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return "webhook delivery" }))
	}
	return &Sender{now: time.Now, cursors: cursors, client: &http.Client{
		Transport: rt,
		Timeout:   core.WebhookTimeout,
		// A redirect is an answer, not a new target to follow (it could
		// point inside the network): 3xx counts as a failed attempt.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Send implements core.WebhookSender.
func (s *Sender) Send(ctx context.Context, target, secret string, d core.Delivery) core.DeliveryResult {
	start := s.now()
	res := core.DeliveryResult{AttemptedAt: start.UTC().Truncate(time.Millisecond)}
	fail := func(err error) core.DeliveryResult {
		res.Error, res.Duration = describe(err), time.Since(start)
		return res
	}
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return fail(fmt.Errorf("signing secret: %w", err))
	}
	id := d.MessageID
	if id == "" {
		id = s.cursors.Encode(d.EventID)
	}
	sig, err := wh.Sign(id, start, d.Payload)
	if err != nil {
		return fail(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(d.Payload))
	if err != nil {
		return fail(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "mountd-webhooks")
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, fmt.Sprint(start.Unix()))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	answer, err := s.client.Do(req)
	if err != nil {
		return fail(err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(answer.Body, maxResponse))
	answer.Body.Close()
	res.ResponseStatus, res.Duration = answer.StatusCode, time.Since(start)
	return res
}

// describe says in one short line why an attempt failed, for the
// deliveries list.
func describe(err error) string {
	switch {
	case errors.Is(err, errForbidden):
		return errForbidden.Error()
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		return fmt.Sprintf("no answer within %s", core.WebhookTimeout)
	case strings.Contains(err.Error(), "response headers exceeded"): // net/http has no error value for it
		return fmt.Sprintf("the receiver's response headers exceed %d KiB", maxResponseHeaders>>10)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "the host name does not resolve"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return "cannot connect: " + opErr.Err.Error()
	}
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}
