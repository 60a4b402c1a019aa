package core_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// truthFixture is a MountService on the in-memory store with a clock moved
// by hand, an owner, a rider of mount M1 and a device key pair.
type truthFixture struct {
	svc       *core.MountService
	store     *memory.Store
	clock     *fakeClock
	owner     core.Principal
	other     core.Principal
	rider     core.Principal
	device    ed25519.PrivateKey
	deviceHex string
	meter     *outcomeMeter
}

// outcomeMeter counts outcomes as the metrics adapter would.
type outcomeMeter struct {
	*memory.Waker
	outcomes map[string]int
}

func (m *outcomeMeter) CommandOutcome(code core.CommandCode, status core.CommandStatus) {
	m.outcomes[string(code)+"/"+string(status)]++
}

func newTruthFixture(t *testing.T, ttl, grace time.Duration) *truthFixture {
	t.Helper()
	ctx := context.Background()
	store := memory.NewStore()
	sealer, err := keyring.NewSealer(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	meter := &outcomeMeter{Waker: memory.NewWaker(), outcomes: map[string]int{}}
	svc := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
		Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: downScheduler{},
		Waker: meter, Window: core.AssociationWindow(10 * time.Minute), CommandTTL: core.CommandTTL(ttl),
		ReceiptGrace: core.ReceiptGrace(grace), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	clock := &fakeClock{now: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	svc.SetClock(clock.Now)
	accounts := core.NewAccountService(store, nil)
	owner := func(name string) core.Principal {
		acc, err := accounts.Create(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
			Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
	}
	f := &truthFixture{svc: svc, store: store, clock: clock, owner: owner("A"), other: owner("B"), meter: meter}
	f.rider = core.Principal{AccountID: f.owner.AccountID, ClientID: "rider",
		Grant: core.Grant{Complete: true, Role: core.RoleRestricted, MountUIDs: []string{"M1", "M2"}, Scopes: []string{}}}
	pub, priv, err := ed25519.GenerateKey(strings.NewReader(strings.Repeat("device key seed!", 4)))
	if err != nil {
		t.Fatal(err)
	}
	f.device, f.deviceHex = priv, hex.EncodeToString(pub)
	return f
}

// associate claims and confirms uid for the owner, pinning key ("" for
// none), and returns the ASSOCIATE_OWNER command.
func (f *truthFixture) associate(t *testing.T, uid, key string) core.Command {
	t.Helper()
	ctx := context.Background()
	var fields core.MountFields
	if key != "" {
		fields.DevicePublicKey = &key
	}
	cmds, err := f.svc.RequestAssociation(ctx, f.owner, uid, fields)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.ConfirmAssociation(ctx, f.owner, uid); err != nil {
		t.Fatal(err)
	}
	return cmds[0]
}

func (f *truthFixture) query(t *testing.T, uid string) core.Command {
	t.Helper()
	cmds, err := f.svc.QueryCommand(context.Background(), f.owner, uid, "RELEASE_HELMET", nil)
	if err != nil {
		t.Fatal(err)
	}
	return cmds[0]
}

// receipt is what the mount sends for nonce, signed by the device key
// when signed.
func (f *truthFixture) receipt(uid, nonce, outcome, reason string, counter uint64, signed bool) core.ReceiptInput {
	r := core.ReceiptInput{Nonce: nonce, Outcome: outcome, Reason: reason, Counter: counter, At: f.clock.Now().Truncate(time.Millisecond)}
	if signed {
		r.Signature = protocol.Sign(f.device, protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: nonce,
			Outcome: outcome, Reason: reason, Counter: counter, At: r.At}))
	}
	return r
}

func (f *truthFixture) command(t *testing.T, uid, id string) core.Command {
	t.Helper()
	c, err := f.svc.Command(context.Background(), f.owner, uid, id)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (f *truthFixture) events(t *testing.T, types ...core.EventType) []core.Event {
	t.Helper()
	events, _, err := f.store.ReadEvents(context.Background(), core.EventQuery{Types: types, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// TestCommandLifecycleFields: a command's id is its payload's nonce; it
// starts ISSUED at its generation and expires after MOUNTD_COMMAND_TTL (at
// most the mount's own 5 minutes), ASSOCIATE_OWNER included.
func TestCommandLifecycleFields(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		want time.Duration
	}{
		{"default", 0, 5 * time.Minute},
		{"shorter", 90 * time.Second, 90 * time.Second},
		{"longer than the mount's window", time.Hour, 5 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTruthFixture(t, tc.ttl, 0)
			now := f.clock.Now()
			for _, c := range []core.Command{f.associate(t, "M1", ""), f.query(t, "M1")} {
				p, ok := protocol.ParsePayload(c.Payload)
				if !ok || c.ID != p.Nonce || len(c.ID) != 32 {
					t.Fatalf("%s: id %q, payload %q", c.Code, c.ID, c.Payload)
				}
				if c.Status != core.CommandIssued || !c.StatusAt.Equal(now) || !c.ExpiresAt.Equal(now.Add(tc.want)) ||
					c.Data["expiresAt"] != core.FormatTime(now.Add(tc.want)) {
					t.Fatalf("%s: %+v", c.Code, c)
				}
				if got := f.command(t, "M1", c.ID); got.ID != c.ID || got.Status != core.CommandIssued {
					t.Fatalf("Command(%s) = %+v", c.ID, got)
				}
			}
		})
	}
}

// TestCommandRead: one command by id for its owner; COMMAND_NOT_FOUND for
// an unknown or malformed id and for another mount's command; restricted
// tokens cannot read the audit.
func TestCommandRead(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	f.associate(t, "M1", "")
	f.associate(t, "M2", "")
	c := f.query(t, "M1")
	for _, tc := range []struct {
		name string
		p    core.Principal
		uid  string
		id   string
		want core.Code
	}{
		{"unknown id", f.owner, "M1", strings.Repeat("0", 32), core.CodeCommandNotFound},
		{"malformed id", f.owner, "M1", "cmd_x", core.CodeCommandNotFound},
		{"another mount's command", f.owner, "M2", c.ID, core.CodeCommandNotFound},
		{"another account", f.other, "M1", c.ID, core.CodeMountNotFound},
		{"a rider", f.rider, "M1", c.ID, core.CodeForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.svc.Command(ctx, tc.p, tc.uid, tc.id); core.ErrorCode(err) != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
		})
	}
}

// TestReceiptRefusals: the batch is refused whole, 404 (mount, then
// command) before 403 before 400 INVALID_SIGNATURE before the content's
// 400, and nothing moves.
func TestReceiptRefusals(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, time.Minute, time.Hour)
	f.associate(t, "M1", f.deviceHex) // with a device key
	f.associate(t, "M2", "")          // older firmware
	c1, c2 := f.query(t, "M1"), f.query(t, "M2")
	unknown := strings.Repeat("f", 32)
	exec := protocol.OutcomeExecuted
	good := f.receipt("M1", c1.ID, exec, "", 1, true)
	badSig := good
	badSig.Signature = strings.Repeat("0", 128)
	garbage := f.receipt("M1", c1.ID, "DONE", "", 2, true) // signed, but no outcome
	tooMany := make([]core.ReceiptInput, core.MaxReceiptsPerUpload+1)
	for i := range tooMany {
		tooMany[i] = good
	}
	for _, tc := range []struct {
		name  string
		p     core.Principal
		uid   string
		in    []core.ReceiptInput
		want  core.Code
		field string
	}{
		{"unknown mount", f.owner, "NOPE", []core.ReceiptInput{good}, core.CodeMountNotFound, ""},
		{"another account's mount", f.other, "M1", []core.ReceiptInput{good}, core.CodeMountNotFound, ""},
		{"outside the rider's mounts", f.rider, "M3", []core.ReceiptInput{good}, core.CodeMountNotFound, ""},
		{"a nonce not issued here, before the signature", f.owner, "M1",
			[]core.ReceiptInput{f.receipt("M1", c1.ID, exec, "", 1, false), f.receipt("M1", unknown, exec, "", 2, true)}, core.CodeCommandNotFound, ""},
		{"another mount's command", f.owner, "M1", []core.ReceiptInput{f.receipt("M1", c2.ID, exec, "", 1, true)}, core.CodeCommandNotFound, ""},
		{"a malformed nonce", f.owner, "M1", []core.ReceiptInput{f.receipt("M1", "x", exec, "", 1, true)}, core.CodeCommandNotFound, ""},
		{"unsigned for a keyed mount, before a bad signature", f.owner, "M1",
			[]core.ReceiptInput{badSig, f.receipt("M1", c1.ID, exec, "", 1, false)}, core.CodeSignatureRequired, ""},
		{"unsigned for a keyed mount, by a rider", f.rider, "M1", []core.ReceiptInput{f.receipt("M1", c1.ID, exec, "", 1, false)}, core.CodeSignatureRequired, ""},
		{"a bad signature, before the content", f.owner, "M1", []core.ReceiptInput{garbage, badSig}, core.CodeInvalidSignature, ""},
		{"signed for another uid", f.owner, "M1", []core.ReceiptInput{func() core.ReceiptInput {
			r := f.receipt("M2", c1.ID, exec, "", 1, true)
			return r
		}()}, core.CodeInvalidSignature, ""},
		{"signed, but no device key pinned", f.owner, "M2", []core.ReceiptInput{f.receipt("M2", c2.ID, exec, "", 1, true)}, core.CodeInvalidSignature, ""},
		{"an unknown outcome", f.owner, "M1", []core.ReceiptInput{garbage}, core.CodeValidation, "receipts[0].outcome"},
		{"REFUSED without a reason", f.owner, "M1", []core.ReceiptInput{f.receipt("M1", c1.ID, protocol.OutcomeRefused, "", 1, true)}, core.CodeValidation, "receipts[0].reason"},
		{"a counter past 2^63-1", f.owner, "M1", []core.ReceiptInput{good, f.receipt("M1", c1.ID, exec, "", math.MaxInt64+1, true)}, core.CodeValidation, "receipts[1].counter"},
		{"too many", f.owner, "M1", tooMany, core.CodePayloadTooLarge, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.svc.UploadReceipts(ctx, tc.p, tc.uid, tc.in)
			if core.ErrorCode(err) != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
			if tc.field != "" {
				var e *core.Error
				if !asError(err, &e) || len(e.Fields) == 0 || e.Fields[0].Field != tc.field {
					t.Fatalf("fields %+v, want %s", e, tc.field)
				}
			}
			if got := f.command(t, "M1", c1.ID); got.Status != core.CommandIssued {
				t.Fatalf("a refused batch moved the command: %+v", got)
			}
		})
	}

	// The grace: up to expiresAt + grace, not after.
	f.clock.Advance(time.Minute + time.Hour)
	if res, err := f.svc.UploadReceipts(ctx, f.owner, "M1", []core.ReceiptInput{f.receipt("M1", c1.ID, exec, "", 1, true)}); err != nil || res.Accepted != 1 {
		t.Fatalf("at the end of the grace: %+v, %v", res, err)
	}
	c3 := f.query(t, "M1")
	f.clock.Advance(time.Minute + time.Hour + time.Millisecond)
	c5 := f.query(t, "M1")
	_, err := f.svc.UploadReceipts(ctx, f.owner, "M1", []core.ReceiptInput{f.receipt("M1", c5.ID, exec, "", 3, true), f.receipt("M1", c3.ID, exec, "", 2, true)})
	var e *core.Error
	if !asError(err, &e) || e.Code != core.CodeValidation || len(e.Fields) != 1 || e.Fields[0].Field != "receipts[1]" {
		t.Fatalf("past the grace: %v", err)
	}
	if got := f.command(t, "M1", c5.ID); got.Status != core.CommandIssued {
		t.Fatalf("a refused batch moved a command: %+v", got)
	}
	// Unsigned receipts for a mount without a device key, from a rider:
	// accepted, not verified.
	c4 := f.query(t, "M2")
	if res, err := f.svc.UploadReceipts(ctx, f.rider, "M2", []core.ReceiptInput{f.receipt("M2", c4.ID, exec, "", 1, false)}); err != nil || res.Accepted != 1 {
		t.Fatalf("unsigned receipt for an unkeyed mount: %+v, %v", res, err)
	}
	if got := f.command(t, "M2", c4.ID); got.Status != core.CommandExecuted || got.Verified {
		t.Fatalf("unsigned receipt's command %+v", got)
	}
}

func asError(err error, target **core.Error) bool {
	e, ok := err.(*core.Error)
	if ok {
		*target = e
	}
	return ok
}

// TestDecidingRule: whatever the order of uploads and batches, an EXECUTED
// receipt decides; without one, the REFUSED of the lowest counter; other
// receipts are duplicates.
func TestDecidingRule(t *testing.T) {
	type rc struct {
		outcome, reason string
		counter         uint64
	}
	ex := func(n uint64) rc { return rc{protocol.OutcomeExecuted, "", n} }
	rf := func(reason string, n uint64) rc { return rc{protocol.OutcomeRefused, reason, n} }
	for _, tc := range []struct {
		name       string
		batches    [][]rc
		wantStatus core.CommandStatus
		wantReason string
		accepted   int
		duplicates int
		events     []string
	}{
		{"one EXECUTED", [][]rc{{ex(5)}}, core.CommandExecuted, "", 1, 0, []string{"COMMAND_EXECUTED"}},
		{"one REFUSED", [][]rc{{rf("bad signature", 5)}}, core.CommandRefused, "bad signature", 1, 0, []string{"COMMAND_REFUSED"}},
		{"EXECUTED twice", [][]rc{{ex(5)}, {ex(5)}}, core.CommandExecuted, "", 1, 1, []string{"COMMAND_EXECUTED"}},
		{"lower REFUSED later decides", [][]rc{{rf("b", 9)}, {rf("a", 3)}}, core.CommandRefused, "a", 2, 0,
			[]string{"COMMAND_REFUSED", "COMMAND_REFUSED"}},
		{"higher REFUSED later: duplicate", [][]rc{{rf("a", 3)}, {rf("b", 9)}}, core.CommandRefused, "a", 1, 1, []string{"COMMAND_REFUSED"}},
		{"in one batch, the lowest decides, in any order", [][]rc{{rf("b", 9), rf("a", 3), rf("c", 7)}}, core.CommandRefused, "a", 1, 2,
			[]string{"COMMAND_REFUSED"}},
		{"EXECUTED overrides REFUSED, whatever its counter", [][]rc{{rf("a", 3)}, {ex(100)}}, core.CommandExecuted, "", 2, 0,
			[]string{"COMMAND_REFUSED", "COMMAND_EXECUTED"}},
		{"EXECUTED of a lower counter overrides too", [][]rc{{rf("a", 30)}, {ex(1)}}, core.CommandExecuted, "", 2, 0,
			[]string{"COMMAND_REFUSED", "COMMAND_EXECUTED"}},
		{"REFUSED after EXECUTED: duplicate", [][]rc{{ex(9)}, {rf("a", 1)}}, core.CommandExecuted, "", 1, 1, []string{"COMMAND_EXECUTED"}},
		{"in one batch, EXECUTED wins", [][]rc{{rf("a", 1), ex(9), rf("b", 2)}}, core.CommandExecuted, "", 1, 2, []string{"COMMAND_EXECUTED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newTruthFixture(t, 0, 0)
			f.associate(t, "M1", f.deviceHex)
			c := f.query(t, "M1")
			var res core.ReceiptResult
			for _, batch := range tc.batches {
				in := make([]core.ReceiptInput, len(batch))
				for i, r := range batch {
					in[i] = f.receipt("M1", c.ID, r.outcome, r.reason, r.counter, true)
				}
				f.clock.Advance(time.Second)
				got, err := f.svc.UploadReceipts(ctx, f.rider, "M1", in)
				if err != nil {
					t.Fatal(err)
				}
				res.Accepted += got.Accepted
				res.Duplicates += got.Duplicates
			}
			got := f.command(t, "M1", c.ID)
			if got.Status != tc.wantStatus || got.Reason != tc.wantReason || !got.Verified {
				t.Fatalf("command %+v, want %s %q", got, tc.wantStatus, tc.wantReason)
			}
			if res.Accepted != tc.accepted || res.Duplicates != tc.duplicates {
				t.Fatalf("accepted %d, duplicates %d; want %d, %d", res.Accepted, res.Duplicates, tc.accepted, tc.duplicates)
			}
			var types []string
			for _, e := range f.events(t, core.EventCommandExecuted, core.EventCommandRefused, core.EventCommandUnconfirmed) {
				if e.Command == nil || e.Command.ID != c.ID || e.UID != "M1" {
					t.Fatalf("event %+v", e)
				}
				types = append(types, string(e.Type))
			}
			if fmt.Sprint(types) != fmt.Sprint(tc.events) {
				t.Fatalf("events %v, want %v", types, tc.events)
			}
			if n := f.meter.outcomes["RELEASE_HELMET/"+string(tc.wantStatus)]; n == 0 {
				t.Fatalf("outcomes counted: %v", f.meter.outcomes)
			}
		})
	}
}

// TestUnconfirmedOnce: a command past expiresAt without a receipt turns
// UNCONFIRMED once, with one event, however often the sweep runs; a late
// receipt within the grace still moves it on; ASSOCIATE_OWNER has the
// lifecycle too.
func TestUnconfirmedOnce(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 2*time.Minute, time.Hour)
	assoc := f.associate(t, "M1", f.deviceHex)
	c := f.query(t, "M1")
	if n, err := f.svc.SweepCommands(ctx); err != nil || n != 0 {
		t.Fatalf("sweep before expiry: %d, %v", n, err)
	}
	f.clock.Advance(2*time.Minute - time.Millisecond)
	if n, _ := f.svc.SweepCommands(ctx); n != 0 {
		t.Fatalf("a millisecond before expiry the sweep turned %d", n)
	}
	f.clock.Advance(time.Millisecond)
	for i := 0; i < 3; i++ {
		n, err := f.svc.SweepCommands(ctx)
		if err != nil || n != map[bool]int{true: 2, false: 0}[i == 0] {
			t.Fatalf("sweep %d turned %d, %v", i, n, err)
		}
	}
	for _, id := range []string{assoc.ID, c.ID} {
		if got := f.command(t, "M1", id); got.Status != core.CommandUnconfirmed || !got.StatusAt.Equal(f.clock.Now()) {
			t.Fatalf("after the sweep: %+v", got)
		}
	}
	if events := f.events(t, core.EventCommandUnconfirmed); len(events) != 2 || events[0].Command.Status != core.CommandUnconfirmed {
		t.Fatalf("UNCONFIRMED events: %+v", events)
	}
	// The simulated mount's receipt for its association, and a late
	// REFUSED for the other, both within the grace.
	f.clock.Advance(30 * time.Minute)
	res, err := f.svc.UploadReceipts(ctx, f.rider, "M1", []core.ReceiptInput{
		f.receipt("M1", assoc.ID, protocol.OutcomeExecuted, "", 1, true),
		f.receipt("M1", c.ID, protocol.OutcomeRefused, "stale command", 2, true)})
	if err != nil || res.Accepted != 2 {
		t.Fatalf("late receipts: %+v, %v", res, err)
	}
	if got := f.command(t, "M1", assoc.ID); got.Status != core.CommandExecuted || !got.Verified || !got.StatusAt.Equal(f.clock.Now()) {
		t.Fatalf("ASSOCIATE_OWNER after its receipt: %+v", got)
	}
	if got := f.command(t, "M1", c.ID); got.Status != core.CommandRefused || got.Reason != "stale command" {
		t.Fatalf("after the late REFUSED: %+v", got)
	}
	if n, _ := f.svc.SweepCommands(ctx); n != 0 {
		t.Fatalf("a decided command swept again: %d", n)
	}
	if f.meter.outcomes["RELEASE_HELMET/UNCONFIRMED"] != 1 || f.meter.outcomes["ASSOCIATE_OWNER/EXECUTED"] != 1 {
		t.Fatalf("outcomes %v", f.meter.outcomes)
	}
}

// report is the signed states message the device makes of entries.
func (f *truthFixture) signReport(uid string, counter uint64, revision string, in []core.StateInput) *core.ReportSignature {
	r := protocol.Report{UID: uid, Counter: counter, SoftwareRevision: revision}
	for _, e := range in {
		r.Entries = append(r.Entries, protocol.ReportEntry{Code: protocol.StateCode(e.Code), Value: e.Value, OccurredAt: e.OccurredAt})
	}
	return &core.ReportSignature{Counter: counter, SoftwareRevision: revision, Signature: protocol.Sign(f.device, protocol.BuildReportText(r))}
}

// TestSignedReports: refusals in order (404, 403, 400 INVALID_SIGNATURE,
// content), verified entries, the signed revision, and unsigned reports of
// owners and riders.
func TestSignedReports(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, 0, 0)
	f.associate(t, "M1", f.deviceHex)
	f.associate(t, "M2", "")
	now := f.clock.Now()
	entry := func(code, value string, d time.Duration) core.StateInput {
		return core.StateInput{Code: code, Value: value, OccurredAt: now.Add(-d), HasOccurredAt: true}
	}
	// Values as sent ("080" is stored as "80"): the signature covers the text sent.
	good := []core.StateInput{entry("BATTERY_LEVEL", "080", time.Minute), entry("MOUNT_LOCKED", "1", time.Minute)}
	bad := []core.StateInput{entry("BATTERY_LEVEL", "180", time.Minute)}
	forged := f.signReport("M1", 7, "2.0.0", good)
	forged.Counter = 8
	for _, tc := range []struct {
		name string
		p    core.Principal
		uid  string
		in   []core.StateInput
		sig  *core.ReportSignature
		want core.Code
	}{
		{"unknown mount, signed", f.owner, "NOPE", good, f.signReport("NOPE", 1, "", good), core.CodeMountNotFound},
		{"unknown mount, bad content", f.owner, "NOPE", bad, nil, core.CodeMountNotFound},
		{"another account's mount, bad content", f.other, "M1", bad, nil, core.CodeMountNotFound},
		{"a rider's unsigned report, bad content", f.rider, "M1", bad, nil, core.CodeSignatureRequired},
		{"a rider's unsigned report", f.rider, "M1", good, nil, core.CodeSignatureRequired},
		{"a forged counter, bad content too", f.owner, "M1", append(bad, good...), forged, core.CodeInvalidSignature},
		{"a forged counter", f.rider, "M1", good, forged, core.CodeInvalidSignature},
		{"signed for another mount", f.owner, "M1", good, f.signReport("M2", 1, "", good), core.CodeInvalidSignature},
		{"signed, no device key pinned", f.owner, "M2", good, f.signReport("M2", 1, "", good), core.CodeInvalidSignature},
		{"signed, bad content", f.owner, "M1", bad, f.signReport("M1", 1, "", bad), core.CodeValidation},
		{"signed, a counter past 2^63-1", f.rider, "M1", good, f.signReport("M1", math.MaxInt64+1, "2.0.0", good), core.CodeValidation},
		{"signed, the highest counter, bad content", f.rider, "M1", bad, f.signReport("M1", math.MaxInt64, "2.0.0", bad), core.CodeValidation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := f.svc.ReportStates(ctx, tc.p, tc.uid, tc.in, tc.sig); core.ErrorCode(err) != tc.want {
				t.Fatalf("err = %v, want %s", err, tc.want)
			}
			if _, pg, _ := f.svc.StateHistory(ctx, f.owner, "M1", core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10}); pg.TotalItems != 0 {
				t.Fatalf("a refused report stored %d entries", pg.TotalItems)
			}
		})
	}

	// Counters are bounded as everywhere (reports, receipts, rollouts):
	// 2^63-1 at most, the field named.
	_, err := f.svc.ReportStates(ctx, f.rider, "M1", good, f.signReport("M1", math.MaxInt64+1, "2.0.0", good))
	var e *core.Error
	if !asError(err, &e) || e.Code != core.CodeValidation || len(e.Fields) != 1 || e.Fields[0].Field != "counter" {
		t.Fatalf("a counter past 2^63-1: %v, want VALIDATION_FAILED on counter", err)
	}

	// The owner's unsigned report: unverified.
	if res, err := f.svc.ReportStates(ctx, f.owner, "M1", []core.StateInput{entry("BATTERY_LEVEL", "80", time.Minute)}, nil); err != nil || res.Accepted != 1 {
		t.Fatalf("owner's unsigned report: %+v, %v", res, err)
	}
	// A rider relays the signed report: the repeated entry stays
	// unverified (a duplicate), the new one is verified, the revision moves.
	res, err := f.svc.ReportStates(ctx, f.rider, "M1", good, f.signReport("M1", 7, "2.0.0", good))
	if err != nil || res.Accepted != 1 || res.Duplicates != 1 {
		t.Fatalf("signed report: %+v, %v", res, err)
	}
	history, _, err := f.svc.StateHistory(ctx, f.owner, "M1", core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
	if err != nil || len(history) != 2 {
		t.Fatal(history, err)
	}
	for _, e := range history {
		if e.Verified != (e.Code == core.StateMountLocked) {
			t.Fatalf("history %+v", history)
		}
	}
	m, err := f.svc.Mount(ctx, f.owner, "M1")
	if err != nil || m.SoftwareRevision != "2.0.0" || m.DevicePublicKey != f.deviceHex ||
		!m.Latest.Verified[core.StateMountLocked] || m.Latest.Verified[core.StateBatteryLevel] {
		t.Fatalf("mount after the signed report: %+v, %v", m, err)
	}
	// An older counter is fine (a late relay); the entries stay idempotent.
	if res, err := f.svc.ReportStates(ctx, f.rider, "M1", good, f.signReport("M1", 3, "2.0.0", good)); err != nil || res.Duplicates != 2 {
		t.Fatalf("an older counter: %+v, %v", res, err)
	}
	// A rider's unsigned report for a mount without a device key is fine.
	if res, err := f.svc.ReportStates(ctx, f.rider, "M2", good, nil); err != nil || res.Accepted != 2 {
		t.Fatalf("rider, unkeyed mount: %+v, %v", res, err)
	}
	events := f.events(t, core.EventStatesReported)
	if len(events) != 3 || events[0].States[0].Verified || !events[1].States[0].Verified || events[1].Mount.SoftwareRevision != "2.0.0" {
		t.Fatalf("report events %+v", events)
	}
}

// TestDevicePublicKeyValidation: POST /mounts refuses a key that is not 64
// lowercase hex characters, naming the field.
func TestDevicePublicKeyValidation(t *testing.T) {
	f := newTruthFixture(t, 0, 0)
	for _, key := range []string{"abc", strings.ToUpper(f.deviceHex), f.deviceHex + "00", strings.Repeat("g", 64)} {
		_, err := f.svc.RequestAssociation(context.Background(), f.owner, "M1", core.MountFields{DevicePublicKey: &key})
		var e *core.Error
		if !asError(err, &e) || e.Code != core.CodeValidation || len(e.Fields) != 1 || e.Fields[0].Field != "devicePublicKey" {
			t.Fatalf("key %q: %v", key, err)
		}
	}
}

// TestReceiptEarlierAssociation: a nonce issued to the mount in an earlier
// association of the same account (abandoned, or lapsed) is not the
// mount's in its current one: 404 COMMAND_NOT_FOUND, and nothing moves;
// the current association's commands, its ASSOCIATE_OWNER included, are
// taken, also after the owner's own POST /mounts during it (docs/api.md, "The
// truth from the mount").
func TestReceiptEarlierAssociation(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, time.Minute, time.Hour)
	exec := protocol.OutcomeExecuted
	upload := func(uid string, c core.Command) error {
		_, err := f.svc.UploadReceipts(ctx, f.owner, uid, []core.ReceiptInput{f.receipt(uid, c.ID, exec, "", 1, false)})
		return err
	}
	oldAssoc := f.associate(t, "M1", "")
	old := f.query(t, "M1")
	f.clock.Advance(time.Second)
	if err := f.svc.AbandonMount(ctx, f.owner, "M1"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	assoc := f.associate(t, "M1", "")
	for _, c := range []core.Command{old, oldAssoc} {
		if err := upload("M1", c); core.ErrorCode(err) != core.CodeCommandNotFound {
			t.Fatalf("receipt for %s of the abandoned association: %v, want COMMAND_NOT_FOUND", c.Code, err)
		}
		if got := f.command(t, "M1", c.ID); got.Status != core.CommandIssued {
			t.Fatalf("a refused receipt moved the earlier association's command: %+v", got)
		}
	}
	// The owner's POST /mounts during the association keeps it.
	f.clock.Advance(time.Second)
	again, err := f.svc.RequestAssociation(ctx, f.owner, "M1", core.MountFields{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []core.Command{assoc, again[0], f.query(t, "M1")} {
		if err := upload("M1", c); err != nil {
			t.Fatalf("receipt for %s of the current association: %v", c.Code, err)
		}
	}

	// A lapsed window ends the association too.
	cmds, err := f.svc.RequestAssociation(ctx, f.owner, "M2", core.MountFields{})
	if err != nil {
		t.Fatal(err)
	}
	lapsed := cmds[0]
	f.clock.Advance(11 * time.Minute)
	f.associate(t, "M2", "")
	if err := upload("M2", lapsed); core.ErrorCode(err) != core.CodeCommandNotFound {
		t.Fatalf("receipt for a command of the lapsed association: %v, want COMMAND_NOT_FOUND", err)
	}
}

// TestReceiptAtAhead: a receipt's at may be at most 5 minutes ahead of the
// server's clock (docs/api.md, "The truth from the mount"); further ahead is
// 400 naming receipts[i].at, and the mount is not heard.
func TestReceiptAtAhead(t *testing.T) {
	ctx := context.Background()
	f := newTruthFixture(t, time.Minute, time.Hour)
	f.associate(t, "M1", f.deviceHex)
	c1, c2 := f.query(t, "M1"), f.query(t, "M1")
	signed := func(c core.Command, ahead time.Duration) core.ReceiptInput {
		r := core.ReceiptInput{Nonce: c.ID, Outcome: protocol.OutcomeExecuted, Counter: 1, At: f.clock.Now().Add(ahead)}
		r.Signature = protocol.Sign(f.device, protocol.BuildReceiptText(protocol.Receipt{UID: "M1", Nonce: c.ID,
			Outcome: r.Outcome, Counter: 1, At: r.At}))
		return r
	}
	_, err := f.svc.UploadReceipts(ctx, f.owner, "M1", []core.ReceiptInput{signed(c1, 0), signed(c2, 5*time.Minute+time.Millisecond)})
	var e *core.Error
	if !asError(err, &e) || e.Code != core.CodeValidation || len(e.Fields) != 1 || e.Fields[0].Field != "receipts[1].at" {
		t.Fatalf("a receipt dated 5 minutes and 1 ms ahead: %v", err)
	}
	if got := f.command(t, "M1", c1.ID); got.Status != core.CommandIssued {
		t.Fatalf("a refused batch moved a command: %+v", got)
	}
	if m, err := f.svc.Mount(ctx, f.owner, "M1"); err != nil || !m.LastSeenAt.IsZero() {
		t.Fatalf("a refused batch was heard: %+v, %v", m.LastSeenAt, err)
	}
	// Exactly 5 minutes ahead is taken.
	if res, err := f.svc.UploadReceipts(ctx, f.owner, "M1", []core.ReceiptInput{signed(c2, 5*time.Minute)}); err != nil || res.Accepted != 1 {
		t.Fatalf("a receipt dated 5 minutes ahead: %+v, %v", res, err)
	}
}
