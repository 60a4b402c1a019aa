package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func eventTypes(events []eventView) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type+" "+e.UID)
	}
	return out
}

// TestEventFeed covers docs/api.md, "Event log", over REST and GraphQL on
// both backends: the log in order, paging by cursor, filters, rights, the
// long poll, and a subscription resumed from a cursor.
func TestEventFeed(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			e1, e2 := uniqueUID("E1"), uniqueUID("E2")
			a.associate(t, e1, nil)
			a.confirm(t, e1)
			a.associate(t, e2, nil)
			b.associate(t, uniqueUID("B1"), nil)
			base := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			a.report(t, e1, entry("BATTERY_LEVEL", "40", base))
			a.report(t, e2, entry("BATTERY_LEVEL", "50", base))

			want := []string{"ASSOCIATION_REQUESTED " + e1, "ASSOCIATION_CONFIRMED " + e1, "ASSOCIATION_REQUESTED " + e2,
				"STATES_REPORTED " + e1, "STATES_REPORTED " + e2}
			// The feed answers settled events only (docs/api.md): on a
			// PostgreSQL cluster shared with parallel tests a report's event
			// waits for their open transactions. Poll until all have settled.
			all := a.events(t, nil)
			for i := 0; len(all.Events) < len(want) && i < 200; i++ {
				time.Sleep(50 * time.Millisecond)
				all = a.events(t, nil)
			}
			if got := eventTypes(all.Events); !slices.Equal(got, want) {
				t.Fatalf("the log = %v, want %v", got, want)
			}
			if r := all.Events[3]; len(r.States) != 1 || r.States[0].Value != "40" || r.Mount.BatteryLevel == nil || *r.Mount.BatteryLevel != 40 {
				t.Fatalf("the report's event: %+v", r)
			}

			// Paging by cursor gives the same log, each event once.
			first := a.events(t, url.Values{"limit": {"2"}})
			rest := a.events(t, url.Values{"after": {first.Next}, "limit": {"100"}})
			if got := eventTypes(append(first.Events, rest.Events...)); !slices.Equal(got, want) {
				t.Fatalf("paged = %v", got)
			}
			if again := a.events(t, url.Values{"after": {rest.Next}}); len(again.Events) != 0 || again.Next == "" {
				t.Fatalf("after the end: %+v", again)
			}
			only := a.events(t, url.Values{"types": {"STATES_REPORTED,ASSOCIATION_CONFIRMED"}, "mountUid": {e1}})
			if got := eventTypes(only.Events); !slices.Equal(got, []string{"ASSOCIATION_CONFIRMED " + e1, "STATES_REPORTED " + e1}) {
				t.Fatalf("filtered = %v", got)
			}
			if other := b.events(t, nil); len(other.Events) != 1 {
				t.Fatalf("another account sees %v", eventTypes(other.Events))
			}
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:"+e2)}
			if got := eventTypes(rider.events(t, nil).Events); !slices.Equal(got, []string{"ASSOCIATION_REQUESTED " + e2, "STATES_REPORTED " + e2}) {
				t.Fatalf("a rider limited to %s sees %v", e2, got)
			}

			// tail=N: the last N, oldest first, next after them.
			tail := a.events(t, url.Values{"tail": {"2"}})
			if got := eventTypes(tail.Events); !slices.Equal(got, want[3:]) || tail.Next != rest.Next {
				t.Fatalf("tail=2 = %v next %s, want %v next %s", got, tail.Next, want[3:], rest.Next)
			}
			if got := eventTypes(a.events(t, url.Values{"tail": {"1"}, "mountUid": {e1}}).Events); !slices.Equal(got, want[3:4]) {
				t.Fatalf("tail=1 of %s = %v", e1, got)
			}
			if got := eventTypes(rider.events(t, url.Values{"tail": {"1000"}}).Events); !slices.Equal(got, []string{"ASSOCIATION_REQUESTED " + e2, "STATES_REPORTED " + e2}) {
				t.Fatalf("a rider's tail %v", got)
			}

			for _, bad := range []url.Values{
				{"after": {"garbage"}}, {"limit": {"0"}}, {"limit": {"1001"}}, {"wait": {"31"}}, {"wait": {"x"}},
				{"types": {"EXPLODED"}}, {"mountUid": {"not a uid!"}}, {"colour": {"red"}},
			} {
				res, body := a.call(http.MethodGet, "/api/v1/events?"+bad.Encode(), nil)
				wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED")
			}
			for _, bad := range []url.Values{{"tail": {"0"}}, {"tail": {"1001"}}, {"tail": {"x"}}, {"tail": {"5"}, "after": {first.Next}},
				{"tail": {"5"}, "limit": {"5"}}, {"tail": {"5"}, "wait": {"1"}}} {
				res, body := a.call(http.MethodGet, "/api/v1/events?"+bad.Encode(), nil)
				if p := wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED"); len(p.Errors) != 1 || p.Errors[0].Field != "tail" {
					t.Fatalf("%s: %s", bad.Encode(), body)
				}
			}

			// The long poll answers when an event arrives, or when wait ends
			// with next unchanged.
			start := time.Now()
			empty := a.events(t, url.Values{"after": {rest.Next}, "wait": {"1"}})
			if len(empty.Events) != 0 || empty.Next != rest.Next || time.Since(start) < 900*time.Millisecond {
				t.Fatalf("an empty wait: %+v after %v", empty, time.Since(start))
			}
			go func() {
				time.Sleep(200 * time.Millisecond)
				a.report(t, e1, entry("BATTERY_LEVEL", "41", base.Add(time.Second)))
			}()
			// A wait that ends without the event answers with none: an
			// event in the answer is the wake-up (no clock needed).
			woken := a.events(t, url.Values{"after": {rest.Next}, "wait": {"30"}})
			if got := eventTypes(woken.Events); !slices.Equal(got, []string{"STATES_REPORTED " + e1}) {
				t.Fatalf("a wait: %v", got)
			}

			// GraphQL reads the same log.
			r := a.gql(t, `query($after: ID) { events(after: $after, limit: 3) { next events { id type uid states { value } } } }`,
				map[string]any{"after": first.Next})
			if r.code() != "" {
				t.Fatalf("events query: %+v", r.Errors)
			}
			page := decodeField[eventPageView](t, r, "events")
			if len(page.Events) != 3 || page.Events[0].ID != rest.Events[0].ID || len(page.Events[1].States) != 1 || page.Events[1].States[0].Value != "40" {
				t.Fatalf("GraphQL's page after %s: %+v", first.Next, page)
			}
			if r := a.gql(t, `{ events(after: "garbage") { next } }`, nil); r.code() != "VALIDATION_FAILED" {
				t.Fatalf("a malformed cursor in GraphQL: %+v", r.Errors)
			}

			// A subscription resumed from a cursor replays what followed it,
			// then goes live, with no gap and no duplicate.
			c := in.wsReady(t, a.token)
			c.Subscribe("r", `subscription($after: ID) { mountEvents(after: $after) { id type uid } }`, map[string]any{"after": all.Events[2].ID})
			var replayed []string
			for _, e := range append(all.Events[3:], woken.Events...) {
				got := nextData[eventView](t, c, "r", "mountEvents")
				if got.ID != e.ID {
					t.Fatalf("replayed %s %s, want %s %s", got.ID, got.Type, e.ID, e.Type)
				}
				replayed = append(replayed, got.ID)
			}
			a.report(t, e2, entry("BATTERY_LEVEL", "51", base.Add(time.Second)))
			live := nextData[eventView](t, c, "r", "mountEvents")
			if live.Type != "STATES_REPORTED" || live.UID != e2 || slices.Contains(replayed, live.ID) {
				t.Fatalf("live after the replay: %+v", live)
			}
			c.Quiet(200 * time.Millisecond)
		})
	}
}

// TestEventsClientGone: a client that closes a long poll of the feed is
// counted as 499 (client closed request), not as a 5xx.
func TestEventsClientGone(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			f := newFleet(in, "Gone")
			ctx, cancel := context.WithCancel(t.Context())
			wrote := make(chan struct{})
			ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(wrote) }})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, in.base+"/api/v1/events?wait=30", nil)
			req.Header.Set("Access-Key", f.token)
			done := make(chan error, 1)
			go func() {
				res, err := http.DefaultClient.Do(req)
				if err == nil {
					res.Body.Close()
				}
				done <- err
			}()
			<-wrote
			cancel()
			if err := <-done; err == nil {
				t.Fatal("the long poll answered before it was cancelled")
			}
			const gone = `mountd_http_requests_total{method="GET",route="GET /api/v1/events",status="499"}`
			var page string
			for deadline := time.Now().Add(30 * time.Second); metricValue(page, gone) != 1; {
				if time.Now().After(deadline) {
					t.Fatalf("no 499 for the cancelled long poll:\n%s", page)
				}
				time.Sleep(50 * time.Millisecond)
				_, body := in.call(http.MethodGet, "/metrics", "", nil)
				page = string(body)
			}
			if strings.Contains(page, `status="500"`) {
				t.Fatalf("a 500 counted:\n%s", page)
			}
		})
	}
}

// TestEventCursorsPrivate: a cursor reveals nothing of other accounts: B's
// next and eventCursor do not move when A reports (over REST, a long poll
// and GraphQL),
// cursors are opaque, and one the server did not make is VALIDATION_FAILED.
func TestEventCursorsPrivate(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			ua, ub := uniqueUID("PA"), uniqueUID("PB")
			a.associate(t, ua, nil)
			b.associate(t, ub, nil)
			// On PostgreSQL an event is read once every older transaction
			// has ended: wait for it (a long poll).
			start := b.events(t, url.Values{"wait": {"10"}})
			if len(start.Events) != 1 {
				t.Fatalf("B's events: %+v", start)
			}
			if start.Next != start.Events[0].ID {
				t.Fatalf("next %s after a page is not its last event %s", start.Next, start.Events[0].ID)
			}
			base := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			for i := range 5 {
				a.report(t, ua, entry("BATTERY_LEVEL", strconv.Itoa(50+i), base.Add(time.Duration(i)*time.Second)))
			}
			if got := b.events(t, url.Values{"after": {start.Next}}); len(got.Events) != 0 || got.Next != start.Next {
				t.Fatalf("B after A reported: %+v, want no events and next %s", got, start.Next)
			}
			if got := b.events(t, url.Values{"after": {start.Next}, "wait": {"1"}}); len(got.Events) != 0 || got.Next != start.Next {
				t.Fatalf("B's long poll after A reported: %+v, want next %s", got, start.Next)
			}
			gq := b.gql(t, `query($after: ID) { events(after: $after) { next events { id } } }`, map[string]any{"after": start.Next})
			if page := decodeField[struct{ Next string }](t, gq, "events"); page.Next != start.Next {
				t.Fatalf("GraphQL next %s, want %s", page.Next, start.Next)
			}
			// GraphQL's eventCursor, where the console starts a subscription,
			// is B's own position too: its last event, whatever A does.
			eventCursor := func(f fleet) string { return decodeField[string](t, f.gql(t, `{ eventCursor }`, nil), "eventCursor") }
			if got := eventCursor(b); got != start.Next {
				t.Fatalf("B's eventCursor %s, want its last event %s", got, start.Next)
			}
			// Without a cursor and without events, next reveals nothing either.
			c := newFleet(in, "C")
			empty, emptyCursor := c.events(t, nil), eventCursor(c)
			a.report(t, ua, entry("BATTERY_LEVEL", "70", base.Add(10*time.Second)))
			if again := c.events(t, nil); again.Next != empty.Next {
				t.Fatalf("C's next moved with A's report: %s, then %s", empty.Next, again.Next)
			}
			// A's report is readable (its own feed shows it) and moved
			// neither B's nor C's eventCursor.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				got := a.events(t, url.Values{"types": {"STATES_REPORTED"}})
				if len(got.Events) == 6 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("A's reports readable: %d of 6", len(got.Events))
				}
			}
			if got := eventCursor(b); got != start.Next {
				t.Fatalf("B's eventCursor moved with A's reports: %s, want %s", got, start.Next)
			}
			if got := eventCursor(c); got != emptyCursor {
				t.Fatalf("C's eventCursor moved with A's reports: %s, then %s", emptyCursor, got)
			}

			// Forged cursors: a raw position, and a valid cursor altered.
			raw := make([]byte, 16)
			raw[15] = 1
			forged := []string{base64.RawURLEncoding.EncodeToString(raw), tamper(start.Next), "x"}
			for _, cur := range forged {
				res, body := b.call(http.MethodGet, "/api/v1/events?after="+url.QueryEscape(cur), nil)
				wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED")
			}
			// Equal positions give equal cursors.
			if again := b.events(t, nil); again.Next != start.Next || again.Events[0].ID != start.Events[0].ID {
				t.Fatalf("the same event's cursor changed: %+v, then %+v", start, again)
			}
		})
	}
}

// tamper changes one character of a cursor.
func tamper(c string) string {
	b := []byte(c)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
