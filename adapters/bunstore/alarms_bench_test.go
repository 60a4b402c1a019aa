package bunstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/keyring"
	"github.com/mountd/mountd/adapters/memory"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
)

type benchScheduler struct{}

func (benchScheduler) Schedule(context.Context, string, time.Time) error { return nil }
func (benchScheduler) Cancel(context.Context, string) error              { return nil }
func (benchScheduler) Run(ctx context.Context, _ func(context.Context, string)) error {
	<-ctx.Done()
	return nil
}

// BenchmarkIngestWithRules measures reports through the mount service
// (presence and rule evaluation in the report's transaction) for an
// account without rules and one with 10 (none of which fires), on each
// database: what the rules cost ingest.
func BenchmarkIngestWithRules(b *testing.B) {
	for name, newURL := range testenv.Databases(b) {
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			store := MustOpen(b, newURL(b))
			if _, err := store.Migrate(ctx); err != nil {
				b.Fatal(err)
			}
			sealer, err := keyring.NewSealer(make([]byte, 32))
			if err != nil {
				b.Fatal(err)
			}
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			mounts := core.NewMountService(core.MountDeps{Mounts: store, States: store, Commands: store, Tags: store,
				Signer: keyring.NewMountSigner(sealer), Cache: memory.NewStateCache(), Scheduler: benchScheduler{},
				Waker: memory.NewWaker(), Window: core.AssociationWindow(10 * time.Minute), Logger: logger})
			alarms := core.NewAlarmService(core.AlarmDeps{Store: store, Mounts: mounts, Waker: memory.NewWaker(), Logger: logger})
			accounts := core.NewAccountService(store, nil)
			owner := func(name string, rules int) core.Principal {
				acc, err := accounts.Create(ctx, name)
				if err != nil {
					b.Fatal(err)
				}
				p := core.Principal{AccountID: acc.AccountID, ClientID: acc.ClientID,
					Grant: core.Grant{Complete: true, Role: core.RoleOwner, MountUIDs: []string{}, Scopes: []string{}}}
				for i := range rules {
					rn, sev := fmt.Sprint("rule", i), "INFO"
					conds := []core.AlarmCondition{{Code: core.StateCPUTemperature, Op: ">", Value: strconv.Itoa(100 + i)}}
					if _, err := alarms.CreateRule(ctx, p, core.AlarmRuleInput{Name: &rn, Severity: &sev, Conditions: &conds}); err != nil {
						b.Fatal(err)
					}
				}
				return p
			}
			const perAccount = 64
			for _, rules := range []int{0, 10} {
				p := owner(fmt.Sprint("bench", rules), rules)
				for i := range perAccount {
					uid := fmt.Sprintf("R%d-%02d", rules, i)
					if _, err := mounts.RequestAssociation(ctx, p, uid, core.MountFields{}); err != nil {
						b.Fatal(err)
					}
					if _, err := mounts.ConfirmAssociation(ctx, p, uid); err != nil {
						b.Fatal(err)
					}
				}
				var seq atomic.Int64
				b.Run(fmt.Sprintf("rules=%d", rules), func(b *testing.B) {
					b.SetParallelism(4)
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							n := seq.Add(1)
							uid := fmt.Sprintf("R%d-%02d", rules, n%perAccount)
							in := []core.StateInput{{Code: "CPU_TEMPERATURE", Value: strconv.FormatInt(40+n%30, 10),
								OccurredAt: time.Now().Add(-time.Duration(n) * time.Millisecond), HasOccurredAt: true}}
							if _, err := mounts.ReportStates(ctx, p, uid, in, nil); err != nil {
								b.Error(err)
								return
							}
						}
					})
				})
			}
		})
	}
}
