package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/protocol"
)

// TestMountsimSignedFleet runs mountsim against mountd: a fleet of mounts
// with device keys and one on older firmware, with forging phones. Signed
// reports are stored verified, the legacy mount's unverified, every
// forgery is refused, the associations' receipts move their commands to
// EXECUTED, and a second run from the mounts' saved state goes on signing
// with the keys pinned in the first.
func TestMountsimSignedFleet(t *testing.T) {
	bin := mountsimBinary(t)
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, mk(t))
			a := newFleet(in, "sim fleet")
			stateDir := t.TempDir()
			run := func(extra ...string) mountsimSummary {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				args := append([]string{"--mounts", "4", "--legacy", "1", "--prefix", "ST", "--air", "", "--api", in.base,
					"--report-interval", "200ms", "--duration", "3s", "--state-dir", stateDir, "--json", "--log-level", "warn"}, extra...)
				cmd := exec.CommandContext(ctx, bin, args...)
				cmd.Env = append(cmd.Environ(), "MOUNTSIM_CLIENT_ID="+a.creds.ClientID, "MOUNTSIM_CLIENT_SECRET="+a.creds.ClientSecret)
				var out, errs bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errs
				if err := cmd.Run(); err != nil {
					t.Fatalf("mountsim: %v\n%s", err, errs.String())
				}
				var sum mountsimSummary
				if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
					t.Fatalf("summary %q: %v", out.String(), err)
				}
				if sum.Errors != 0 || sum.Associated != 4 || sum.Legacy != 1 || sum.SignedReports == 0 || sum.SignedReports >= sum.Reports {
					t.Fatalf("summary %+v\n%s", sum, errs.String())
				}
				return sum
			}
			sum := run("--associate", "--forge")
			if sum.Receipts != 3 || sum.ReceiptsAccepted != 3 {
				t.Fatalf("association receipts: %+v", sum)
			}
			if sum.ForgedReports == 0 || sum.ForgedRefused != sum.ForgedReports || sum.ForgedAccepted != 0 {
				t.Fatalf("forgeries: %+v", sum)
			}

			for _, uid := range []string{"ST-0001", "ST-0002", "ST-0003", "ST-0004"} {
				keyed := uid != "ST-0004"
				res, raw := a.call(http.MethodGet, "/api/v1/mounts/"+uid, nil)
				var ms []struct { // GET /mounts/{uid} answers an array of one
					DevicePublicKey *string `json:"devicePublicKey"`
				}
				if res.StatusCode != 200 || json.Unmarshal(raw, &ms) != nil || len(ms) != 1 || (ms[0].DevicePublicKey != nil) != keyed ||
					keyed && !protocol.ValidPublicKey(*ms[0].DevicePublicKey) {
					t.Fatalf("%s: %d %s", uid, res.StatusCode, raw)
				}
				res, raw = a.call(http.MethodGet, "/api/v1/mounts/"+uid+"/states", nil)
				var page struct {
					States []struct {
						Code     string `json:"code"`
						Value    string `json:"value"`
						Verified bool   `json:"verified"`
					} `json:"states"`
				}
				if res.StatusCode != 200 || json.Unmarshal(raw, &page) != nil || len(page.States) == 0 {
					t.Fatalf("%s history: %d %s", uid, res.StatusCode, raw)
				}
				for _, s := range page.States {
					if s.Verified != keyed {
						t.Fatalf("%s: entry %+v (forged entries must never be stored)", uid, s)
					}
					if (s.Code == "MOUNT_LOCKED" || s.Code == "HELMET_MOUNTED") && s.Value != "1" {
						t.Fatalf("%s: entry %+v: nobody released a helmet", uid, s)
					}
				}
				res, raw = a.call(http.MethodGet, "/api/v1/mounts/"+uid+"/commands", nil)
				if res.StatusCode != 200 {
					t.Fatalf("%s commands: %d %s", uid, res.StatusCode, raw)
				}
				if executed := strings.Contains(string(raw), `"status":"EXECUTED"`); executed != keyed {
					t.Fatalf("%s: association command %s", uid, raw)
				}
			}

			// The mounts restart from their saved state: same device keys,
			// owners kept, no association needed, reports still verify.
			again := run()
			if again.Reports == 0 {
				t.Fatalf("second run: %+v", again)
			}
		})
	}
}
