package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMountctlGrants runs the real mountctl: grants create (by --ttl and
// by --not-after), list of a mount (in a state) and of a rider, revoke by
// id and by rider key; a maintainer lists but may not revoke; bad flags
// and the API's refusals are errors, never a crash.
func TestMountctlGrants(t *testing.T) {
	bin := mountctlBinary(t)
	in := start(t, testConfig(t.TempDir(), ""))
	owner := newFleet(in, "Grants")
	uid := uniqueUID("GRC")
	devicePub, _, _ := ed25519.GenerateKey(rand.Reader)
	owner.associate(t, uid, map[string]any{"devicePublicKey": hex.EncodeToString(devicePub)})
	owner.confirm(t, uid)
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "MOUNTCTL_API=" + in.base}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	creds := []string{"MOUNTCTL_CLIENT_ID=" + owner.creds.ClientID, "MOUNTCTL_CLIENT_SECRET=" + owner.creds.ClientSecret}
	must := func(args ...string) string {
		t.Helper()
		out, err := run(creds, args...)
		if err != nil {
			t.Fatalf("mountctl %v: %v\n%s", args, err, out)
		}
		return out
	}
	created := func(args ...string) grantView {
		t.Helper()
		var g grantView
		if err := json.Unmarshal([]byte(must(append([]string{"--json", "grants", "create", "--uid", uid}, args...)...)), &g); err != nil {
			t.Fatal(err)
		}
		return g
	}

	if out := must("grants", "list", "--uid", uid); strings.TrimSpace(out) != "0 grants" {
		t.Errorf("grants list without grants:\n%s", out)
	}
	anna, bob := riderKeyHex(t), riderKeyHex(t)
	annaGrant := created("--rider-key", anna, "--ttl", "2h", "--label", "Anna")
	if annaGrant.RiderKey != anna || annaGrant.Label == nil || *annaGrant.Label != "Anna" || annaGrant.RevokedAt != nil {
		t.Fatalf("created %+v", annaGrant)
	}
	notAfter := time.Now().Add(3 * time.Hour).UTC().Truncate(time.Second)
	out := must("grants", "create", "--uid", uid, "--rider-key", bob, "--not-after", notAfter.Format(time.RFC3339))
	bobID := strings.Fields(out)[0]
	if !strings.HasPrefix(bobID, "gr_") || !strings.Contains(out, "ACTIVE") || !strings.Contains(out, notAfter.Format("2006-01-02T15:04:05")) {
		t.Fatalf("grants create --not-after:\n%s", out)
	}
	short := anna[:8] + "…" + anna[len(anna)-8:]
	if out := must("grants", "list", "--uid", uid, "--state", "active"); !strings.Contains(out, annaGrant.ID) || !strings.Contains(out, bobID) ||
		!strings.Contains(out, "rider "+short) || !strings.Contains(out, "uses 0 (never used)") || !strings.Contains(out, `"Anna"`) ||
		!strings.Contains(out, "page 1 of 1, 2 grants") {
		t.Errorf("grants list --state ACTIVE:\n%s", out)
	}

	// A maintainer reads them, and may not revoke.
	maintainer := []string{"MOUNTCTL_TOKEN=" + in.token(owner.creds, "openid", "sub", audItem, "role:restricted")}
	if out, err := run(maintainer, "grants", "list", "--uid", uid); err != nil || !strings.Contains(out, "2 grants") {
		t.Errorf("a maintainer's grants list: %v\n%s", err, out)
	}
	if out, err := run(maintainer, "grants", "revoke", annaGrant.ID); err == nil || !strings.Contains(out, "FORBIDDEN") {
		t.Errorf("a maintainer's revoke: %v\n%s", err, out)
	}

	if out := must("grants", "revoke", annaGrant.ID); !strings.Contains(out, annaGrant.ID) || !strings.Contains(out, "REVOKED") || !strings.Contains(out, "revoked 20") {
		t.Errorf("grants revoke ID:\n%s", out)
	}
	if out := must("grants", "list", "--uid", uid, "--state", "REVOKED"); !strings.Contains(out, annaGrant.ID) || strings.Contains(out, bobID) {
		t.Errorf("grants list --state REVOKED:\n%s", out)
	}
	if out := must("grants", "revoke", "--rider-key", bob); !strings.Contains(out, bobID) || !strings.Contains(out, "1 grants revoked") {
		t.Errorf("grants revoke --rider-key:\n%s", out)
	}
	if out := must("grants", "revoke", "--rider-key", bob); strings.TrimSpace(out) != "0 grants revoked" {
		t.Errorf("grants revoke --rider-key again:\n%s", out)
	}
	if out := must("grants", "list", "--rider-key", bob); !strings.Contains(out, bobID) || !strings.Contains(out, "REVOKED") || !strings.Contains(out, "1 grants") {
		t.Errorf("grants list --rider-key:\n%s", out)
	}
	if out := must("grants", "list", "--uid", uid, "--state", "ACTIVE"); strings.TrimSpace(out) != "0 grants" {
		t.Errorf("active grants after revoking both:\n%s", out)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"grants", "list"}, "--uid"},
		{[]string{"grants", "list", "--uid", uid, "--state", "LIVE"}, "--state"},
		{[]string{"grants", "create", "--uid", uid, "--rider-key", anna}, "--not-after or --ttl"},
		{[]string{"grants", "create", "--uid", uid, "--rider-key", "04abc", "--ttl", "1h"}, "riderKey"},
		{[]string{"grants", "create", "--uid", uid, "--rider-key", anna, "--ttl", "200h"}, "VALIDATION_FAILED"},
		{[]string{"grants", "revoke", "gr_000000000000000000000000"}, "GRANT_NOT_FOUND"},
		{[]string{"grants", "revoke"}, "one of them"},
	} {
		if out, err := run(creds, c.args...); err == nil || !strings.Contains(out, c.want) || strings.Contains(out, "INTERNAL") || strings.Contains(out, "panic") {
			t.Errorf("%v: %v, want an error with %q\n%s", c.args, err, c.want, out)
		}
	}
}
