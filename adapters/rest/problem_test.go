package rest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientGoneIsNoServerError: a request that ends because its client
// went away is answered 499 and logged below ERROR, so that it never
// counts as a 5xx nor trips an alert on errors in the log.
func TestClientGoneIsNoServerError(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "/api/v1/events?wait=30", nil)
	w := httptest.NewRecorder()
	writeError(w, r, logger, fmt.Errorf("read events: %w", context.Canceled))
	if w.Code != 499 {
		t.Errorf("status %d, want 499", w.Code)
	}
	if strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("logged as an error: %s", log.String())
	}

	// The same error while the client is still there is the server's.
	log.Reset()
	w = httptest.NewRecorder()
	writeError(w, httptest.NewRequest(http.MethodGet, "/api/v1/events", nil), logger, context.Canceled)
	if w.Code != http.StatusInternalServerError || !strings.Contains(log.String(), "level=ERROR") {
		t.Errorf("status %d, log %q; want 500 logged at ERROR", w.Code, log.String())
	}
}
