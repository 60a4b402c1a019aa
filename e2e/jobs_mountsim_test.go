package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// jobsSimSummary is the part of mountsim's summary about its phones.
type jobsSimSummary struct {
	Errors       int64            `json:"errors"`
	ErrorsByKind map[string]int64 `json:"errorsByKind"`
	Passes       int64            `json:"passes"`
	JobCommands  int64            `json:"jobCommands"`
	JobExecuted  int64            `json:"jobExecuted"`
	JobRefused   int64            `json:"jobRefused"`
}

// TestJobOverPassingPhones is the story of docs/api.md, "Jobs", with the real mountsim
// on both backends: two fleets (models HM-1 and HM-2) report their states;
// a job is created over a filter that selects three HM-1 mounts by their
// battery; mountsim's phones pass the mounts at random and run their
// pending commands with the SDK's Sync; the receipts come in, the job
// reaches COMPLETED with every target EXECUTED, the webhook receiver gets
// JOB_COMPLETED, and the mounts outside the filter never got the command.
func TestJobOverPassingPhones(t *testing.T) {
	bin := mountsimBinary(t)
	for name, mk := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := mk(t)
			cfg.WebhookAllowPrivate = true
			in := start(t, cfg)
			a := newFleet(in, "Jobs e2e")
			rcv := newReceiver(t)
			res, raw := a.call(http.MethodPost, "/api/v1/webhooks", map[string]any{"url": rcv.URL, "eventTypes": []string{"JOB_COMPLETED"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create webhook: %d %s", res.StatusCode, raw)
			}
			rcv.setSecret(decode[struct {
				Secret string `json:"secret"`
			}](t, raw).Secret)

			// Batteries are 60 + i%41 and do not drain: HA-0001..3 are at
			// 61..63 %, HA-0004..6 at 64..66 %.
			sim := func(prefix, model, mounts, phones, air string) func() jobsSimSummary {
				cmd := exec.Command(bin, "--mounts", mounts, "--prefix", prefix, "--model", model, "--air", air, "--api", in.base,
					"--associate", "--report-interval", "300ms", "--battery-drain", "0", "--phones", phones, "--pass-every", "100ms",
					"--seed", "18", "--json", "--log-level", "warn")
				cmd.Env = append(os.Environ(), "MOUNTSIM_CLIENT_ID="+a.creds.ClientID, "MOUNTSIM_CLIENT_SECRET="+a.creds.ClientSecret)
				var out, errs bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &errs
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				if air != "" {
					waitListening(t, air)
				}
				stopped := false
				t.Cleanup(func() {
					if !stopped {
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
					}
				})
				return func() jobsSimSummary {
					t.Helper()
					stopped = true
					_ = cmd.Process.Signal(syscall.SIGTERM)
					_ = cmd.Wait()
					var sum jobsSimSummary
					if err := json.Unmarshal(out.Bytes(), &sum); err != nil {
						t.Fatalf("mountsim %s summary %q: %v\n%s", prefix, out.String(), err, errs.String())
					}
					return sum
				}
			}
			// Fleet B has no phones but its air is served, for mountctl.
			airB := freeAddr(t)
			stopA := sim("HA", "HM-1", "6", "2", "")
			stopB := sim("HB", "HM-2", "3", "0", airB)

			const filter = `modelNumber = "HM-1" AND batteryLevel < 64`
			count := func(f string) int {
				res, raw := a.call(http.MethodGet, "/api/v1/mounts?pageSize=100&filter="+url.QueryEscape(f), nil)
				if res.StatusCode != http.StatusOK {
					t.Fatalf("mounts?filter=%s: %d %s", f, res.StatusCode, raw)
				}
				return len(decode[struct {
					Mounts []json.RawMessage `json:"mounts"`
				}](t, raw).Mounts)
			}
			// Every mount reported (a battery level known for all nine)
			// before the job fixes its targets.
			waitForStep(t, "both fleets reporting", func() bool { return count("batteryLevel > 0") == 9 })
			if n := count(filter); n != 3 {
				t.Fatalf("the filter selects %d mounts, want 3", n)
			}

			res, raw = a.call(http.MethodPost, "/api/v1/jobs", map[string]any{"code": "SET_RFID_MODE", "params": map[string]string{"rfidMode": "LEARN"},
				"filter": filter, "description": "learn mode for low HM-1"})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create job: %d %s", res.StatusCode, raw)
			}
			type jobView struct {
				ID      string `json:"id"`
				State   string `json:"state"`
				Targets int    `json:"targets"`
				Counts  struct {
					Pending, Issued, Executed, Refused, Unconfirmed int
				} `json:"counts"`
			}
			job := decode[jobView](t, raw)
			if job.Targets != 3 || job.State != "ACTIVE" {
				t.Fatalf("job %s", raw)
			}
			waitForStep(t, "the job COMPLETED", func() bool {
				res, raw = a.call(http.MethodGet, "/api/v1/jobs/"+job.ID, nil)
				job = decode[jobView](t, raw)
				return res.StatusCode == http.StatusOK && job.State == "COMPLETED"
			})
			if job.Counts.Executed != job.Targets || job.Counts.Refused+job.Counts.Pending+job.Counts.Issued+job.Counts.Unconfirmed != 0 {
				t.Fatalf("completed job %s", raw)
			}
			rcv.waitFor(t, "JOB_COMPLETED", func(calls []webhookCall) bool {
				return len(calls) > 0 && calls[0].Type == "JOB_COMPLETED"
			})

			res, raw = a.call(http.MethodGet, "/api/v1/jobs/"+job.ID+"/mounts", nil)
			targets := decode[struct {
				Mounts []struct {
					UID       string `json:"uid"`
					Status    string `json:"status"`
					CommandID string `json:"commandId"`
				} `json:"mounts"`
			}](t, raw).Mounts
			if res.StatusCode != http.StatusOK || len(targets) != 3 {
				t.Fatalf("job mounts: %d %s", res.StatusCode, raw)
			}
			for _, m := range targets {
				if !strings.HasPrefix(m.UID, "HA-000") || m.UID > "HA-0003" || m.Status != "EXECUTED" || m.CommandID == "" {
					t.Fatalf("job mount %+v", m)
				}
				res, raw := a.call(http.MethodGet, "/api/v1/mounts/"+m.UID+"/commands/"+m.CommandID, nil)
				cmd := decode[struct {
					Status   string `json:"status"`
					JobID    string `json:"jobId"`
					Verified bool   `json:"verified"`
				}](t, raw)
				if res.StatusCode != http.StatusOK || cmd.Status != "EXECUTED" || cmd.JobID != job.ID || !cmd.Verified {
					t.Fatalf("%s command: %d %s", m.UID, res.StatusCode, raw)
				}
			}
			// Outside the filter: no job command was ever signed.
			for _, uid := range []string{"HA-0004", "HB-0001"} {
				_, raw := a.call(http.MethodGet, "/api/v1/mounts/"+uid+"/commands", nil)
				if strings.Contains(string(raw), job.ID) {
					t.Fatalf("%s got the job's command: %s", uid, raw)
				}
			}

			// mountctl sync: a rider's phone (a token for HB-0001 alone)
			// runs the job waiting at HB-0001 by hand.
			res, raw = a.call(http.MethodPost, "/api/v1/jobs", map[string]any{"code": "CONFIGURE_ALARM",
				"params": map[string]string{"alarmMode": "SILENT", "alarmSensitivity": "LOW", "alarmVolume": "LOW"}, "mountUids": []string{"HB-0001"}})
			if res.StatusCode != http.StatusCreated {
				t.Fatalf("create job: %d %s", res.StatusCode, raw)
			}
			byHand := decode[jobView](t, raw)
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:HB-0001")
			ctl := exec.Command(programBinary(t, "mountctl"), "--json", "sync", "HB-0001")
			ctl.Env = append(os.Environ(), "MOUNTCTL_API="+in.base, "MOUNTCTL_BLE=sim://"+airB, "MOUNTCTL_TOKEN="+rider)
			out, err := ctl.CombinedOutput()
			if err != nil {
				t.Fatalf("mountctl sync: %v\n%s", err, out)
			}
			synced := decode[struct {
				Offered  int `json:"offered"`
				Commands []struct {
					JobID   string `json:"jobId"`
					Outcome string `json:"outcome"`
				} `json:"commands"`
				Pending int `json:"pending"`
			}](t, out)
			if synced.Offered != 1 || len(synced.Commands) != 1 || synced.Commands[0].JobID != byHand.ID || synced.Commands[0].Outcome != "EXECUTED" || synced.Pending != 0 {
				t.Fatalf("mountctl sync: %s", out)
			}
			waitForStep(t, "the job run by hand COMPLETED", func() bool {
				_, raw := a.call(http.MethodGet, "/api/v1/jobs/"+byHand.ID, nil)
				byHand = decode[jobView](t, raw)
				return byHand.State == "COMPLETED" && byHand.Counts.Executed == 1
			})

			sumA, sumB := stopA(), stopB()
			if sumA.Errors != 0 || sumA.JobExecuted != 3 || sumA.JobRefused != 0 || sumA.Passes == 0 {
				t.Fatalf("mountsim HA summary %+v", sumA)
			}
			if sumB.Errors != 0 || sumB.JobCommands != 0 {
				t.Fatalf("mountsim HB summary %+v", sumB)
			}
		})
	}
}
