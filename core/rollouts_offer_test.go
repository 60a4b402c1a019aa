package core_test

import (
	"context"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/protocol"
)

// TestRolloutOfferStopsWithAnOutcome: an INSTALLING target is offered the
// install again only while its outcome is unknown. Once its latest
// command was EXECUTED, or the mount proved the new revision with a
// verified report, pending-commands offers nothing more (a phone passing
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
