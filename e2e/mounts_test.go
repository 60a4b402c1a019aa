package e2e

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestLifecycle covers every row of docs/api.md, "Mount lifecycle" on both backends.
func TestLifecycle(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")

			// unknown uid → IDLE, owner = caller
			cmd := a.associate(t, "M1", map[string]any{"name": "Front", "macAddress": "aa:bb:cc:dd:ee:ff", "serialNumber": "SN1"})
			m := a.get(t, "M1")
			if m.AssociationState != "IDLE" || m.AssociatedAt != nil || m.MACAddress != "AA:BB:CC:DD:EE:FF" || m.Name != "Front" {
				t.Fatalf("after first POST: %+v", m)
			}
			if m.MountLocked != nil || m.BatteryLevel != nil || m.CPUTemperature != nil || m.HelmetMounted != nil {
				t.Fatalf("computed fields of a mount without states must be null: %+v", m)
			}
			key1 := cmd.Data["publicKey"].(string)

			// IDLE, owner POSTs again → IDLE, new key; given fields overwrite
			cmd = a.associate(t, "M1", map[string]any{"name": "Rear"})
			if key2 := cmd.Data["publicKey"].(string); key2 == key1 || len(key2) != 64 {
				t.Fatalf("re-POST must bring a new 64-hex key: %s then %s", key1, key2)
			}
			if m := a.get(t, "M1"); m.Name != "Rear" || m.SerialNumber != "SN1" || m.AssociationState != "IDLE" {
				t.Fatalf("after re-POST: %+v", m)
			}

			// another account on IDLE → 409
			res, raw := b.call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "M1"})
			wantProblem(t, res, raw, 409, "MOUNT_ALREADY_OWNED")
			// and the mount is 404 for it everywhere else
			res, raw = b.call(http.MethodGet, "/api/v1/mounts/M1", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			res, raw = b.call(http.MethodPost, "/api/v1/mounts/M1/confirm-association", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// IDLE confirm inside the window → ASSOCIATED, associatedAt = now
			before := time.Now().Add(-time.Second)
			m = a.confirm(t, "M1")
			if m.AssociationState != "ASSOCIATED" || m.AssociatedAt == nil {
				t.Fatalf("after confirm: %+v", m)
			}
			at, err := time.Parse(time.RFC3339, *m.AssociatedAt)
			if err != nil || at.Before(before) || !strings.HasSuffix(*m.AssociatedAt, "Z") || len(*m.AssociatedAt) != len("2026-11-22T01:40:13.123Z") {
				t.Fatalf("associatedAt %q", *m.AssociatedAt)
			}
			// ASSOCIATED confirm again → unchanged
			if again := a.confirm(t, "M1"); again.AssociatedAt == nil || *again.AssociatedAt != *m.AssociatedAt {
				t.Fatalf("second confirm changed the mount: %+v", again)
			}
			// ASSOCIATED, owner POSTs → stays ASSOCIATED, new key
			a.associate(t, "M1", nil)
			if m := a.get(t, "M1"); m.AssociationState != "ASSOCIATED" {
				t.Fatalf("re-POST on ASSOCIATED: %+v", m)
			}
			// ASSOCIATED, another account → 409
			res, raw = b.call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": "M1"})
			wantProblem(t, res, raw, 409, "MOUNT_ALREADY_OWNED")

			// abandon → INACTIVE, record and history kept
			a.report(t, "M1", entry("BATTERY_LEVEL", "80", time.Now().Add(-time.Minute)))
			if res, raw := a.call(http.MethodDelete, "/api/v1/mounts/M1/abandon", nil); res.StatusCode != 204 || len(raw) != 0 {
				t.Fatalf("abandon: %d %s", res.StatusCode, raw)
			}
			res, raw = a.call(http.MethodGet, "/api/v1/mounts/M1", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			if list := decode[map[string]any](t, a.ok(t, http.MethodGet, "/api/v1/mounts", nil)); list["pagination"].(map[string]any)["totalItems"].(float64) != 0 {
				t.Fatalf("an INACTIVE mount is listed")
			}
			// INACTIVE confirm → 409 for any owner token
			res, raw = b.call(http.MethodPost, "/api/v1/mounts/M1/confirm-association", nil)
			wantProblem(t, res, raw, 409, "ASSOCIATION_NOT_PENDING")
			// INACTIVE POST → IDLE for the new caller; A's history and name
			// stay A's, so B sees neither
			b.associate(t, "M1", nil)
			if m := b.get(t, "M1"); m.AssociationState != "IDLE" || m.BatteryLevel != nil || m.Name != "" || m.SerialNumber != "SN1" {
				t.Fatalf("after re-claim: %+v", m)
			}

			// delete → everything removed
			if res, raw := b.call(http.MethodDelete, "/api/v1/mounts/M1", nil); res.StatusCode != 204 || len(raw) != 0 {
				t.Fatalf("delete: %d %s", res.StatusCode, raw)
			}
			for _, f := range []fleet{a, b} {
				res, raw = f.call(http.MethodGet, "/api/v1/mounts/M1", nil)
				wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
				res, raw = f.call(http.MethodPost, "/api/v1/mounts/M1/confirm-association", nil)
				wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			}
			a.associate(t, "M1", nil)
			if m := a.get(t, "M1"); m.BatteryLevel != nil || m.Name != "" {
				t.Fatalf("a deleted mount came back with old data: %+v", m)
			}
			// delete by another account → 404, nothing removed
			res, raw = b.call(http.MethodDelete, "/api/v1/mounts/M1", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			res, raw = b.call(http.MethodDelete, "/api/v1/mounts/M1/abandon", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
			a.get(t, "M1")
		})
	}
}

// TestAssociationWindow: a lapsed window answers 410 at confirm even before
// the worker runs, and the worker makes the mount INACTIVE on its own.
func TestAssociationWindow(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			cfg := newConfig(t)
			cfg.AssociationWindow = 700 * time.Millisecond
			in := start(t, cfg)
			a, b := newFleet(in, "A"), newFleet(in, "B")

			a.associate(t, "W1", nil)
			a.associate(t, "W2", nil)
			time.Sleep(cfg.AssociationWindow + 100*time.Millisecond)
			// W1: confirm after the window → 410, INACTIVE from then on
			res, raw := a.call(http.MethodPost, "/api/v1/mounts/W1/confirm-association", nil)
			wantProblem(t, res, raw, 410, "ASSOCIATION_EXPIRED")
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/W1/confirm-association", nil)
			wantProblem(t, res, raw, 410, "ASSOCIATION_EXPIRED")
			res, raw = a.call(http.MethodGet, "/api/v1/mounts/W1", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")

			// W2: the worker expires it; another account may then claim it
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, raw = a.call(http.MethodGet, "/api/v1/mounts/W2", nil)
				if res.StatusCode == 404 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the worker did not expire W2: %d %s", res.StatusCode, raw)
				}
				time.Sleep(100 * time.Millisecond)
			}
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/W2/confirm-association", nil)
			wantProblem(t, res, raw, 410, "ASSOCIATION_EXPIRED")
			b.associate(t, "W2", nil)
			// once associated again, the former owner's confirm is a plain 404
			res, raw = a.call(http.MethodPost, "/api/v1/mounts/W2/confirm-association", nil)
			wantProblem(t, res, raw, 404, "MOUNT_NOT_FOUND")
		})
	}
}

// TestExpiryRecoveredAfterRestart: a deadline pending when the server stops
// is expired by the next one.
func TestExpiryRecoveredAfterRestart(t *testing.T) {
	cfg := testConfig(t.TempDir(), "")
	cfg.AssociationWindow = 500 * time.Millisecond
	first := start(t, cfg)
	a := newFleet(first, "A")
	a.associate(t, "R1", nil)
	first.stop()
	time.Sleep(600 * time.Millisecond)

	second := start(t, cfg)
	b := newFleet(second, "B")
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, raw := b.call(http.MethodPost, "/api/v1/mounts/R1/confirm-association", nil)
		if res.StatusCode == 409 { // INACTIVE now: no pending association
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("R1 was not expired after restart: %d %s", res.StatusCode, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestConcurrentClaims: many accounts POST one INACTIVE uid at once; exactly
// one wins.
func TestConcurrentClaims(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			const accounts = 12
			fleets := make([]fleet, accounts)
			for i := range fleets {
				fleets[i] = newFleet(in, fmt.Sprintf("F%d", i))
			}
			for round := 0; round < 3; round++ {
				uid := "RACE" + strconv.Itoa(round)
				if round > 0 { // an INACTIVE mount: claimed once, then abandoned
					fleets[0].associate(t, uid, nil)
					fleets[0].noContent(t, http.MethodDelete, "/api/v1/mounts/"+uid+"/abandon", nil)
				}
				var wg sync.WaitGroup
				statuses := make([]int, accounts)
				start := make(chan struct{})
				for i := range fleets {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						res, _ := fleets[i].call(http.MethodPost, "/api/v1/mounts", map[string]any{"uid": uid})
						statuses[i] = res.StatusCode
					}()
				}
				close(start)
				wg.Wait()
				wins, winner := 0, -1
				for i, s := range statuses {
					switch s {
					case 200:
						wins++
						winner = i
					case 409:
					default:
						t.Fatalf("round %d: status %d", round, s)
					}
				}
				if wins != 1 {
					t.Fatalf("round %d: %d winners (%v), want exactly 1", round, wins, statuses)
				}
				if m := fleets[winner].get(t, uid); m.AssociationState != "IDLE" {
					t.Fatalf("winner's mount %+v", m)
				}
			}
		})
	}
}

// TestSignedCommands plays the mount: every command verifies with the key
// that ASSOCIATE_OWNER delivered, and the payload is as docs/api.md, "Commands" says.
func TestSignedCommands(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a := newFleet(in, "A")
			assoc := a.associate(t, "C1", nil)
			pub, err := hex.DecodeString(assoc.Data["publicKey"].(string))
			if err != nil || len(pub) != ed25519.PublicKeySize {
				t.Fatalf("publicKey %v", assoc.Data["publicKey"])
			}
			checkPayload(t, assoc, "ASSOCIATE_OWNER", "C1", "accountId="+a.creds.AccountID+",publicKey="+assoc.Data["publicKey"].(string))
			if assoc.Data["accountId"] != a.creds.AccountID {
				t.Fatalf("ASSOCIATE_OWNER data %v", assoc.Data)
			}

			// IDLE: commands are refused
			res, raw := a.call(http.MethodGet, "/api/v1/mounts/C1/query?code=RELEASE_HELMET", nil)
			wantProblem(t, res, raw, 409, "MOUNT_NOT_ASSOCIATED")
			a.confirm(t, "C1")

			cases := []struct {
				query  string
				code   string
				params string
			}{
				{"code=RELEASE_HELMET", "RELEASE_HELMET", ""},
				{"code=CONFIGURE_ALARM&alarmMode=OFF&alarmSensitivity=HIGH&alarmVolume=HIGH", "CONFIGURE_ALARM", "alarmMode=OFF,alarmSensitivity=HIGH,alarmVolume=HIGH"},
				{"code=SET_RFID_MODE&rfidMode=NORMAL", "SET_RFID_MODE", "rfidMode=NORMAL"},
				{"code=ADD_NFC_TAG&tagUid=04:a2:b3:c4", "ADD_NFC_TAG", "tagUid=04A2B3C4"},
				{"code=REMOVE_NFC_TAG&tagUid=04A2B3C4D5E6F7", "REMOVE_NFC_TAG", "tagUid=04A2B3C4D5E6F7"},
				{"code=SYNC_NFC_TAGS", "SYNC_NFC_TAGS", "tagUids="},
			}
			nonces := map[string]bool{}
			for _, c := range cases {
				raw := a.ok(t, http.MethodGet, "/api/v1/mounts/C1/query?"+c.query, nil)
				cmds := decode[[]commandView](t, raw)
				if len(cmds) != 1 || cmds[0].SignedToken == nil {
					t.Fatalf("%s: %s", c.query, raw)
				}
				cmd := cmds[0]
				nonce := checkPayload(t, cmd, c.code, "C1", c.params)
				if nonces[nonce] {
					t.Fatalf("nonce %s reused", nonce)
				}
				nonces[nonce] = true
				sig, err := hex.DecodeString(*cmd.SignedToken)
				if err != nil || len(*cmd.SignedToken) != 128 || *cmd.SignedToken != strings.ToLower(*cmd.SignedToken) {
					t.Fatalf("signedToken %q", *cmd.SignedToken)
				}
				if !ed25519.Verify(pub, []byte(cmd.Payload), sig) {
					t.Fatalf("%s: signature does not verify with the mount's key", c.code)
				}
				tampered := strings.Replace(cmd.Payload, "C1", "C2", 1)
				if ed25519.Verify(pub, []byte(tampered), sig) {
					t.Fatal("the signature verifies for another mount uid")
				}
			}

			// the audit lists everything issued, newest first, with the issuer
			raw = a.ok(t, http.MethodGet, "/api/v1/mounts/C1/commands", nil)
			audit := decode[struct {
				Commands   []commandView  `json:"commands"`
				Pagination map[string]int `json:"pagination"`
			}](t, raw)
			if audit.Pagination["totalItems"] != len(cases)+1 || audit.Commands[0].Code != "SYNC_NFC_TAGS" ||
				audit.Commands[len(audit.Commands)-1].Code != "ASSOCIATE_OWNER" || audit.Commands[0].IssuedBy != a.creds.ClientID {
				t.Fatalf("audit %s", raw)
			}

			// a rotated key signs from then on
			out := in.runCLI("keys", "rotate", "--mount", "C1", "--json")
			rotated := decode[map[string]string](t, []byte(out))
			raw = a.ok(t, http.MethodGet, "/api/v1/mounts/C1/query?code=RELEASE_HELMET", nil)
			cmd := decode[[]commandView](t, raw)[0]
			newPub, _ := hex.DecodeString(rotated["publicKey"])
			sig, _ := hex.DecodeString(*cmd.SignedToken)
			if !ed25519.Verify(newPub, []byte(cmd.Payload), sig) || ed25519.Verify(pub, []byte(cmd.Payload), sig) {
				t.Fatal("after keys rotate, commands must be signed with the new key only")
			}
		})
	}
}

// checkPayload checks `<ms>;<code>;<uid>;<params>;<nonce>` and returns the nonce.
func checkPayload(t *testing.T, cmd commandView, code, uid, params string) string {
	t.Helper()
	parts := strings.Split(cmd.Payload, ";")
	if len(parts) != 5 || parts[1] != code || parts[2] != uid || parts[3] != params || len(parts[4]) != 32 {
		t.Fatalf("payload %q; want ms;%s;%s;%s;nonce", cmd.Payload, code, uid, params)
	}
	if _, err := hex.DecodeString(parts[4]); err != nil || strings.ToLower(parts[4]) != parts[4] {
		t.Fatalf("nonce %q", parts[4])
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	gen, err2 := time.Parse(time.RFC3339, cmd.GeneratedAt)
	if err != nil || err2 != nil || gen.UnixMilli() != ms {
		t.Fatalf("generatedAt %s does not equal the payload's %s", cmd.GeneratedAt, parts[0])
	}
	exp, err := time.Parse(time.RFC3339, fmt.Sprint(cmd.Data["expiresAt"]))
	if err != nil || !exp.Equal(gen.Add(5*time.Minute)) {
		t.Fatalf("data.expiresAt %v, generatedAt %s", cmd.Data["expiresAt"], cmd.GeneratedAt)
	}
	return parts[4]
}

// TestCommandQueryValidation: parameters as docs/api.md, "Commands".
func TestCommandQueryValidation(t *testing.T) {
	in := start(t, testConfig(t.TempDir(), ""))
	a := newFleet(in, "A")
	a.associate(t, "Q1", nil)
	a.confirm(t, "Q1")
	cases := []struct {
		query string
		field string
	}{
		{"", "code"},
		{"code=FLY", "code"},
		{"code=RELEASE_HELMET&rfidMode=NORMAL", "rfidMode"},
		{"code=CONFIGURE_ALARM&alarmMode=LOUD&alarmSensitivity=HIGH&alarmVolume=HIGH", "alarmMode"},
		{"code=CONFIGURE_ALARM&alarmMode=OFF&alarmSensitivity=HIGH", "alarmVolume"},
		{"code=SET_RFID_MODE&rfidMode=normal", "rfidMode"},
		{"code=ADD_NFC_TAG&tagUid=XYZ", "tagUid"},
		{"code=ADD_NFC_TAG&tagUid=0102030405", "tagUid"},
		{"code=ADD_NFC_TAG", "tagUid"},
		{"code=SET_RFID_MODE&rfidMode=NORMAL&rfidMode=LEARN", "rfidMode"},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			res, raw := a.call(http.MethodGet, "/api/v1/mounts/Q1/query?"+c.query, nil)
			p := wantProblem(t, res, raw, 400, "VALIDATION_FAILED")
			if len(p.Errors) == 0 || p.Errors[0].Field != c.field {
				t.Fatalf("errors %s; want field %s", raw, c.field)
			}
		})
	}
}

// TestFleetFilter: GET /mounts?filter= on both backends selects by fields
// and latest values as reported, within the token's reach, and answers a
// bad filter 400 on the field filter, never 500.
func TestFleetFilter(t *testing.T) {
	for name, newConfig := range backends(t) {
		t.Run(name, func(t *testing.T) {
			in := start(t, newConfig(t))
			a, b := newFleet(in, "A"), newFleet(in, "B")
			now := time.Now().UTC().Truncate(time.Millisecond)
			for _, m := range []struct{ uid, model, battery string }{{"K1", "HM-1", "15"}, {"K2", "HM-1", "19.5"}, {"K3", "HM-2", "80"}, {"K4", "HM-1", ""}} {
				a.associate(t, m.uid, map[string]any{"modelNumber": m.model, "name": "Kit " + m.uid})
				a.confirm(t, m.uid)
				if m.battery != "" {
					a.report(t, m.uid, entry("BATTERY_LEVEL", m.battery, now))
				}
			}
			b.associate(t, "KB", map[string]any{"modelNumber": "HM-1"})
			b.report(t, "KB", entry("BATTERY_LEVEL", "1", now))
			rider := fleet{in: in, creds: a.creds, token: in.token(a.creds, "openid", "sub", audItem, "role:restricted", "mount:K2", "mount:K3")}
			list := func(f fleet, filter string) string {
				t.Helper()
				raw := f.ok(t, http.MethodGet, "/api/v1/mounts?pageSize=100&filter="+url.QueryEscape(filter), nil)
				page := decode[struct {
					Mounts     []mountView
					Pagination struct{ TotalItems int }
				}](t, raw)
				uids := make([]string, len(page.Mounts))
				for i, m := range page.Mounts {
					uids[i] = m.UID
				}
				if page.Pagination.TotalItems != len(uids) {
					t.Fatalf("%s: %s", filter, raw)
				}
				return strings.Join(uids, ",")
			}
			for _, c := range []struct {
				who          fleet
				filter, want string
			}{
				{a, `batteryLevel < 20 AND presence = "ONLINE" AND modelNumber = "HM-1"`, "K1,K2"},
				{a, `batteryLevel > 19`, "K2,K3"},
				{a, `NOT batteryLevel < 20`, "K3,K4"},
				{a, `modelNumber = "HM-2" OR presence = "UNKNOWN"`, "K3,K4"},
				{a, `lastSeenAt >= "` + now.Add(-time.Minute).Format(time.RFC3339) + `"`, "K1,K2,K3"},
				{b, `batteryLevel < 20`, "KB"},
				{rider, `batteryLevel < 20`, "K2"},
				{rider, `NOT batteryLevel < 20`, "K3"},
			} {
				if got := list(c.who, c.filter); got != c.want {
					t.Errorf("%s: %s, want %s", c.filter, got, c.want)
				}
			}
			for _, filter := range []string{`batteryLevel <`, `colour = "red"`, `batteryLevel < "low"`, `presence = "AWAY"`,
				`name = "a" AND`, strings.Repeat(`uid = "a" OR `, 120) + `uid = "a"`} {
				for _, f := range []fleet{a, rider} {
					res, body := f.call(http.MethodGet, "/api/v1/mounts?filter="+url.QueryEscape(filter), nil)
					if p := wantProblem(t, res, body, http.StatusBadRequest, "VALIDATION_FAILED"); len(p.Errors) != 1 || p.Errors[0].Field != "filter" {
						t.Errorf("%.40s: errors %+v, want one on filter", filter, p.Errors)
					}
				}
			}
		})
	}
}
