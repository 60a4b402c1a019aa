package core_test

import (
	"context"
	"strings"
	"testing"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// TestHandoverSignatures: POST /mounts signs its ASSOCIATE_OWNER's
// data.handover with the owner keys the mount may hold (docs/api.md,
// "Commands"): none for a new uid; the last confirmed association's,
// across accounts; then one per later association whose ASSOCIATE_OWNER
// may have reached the mount (a lapsed IDLE one, a claim while ASSOCIATED).
func TestHandoverSignatures(t *testing.T) {
	ctx := context.Background()
	f := newLapseFixture(t)
	y, x := f.a, f.b
	acc, err := f.accounts.Create(ctx, "Z")
	if err != nil {
		t.Fatal(err)
	}
	z := core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
		Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	const uid = "HO-1"
	request := func(p core.Principal) core.Command {
		t.Helper()
		cmds, err := f.svc.RequestAssociation(ctx, p, uid, core.MountFields{})
		if err != nil || len(cmds) != 1 {
			t.Fatalf("RequestAssociation: %+v, %v", cmds, err)
		}
		if cmds[0].SignedToken != "" {
			t.Fatalf("ASSOCIATE_OWNER signed: %q", cmds[0].SignedToken)
		}
		return cmds[0]
	}
	confirm := func(p core.Principal) {
		t.Helper()
		if _, err := f.svc.ConfirmAssociation(ctx, p, uid); err != nil {
			t.Fatal(err)
		}
	}
	// signedBy checks that the hand-over is one signature per key of by, in
	// that order, each by the key of an earlier ASSOCIATE_OWNER.
	signedBy := func(step string, c core.Command, by ...core.Command) {
		t.Helper()
		h, present := c.Data["handover"]
		if !present {
			t.Fatalf("%s: no data.handover in %v", step, c.Data)
		}
		if len(by) == 0 {
			if h != nil {
				t.Fatalf("%s: handover %v, want null", step, h)
			}
			return
		}
		s, _ := h.(string)
		sigs := strings.Split(s, "+")
		if len(sigs) != len(by) {
			t.Fatalf("%s: %d signatures, want %d", step, len(sigs), len(by))
		}
		for i, b := range by {
			if !protocol.Verify(b.Params["publicKey"], c.Payload, sigs[i]) {
				t.Fatalf("%s: signature %d is not by the key of %s", step, i, b.Payload)
			}
		}
	}

	y1 := request(y)
	signedBy("a uid never associated", y1)
	confirm(y)
	mustOK(t, f.svc.AbandonMount(ctx, y, uid))

	x1 := request(x)
	signedBy("another account after an abandon", x1, y1)
	f.clock.Advance(f.window) // x1 lapses IDLE: it may have reached the mount
	z1 := request(z)
	signedBy("after a lapsed IDLE association", z1, y1, x1)
	confirm(z)
	z2 := request(z)
	signedBy("while ASSOCIATED", z2, z1)
	z3 := request(z)
	signedBy("again while ASSOCIATED", z3, z1, z2)
	mustOK(t, f.svc.DeleteMount(ctx, z, uid))
	x2 := request(x)
	signedBy("after the record's deletion", x2, z1, z2, z3)

	// Stored with the command: the audit shows the same hand-over.
	cmds, _, err := f.svc.CommandAudit(ctx, x, uid, core.Page{CurrentPage: 1, PageSize: 1})
	if err != nil || len(cmds) != 1 || cmds[0].Data["handover"] != x2.Data["handover"] {
		t.Fatalf("command audit: %+v, %v", cmds, err)
	}
}
