package e2e

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/app"
)

// TestServeOnPostgresNeedsMasterKey: on PostgreSQL `mountd serve` refuses
// to start with a generated master key (docs/operations.md, "The master key": it is this
// machine's alone) and says what to do; --allow-generated-master-key starts
// it anyway. The embedded default still generates one.
func TestServeOnPostgresNeedsMasterKey(t *testing.T) {
	run := func(t *testing.T, dataDir string, args ...string) (addr string, stop func() error, err error) {
		t.Helper()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var out syncBuffer
		go func() {
			done <- app.NewCommand(&out, &out).Run(ctx, append([]string{"mountd", "--listen", addr, "--data-dir", dataDir,
				"--log-level", "warn"}, args...))
		}()
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-done:
				cancel()
				return "", nil, err
			default:
			}
			if res, err := http.Get("http://" + addr + "/healthz"); err == nil {
				res.Body.Close()
				return addr, func() error { cancel(); return <-done }, nil
			}
			time.Sleep(50 * time.Millisecond)
		}
		cancel()
		t.Fatalf("serve neither started nor failed in 30s: %s", out.String())
		return "", nil, nil
	}
	t.Run("postgres refuses", func(t *testing.T) {
		dir := t.TempDir()
		_, _, err := run(t, dir, "--database-url", testenv.PostgresURL(t), "serve")
		if err == nil || !strings.Contains(err.Error(), "MOUNTD_MASTER_KEY") || !strings.Contains(err.Error(), "--allow-generated-master-key") {
			t.Fatalf("serve on PostgreSQL without a master key: %v (want a refusal naming MOUNTD_MASTER_KEY and --allow-generated-master-key)", err)
		}
		if _, err := os.Stat(filepath.Join(dir, keyring.MasterKeyFile)); err == nil {
			t.Error("the refused start generated a master key")
		}
	})
	t.Run("postgres with the flag", func(t *testing.T) {
		dir, dbURL := t.TempDir(), testenv.PostgresURL(t)
		_, stop, err := run(t, dir, "--database-url", dbURL, "serve", "--allow-generated-master-key")
		if err != nil {
			t.Fatalf("serve --allow-generated-master-key: %v", err)
		}
		if err := stop(); err != nil {
			t.Errorf("serve returned %v", err)
		}
		// The key it generated stays this machine's: the next start says so.
		_, _, err = run(t, dir, "--database-url", dbURL, "serve")
		if err == nil || !strings.Contains(err.Error(), keyring.MasterKeyFile) {
			t.Errorf("second start without the flag: %v (want a refusal naming the generated key's file)", err)
		}
	})
	t.Run("postgres with a key", func(t *testing.T) {
		_, stop, err := run(t, t.TempDir(), "--database-url", testenv.PostgresURL(t), "--master-key", strings.Repeat("ab", 32), "serve")
		if err != nil {
			t.Fatalf("serve with MOUNTD_MASTER_KEY: %v", err)
		}
		if err := stop(); err != nil {
			t.Errorf("serve returned %v", err)
		}
	})
	t.Run("embedded generates", func(t *testing.T) {
		dir := t.TempDir()
		_, stop, err := run(t, dir, "serve")
		if err != nil {
			t.Fatalf("serve on SQLite without a master key: %v", err)
		}
		if err := stop(); err != nil {
			t.Errorf("serve returned %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, keyring.MasterKeyFile)); err != nil {
			t.Errorf("no generated master key: %v", err)
		}
	})
}
