package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/client"
)

// TestExports covers docs/api.md, "Exports" on both backends: the header
// lines and rows exactly, formula escaping, NDJSON lines equal to the REST
// objects, and every refusal.
func TestExports(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			a.associate(t, "E1", map[string]any{"name": "=cmd|' /C calc'!A0", "serialNumber": "SN,1", "macAddress": "aa:bb:cc:dd:ee:ff",
				"firmwareRevision": "1.0.0", "softwareRevision": "1.0.0", "modelNumber": "MX-1"})
			a.confirm(t, "E1")
			a.associate(t, "E2", map[string]any{"name": `He said "hi"`, "serialNumber": "-SN2", "modelNumber": "-5"})
			b.associate(t, "EB", nil)
			// Within MOUNTD_OFFLINE_AFTER: the reports make E1 seen and ONLINE.
			base := time.Now().UTC().Add(-10 * time.Minute).Truncate(time.Millisecond)
			a.report(t, "E1", entry("BATTERY_LEVEL", "80.5", base), entry("CPU_TEMPERATURE", "-12.25", base),
				entry("MOUNT_LOCKED", "1", base), entry("BATTERY_LEVEL", "79", base.Add(time.Minute)))
			b.report(t, "EB", entry("BATTERY_LEVEL", "1", base))
			e1 := a.get(t, "E1")
			if e1.LastSeenAt == nil || e1.Presence != "ONLINE" {
				t.Fatalf("E1 after its reports: lastSeenAt %v, presence %s", e1.LastSeenAt, e1.Presence)
			}
			e1Seen := *e1.LastSeenAt

			history := decode[historyView](t, a.ok(t, http.MethodGet, "/api/v1/mounts/E1/states", nil)).States
			received := map[string]string{} // by code and occurredAt
			for _, s := range history {
				received[s.Code+s.OccurredAt] = s.ReceivedAt
			}
			at := func(d time.Duration) string { return base.Add(d).Format("2006-01-02T15:04:05.000Z") }
			stateLine := func(code, value string, d time.Duration) string {
				return fmt.Sprintf("E1,%s,%s,%s,%s,false", code, value, at(d), received[code+at(d)])
			}
			e1Row := "E1,'=cmd|' /C calc'!A0,\"SN,1\",AA:BB:CC:DD:EE:FF,1.0.0,1.0.0,MX-1,ASSOCIATED,true,,79,-12.3," + *e1.AssociatedAt + ",," + e1Seen + "," + e1.Presence + ","
			e2Row := `E2,"He said ""hi""",'-SN2,,,,-5,IDLE,,,,,,,,UNKNOWN,`
			oldestFirst := []string{stateLine("BATTERY_LEVEL", "80.5", 0), stateLine("CPU_TEMPERATURE", "-12.25", 0),
				stateLine("MOUNT_LOCKED", "1", 0), stateLine("BATTERY_LEVEL", "79", time.Minute)}

			for _, tc := range []struct {
				name, path      string
				wantType, wantF string
				want            []string
			}{
				{"mounts csv by default", "/api/v1/exports/mounts", "text/csv; charset=utf-8", "mounts.csv", []string{mountsHeader, e1Row, e2Row}},
				{"mounts csv, a fleet filter", "/api/v1/exports/mounts?filter=" + url.QueryEscape(`batteryLevel < 80 AND presence = "ONLINE"`),
					"text/csv; charset=utf-8", "mounts.csv", []string{mountsHeader, e1Row}},
				{"mounts csv, NOT over a missing value", "/api/v1/exports/mounts?filter=" + url.QueryEscape(`NOT batteryLevel < 80`),
					"text/csv; charset=utf-8", "mounts.csv", []string{mountsHeader, e2Row}},
				{"mounts csv", "/api/v1/exports/mounts?format=csv&filter=", "text/csv; charset=utf-8", "mounts.csv", nil},
				{"states csv, oldest first", "/api/v1/exports/states?mountUid=E1", "text/csv; charset=utf-8", "states-E1.csv",
					append([]string{statesHeader}, oldestFirst...)},
				{"states csv from inclusive to exclusive", "/api/v1/exports/states?mountUid=E1&from=" + url.QueryEscape(at(0)) + "&to=" + url.QueryEscape(at(time.Minute)),
					"text/csv; charset=utf-8", "states-E1.csv", append([]string{statesHeader}, oldestFirst[:3]...)},
				{"states csv, none in range", "/api/v1/exports/states?mountUid=E1&from=" + url.QueryEscape(at(time.Hour)),
					"text/csv; charset=utf-8", "states-E1.csv", []string{statesHeader}},
				{"states csv of a mount without history", "/api/v1/exports/states?mountUid=E2", "text/csv; charset=utf-8", "states-E2.csv",
					[]string{statesHeader}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					res, body := a.call(http.MethodGet, tc.path, nil)
					if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != tc.wantType ||
						res.Header.Get("Content-Disposition") != `attachment; filename="`+tc.wantF+`"` {
						t.Fatalf("%d %q %q\n%s", res.StatusCode, res.Header.Get("Content-Type"), res.Header.Get("Content-Disposition"), body)
					}
					if !strings.HasSuffix(string(body), "\r\n") {
						t.Fatalf("CSV does not end its last line with CRLF: %q", body)
					}
					lines := strings.Split(strings.TrimSuffix(string(body), "\r\n"), "\r\n")
					if tc.want != nil && !reflect.DeepEqual(lines, tc.want) {
						t.Fatalf("CSV lines\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(tc.want, "\n"))
					}
				})
			}

			t.Run("mounts ndjson lines are the REST Mount objects", func(t *testing.T) {
				res, body := a.call(http.MethodGet, "/api/v1/exports/mounts?format=ndjson", nil)
				if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/x-ndjson" ||
					res.Header.Get("Content-Disposition") != `attachment; filename="mounts.ndjson"` {
					t.Fatalf("%d %v\n%s", res.StatusCode, res.Header, body)
				}
				list := decode[struct{ Mounts []json.RawMessage }](t, a.ok(t, http.MethodGet, "/api/v1/mounts", nil)).Mounts
				lines := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
				if len(lines) != len(list) || len(list) != 2 {
					t.Fatalf("%d lines for %d mounts:\n%s", len(lines), len(list), body)
				}
				for i := range lines {
					if got, want := decode[map[string]any](t, []byte(lines[i])), decode[map[string]any](t, list[i]); !reflect.DeepEqual(got, want) {
						t.Fatalf("line %d = %v\nGET /mounts = %v", i, got, want)
					}
				}
			})
			t.Run("states ndjson lines are the REST entries with uid", func(t *testing.T) {
				res, body := a.call(http.MethodGet, "/api/v1/exports/states?mountUid=E1&format=ndjson", nil)
				if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/x-ndjson" {
					t.Fatalf("%d %v\n%s", res.StatusCode, res.Header, body)
				}
				var got []map[string]any
				for _, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
					got = append(got, decode[map[string]any](t, []byte(line)))
				}
				for i, line := range oldestFirst {
					f := strings.Split(line, ",")
					w := map[string]any{"uid": f[0], "code": f[1], "value": f[2], "occurredAt": f[3], "receivedAt": f[4], "verified": false}
					if i >= len(got) || !reflect.DeepEqual(got[i], w) {
						t.Fatalf("line %d = %v, want %v", i, got, w)
					}
				}
				if len(got) != len(oldestFirst) {
					t.Fatalf("%d lines, want %d", len(got), len(oldestFirst))
				}
			})

			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:E1")
			maintainer := in.token(a.creds, "openid", "sub", audItem, "role:restricted")
			for _, tc := range []struct {
				name, token, path string
				status            int
				code, field       string
			}{
				{"a rider's token", rider, "/api/v1/exports/mounts", 403, "FORBIDDEN", ""},
				{"a rider's token, its own mount", rider, "/api/v1/exports/states?mountUid=E1", 403, "FORBIDDEN", ""},
				{"a maintainer's token", maintainer, "/api/v1/exports/mounts?format=ndjson", 403, "FORBIDDEN", ""},
				{"no token", "", "/api/v1/exports/mounts", 401, "UNAUTHENTICATED", ""},
				{"another account's mount", a.token, "/api/v1/exports/states?mountUid=EB", 404, "MOUNT_NOT_FOUND", ""},
				{"an unknown mount", a.token, "/api/v1/exports/states?mountUid=nope", 404, "MOUNT_NOT_FOUND", ""},
				{"no mountUid", a.token, "/api/v1/exports/states", 400, "VALIDATION_FAILED", "mountUid"},
				{"an empty mountUid", a.token, "/api/v1/exports/states?mountUid=", 400, "VALIDATION_FAILED", "mountUid"},
				{"bad format", a.token, "/api/v1/exports/mounts?format=xlsx", 400, "VALIDATION_FAILED", "format"},
				{"bad format of states", a.token, "/api/v1/exports/states?mountUid=E1&format=json", 400, "VALIDATION_FAILED", "format"},
				{"bad from", a.token, "/api/v1/exports/states?mountUid=E1&from=yesterday", 400, "VALIDATION_FAILED", "from"},
				{"bad to", a.token, "/api/v1/exports/states?mountUid=E1&to=2026-13-01T00:00:00Z", 400, "VALIDATION_FAILED", "to"},
				{"a malformed filter", a.token, "/api/v1/exports/mounts?filter=" + url.QueryEscape(`batteryLevel < 20 AND`), 400, "VALIDATION_FAILED", "filter"},
				{"a filter on an unknown field", a.token, "/api/v1/exports/mounts?filter=" + url.QueryEscape(`colour = "red"`), 400, "VALIDATION_FAILED", "filter"},
				{"an unknown parameter", a.token, "/api/v1/exports/mounts?pageSize=10", 400, "VALIDATION_FAILED", "pageSize"},
				{"from on mounts", a.token, "/api/v1/exports/mounts?from=" + url.QueryEscape(at(0)), 400, "VALIDATION_FAILED", "from"},
				{"mountUid twice", a.token, "/api/v1/exports/states?mountUid=E1&mountUid=EB", 400, "VALIDATION_FAILED", "mountUid"},
				{"mountUid twice, the same", a.token, "/api/v1/exports/states?mountUid=E1&mountUid=E1", 400, "VALIDATION_FAILED", "mountUid"},
				{"format twice", a.token, "/api/v1/exports/mounts?format=csv&format=ndjson", 400, "VALIDATION_FAILED", "format"},
				{"filter twice", a.token, "/api/v1/exports/mounts?filter=" + url.QueryEscape(`batteryLevel < 20`) + "&filter=", 400, "VALIDATION_FAILED", "filter"},
				{"to twice", a.token, "/api/v1/exports/states?mountUid=E1&to=" + url.QueryEscape(at(0)) + "&to=" + url.QueryEscape(at(0)), 400, "VALIDATION_FAILED", "to"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					res, body := in.call(http.MethodGet, tc.path, tc.token, nil)
					p := wantProblem(t, res, body, tc.status, tc.code)
					if tc.field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != tc.field) {
						t.Fatalf("errors %+v, want one on %s", p.Errors, tc.field)
					}
				})
			}
			t.Run("client.Download, as mountctl export uses it", func(t *testing.T) {
				c := client.New(in.base, client.StaticToken(a.token))
				var buf bytes.Buffer
				n, err := c.Download(context.Background(), "/exports/states?mountUid=E1", &buf)
				if err != nil || n != int64(buf.Len()) || buf.String() != strings.Join(append([]string{statesHeader}, oldestFirst...), "\r\n")+"\r\n" {
					t.Fatalf("Download = %d, %v:\n%s", n, err, buf.String())
				}
				var ce *client.Error
				if _, err := c.Download(context.Background(), "/exports/states?mountUid=EB", &buf); !errors.As(err, &ce) || ce.Code != "MOUNT_NOT_FOUND" {
					t.Fatalf("Download of another account's mount = %v", err)
				}
			})
			// B's export holds only B's mount.
			if res, body := b.call(http.MethodGet, "/api/v1/exports/mounts", nil); res.StatusCode != 200 ||
				!strings.HasPrefix(string(body), mountsHeader+"\r\nEB,") || strings.Count(string(body), "\r\n") != 2 {
				t.Fatalf("B's export: %d %s", res.StatusCode, body)
			}
		})
	}
}

// TestExportClientGoesAway: a client that stops reading and closes the
// connection mid-export ends the query and the handler (no goroutine and
// no database work left, the account's export slots free again).
func TestExportClientGoesAway(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			a.associate(t, "BIG", nil)
			dbURL := in.cfg.DatabaseURL
			if dbURL == "" {
				dbURL = "sqlite://" + filepath.Join(in.cfg.DataDir, "mountd.db")
			}
			store, closeStore, err := bunstore.Open(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			// 60,000 entries (about 5 MB of CSV): the client stops reading
			// after 1 MB, and its receive buffer, fixed at 64 KiB (the
			// kernel's would grow to megabytes), and the server's send
			// buffer, held small by that window, leave the server
			// mid-stream when the client leaves. (SQLite under -race
			// stores about 2,000 entries a second.)
			const entries = 60_000
			small := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
				Control: func(_, _ string, c syscall.RawConn) error {
					var serr error
					err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
					return errors.Join(err, serr)
				}}).DialContext}}
			defer small.CloseIdleConnections()
			seedHistory(t, store, "BIG", a.creds.AccountID, entries)
			base := settledGoroutines()
			for range 3 {
				base = min(base, settledGoroutines())
			}
			// Twice as many exports as the account's slots, the second pair
			// once the first has wound down: a leaked slot would be a 429.
			for round := range 4 {
				if round == 2 {
					waitGoroutines(t, base)
				}
				req, _ := http.NewRequest(http.MethodGet, in.base+"/api/v1/exports/states?mountUid=BIG", nil)
				req.Header.Set("Access-Key", a.token)
				res, err := small.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != http.StatusOK {
					body, _ := io.ReadAll(res.Body)
					t.Fatalf("round %d: %d %s", round, res.StatusCode, body)
				}
				r := bufio.NewReader(res.Body)
				if line, err := r.ReadString('\n'); err != nil || line != statesHeader+"\r\n" {
					t.Fatalf("first line %q, %v", line, err)
				}
				if _, err := io.CopyN(io.Discard, r, 1<<20); err != nil {
					t.Fatal(err)
				}
				res.Body.Close() // mid-stream: the rest is never read
			}
			waitGoroutines(t, base)
			if store.Postgres() {
				waitNoQuery(t, store, "mount_states")
			}
			// And a whole export reads to its end.
			res, body := a.call(http.MethodGet, "/api/v1/exports/states?mountUid=BIG&format=ndjson", nil)
			if res.StatusCode != 200 || strings.Count(string(body), "\n") != entries {
				t.Fatalf("whole export: %d, %d lines", res.StatusCode, strings.Count(string(body), "\n"))
			}
		})
	}
}

// waitNoQuery polls PostgreSQL until no other session runs a statement
// naming table.
func waitNoQuery(t *testing.T, store *bunstore.Store, table string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		if err := store.DB().QueryRowContext(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE ?`, "%"+table+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d statements on %s still run after their clients left", n, table)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
