package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
)

// TestExportSlots: an account runs at most MaxExportsPerAccount exports at
// once; the next is RATE_LIMITED with a Retry-After, another account is
// not affected, and a finished export frees its slot.
func TestExportSlots(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	now := time.Now()
	for _, c := range []struct{ uid, account string }{{"X1", "acc-a"}, {"X2", "acc-b"}} {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: c.uid, AccountID: c.account, Now: now, Deadline: now.Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	svc := core.NewExportService(store, store, nil, core.OfflineAfter(core.DefaultOfflineAfter), 0)
	owner := func(account string) core.Principal {
		return core.Principal{AccountID: account, Grant: core.Grant{Complete: true, Role: core.RoleOwner}}
	}
	a, b := owner("acc-a"), owner("acc-b")

	// Exports that hold their slot until released.
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, core.MaxExportsPerAccount)
	for range core.MaxExportsPerAccount {
		go func() {
			done <- svc.ExportMounts(ctx, a, "", func(core.Mount) error {
				started <- struct{}{}
				<-release
				return nil
			})
		}()
		<-started
	}
	err := svc.ExportStates(ctx, a, "X1", core.StateFilter{}, func(core.StateEntry) error { return nil })
	var ce *core.Error
	if core.ErrorCode(err) != core.CodeRateLimited || !errors.As(err, &ce) || ce.RetryAfter <= 0 {
		t.Fatalf("a third export = %v, want RATE_LIMITED with a Retry-After", err)
	}
	if err := svc.ExportMounts(ctx, b, "", func(core.Mount) error { return nil }); err != nil {
		t.Fatalf("another account's export = %v", err)
	}
	close(release)
	for range core.MaxExportsPerAccount {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.ExportStates(ctx, a, "X1", core.StateFilter{}, func(core.StateEntry) error { return nil }); err != nil {
		t.Fatalf("an export after the others finished = %v", err)
	}
}

// TestExportRefusals: who may export what, before any row is read.
func TestExportRefusals(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	now := time.Now()
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "X1", AccountID: "acc-a", Now: now, Deadline: now.Add(time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "LAPSED", AccountID: "acc-a", Now: now.Add(-2 * time.Hour), Deadline: now.Add(-time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	svc := core.NewExportService(store, store, nil, core.OfflineAfter(core.DefaultOfflineAfter), 0)
	owner := core.Principal{AccountID: "acc-a", Grant: core.Grant{Complete: true, Role: core.RoleOwner}}
	rider := core.Principal{AccountID: "acc-a", Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"X1"}}}
	other := core.Principal{AccountID: "acc-b", Grant: core.Grant{Complete: true, Role: core.RoleOwner}}
	states := func(p core.Principal, uid string) error {
		return svc.ExportStates(ctx, p, uid, core.StateFilter{}, func(core.StateEntry) error { return nil })
	}
	mounts := func(p core.Principal, filter string) error {
		return svc.ExportMounts(ctx, p, filter, func(core.Mount) error { return nil })
	}
	for _, tc := range []struct {
		name string
		err  error
		want core.Code
	}{
		{"a rider's fleet", mounts(rider, ""), core.CodeForbidden},
		{"a rider's own mount", states(rider, "X1"), core.CodeForbidden},
		{"another account's mount", states(other, "X1"), core.CodeMountNotFound},
		{"a lapsed association", states(owner, "LAPSED"), core.CodeMountNotFound},
		{"no mount", states(owner, ""), core.CodeValidation},
		{"a filter", mounts(owner, "batteryLevel < 20"), core.CodeValidation},
		{"the owner's fleet", mounts(owner, ""), ""},
		{"the owner's mount", states(owner, "X1"), ""},
	} {
		if tc.want == "" && tc.err != nil || tc.want != "" && core.ErrorCode(tc.err) != tc.want {
			t.Errorf("%s: %v, want %q (none: success)", tc.name, tc.err, tc.want)
		}
	}
}

// TestExportReplicaLimit: past the replica's ExportLimit an export of any
// account is refused 503 UNAVAILABLE with Retry-After (the per-account
// bound stays 429), and a finished export frees its place.
func TestExportReplicaLimit(t *testing.T) {
	ctx := context.Background()
	store := memory.NewStore()
	now := time.Now()
	for _, acc := range []string{"acc-a", "acc-b", "acc-c"} {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "M-" + acc, AccountID: acc, Now: now, Deadline: now.Add(time.Hour)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	svc := core.NewExportService(store, store, nil, core.OfflineAfter(core.DefaultOfflineAfter), 3)
	owner := func(acc string) core.Principal {
		return core.Principal{AccountID: acc, Grant: core.Grant{Complete: true, Role: core.RoleOwner}}
	}
	// Three exports whose clients read nothing: each blocks in yield.
	hold := make(chan struct{})
	var running, done sync.WaitGroup
	for _, acc := range []string{"acc-a", "acc-a", "acc-b"} {
		running.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			_ = svc.ExportMounts(ctx, owner(acc), "", func(core.Mount) error { running.Done(); <-hold; return nil })
		}()
	}
	running.Wait()
	export := func(acc string) error {
		return svc.ExportMounts(ctx, owner(acc), "", func(core.Mount) error { return nil })
	}
	err := export("acc-c")
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != core.CodeUnavailable || ce.RetryAfter <= 0 {
		t.Fatalf("an export past the replica's limit: %v", err)
	}
	if err := export("acc-a"); core.ErrorCode(err) != core.CodeRateLimited {
		t.Fatalf("a third export of one account: %v", err)
	}
	close(hold)
	done.Wait()
	if err := export("acc-c"); err != nil {
		t.Fatalf("once the exports ended: %v", err)
	}
}
