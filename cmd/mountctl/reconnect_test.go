package main

import (
	"net/http"
	"testing"

	"github.com/mountd/mountd/client"
)

// TestRetryable: what a long-running command reconnects after, and what
// ends it.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		renews bool
		want   bool
	}{
		{"server going away", &client.CloseError{Code: 1001}, false, true},
		{"socket over the rate limit", &client.CloseError{Code: 4429}, false, true},
		{"operation over the rate limit", &client.RefusedError{Code: "RATE_LIMITED"}, false, true},
		{"mount not found", &client.RefusedError{Code: "NOT_FOUND"}, false, false},
		{"expired fixed token", &client.CloseError{Code: 4401}, false, false},
		{"expired renewed token", &client.CloseError{Code: 4401}, true, true},
		{"429 over HTTP", &client.Error{Status: http.StatusTooManyRequests}, false, true},
		{"400 over HTTP", &client.Error{Status: http.StatusBadRequest}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := retryable(tc.err, tc.renews); got != tc.want {
				t.Errorf("retryable(%v, %v) = %v, want %v", tc.err, tc.renews, got, tc.want)
			}
		})
	}
}
