package graph

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// fakeEvents answers every read with a page of n events of states each,
// after block (when set) lets it go.
type fakeEvents struct {
	EventLog
	n, states int
	started   chan struct{}
	block     func(ctx context.Context)
}

func (f *fakeEvents) Events(ctx context.Context, _ core.Principal, _ core.EventsRequest) (core.EventPage, error) {
	if f.started != nil {
		select {
		case f.started <- struct{}{}:
		default:
		}
	}
	if f.block != nil {
		f.block(ctx)
	}
	at := time.Date(2026, 11, 22, 1, 40, 13, 0, time.UTC)
	page := core.EventPage{Events: make([]core.Event, f.n)}
	for i := range page.Events {
		e := core.Event{ID: core.Cursor{Tx: uint64(i + 1)}, Type: core.EventStatesReported, UID: "M1",
			Mount: core.Mount{UID: "M1"}, OccurredAt: at}
		for j := range f.states {
			e.States = append(e.States, core.StateEntry{Code: core.StateBatteryLevel, Value: "80", OccurredAt: at.Add(time.Duration(j) * time.Millisecond)})
		}
		page.Events[i] = e
	}
	return page, nil
}

// countingTags counts the tag reads resolvers make.
type countingTags struct {
	NfcTags
	calls atomic.Int64
}

func (c *countingTags) TagsOfMounts(_ context.Context, _ core.Principal, uids []string) (map[string][]core.NfcTag, error) {
	c.calls.Add(1)
	return map[string][]core.NfcTag{}, nil
}

// serveGraph runs the handler as mountd does behind rest, which puts the
// principal in the request's context; done gets a value when a request's
// handling ends.
func serveGraph(t testing.TB, r *Resolver, opts Options) (url string, done chan struct{}) {
	t.Helper()
	if r.Logger == nil {
		r.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := NewHandler(r, nil, opts)
	done = make(chan struct{}, 16)
	p := core.Principal{AccountID: "A", Grant: core.Grant{Role: core.RoleOwner, Complete: true}, ExpiresAt: time.Now().Add(time.Hour)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		defer func() {
			select {
			case done <- struct{}{}:
			default:
			}
		}()
		h.ServeHTTP(w, req.WithContext(core.WithPrincipal(req.Context(), p)))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, done
}

func post(ctx context.Context, url, query string) (*http.Response, error) {
	body, _ := json.Marshal(map[string]string{"query": query})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return http.DefaultClient.Do(req)
}

// TestAnswerSizeLimit: an answer that grows past MaxResponseBytes stops
// being resolved and is replaced by one RESPONSE_TOO_LARGE error; one
// under it is answered whole.
func TestAnswerSizeLimit(t *testing.T) {
	opts := DefaultOptions
	opts.MaxResponseBytes = 256 << 10
	url, _ := serveGraph(t, &Resolver{EventLog: &fakeEvents{n: 1000, states: 50}, Cursors: core.NewCursorCodec([32]byte{1})}, opts)
	for _, tc := range []struct {
		name, query string
		tooLarge    bool
	}{
		{"1,000 events of 50 states", `{ events(limit: 1000) { events { id states { code value occurredAt } } } }`, true},
		{"1,000 events' ids", `{ events(limit: 1000) { events { id } } }`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := post(context.Background(), url, tc.query)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			var r struct {
				Data   json.RawMessage
				Errors []struct {
					Message    string
					Extensions map[string]any
				}
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("%v: %.300s", err, raw)
			}
			if !tc.tooLarge {
				if len(r.Errors) > 0 || !strings.Contains(string(r.Data), `"id"`) {
					t.Fatalf("%.300s", raw)
				}
				return
			}
			if len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != "RESPONSE_TOO_LARGE" || !strings.Contains(r.Errors[0].Message, "262144") ||
				(len(r.Data) > 0 && string(r.Data) != "null") {
				t.Fatalf("%.500s", raw)
			}
			if len(raw) > 1000 {
				t.Fatalf("the refusal is %d bytes", len(raw))
			}
		})
	}
}

// TestClientGoneStopsResolving: once the client has gone, a query's
// remaining fields are not resolved (here: no tag reads for the mounts of
// a page of events whose read ended as the client left) and its handling
// ends.
func TestClientGoneStopsResolving(t *testing.T) {
	started := make(chan struct{}, 1)
	tags := &countingTags{}
	events := &fakeEvents{n: 1000, states: 1, started: started, block: func(ctx context.Context) {
		<-ctx.Done() // a slow read that finishes as the client leaves
	}}
	url, done := serveGraph(t, &Resolver{EventLog: events, NfcService: tags, Cursors: core.NewCursorCodec([32]byte{1})}, DefaultOptions)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		res, err := post(ctx, url, `{ events(limit: 1000) { events { id mount { uid nfcTags { uid } } } } }`)
		if err == nil {
			res.Body.Close()
		}
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the query did not start")
	}
	cancel()
	if err := <-errc; err == nil {
		t.Fatal("the request was answered although the client left")
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler is still running 30 s after the client left")
	}
	if n := tags.calls.Load(); n != 0 {
		t.Fatalf("%d tag reads after the client left", n)
	}
}

// TestCancelledFieldsAreNotFaults: a field that fails because its
// operation ended is not logged as an internal error.
func TestCancelledFieldsAreNotFaults(t *testing.T) {
	var logged strings.Builder
	present := errorPresenter(slog.New(slog.NewTextHandler(&logged, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	got := present(ctx, fmt.Errorf("read events: %w", context.Canceled))
	if got.Extensions["code"] != "CANCELLED" || logged.Len() > 0 {
		t.Fatalf("presented %q %v, logged %q", got.Message, got.Extensions, logged.String())
	}
}
