package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// GrantStore is what the rider grants' suite needs.
type GrantStore interface {
	core.AccountStore
	core.MountStore
	core.GrantStore
	core.AuditLog
}

// RunRiderGrants runs the core.GrantStore contract (CONTRACT §21): creation
// checks and bounds in the storing transaction, a rider's grant replacing
// its previous one, listing by state, revocation moving the mount's version
// (and, past the list's size, its epoch, signing live grants again), and
// the revocation list.
func RunRiderGrants(t *testing.T, newStore func(t *testing.T) GrantStore) {
	runGrantCases(t, newStore, grantCases)
}

// RunRiderGrantRevocations runs the cases of RunRiderGrants that revoke
// through RevokeGrants, by id and by rider key: for a store run again with
// another way of batching its revocations.
func RunRiderGrantRevocations(t *testing.T, newStore func(t *testing.T) GrantStore) {
	var revoking []grantCase
	for _, c := range grantCases {
		if c.revokes {
			revoking = append(revoking, c)
		}
	}
	runGrantCases(t, newStore, revoking)
}

type grantCase struct {
	name string
	fn   func(t *testing.T, store GrantStore)
	// revokes: the case revokes through RevokeGrants, across mounts.
	revokes bool
}

var grantCases = []grantCase{
	{"Create", grantCreate, false},
	{"Bounds", grantBounds, false},
	{"ListByState", grantList, false},
	{"Revoke", grantRevoke, true},
	{"RevokeRiderAcrossMounts", grantRevokeRiderAcrossMounts, true},
	{"EpochOverflow", grantEpochOverflow, false},
	{"Audited", grantAudited, true},
	{"EndWithTheAssociation", grantsEndWithAssociation, false},
	{"ResignWithANewKey", grantsResignWithNewKey, false},
	{"MountOffline", grantsMountOffline, false},
	{"PastDeviceKeys", grantsPastDeviceKeys, false},
}

func runGrantCases(t *testing.T, newStore func(t *testing.T) GrantStore, cases []grantCase) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newStore(t)) })
	}
}

var grantT0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// testSigner signs with a stand-in that shows what it signed: the epoch
// and the key.
func testSigner(_ context.Context, m core.Mount, g core.RiderGrant) (core.RiderGrant, error) {
	g.Text = g.GrantText()
	g.Signature = fmt.Sprintf("sig:%s:%d", m.Key.ID, g.Epoch)
	g.KeyID = m.Key.ID
	return g, nil
}

// riderKey is the i-th rider's key: any 130 hex characters do for the
// store.
func riderKey(i int) string { return fmt.Sprintf("04%0128x", i+1) }

// grantFleet gives accounts acc_g and acc_h; acc_g holds G1 and G2
// ASSOCIATED with a device key, G3 ASSOCIATED without one and G4 IDLE;
// acc_h holds H1 ASSOCIATED with a device key.
func grantFleet(t *testing.T, store GrantStore) {
	t.Helper()
	ctx := context.Background()
	for _, acc := range []string{"acc_g", "acc_h"} {
		if err := store.CreateAccount(ctx, core.Account{ID: acc, Name: acc, CreatedAt: grantT0},
			core.APIClient{ClientID: "cli_" + acc, AccountID: acc, SecretHash: "h", CreatedAt: grantT0}); err != nil {
			t.Fatal(err)
		}
	}
	device := testDeviceKey
	for _, m := range []struct {
		uid, acc string
		device   *string
		confirm  bool
	}{{"G1", "acc_g", &device, true}, {"G2", "acc_g", &device, true}, {"G3", "acc_g", nil, true}, {"G4", "acc_g", &device, false}, {"H1", "acc_h", &device, true}} {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: m.uid, AccountID: m.acc, Now: grantT0, Deadline: grantT0.Add(time.Hour),
			Key:    core.MountKey{ID: "k" + m.uid, PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"},
			Fields: core.MountFields{DevicePublicKey: m.device}}, nil); err != nil {
			t.Fatal(err)
		}
		if m.confirm {
			if _, _, err := store.ConfirmAssociation(ctx, m.uid, m.acc, grantT0, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func newGrant(id, uid, acc string, rider int, notAfter time.Duration) core.RiderGrant {
	return core.RiderGrant{ID: id, UID: uid, AccountID: acc, RiderKey: riderKey(rider), Rights: []string{core.RightReleaseHelmet},
		NotBefore: grantT0, NotAfter: grantT0.Add(notAfter), Label: "rider " + id, CreatedAt: grantT0, CreatedBy: "cli", TokenID: "tok"}
}

var wideLimits = core.GrantLimits{PerMount: core.MaxLiveGrantsPerMount}

func mustGrant(t *testing.T, store GrantStore, g core.RiderGrant, now time.Time) core.RiderGrant {
	t.Helper()
	created, _, err := store.CreateGrant(context.Background(), g, wideLimits, now, testSigner)
	if err != nil {
		t.Fatalf("create %s: %v", g.ID, err)
	}
	return created
}

func wantCode(t *testing.T, err error, code core.Code) {
	t.Helper()
	var ce *core.Error
	if !errors.As(err, &ce) || ce.Code != code {
		t.Fatalf("error %v, want %s", err, code)
	}
}

func grantCreate(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	g := mustGrant(t, store, newGrant("gr_1", "G1", "acc_g", 1, time.Hour), grantT0)
	if g.Epoch != 1 || g.KeyID != "kG1" || g.Signature != "sig:kG1:1" || g.Text != g.GrantText() || g.State(grantT0) != core.GrantActive {
		t.Fatalf("created %+v", g)
	}
	got, err := store.RiderGrant(ctx, "acc_g", "gr_1")
	if err != nil || !slices.Equal(got.Rights, g.Rights) || got.Text != g.Text || got.Label != g.Label || !got.NotAfter.Equal(g.NotAfter) {
		t.Fatalf("read back %+v, %v; want %+v", got, err, g)
	}
	if _, err := store.RiderGrant(ctx, "acc_h", "gr_1"); err == nil {
		t.Fatal("another account read the grant")
	} else {
		wantCode(t, err, core.CodeGrantNotFound)
	}
	for _, tc := range []struct {
		uid, acc string
		code     core.Code
	}{
		{"H1", "acc_g", core.CodeMountNotFound},      // another account's
		{"NOPE", "acc_g", core.CodeMountNotFound},    // unknown
		{"G4", "acc_g", core.CodeMountNotAssociated}, // IDLE
		{"G3", "acc_g", core.CodeDeviceKeyRequired},  // no device key
	} {
		_, _, err := store.CreateGrant(ctx, newGrant("gr_x", tc.uid, tc.acc, 2, time.Hour), wideLimits, grantT0, testSigner)
		wantCode(t, err, tc.code)
	}
	// The same rider again: the new grant takes the old one's place.
	created, replaced, err := store.CreateGrant(ctx, newGrant("gr_2", "G1", "acc_g", 1, time.Hour), wideLimits, grantT0.Add(time.Second), testSigner)
	if err != nil || len(replaced) != 1 || replaced[0].Type != core.EventGrantRevoked || replaced[0].UID != "G1" ||
		replaced[0].Grant.ID != "gr_1" || replaced[0].Grant.State(grantT0) != core.GrantRevoked || created.ID != "gr_2" {
		t.Fatalf("replace: %+v %+v %v", created, replaced, err)
	}
	r, err := store.Revocations(ctx, "G1", grantT0.Add(time.Second))
	if err != nil || !slices.Equal(r.GrantIDs, []string{"gr_1"}) || r.Version <= 1 || r.Epoch != 1 {
		t.Fatalf("revocations after a replacement: %+v, %v", r, err)
	}
}

func grantBounds(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	lim := core.GrantLimits{PerMount: 2, PerToken: 3}
	for i := range 2 {
		if _, _, err := store.CreateGrant(ctx, newGrant(fmt.Sprintf("gr_m%d", i), "G1", "acc_g", i, time.Hour), lim, grantT0, testSigner); err != nil {
			t.Fatal(err)
		}
	}
	_, _, err := store.CreateGrant(ctx, newGrant("gr_m2", "G1", "acc_g", 2, time.Hour), lim, grantT0, testSigner)
	wantCode(t, err, core.CodeConflict)
	// A replacement frees the place it takes, at any limit.
	if _, _, err := store.CreateGrant(ctx, newGrant("gr_m3", "G1", "acc_g", 0, time.Hour), lim, grantT0, testSigner); err != nil {
		t.Fatalf("a replacement at the limit: %v", err)
	}
	// The token's third live grant fits, its fourth does not; an expired
	// one no longer counts.
	if _, _, err := store.CreateGrant(ctx, newGrant("gr_t1", "G2", "acc_g", 5, time.Minute), lim, grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	_, _, err = store.CreateGrant(ctx, newGrant("gr_t2", "G2", "acc_g", 6, time.Hour), lim, grantT0, testSigner)
	wantCode(t, err, core.CodeConflict)
	if _, _, err := store.CreateGrant(ctx, newGrant("gr_t3", "G2", "acc_g", 6, time.Hour), lim, grantT0.Add(2*time.Minute), testSigner); err != nil {
		t.Fatalf("after a grant expired: %v", err)
	}
}

func grantList(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	for i, after := range []time.Duration{time.Hour, time.Minute, time.Hour} {
		mustGrant(t, store, newGrant(fmt.Sprintf("gr_%d", i), "G1", "acc_g", i, after), grantT0.Add(time.Duration(i)*time.Millisecond))
	}
	mustGrant(t, store, newGrant("gr_other", "G2", "acc_g", 0, time.Hour), grantT0)
	if _, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_2"}, "", grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	now := grantT0.Add(2 * time.Minute)
	state := func(s core.GrantState) *core.GrantState { return &s }
	key0 := riderKey(0)
	for _, tc := range []struct {
		name string
		uid  string
		f    core.GrantFilter
		want []string
	}{
		{"all of the mount, newest first", "G1", core.GrantFilter{}, []string{"gr_2", "gr_1", "gr_0"}},
		{"active", "G1", core.GrantFilter{State: state(core.GrantActive)}, []string{"gr_0"}},
		{"revoked", "G1", core.GrantFilter{State: state(core.GrantRevoked)}, []string{"gr_2"}},
		{"expired", "G1", core.GrantFilter{State: state(core.GrantExpired)}, []string{"gr_1"}},
		{"a rider's across mounts", "", core.GrantFilter{RiderKey: &key0}, []string{"gr_0", "gr_other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			grants, total, err := store.ListRiderGrants(ctx, "acc_g", tc.uid, tc.f, now, core.Page{CurrentPage: 1, PageSize: 10})
			var ids []string
			for _, g := range grants {
				ids = append(ids, g.ID)
			}
			slices.Sort(ids)
			want := slices.Sorted(slices.Values(tc.want))
			if err != nil || !slices.Equal(ids, want) || total != len(tc.want) {
				t.Fatalf("got %v (total %d), %v; want %v", ids, total, err, tc.want)
			}
			if tc.uid != "" && len(grants) > 1 && grants[0].CreatedAt.Before(grants[len(grants)-1].CreatedAt) {
				t.Fatal("not newest first")
			}
		})
	}
	if grants, _, err := store.ListRiderGrants(ctx, "acc_h", "G1", core.GrantFilter{}, now, core.Page{CurrentPage: 1, PageSize: 10}); err != nil || len(grants) != 0 {
		t.Fatalf("another account listed %d grants, %v", len(grants), err)
	}
}

func grantRevoke(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	mustGrant(t, store, newGrant("gr_a", "G1", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_b", "G2", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_c", "G2", "acc_g", 2, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_d", "G1", "acc_g", 3, time.Minute), grantT0)
	before, _ := store.Revocations(ctx, "G1", grantT0)
	if before.Version != 1 || before.Epoch != 1 || len(before.GrantIDs) != 0 {
		t.Fatalf("a new mount's revocations: %+v", before)
	}
	if last, err := store.LastRevocation(ctx, "G1"); err != nil || !last.IsZero() {
		t.Fatalf("a new mount's last revocation: %v, %v", last, err)
	}
	at := grantT0.Add(time.Second)
	revoked, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_a"}, "", at, testSigner)
	if err != nil || len(revoked) != 1 || revoked[0].Type != core.EventGrantRevoked || !revoked[0].Grant.RevokedAt.Equal(at) {
		t.Fatalf("revoke: %+v, %v", revoked, err)
	}
	r1, _ := store.Revocations(ctx, "G1", at)
	if !slices.Equal(r1.GrantIDs, []string{"gr_a"}) || r1.Version < at.UnixMilli() {
		t.Fatalf("after a revocation: %+v; want gr_a at a version of at least the time", r1)
	}
	if last, err := store.LastRevocation(ctx, "G1"); err != nil || !last.Equal(at) {
		t.Fatalf("last revocation %v, %v; want %v", last, err, at)
	}
	// Again: nothing changes, the version stays.
	if again, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_a"}, "", at.Add(time.Second), testSigner); err != nil || len(again) != 0 {
		t.Fatalf("a second revoke: %+v, %v", again, err)
	}
	if r, _ := store.Revocations(ctx, "G1", at); r.Version != r1.Version {
		t.Fatalf("a second revoke moved the version %d → %d", r1.Version, r.Version)
	}
	// Another account's grant, or none: not found.
	_, err = store.RevokeGrants(ctx, "acc_h", []string{"gr_b"}, "", at, testSigner)
	wantCode(t, err, core.CodeGrantNotFound)
	// By rider key: every live grant of the rider in the account, on each
	// mount, each mount's version once.
	revoked, err = store.RevokeGrants(ctx, "acc_g", nil, riderKey(1), at, testSigner)
	if err != nil || len(revoked) != 1 || revoked[0].Grant.ID != "gr_b" {
		t.Fatalf("revoke rider 1: %+v, %v (gr_a was revoked already)", revoked, err)
	}
	r2, _ := store.Revocations(ctx, "G2", at)
	if !slices.Equal(r2.GrantIDs, []string{"gr_b"}) {
		t.Fatalf("G2's list: %+v", r2)
	}
	// An expired revoked grant leaves the list; the version stays.
	if _, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_d"}, "", at, testSigner); err != nil {
		t.Fatal(err)
	}
	if r, _ := store.Revocations(ctx, "G1", grantT0.Add(2*time.Minute)); !slices.Equal(r.GrantIDs, []string{"gr_a"}) {
		t.Fatalf("G1's list once gr_d expired: %+v", r)
	}
}

// grantRevokeRiderAcrossMounts: a rider's live grants on every mount of
// the account are revoked, each with its own event (in mount order, each
// at its own position, the mount as it is) and audit entry; each mount's
// version rises once; the same key in another account, and the rider's
// grants already ended, are left as they are.
func grantRevokeRiderAcrossMounts(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	mustGrant(t, store, newGrant("gr_r2", "G2", "acc_g", 7, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_r1", "G1", "acc_g", 7, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_short", "G1", "acc_g", 8, time.Minute), grantT0)
	mustGrant(t, store, newGrant("gr_other", "H1", "acc_h", 7, time.Hour), grantT0)
	at := grantT0.Add(time.Second)
	before1, _ := store.Revocations(ctx, "G1", at)
	actx := core.WithAudit(ctx, core.AuditEntry{At: at, AccountID: "acc_g", Actor: core.Actor{Type: core.ActorClient, ID: "cli_acc_g"},
		Action: core.AuditGrantRevoke})
	revoked, err := store.RevokeGrants(actx, "acc_g", nil, riderKey(7), at, testSigner)
	if err != nil || len(revoked) != 2 {
		t.Fatalf("revoke rider 7: %+v, %v; want its grants on G1 and G2", revoked, err)
	}
	for i, want := range []struct{ uid, id string }{{"G1", "gr_r1"}, {"G2", "gr_r2"}} {
		e := revoked[i]
		if e.Type != core.EventGrantRevoked || e.UID != want.uid || e.Grant == nil || e.Grant.ID != want.id ||
			!e.Grant.RevokedAt.Equal(at) || e.Mount.UID != want.uid || e.AccountID != "acc_g" {
			t.Fatalf("event %d: %+v (grant %+v); want %s on %s", i, e, e.Grant, want.id, want.uid)
		}
	}
	if !revoked[0].ID.Before(revoked[1].ID) {
		t.Fatalf("positions %v, %v: want them distinct and in order", revoked[0].ID, revoked[1].ID)
	}
	for uid, id := range map[string]string{"G1": "gr_r1", "G2": "gr_r2"} {
		if r, _ := store.Revocations(ctx, uid, at); !slices.Equal(r.GrantIDs, []string{id}) || r.Version <= before1.Version {
			t.Fatalf("%s's list: %+v; want %s at a higher version", uid, r, id)
		}
	}
	for _, id := range []string{"gr_r1", "gr_r2"} {
		if g, err := store.RiderGrant(ctx, "acc_g", id); err != nil || !g.RevokedAt.Equal(at) {
			t.Fatalf("%s after the revocation: %+v, %v", id, g, err)
		}
	}
	if g, err := store.RiderGrant(ctx, "acc_h", "gr_other"); err != nil || !g.RevokedAt.IsZero() {
		t.Fatalf("another account's grant of the same key: %+v, %v; want it live", g, err)
	}
	if g, err := store.RiderGrant(ctx, "acc_g", "gr_short"); err != nil || !g.RevokedAt.IsZero() {
		t.Fatalf("another rider's grant: %+v, %v; want it live", g, err)
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); len(got) < 2 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_g", Action: string(core.AuditGrantRevoke), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range entries {
			got = append(got, e.Target+" "+fmt.Sprint(e.Details["uid"]))
		}
		slices.Sort(got)
	}
	if !slices.Equal(got, []string{"grant:gr_r1 G1", "grant:gr_r2 G2"}) {
		t.Fatalf("audit entries: %v", got)
	}
	// Again: nothing is live, nothing changes.
	if again, err := store.RevokeGrants(ctx, "acc_g", nil, riderKey(7), at.Add(time.Second), testSigner); err != nil || len(again) != 0 {
		t.Fatalf("a second revoke: %+v, %v", again, err)
	}
}

func grantEpochOverflow(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	n := core.MaxRevocations + 1
	for i := range n + 1 {
		mustGrant(t, store, newGrant(fmt.Sprintf("gr_%04d", i), "G1", "acc_g", i, time.Hour), grantT0)
	}
	at := grantT0.Add(time.Second)
	for i := range n - 1 {
		if _, err := store.RevokeGrants(ctx, "acc_g", []string{fmt.Sprintf("gr_%04d", i)}, "", at, testSigner); err != nil {
			t.Fatal(err)
		}
	}
	full, _ := store.Revocations(ctx, "G1", at)
	if len(full.GrantIDs) != core.MaxRevocations || full.Epoch != 1 {
		t.Fatalf("a full list: %d ids at epoch %d", len(full.GrantIDs), full.Epoch)
	}
	last := fmt.Sprintf("gr_%04d", n-1)
	actx := core.WithAudit(ctx, core.AuditEntry{At: at, AccountID: "acc_g", Actor: core.Actor{Type: core.ActorClient, ID: "cli_acc_g"},
		Action: core.AuditGrantRevoke, Target: "grant:" + last})
	if _, err := store.RevokeGrants(actx, "acc_g", []string{last}, "", at, testSigner); err != nil {
		t.Fatal(err)
	}
	resigned := false
	for deadline := time.Now().Add(5 * time.Second); !resigned && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		entries, err := store.ReadAudit(ctx, core.AuditQuery{AccountID: "acc_g", Action: string(core.AuditGrantResign), Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		resigned = len(entries) == 1 && entries[0].Target == "mount:G1" && fmt.Sprint(entries[0].Details["grants"]) == "1"
	}
	if !resigned {
		t.Fatal("no grant.resign entry for the epoch rise (one live grant signed again)")
	}
	r, _ := store.Revocations(ctx, "G1", at)
	if r.Epoch <= full.Epoch || r.Version <= full.Version || !slices.Equal(r.GrantIDs, []string{last}) {
		t.Fatalf("after the overflow: version %d epoch %d ids %v; want a new epoch listing %s alone", r.Version, r.Epoch, r.GrantIDs, last)
	}
	live, err := store.RiderGrant(ctx, "acc_g", fmt.Sprintf("gr_%04d", n))
	if err != nil || live.Epoch != r.Epoch || live.Signature != fmt.Sprintf("sig:kG1:%d", r.Epoch) || live.Text != live.GrantText() {
		t.Fatalf("the live grant after the overflow: %+v, %v; want it signed again at epoch %d", live, err, r.Epoch)
	}
	if g := mustGrant(t, store, newGrant("gr_new", "G1", "acc_g", 9999, time.Hour), at); g.Epoch != r.Epoch {
		t.Fatalf("a grant made after the overflow has epoch %d, want %d", g.Epoch, r.Epoch)
	}
}

// grantAudited: the entry a call carries is recorded with each grant it
// creates or revokes, the replaced one included, targeted at the grant.
func grantAudited(t *testing.T, store GrantStore) {
	grantFleet(t, store)
	entry := func(action core.AuditAction, target string) context.Context {
		return core.WithAudit(context.Background(), core.AuditEntry{At: grantT0, AccountID: "acc_g",
			Actor: core.Actor{Type: core.ActorClient, ID: "cli_acc_g"}, Action: action, Target: target})
	}
	if _, _, err := store.CreateGrant(entry(core.AuditGrantCreate, "grant:gr_1"), newGrant("gr_1", "G1", "acc_g", 1, time.Hour), wideLimits, grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.CreateGrant(entry(core.AuditGrantCreate, "grant:gr_2"), newGrant("gr_2", "G1", "acc_g", 1, time.Hour), wideLimits, grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RevokeGrants(entry(core.AuditGrantRevoke, ""), "acc_g", nil, riderKey(1), grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	want := []string{"grant.create grant:gr_1", "grant.revoke grant:gr_1", "grant.create grant:gr_2", "grant.revoke grant:gr_2"}
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	for {
		entries, err := store.ReadAudit(context.Background(), core.AuditQuery{AccountID: "acc_g", Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, e := range entries {
			got = append(got, string(e.Action)+" "+e.Target)
		}
		if slices.Equal(got, want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit %v, want %v", got, want)
	}
}

// grantsEndWithAssociation: abandoning, deleting or letting a mount's
// association lapse ends its live grants (REVOKED), outside the revocation
// list; another mount's stay.
func grantsEndWithAssociation(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	mustGrant(t, store, newGrant("gr_g1", "G1", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_g2", "G2", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_h1", "H1", "acc_h", 1, time.Hour), grantT0)
	at := grantT0.Add(time.Minute)
	if _, err := store.AbandonMount(ctx, "G1", "acc_g", at, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := store.DeleteMount(ctx, "H1", "acc_h", &core.Event{OccurredAt: at}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		acc, id string
		state   core.GrantState
	}{{"acc_g", "gr_g1", core.GrantRevoked}, {"acc_h", "gr_h1", core.GrantRevoked}, {"acc_g", "gr_g2", core.GrantActive}} {
		g, err := store.RiderGrant(ctx, tc.acc, tc.id)
		if err != nil || g.State(at) != tc.state || (tc.state == core.GrantRevoked && !g.RevokedAt.Equal(at)) {
			t.Fatalf("%s after its mount's association ended: %+v, %v; want %s", tc.id, g, err, tc.state)
		}
	}
	if r, _ := store.Revocations(ctx, "G1", at); len(r.GrantIDs) != 0 {
		t.Fatalf("an ended association's grants in the revocation list: %+v", r)
	}
	if last, err := store.LastRevocation(ctx, "G1"); err != nil || !last.IsZero() {
		t.Fatalf("an ended association counted as a revocation: %v, %v", last, err)
	}
}

// grantsResignWithNewKey: a new owner key of a continuing association (a
// claim again, a key rotation) signs the live grants again, keeping their
// ids and epoch; revoked and expired ones stay as they were.
func grantsResignWithNewKey(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	mustGrant(t, store, newGrant("gr_live", "G1", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_gone", "G1", "acc_g", 2, time.Hour), grantT0)
	if _, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_gone"}, "", grantT0, testSigner); err != nil {
		t.Fatal(err)
	}
	if _, err := store.RekeyMount(ctx, "G1", "acc_g", core.MountKey{ID: "k2", PublicKey: make([]byte, 32), SealedPrivateKey: "s2"}, grantT0); err != nil {
		t.Fatal(err)
	}
	n, err := store.ResignGrants(ctx, "G1", grantT0, testSigner)
	if err != nil || n != 1 {
		t.Fatalf("resign: %d, %v; want the one live grant", n, err)
	}
	live, _ := store.RiderGrant(ctx, "acc_g", "gr_live")
	gone, _ := store.RiderGrant(ctx, "acc_g", "gr_gone")
	if live.KeyID != "k2" || live.Signature != "sig:k2:1" || live.Epoch != 1 || gone.KeyID != "kG1" {
		t.Fatalf("after a new key: live %+v, revoked %+v", live, gone)
	}
	if n, err := store.ResignGrants(ctx, "G1", grantT0, testSigner); err != nil || n != 0 {
		t.Fatalf("again with the same key: %d, %v; want none", n, err)
	}
}

// grantsMountOffline: what a phone told of a mount's offline state is the
// mount's Offline while the association lasts, never set by another
// account, gone with the association; a mount counts as behind its
// revocations until a phone tells a version at least its own.
func grantsMountOffline(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	read := func(uid string) *core.MountOffline {
		t.Helper()
		m, err := store.MountWithLatest(ctx, uid)
		if err != nil {
			t.Fatal(err)
		}
		return m.Offline
	}
	behind := func(want int) {
		t.Helper()
		if n, err := store.MountsBehindRevocations(ctx); err != nil || n != want {
			t.Fatalf("mounts behind revocations: %d, %v; want %d", n, err, want)
		}
	}
	if read("G1") != nil {
		t.Fatal("offline state before any phone told it")
	}
	behind(0) // no revocation made yet
	mustGrant(t, store, newGrant("gr_o1", "G1", "acc_g", 1, time.Hour), grantT0)
	mustGrant(t, store, newGrant("gr_o2", "G2", "acc_g", 1, time.Hour), grantT0)
	at := grantT0.Add(time.Minute)
	if _, err := store.RevokeGrants(ctx, "acc_g", []string{"gr_o1", "gr_o2"}, "", at, testSigner); err != nil {
		t.Fatal(err)
	}
	behind(2)
	rev, err := store.Revocations(ctx, "G1", at)
	if err != nil {
		t.Fatal(err)
	}
	told := core.MountOffline{RevocationVersion: rev.Version, LogPending: 3, TimeTrusted: true, At: at}
	if err := store.SetMountOffline(ctx, "acc_h", "G1", core.MountOffline{LogPending: 9, At: at}); err != nil {
		t.Fatal(err)
	}
	if got := read("G1"); got != nil {
		t.Fatalf("another account's phone set %+v", got)
	}
	if err := store.SetMountOffline(ctx, "acc_g", "G1", told); err != nil {
		t.Fatal(err)
	}
	if got := read("G1"); got == nil || *got != told {
		t.Fatalf("offline %+v, want %+v", got, told)
	}
	behind(1) // G2 has not told
	older := core.MountOffline{RevocationVersion: rev.Version - 1, At: at.Add(time.Second)}
	if err := store.SetMountOffline(ctx, "acc_g", "G1", older); err != nil {
		t.Fatal(err)
	}
	behind(2) // the latest told is what counts
	if _, err := store.AbandonMount(ctx, "G1", "acc_g", at.Add(time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	if got := read("G1"); got != nil {
		t.Fatalf("offline state outlived its association: %+v", got)
	}
	behind(1) // G1 is no longer associated
}

// grantsPastDeviceKeys: a device key pinned in an association is kept when
// a new claim replaces it or the mount's record is deleted, so receipts
// the old hardware signed still verify; the current key is not listed
// before it is replaced.
func grantsPastDeviceKeys(t *testing.T, store GrantStore) {
	ctx := context.Background()
	grantFleet(t, store)
	keys := func(uid string, want ...string) {
		t.Helper()
		got, err := store.PastDeviceKeys(ctx, uid)
		if err != nil || !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Fatalf("past device keys of %s: %q, %v; want %q", uid, got, err, want)
		}
	}
	keys("G1")
	at := grantT0.Add(time.Minute)
	if _, err := store.AbandonMount(ctx, "G1", "acc_g", at, nil); err != nil {
		t.Fatal(err)
	}
	newKey := strings.Repeat("ab", 32)
	if _, err := store.ClaimMount(ctx, core.Claim{UID: "G1", AccountID: "acc_h", Now: at, Deadline: at.Add(time.Hour),
		Key:    core.MountKey{ID: "kG1b", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"},
		Fields: core.MountFields{DevicePublicKey: &newKey}}, nil); err != nil {
		t.Fatal(err)
	}
	keys("G1", testDeviceKey)
	if _, err := store.DeleteMount(ctx, "G1", "acc_h", &core.Event{OccurredAt: at.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err := store.PastDeviceKeys(ctx, "G1")
	if err != nil || len(got) != 2 || !slices.Contains(got, newKey) || !slices.Contains(got, testDeviceKey) {
		t.Fatalf("past device keys after the delete: %q, %v; want both", got, err)
	}
}
