package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/driver"
	"github.com/writeonce/porch-go/porch/store/postgres"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// backend is the SQL store, SQLite or PostgreSQL: it holds the idempotency
// keys, whose responses commit with the shop's orders, and the limiter's
// counters unless -redis or -redis-cluster moves them to Redis.
type backend interface {
	driver.KeyStore
	driver.Counters
	driver.Slots
}

// openBackend opens porch's SQL store, SQLite by default or PostgreSQL
// with -postgres, and returns it with a database/sql handle on the same
// database for the shop's own tables, whose schema it has created.
// -key-conns is PostgreSQL's alone: SQLite holds keys in memory, so on it
// the flag has no option to set.
func openBackend(ctx context.Context, cfg config, opt store.Options) (backend, *sql.DB, error) {
	if cfg.postgres == "" {
		st, err := sqlite.Open(cfg.db, sqlite.Options{Options: opt})
		if err != nil {
			return nil, nil, err
		}
		if err := createSchemaSQLite(ctx, st.DB()); err != nil {
			st.Close(ctx)
			return nil, nil, err
		}
		return st, st.DB(), nil
	}
	st, err := postgres.Open(ctx, cfg.postgres, postgres.Options{Options: opt, KeyConns: cfg.keyConns})
	if err != nil {
		return nil, nil, err
	}
	db := stdlib.OpenDBFromPool(st.Pool())
	if err := createSchemaPostgres(ctx, db); err != nil {
		db.Close()
		st.Close(ctx)
		return nil, nil, err
	}
	return st, db, nil
}

// stores are what the shop counts and keeps keys in: the SQL store always,
// and the Redis store when the limiter counts there.
type stores struct {
	sql      backend
	db       *sql.DB
	counters driver.Counters // the limiter's: sql, or the Redis store
	slots    driver.Slots    // the in-flight limiter's: where counters are
	redis    *redis.Store    // nil without -redis and -redis-cluster
}

// openStores opens the SQL store and, with -redis or -redis-cluster, the
// Redis store, and registers their closers on app so that they run after
// the pool's (registered later, run earlier): the Redis store, the SQL
// store, then the go-redis client. obs, if not nil, is told of every
// commit batch of either.
func openStores(cfg config, app *porch.App, queueSize int, obs store.Observer) (stores, error) {
	opt := store.Options{
		Observer:    obs,
		Clock:       offsetClock{offset: cfg.wallOffset},
		QueueSize:   queueSize,
		CommitDelay: cfg.storeDelay,
		Durability:  cfg.durability,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sq, db, err := openBackend(ctx, cfg, opt)
	if err != nil {
		return stores{}, err
	}
	s := stores{sql: sq, db: db, counters: sq, slots: sq}
	if !cfg.redis.enabled() {
		app.OnShutdown(sq.Close)
		return s, nil
	}
	rs, client, err := openRedis(ctx, cfg.redis, opt)
	if err != nil {
		sq.Close(ctx)
		return stores{}, err
	}
	app.OnShutdown(closeClient(client))
	app.OnShutdown(sq.Close)
	app.OnShutdown(rs.Close)
	s.counters, s.slots, s.redis = rs, rs, rs
	return s, nil
}

// createSchemaPostgres creates the shop's tables under a transaction-scoped
// advisory lock: instances starting together would otherwise race on
// CREATE TABLE IF NOT EXISTS, which is not safe against itself in
// PostgreSQL.
func createSchemaPostgres(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('storefront_schema', 0))`); err != nil {
		return fmt.Errorf("storefront: schema lock: %w", err)
	}
	if _, err := tx.ExecContext(ctx, shopSchema); err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	// Added after the first release; a database made by it lacks the
	// column. Looked up first: ALTER TABLE takes an ACCESS EXCLUSIVE lock
	// even when the column exists, which the server logs for its standbys,
	// so the commit would wait for a synchronous standby, and a storefront
	// restarted while one is down would not start.
	var has bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'orders' AND column_name = 'operation_id')`).Scan(&has); err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	if !has {
		if _, err := tx.ExecContext(ctx, `ALTER TABLE orders ADD COLUMN operation_id TEXT`); err != nil {
			return fmt.Errorf("storefront: schema: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	return nil
}

// createSchemaSQLite creates the shop's tables in the SQLite file, adding
// orders.operation_id to a file made before it existed.
func createSchemaSQLite(ctx context.Context, db *sql.DB) error {
	if _, err := db.ExecContext(ctx, shopSchema); err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	var has int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('orders') WHERE name = 'operation_id'`).Scan(&has); err != nil {
		return fmt.Errorf("storefront: schema: %w", err)
	}
	if has == 0 {
		if _, err := db.ExecContext(ctx, `ALTER TABLE orders ADD COLUMN operation_id TEXT`); err != nil {
			return fmt.Errorf("storefront: schema: %w", err)
		}
	}
	return nil
}

// offsetClock is the system clock with offset added to every wall reading,
// for -wall-offset: the acceptance gate restarts the storefront with its
// wall clock set back, as an operator or NTP would, and checks that no
// window reopens. The monotonic reading is the system's own.
type offsetClock struct {
	clock.System
	offset time.Duration
}

// Wall reads the wall clock plus the offset.
func (c offsetClock) Wall() time.Time { return c.System.Wall().Add(c.offset) }
