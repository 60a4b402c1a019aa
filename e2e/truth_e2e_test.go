package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/mountd/mountd/device/sim"
	"github.com/mountd/mountd/sdk"
)

// TestTruthFromTheMountEndToEnd runs issue 27's story with the real
// mountsim and mountctl on both backends: mountsim mounts with device keys
// (and one on older firmware) serve a rider through mountctl while forging
// phones try to report what the mount did not say; every RELEASE_HELMET
// ends EXECUTED with a verified receipt in the command audit and a
// webhook; no forged entry is stored; a mount restarted mid-way refuses a
// command it had accepted before; a receipt uploaded after its command
// turned UNCONFIRMED moves it on.
func TestTruthFromTheMountEndToEnd(t *testing.T) {
	simBin, ctlBin := mountsimBinary(t), mountctlBinary(t)
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := mk(t)
			cfg.WebhookAllowPrivate = true
			cfg.CommandTTL = 2 * time.Second // UNCONFIRMED within seconds
			in := start(t, cfg)
			a := newFleet(in, "Truth e2e")
			rcv := newReceiver(t)
			res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": rcv.URL,
				"eventTypes": []string{"COMMAND_EXECUTED", "COMMAND_REFUSED", "COMMAND_UNCONFIRMED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
			}
			rcv.setSecret(decode[struct {
				Secret string `json:"secret"`
			}](t, raw).Secret)

			air, stateDir := freeAddr(t), t.TempDir()
			startSim := func() func() mountsimSummary {
				t.Helper()
				cmd := exec.Command(simBin, "--mounts", "2", "--legacy", "1", "--prefix", "TE", "--air", air, "--api", in.base,
					"--report-interval", "300ms", "--return-after", "300ms", "--state-dir", stateDir, "--forge", "--json", "--log-level", "warn")
				cmd.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+a.creds.ClientID, "MOUNTSIM_CLIENT_SECRET="+a.creds.ClientSecret)
				var out, errs bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errs
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				waitListening(t, air)
				stopped := false
				stop := func() mountsimSummary {
					t.Helper()
					if !stopped {
						stopped = true
						_ = cmd.Process.Signal(syscall.SIGTERM)
						_ = cmd.Wait()
					}
					var sum mountsimSummary
					if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
						t.Fatalf("mountsim summary %q: %v\n%s", out.String(), err, errs.String())
					}
					return sum
				}
				t.Cleanup(func() {
					if !stopped {
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
					}
				})
				return stop
			}
			stopSim := startSim()

			env := append(os.Environ(), "MOUNTCTL_API="+in.base, "MOUNTCTL_BLE=sim://"+air,
				"MOUNTCTL_CLIENT_ID="+a.creds.ClientID, "MOUNTCTL_CLIENT_SECRET="+a.creds.ClientSecret)
			mountctl := func(token string, args ...string) string {
				t.Helper()
				cmd := exec.Command(ctlBin, args...)
				cmd.Env = append(env, "MOUNTCTL_TOKEN="+token)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("mountctl %v: %v\n%s", args, err, out)
				}
				return string(out)
			}
			commands := func() []lifecycleView {
				t.Helper()
				var page struct {
					Commands []lifecycleView `json:"commands"`
				}
				if err := json.Unmarshal([]byte(mountctl("", "--json", "mounts", "commands", "TE-0001", "--page-size", "100")), &page); err != nil {
					t.Fatal(err)
				}
				return page.Commands
			}

			mountctl("", "mounts", "associate", "TE-0001", "--deliver")
			if cmds := commands(); len(cmds) != 1 || cmds[0].Code != "ASSOCIATE_OWNER" || cmds[0].Status != "EXECUTED" || !cmds[0].Verified {
				t.Fatalf("the association's command after --deliver: %+v", cmds)
			}
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:TE-0001")
			const releases = 3
			for range releases {
				mountctl(rider, "release-helmet", "TE-0001")
				time.Sleep(600 * time.Millisecond) // the helmet comes back
			}
			var released []string
			for _, c := range commands() {
				if c.Code != "RELEASE_HELMET" {
					continue
				}
				released = append(released, c.ID)
				if c.Status != "EXECUTED" || !c.Verified {
					t.Errorf("RELEASE_HELMET %s: %s verified=%v", c.ID, c.Status, c.Verified)
				}
			}
			if len(released) != releases {
				t.Fatalf("%d RELEASE_HELMET in the audit, want %d", len(released), releases)
			}
			rcv.waitFor(t, "a COMMAND_EXECUTED webhook for every release", func(calls []webhookCall) bool {
				return allDelivered(calls, "COMMAND_EXECUTED", released)
			})

			// Restarted mid-way: the mount refuses a command it accepted.
			owner := mustSDK(t, in.base+"/api/v1", a.token, sim.Dial("sim://"+air))
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := owner.Connect(ctx, "TE-0001"); err != nil {
				t.Fatal(err)
			}
			cmd := a.command(t, "TE-0001", "RELEASE_HELMET")
			first, err := owner.Deliver(ctx, "TE-0001", cmd)
			if err != nil || !first.Accepted || first.Receipt == nil {
				t.Fatalf("first delivery: %+v %v", first, err)
			}
			_ = owner.Close()
			sum := stopSim()
			if sum.ForgedReports == 0 || sum.ForgedAccepted != 0 || sum.ForgedRefused != sum.ForgedReports {
				t.Fatalf("forging phones: %+v", sum)
			}
			startSim()
			owner = mustSDK(t, in.base+"/api/v1", a.token, sim.Dial("sim://"+air))
			defer owner.Close()
			if _, err := owner.Connect(ctx, "TE-0001"); err != nil {
				t.Fatal(err)
			}
			again, err := owner.Deliver(ctx, "TE-0001", cmd)
			if err == nil && again.Accepted {
				t.Fatalf("the restarted mount accepted the command again: %+v", again)
			}
			if again.Reason != "replayed nonce" {
				t.Fatalf("the restarted mount's refusal: %+v %v", again, err)
			}

			// Its receipt never went up: past its TTL the command is
			// UNCONFIRMED; the late receipt moves it on.
			id := first.Nonce
			rcv.waitFor(t, "COMMAND_UNCONFIRMED", func(calls []webhookCall) bool { return allDelivered(calls, "COMMAND_UNCONFIRMED", []string{id}) })
			if c := a.commandByID(t, "TE-0001", id); c.Status != "UNCONFIRMED" {
				t.Fatalf("past its TTL: %+v", c)
			}
			if _, err := owner.Upload(ctx, sdk.Upload{UID: "TE-0001", Receipt: first.Receipt}); err != nil {
				t.Fatal(err)
			}
			if c := a.commandByID(t, "TE-0001", id); c.Status != "EXECUTED" || !c.Verified {
				t.Fatalf("after the late receipt: %+v", c)
			}
			rcv.waitFor(t, "COMMAND_EXECUTED after the late receipt", func(calls []webhookCall) bool {
				return allDelivered(calls, "COMMAND_EXECUTED", []string{id})
			})

			// No forged entry was stored: everything the keyed mount's
			// history holds was signed by it.
			total := 0
			for n := 1; ; n++ {
				var page struct {
					States []struct {
						Code     string `json:"code"`
						Value    string `json:"value"`
						Verified bool   `json:"verified"`
					} `json:"states"`
				}
				if err := json.Unmarshal(a.ok(t, http.MethodGet, fmt.Sprintf("/api/v1/mounts/TE-0001/states?pageSize=100&currentPage=%d", n), nil), &page); err != nil {
					t.Fatal(err)
				}
				for _, s := range page.States {
					if !s.Verified {
						t.Fatalf("an unverified entry of a keyed mount was stored: %+v", s)
					}
				}
				if total += len(page.States); len(page.States) < 100 {
					break
				}
			}
			if total == 0 {
				t.Fatal("no history")
			}
		})
	}
}

// allDelivered says whether calls hold a delivery of type for every id.
func allDelivered(calls []webhookCall, typ string, ids []string) bool {
	seen := map[string]bool{}
	for _, c := range calls {
		if c.Type == typ {
			seen[c.Data.Command.ID] = true
		}
	}
	for _, id := range ids {
		if !seen[id] {
			return false
		}
	}
	return true
}
