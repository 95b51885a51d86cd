package main

import (
	"context"
	"net/http"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/inflight"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/memory"
	"github.com/writeonce/porch-go/porch/store/redis"
	"github.com/writeonce/porch-go/porch/store/sqlite"
)

// The in-flight modes: porch's inflight.Limiter alone in front of "ok",
// with a limit of -limit (1e9 by default) requests in flight per client, so
// that every request takes a slot and gives it back and the harness
// measures that path:
//
//	inflight-memory    slots counted in the pool's actors (memory store)
//	inflight-sqlite    the same on sqlite.Open (which counts as memory does)
//	inflight-postgres  a leased row per request in porch_inflight, in a
//	                   fresh schema dropped at exit
//	inflight-redis     a leased ZSET member per request on -redis
var inflightModes = map[string]func(ctx context.Context, cfg config, app *porch.App, clk clock.Clock) (func(http.Handler) http.Handler, statser, error){
	"inflight-memory":   inflightMode,
	"inflight-sqlite":   inflightMode,
	"inflight-postgres": inflightMode,
	"inflight-redis":    inflightMode,
}

func init() {
	for m := range inflightModes {
		modes = append(modes, m)
	}
}

func inflightMode(ctx context.Context, cfg config, app *porch.App, clk clock.Clock) (func(http.Handler) http.Handler, statser, error) {
	pool := porch.NewPool(porch.PoolOptions{Size: cfg.pool, Mailbox: cfg.mailbox})
	opt := store.Options{Clock: clk, QueueSize: pool.Size() * cfg.mailbox, Durability: cfg.durability}
	var st store.Slots
	switch cfg.mode {
	case "inflight-memory":
		m, err := memory.Open(memory.Options{Clock: clk})
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		app.OnShutdown(m.Close)
		st = m
	case "inflight-sqlite":
		sq, err := sqlite.Open(cfg.db, sqlite.Options{Options: opt})
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		app.OnShutdown(sq.Close)
		st = sq
	case "inflight-postgres":
		pg, err := openPostgres(ctx, cfg.postgres, opt, app)
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		st = pg
	case "inflight-redis":
		c, prefix := redisClient(cfg, app)
		rs, err := redis.Open(ctx, c, redis.Options{Options: opt, Prefix: prefix})
		if err != nil {
			pool.Close(context.Background())
			return nil, nil, err
		}
		app.OnShutdown(rs.Close)
		st = rs
	}
	app.OnShutdown(pool.Close)
	lim := inflight.New(pool, st, cfg.limit, inflight.Options{TrustProxy: cfg.trustProxy})
	app.OnShutdown(lim.Close)
	return lim.Handler, st, nil
}
