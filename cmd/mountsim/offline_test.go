package main

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/sdk"
)

// TestPhoneNet: a phone without network reaches nothing; a killed upload
// reaches the server but not its answer the phone, and nothing of that
// client goes out afterwards.
func TestPhoneNet(t *testing.T) {
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
	defer srv.Close()
	tests := []struct {
		name     string
		down     bool
		kill     bool
		path     string
		wantErr  error
		wantSent int64 // requests the server got, the second one included
	}{
		{name: "online", path: "/api/v1/mounts/M/offline-receipts", wantSent: 2},
		{name: "no network", down: true, path: "/api/v1/mounts/M/offline-receipts", wantErr: errNoNetwork},
		{name: "killed upload", kill: true, path: "/api/v1/mounts/M/offline-receipts", wantErr: errKilled, wantSent: 1},
		{name: "kill spares other calls", kill: true, path: "/api/v1/mounts/M/states", wantSent: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got.Store(0)
			n := &phoneNet{base: http.DefaultTransport}
			n.down.Store(tc.down)
			if tc.kill {
				n.kill = func() bool { return true }
			}
			hc := &http.Client{Transport: n}
			res, err := hc.Post(srv.URL+tc.path, "application/json", strings.NewReader("{}"))
			if err == nil {
				_ = res.Body.Close()
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if res, err := hc.Get(srv.URL + "/api/v1/mounts/M"); err == nil { // after a kill: nothing goes out
				_ = res.Body.Close()
			}
			if got.Load() != tc.wantSent {
				t.Errorf("server got %d requests, want %d", got.Load(), tc.wantSent)
			}
			if n.killed.Load() != (tc.wantErr == errKilled) {
				t.Errorf("killed %v", n.killed.Load())
			}
		})
	}
}

// TestRiderKeeper: for a mount where the rider's grant was revoked, the
// tampered keeper keeps the grant and holds no list; other mounts are
// kept as the SDK's keeper keeps them.
func TestRiderKeeper(t *testing.T) {
	fk, err := sdk.NewFileKeeper(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	k := &riderKeeper{GrantKeeper: fk, banned: map[string]sdk.StoredGrant{}}
	now := time.Now()
	a := sdk.StoredGrant{ID: "gr_a", UID: "A", NotBefore: now, NotAfter: now.Add(time.Hour)}
	b := sdk.StoredGrant{ID: "gr_b", UID: "B", NotBefore: now, NotAfter: now.Add(time.Hour)}
	for _, g := range []sdk.StoredGrant{a, b} {
		if err := k.PutGrant(g); err != nil {
			t.Fatal(err)
		}
	}
	k.ban(a)
	for _, id := range []string{"gr_a", "gr_b"} { // what RefreshGrants does with revoked grants
		if err := k.DeleteGrant(id); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := k.Grants()
	if err != nil || len(gs) != 1 || gs[0].ID != "gr_a" {
		t.Fatalf("grants %+v, %v; want the banned one only", gs, err)
	}
	for _, uid := range []string{"A", "B"} {
		if err := k.PutRevocations(sdk.StoredRevocations{UID: uid, Version: 2, Epoch: 1, Text: "revocations;" + uid + ";2;1;gr_a"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, held, _ := k.Revocations("A"); held {
		t.Error("the banned mount's list is held")
	}
	if _, held, _ := k.Revocations("B"); !held {
		t.Error("another mount's list is not held")
	}
}
