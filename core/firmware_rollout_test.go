package core_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// fakeRolloutFor answers RolloutFor from one rollout and its targets by
// uid; the rest of the port is not reached by check-update.
type fakeRolloutFor struct {
	core.RolloutStore
	rollout *core.Rollout
	targets map[string]core.RolloutTarget
	err     error
	asked   []string
}

func (f *fakeRolloutFor) RolloutFor(_ context.Context, accountID, model, uid string) (core.Rollout, *core.RolloutTarget, bool, error) {
	f.asked = append(f.asked, accountID+"/"+model+"/"+uid)
	if f.err != nil {
		return core.Rollout{}, nil, false, f.err
	}
	if f.rollout == nil || f.rollout.AccountID != accountID || f.rollout.ModelNumber != model {
		return core.Rollout{}, nil, false, nil
	}
	if t, ok := f.targets[uid]; ok {
		return *f.rollout, &t, true, nil
	}
	return *f.rollout, nil, true, nil
}

// TestCheckMountUpdate answers check-update?mountUid= under rollouts: a
// target ELIGIBLE or INSTALLING in a RUNNING rollout gets the rollout's
// version (by the usual codes) unless already on it, even when it is
// older (a downgrade); every other mount, while a RUNNING or PAUSED
// rollout exists for the model, gets the answer of a catalogue without
// the rollout's revision and above: a PAUSED rollout offers nothing
// (docs/api.md, "Rollouts"), its ELIGIBLE and INSTALLING targets
// included.
func TestCheckMountUpdate(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	store := memory.NewStore()
	sum := strings.Repeat("a", 64)
	for _, fw := range []core.FirmwareVersion{
		{ModelNumber: "HM-1", SoftwareRevision: "1.0.0", AvailableSince: now.Add(-96 * time.Hour), SHA256: sum, Size: 1, Deprecated: true},
		{ModelNumber: "HM-1", SoftwareRevision: "1.1.0", AvailableSince: now.Add(-72 * time.Hour), SHA256: sum, Size: 1},
		{ModelNumber: "HM-1", SoftwareRevision: "1.2.0", AvailableSince: now.Add(-48 * time.Hour), SHA256: sum, Size: 1, Mandatory: true},
		{ModelNumber: "HM-1", SoftwareRevision: "1.3.0", AvailableSince: now.Add(-24 * time.Hour), SHA256: sum, Size: 1},
		{ModelNumber: "HM-1", SoftwareRevision: "1.4.0", AvailableSince: now.Add(-time.Hour), SHA256: sum, Size: 1},
		{ModelNumber: "HM-2", SoftwareRevision: "1.0.0", AvailableSince: now.Add(-time.Hour), SHA256: sum, Size: 1},
	} {
		if err := store.InsertFirmware(ctx, fw); err != nil {
			t.Fatal(err)
		}
	}
	owner := core.Principal{AccountID: "acc-1", ClientID: "c", Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}}}
	rider := core.Principal{AccountID: "acc-1", ClientID: "r", Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1"}}}
	stranger := core.Principal{AccountID: "acc-2", ClientID: "s", Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}}}
	rollout := func(state core.RolloutState, rev string) *core.Rollout {
		return &core.Rollout{ID: "ro_1", AccountID: "acc-1", ModelNumber: "HM-1", SoftwareRevision: rev, State: state}
	}
	targets := map[string]core.RolloutTarget{
		"M1": {UID: "M1", State: core.TargetStateEligible},
		"M2": {UID: "M2", State: core.TargetStateInstalling},
		"M3": {UID: "M3", State: core.TargetStatePending},
		"M4": {UID: "M4", State: core.TargetStateHealthy},
		"M5": {UID: "M5", State: core.TargetStateFailed},
	}
	rev := func(s string) *string { return &s }
	type want struct{ code, version string }
	for _, c := range []struct {
		name    string
		rollout *core.Rollout
		p       core.Principal
		uid     string
		model   string
		current *string
		want    want
	}{
		{"no rollout: the latest", nil, owner, "M1", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.4.0"}},
		{"no rollout: up to date", nil, owner, "M1", "HM-1", rev("1.4.0"), want{"UP_TO_DATE", ""}},
		{"eligible: the rollout's version", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", rev("1.2.0"), want{"UPDATE_AVAILABLE", "1.3.0"}},
		{"eligible for a restricted token", rollout(core.RolloutRunning, "1.3.0"), rider, "M1", "HM-1", rev("1.2.0"), want{"UPDATE_AVAILABLE", "1.3.0"}},
		{"installing: the rollout's version", rollout(core.RolloutRunning, "1.3.0"), owner, "M2", "HM-1", rev("1.2.0"), want{"UPDATE_AVAILABLE", "1.3.0"}},
		{"eligible below a mandatory version under the rollout's", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", rev("1.1.0"),
			want{"MANDATORY_UPDATE", "1.3.0"}},
		{"eligible on a deprecated revision", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", rev("1.0.0"), want{"MANDATORY_UPDATE", "1.3.0"}},
		{"eligible without a revision", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", nil, want{"MANDATORY_UPDATE", "1.3.0"}},
		{"eligible already there", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", rev("1.3.0"), want{"UP_TO_DATE", ""}},
		{"eligible beyond it: a downgrade", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-1", rev("1.4.0"), want{"UPDATE_AVAILABLE", "1.3.0"}},
		{"eligible of a rollout to an older revision", rollout(core.RolloutRunning, "1.2.0"), owner, "M1", "HM-1", rev("1.4.0"),
			want{"UPDATE_AVAILABLE", "1.2.0"}},
		{"eligible of a rollout to the latest", rollout(core.RolloutRunning, "1.4.0"), owner, "M1", "HM-1", rev("1.3.0"), want{"UPDATE_AVAILABLE", "1.4.0"}},
		{"pending: capped below the rollout's", rollout(core.RolloutRunning, "1.3.0"), owner, "M3", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.2.0"}},
		{"pending and at the cap", rollout(core.RolloutRunning, "1.3.0"), owner, "M3", "HM-1", rev("1.2.0"), want{"UP_TO_DATE", ""}},
		{"healthy: on the new revision", rollout(core.RolloutRunning, "1.3.0"), owner, "M4", "HM-1", rev("1.3.0"), want{"UP_TO_DATE", ""}},
		{"failed: capped", rollout(core.RolloutRunning, "1.3.0"), owner, "M5", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.2.0"}},
		{"not a target: capped", rollout(core.RolloutRunning, "1.3.0"), owner, "M9", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.2.0"}},
		{"paused: an eligible target is capped", rollout(core.RolloutPaused, "1.3.0"), owner, "M1", "HM-1", rev("1.1.0"),
			want{"MANDATORY_UPDATE", "1.2.0"}},
		{"paused: an eligible target at the cap", rollout(core.RolloutPaused, "1.3.0"), rider, "M1", "HM-1", rev("1.2.0"), want{"UP_TO_DATE", ""}},
		{"paused: an installing target capped too", rollout(core.RolloutPaused, "1.3.0"), owner, "M2", "HM-1", rev("1.2.0"), want{"UP_TO_DATE", ""}},
		{"paused: a pending target capped", rollout(core.RolloutPaused, "1.3.0"), owner, "M3", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.2.0"}},
		{"capped on a deprecated revision: an older candidate", rollout(core.RolloutRunning, "1.2.0"), owner, "M3", "HM-1", rev("1.0.0"),
			want{"MANDATORY_UPDATE", "1.1.0"}},
		{"capped below everything", rollout(core.RolloutRunning, "1.1.0"), owner, "M3", "HM-1", rev("1.0.0"), want{"UP_TO_DATE", ""}},
		{"another model's rollout", rollout(core.RolloutRunning, "1.3.0"), owner, "M1", "HM-2", nil, want{"UPDATE_AVAILABLE", "1.0.0"}},
		{"another account's rollout", rollout(core.RolloutRunning, "1.3.0"), stranger, "M1", "HM-1", rev("1.1.0"), want{"MANDATORY_UPDATE", "1.4.0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rollouts := &fakeRolloutFor{rollout: c.rollout, targets: targets}
			fw := core.NewFirmwareService(store, nil, 0, rollouts, slog.New(slog.NewTextHandler(io.Discard, nil)))
			fw.SetClock(func() time.Time { return now })
			got, err := fw.CheckMountUpdate(ctx, c.p, c.model, c.current, core.Mount{UID: c.uid, ModelNumber: "HM-1"})
			if err != nil {
				t.Fatal(err)
			}
			version := ""
			if got.Version != nil {
				version = got.Version.SoftwareRevision
			}
			if (want{got.Code, version}) != c.want {
				t.Errorf("got %s %s, want %s %s", got.Code, version, c.want.code, c.want.version)
			}
			if len(rollouts.asked) != 1 || rollouts.asked[0] != c.p.AccountID+"/"+c.model+"/"+c.uid {
				t.Errorf("RolloutFor asked %v", rollouts.asked)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		fail := errors.New("store down")
		for _, c := range []struct {
			name    string
			model   string
			current *string
			err     error
			code    core.Code
		}{
			{"no model", "", nil, nil, core.CodeValidation},
			{"a bad revision", "HM-1", rev("one"), nil, core.CodeValidation},
			{"no firmware for the model", "HM-9", nil, nil, core.CodeFirmwareNotFound},
			{"the store fails", "HM-1", nil, fail, core.CodeInternal},
		} {
			fw := core.NewFirmwareService(store, nil, 0, &fakeRolloutFor{err: c.err}, slog.New(slog.NewTextHandler(io.Discard, nil)))
			fw.SetClock(func() time.Time { return now })
			_, err := fw.CheckMountUpdate(ctx, owner, c.model, c.current, core.Mount{UID: "M1"})
			if core.ErrorCode(err) != c.code || (c.err != nil && !errors.Is(err, c.err)) {
				t.Errorf("%s: %v, want %s", c.name, err, c.code)
			}
		}
	})
}
