package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/writeonce/porch-go/internal/pgschema"
	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/store"
)

// naivePG is the limiter a chi user writes by hand on PostgreSQL, for
// porch's PostgreSQL rows to be read against: per request, one autocommit
// upsert of the client's count on a pgx pool, answered (200, or 429 past
// the limit) once it has committed. No batching, no actors, no window:
// the database's row lock orders one key's requests, and every request
// pays its own commit. With -durability process-crash its sessions run
// with synchronous_commit off (the commit returns before its WAL is
// flushed), as porch's store.SurvivesProcessCrash does for its own
// transactions of hits.
type naivePG struct {
	pool    *pgxpool.Pool
	limit   int64
	commits atomic.Int64
}

// naivePGConns is the pool's size: as many connections as the harness's
// default wrk load, so that no request waits for a connection there.
const naivePGConns = 64

// naivePGUpsert is the handler's one statement.
const naivePGUpsert = `INSERT INTO c (k, n) VALUES ($1, 1) ON CONFLICT (k) DO UPDATE SET n = c.n + 1 RETURNING n`

// openNaivePG makes table c in a fresh schema of dsn's database and opens
// the pool on it; it registers on app the pool's Close and then the
// schema's drop.
func openNaivePG(ctx context.Context, dsn string, limit int64, durability store.Durability, app *porch.App) (*naivePG, error) {
	schemaDSN, drop, err := pgschema.Fresh(ctx, dsn, "porch_bench_")
	if err != nil {
		return nil, err
	}
	if err := pgschema.Exec(ctx, schemaDSN, `CREATE TABLE c (k text PRIMARY KEY, n bigint NOT NULL)`); err != nil {
		drop(ctx)
		return nil, fmt.Errorf("naive-postgres: table: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(schemaDSN)
	if err != nil {
		drop(ctx)
		return nil, err
	}
	cfg.MaxConns = naivePGConns
	if durability == store.SurvivesProcessCrash {
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "SET synchronous_commit = off")
			return err
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		drop(ctx)
		return nil, err
	}
	n := &naivePG{pool: pool, limit: limit}
	app.OnShutdown(drop) // closers run in reverse: the pool closes first
	app.OnShutdown(n.Close)
	return n, nil
}

// Handler is the hand-written limiter as chi middleware: 429 over the
// limit, 503 when the upsert failed.
func (n *naivePG) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := clientIP(r)
		var count int64
		if err := n.pool.QueryRow(r.Context(), naivePGUpsert, key).Scan(&count); err != nil {
			http.Error(w, "naive-postgres: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		n.commits.Add(1)
		if count > n.limit {
			w.Header().Set("Retry-After", strconv.Itoa(int(time.Hour/time.Second)))
			http.Error(w, "Too Many Requests", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Stats reports one commit, of one write, per counted request.
func (n *naivePG) Stats() store.Stats {
	c := n.commits.Load()
	return store.Stats{Commits: c, Writes: c}
}

// Close closes the pool.
func (n *naivePG) Close(context.Context) error {
	n.pool.Close()
	return nil
}
