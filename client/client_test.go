package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestTransient(t *testing.T) {
	_, dialErr := net.Dial("tcp", "127.0.0.1:1")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"no answer", fmt.Errorf("cannot reach mountd: %w", dialErr), true},
		{"answer cut short", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"timeout", context.DeadlineExceeded, true},
		{"stopped", context.Canceled, false},
		{"502", &Error{Status: 502}, true},
		{"503", &Error{Status: 503}, true},
		{"504", &Error{Status: 504}, true},
		{"408", &Error{Status: 408}, true},
		{"429", &Error{Status: 429}, true},
		{"500", &Error{Status: 500}, false},
		{"400", &Error{Status: 400, Code: "VALIDATION_FAILED"}, false},
		{"404", &Error{Status: 404, Code: "MOUNT_NOT_FOUND"}, false},
		{"something else", errors.New("bad JSON"), false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 29, 2, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"0", 0},
		{"-5", 0},
		{"999999999999", time.Hour},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
	} {
		if got := retryAfter(http.Header{"Retry-After": {tc.header}}, now); got != tc.want {
			t.Errorf("Retry-After %q: %v, want %v", tc.header, got, tc.want)
		}
	}
}

// An answer's Retry-After reaches the *Error, also for a proxy's page;
// the token endpoint behind the same proxy failing is an *Error with its
// status, not a refusal.
func TestErrorsCarryTheWait(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "<html>503</html>")
	}))
	defer srv.Close()
	err := New(srv.URL, StaticToken("t")).Do(context.Background(), http.MethodPost, "/mounts/M/states", map[string]any{}, nil)
	if !Transient(err) || RetryAfterOf(err) != 7*time.Second || StatusOf(err) != 503 {
		t.Fatalf("Do = %v (wait %v)", err, RetryAfterOf(err))
	}
	src := CredentialsSource(ClientCredentials(srv.URL, "cid", "secret", []string{"openid"}), srv.Client())
	err = New(srv.URL, src).Do(context.Background(), http.MethodGet, "/mounts", nil, nil)
	if !Transient(err) || RetryAfterOf(err) != 7*time.Second || StatusOf(err) != 503 {
		t.Fatalf("with the token endpoint unavailable: %v", err)
	}
}

func TestRetryWait(t *testing.T) {
	asked := &Error{Status: 503, RetryAfter: 7 * time.Second}
	for range 100 {
		if d := RetryWait(&Error{Status: 502}, time.Second, time.Minute); d < time.Second/2 || d > time.Second {
			t.Fatalf("back-off of 1 s: %v", d)
		}
	}
	if d := RetryWait(asked, time.Second, time.Minute); d != 7*time.Second {
		t.Fatalf("Retry-After 7 s: %v", d)
	}
	if d := RetryWait(asked, time.Second, 5*time.Second); d != 5*time.Second {
		t.Fatalf("Retry-After 7 s, at most 5 s: %v", d)
	}
	if d := RetryWait(&Error{Status: 503, RetryAfter: time.Millisecond}, time.Second, time.Minute); d < time.Second/2 {
		t.Fatalf("a Retry-After shorter than the back-off: %v", d)
	}
}
