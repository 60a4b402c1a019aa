package core_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// TestFirmwareCommandQuery asks GET /mounts/{uid}/query for
// INSTALL_FIRMWARE: owners only, the revision required and published for
// the mount's model (visible; deprecated allowed), sha256 and size from
// the catalogue; the other codes keep their parameters and refuse
// revision.
func TestFirmwareCommandQuery(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	mounts := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: &wakeLog{}, Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(time.Minute),
		Logger: logger, Jobs: store, Filters: fakeFilters{}, Rollouts: store, Firmware: store})
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	mounts.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	acc, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	grant := func(role core.Role, uids ...string) core.Grant {
		return core.Grant{Complete: true, Role: role, MountUIDs: append([]string{}, uids...), Scopes: []string{}}
	}
	owner := core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID, Grant: grant(core.RoleOwner)}
	rider := core.Principal{AccountID: acc.AccountID, ClientID: "rider", Grant: grant(core.RoleRestricted, "M1")}
	maintainer := core.Principal{AccountID: acc.AccountID, ClientID: "maintainer", Grant: grant(core.RoleRestricted)}
	other, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	stranger := core.Principal{AccountID: other.AccountID, ClientID: other.ClientID, Grant: grant(core.RoleOwner)}

	model, otherModel := "HM-1", "HM-2"
	for _, uid := range []string{"M1", "M3"} {
		m := model
		if uid == "M3" {
			m = otherModel
		}
		if _, err := mounts.RequestAssociation(ctx, owner, uid, core.MountFields{ModelNumber: &m}); err != nil {
			t.Fatal(err)
		}
		if _, err := mounts.ConfirmAssociation(ctx, owner, uid); err != nil {
			t.Fatal(err)
		}
	}
	// M2 is requested but not confirmed: not ASSOCIATED.
	if _, err := mounts.RequestAssociation(ctx, owner, "M2", core.MountFields{ModelNumber: &model}); err != nil {
		t.Fatal(err)
	}
	sum := func(c string) string { return strings.Repeat(c, 64) }
	for _, fw := range []core.FirmwareVersion{
		{ModelNumber: model, SoftwareRevision: "1.2.0", AvailableSince: clock.Now().Add(-48 * time.Hour), SHA256: sum("a"), Size: 1000},
		{ModelNumber: model, SoftwareRevision: "1.1.0", AvailableSince: clock.Now().Add(-72 * time.Hour), SHA256: sum("b"), Size: 900, Deprecated: true},
		{ModelNumber: model, SoftwareRevision: "1.4.0", AvailableSince: clock.Now().Add(time.Hour), SHA256: sum("c"), Size: 1100},
		{ModelNumber: otherModel, SoftwareRevision: "2.0.0", AvailableSince: clock.Now().Add(-time.Hour), SHA256: sum("d"), Size: 2000},
	} {
		if err := store.InsertFirmware(ctx, fw); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("issued with the catalogue's parameters", func(t *testing.T) {
		for _, c := range []struct{ rev, sha, size string }{
			{"1.2.0", sum("a"), "1000"},
			{"1.1.0", sum("b"), "900"}, // deprecated: a technician may still install it
		} {
			cmds, err := mounts.QueryCommand(ctx, owner, "M1", "INSTALL_FIRMWARE", core.CommandParams{"revision": c.rev})
			if err != nil {
				t.Fatalf("%s: %v", c.rev, err)
			}
			if len(cmds) != 1 {
				t.Fatalf("%s: %d commands", c.rev, len(cmds))
			}
			cmd := cmds[0]
			want := map[string]string{"revision": c.rev, "sha256": c.sha, "size": c.size}
			for k, v := range want {
				if cmd.Params[k] != v || cmd.Data[k] != v {
					t.Errorf("%s: %s is %q / %v, want %q", c.rev, k, cmd.Params[k], cmd.Data[k], v)
				}
			}
			if cmd.Code != core.CmdInstallFirmware || cmd.SignedToken == "" || cmd.RolloutID != "" || cmd.Data["expiresAt"] == nil ||
				!strings.Contains(cmd.Payload, ";INSTALL_FIRMWARE;M1;revision="+c.rev+",sha256="+c.sha+",size="+c.size+";") {
				t.Errorf("%s: command %+v", c.rev, cmd)
			}
		}
		audit, _, err := mounts.CommandAudit(ctx, owner, "M1", core.Page{CurrentPage: 1, PageSize: 10})
		installs := 0
		for _, c := range audit {
			if c.Code == core.CmdInstallFirmware {
				installs++
			}
		}
		if err != nil || installs != 2 {
			t.Fatalf("audit: %d INSTALL_FIRMWARE of %d commands, %v", installs, len(audit), err)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, c := range []struct {
			name   string
			p      core.Principal
			uid    string
			params core.CommandParams
			code   core.Code
			fields []string
		}{
			{"no revision", owner, "M1", core.CommandParams{}, core.CodeValidation, []string{"revision"}},
			{"not a version", owner, "M1", core.CommandParams{"revision": "latest"}, core.CodeValidation, []string{"revision"}},
			{"not published", owner, "M1", core.CommandParams{"revision": "9.9.9"}, core.CodeValidation, []string{"revision"}},
			{"not yet visible", owner, "M1", core.CommandParams{"revision": "1.4.0"}, core.CodeValidation, []string{"revision"}},
			{"another model's", owner, "M1", core.CommandParams{"revision": "2.0.0"}, core.CodeValidation, []string{"revision"}},
			{"the catalogue's parameters are not the caller's", owner, "M1",
				core.CommandParams{"revision": "1.2.0", "sha256": sum("f"), "size": "1"}, core.CodeValidation, []string{"sha256", "size"}},
			{"a stray parameter", owner, "M1", core.CommandParams{"revision": "1.2.0", "alarmMode": "ON"}, core.CodeValidation, []string{"alarmMode"}},
			{"a rider", rider, "M1", core.CommandParams{"revision": "1.2.0"}, core.CodeForbidden, nil},
			{"a maintainer", maintainer, "M1", core.CommandParams{"revision": "1.2.0"}, core.CodeForbidden, nil},
			{"a rider's other mount", rider, "M3", core.CommandParams{"revision": "2.0.0"}, core.CodeMountNotFound, nil},
			{"another account", stranger, "M1", core.CommandParams{"revision": "1.2.0"}, core.CodeMountNotFound, nil},
			{"no such mount", owner, "M9", core.CommandParams{"revision": "1.2.0"}, core.CodeMountNotFound, nil},
			{"not associated", owner, "M2", core.CommandParams{"revision": "1.2.0"}, core.CodeMountNotAssociated, nil},
		} {
			_, err := mounts.QueryCommand(ctx, c.p, c.uid, "INSTALL_FIRMWARE", c.params)
			if core.ErrorCode(err) != c.code || (c.fields != nil && !slices.Equal(fieldsOf(err), c.fields)) {
				t.Errorf("%s: %v (fields %v), want %s %v", c.name, err, fieldsOf(err), c.code, c.fields)
			}
		}
	})

	t.Run("other codes", func(t *testing.T) {
		if _, err := mounts.QueryCommand(ctx, owner, "M1", "CONFIGURE_ALARM",
			core.CommandParams{"alarmMode": "ON", "alarmSensitivity": "LOW", "alarmVolume": "HIGH"}); err != nil {
			t.Errorf("CONFIGURE_ALARM: %v", err)
		}
		if _, err := mounts.QueryCommand(ctx, rider, "M1", "RELEASE_HELMET", core.CommandParams{}); err != nil {
			t.Errorf("a rider's RELEASE_HELMET: %v", err)
		}
		_, err := mounts.QueryCommand(ctx, owner, "M1", "RELEASE_HELMET", core.CommandParams{"revision": "1.2.0"})
		if core.ErrorCode(err) != core.CodeValidation || !slices.Equal(fieldsOf(err), []string{"revision"}) {
			t.Errorf("RELEASE_HELMET with a revision: %v", err)
		}
	})
}
