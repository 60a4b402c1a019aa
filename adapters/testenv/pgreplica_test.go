package testenv

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/uptrace/bun/driver/pgdriver"
)

// TestPostgresReadReplica checks the replica scripts/test-services.sh
// starts: it is a hot standby that refuses writes, replays the primary's
// commits late but within seconds, and WaitReplayed makes a commit visible.
func TestPostgresReadReplica(t *testing.T) {
	primaryURL := PostgresReplicatedURL(t)
	primary := openPG(t, primaryURL)
	ctx := context.Background()
	if _, err := primary.ExecContext(ctx, "CREATE TABLE items (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	readURL := PostgresReadURL(t, DatabaseName(t, primaryURL), "items")
	replica := openPG(t, readURL)

	t.Run("the replica is a standby that applies commits late", func(t *testing.T) {
		var inRecovery bool
		if err := replica.QueryRowContext(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			t.Fatal(err)
		}
		if !inRecovery {
			t.Fatal("pg_is_in_recovery() is false on the read replica")
		}
		var delay string
		if err := replica.QueryRowContext(ctx, "SHOW recovery_min_apply_delay").Scan(&delay); err != nil {
			t.Fatal(err)
		}
		if delay == "0" {
			t.Fatal("recovery_min_apply_delay is 0: a read wrongly sent to the replica would rarely look stale")
		}
	})

	t.Run("a write on the replica is refused", func(t *testing.T) {
		_, err := replica.ExecContext(ctx, "INSERT INTO items VALUES (1)")
		var pgErr pgdriver.Error
		if !errors.As(err, &pgErr) || pgErr.Field('C') != "25006" { // read_only_sql_transaction
			t.Fatalf("insert on the replica: %v, want read_only_sql_transaction", err)
		}
	})

	t.Run("a row inserted on the primary shows on the replica within 10 s", func(t *testing.T) {
		insert(t, primary, 2)
		err := poll(10*time.Second, func(ctx context.Context) error {
			found, err := has(ctx, replica, 2)
			if err == nil && !found {
				err = errors.New("row 2 not on the replica")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("after WaitReplayed the replica has every committed row", func(t *testing.T) {
		insert(t, primary, 3)
		WaitReplayed(t)
		if found, err := has(ctx, replica, 3); err != nil || !found {
			t.Fatalf("row 3, committed before WaitReplayed, on the replica: %v, %v", found, err)
		}
		t.Logf("replica behind by %d bytes of WAL", ReplicaBehind(t))
	})
}

func openPG(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db := sql.OpenDB(pgdriver.NewConnector(pgdriver.WithDSN(dsn)))
	t.Cleanup(func() { db.Close() })
	return db
}

func insert(t *testing.T, db *sql.DB, id int) {
	t.Helper()
	if _, err := db.Exec("INSERT INTO items VALUES ($1)", id); err != nil {
		t.Fatal(err)
	}
}

func has(ctx context.Context, db *sql.DB, id int) (bool, error) {
	var found bool
	err := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT FROM items WHERE id = $1)", id).Scan(&found)
	return found, err
}
