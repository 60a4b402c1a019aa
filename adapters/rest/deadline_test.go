package rest

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestRequestDeadlineByRoute(t *testing.T) {
	for _, tc := range []struct {
		method, target string
		atLeast, below time.Duration
	}{
		{http.MethodGet, "/api/v1/mounts", 0, 2 * time.Second},
		{http.MethodPost, "/api/v1/grants/revoke", riderRevokeTimeout - time.Second, riderRevokeTimeout + time.Second},
		{http.MethodGet, "/api/v1/grants/revoke", 0, 2 * time.Second},
		{http.MethodPost, "/api/v1/grants/gr_1/revoke", 0, 2 * time.Second},
		{http.MethodGet, "/api/v1/events?wait=20", 20 * time.Second, 22 * time.Second},
	} {
		var left time.Duration
		h := WithRequestDeadline(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			deadline, ok := r.Context().Deadline()
			if !ok {
				t.Fatalf("%s %s: no deadline", tc.method, tc.target)
			}
			left = time.Until(deadline)
		}), time.Second)
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.target, nil))
		if left < tc.atLeast || left >= tc.below {
			t.Errorf("%s %s: deadline in %v, want within [%v, %v)", tc.method, tc.target, left, tc.atLeast, tc.below)
		}
	}
}
