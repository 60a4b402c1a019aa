package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"
)

// offlineSummary is the part of mountsim's summary its riders fill.
type offlineSummary struct {
	Riders              int   `json:"riders"`
	Grants              int   `json:"grants"`
	GrantErrors         int64 `json:"grantErrors"`
	Releases            int64 `json:"releases"`
	ReleasesOffline     int64 `json:"releasesOffline"`
	Revocations         int   `json:"revocations"`
	RevokedAfterContact int64 `json:"revokedAfterContact"`
	HonestRefused       int64 `json:"honestRefused"`
	OfflineExecuted     int64 `json:"offlineExecuted"`
	OfflineHeld         int64 `json:"offlineHeld"`
	OfflineInLogs       int64 `json:"offlineInLogs"`
	OfflineLost         int64 `json:"offlineLost"`
	OfflineExtra        int64 `json:"offlineExtra"`
	UsesTimed           int64 `json:"usesTimed"`
	Restarts            int64 `json:"restarts"`
	RestartsBehind      int64 `json:"restartsBehind"`
	GrantBytes          int   `json:"grantBytes"`
}

// TestMountsimOfflineAccess runs mountsim's riders against mountd: half of
// them without network at the mounts, a quarter of the grants revoked,
// mounts restarting and phones killed during uploads. No revoked grant
// opens a mount once an online phone brought the list, no honest rider is
// refused, every offline use the mounts executed reaches the server, and
// no mount's clock or list goes back across a restart.
func TestMountsimOfflineAccess(t *testing.T) {
	bin := mountsimBinary(t)
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, mk(t))
			a := newFleet(in, "offline fleet")
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "--mounts", "4", "--prefix", "OFF", "--air", "", "--api", in.base,
				"--associate", "--report-interval", "1s", "--riders", "4", "--mounts-per-rider", "2", "--offline", "0.5",
				"--revoke", "0.25", "--restart-every", "1s", "--kill-uploads", "0.3", "--pass-every", "300ms",
				"--duration", "6s", "--seed", "3", "--json", "--log-level", "warn")
			cmd.Env = append(cmd.Environ(), "MOUNTSIM_CLIENT_ID="+a.creds.ClientID, "MOUNTSIM_CLIENT_SECRET="+a.creds.ClientSecret)
			var out, errs bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errs
			if err := cmd.Run(); err != nil {
				t.Fatalf("mountsim: %v\n%s", err, errs.String())
			}
			var sum struct {
				mountsimSummary
				Offline *offlineSummary `json:"offline"`
			}
			if err := json.Unmarshal(out.Bytes(), &sum); err != nil || sum.Offline == nil {
				t.Fatalf("summary %q: %v", out.String(), err)
			}
			o := sum.Offline
			if o.Riders != 4 || o.Grants != 8 || o.GrantErrors != 0 || o.Revocations != 2 || o.Restarts == 0 {
				t.Fatalf("set-up: %+v\n%s", *o, errs.String())
			}
			if o.ReleasesOffline == 0 || o.Releases <= o.ReleasesOffline || o.OfflineExecuted == 0 || o.UsesTimed == 0 {
				t.Fatalf("the riders did not release both ways: %+v\n%s", *o, errs.String())
			}
			zero := map[string]int64{"revokedAfterContact": o.RevokedAfterContact, "honestRefused": o.HonestRefused,
				"offlineLost": o.OfflineLost, "offlineExtra": o.OfflineExtra, "offlineInLogs": o.OfflineInLogs, "restartsBehind": o.RestartsBehind}
			for k, v := range zero {
				if v != 0 {
					t.Errorf("%s = %d, want 0", k, v)
				}
			}
			if o.OfflineHeld != o.OfflineExecuted {
				t.Errorf("the server holds %d offline uses, the mounts executed %d", o.OfflineHeld, o.OfflineExecuted)
			}
			if t.Failed() {
				t.Logf("summary %s\n%s", out.String(), errs.String())
			}
		})
	}
}
