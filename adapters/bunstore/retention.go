package bunstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/pgdriver"

	"github.com/mountd/mountd/core"
)

var _ core.Housekeeping = (*Store)(nil)

const dayMillis = int64(24 * time.Hour / time.Millisecond)

// beforePartition holds every entry older than the first daily partition:
// the rows of a database upgraded from the unpartitioned table, and entries
// reported long after they occurred.
const beforePartition = "mount_states_before"

// statePartition is one attached partition of mount_states; from is nil
// for the one that starts at MINVALUE.
type statePartition struct {
	name     string
	from     *int64
	from0    int64
	to       int64
	isBefore bool
}

var partitionBounds = regexp.MustCompile(`FROM \((?:MINVALUE|'?(-?\d+)'?)\) TO \('?(-?\d+)'?\)`)

// statePartitions lists the attached partitions, oldest first.
func statePartitions(ctx context.Context, db bun.Conn) ([]statePartition, error) {
	var rows []struct {
		Name  string `bun:"name"`
		Bound string `bun:"bound"`
	}
	if err := db.NewRaw(`SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'mount_states'::regclass AND NOT i.inhdetachpending`).Scan(ctx, &rows); err != nil {
		return nil, err
	}
	parts := make([]statePartition, 0, len(rows))
	for _, r := range rows {
		m := partitionBounds.FindStringSubmatch(r.Bound)
		if m == nil {
			return nil, fmt.Errorf("partition %s: unexpected bound %q", r.Name, r.Bound)
		}
		p := statePartition{name: r.Name, isBefore: m[1] == ""}
		p.to, _ = strconv.ParseInt(m[2], 10, 64)
		if !p.isBefore {
			p.from0, _ = strconv.ParseInt(m[1], 10, 64)
			p.from = &p.from0
		}
		parts = append(parts, p)
	}
	slices.SortFunc(parts, func(a, b statePartition) int { return int(a.to - b.to) })
	return parts, nil
}

// withMaintenance runs fn on a connection of its own holding the
// maintenance lock, so that one replica at a time changes partitions.
func (s *Store) withMaintenance(ctx context.Context, fn func(conn bun.Conn) error) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	h := fnv.New64a()
	h.Write([]byte("mountd state partitions"))
	lockID := int64(h.Sum64() >> 1)
	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", lockID); err != nil {
		return fmt.Errorf("lock state partitions: %w", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(?)", lockID) //nolint:errcheck
	return fn(conn)
}

// ensurePartitions creates the partition of old entries if it is missing,
// daily partitions up to the one holding until, and one for each instant of
// at that no partition holds (an entry older than the oldest daily
// partition left, but newer than the partition of old entries).
func ensurePartitions(ctx context.Context, conn bun.Conn, until int64, at ...int64) error {
	parts, err := statePartitions(ctx, conn)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(parts, func(p statePartition) bool { return p.isBefore }) {
		lowest := until / dayMillis * dayMillis
		if len(parts) > 0 {
			lowest = *parts[0].from
		}
		if err := createBefore(ctx, conn, lowest); err != nil {
			return err
		}
		parts = append([]statePartition{{name: beforePartition, isBefore: true, to: lowest}}, parts...)
	}
	for next := parts[len(parts)-1].to; next <= until; next += dayMillis {
		if err := createDay(ctx, conn, next); err != nil {
			return err
		}
	}
	for _, t := range at {
		held := slices.ContainsFunc(parts, func(p statePartition) bool { return (p.isBefore || *p.from <= t) && t < p.to })
		if !held && t < parts[len(parts)-1].to {
			if err := createDay(ctx, conn, t/dayMillis*dayMillis); err != nil {
				return err
			}
		}
	}
	return nil
}

func createDay(ctx context.Context, conn bun.Conn, from int64) error {
	name := "mount_states_p" + time.UnixMilli(from).UTC().Format("20060102")
	if _, err := conn.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF mount_states FOR VALUES FROM (%d) TO (%d)`,
		name, from, from+dayMillis)); err != nil {
		return fmt.Errorf("create partition %s: %w", name, err)
	}
	return nil
}

func createBefore(ctx context.Context, conn bun.Conn, to int64) error {
	for _, q := range []string{
		fmt.Sprintf(`CREATE TABLE %s PARTITION OF mount_states FOR VALUES FROM (MINVALUE) TO (%d)`, beforePartition, to),
		`CREATE INDEX IF NOT EXISTS mount_states_before_occurred ON mount_states_before (occurred_at)`,
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("create %s: %w", beforePartition, err)
		}
	}
	return nil
}

// PrepareStates implements core.Housekeeping: on PostgreSQL, the daily
// partitions up to until.
func (s *Store) PrepareStates(ctx context.Context, until time.Time) error {
	if !s.postgres {
		return nil
	}
	return s.withMaintenance(ctx, func(conn bun.Conn) error { return ensurePartitions(ctx, conn, until.UnixMilli()) })
}

// PruneStates implements core.Housekeeping. On SQLite it deletes up to
// limit rows. On PostgreSQL it drops the daily partitions wholly before
// before, each detached concurrently first (ingest goes on meanwhile), then
// deletes up to limit rows past retention from the partition of old
// entries, which is never dropped.
func (s *Store) PruneStates(ctx context.Context, before time.Time, limit int) (int, error) {
	cut := before.UnixMilli()
	if !s.postgres {
		var n int64
		err := s.write(ctx, func() error {
			res, err := s.db.NewRaw(`DELETE FROM mount_states WHERE rowid IN (SELECT rowid FROM mount_states WHERE occurred_at < ? LIMIT ?)`, cut, limit).Exec(ctx)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		return int(n), err
	}
	n := 0
	err := s.withMaintenance(ctx, func(conn bun.Conn) error {
		if err := dropLeftovers(ctx, conn); err != nil {
			return err
		}
		parts, err := statePartitions(ctx, conn)
		if err != nil {
			return err
		}
		for _, p := range parts {
			if p.isBefore || p.to > cut {
				continue
			}
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE mount_states DETACH PARTITION %s CONCURRENTLY`, p.name)); err != nil {
				return fmt.Errorf("detach %s: %w", p.name, err)
			}
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(`DROP TABLE %s`, p.name)); err != nil {
				return fmt.Errorf("drop %s: %w", p.name, err)
			}
		}
		res, err := conn.ExecContext(ctx, `DELETE FROM mount_states_before WHERE ctid IN (SELECT ctid FROM mount_states_before WHERE occurred_at < ? LIMIT ?)`, cut, limit)
		if err != nil {
			return err
		}
		affected, err := res.RowsAffected()
		n = int(affected)
		return err
	})
	return n, err
}

// dropLeftovers finishes detaches a stopped maintenance left pending and
// drops the tables it detached: partitions mountd created that are no
// longer attached.
func dropLeftovers(ctx context.Context, conn bun.Conn) error {
	var pending []string
	if err := conn.NewRaw(`SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'mount_states'::regclass AND i.inhdetachpending`).Scan(ctx, &pending); err != nil {
		return err
	}
	for _, name := range pending {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`ALTER TABLE mount_states DETACH PARTITION %s FINALIZE`, name)); err != nil {
			return fmt.Errorf("finish detaching %s: %w", name, err)
		}
	}
	var detached []string
	if err := conn.NewRaw(`SELECT relname FROM pg_class WHERE relkind = 'r' AND NOT relispartition
		AND relnamespace = current_schema()::regnamespace
		AND (relname ~ '^mount_states_p[0-9]{8}$')`).Scan(ctx, &detached); err != nil {
		return err
	}
	for _, name := range detached {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf(`DROP TABLE %s`, name)); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
	}
	return nil
}

// isNoPartition reports an insert that found no partition for its row.
func isNoPartition(err error) bool {
	var pgErr pgdriver.Error
	return errors.As(err, &pgErr) && pgErr.Field('C') == "23514" && strings.Contains(pgErr.Field('M'), "no partition of relation")
}

// PruneDeliveries implements core.Housekeeping. The bodies of the pruned
// attempts' events go in the same transaction once no attempt refers to
// them.
func (s *Store) PruneDeliveries(ctx context.Context, before time.Time, limit int) (int, error) {
	key := "rowid"
	if s.postgres {
		key = "ctid"
	}
	n := 0
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var events []string
		if err := tx.NewRaw(fmt.Sprintf(`DELETE FROM webhook_deliveries WHERE %[1]s IN (SELECT %[1]s FROM webhook_deliveries
			WHERE status <> 'PENDING' AND attempted_at < ? LIMIT ?) RETURNING event_id`, key), millis(before), limit).
			Scan(ctx, &events); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		n = len(events)
		if n == 0 {
			return nil
		}
		slices.Sort(events)
		_, err := tx.NewRaw(`DELETE FROM webhook_bodies WHERE event_id IN (?)
			AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = webhook_bodies.event_id)`,
			bun.In(slices.Compact(events))).Exec(ctx)
		return err
	})
	return n, err
}

// PruneSignIns implements core.Housekeeping.
func (s *Store) PruneSignIns(ctx context.Context, requestsBefore, tokensBefore time.Time, limit int) (int, error) {
	key := "rowid"
	if s.postgres {
		key = "ctid"
	}
	n, err := s.pruneRows(ctx, fmt.Sprintf(`DELETE FROM auth_requests WHERE %[1]s IN (SELECT %[1]s FROM auth_requests WHERE created_at < ? LIMIT ?)`, key),
		millis(requestsBefore), limit)
	if err != nil || n == limit {
		return n, err
	}
	m, err := s.pruneRows(ctx, fmt.Sprintf(`DELETE FROM refresh_tokens WHERE %[1]s IN (SELECT %[1]s FROM refresh_tokens WHERE expires_at < ? LIMIT ?)`, key),
		millis(tokensBefore), limit-n)
	return n + m, err
}

func (s *Store) pruneRows(ctx context.Context, query string, before int64, limit int) (int, error) {
	var n int64
	err := s.write(ctx, func() error {
		res, err := s.db.ExecContext(ctx, query, before, limit)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		err = nil
	}
	return int(n), err
}
