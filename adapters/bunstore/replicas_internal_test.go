package bunstore

import (
	"context"
	"database/sql"
	"math"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/internal/dbread"
)

func TestParseLSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"0/0", 0, true},
		{"16/B374D848", 0x16<<32 | 0xB374D848, true},
		{"FFFFFFFF/FFFFFFFF", math.MaxUint64, true},
		{"16B374D848", 0, false},
		{"x/1", 0, false},
		{"1/100000000", 0, false},
	} {
		got, err := parseLSN(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseLSN(%q) = %d, %v; want %d, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestLagOf(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	samples := []walSample{{t0, 100}, {t0.Add(200 * time.Millisecond), 150}, {t0.Add(400 * time.Millisecond), 150}, {t0.Add(600 * time.Millisecond), 300}}
	now := t0.Add(700 * time.Millisecond)
	for _, tc := range []struct {
		name     string
		replayed uint64
		lag      time.Duration
		ok       bool
	}{
		{"caught up", 300, 100 * time.Millisecond, true},
		{"ahead of the last sample", 400, 100 * time.Millisecond, true},
		// An idle primary: the position did not move, the newest sample
		// at it counts, not the first.
		{"idle stretch", 150, 300 * time.Millisecond, true},
		{"between samples", 120, 700 * time.Millisecond, true},
		{"behind every sample", 99, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lag, ok := lagOf(samples, tc.replayed, now)
			if lag != tc.lag || ok != tc.ok {
				t.Errorf("lagOf(%d) = %v, %v; want %v, %v", tc.replayed, lag, ok, tc.lag, tc.ok)
			}
		})
	}
}

func TestPickReplica(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	newReplica := func(name string, lag time.Duration, probedAgo time.Duration) *replica {
		r := &replica{name: name}
		r.lag.Store(int64(lag))
		r.probedAt.Store(now.Add(-probedAgo).UnixNano())
		return r
	}
	for _, tc := range []struct {
		name     string
		replicas []*replica
		want     string // "" for the primary
	}{
		{"close enough", []*replica{newReplica("a", 300*time.Millisecond, 100*time.Millisecond)}, "a"},
		{"too far", []*replica{newReplica("a", 1100*time.Millisecond, 0)}, ""},
		// 600 ms at a probe 500 ms ago may be 1.1 s now.
		{"stale probe", []*replica{newReplica("a", 600*time.Millisecond, 500*time.Millisecond)}, ""},
		{"unknown", []*replica{newReplica("a", math.MaxInt64, 0)}, ""},
		{"the one that is close", []*replica{newReplica("a", 2*time.Second, 0), newReplica("b", 0, 0)}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := &replicaSet{replicas: tc.replicas, maxLag: time.Second, now: func() time.Time { return now }}
			got := ""
			if r := set.pick(); r != nil {
				got = r.name
			}
			if got != tc.want {
				t.Errorf("pick() = %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("left out after a failure", func(t *testing.T) {
		r := newReplica("a", 0, 0)
		r.downUntil.Store(now.Add(time.Second).UnixNano())
		set := &replicaSet{replicas: []*replica{r}, maxLag: time.Second, now: func() time.Time { return now }}
		if set.pick() != nil {
			t.Error("a replica that failed a second ago was picked")
		}
	})
}

// TestReadFallsBackToPrimary: a read the picked replica cannot serve (its
// server is gone) is answered by the primary, and the replica is left out
// of the next reads.
func TestReadFallsBackToPrimary(t *testing.T) {
	ctx := context.Background()
	s, closeStore, err := Open(ctx, "sqlite://"+filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeStore()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	_ = ln.Close()
	dead := bun.NewDB(sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN("postgres://postgres@"+gone+"/x?sslmode=disable"))), pgdialect.New())
	defer dead.Close()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	r := &replica{name: gone, db: dead}
	r.probedAt.Store(now.UnixNano()) // lag 0 at a probe just now
	s.replicas = &replicaSet{replicas: []*replica{r}, maxLag: time.Second, now: func() time.Time { return now }}

	var ran []*bun.DB
	err = s.read(dbread.WithReplica(ctx), func(db *bun.DB) error {
		ran = append(ran, db)
		var one int
		return db.QueryRowContext(ctx, "SELECT 1").Scan(&one)
	})
	if err != nil || len(ran) != 2 || ran[0] != dead || ran[1] != s.db {
		t.Fatalf("read: %v, ran on %d databases; want the replica, then the primary", err, len(ran))
	}
	if s.replicas.pick() != nil {
		t.Fatal("the failed replica is picked again at once")
	}
	if st, _ := s.ReplicaStats(); st.PrimaryReads != 1 || st.ReplicaReads != 0 {
		t.Fatalf("reads counted %+v, want 1 on the primary", st)
	}
}
