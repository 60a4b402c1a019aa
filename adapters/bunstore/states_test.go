package bunstore_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/core"
)

// InsertStates on both databases: ownership, duplicates, all or nothing,
// and the latest value per code moving forward only, ties broken by the
// value in byte order as core.Newer does.
func TestInsertStates(t *testing.T) {
	forEachDatabase(t, func(t *testing.T, _ string, store *bunstore.Store) {
		ctx := context.Background()
		accounts := core.NewAccountService(store, nil)
		owner, err := accounts.Create(ctx, "Owner")
		if err != nil {
			t.Fatal(err)
		}
		other, err := accounts.Create(ctx, "Other")
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		if _, err := store.ClaimMount(ctx, core.Claim{UID: "S1", AccountID: owner.AccountID, Now: now, Deadline: now.Add(time.Hour),
			Key: core.MountKey{ID: "k1", PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}); err != nil {
			t.Fatal(err)
		}
		base := now.Add(-time.Hour)
		at := func(d time.Duration) time.Time { return base.Add(d) }
		e := func(code core.StateCode, value string, occurred time.Time) core.StateEntry {
			return core.StateEntry{Code: code, Value: value, OccurredAt: occurred, ReceivedAt: now}
		}
		// A mount without states reads with empty computed fields.
		if m, err := store.MountWithLatest(ctx, "S1"); err != nil || m.UID != "S1" || !reflect.DeepEqual(m.Latest, core.ComputeLatest(nil)) {
			t.Fatalf("MountWithLatest before any state = %+v, %v", m, err)
		}
		if _, err := store.MountWithLatest(ctx, "nope"); core.ErrorCode(err) != core.CodeMountNotFound {
			t.Fatalf("MountWithLatest(unknown) = %v, want %s", err, core.CodeMountNotFound)
		}
		latest := func() map[core.StateCode]string {
			t.Helper()
			entries, err := store.LatestStates(ctx, "S1", owner.AccountID)
			if err != nil {
				t.Fatal(err)
			}
			// The one-statement read agrees with the latest rows.
			m, err := store.MountWithLatest(ctx, "S1")
			if err != nil || m.UID != "S1" || m.OwnerID != owner.AccountID {
				t.Fatalf("MountWithLatest = %+v, %v", m, err)
			}
			if want := core.ComputeLatest(entries); !reflect.DeepEqual(m.Latest, want) {
				t.Fatalf("MountWithLatest computed %+v, want %+v", m.Latest, want)
			}
			out := map[core.StateCode]string{}
			for _, x := range entries {
				out[x.Code] = x.Value
			}
			return out
		}

		for _, tc := range []struct {
			name       string
			uid        string
			account    string
			entries    []core.StateEntry
			wantErr    core.Code
			wantStored int
			wantLatest map[core.StateCode]string
		}{
			{"first batch", "S1", owner.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "80", at(0)), e(core.StateCPUTemperature, "10.0", at(0)), e(core.StateBatteryLevel, "79", at(time.Second))},
				"", 3, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			{"duplicates only", "S1", owner.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "80", at(0))},
				"", 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			{"late entry kept, latest unchanged", "S1", owner.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "50", at(-time.Minute))},
				"", 1, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			// "10.0" > "-5.0" in byte order ('1' > '-'), not under a
			// language collation that ignores the sign.
			{"tie on the instant: byte order decides", "S1", owner.AccountID,
				[]core.StateEntry{e(core.StateCPUTemperature, "-5.0", at(0))},
				"", 1, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			{"another account's mount", "S1", other.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "1", at(time.Hour))},
				core.CodeMountNotFound, 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			{"unknown mount", "nope", owner.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "1", at(time.Hour))},
				core.CodeMountNotFound, 0, map[core.StateCode]string{core.StateBatteryLevel: "79", core.StateCPUTemperature: "10.0"}},
			{"newer entries move the latest", "S1", owner.AccountID,
				[]core.StateEntry{e(core.StateBatteryLevel, "60", at(time.Minute)), e(core.StateMountLocked, "1", at(time.Minute))},
				"", 2, map[core.StateCode]string{core.StateBatteryLevel: "60", core.StateCPUTemperature: "10.0", core.StateMountLocked: "1"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				mount, stored, err := store.InsertStates(ctx, tc.uid, tc.account, tc.entries)
				switch {
				case tc.wantErr == "" && err != nil:
					t.Fatalf("InsertStates: %v", err)
				case tc.wantErr != "" && core.ErrorCode(err) != tc.wantErr:
					t.Fatalf("InsertStates: %v, want %s", err, tc.wantErr)
				case tc.wantErr == "" && (mount.UID != tc.uid || mount.OwnerID != tc.account || mount.State != core.StateIdle):
					t.Fatalf("InsertStates returned mount %+v, want %s owned by %s", mount, tc.uid, tc.account)
				}
				if len(stored) != tc.wantStored {
					t.Fatalf("stored %d entries %v, want %d", len(stored), stored, tc.wantStored)
				}
				if got := latest(); len(got) != len(tc.wantLatest) || func() bool {
					for k, v := range tc.wantLatest {
						if got[k] != v {
							return true
						}
					}
					return false
				}() {
					t.Fatalf("latest %v, want %v", got, tc.wantLatest)
				}
			})
		}
		history, total, err := store.ListStates(ctx, "S1", owner.AccountID, core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 100})
		if err != nil || total != 7 || len(history) != 7 {
			t.Fatalf("history: %d of %d, %v; want 7 entries", len(history), total, err)
		}
	})
}
