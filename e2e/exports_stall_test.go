package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
)

// TestStalledExports: exports whose clients read nothing cost only their
// own accounts. Past the replica's limit (MOUNTD_MAX_EXPORTS, here 3) an
// export of any account is 503 UNAVAILABLE with Retry-After, another
// tenant's GET /mounts answers at once, and a client that has read nothing
// for MOUNTD_EXPORT_WRITE_TIMEOUT (here 2 s) is cut, which frees its
// export's place and database connection.
func TestStalledExports(t *testing.T) {
	for name, newConfig := range backends(t) {
		// The limit and the write timeout sit above the store, so one
		// backend shows them: PostgreSQL, as streaming 8 MB out of SQLite
		// under -race (modernc's SQLite is instrumented Go) takes minutes.
		if name != "postgres+redis" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.MaxExports, cfg.ExportWriteTimeout = 3, 2*time.Second
			in := start(t, cfg)
			a, b, c := newFleet(in, "A"), newFleet(in, "B"), newFleet(in, "C")
			a.associate(t, "STALL-A", nil)
			b.associate(t, "STALL-B", nil)
			c.associate(t, "STALL-C", nil)
			dbURL := in.cfg.DatabaseURL
			if dbURL == "" {
				dbURL = "sqlite://" + filepath.Join(in.cfg.DataDir, "mountd.db")
			}
			store, closeStore, err := bunstore.Open(context.Background(), dbURL)
			if err != nil {
				t.Fatal(err)
			}
			defer closeStore()
			// About 8 MB of CSV each: more than the sockets' buffers hold.
			seedHistory(t, store, "STALL-A", a.creds.AccountID, 100_000)
			seedHistory(t, store, "STALL-B", b.creds.AccountID, 100_000)

			// Clients whose receive buffer stays at 64 KiB and that read
			// nothing past the headers.
			stalled := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{
				Control: func(_, _ string, c syscall.RawConn) error {
					var serr error
					err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10) })
					return errors.Join(err, serr)
				}}).DialContext}}
			defer stalled.CloseIdleConnections()
			// No export can be cut before the write timeout has passed since
			// the first was asked for (the third starts later on a busy
			// machine: make test failed once measuring from it).
			cut := time.Now().Add(cfg.ExportWriteTimeout)
			var bodies []io.ReadCloser
			for _, f := range []struct {
				fl  fleet
				uid string
			}{{a, "STALL-A"}, {a, "STALL-A"}, {b, "STALL-B"}} {
				req, _ := http.NewRequest(http.MethodGet, in.base+"/api/v1/exports/states?mountUid="+f.uid, nil)
				req.Header.Set("Access-Key", f.fl.token)
				res, err := stalled.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				if res.StatusCode != http.StatusOK {
					body, _ := io.ReadAll(res.Body)
					t.Fatalf("stalled export: %d %s", res.StatusCode, body)
				}
				bodies = append(bodies, res.Body)
			}
			defer func() {
				for _, body := range bodies {
					body.Close()
				}
			}()

			// Another tenant: its export waits for a place, its reads do not.
			res, raw := c.call(http.MethodGet, "/api/v1/exports/states?mountUid=STALL-C", nil)
			wantProblem(t, res, raw, http.StatusServiceUnavailable, "UNAVAILABLE")
			if res.Header.Get("Retry-After") == "" {
				t.Fatal("503 without Retry-After")
			}
			for range 3 {
				start := time.Now()
				if res, raw := c.call(http.MethodGet, "/api/v1/mounts", nil); res.StatusCode != http.StatusOK {
					t.Fatalf("GET /mounts beside stalled exports: %d %s", res.StatusCode, raw)
				}
				if took := time.Since(start); took > 2*time.Second {
					t.Fatalf("GET /mounts beside stalled exports took %v", took)
				}
			}

			// The stalled clients are cut once they have read nothing for the
			// write timeout (after the buffers between them and the server
			// filled): their places free again, and what they read then ends
			// in an error, not in a whole export.
			deadline := time.Now().Add(60 * time.Second)
			for {
				res, raw := c.call(http.MethodGet, "/api/v1/exports/states?mountUid=STALL-C", nil)
				if res.StatusCode == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the export places are still taken a minute later: %d %s", res.StatusCode, raw)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if time.Now().Before(cut) {
				t.Fatal("a place was free before the write timeout")
			}
			// The other stalled exports are cut about as soon (they filled
			// their buffers at the same pace); leave them time to.
			time.Sleep(3 * cfg.ExportWriteTimeout)
			for i, body := range bodies {
				if _, err := io.Copy(io.Discard, body); err == nil {
					t.Fatalf("stalled export %d read to its end", i)
				}
			}
		})
	}
}
