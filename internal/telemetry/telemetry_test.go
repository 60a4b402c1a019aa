package telemetry_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/mountd/mountd/internal/telemetry"
)

func TestLogHandlerAddsTraceIDs(t *testing.T) {
	var out bytes.Buffer
	logger := slog.New(telemetry.LogHandler{slog.NewTextHandler(&out, nil)}).With("component", "test")
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8},
		TraceFlags: trace.FlagsSampled})
	logger.InfoContext(trace.ContextWithSpanContext(context.Background(), sc), "traced")
	logger.InfoContext(context.Background(), "untraced")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "trace_id=0102030405060708090a0b0c0d0e0f10 span_id=0102030405060708") ||
		!strings.Contains(lines[0], "component=test") || strings.Contains(lines[1], "trace_id") {
		t.Fatalf("log lines:\n%s", out.String())
	}
}
