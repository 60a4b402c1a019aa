package core_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

func auditCodec(b byte) *core.AuditCursors {
	var key [32]byte
	key[0] = b
	return (*core.AuditCursors)(core.NewCursorCodec(key))
}

// TestAuditRules: changes through the services record who, when (the
// service's clock), from where and what, in the account's log or, for the
// installation's changes, in none; a failed change records nothing; only
// owners read, their own account only.
func TestAuditRules(t *testing.T) {
	f := newLapseFixture(t)
	ctx := core.WithSource(context.Background(), "198.51.100.4")
	audit := core.NewAuditService(f.store, auditCodec(1))
	read := func(p core.Principal, r core.AuditRequest) []core.AuditEntry {
		t.Helper()
		page, err := audit.Audit(ctx, p, r)
		if err != nil {
			t.Fatalf("Audit: %v", err)
		}
		return page.Entries
	}
	at := f.clock.Now()
	deviceKey := "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
	if _, err := f.svc.RequestAssociation(ctx, f.a, "AU-1", core.MountFields{DevicePublicKey: &deviceKey}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	name := "Front"
	if _, err := f.svc.ConfirmAssociation(ctx, f.a, "AU-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.UpdateMount(ctx, f.a, "AU-1", core.MountUpdate{Name: &name}); err != nil {
		t.Fatal(err)
	}
	// Failed changes: another account's claim, a confirm of nothing pending.
	if _, err := f.svc.RequestAssociation(ctx, f.b, "AU-1", core.MountFields{}); core.ErrorCode(err) != core.CodeMountAlreadyOwned {
		t.Fatalf("b's claim: %v", err)
	}
	if _, err := f.svc.ConfirmAssociation(ctx, f.a, "AU-1"); err != nil { // confirming twice changes nothing
		t.Fatal(err)
	}
	person := f.a
	person.Person, person.ClientID, person.Name = true, "usr_7", "ana"
	if err := f.svc.AbandonMount(ctx, person, "AU-1"); err != nil {
		t.Fatal(err)
	}

	got := read(f.a, core.AuditRequest{})
	want := []struct {
		action core.AuditAction
		actor  core.Actor
		at     time.Time
	}{
		// A client is named by its client's name: its account's name and
		// " API client" until renamed.
		{core.AuditMountRequest, core.Actor{Type: core.ActorClient, ID: f.a.ClientID, Name: "A API client"}, at},
		{core.AuditMountConfirm, core.Actor{Type: core.ActorClient, ID: f.a.ClientID, Name: "A API client"}, at.Add(time.Second)},
		{core.AuditMountUpdate, core.Actor{Type: core.ActorClient, ID: f.a.ClientID, Name: "A API client"}, at.Add(time.Second)},
		{core.AuditMountAbandon, core.Actor{Type: core.ActorUser, ID: "usr_7", Name: "ana"}, at.Add(time.Second)},
	}
	if len(got) != len(want) {
		t.Fatalf("entries %+v, want %d", got, len(want))
	}
	for i, w := range want {
		e := got[i]
		if e.Action != w.action || e.Actor != w.actor || !e.At.Equal(w.at) || e.Target != "mount:AU-1" ||
			e.SourceAddress != "198.51.100.4" || e.AccountID != f.a.AccountID || e.ID == "" {
			t.Fatalf("entry %d = %+v, want %s by %+v at %v", i, e, w.action, w.actor, w.at)
		}
	}
	// The claim names the device key it pinned (docs/api.md, "The truth from
	// the mount").
	if got[0].Details["devicePublicKey"] != deviceKey {
		t.Fatalf("request details %v", got[0].Details)
	}
	if got[2].Details["name"] != "Front" {
		t.Fatalf("update details %v", got[2].Details)
	}
	if b := read(f.b, core.AuditRequest{}); len(b) != 0 {
		t.Fatalf("b reads a's entries: %+v", b)
	}

	// rename-client: audited as the operator's change of the account; the
	// client's next change carries the new name, earlier entries keep the
	// one they were made under.
	if _, err := f.accounts.RenameClient(core.WithActor(ctx, core.CLIActor("root")), f.a.AccountID, "  Night shift  "); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RequestAssociation(ctx, f.a, "AU-3", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	renamed := read(f.a, core.AuditRequest{})
	if n := len(renamed); n != len(got)+2 || renamed[n-2].Action != core.AuditAccountRenameClient ||
		renamed[n-2].Actor != core.CLIActor("root") || renamed[n-2].Target != "account:"+f.a.AccountID ||
		renamed[n-2].Details["name"] != "Night shift" {
		t.Fatalf("the rename's entry: %+v", renamed[n-2])
	}
	if e := renamed[len(renamed)-1]; e.Actor != (core.Actor{Type: core.ActorClient, ID: f.a.ClientID, Name: "Night shift"}) {
		t.Fatalf("the client's change after the rename is by %+v", e.Actor)
	}
	if renamed[0].Actor.Name != "A API client" {
		t.Fatalf("an earlier entry renamed: %+v", renamed[0].Actor)
	}
	for _, bad := range []string{"", "   ", strings.Repeat("n", 101), "tab\there"} {
		if _, err := f.accounts.RenameClient(ctx, f.a.AccountID, bad); core.ErrorCode(err) != core.CodeValidation {
			t.Fatalf("rename to %q: %v, want VALIDATION_FAILED", bad, err)
		}
	}
	if _, err := f.accounts.RenameClient(ctx, "acc_nobody", "X"); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("rename of an account without clients: %v", err)
	}
	got = read(f.a, core.AuditRequest{})

	// keys.rotate is the operator's and the installation's.
	if _, err := f.svc.RequestAssociation(ctx, f.a, "AU-2", core.MountFields{}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.RotateKey(core.WithActor(ctx, core.CLIActor("root")), "AU-2"); err != nil {
		t.Fatal(err)
	}
	inst, err := audit.Installation(ctx, "", core.AuditRequest{Action: ptr(string(core.AuditKeysRotate))})
	if err != nil || len(inst.Entries) != 1 || inst.Entries[0].Actor != core.CLIActor("root") || inst.Entries[0].Target != "mount:AU-2" {
		t.Fatalf("installation entries %+v, %v", inst.Entries, err)
	}
	for _, e := range read(f.a, core.AuditRequest{}) {
		if e.Action == core.AuditKeysRotate {
			t.Fatal("an installation change in the account's log")
		}
	}

	// Paging: next continues after the page; an empty page keeps after.
	one := 1
	page, err := audit.Audit(ctx, f.a, core.AuditRequest{Limit: &one})
	if err != nil || len(page.Entries) != 1 || page.Next != page.Entries[0].ID {
		t.Fatalf("first page %+v, %v", page, err)
	}
	rest, err := audit.Audit(ctx, f.a, core.AuditRequest{After: &page.Next})
	if err != nil || len(rest.Entries) != len(got) || rest.Entries[0].Action != core.AuditMountConfirm {
		t.Fatalf("rest %+v, %v", rest.Entries, err)
	}
	end, err := audit.Audit(ctx, f.a, core.AuditRequest{After: &rest.Next})
	if err != nil || len(end.Entries) != 0 || end.Next != rest.Next {
		t.Fatalf("after the end %+v, %v", end, err)
	}

	// tail=N: the last N entries, oldest first, next after the last;
	// filters apply before the count; reading on after next finds nothing.
	all := read(f.a, core.AuditRequest{})
	tail, err := audit.Audit(ctx, f.a, core.AuditRequest{Tail: ptr(2)})
	if err != nil || len(tail.Entries) != 2 || tail.Entries[0].ID != all[len(all)-2].ID || tail.Entries[1].ID != all[len(all)-1].ID ||
		tail.Next != all[len(all)-1].ID {
		t.Fatalf("tail=2: %+v, %v; want the last two of %+v", tail, err, all)
	}
	if tail, err = audit.Audit(ctx, f.a, core.AuditRequest{Tail: ptr(1), Action: ptr(string(core.AuditMountConfirm))}); err != nil ||
		len(tail.Entries) != 1 || tail.Entries[0].Action != core.AuditMountConfirm {
		t.Fatalf("tail=1 of the confirms: %+v, %v", tail, err)
	}
	if tail, err = audit.Audit(ctx, f.a, core.AuditRequest{Tail: ptr(1000)}); err != nil || len(tail.Entries) != len(all) {
		t.Fatalf("tail=1000: %d entries, %v; want %d", len(tail.Entries), err, len(all))
	}
	if tail, err = audit.Audit(ctx, f.b, core.AuditRequest{Tail: ptr(1000)}); err != nil || len(tail.Entries) != 0 {
		t.Fatalf("b's tail: %+v, %v", tail, err)
	}

	restricted := f.a
	restricted.Role = core.RoleRestricted
	if _, err := audit.Audit(ctx, restricted, core.AuditRequest{}); core.ErrorCode(err) != core.CodeForbidden {
		t.Fatalf("restricted: %v", err)
	}
}

// TestAuditRequestValidation: bad parameters are VALIDATION_FAILED naming
// the field; a cursor of another log (or installation) is not a cursor.
func TestAuditRequestValidation(t *testing.T) {
	f := newLapseFixture(t)
	audit := core.NewAuditService(f.store, auditCodec(1))
	foreign := (*core.CursorCodec)(auditCodec(2)).Encode(core.Cursor{Seq: 1})
	for _, tt := range []struct {
		name  string
		r     core.AuditRequest
		field string
	}{
		{"limit 0", core.AuditRequest{Limit: ptr(0)}, "limit"},
		{"limit 1001", core.AuditRequest{Limit: ptr(1001)}, "limit"},
		{"malformed after", core.AuditRequest{After: ptr("nope")}, "after"},
		{"another installation's cursor", core.AuditRequest{After: &foreign}, "after"},
		{"unknown action", core.AuditRequest{Action: ptr("mount.explode")}, "action"},
		{"empty actor", core.AuditRequest{Actor: ptr("")}, "actor"},
		{"long target", core.AuditRequest{Target: ptr(strings.Repeat("x", 201))}, "target"},
		{"control characters", core.AuditRequest{Target: ptr("mount:\x00")}, "target"},
		{"tail 0", core.AuditRequest{Tail: ptr(0)}, "tail"},
		{"tail 1001", core.AuditRequest{Tail: ptr(1001)}, "tail"},
		{"tail with limit", core.AuditRequest{Tail: ptr(3), Limit: ptr(3)}, "tail"},
		{"tail with after", core.AuditRequest{Tail: ptr(3), After: ptr((*core.CursorCodec)(auditCodec(1)).Encode(core.Cursor{Seq: 1}))}, "tail"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := audit.Audit(context.Background(), f.a, tt.r)
			var ce *core.Error
			if core.ErrorCode(err) != core.CodeValidation || !errors.As(err, &ce) || len(ce.Fields) != 1 || ce.Fields[0].Field != tt.field {
				t.Fatalf("err %v, want VALIDATION_FAILED on %s", err, tt.field)
			}
		})
	}
}

// TestAuditNeverHoldsSecrets: the changes that make a secret (an account,
// a webhook and its rotation, a user's password) record none of it.
func TestAuditNeverHoldsSecrets(t *testing.T) {
	ctx := core.WithActor(context.Background(), core.CLIActor("ops"))
	f := newLapseFixture(t)
	created, err := f.accounts.Create(ctx, "Secret Fleet")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := f.accounts.RotateSecret(ctx, created.AccountID)
	if err != nil {
		t.Fatal(err)
	}
	users := core.NewUserService(f.store, nil)
	const password = "correct horse battery staple"
	if _, err := users.Create(ctx, core.NewUser{AccountID: created.AccountID, Username: "ana", Role: core.RoleOwner, Password: password}); err != nil {
		t.Fatal(err)
	}
	if err := users.SetPassword(ctx, "ana", password+"!"); err != nil {
		t.Fatal(err)
	}
	if err := users.SetPassword(ctx, "nobody", password); core.ErrorCode(err) != core.CodeNotFound {
		t.Fatalf("unknown user: %v", err)
	}
	audit := core.NewAuditService(f.store, auditCodec(1))
	var all []core.AuditEntry
	for _, account := range []string{"", created.AccountID} {
		page, err := audit.Installation(ctx, account, core.AuditRequest{})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Entries...)
	}
	actions := map[core.AuditAction]int{}
	for _, e := range all {
		actions[e.Action]++
		b, _ := json.Marshal(e.Details)
		for _, secret := range []string{created.ClientSecret, rotated.ClientSecret, password} {
			if strings.Contains(string(b), secret) {
				t.Fatalf("%s details %s hold a secret", e.Action, b)
			}
		}
		fixture := e.Action == core.AuditAccountCreate && e.Target != "account:"+created.AccountID
		if !fixture && e.Actor != core.CLIActor("ops") {
			t.Fatalf("actor %+v", e.Actor)
		}
	}
	// Two accounts of the fixture and this one; one rotation; one user
	// created and one password set (the unknown user's records nothing).
	if actions[core.AuditAccountCreate] != 3 || actions[core.AuditAccountRotateSecret] != 1 ||
		actions[core.AuditUserCreate] != 1 || actions[core.AuditUserSetPassword] != 1 {
		t.Fatalf("actions %v", actions)
	}
}
