package core_test

import (
	"context"
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// grantWorld is an account with mounts M1 (ASSOCIATED, device key), M2
// (ASSOCIATED, no device key), M3 (IDLE), the principals that use them and
// a grant service on a fake clock.
type grantWorld struct {
	grants                             *core.GrantService
	mounts                             *core.MountService
	store                              *memory.Store
	clock                              *fakeClock
	owner, rider, maintainer, stranger core.Principal
}

func newGrantWorld(t *testing.T) grantWorld {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	signer := keyring.NewMountSigner(sealer)
	grants := core.NewGrantService(core.GrantDeps{Grants: store, Mounts: store, Signer: signer})
	mounts := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store, Grants: grants,
		Signer: signer, Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: &wakeLog{}, Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(time.Minute),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Jobs: store, Filters: fakeFilters{}, Rollouts: store, Firmware: store})
	clock := &fakeClock{now: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	mounts.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	acc, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	other, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	scope := func(role core.Role, uids ...string) core.Grant {
		return core.Grant{Complete: true, Role: role, MountUIDs: append([]string{}, uids...), Scopes: []string{}}
	}
	w := grantWorld{store: store, clock: clock, mounts: mounts,
		owner:      core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID, TokenID: "t-owner", Grant: scope(core.RoleOwner)},
		rider:      core.Principal{AccountID: acc.AccountID, ClientID: "rider", TokenID: "t-rider", Grant: scope(core.RoleRestricted, "M1")},
		maintainer: core.Principal{AccountID: acc.AccountID, ClientID: "maintainer", TokenID: "t-m", Grant: scope(core.RoleRestricted)},
		stranger:   core.Principal{AccountID: other.AccountID, ClientID: other.ClientID, TokenID: "t-s", Grant: scope(core.RoleOwner)},
	}
	devicePub, _, _ := ed25519.GenerateKey(rand.Reader)
	device := hex.EncodeToString(devicePub)
	for _, m := range []struct {
		uid     string
		device  *string
		confirm bool
	}{{"M1", &device, true}, {"M2", nil, true}, {"M3", &device, false}} {
		if _, err := mounts.RequestAssociation(ctx, w.owner, m.uid, core.MountFields{DevicePublicKey: m.device}); err != nil {
			t.Fatal(err)
		}
		if m.confirm {
			if _, err := mounts.ConfirmAssociation(ctx, w.owner, m.uid); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.grants = grants
	w.grants.SetClock(clock.Now)
	return w
}

func newRiderKey(t *testing.T) string {
	t.Helper()
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(k.PublicKey().Bytes())
}

func errCode(err error) core.Code {
	var ce *core.Error
	if errors.As(err, &ce) {
		return ce.Code
	}
	return ""
}

func TestCreateGrantRules(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	now := w.clock.Now()
	at := func(d time.Duration) *time.Time { v := now.Add(d); return &v }
	key := newRiderKey(t)
	long := strings.Repeat("x", 101)
	ok := func(in core.GrantInput) core.GrantInput { return in }
	for _, tc := range []struct {
		name  string
		p     core.Principal
		uid   string
		in    core.GrantInput
		code  core.Code
		field string
	}{
		{"owner, an hour", w.owner, "M1", ok(core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}), "", ""},
		{"upper-case key", w.owner, "M1", core.GrantInput{RiderKey: strings.ToUpper(key), NotAfter: at(time.Hour)}, "", ""},
		{"rider, its mount, 12 h", w.rider, "M1", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: at(12 * time.Hour)}, "", ""},
		{"rider past MOUNTD_GRANT_MAX_TTL", w.rider, "M1", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: at(12*time.Hour + time.Second)}, core.CodeValidation, "notAfter"},
		{"rider, another mount", w.rider, "M2", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}, core.CodeMountNotFound, ""},
		{"maintainer", w.maintainer, "M1", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}, core.CodeForbidden, ""},
		{"stranger", w.stranger, "M1", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}, core.CodeMountNotFound, ""},
		{"no device key", w.owner, "M2", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}, core.CodeDeviceKeyRequired, ""},
		{"not associated", w.owner, "M3", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour)}, core.CodeMountNotAssociated, ""},
		{"bad key", w.owner, "M1", core.GrantInput{RiderKey: "04abc", NotAfter: at(time.Hour)}, core.CodeValidation, "riderKey"},
		{"a point off the curve", w.owner, "M1", core.GrantInput{RiderKey: "04" + strings.Repeat("11", 64), NotAfter: at(time.Hour)}, core.CodeValidation, "riderKey"},
		{"other rights", w.owner, "M1", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour), Rights: &[]string{"UNLOCK"}}, core.CodeValidation, "rights"},
		{"no notAfter", w.owner, "M1", core.GrantInput{RiderKey: key}, core.CodeValidation, "notAfter"},
		{"notAfter past", w.owner, "M1", core.GrantInput{RiderKey: key, NotAfter: at(-time.Second)}, core.CodeValidation, "notAfter"},
		{"notBefore too far back", w.owner, "M1", core.GrantInput{RiderKey: key, NotBefore: at(-6 * time.Minute), NotAfter: at(time.Hour)}, core.CodeValidation, "notBefore"},
		{"notAfter before notBefore", w.owner, "M1", core.GrantInput{RiderKey: key, NotBefore: at(2 * time.Hour), NotAfter: at(time.Hour)}, core.CodeValidation, "notAfter"},
		{"owner past 7 days", w.owner, "M1", core.GrantInput{RiderKey: key, NotAfter: at(7*24*time.Hour + time.Millisecond)}, core.CodeValidation, "notAfter"},
		{"label too long", w.owner, "M1", core.GrantInput{RiderKey: key, NotAfter: at(time.Hour), Label: &long}, core.CodeValidation, "label"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := w.grants.Create(ctx, tc.p, tc.uid, tc.in)
			if errCode(err) != tc.code {
				t.Fatalf("error %v, want %q", err, tc.code)
			}
			if tc.field != "" {
				var ce *core.Error
				if !errors.As(err, &ce) || len(ce.Fields) != 1 || ce.Fields[0].Field != tc.field {
					t.Fatalf("error %v, want field %s", err, tc.field)
				}
			}
			if tc.code != "" {
				return
			}
			if !strings.HasPrefix(g.ID, "gr_") || len(g.ID) != 27 || g.RiderKey != strings.ToLower(tc.in.RiderKey) || g.Epoch != 1 ||
				!g.NotBefore.Equal(now) || g.TokenID != tc.p.TokenID {
				t.Fatalf("grant %+v", g)
			}
			m, err := w.store.Mount(ctx, tc.uid)
			if err != nil {
				t.Fatal(err)
			}
			sig, _ := hex.DecodeString(g.Signature)
			if g.Text != g.GrantText() || !ed25519.Verify(m.Key.PublicKey, []byte(g.Text), sig) {
				t.Fatalf("the grant's signature does not verify with the association's owner key: %+v", g)
			}
		})
	}
}

func TestGrantVisibilityAndRevocation(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	later := w.clock.Now().Add(time.Hour)
	riderKey := newRiderKey(t)
	label := "Anna"
	g, err := w.grants.Create(ctx, w.owner, "M1", core.GrantInput{RiderKey: riderKey, NotAfter: &later, Label: &label})
	if err != nil {
		t.Fatal(err)
	}
	// A restricted token reads its mount's grants by rider key, without
	// labels; it must name the rider.
	if _, _, err := w.grants.List(ctx, w.rider, "M1", core.GrantFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); errCode(err) != core.CodeValidation {
		t.Fatalf("a rider's list without riderKey: %v", err)
	}
	list, page, err := w.grants.List(ctx, w.rider, "M1", core.GrantFilter{RiderKey: &riderKey}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(list) != 1 || list[0].Label != "" || page.TotalItems != 1 {
		t.Fatalf("rider's list: %+v %+v %v", list, page, err)
	}
	if got, err := w.grants.Grant(ctx, w.rider, g.ID); err != nil || got.Label != "" {
		t.Fatalf("rider's read: %+v %v", got, err)
	}
	if got, err := w.grants.Grant(ctx, w.maintainer, g.ID); err != nil || got.Label != label {
		t.Fatalf("maintainer's read: %+v %v", got, err)
	}
	if _, err := w.grants.Grant(ctx, w.stranger, g.ID); errCode(err) != core.CodeGrantNotFound {
		t.Fatalf("stranger's read: %v", err)
	}
	// Revoking is the owner's.
	for _, p := range []core.Principal{w.rider, w.maintainer} {
		if _, err := w.grants.Revoke(ctx, p, g.ID); errCode(err) != core.CodeForbidden {
			t.Fatalf("%s revoked: %v", p.ClientID, err)
		}
	}
	if _, err := w.grants.Revoke(ctx, w.stranger, g.ID); errCode(err) != core.CodeGrantNotFound {
		t.Fatalf("stranger revoked: %v", err)
	}
	w.clock.Advance(time.Minute)
	revoked, err := w.grants.Revoke(ctx, w.owner, g.ID)
	if err != nil || !revoked.RevokedAt.Equal(w.clock.Now()) {
		t.Fatalf("revoke: %+v %v", revoked, err)
	}
	w.clock.Advance(time.Minute)
	again, err := w.grants.Revoke(ctx, w.owner, g.ID)
	if err != nil || !again.RevokedAt.Equal(revoked.RevokedAt) {
		t.Fatalf("a second revoke changed revokedAt: %+v %v", again, err)
	}
	// The signed list names it, at a version the time raised.
	list2, err := w.grants.RevocationList(ctx, w.rider, "M1")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := w.store.Mount(ctx, "M1")
	sig, _ := hex.DecodeString(list2.Signature)
	wantPrefix := "revocations;M1;"
	if !strings.HasPrefix(list2.Text, wantPrefix) || !strings.HasSuffix(list2.Text, ";1;"+g.ID) || !ed25519.Verify(m.Key.PublicKey, []byte(list2.Text), sig) {
		t.Fatalf("revocation list %+v", list2)
	}
	if _, err := w.grants.RevocationList(ctx, w.stranger, "M1"); errCode(err) != core.CodeMountNotFound {
		t.Fatalf("a stranger's revocation list: %v", err)
	}
	// By rider key: none left live, so none now.
	if done, err := w.grants.RevokeRider(ctx, w.owner, riderKey); err != nil || len(done) != 0 {
		t.Fatalf("revoke rider: %+v %v", done, err)
	}
	if _, err := w.grants.RevokeRider(ctx, w.owner, "nope"); errCode(err) != core.CodeValidation {
		t.Fatalf("revoke rider with a bad key: %v", err)
	}
}

// skewedStore answers a database time off by skew.
type skewedStore struct {
	*memory.Store
	skew time.Duration
}

func (s skewedStore) DatabaseTime(ctx context.Context) (time.Time, error) {
	t, err := s.Store.DatabaseTime(ctx)
	return t.Add(s.skew), err
}

func TestTimeToken(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	nonce := strings.Repeat("ab", 16)
	sealer, _ := keyring.NewSealer(make([]byte, 32))
	for _, tc := range []struct {
		name  string
		skew  time.Duration
		p     core.Principal
		uid   string
		nonce string
		code  core.Code
	}{
		{"signed", 0, w.rider, "M1", nonce, ""},
		{"bad nonce", 0, w.owner, "M1", "xyz", core.CodeValidation},
		{"a stranger", 0, w.stranger, "M1", nonce, core.CodeMountNotFound},
		{"not associated", 0, w.owner, "M3", nonce, core.CodeMountNotAssociated},
		{"the clocks disagree", 3 * time.Second, w.owner, "M1", nonce, core.CodeUnavailable},
		{"the clocks disagree the other way", -3 * time.Second, w.owner, "M1", nonce, core.CodeUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The service's clock is the real one here: the database's is
			// compared with it.
			svc := core.NewGrantService(core.GrantDeps{Grants: skewedStore{w.store, tc.skew}, Mounts: w.store, Signer: keyring.NewMountSigner(sealer)})
			tok, err := svc.TimeToken(ctx, tc.p, tc.uid, tc.nonce)
			if errCode(err) != tc.code {
				t.Fatalf("error %v, want %q", err, tc.code)
			}
			if tc.code != "" {
				return
			}
			m, _ := w.store.Mount(ctx, "M1")
			sig, _ := hex.DecodeString(tok.Signature)
			if !strings.HasPrefix(tok.Text, "time;M1;") || !strings.HasSuffix(tok.Text, ";"+nonce) || !ed25519.Verify(m.Key.PublicKey, []byte(tok.Text), sig) {
				t.Fatalf("time token %+v", tok)
			}
		})
	}
}

func TestOfflineReceipts(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	// The world's M1 has a device key the test does not hold: give M1 one
	// it does, through a new mount claimed with it.
	devicePub, devicePriv, _ := ed25519.GenerateKey(rand.Reader)
	device := hex.EncodeToString(devicePub)
	if _, err := w.mounts.RequestAssociation(ctx, w.owner, "M9", core.MountFields{DevicePublicKey: &device}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.mounts.ConfirmAssociation(ctx, w.owner, "M9"); err != nil {
		t.Fatal(err)
	}
	later := w.clock.Now().Add(time.Hour)
	g, err := w.grants.Create(ctx, w.owner, "M9", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: &later})
	if err != nil {
		t.Fatal(err)
	}
	other, err := w.grants.Create(ctx, w.owner, "M1", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: &later})
	if err != nil {
		t.Fatal(err)
	}
	at := w.clock.Now().Add(-time.Minute)
	sign := func(r core.OfflineReceiptInput) core.OfflineReceiptInput {
		text := protocol.BuildOfflineReceiptText(protocol.OfflineReceipt{UID: "M9", GrantID: r.GrantID, Code: r.Code, Nonce: r.Nonce,
			Outcome: r.Outcome, Reason: r.Reason, Counter: r.Counter, At: r.At})
		r.Signature = hex.EncodeToString(ed25519.Sign(devicePriv, []byte(text)))
		return r
	}
	use := func(n int, grantID string) core.OfflineReceiptInput {
		return core.OfflineReceiptInput{GrantID: grantID, Code: core.RightReleaseHelmet, ReceiptInput: core.ReceiptInput{
			Nonce: fmt.Sprintf("%032x", n), Outcome: protocol.OutcomeExecuted, Counter: uint64(n), At: at}}
	}
	ahead := use(5, g.ID)
	ahead.At = w.clock.Now().Add(5*time.Minute + time.Millisecond)
	unsigned := use(6, g.ID)
	in := []core.OfflineReceiptInput{
		sign(use(1, g.ID)),
		sign(use(2, other.ID)), // another mount's grant
		sign(ahead),
		unsigned,
		{ReceiptInput: core.ReceiptInput{Nonce: "x"}, Unreadable: "not a receipt"},
		sign(use(1, g.ID)), // the same use twice in one upload
	}
	res, err := w.grants.UploadOfflineReceipts(ctx, w.rider, "M9", in, nil)
	if errCode(err) != core.CodeMountNotFound {
		t.Fatalf("a rider of M1 uploading M9's log: %v", err)
	}
	res, err = w.grants.UploadOfflineReceipts(ctx, w.owner, "M9", in, nil)
	if err != nil {
		t.Fatal(err)
	}
	var codes []core.Code
	for _, r := range res.Rejected {
		codes = append(codes, r.Code)
	}
	want := []core.Code{core.CodeGrantNotFound, core.CodeValidation, core.CodeInvalidSignature, core.CodeValidation}
	if res.Accepted != 1 || res.Duplicates != 1 || !slices.Equal(codes, want) || res.Ack == nil ||
		res.Ack.Text != "ack;M9;"+fmt.Sprintf("%032x", 1)+"+"+fmt.Sprintf("%032x", 1) {
		t.Fatalf("upload: %+v (codes %v); want 1 accepted, 1 duplicate, %v", res, codes, want)
	}
	m, _ := w.store.Mount(ctx, "M9")
	sig, _ := hex.DecodeString(res.Ack.Signature)
	if !ed25519.Verify(m.Key.PublicKey, []byte(res.Ack.Text), sig) {
		t.Fatal("the ack is not signed by the owner key")
	}
	cmds, err := w.store.CommandsByID(ctx, "M9", w.owner.AccountID, []string{fmt.Sprintf("%032x", 1)})
	if err != nil || len(cmds) != 1 || cmds[0].GrantID != g.ID || cmds[0].Status != core.CommandExecuted || cmds[0].Payload != "" || !cmds[0].Verified {
		t.Fatalf("the use as a command: %+v %v", cmds, err)
	}
	if after, _ := w.grants.Grant(ctx, w.owner, g.ID); after.Uses != 1 || !after.LastUsedAt.Equal(at) {
		t.Fatalf("the grant after its use: %+v", after)
	}
	if _, err := w.grants.UploadOfflineReceipts(ctx, w.owner, "M9", make([]core.OfflineReceiptInput, 501), nil); errCode(err) != core.CodePayloadTooLarge {
		t.Fatalf("501 receipts: %v", err)
	}

	// New hardware under the uid: receipts the old unit signed still
	// verify with the key pinned before; a key never pinned does not.
	replacement, _, _ := ed25519.GenerateKey(rand.Reader)
	newDevice := hex.EncodeToString(replacement)
	if _, err := w.mounts.RequestAssociation(ctx, w.owner, "M9", core.MountFields{DevicePublicKey: &newDevice}); err != nil {
		t.Fatal(err)
	}
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	forged := use(8, g.ID)
	forged.Signature = hex.EncodeToString(ed25519.Sign(stranger, []byte(protocol.BuildOfflineReceiptText(protocol.OfflineReceipt{UID: "M9",
		GrantID: forged.GrantID, Code: forged.Code, Nonce: forged.Nonce, Outcome: forged.Outcome, Counter: forged.Counter, At: forged.At}))))
	res, err = w.grants.UploadOfflineReceipts(ctx, w.owner, "M9", []core.OfflineReceiptInput{sign(use(7, g.ID)), forged}, nil)
	if err != nil || res.Accepted != 1 || len(res.Rejected) != 1 || res.Rejected[0].Code != core.CodeInvalidSignature {
		t.Fatalf("after new hardware: %+v %v; want the old unit's receipt accepted, the forged one INVALID_SIGNATURE", res, err)
	}
}

// TestRiderTokenAfterRevocation: a token limited to the mount issued before
// a revocation there is refused for /query and creating grants; one issued
// after, owners and maintainers are not.
func TestRiderTokenAfterRevocation(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	later := w.clock.Now().Add(time.Hour)
	g, err := w.grants.Create(ctx, w.owner, "M1", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: &later})
	if err != nil {
		t.Fatal(err)
	}
	old := w.rider
	old.IssuedAt = w.clock.Now().Add(-time.Minute)
	w.clock.Advance(time.Second)
	if _, err := w.grants.Revoke(ctx, w.owner, g.ID); err != nil {
		t.Fatal(err)
	}
	fresh := w.rider
	fresh.IssuedAt = w.clock.Now().Add(time.Second).Truncate(time.Second)
	maintainer := w.maintainer
	maintainer.IssuedAt = old.IssuedAt
	for _, tc := range []struct {
		name string
		p    core.Principal
		code core.Code
	}{
		{"a rider's token from before", old, core.CodeForbidden},
		{"a rider's token from after", fresh, ""},
		{"the owner's", w.owner, ""},
		{"a maintainer's from before", maintainer, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := w.mounts.QueryCommand(ctx, tc.p, "M1", "RELEASE_HELMET", nil)
			if errCode(err) != tc.code {
				t.Fatalf("query: %v, want %q", err, tc.code)
			}
			if tc.p.Role != core.RoleRestricted || !tc.p.LimitedToMounts() {
				return
			}
			_, err = w.grants.Create(ctx, tc.p, "M1", core.GrantInput{RiderKey: newRiderKey(t), NotAfter: &later})
			if errCode(err) != tc.code {
				t.Fatalf("create grant: %v, want %q", err, tc.code)
			}
		})
	}
}

// revokeFailsAfter is a grant store whose RevokeGrants revokes, then
// fails, as a store revoking in several transactions does when a later
// one fails.
type revokeFailsAfter struct {
	core.GrantStore
}

func (s revokeFailsAfter) RevokeGrants(ctx context.Context, accountID string, ids []string, riderKey string, now time.Time, sign core.GrantSigner) ([]*core.Event, error) {
	done, err := s.GrantStore.RevokeGrants(ctx, accountID, ids, riderKey, now, sign)
	if err != nil {
		return done, err
	}
	return done, core.Errorf(core.CodeUnavailable, "the database went away")
}

// TestRevokeRiderFailingHalfWay: the revocations a store made before it
// failed reach the event feeds; the caller gets the error.
func TestRevokeRiderFailingHalfWay(t *testing.T) {
	w := newGrantWorld(t)
	ctx := context.Background()
	later := w.clock.Now().Add(time.Hour)
	riderKey := newRiderKey(t)
	if _, err := w.grants.Create(ctx, w.owner, "M1", core.GrantInput{RiderKey: riderKey, NotAfter: &later}); err != nil {
		t.Fatal(err)
	}
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	woken := &wakeLog{}
	failing := core.NewGrantService(core.GrantDeps{Grants: revokeFailsAfter{w.store}, Mounts: w.store,
		Signer: keyring.NewMountSigner(sealer), Waker: woken, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	failing.SetClock(w.clock.Now)
	if _, err := failing.RevokeRider(ctx, w.owner, riderKey); errCode(err) != core.CodeUnavailable {
		t.Fatalf("RevokeRider: %v; want the store's error", err)
	}
	events, _, err := w.store.ReadEvents(ctx, core.EventQuery{AccountID: w.owner.AccountID, Types: []core.EventType{core.EventGrantRevoked}, Limit: 10})
	if err != nil || len(events) != 1 || !woken.has(events[0].ID) {
		t.Fatalf("GRANT_REVOKED events %+v (%v); want the one revoked, its feeds woken (%v)", events, err, woken.woken)
	}
}
