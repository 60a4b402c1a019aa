package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// TestSubscriptionRights: a subscriber sees the events of what it may see
// and asked for, nothing else; a named mount it cannot reach is refused.
func TestSubscriptionRights(t *testing.T) {
	f := newLapseFixture(t)
	subs := core.NewSubscriptionService(f.bus, f.svc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, uid := range []string{"S1", "S2"} {
		mustOK(t, f.requestErr(ctx, uid))
	}
	rider := f.a
	rider.Grant = core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"S1"}, Scopes: []string{}}

	for _, tc := range []struct {
		name string
		p    core.Principal
		f    core.EventFilter
		want core.Code
	}{
		{"owner, a mount of another account", f.b, core.EventFilter{MountUIDs: []string{"S1"}}, core.CodeMountNotFound},
		{"rider, a mount outside its items", rider, core.EventFilter{MountUIDs: []string{"S2"}}, core.CodeMountNotFound},
		{"rider, its mount", rider, core.EventFilter{MountUIDs: []string{"S1"}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := subs.Authorize(ctx, tc.p, tc.f); tc.want == "" && err != nil || tc.want != "" && core.ErrorCode(err) != tc.want {
				t.Fatalf("Authorize = %v, want %q", err, tc.want)
			}
		})
	}
	events, err := subs.Subscribe(ctx, rider, core.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"S2", "S1"} {
		if _, err := f.svc.ReportStates(ctx, f.a, uid, []core.StateInput{{Code: "BATTERY_LEVEL", Value: "50",
			OccurredAt: f.clock.Now().Add(-time.Second), HasOccurredAt: true}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case e := <-events:
		if e.UID != "S1" || e.Type != core.EventStatesReported {
			t.Fatalf("the rider got %s of %s", e.Type, e.UID)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
}

func (f lapseFixture) requestErr(ctx context.Context, uid string) error {
	_, err := f.svc.RequestAssociation(ctx, f.a, uid, core.MountFields{})
	return err
}
