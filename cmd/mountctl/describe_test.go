package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/mountd/mountd/client"
)

// TestDescribeEvent: the lines of `mountctl events` and `mountctl watch`
// name what an operator needs: an alarm's rule and severity, a mount's
// presence and when it was last seen.
func TestDescribeEvent(t *testing.T) {
	for _, tc := range []struct {
		name, event string
		describe    func(json.RawMessage) string
		want        []string
	}{
		{"alarm raised names rule and severity", `{"type":"ALARM_RAISED","uid":"M-1","occurredAt":"2026-11-29T01:00:00Z",
			"alarm":{"id":"al_1","ruleName":"Battery low","severity":"CRITICAL","state":"ACTIVE","uid":"M-1"}}`,
			describeEvent, []string{"ALARM_RAISED", "M-1", `CRITICAL "Battery low" ACTIVE alarm al_1`}},
		{"alarm cleared", `{"type":"ALARM_CLEARED","uid":"M-1","occurredAt":"2026-11-29T01:00:00Z",
			"alarm":{"id":"al_1","ruleName":"Too hot","severity":"WARNING","state":"CLEARED"}}`,
			describeEvent, []string{"ALARM_CLEARED", `WARNING "Too hot" CLEARED alarm al_1`}},
		{"watch: offline with last seen", `{"type":"MOUNT_OFFLINE","uid":"M-1","occurredAt":"2026-11-29T01:15:00Z",
			"mount":{"presence":"OFFLINE","lastSeenAt":"2026-11-29T01:00:00Z"}}`,
			describeStateEvent, []string{"2026-11-29T01:15:00Z M-1 OFFLINE, last seen 2026-11-29T01:00:00Z"}},
		{"watch: online", `{"type":"MOUNT_ONLINE","uid":"M-1","occurredAt":"2026-11-29T02:00:00Z",
			"mount":{"presence":"ONLINE","lastSeenAt":"2026-11-29T02:00:00Z"}}`,
			describeStateEvent, []string{"M-1 ONLINE, last seen 2026-11-29T02:00:00Z"}},
		{"watch: a report shows presence and last seen", `{"type":"STATES_REPORTED","uid":"M-1","occurredAt":"2026-11-29T02:00:00Z",
			"states":[{"code":"BATTERY_LEVEL","value":"80","verified":true}],
			"mount":{"associationState":"ASSOCIATED","presence":"ONLINE","lastSeenAt":"2026-11-29T02:00:01Z","batteryLevel":80}}`,
			describeStateEvent, []string{"BATTERY_LEVEL=80 |", "ONLINE", "seen=2026-11-29T02:00:01Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.describe(json.RawMessage(tc.event))
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("line %q lacks %q", got, w)
				}
			}
		})
	}
}

// TestOutage: an outage is one line saying why in words (not the dial
// error), then one line when it ends; a log file gets a new line only when
// the reason changes.
func TestOutage(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"dial refused", fmt.Errorf("dial ws://127.0.0.1:1/graphql: %w", refused), "replica gone (connection refused)"},
		{"reset", fmt.Errorf("read: %w", os.NewSyscallError("read", syscall.ECONNRESET)), "replica gone (connection lost)"},
		{"eof", fmt.Errorf("read: %w", io.EOF), "replica gone (connection lost)"},
		{"proxy 502", &client.Error{Status: http.StatusBadGateway}, "replica gone (502 from the server or its proxy)"},
		{"going away", &client.CloseError{Code: 1001}, "going away"},
		{"dropped socket", &client.CloseError{Code: 1006}, "replica gone (the connection dropped)"},
		{"token expired", &client.CloseError{Code: 4403, Acked: true}, "the token expired"},
		{"rate limit", &client.RefusedError{Code: "RATE_LIMITED"}, "rate limit"},
		{"deadline", context.DeadlineExceeded, "no answer in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outageReason(tc.err); !strings.Contains(got, tc.want) {
				t.Errorf("outageReason(%v) = %q, want %q", tc.err, got, tc.want)
			}
		})
	}

	var buf bytes.Buffer
	o := &outage{w: &buf}
	for range 3 {
		o.failed(refused)
	}
	o.failed(&client.Error{Status: http.StatusBadGateway})
	o.recovered("resuming after the last event printed")
	o.recovered("twice") // no outage: nothing
	want := "mountctl: replica gone (connection refused), reconnecting (attempt 1)\n" +
		"mountctl: replica gone (502 from the server or its proxy), reconnecting (attempt 4)\n" +
		"mountctl: reconnected after 4 attempts, resuming after the last event printed\n"
	if buf.String() != want {
		t.Errorf("log file got\n%s\nwant\n%s", buf.String(), want)
	}

	buf.Reset()
	o = &outage{w: &buf, tty: true}
	o.failed(refused)
	o.failed(refused)
	o.recovered("resuming")
	if got := buf.String(); strings.Count(got, "\n") != 2 || !strings.Contains(got, "\rmountctl: replica gone (connection refused), reconnecting (attempt 2)") ||
		!strings.HasSuffix(got, "mountctl: reconnected after 2 attempts, resuming\n") {
		t.Errorf("terminal got %q", got)
	}
}

// TestPageFooter: an empty list says so, never "page 1 of 0".
func TestPageFooter(t *testing.T) {
	for _, tc := range []struct {
		name                string
		pagination          map[string]int
		prefix, noun, empty string
		want                string
	}{
		{"a page", map[string]int{"currentPage": 2, "totalPages": 3, "totalItems": 45}, "", "rules", "", "page 2 of 3, 45 rules\n"},
		{"no rules", map[string]int{"currentPage": 1, "totalPages": 0, "totalItems": 0}, "", "rules", "", "0 rules\n"},
		{"no deliveries", map[string]int{"currentPage": 1}, "", "deliveries", "no deliveries yet", "no deliveries yet\n"},
		{"a job's mounts", map[string]int{"currentPage": 1, "totalPages": 1, "totalItems": 2}, "mounts ", "mounts", "", "mounts page 1 of 1, 2 mounts\n"},
		{"no mounts of a job", map[string]int{}, "mounts ", "mounts", "", "0 mounts\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			pageFooter(&b, tc.pagination, tc.prefix, tc.noun, tc.empty)
			if b.String() != tc.want {
				t.Errorf("got %q, want %q", b.String(), tc.want)
			}
		})
	}
}

// TestEventsSaysEmpty: an empty event or audit log says so (on stderr, beside
// --json's stdout), rather than printing nothing.
func TestEventsSaysEmpty(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"events":[],"entries":[],"next":"c1"}`)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "--cursor-file", t.TempDir() + "/cursor"}, "no events yet"},
		{[]string{"audit"}, "no audit entries"},
	} {
		var out, errOut bytes.Buffer
		err := newCommand(&out, &errOut).Run(t.Context(), append([]string{"mountctl", "--api", srv.URL, "--token", "tok"}, tc.args...))
		if err != nil || out.Len() != 0 || strings.TrimSpace(errOut.String()) != tc.want {
			t.Errorf("%v on an empty log: %v, stdout %q, stderr %q (want %q)", tc.args, err, out.String(), errOut.String(), tc.want)
		}
	}
}
