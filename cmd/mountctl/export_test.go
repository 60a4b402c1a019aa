package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExportFile: an export reaches its file only whole; a refused, cut
// short or interrupted one leaves neither the file nor a temporary one,
// and an existing file is kept without --force.
func TestExportFile(t *testing.T) {
	const whole = "uid,code,value,occurredAt,receivedAt,verified\r\nM-1,BATTERY_LEVEL,80,2026-11-22T01:40:13.123Z,2026-11-22T01:40:14.002Z,false\r\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("mountUid") {
		case "cut":
			// What mountd does when an export fails after its first bytes.
			_, _ = w.Write([]byte(whole[:60]))
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "other":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Not Found","status":404,"code":"MOUNT_NOT_FOUND","detail":"mount \"other\" not found"}`))
		default:
			_, _ = w.Write([]byte(whole))
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name, mount string
		exists      bool
		force       bool
		wantErr     string
		want        string // the file afterwards; "" absent
	}{
		{"whole", "M-1", false, false, "", whole},
		{"cut short", "cut", false, false, "ended after", ""},
		{"refused", "other", false, false, "MOUNT_NOT_FOUND", ""},
		{"file exists", "M-1", true, false, "--force", "old"},
		{"file exists, forced", "M-1", true, true, "", whole},
		{"cut short over an existing file", "cut", true, true, "ended after", "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "states.csv")
			if tc.exists {
				if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			json := false
			var stdout bytes.Buffer
			s := &settings{API: srv.URL, Token: "token"}
			err := runExport(context.Background(), s, &printer{w: &stdout, json: &json},
				"/exports/states?mountUid="+tc.mount, "csv", path, tc.force)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("export = %v, want %q", err, tc.wantErr)
			}
			got, statErr := os.ReadFile(path)
			if tc.want == "" && statErr == nil || tc.want != "" && string(got) != tc.want {
				t.Fatalf("file %q (%v), want %q", got, statErr, tc.want)
			}
			entries, _ := os.ReadDir(dir)
			if want := map[bool]int{true: 0, false: 1}[tc.want == ""]; len(entries) != want {
				t.Fatalf("the folder holds %v, want %d file(s)", entries, want)
			}
			if tc.wantErr == "" && stdout.String() != "wrote "+path+": 1 rows, "+strconv.Itoa(len(whole))+" bytes\n" {
				t.Fatalf("stdout %q", stdout.String())
			}
		})
	}
}

// TestExportProgress: an export's bar, once shown, names the rows so far.
func TestExportProgress(t *testing.T) {
	var out strings.Builder
	now := time.Unix(1_700_000_000, 0)
	rows := &rowCounter{header: 1}
	p := &progress{w: &out, size: -1, now: func() time.Time { return now }, rows: rows.rows}
	write := func(s string) {
		_, _ = rows.Write([]byte(s))
		_, _ = p.Write([]byte(s))
	}
	write("uid,code\r\nM-1,A\r\n")
	now = now.Add(1100 * time.Millisecond)
	write("M-1,B\r\nM-1,C\r\n")
	now = now.Add(time.Second)
	write("M-1,D\r\n")
	p.Finish()
	if !strings.Contains(out.String(), "exporting: 4 rows") {
		t.Fatalf("the bar: %q", out.String())
	}
}
