package bunstore_test

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/mountd/mountd/adapters/bunstore"
	"github.com/mountd/mountd/adapters/testenv"
	"github.com/mountd/mountd/core"
	"github.com/mountd/mountd/internal/dbread"
)

// TestReadReplica runs the store on PostgreSQL with a streaming replica
// that replays each commit 250 ms late (scripts/test-services.sh): marked
// reads reach the replica and, once it replayed, answer what the primary
// answers; unmarked reads (sweeps, reads within writes) never reach it; and
// right after a write the replica shows the state before it, which is why
// a client's reads after its own write go to the primary (dbread).
func TestReadReplica(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresReplicatedURL(t)
	store := MustOpen(t, url)
	if _, err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	readURL := testenv.PostgresReadURL(t, testenv.DatabaseName(t, url), "mounts")
	// Well above the replica's 250 ms: a machine busy with other tests'
	// databases streaming to the replica still uses it.
	const maxLag = 3 * time.Second
	stop, err := store.AddReadReplicas(ctx, []string{readURL}, maxLag, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := store.CreateAccount(ctx, core.Account{ID: "acc_r", Name: "r", CreatedAt: now},
		core.APIClient{ClientID: "cli_r", AccountID: "acc_r", SecretHash: "x", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	for _, uid := range []string{"R1", "R2", "R3"} {
		if _, err := store.ClaimMount(ctx, core.Claim{UID: uid, AccountID: "acc_r", Now: now, Deadline: now.Add(time.Hour),
			Key: core.MountKey{ID: "k" + uid, PublicKey: make([]byte, 32), SealedPrivateKey: "s"}}, nil); err != nil {
			t.Fatal(err)
		}
		if _, _, err := store.ConfirmAssociation(ctx, uid, "acc_r", now, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := store.InsertStates(ctx, "R1", "acc_r", []core.StateEntry{
		{Code: core.StateBatteryLevel, Value: "42", OccurredAt: now}}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.WaitReplayed(t)
	testenv.WaitFor(t, 10*time.Second, "the replica's lag to be measured", func() bool {
		st, _ := store.ReplicaStats()
		for _, lag := range st.Lag {
			return lag >= 0 && lag < maxLag
		}
		return false
	})

	marked := dbread.WithReplica(ctx)
	reads := []struct {
		name string
		read func(ctx context.Context) (any, error)
	}{
		{"ListMounts", func(ctx context.Context) (any, error) {
			m, n, err := store.ListMounts(ctx, "acc_r", core.MountFilter{}, core.Page{CurrentPage: 1, PageSize: 10}, now)
			return []any{m, n}, err
		}},
		{"MountWithLatest", func(ctx context.Context) (any, error) { return store.MountWithLatest(ctx, "R1") }},
		{"ListStates", func(ctx context.Context) (any, error) {
			s, n, err := store.ListStates(ctx, "R1", "acc_r", core.StateFilter{}, core.Page{CurrentPage: 1, PageSize: 10})
			return []any{s, n}, err
		}},
		{"ListJobs", func(ctx context.Context) (any, error) {
			j, n, err := store.ListJobs(ctx, "acc_r", core.Page{CurrentPage: 1, PageSize: 10})
			return []any{j, n}, err
		}},
	}
	t.Run("marked reads reach the replica and agree with the primary", func(t *testing.T) {
		for _, r := range reads {
			before := replicaReadCount(store)
			got, err := r.read(marked)
			if err != nil {
				t.Fatalf("%s on the replica: %v", r.name, err)
			}
			if replicaReadCount(store) != before+1 {
				t.Fatalf("%s: a marked read did not reach the replica", r.name)
			}
			want, err := r.read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: replica %+v, primary %+v", r.name, got, want)
			}
		}
	})
	t.Run("unmarked reads stay on the primary", func(t *testing.T) {
		before := replicaReadCount(store)
		for _, r := range reads {
			if _, err := r.read(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := replicaReadCount(store) - before; n != 0 {
			t.Fatalf("%d unmarked reads reached the replica", n)
		}
	})
	t.Run("the replica lags a write", func(t *testing.T) {
		// The replica replays a commit 250 ms after it: a read sooner
		// than that finds the name before the write. A machine too busy
		// to read within 200 ms proves nothing either way.
		for i := range 10 {
			name := "renamed-" + string(rune('a'+i))
			start := time.Now()
			if _, err := store.UpdateMount(ctx, "R2", "acc_r", core.MountUpdate{Name: &name}, now); err != nil {
				t.Fatal(err)
			}
			m, err := store.MountWithLatest(marked, "R2")
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 200*time.Millisecond {
				continue
			}
			if m.Name == name {
				t.Fatalf("the replica showed a write %v after it: it does not lag as configured, or the read went to the primary", time.Since(start))
			}
			return
		}
		t.Skip("no read within 200 ms of its write in 10 tries")
	})
}

func replicaReadCount(store *bunstore.Store) int64 {
	st, _ := store.ReplicaStats()
	return st.ReplicaReads
}
