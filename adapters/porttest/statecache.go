package porttest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// RunStateCache runs the core.StateCache contract against caches made by
// newCache; each subtest gets a fresh, empty cache.
func RunStateCache(t *testing.T, newCache func(t *testing.T) core.StateCache, opts ...Options) {
	o := options(opts)
	ctx := context.Background()
	base := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	entry := func(code core.StateCode, value string, ms int) core.StateEntry {
		return core.StateEntry{Code: code, Value: value, OccurredAt: at(ms), ReceivedAt: time.Now()}
	}

	t.Run("MissBeforeFill", func(t *testing.T) {
		c := newCache(t)
		expectMiss(t, c, "m1")
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "50", 1)})
		expectMiss(t, c, "m1") // an Offer alone never makes a hit
	})

	t.Run("FillThenHit", func(t *testing.T) {
		c := newCache(t)
		in := []core.StateEntry{
			entry(core.StateBatteryLevel, "80", 10),
			entry(core.StateMountLocked, "1", 20),
			// Not in UTC: the cache returns the same instant in UTC.
			{Code: core.StateCPUTemperature, Value: "41.5", OccurredAt: at(30).In(time.FixedZone("X", 3600))},
		}
		must(t, c.Fill(ctx, "m1", in))
		expectEntries(t, c, "m1", in)
		expectMiss(t, c, "m2") // other mounts stay misses
	})

	t.Run("FillMergesWithOffer", func(t *testing.T) {
		c := newCache(t)
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "70", 200)})
		// The database read raced the offer and returned an older value.
		must(t, c.Fill(ctx, "m1", []core.StateEntry{
			entry(core.StateBatteryLevel, "90", 100), entry(core.StateMountLocked, "0", 100)}))
		expectEntries(t, c, "m1", []core.StateEntry{
			entry(core.StateBatteryLevel, "70", 200), entry(core.StateMountLocked, "0", 100)})
	})

	t.Run("OlderNeverReplacesNewer", func(t *testing.T) {
		c := newCache(t)
		must(t, c.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "60", 500)}))
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "99", 499)})
		must(t, c.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "98", 1)}))
		expectEntries(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "60", 500)})
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "10", 501)})
		expectEntries(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "10", 501)})
		// Within one batch, too, the newest wins whatever its position.
		offer(t, c, "m1", []core.StateEntry{
			entry(core.StateMountLocked, "1", 900), entry(core.StateMountLocked, "0", 800)})
		expectEntries(t, c, "m1", []core.StateEntry{
			entry(core.StateBatteryLevel, "10", 501), entry(core.StateMountLocked, "1", 900)})
	})

	t.Run("EqualInstantTie", func(t *testing.T) {
		c := newCache(t)
		// core.Newer breaks a tie by the larger value, in any order.
		offer(t, c, "a", []core.StateEntry{entry(core.StateHelmetMounted, "1", 5)})
		offer(t, c, "a", []core.StateEntry{entry(core.StateHelmetMounted, "0", 5)})
		offer(t, c, "b", []core.StateEntry{entry(core.StateHelmetMounted, "0", 5)})
		offer(t, c, "b", []core.StateEntry{entry(core.StateHelmetMounted, "1", 5)})
		must(t, c.Fill(ctx, "c", []core.StateEntry{
			entry(core.StateHelmetMounted, "1", 5), entry(core.StateHelmetMounted, "0", 5)}))
		// Bytewise, not numerically: "9" > "10".
		must(t, c.Fill(ctx, "d", []core.StateEntry{
			entry(core.StateBatteryLevel, "9", 5), entry(core.StateBatteryLevel, "10", 5)}))
		for _, uid := range []string{"a", "b"} {
			must(t, c.Fill(ctx, uid, nil))
		}
		for _, uid := range []string{"a", "b", "c"} {
			expectEntries(t, c, uid, []core.StateEntry{entry(core.StateHelmetMounted, "1", 5)})
		}
		expectEntries(t, c, "d", []core.StateEntry{entry(core.StateBatteryLevel, "9", 5)})
	})

	t.Run("ConcurrentWritersKeepMax", func(t *testing.T) {
		c := newCache(t)
		var all []core.StateEntry
		for _, code := range core.StateCodes {
			for i := range 60 {
				// Few distinct instants, so that ties occur as well.
				// Some verified, which outrank the others (core.Newer).
				e := entry(code, fmt.Sprint(rand.IntN(100)), i%20)
				e.Verified = rand.IntN(4) == 0
				all = append(all, e)
			}
		}
		want := core.LatestPerCode(all)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for g := range 8 {
			mine := append([]core.StateEntry(nil), all...)
			rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
			wg.Go(func() {
				for len(mine) > 0 {
					n := min(1+rand.IntN(5), len(mine))
					write := c.Fill
					if g != 0 {
						write = func(ctx context.Context, uid string, es []core.StateEntry) error {
							_, _, err := c.Offer(ctx, uid, es)
							return err
						}
					}
					if err := write(ctx, "m1", mine[:n]); err != nil {
						errs <- err
						return
					}
					mine = mine[n:]
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		expectEntries(t, c, "m1", want)
	})

	t.Run("Forget", func(t *testing.T) {
		c := newCache(t)
		must(t, c.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "50", 1)}))
		must(t, c.Fill(ctx, "m2", []core.StateEntry{entry(core.StateBatteryLevel, "40", 1)}))
		must(t, c.Forget(ctx, "m1"))
		expectMiss(t, c, "m1")
		// The marker went too: a later Offer does not revive the entry.
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "51", 2)})
		expectMiss(t, c, "m1")
		expectEntries(t, c, "m2", []core.StateEntry{entry(core.StateBatteryLevel, "40", 1)})
		must(t, c.Forget(ctx, "never-seen"))
		// A Fill after the Offer merges with what the Offer stored.
		must(t, c.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "30", 0)}))
		expectEntries(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "51", 2)})
		// After a Forget nothing is left to merge with: an older value is
		// cached again (the database, say, was corrected).
		must(t, c.Forget(ctx, "m1"))
		must(t, c.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "30", 0)}))
		expectEntries(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "30", 0)})
	})

	t.Run("Verified", func(t *testing.T) {
		c := newCache(t)
		signed := func(e core.StateEntry) core.StateEntry { e.Verified = true; return e }
		must(t, c.Fill(ctx, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "50", 10)), entry(core.StateMountLocked, "1", 10)}))
		expectEntries(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "50", 10)), entry(core.StateMountLocked, "1", 10)})
		// A verified entry outranks an unverified one whatever their
		// instants (docs/api.md, "The truth from the mount"): an unsigned
		// entry dated ahead changes nothing, a signed one older than the
		// unsigned latest replaces it.
		offer(t, c, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "49", 290_000), signed(entry(core.StateMountLocked, "0", 9))})
		expectEntries(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "50", 10)), signed(entry(core.StateMountLocked, "0", 9))})
		// Between two verified entries the later wins, in any order.
		offer(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "60", 9))})
		expectEntries(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "50", 10)), signed(entry(core.StateMountLocked, "0", 9))})
		offer(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "40", 12)), entry(core.StateMountLocked, "1", 500_000)})
		expectEntries(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "40", 12)), signed(entry(core.StateMountLocked, "0", 9))})
		// A code with no verified entry keeps the latest unverified one; a
		// batch holding both kinds keeps its verified entry.
		offer(t, c, "m1", []core.StateEntry{entry(core.StateHelmetMounted, "1", 5), entry(core.StateHelmetMounted, "0", 6)})
		expectEntries(t, c, "m1", []core.StateEntry{signed(entry(core.StateBatteryLevel, "40", 12)), signed(entry(core.StateMountLocked, "0", 9)),
			entry(core.StateHelmetMounted, "0", 6)})
		must(t, c.Fill(ctx, "m2", []core.StateEntry{entry(core.StateHelmetMounted, "1", 7), signed(entry(core.StateHelmetMounted, "0", 1))}))
		expectEntries(t, c, "m2", []core.StateEntry{signed(entry(core.StateHelmetMounted, "0", 1))})
	})

	t.Run("EmptyFillIsHit", func(t *testing.T) {
		c := newCache(t)
		must(t, c.Fill(ctx, "m1", nil))
		expectEntries(t, c, "m1", nil)
		offer(t, c, "m1", []core.StateEntry{entry(core.StateMountLocked, "1", 3)})
		expectEntries(t, c, "m1", []core.StateEntry{entry(core.StateMountLocked, "1", 3)})
	})

	t.Run("SharedInstances", func(t *testing.T) {
		if !o.Shared {
			t.Skip("instances of this adapter do not share a backend")
		}
		a, b := newCache(t), newCache(t)
		must(t, a.Fill(ctx, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "50", 10)}))
		expectEntries(t, b, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "50", 10)})
		offer(t, b, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "49", 11)})
		offer(t, a, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "70", 9)})
		expectEntries(t, a, "m1", []core.StateEntry{entry(core.StateBatteryLevel, "49", 11)})
		must(t, b.Forget(ctx, "m1"))
		expectMiss(t, a, "m1")
	})
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// offer calls Offer and checks that what it returns is what Latest returns
// right after.
func offer(t *testing.T, c core.StateCache, uid string, entries []core.StateEntry) {
	t.Helper()
	got, ok, err := c.Offer(context.Background(), uid, entries)
	if err != nil {
		t.Fatalf("Offer(%s): %v", uid, err)
	}
	want, wantOK, err := c.Latest(context.Background(), uid)
	if err != nil {
		t.Fatalf("Latest(%s): %v", uid, err)
	}
	if ok != wantOK || !sameEntries(got, want) {
		t.Fatalf("Offer(%s) = %s (hit %v), Latest = %s (hit %v)", uid, formatEntries(got), ok, formatEntries(want), wantOK)
	}
}

func expectMiss(t *testing.T, c core.StateCache, uid string) {
	t.Helper()
	got, ok, err := c.Latest(context.Background(), uid)
	if err != nil {
		t.Fatalf("Latest(%s): %v", uid, err)
	}
	if ok {
		t.Fatalf("Latest(%s) = hit %v, want a miss", uid, got)
	}
}

// expectEntries checks a hit holding want in any order, comparing code,
// value and instant (ReceivedAt is not kept) and requiring UTC.
func expectEntries(t *testing.T, c core.StateCache, uid string, want []core.StateEntry) {
	t.Helper()
	got, ok, err := c.Latest(context.Background(), uid)
	if err != nil {
		t.Fatalf("Latest(%s): %v", uid, err)
	}
	if !ok {
		t.Fatalf("Latest(%s) missed, want a hit", uid)
	}
	if !sameEntries(got, want) {
		t.Fatalf("Latest(%s) = %s, want %s", uid, formatEntries(got), formatEntries(want))
	}
}

// sameEntries compares in any order code, value and instant (ReceivedAt is
// not kept), requiring UTC in got.
func sameEntries(got, want []core.StateEntry) bool {
	sortEntries := func(es []core.StateEntry) []core.StateEntry {
		es = append([]core.StateEntry(nil), es...)
		sort.Slice(es, func(i, j int) bool { return es[i].Code < es[j].Code })
		return es
	}
	got, want = sortEntries(got), sortEntries(want)
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		g, w := got[i], want[i]
		same = g.Code == w.Code && g.Value == w.Value && g.OccurredAt.Equal(w.OccurredAt) &&
			g.OccurredAt.Location() == time.UTC && g.Verified == w.Verified
	}
	return same
}

func formatEntries(es []core.StateEntry) string {
	s := "["
	for i, e := range es {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%q@%s", e.Code, e.Value, e.OccurredAt.Format(time.RFC3339Nano))
		if e.Verified {
			s += "(verified)"
		}
	}
	return s + "]"
}
