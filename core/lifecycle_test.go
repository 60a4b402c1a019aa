package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestLifecycleTable walks every row of the association table of
// docs/api.md ("Mount lifecycle") through MountService, on the in-memory
// store with a fake clock: windows and expiry without a sleep.
func TestLifecycleTable(t *testing.T) {
	ctx := context.Background()
	f := newLapseFixture(t)
	a, b := f.a, f.b
	state := func(uid string) core.Mount {
		t.Helper()
		m, err := f.svc.Mount(ctx, a, uid)
		if err != nil {
			if m, err = f.svc.Mount(ctx, b, uid); err != nil {
				return core.Mount{State: core.StateInactive}
			}
		}
		return m
	}
	request := func(p core.Principal, uid string) error {
		cmds, err := f.svc.RequestAssociation(ctx, p, uid, core.MountFields{})
		if err == nil && (len(cmds) != 1 || cmds[0].Code != core.CmdAssociateOwner) {
			t.Fatalf("RequestAssociation answered %+v", cmds)
		}
		return err
	}
	confirm := func(p core.Principal, uid string) error {
		_, err := f.svc.ConfirmAssociation(ctx, p, uid)
		return err
	}
	for _, row := range []struct {
		name  string
		setup func(uid string) // brings the mount to the row's "before"
		act   func(uid string) error
		want  core.Code             // "" for success
		after core.AssociationState // as the caller of the act sees it
	}{
		{"unknown uid, POST", func(string) {}, func(uid string) error { return request(a, uid) }, "", core.StateIdle},
		{"INACTIVE, POST by another account", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, f.svc.AbandonMount(ctx, a, uid)) },
			func(uid string) error { return request(b, uid) }, "", core.StateIdle},
		{"IDLE, owner POSTs", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return request(a, uid) }, "", core.StateIdle},
		{"ASSOCIATED, owner POSTs", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, confirm(a, uid)) },
			func(uid string) error { return request(a, uid) }, "", core.StateAssociated},
		{"IDLE, another account POSTs", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return request(b, uid) },
			core.CodeMountAlreadyOwned, core.StateIdle},
		{"ASSOCIATED, another account POSTs", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, confirm(a, uid)) },
			func(uid string) error { return request(b, uid) }, core.CodeMountAlreadyOwned, core.StateAssociated},
		{"IDLE, confirm inside the window", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return confirm(a, uid) },
			"", core.StateAssociated},
		{"IDLE, confirm after the window", func(uid string) { mustOK(t, request(a, uid)); f.clock.Advance(f.window) },
			func(uid string) error { return confirm(a, uid) }, core.CodeAssociationExpired, core.StateInactive},
		{"ASSOCIATED, confirm again", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, confirm(a, uid)) },
			func(uid string) error { return confirm(a, uid) }, "", core.StateAssociated},
		{"INACTIVE, confirm", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, f.svc.AbandonMount(ctx, a, uid)) },
			func(uid string) error { return confirm(b, uid) }, core.CodeAssociationNotPending, core.StateInactive},
		{"IDLE, the window passes", func(uid string) { mustOK(t, request(a, uid)); f.clock.Advance(f.window) },
			func(string) error { _, err := f.svc.SweepLapsed(ctx); return err }, "", core.StateInactive},
		{"IDLE, abandon", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return f.svc.AbandonMount(ctx, a, uid) },
			"", core.StateInactive},
		{"ASSOCIATED, abandon", func(uid string) { mustOK(t, request(a, uid)); mustOK(t, confirm(a, uid)) },
			func(uid string) error { return f.svc.AbandonMount(ctx, a, uid) }, "", core.StateInactive},
		{"owned, delete", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return f.svc.DeleteMount(ctx, a, uid) },
			"", core.StateInactive},
		{"another account's, delete", func(uid string) { mustOK(t, request(a, uid)) }, func(uid string) error { return f.svc.DeleteMount(ctx, b, uid) },
			core.CodeMountNotFound, core.StateIdle},
	} {
		t.Run(row.name, func(t *testing.T) {
			uid := "LT-" + time.Now().Format("150405.000000000")
			row.setup(uid)
			err := row.act(uid)
			if row.want == "" && err != nil || row.want != "" && core.ErrorCode(err) != row.want {
				t.Fatalf("got %v, want %q", err, row.want)
			}
			if got := state(uid).State; got != row.after {
				t.Fatalf("after: %s, want %s", got, row.after)
			}
		})
	}
	// A lapsed association's former owner learns it expired.
	uid := "LT-late"
	mustOK(t, request(a, uid))
	f.clock.Advance(f.window)
	mustOK(t, request(b, uid))
	if f.count(core.EventAssociationExpired, uid) != 1 {
		t.Fatal("no ASSOCIATION_EXPIRED for the former owner")
	}
}

func mustOK(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
