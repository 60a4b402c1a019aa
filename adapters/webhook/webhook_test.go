package webhook_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/adapters/webhook"
	"github.com/mountd/mountd/core"
)

func TestForbidden(t *testing.T) {
	for _, tc := range []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true}, {"10.1.2.3", true}, {"172.16.0.1", true}, {"192.168.1.1", true},
		{"169.254.169.254", true}, {"0.0.0.0", true}, {"0.1.2.3", true}, {"100.64.0.1", true}, {"224.0.0.1", true},
		{"::1", true}, {"::", true}, {"fe80::1", true}, {"fc00::1", true}, {"::ffff:127.0.0.1", true}, {"::ffff:10.0.0.1", true},
		{"93.184.216.34", false}, {"8.8.8.8", false}, {"2606:4700::1111", false}, {"100.128.0.1", false},
		// Special-purpose IPv4: CGNAT's ends, IETF assignments,
		// benchmarking, reserved, broadcast, multicast's end.
		{"100.127.255.254", true}, {"192.0.0.8", true}, {"198.18.0.1", true}, {"198.19.255.255", true},
		{"240.0.0.1", true}, {"255.255.255.255", true}, {"239.255.255.250", true},
		{"192.0.1.1", false}, {"198.20.0.1", false}, {"223.255.255.1", false},
		// NAT64: the well-known prefix is judged by the IPv4 address it
		// carries; the local-use one is refused whole.
		{"64:ff9b::7f00:1", true}, {"64:ff9b::127.0.0.1", true}, {"64:ff9b::10.0.0.1", true},
		{"64:ff9b::192.168.0.1", true}, {"64:ff9b::169.254.169.254", true}, {"64:ff9b::100.64.0.1", true},
		{"64:ff9b::8.8.8.8", false}, {"64:ff9b:1::8.8.8.8", true}, {"64:ff9b:1:ffff::1", true},
		{"64:ff9b::7f00:1%eth0", true},
		// IPv4-compatible, -mapped and -translated forms; 6to4; site-local.
		{"::127.0.0.1", true}, {"::8.8.8.8", true}, {"::ffff:169.254.169.254", true}, {"::ffff:100.64.0.1", true},
		{"::ffff:0:127.0.0.1", true}, {"::ffff:0:8.8.8.8", true}, {"2002:7f00:1::1", true}, {"2002:a00:1::1", true},
		{"2002:808:808::1", false}, {"fec0::1", true}, {"ff02::1", true}, {"fe80::1%eth0", true},
	} {
		if got := webhook.Forbidden(netip.MustParseAddr(tc.ip)); got != tc.want {
			t.Errorf("Forbidden(%s) = %v, want %v", tc.ip, got, tc.want)
		}
	}
}

func TestTargets(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		url   string
		allow bool
		ok    bool
	}{
		{"http://127.0.0.1:8080/hook", false, false},
		{"http://[::1]/hook", false, false},
		{"http://localhost/hook", false, false},
		{"http://api.localhost/hook", false, false},
		{"http://169.254.169.254/latest/meta-data", false, false},
		{"http://[64:ff9b::7f00:1]/hook", false, false},
		{"http://[64:ff9b:1::a00:1]/hook", false, false},
		{"http://[::ffff:7f00:1]/hook", false, false},
		{"http://255.255.255.255/hook", false, false},
		{"https://[64:ff9b::5db8:d822]/hook", false, true},
		{"https://93.184.216.34/hook", false, true},
		{"http://127.0.0.1:8080/hook", true, true},
	} {
		u, _ := url.Parse(tc.url)
		err := webhook.Targets{AllowPrivate: tc.allow}.Check(ctx, u)
		if (err == nil) != tc.ok {
			t.Errorf("Check(%s, allow=%v) = %v, want ok=%v", tc.url, tc.allow, err, tc.ok)
		}
	}
}

// TestSignatureVector: the signing library against the Standard Webhooks
// specification's example.
func TestSignatureVector(t *testing.T) {
	wh, err := standardwebhooks.NewWebhook("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil || sig != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("signature %q, %v", sig, err)
	}
}

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// cursors makes the event ids of the tests' deliveries.
var cursors = core.NewCursorCodec([32]byte{1})

func delivery() core.Delivery {
	return core.Delivery{ID: "whd_1", EventID: core.Cursor{Tx: 1, Seq: 2}, Attempt: 1, Payload: []byte(`{"type":"DELETED"}`)}
}

// TestSendSigns: the receiver verifies the request with the secret; the
// webhook-id is the event's id.
func TestSendSigns(t *testing.T) {
	var verified atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		wh, _ := standardwebhooks.NewWebhook(secret)
		if wh.Verify(body, r.Header) == nil && r.Header.Get("webhook-id") == cursors.Encode(core.Cursor{Tx: 1, Seq: 2}) &&
			r.Header.Get("Content-Type") == "application/json" {
			verified.Store(true)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	res := webhook.NewSender(true, cursors).Send(context.Background(), srv.URL, secret, delivery())
	if res.ResponseStatus != http.StatusNoContent || res.Error != "" || !verified.Load() {
		t.Fatalf("result %+v, verified %v", res, verified.Load())
	}
}

// TestSendRefusesPrivateTargets: without allow-private, the dialler refuses
// a loopback address (as a name resolving there would be), and nothing
// reaches the server; a redirect is not followed.
func TestSendRefusesPrivateTargets(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
	}))
	defer srv.Close()
	res := webhook.NewSender(false, cursors).Send(context.Background(), srv.URL, secret, delivery())
	if res.ResponseStatus != 0 || res.Error == "" || hits.Load() != 0 {
		t.Fatalf("a loopback target: %+v, %d requests arrived", res, hits.Load())
	}
	res = webhook.NewSender(true, cursors).Send(context.Background(), srv.URL, secret, delivery())
	if res.ResponseStatus != http.StatusFound || hits.Load() != 1 {
		t.Fatalf("a redirect: %+v, %d requests", res, hits.Load())
	}
}

// fixedResolver answers every name with its addresses.
type fixedResolver []netip.Addr

func (r fixedResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return r, nil
}

// TestTargetsMessage: a name that resolves inside the network is refused
// with a message that names the setting to allow it, and never the
// address (the operator's internal DNS is not the caller's business).
func TestTargetsMessage(t *testing.T) {
	for _, tc := range []struct{ url, addr string }{
		{"https://intranet.example.com/hook", "10.20.30.40"},
		{"https://metadata.example.com/hook", "fd00:ec2::254"},
		{"http://10.20.30.40/hook", "10.20.30.40"},
		{"http://localhost/hook", "127.0.0.1"},
	} {
		u, _ := url.Parse(tc.url)
		err := webhook.Targets{Resolver: fixedResolver{netip.MustParseAddr(tc.addr)}}.Check(context.Background(), u)
		if err == nil || strings.Contains(err.Error(), tc.addr) || !strings.Contains(err.Error(), "MOUNTD_WEBHOOK_ALLOW_PRIVATE") {
			t.Errorf("Check(%s) resolving to %s: %v; want a refusal naming MOUNTD_WEBHOOK_ALLOW_PRIVATE, not the address", tc.url, tc.addr, err)
		}
	}
}

// TestSendBoundsResponseHeaders: a receiver answering with a megabyte of
// headers makes a failed attempt that says so; one with ordinary headers
// succeeds.
func TestSendBoundsResponseHeaders(t *testing.T) {
	res := webhook.NewSender(true, cursors).Send(context.Background(), testenv.HeaderFloodReceiver(t, 1<<20), secret, delivery())
	if res.ResponseStatus != 0 || !strings.Contains(res.Error, "headers") || !strings.Contains(res.Error, "16 KiB") {
		t.Fatalf("a megabyte of response headers: %+v", res)
	}
	res = webhook.NewSender(true, cursors).Send(context.Background(), testenv.HeaderFloodReceiver(t, 4<<10), secret, delivery())
	if res.ResponseStatus != http.StatusOK || res.Error != "" {
		t.Fatalf("4 KiB of response headers: %+v", res)
	}
}
