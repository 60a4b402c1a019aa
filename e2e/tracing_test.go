package e2e

import (
	"bytes"
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mountd/mountd/client"
)

// otlpReceiver is an OTLP/HTTP trace endpoint that keeps what it is sent.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

type receivedSpan struct{ name, scope, traceID string }

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var body io.Reader = req.Body
		if req.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(req.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		raw, _ := io.ReadAll(body)
		var export coltracepb.ExportTraceServiceRequest
		if req.URL.Path != "/v1/traces" || proto.Unmarshal(raw, &export) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					r.spans = append(r.spans, receivedSpan{name: s.Name, scope: ss.Scope.GetName(), traceID: hex.EncodeToString(s.TraceId)})
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.Close)
	return r
}

// has reports whether a span matching pass has arrived.
func (r *otlpReceiver) has(pass func(receivedSpan) bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if pass(s) {
			return true
		}
	}
	return false
}

// TestTracing: with OTEL_EXPORTER_OTLP_ENDPOINT set, mountd on PostgreSQL
// and Redis sends spans over OTLP/HTTP for HTTP requests (continuing the
// caller's traceparent, named by route), GraphQL operations, database
// queries, Redis commands and webhook deliveries.
func TestTracing(t *testing.T) {
	otlp := newOTLPReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "100") // milliseconds between exports
	cfg := backends(t)["postgres+redis"](t)
	cfg.WebhookAllowPrivate = true
	in := start(t, cfg)
	f := newFleet(in, "Traced")
	hooks := newReceiver(t)
	res, body := f.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": hooks.URL})
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("create webhook: %d %s", res.StatusCode, body)
	}
	hooks.setSecret(decode[webhookView](t, body).Secret)
	api := client.New(in.base, client.StaticToken(f.token))
	associate(t, api, "MNT-T1")
	reportStates(t, api, "MNT-T1", 70, true, time.Now())
	hooks.waitFor(t, "deliveries", func(c []webhookCall) bool { return len(c) >= 1 })

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest(http.MethodGet, in.base+"/api/v1/accounts/me", nil)
	req.Header.Set("Access-Key", f.token)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	if res, _ := in.do(req); res.StatusCode != http.StatusOK {
		t.Fatalf("me: %d", res.StatusCode)
	}
	gql, _ := http.NewRequest(http.MethodPost, in.base+"/graphql", bytes.NewReader([]byte(`{"query":"query Fleet { mounts { mounts { uid } } }","operationName":"Fleet"}`)))
	gql.Header.Set("Content-Type", "application/json")
	gql.Header.Set("Access-Key", f.token)
	if res, err := http.DefaultClient.Do(gql); err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("graphql: %v %v", res, err)
	}

	for what, pass := range map[string]func(receivedSpan) bool{
		"the request, in the caller's trace, named by its route": func(s receivedSpan) bool {
			return s.name == "GET /api/v1/accounts/me" && s.traceID == traceID
		},
		"the GraphQL operation": func(s receivedSpan) bool { return s.name == "graphql query mounts" },
		"a database query":      func(s receivedSpan) bool { return strings.Contains(s.scope, "bun") },
		"a Redis command":       func(s receivedSpan) bool { return strings.Contains(s.scope, "redisotel") },
		"a webhook delivery":    func(s receivedSpan) bool { return s.name == "webhook delivery" },
	} {
		deadline := time.Now().Add(10 * time.Second)
		for !otlp.has(pass) {
			if time.Now().After(deadline) {
				otlp.mu.Lock()
				t.Fatalf("no span for %s among %+v", what, otlp.spans)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
