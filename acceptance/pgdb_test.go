//go:build acceptance

package acceptance

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/internal/pgtest"
)

// pgTimeout bounds every query the gate sends to PostgreSQL itself.
const pgTimeout = 10 * time.Second

// startOnPostgres starts a storefront whose tables (porch's and the shop's
// orders) live in the PostgreSQL schema dsn names; -db is still passed but
// ignored. name labels the instance in the log. Its connections carry an
// application_name of their own, a session setting that leaves the database,
// schema and user the same as its peers', so the gate can tell its backends
// and their advisory locks from another instance's and from other legs'.
func startOnPostgres(t *testing.T, dsn, name string, flags ...string) *storefront {
	t.Helper()
	app := "porch-gate-" + name + "-" + uuid.NewString()[:8]
	s := startStorefront(t, newDB(t), append([]string{"-postgres", pgtest.WithParam(dsn, "application_name", app)}, flags...)...)
	s.app = app
	return s
}

// pgDB reads the schema a leg's storefronts share, over pgx, as openDB
// reads a SQLite file. It never writes. The zero value is not usable;
// create it with openPG.
type pgDB struct {
	pool *pgxpool.Pool
}

// openPG connects to dsn with a small pool of its own, closed when the test
// ends (before pgtest drops the schema, since cleanups run last-in first).
func openPG(t *testing.T, dsn string) *pgDB {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("parse dsn: %v", err)
	}
	cfg.MaxConns = 2
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to postgres: %v", err)
	}
	t.Cleanup(pool.Close)
	return &pgDB{pool: pool}
}

// count counts the rows of table (a name the leg spells out, never input).
func (d *pgDB) count(t *testing.T, table string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// orders returns every order_id in the orders table.
func (d *pgDB) orders(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, `SELECT order_id FROM orders ORDER BY order_id`)
	if err != nil {
		t.Fatalf("read orders: %v", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatalf("read orders: %v", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read orders: %v", err)
	}
	return ids
}

// onlyCounter reads the single porch_rate_counters row a one-client leg
// leaves. Times are Unix ms on the database's clock.
func (d *pgDB) onlyCounter(t *testing.T) counterRow {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	rows, err := d.pool.Query(ctx, `SELECT convert_from(key, 'UTF8'), window_start, window_ms, count, expires_at FROM porch_rate_counters ORDER BY key`)
	if err != nil {
		t.Fatalf("read porch_rate_counters: %v", err)
	}
	defer rows.Close()
	var cs []counterRow
	for rows.Next() {
		var c counterRow
		if err := rows.Scan(&c.Key, &c.WindowStart, &c.WindowMS, &c.Count, &c.ExpiresAt); err != nil {
			t.Fatalf("read porch_rate_counters: %v", err)
		}
		cs = append(cs, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read porch_rate_counters: %v", err)
	}
	if len(cs) != 1 {
		t.Fatalf("porch_rate_counters: got %d rows %+v, want 1", len(cs), cs)
	}
	return cs[0]
}

// advisoryLocks counts the idempotency-key advisory locks s's backends hold
// (granted) or wait for (not granted). An owner holds its key's lock, an
// exclusive one, for as long as its handler runs; a duplicate on another
// instance waits for it. The shared advisory lock each running limiter
// holds on its policy's name is not counted.
func (d *pgDB) advisoryLocks(t *testing.T, s *storefront, granted bool) int {
	t.Helper()
	if s.app == "" {
		t.Fatalf("advisoryLocks: the storefront was not started by startOnPostgres")
	}
	ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
	defer cancel()
	var n int
	err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.mode = 'ExclusiveLock' AND l.granted = $2 AND a.application_name = $1`, s.app, granted).Scan(&n)
	if err != nil {
		t.Fatalf("read pg_locks: %v", err)
	}
	return n
}
