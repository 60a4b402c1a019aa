package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDownload: a file is written only when its size and SHA-256 match,
// never over an existing file without force, and nothing is left behind
// when it fails.
func TestDownload(t *testing.T) {
	body := []byte("firmware image bytes")
	sum := sha256.Sum256(body)
	good := hex.EncodeToString(sum[:])
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/gone" {
			http.Error(w, "expired", http.StatusForbidden)
			return
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		link    string
		sha     string
		size    int64
		exists  bool
		force   bool
		wantErr string
	}{
		{"verified", srv.URL + "/f", good, int64(len(body)), false, false, ""},
		{"wrong hash", srv.URL + "/f", strings.Repeat("0", 64), int64(len(body)), false, false, "SHA-256"},
		{"shorter than announced", srv.URL + "/f", good, int64(len(body)) + 1, false, false, "bytes"},
		{"longer than announced", srv.URL + "/f", good, int64(len(body)) - 1, false, false, "bytes"},
		{"link refused", srv.URL + "/gone", good, int64(len(body)), false, false, "403"},
		{"file exists", srv.URL + "/f", good, int64(len(body)), true, false, "--force"},
		{"file exists, forced", srv.URL + "/f", good, int64(len(body)), true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "fw.bin")
			if tc.exists {
				if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := download(context.Background(), tc.link, path, tc.sha, tc.size, tc.force, nil)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("download = %v, want %q", err, tc.wantErr)
			}
			got, _ := os.ReadFile(path)
			switch {
			case tc.wantErr == "" && string(got) != string(body):
				t.Fatalf("file holds %q", got)
			case tc.wantErr != "" && tc.exists && string(got) != "old":
				t.Fatalf("a failed download changed the existing file: %q", got)
			case tc.wantErr != "" && !tc.exists && got != nil:
				t.Fatalf("a failed download left %q", got)
			}
			if entries, _ := os.ReadDir(dir); len(entries) > 1 {
				t.Fatalf("temporary files left: %v", entries)
			}
		})
	}
}

// TestProgressAfterASecond: the bar appears only once the download has
// taken more than a second, and then shows the bytes already received.
func TestProgressAfterASecond(t *testing.T) {
	var out strings.Builder
	now := time.Unix(1_700_000_000, 0)
	p := &progress{w: &out, size: 4 << 20, now: func() time.Time { return now }}
	chunk := make([]byte, 1<<20)
	_, _ = p.Write(chunk)
	now = now.Add(900 * time.Millisecond)
	_, _ = p.Write(chunk)
	if out.Len() != 0 {
		t.Fatalf("a bar within the first second: %q", out.String())
	}
	now = now.Add(200 * time.Millisecond)
	_, _ = p.Write(chunk)
	if !strings.Contains(out.String(), "downloading") || !strings.Contains(out.String(), "75%") {
		t.Fatalf("no bar after a second: %q", out.String())
	}
}
