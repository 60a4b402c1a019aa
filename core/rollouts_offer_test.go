package core_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// TestRolloutOfferStopsWithAnOutcome: a target is offered the install
// again only while its outcome is unknown (a fetch is none: it stays
// ELIGIBLE). Once a command was EXECUTED, or the mount proved the new
// revision with a verified report, it is INSTALLING and pending-commands
// offers nothing more (a phone passing
// by would otherwise send the whole image again at every pass until the
// health window ends); the window still decides.
func TestRolloutOfferStopsWithAnOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome func(f *rolloutFixture, uid string, c core.Command)
	}{
		{"executed", func(f *rolloutFixture, uid string, c core.Command) { f.execute(t, uid, c) }},
		{"reported on the new revision", func(f *rolloutFixture, uid string, c core.Command) { f.report(t, uid, "2.0.0", 0, "1", "1") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newRolloutFixture(t)
			f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
			r := f.create(t, core.RolloutInput{Phases: []int{100}, RequireIdle: ptr(false), MinSample: ptr(5)})
			first := f.installs(t, "M1")
			if len(first) != 1 {
				t.Fatalf("offered %+v", first)
			}
			f.clock.Advance(time.Second)
			again := f.installs(t, "M1") // no outcome yet: offered again
			if len(again) != 1 || again[0].ID == first[0].ID {
				t.Fatalf("offered again %+v", again)
			}
			tc.outcome(f, "M1", again[0])
			f.clock.Advance(time.Second)
			if got := f.installs(t, "M1"); len(got) != 0 {
				t.Fatalf("offered after the outcome: %+v", got)
			}
			if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateInstalling {
				t.Fatalf("target %+v", tg)
			}
		})
	}
}

// execute uploads the mount's signed EXECUTED receipt of c.
func (f *rolloutFixture) execute(t *testing.T, uid string, c core.Command) {
	t.Helper()
	f.counter[uid]++
	at := f.clock.Now().Truncate(time.Millisecond)
	r := core.ReceiptInput{Nonce: c.ID, Outcome: "EXECUTED", Counter: f.counter[uid], At: at}
	r.Signature = protocol.Sign(f.device, protocol.BuildReceiptText(protocol.Receipt{UID: uid, Nonce: c.ID,
		Outcome: r.Outcome, Counter: r.Counter, At: at}))
	if _, err := f.mounts.UploadReceipts(context.Background(), f.owner, uid, []core.ReceiptInput{r}); err != nil {
		t.Fatalf("UploadReceipts: %v", err)
	}
}

// TestRolloutOfferHandedOutAgain: the install's unanswered command is
// handed out again, the same one, while it is at least 2 minutes from its
// expiresAt, then a fresh one (docs/api.md, "Jobs"); the install
// keeps its place among at most 10 commands, after the oldest jobs.
func TestRolloutOfferHandedOutAgain(t *testing.T) {
	f := newRolloutFixture(t, withCommandTTL(5*time.Minute))
	ctx := context.Background()
	f.mount(t, f.owner, "M1", "MX", "1.0.0", false)
	jobs := core.NewJobService(core.JobDeps{Store: f.store, Filters: fakeFilters{}, Waker: memory.NewWaker(),
		OfflineAfter: core.OfflineAfter(core.DefaultOfflineAfter), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	jobs.SetClock(f.clock.Now)
	all := ""
	var jobIDs []string
	for range 12 {
		j, err := jobs.CreateJob(ctx, f.owner, core.JobInput{Code: "RELEASE_HELMET", Filter: &all})
		if err != nil {
			t.Fatal(err)
		}
		jobIDs = append(jobIDs, j.ID)
		f.clock.Advance(time.Millisecond)
	}
	r := f.create(t, core.RolloutInput{Phases: []int{100}, RequireIdle: ptr(false)})
	pending := func() []core.Command {
		t.Helper()
		cmds, err := f.mounts.PendingCommands(ctx, f.owner, "M1")
		if err != nil {
			t.Fatal(err)
		}
		return cmds
	}
	first := pending()
	if len(first) != core.MaxPendingCommands || first[9].Code != core.CmdInstallFirmware || first[9].RolloutID != r.ID ||
		first[0].JobID != jobIDs[0] || first[8].JobID != jobIDs[8] {
		t.Fatalf("first call: %d commands, last %+v", len(first), first[len(first)-1])
	}
	issued := countEvents(t, f.store, f.owner.AccountID, core.EventCommandIssued)
	f.clock.Advance(3 * time.Minute)
	again := pending()
	if len(again) != core.MaxPendingCommands || again[9].ID != first[9].ID || again[9].SignedToken != first[9].SignedToken ||
		again[0].ID != first[0].ID || countEvents(t, f.store, f.owner.AccountID, core.EventCommandIssued) != issued {
		t.Fatalf("again: %+v", again[9])
	}
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateEligible || tg.CommandID != first[9].ID {
		t.Fatalf("target %+v", tg)
	}
	f.clock.Advance(time.Millisecond)
	fresh := pending()
	if fresh[9].Code != core.CmdInstallFirmware || fresh[9].ID == first[9].ID {
		t.Fatalf("near expiry: %+v", fresh[9])
	}
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateEligible || tg.CommandID != fresh[9].ID {
		t.Fatalf("target %+v", tg)
	}
	// The first command's late EXECUTED receipt still counts.
	f.execute(t, "M1", first[9])
	if tg := f.targets(t, r.ID)["M1"]; tg.State != core.TargetStateInstalling || tg.CommandID != first[9].ID ||
		!tg.InstallingSince.Equal(f.clock.Now()) {
		t.Fatalf("target %+v", tg)
	}
}
