package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/protocol"
)

// The truth from the mount over the API (docs/api.md, "Signed reports",
// "Command lifecycle", "Receipts"): device keys, signed reports, the
// command's status and the receipts that move it, on both backends.

// TestDeviceKeysAndSignedReports: the device key pinned by the association
// and never patched; a signed report stored verified (and its revision
// becoming the mount's), a bad signature refused whole, an unsigned report
// stored unverified for owners and refused for a rider.
func TestDeviceKeysAndSignedReports(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			d := newDevice("K1")
			a.associate(t, "K1", map[string]any{"devicePublicKey": d.publicKey(), "softwareRevision": "1.0.0"})
			if m := a.confirm(t, "K1"); m.DevicePublicKey == nil || *m.DevicePublicKey != d.publicKey() {
				t.Fatalf("confirmed mount's devicePublicKey %v", m.DevicePublicKey)
			}
			a.associate(t, "K0", nil) // older firmware: no key
			if m := a.get(t, "K0"); m.DevicePublicKey != nil {
				t.Fatalf("a mount without a key shows %q", *m.DevicePublicKey)
			}

			// PATCH cannot change the key, and changes nothing else either.
			res, raw := a.call(http.MethodPatch, "/api/v1/mounts/K1", map[string]any{"name": "renamed", "devicePublicKey": newDevice("other").publicKey()})
			if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Equal(fieldsOf(p), []string{"devicePublicKey"}) {
				t.Fatalf("PATCH devicePublicKey: %s", raw)
			}
			if m := a.get(t, "K1"); *m.DevicePublicKey != d.publicKey() || m.Name == "renamed" {
				t.Fatalf("PATCH changed the mount: %+v", m)
			}
			res, raw = a.call(http.MethodPatch, "/api/v1/mounts/K1", map[string]any{"devicePublicKey": nil})
			wantProblem(t, res, raw, 400, "VALIDATION_FAILED")

			at := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			signed := d.signedReport("1.1.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "77", OccurredAt: at})
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/K1/states", signed)
			if res.StatusCode != 200 || !strings.Contains(string(raw), `"accepted":1`) {
				t.Fatalf("signed report: %d %s", res.StatusCode, raw)
			}
			if m := a.get(t, "K1"); m.SoftwareRevision != "1.1.0" {
				t.Errorf("the signed revision did not become the mount's: %q", m.SoftwareRevision)
			}

			// A signature that does not verify: nothing stored.
			forged := d.signedReport("1.1.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "10", OccurredAt: at.Add(time.Second)})
			forged["states"] = []any{entry("BATTERY_LEVEL", "99", at.Add(time.Second))}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/K1/states", forged)
			wantProblem(t, res, raw, 400, "INVALID_SIGNATURE")
			// A signature for a mount without a key.
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/K0/states", newDevice("K0").signedReport("1.0.0",
				protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "10", OccurredAt: at}))
			wantProblem(t, res, raw, 400, "INVALID_SIGNATURE")
			// A signature without its counter.
			noCounter := d.signedReport("1.1.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "10", OccurredAt: at})
			delete(noCounter, "counter")
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/K1/states", noCounter)
			if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Equal(fieldsOf(p), []string{"counter"}) {
				t.Fatalf("signature without counter: %s", raw)
			}
			// A counter past 2^63-1, signed by the mount: refused as everywhere
			// (receipts and rollouts store counters as signed 64-bit integers).
			for _, c := range []uint64{math.MaxInt64 + 1, math.MaxUint64} {
				kept := d.counter
				d.counter = c - 1
				huge := d.signedReport("1.1.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "11", OccurredAt: at})
				d.counter = kept
				res, raw = a.call(http.MethodPost, "/api/v1/mounts/K1/states", huge)
				if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Equal(fieldsOf(p), []string{"counter"}) {
					t.Fatalf("counter %d: %s", c, raw)
				}
			}

			// Unsigned: the owner's is stored unverified; a rider's is refused.
			a.report(t, "K1", entry("CPU_TEMPERATURE", "40", at))
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:K1", "mount:K0")
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/K1/states", rider, map[string]any{"states": []any{entry("MOUNT_LOCKED", "0", at)}})
			wantProblem(t, res, raw, 403, "SIGNATURE_REQUIRED")
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/K0/states", rider, map[string]any{"states": []any{entry("MOUNT_LOCKED", "0", at)}})
			if res.StatusCode != 200 {
				t.Fatalf("a rider's unsigned report for a mount without a key: %d %s", res.StatusCode, raw)
			}
			// The rider relays what the mount signed.
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/K1/states", rider, d.signedReport("1.1.0",
				protocol.ReportEntry{Code: "HELMET_MOUNTED", Value: "1", OccurredAt: at}))
			if res.StatusCode != 200 {
				t.Fatalf("a rider's signed report: %d %s", res.StatusCode, raw)
			}

			res, raw = a.call(http.MethodGet, "/api/v1/mounts/K1/states", nil)
			if res.StatusCode != 200 {
				t.Fatalf("history: %d %s", res.StatusCode, raw)
			}
			var page struct {
				States []struct {
					Code     string `json:"code"`
					Value    string `json:"value"`
					Verified bool   `json:"verified"`
				} `json:"states"`
			}
			_ = json.Unmarshal(raw, &page)
			got := map[string]string{}
			for _, s := range page.States {
				got[s.Code] = fmt.Sprintf("%s/%t", s.Value, s.Verified)
			}
			want := map[string]string{"BATTERY_LEVEL": "77/true", "CPU_TEMPERATURE": "40/false", "HELMET_MOUNTED": "1/true"}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("history %v, want %v", got, want)
			}
		})
	}
}

// TestCommandLifecycleAndReceipts: a command's id and status, one command
// read by its id (owners only, never another account's), receipts moving
// it on (signed, counted, duplicates), the COMMAND_* event with the command
// (without issuedBy for a rider), and receipts' bad shapes refused with
// their field named, never a 500.
func TestCommandLifecycleAndReceipts(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			d := newDevice("R1")
			a.associate(t, "R1", map[string]any{"devicePublicKey": d.publicKey()})
			a.confirm(t, "R1")
			a.associate(t, "R2", nil)
			a.confirm(t, "R2")
			b.associate(t, "B1", nil)
			b.confirm(t, "B1")
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:R1")
			otherRider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:R2")

			cmd := a.issue(t, "R1", "code=RELEASE_HELMET")
			if cmd.ID == "" || !strings.HasSuffix(cmd.Payload, ";"+cmd.ID) || cmd.Status != "ISSUED" || cmd.StatusAt == nil || cmd.Reason != nil || cmd.Verified {
				t.Fatalf("a new command: %+v", cmd)
			}
			if got := a.commandByID(t, "R1", cmd.ID); got.ID != cmd.ID || got.Status != "ISSUED" || got.IssuedBy == nil {
				t.Fatalf("GET the command: %+v", got)
			}

			// Who may read it.
			for _, c := range []struct {
				name, token, path string
				status            int
				code              string
			}{
				{"unknown id", a.token, "/api/v1/mounts/R1/commands/0123456789abcdef0123456789abcdef", 404, "COMMAND_NOT_FOUND"},
				{"another mount's", a.token, "/api/v1/mounts/R2/commands/" + cmd.ID, 404, "COMMAND_NOT_FOUND"},
				{"another account's mount", b.token, "/api/v1/mounts/R1/commands/" + cmd.ID, 404, "MOUNT_NOT_FOUND"},
				{"another account, its own mount", b.token, "/api/v1/mounts/B1/commands/" + cmd.ID, 404, "COMMAND_NOT_FOUND"},
				{"a rider, its mount", rider, "/api/v1/mounts/R1/commands/" + cmd.ID, 403, "FORBIDDEN"},
				{"a rider, another mount", otherRider, "/api/v1/mounts/R1/commands/" + cmd.ID, 404, "MOUNT_NOT_FOUND"},
				{"a query parameter", a.token, "/api/v1/mounts/R1/commands/" + cmd.ID + "?x=1", 400, "VALIDATION_FAILED"},
			} {
				t.Run(c.name, func(t *testing.T) {
					res, raw := in.call(http.MethodGet, c.path, c.token, nil)
					wantProblem(t, res, raw, c.status, c.code)
				})
			}

			// Bad shapes: 400 naming the field, before anything is decided.
			now := time.Now().UTC()
			good := d.receipt(cmd.ID, "EXECUTED", "", now)
			with := func(k string, v any) map[string]any {
				r := map[string]any{}
				for kk, vv := range good {
					r[kk] = vv
				}
				if v == nil {
					delete(r, k)
				} else {
					r[k] = v
				}
				return r
			}
			for _, c := range []struct {
				name   string
				body   any
				status int
				code   string
				fields []string
			}{
				{"not JSON", "{", 400, "VALIDATION_FAILED", nil},
				{"an array", "[]", 400, "VALIDATION_FAILED", nil},
				{"no receipts", map[string]any{}, 400, "VALIDATION_FAILED", []string{"receipts"}},
				{"receipts null", map[string]any{"receipts": nil}, 400, "VALIDATION_FAILED", []string{"receipts"}},
				{"receipts an object", map[string]any{"receipts": map[string]any{}}, 400, "VALIDATION_FAILED", []string{"receipts"}},
				{"unknown top field", map[string]any{"receipts": []any{good}, "x": 1}, 400, "VALIDATION_FAILED", []string{"x"}},
				{"a receipt not an object", receipts(good, "x"), 400, "VALIDATION_FAILED", []string{"receipts[1]"}},
				{"no nonce", receipts(with("nonce", nil)), 400, "VALIDATION_FAILED", []string{"receipts[0].nonce"}},
				{"no counter", receipts(with("counter", nil)), 400, "VALIDATION_FAILED", []string{"receipts[0].counter"}},
				// A missing outcome or at is content: the signature, made
				// over them, is checked first.
				{"no outcome, so a bad signature", receipts(with("outcome", nil)), 400, "INVALID_SIGNATURE", nil},
				// The signature is checked before what the receipt says.
				{"unknown outcome, so a bad signature", receipts(with("outcome", "DONE")), 400, "INVALID_SIGNATURE", nil},
				{"negative counter", receipts(with("counter", -1)), 400, "VALIDATION_FAILED", []string{"receipts[0].counter"}},
				{"counter as text", receipts(with("counter", "1")), 400, "VALIDATION_FAILED", []string{"receipts[0].counter"}},
				{"huge counter", receipts(with("counter", 1e30)), 400, "VALIDATION_FAILED", []string{"receipts[0].counter"}},
				{"no at, so a bad signature", receipts(good, with("at", nil)), 400, "INVALID_SIGNATURE", nil},
				{"at without milliseconds", receipts(with("at", "2026-11-22T01:40:13Z")), 400, "VALIDATION_FAILED", []string{"receipts[0].at"}},
				{"at not in UTC", receipts(with("at", "2026-11-22T02:40:13.000+01:00")), 400, "VALIDATION_FAILED", []string{"receipts[0].at"}},
				{"unknown receipt field", receipts(with("extra", true)), 400, "VALIDATION_FAILED", []string{"receipts[0].extra"}},
				{"signature a number", receipts(with("signature", 7)), 400, "VALIDATION_FAILED", []string{"receipts[0].signature"}},
				{"too many", receipts(slices.Repeat([]any{good}, 501)...), 413, "PAYLOAD_TOO_LARGE", nil},
				{"a body over 1 MiB", `{"receipts":[` + strings.Repeat(`{"nonce":"`+strings.Repeat("a", 1000)+`"},`, 1100) + `{}]}`, 413, "PAYLOAD_TOO_LARGE", nil},
				{"unknown nonce", receipts(with("nonce", "0123456789abcdef0123456789abcdef")), 404, "COMMAND_NOT_FOUND", nil},
				{"unsigned for a keyed mount", receipts(with("signature", nil)), 403, "SIGNATURE_REQUIRED", nil},
				{"a bad signature", receipts(with("reason", "forged")), 400, "INVALID_SIGNATURE", nil},
			} {
				t.Run(c.name, func(t *testing.T) {
					res, raw := a.call(http.MethodPost, "/api/v1/mounts/R1/commands/receipts", c.body)
					p := wantProblem(t, res, raw, c.status, c.code)
					if c.fields != nil && !slices.Equal(fieldsOf(p), c.fields) {
						t.Fatalf("fields %v, want %v: %s", fieldsOf(p), c.fields, raw)
					}
				})
			}
			if got := a.commandByID(t, "R1", cmd.ID); got.Status != "ISSUED" {
				t.Fatalf("a refused upload moved the command: %+v", got)
			}
			// Another account's mount, and a rider's other mount.
			res, raw := b.call(http.MethodPost, "/api/v1/mounts/R1/commands/receipts", receipts(good))
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/R1/commands/receipts", otherRider, receipts(good))
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// The rider uploads the mount's receipt: EXECUTED, signed.
			res, raw = in.call(http.MethodPost, "/api/v1/mounts/R1/commands/receipts", rider, receipts(good))
			if res.StatusCode != 200 || strings.TrimSpace(string(raw)) != `{"accepted":1,"duplicates":0}` {
				t.Fatalf("upload: %d %s", res.StatusCode, raw)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/R1/commands/receipts", receipts(good))
			if res.StatusCode != 200 || strings.TrimSpace(string(raw)) != `{"accepted":0,"duplicates":1}` {
				t.Fatalf("the same again: %d %s", res.StatusCode, raw)
			}
			got := a.commandByID(t, "R1", cmd.ID)
			if got.Status != "EXECUTED" || !got.Verified || got.StatusAt == nil || got.Reason != nil {
				t.Fatalf("after the receipt: %+v", got)
			}
			// The audit says the same.
			res, raw = a.call(http.MethodGet, "/api/v1/mounts/R1/commands", nil)
			if res.StatusCode != 200 || !strings.Contains(string(raw), `"status":"EXECUTED"`) {
				t.Fatalf("audit: %d %s", res.StatusCode, raw)
			}

			// The event: with the command; a rider's without issuedBy.
			eventOf := func(token string) map[string]any {
				t.Helper()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					res, raw := in.call(http.MethodGet, "/api/v1/events?types=COMMAND_EXECUTED", token, nil)
					if res.StatusCode != 200 {
						t.Fatalf("events: %d %s", res.StatusCode, raw)
					}
					var page struct{ Events []map[string]any }
					_ = json.Unmarshal(raw, &page)
					if len(page.Events) == 1 {
						return page.Events[0]
					}
					if len(page.Events) > 1 || time.Now().After(deadline) {
						t.Fatalf("COMMAND_EXECUTED events: %s", raw)
					}
				}
			}
			ev := eventOf(a.token)
			c, _ := ev["command"].(map[string]any)
			if ev["uid"] != "R1" || c == nil || c["id"] != cmd.ID || c["status"] != "EXECUTED" || c["issuedBy"] == nil {
				t.Fatalf("the owner's event %v", ev)
			}
			ev = eventOf(rider)
			c, _ = ev["command"].(map[string]any)
			if c == nil || c["id"] != cmd.ID {
				t.Fatalf("the rider's event %v", ev)
			}
			if _, ok := c["issuedBy"]; ok {
				t.Fatalf("the rider sees issuedBy: %v", c)
			}
			res, raw = in.call(http.MethodGet, "/api/v1/events?types=COMMAND_EXECUTED", otherRider, nil)
			if res.StatusCode != 200 || strings.Contains(string(raw), cmd.ID) {
				t.Fatalf("another mount's rider sees the receipt: %d %s", res.StatusCode, raw)
			}

			// A mount without a device key takes unsigned receipts.
			c2 := a.issue(t, "R2", "code=SET_RFID_MODE&rfidMode=LEARN")
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/R2/commands/receipts", receipts(map[string]any{
				"nonce": c2.ID, "outcome": "DONE", "counter": 2, "at": protocol.FormatTime(now)}))
			if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Equal(fieldsOf(p), []string{"receipts[0].outcome"}) {
				t.Fatalf("an unknown outcome: %s", raw)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/R2/commands/receipts", receipts(map[string]any{"nonce": c2.ID, "counter": 2}))
			if p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED"); !slices.Contains(fieldsOf(p), "receipts[0].outcome") || !slices.Contains(fieldsOf(p), "receipts[0].at") {
				t.Fatalf("no outcome, no at: %s", raw)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/R2/commands/receipts", receipts(map[string]any{
				"nonce": c2.ID, "outcome": "REFUSED", "reason": "helmet not mounted", "counter": 3, "at": protocol.FormatTime(now)}))
			if res.StatusCode != 200 || strings.TrimSpace(string(raw)) != `{"accepted":1,"duplicates":0}` {
				t.Fatalf("unsigned receipt: %d %s", res.StatusCode, raw)
			}
			if got := a.commandByID(t, "R2", c2.ID); got.Status != "REFUSED" || got.Verified || got.Reason == nil || *got.Reason != "helmet not mounted" {
				t.Fatalf("refused: %+v", got)
			}
		})
	}
}

// TestGraphQLTruthFromTheMount: the same through GraphQL, with the same
// error codes.
func TestGraphQLTruthFromTheMount(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			d := newDevice("G1")
			r := a.gql(t, `mutation($k: String) { requestAssociation(input: {uid: "G1", devicePublicKey: $k}) { id status } }`, map[string]any{"k": d.publicKey()})
			if r.code() != "" || !strings.Contains(string(r.Data), `"status":"ISSUED"`) {
				t.Fatalf("requestAssociation %s %+v", r.Data, r.Errors)
			}
			a.confirm(t, "G1")
			if r := a.gql(t, `{ mount(uid: "G1") { devicePublicKey } }`, nil); string(r.Data) != `{"mount":{"devicePublicKey":"`+d.publicKey()+`"}}` {
				t.Fatalf("devicePublicKey %s %+v", r.Data, r.Errors)
			}
			r = a.gql(t, `mutation { updateMount(uid: "G1", input: {devicePublicKey: "00"}) { uid } }`, nil)
			if r.code() != "VALIDATION_FAILED" || !strings.Contains(fmt.Sprint(r.Errors[0].Extensions["errors"]), "devicePublicKey") {
				t.Fatalf("updateMount devicePublicKey: %+v", r.Errors)
			}

			at := time.Now().UTC().Add(-time.Minute).Truncate(time.Millisecond)
			signed := d.signedReport("3.0.0", protocol.ReportEntry{Code: "BATTERY_LEVEL", Value: "66", OccurredAt: at})
			report := `mutation($s: [MountStateInput!]!, $c: Int, $v: String, $sig: String) {
				reportStates(uid: "G1", states: $s, counter: $c, softwareRevision: $v, signature: $sig) { accepted duplicates } }`
			vars := map[string]any{"s": []any{map[string]any{"code": "BATTERY_LEVEL", "value": "66", "occurredAt": protocol.FormatTime(at)}},
				"c": signed["counter"], "v": "3.0.0", "sig": signed["signature"]}
			if r := a.gql(t, report, vars); string(r.Data) != `{"reportStates":{"accepted":1,"duplicates":0}}` {
				t.Fatalf("signed reportStates %s %+v", r.Data, r.Errors)
			}
			vars["c"] = 999
			if r := a.gql(t, report, vars); r.code() != "INVALID_SIGNATURE" {
				t.Fatalf("a bad signature: %+v", r.Errors)
			}
			delete(vars, "c")
			if r := a.gql(t, report, vars); r.code() != "VALIDATION_FAILED" {
				t.Fatalf("a signature without counter: %+v", r.Errors)
			}
			if r := a.gql(t, `{ mountStates(uid: "G1") { states { code verified } } }`, nil); string(r.Data) != `{"mountStates":{"states":[{"code":"BATTERY_LEVEL","verified":true}]}}` {
				t.Fatalf("mountStates %s %+v", r.Data, r.Errors)
			}

			r = a.gql(t, `mutation { issueCommand(uid: "G1", code: "RELEASE_HELMET") { id status statusAt reason verified } }`, nil)
			var issued struct {
				IssueCommand []lifecycleView `json:"issueCommand"`
			}
			if json.Unmarshal(r.Data, &issued) != nil || len(issued.IssueCommand) != 1 || issued.IssueCommand[0].Status != "ISSUED" {
				t.Fatalf("issueCommand %s %+v", r.Data, r.Errors)
			}
			id := issued.IssueCommand[0].ID
			upload := `mutation($r: [ReceiptInput!]!) { uploadReceipts(uid: "G1", receipts: $r) { accepted duplicates } }`
			good := d.receipt(id, "REFUSED", "stale command", time.Now())
			bad := map[string]any{}
			for k, v := range good {
				bad[k] = v
			}
			bad["at"] = "2026-11-22T01:40:13Z"
			r = a.gql(t, upload, map[string]any{"r": []any{bad}})
			if r.code() != "VALIDATION_FAILED" || !strings.Contains(fmt.Sprint(r.Errors[0].Extensions["errors"]), "receipts[0].at") {
				t.Fatalf("a bad at: %+v", r.Errors)
			}
			if r := a.gql(t, upload, map[string]any{"r": slices.Repeat([]any{good}, 501)}); r.code() != "PAYLOAD_TOO_LARGE" {
				t.Fatalf("too many receipts: %+v", r.Errors)
			}
			if r := a.gql(t, upload, map[string]any{"r": []any{good}}); string(r.Data) != `{"uploadReceipts":{"accepted":1,"duplicates":0}}` {
				t.Fatalf("uploadReceipts %s %+v", r.Data, r.Errors)
			}
			r = a.gql(t, `query($id: ID!) { command(uid: "G1", id: $id) { id status reason verified statusAt } }`, map[string]any{"id": id})
			if !strings.Contains(string(r.Data), `"status":"REFUSED","reason":"stale command","verified":true`) {
				t.Fatalf("command %s %+v", r.Data, r.Errors)
			}
			if r := a.gql(t, `{ command(uid: "G1", id: "nope") { id } }`, nil); r.code() != "COMMAND_NOT_FOUND" {
				t.Fatalf("unknown command: %+v", r.Errors)
			}
			rider := in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:G1")
			if r := in.gql(t, rider, `query($id: ID!) { command(uid: "G1", id: $id) { id } }`, map[string]any{"id": id}); r.code() != "FORBIDDEN" {
				t.Fatalf("a rider's command: %+v", r.Errors)
			}
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				r = a.gql(t, `{ events(types: [COMMAND_REFUSED]) { events { type uid command { id status reason issuedBy } } } }`, nil)
				if strings.Contains(string(r.Data), `"id":"`+id+`","status":"REFUSED","reason":"stale command","issuedBy":"`) {
					// The rider sees the same event, without issuedBy.
					r = in.gql(t, rider, `{ events(types: [COMMAND_REFUSED]) { events { command { id issuedBy } } } }`, nil)
					if string(r.Data) != `{"events":{"events":[{"command":{"id":"`+id+`","issuedBy":null}}]}}` {
						t.Fatalf("the rider's events %s %+v", r.Data, r.Errors)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("events %s %+v", r.Data, r.Errors)
				}
			}
		})
	}
}
