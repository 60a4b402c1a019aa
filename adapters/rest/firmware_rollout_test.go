package rest_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/rest"
	"github.com/mountd/mountd/adapters/rest/openapitest"
	"github.com/mountd/mountd/core"
)

// oneRollout answers RolloutFor with a RUNNING rollout of HM-1 to 1.3.0
// whose targets are M1 (ELIGIBLE) and M2 (PENDING).
type oneRollout struct{ core.RolloutStore }

func (oneRollout) RolloutFor(_ context.Context, accountID, model, uid string) (core.Rollout, *core.RolloutTarget, bool, error) {
	if model != "HM-1" {
		return core.Rollout{}, nil, false, nil
	}
	r := core.Rollout{ID: "ro_1", AccountID: accountID, ModelNumber: "HM-1", SoftwareRevision: "1.3.0", State: core.RolloutRunning}
	switch uid {
	case "M1":
		return r, &core.RolloutTarget{UID: uid, State: core.TargetStateEligible}, true, nil
	case "M2":
		return r, &core.RolloutTarget{UID: uid, State: core.TargetStatePending}, true, nil
	}
	return r, nil, true, nil
}

// TestFirmwareRolloutTransport runs GET /mounts/{uid}/query for
// INSTALL_FIRMWARE and GET /firmware/check-update?mountUid= over the real
// handler tree and the real core services on the memory store: the
// revision reaches core, restricted tokens are refused, a mount the token
// cannot see is 404, and rollouts decide what a mount is offered.
func TestFirmwareRolloutTransport(t *testing.T) {
	ctx := context.Background()
	v := openapitest.New(t)
	logger := slog.New(slog.DiscardHandler)
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	mounts := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: memory.NewExpiryScheduler(), Waker: memory.NewWaker(),
		Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(time.Minute),
		Logger: logger, Jobs: store, Rollouts: store, Firmware: store})
	firmware := core.NewFirmwareService(store, nil, 0, oneRollout{}, logger)
	acc, err := core.NewAccountService(store, nil).Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	grant := func(role core.Role, uids ...string) core.Grant {
		return core.Grant{Complete: true, Role: role, MountUIDs: append([]string{}, uids...), Scopes: []string{"openid", "sub"}}
	}
	expires := time.Now().Add(time.Hour)
	owner := core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID, ExpiresAt: expires, Grant: grant(core.RoleOwner)}
	rider := core.Principal{AccountID: acc.AccountID, ClientID: "rider", ExpiresAt: expires, Grant: grant(core.RoleRestricted, "M1")}
	maintainer := core.Principal{AccountID: acc.AccountID, ClientID: "maintainer", ExpiresAt: expires, Grant: grant(core.RoleRestricted)}
	other := core.Principal{AccountID: "acc-other", ClientID: "other", ExpiresAt: expires, Grant: grant(core.RoleOwner)}
	model := "HM-1"
	for _, uid := range []string{"M1", "M2"} {
		if _, err := mounts.RequestAssociation(ctx, owner, uid, core.MountFields{ModelNumber: &model}); err != nil {
			t.Fatal(err)
		}
		if _, err := mounts.ConfirmAssociation(ctx, owner, uid); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-24 * time.Hour)
	for _, fw := range []core.FirmwareVersion{
		{ModelNumber: model, SoftwareRevision: "1.2.0", AvailableSince: long, SHA256: strings.Repeat("a", 64), Size: 1000},
		{ModelNumber: model, SoftwareRevision: "1.3.0", AvailableSince: long, SHA256: strings.Repeat("b", 64), Size: 2000},
		{ModelNumber: model, SoftwareRevision: "1.4.0", AvailableSince: long, SHA256: strings.Repeat("c", 64), Size: 3000},
	} {
		if err := store.InsertFirmware(ctx, fw); err != nil {
			t.Fatal(err)
		}
	}
	srv := rest.NewServer(rest.Deps{Logger: logger, Mounts: mounts, Firmware: firmware,
		Verifier: fakeVerifier{"owner": owner, "rider": rider, "maintainer": maintainer, "other": other}})
	ts := httptest.NewServer(srv)
	defer ts.Close()

	do := func(path, token string, status int, code, field string) []byte {
		t.Helper()
		res, got := call(t, ts.URL, "GET", path, token, "")
		var p struct {
			Code   string
			Errors []struct{ Field string }
		}
		_ = json.Unmarshal(got, &p)
		if res.StatusCode != status || (status >= 400 && p.Code != code) || (field != "" && (len(p.Errors) != 1 || p.Errors[0].Field != field)) {
			t.Errorf("GET %s as %s: %d %s, want %d %s %s", path, token, res.StatusCode, got, status, code, field)
		}
		v.Check(t, res.Request, res, got)
		return got
	}

	t.Run("query INSTALL_FIRMWARE", func(t *testing.T) {
		body := do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", "owner", 200, "", "")
		var cmds []struct {
			Code string
			Data map[string]any
		}
		if err := json.Unmarshal(body, &cmds); err != nil || len(cmds) != 1 || cmds[0].Code != "INSTALL_FIRMWARE" ||
			cmds[0].Data["revision"] != "1.3.0" || cmds[0].Data["sha256"] != strings.Repeat("b", 64) || cmds[0].Data["size"] != "2000" {
			t.Errorf("INSTALL_FIRMWARE %s", body)
		}
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE", "owner", 400, "VALIDATION_FAILED", "revision")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=9.9.9", "owner", 400, "VALIDATION_FAILED", "revision")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0&revision=1.2.0", "owner", 400, "VALIDATION_FAILED", "revision")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0&size=1", "owner", 400, "VALIDATION_FAILED", "size")
		do("/api/v1/mounts/M1/query?code=RELEASE_HELMET&revision=1.3.0", "owner", 400, "VALIDATION_FAILED", "revision")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", "rider", 403, "FORBIDDEN", "")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", "maintainer", 403, "FORBIDDEN", "")
		do("/api/v1/mounts/M2/query?code=INSTALL_FIRMWARE&revision=1.3.0", "rider", 404, "MOUNT_NOT_FOUND", "")
		do("/api/v1/mounts/M1/query?code=INSTALL_FIRMWARE&revision=1.3.0", "other", 404, "MOUNT_NOT_FOUND", "")
		do("/api/v1/mounts/M1/query?code=RELEASE_HELMET", "rider", 200, "", "")
		do("/api/v1/mounts/M1/query?code=SET_RFID_MODE&rfidMode=LEARN", "owner", 200, "", "")
	})

	t.Run("check-update with mountUid", func(t *testing.T) {
		version := func(body []byte) string {
			var res struct {
				Code    string
				Version *struct{ SoftwareRevision string }
			}
			_ = json.Unmarshal(body, &res)
			if res.Version == nil {
				return res.Code
			}
			return res.Code + " " + res.Version.SoftwareRevision
		}
		for _, c := range []struct {
			path, token, want string
		}{
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.0.0&mountUid=M1", "owner", "UPDATE_AVAILABLE 1.3.0"},
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.0.0&mountUid=M1", "rider", "UPDATE_AVAILABLE 1.3.0"},
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.3.0&mountUid=M1", "owner", "UP_TO_DATE"},
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.0.0&mountUid=M2", "owner", "UPDATE_AVAILABLE 1.2.0"},
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.2.0&mountUid=M2", "maintainer", "UP_TO_DATE"},
			{"/api/v1/firmware/check-update?modelNumber=HM-1&softwareRevision=1.0.0", "owner", "UPDATE_AVAILABLE 1.4.0"},
		} {
			if got := version(do(c.path, c.token, 200, "", "")); got != c.want {
				t.Errorf("%s as %s: %s, want %s", c.path, c.token, got, c.want)
			}
		}
		do("/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M2", "rider", 404, "MOUNT_NOT_FOUND", "")
		do("/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M1", "other", 404, "MOUNT_NOT_FOUND", "")
		do("/api/v1/firmware/check-update?modelNumber=HM-1&mountUid=M9", "owner", 404, "MOUNT_NOT_FOUND", "")
		do("/api/v1/firmware/check-update?mountUid=M1", "owner", 400, "VALIDATION_FAILED", "modelNumber")
		do("/api/v1/firmware/check-update?modelNumber=HM-9&mountUid=M1", "owner", 404, "FIRMWARE_NOT_FOUND", "")
	})
}
