package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/core"
)

// exports: EachMount lists what ListMounts lists, in its order and with its
// computed fields; EachState lists the history oldest first; both stop at
// yield's error and at the context's end.
func exports(t *testing.T, store Store) {
	ctx := context.Background()
	accounts := core.NewAccountService(store, nil)
	a, err := accounts.Create(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	b, err := accounts.Create(ctx, "B")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	claim := func(uid, account string, deadline time.Time) {
		t.Helper()
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: account, Now: now.Add(-2 * time.Hour), Deadline: deadline,
			Key: core.MountKey{ID: "k-" + uid, PublicKey: make([]byte, 32), SealedPrivateKey: "sealed"}}, nil); err != nil {
			t.Fatalf("claim %s: %v", uid, err)
		}
	}
	claim("E3", a.AccountID, now.Add(time.Hour))
	claim("E1", a.AccountID, now.Add(time.Hour))
	claim("E2", a.AccountID, now.Add(time.Hour))
	claim("E-lapsed", a.AccountID, now.Add(-time.Hour))
	claim("EB", b.AccountID, now.Add(time.Hour))
	if _, ok, err := store.ConfirmAssociation(ctx, "E1", a.AccountID, now.Add(-time.Hour), nil); err != nil || !ok {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	at := func(s int) time.Time { return now.Add(-time.Hour + time.Duration(s)*time.Second) }
	history := []core.StateEntry{
		{Code: core.StateBatteryLevel, Value: "80", OccurredAt: at(0), ReceivedAt: now},
		{Code: core.StateBatteryLevel, Value: "79", OccurredAt: at(2), ReceivedAt: now},
		{Code: core.StateMountLocked, Value: "1", OccurredAt: at(1), ReceivedAt: now},
		{Code: core.StateCPUTemperature, Value: "-12.5", OccurredAt: at(1), ReceivedAt: now},
		{Code: core.StateBatteryLevel, Value: "81", OccurredAt: at(1), ReceivedAt: now},
		{Code: core.StateBatteryLevel, Value: "82", OccurredAt: at(1), ReceivedAt: now},
	}
	if _, _, err := store.InsertStates(ctx, "E1", a.AccountID, history, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.InsertStates(ctx, "E2", a.AccountID, history[:1], nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := store.InsertStates(ctx, "EB", b.AccountID, history, nil); err != nil {
		t.Fatal(err)
	}

	collectMounts := func(f core.MountFilter) ([]core.Mount, error) {
		var out []core.Mount
		err := store.EachMount(ctx, a.AccountID, f, now, func(m core.Mount) error {
			out = append(out, m)
			return nil
		})
		return out, err
	}
	for _, tc := range []struct {
		name string
		f    core.MountFilter
	}{
		{"all", core.MountFilter{}},
		{"one uid", core.MountFilter{MountUID: ptr("E2")}},
		{"uids", core.MountFilter{UIDs: []string{"E3", "E1", "EB"}}},
	} {
		t.Run("EachMount/"+tc.name, func(t *testing.T) {
			got, err := collectMounts(tc.f)
			if err != nil {
				t.Fatal(err)
			}
			want, _, err := store.ListMounts(ctx, a.AccountID, tc.f, core.Page{CurrentPage: 1, PageSize: 100}, now)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 || !reflect.DeepEqual(exportView(got), exportView(want)) {
				t.Fatalf("EachMount = %+v\nListMounts = %+v", exportView(got), exportView(want))
			}
		})
	}

	collectStates := func(uid, account string, f core.StateFilter) ([]core.StateEntry, error) {
		var out []core.StateEntry
		err := store.EachState(ctx, uid, account, f, func(e core.StateEntry) error {
			out = append(out, e)
			return nil
		})
		return out, err
	}
	oldestFirst := []core.StateEntry{history[0], history[4], history[5], history[3], history[2], history[1]}
	for _, tc := range []struct {
		name    string
		uid     string
		account string
		f       core.StateFilter
		want    []core.StateEntry
	}{
		{"all, oldest first, ties by code then value", "E1", a.AccountID, core.StateFilter{}, oldestFirst},
		{"from inclusive, to exclusive", "E1", a.AccountID, core.StateFilter{From: ptr(at(1)), To: ptr(at(2))}, oldestFirst[1:5]},
		{"another account's association", "E1", b.AccountID, core.StateFilter{}, nil},
		{"unknown mount", "nope", a.AccountID, core.StateFilter{}, nil},
	} {
		t.Run("EachState/"+tc.name, func(t *testing.T) {
			got, err := collectStates(tc.uid, tc.account, tc.f)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("EachState = %+v, %v\nwant %+v", got, err, tc.want)
			}
		})
	}

	t.Run("yield's error stops", func(t *testing.T) {
		stop := errors.New("stop")
		n := 0
		if err := store.EachState(ctx, "E1", a.AccountID, core.StateFilter{}, func(core.StateEntry) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Fatalf("EachState = %v after %d entries; want stop after 1", err, n)
		}
		n = 0
		if err := store.EachMount(ctx, a.AccountID, core.MountFilter{}, now, func(core.Mount) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
			t.Fatalf("EachMount = %v after %d mounts; want stop after 1", err, n)
		}
	})
	t.Run("an ended context stops", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		n := 0
		err := store.EachState(cctx, "E1", a.AccountID, core.StateFilter{}, func(core.StateEntry) error { n++; return nil })
		if err == nil || n > 0 {
			t.Fatalf("EachState with an ended context = %v after %d entries; want an error and none", err, n)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// exportView is what an export shows of a mount.
func exportView(ms []core.Mount) []any {
	var out []any
	for _, m := range ms {
		out = append(out, []any{m.UID, m.Name, m.State, m.AssociatedAt, m.Latest.BatteryLevel, m.Latest.CPUTemperature,
			m.Latest.MountLocked, m.Latest.HelmetMounted})
	}
	return out
}
