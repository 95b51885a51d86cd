package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/writeonce/porch-go/porch"
	"github.com/writeonce/porch-go/porch/clock"
	"github.com/writeonce/porch-go/porch/rate"
	"github.com/writeonce/porch-go/porch/store"
	"github.com/writeonce/porch-go/porch/store/redis"
)

// The Redis modes, beside the others (see the package doc):
//
//	porch-redis      porch's rate.Limiter on redis.Open, the -redis server
//	porch-redis-aof  the same on -redis-aof, a server with appendonly yes
//	                 and appendfsync always (RequireDurable)
//	ulule-redis      github.com/ulule/limiter/v3 on its Redis store (-redis)
//	redis-rate       github.com/go-redis/redis_rate/v10 (-redis), GCRA
//
// Every client has the same pool (64 connections, wrk's default -c), so a
// peer that needs a connection per request in flight is not starved.
var redisModes = map[string]func(ctx context.Context, cfg config, app *porch.App, clk clock.Clock) (func(http.Handler) http.Handler, statser, error){
	"porch-redis":     porchRedis,
	"porch-redis-aof": porchRedis,
	"ulule-redis":     ululeRedis,
	"redis-rate":      redisRate,
}

func init() {
	for m := range redisModes {
		modes = append(modes, m)
	}
}

// redisClient is a client of the mode's server, closed last by app, and a
// key prefix of this run's own, whose keys app deletes before that.
func redisClient(cfg config, app *porch.App) (*goredis.Client, string) {
	addr := cfg.redis
	if cfg.mode == "porch-redis-aof" {
		addr = cfg.redisAOF
	}
	c := goredis.NewClient(&goredis.Options{Addr: addr, PoolSize: 64, ContextTimeoutEnabled: true})
	var b [6]byte
	rand.Read(b[:])
	prefix := "porchbench:" + hex.EncodeToString(b[:]) + ":"
	app.OnShutdown(func(context.Context) error { return c.Close() })
	app.OnShutdown(func(ctx context.Context) error { return deletePrefix(ctx, c, prefix) })
	return c, prefix
}

// deletePrefix removes a run's keys from the shared server: each page of
// SCAN's in one UNLINK. A many-keys row leaves some 130,000 keys, which
// one UNLINK round trip per key did not remove within the shutdown's
// budget ("closer timed out"), leaving them to weigh on later rows for
// the hour they live.
func deletePrefix(ctx context.Context, c *goredis.Client, prefix string) error {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 10000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := c.Unlink(ctx, keys...).Err(); err != nil {
				return err
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

func porchRedis(ctx context.Context, cfg config, app *porch.App, clk clock.Clock) (func(http.Handler) http.Handler, statser, error) {
	c, prefix := redisClient(cfg, app)
	pool := porch.NewPool(porch.PoolOptions{Size: cfg.pool, Mailbox: cfg.mailbox})
	st, err := redis.Open(ctx, c, redis.Options{
		Options:        store.Options{Clock: clk, QueueSize: pool.Size() * cfg.mailbox},
		Prefix:         prefix,
		RequireDurable: cfg.mode == "porch-redis-aof",
	})
	if err != nil {
		pool.Close(context.Background())
		return nil, nil, err
	}
	app.OnShutdown(st.Close)
	app.OnShutdown(pool.Close)
	lim, err := rate.New(pool, st, cfg.limit, cfg.window, rate.Options{TrustProxy: cfg.trustProxy, Lease: cfg.lease})
	if err != nil {
		return nil, nil, err
	}
	app.OnShutdown(lim.Close)
	return lim.Handler, st, nil
}

func ululeRedis(_ context.Context, cfg config, app *porch.App, _ clock.Clock) (func(http.Handler) http.Handler, statser, error) {
	c, prefix := redisClient(cfg, app)
	st, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: prefix})
	if err != nil {
		return nil, nil, err
	}
	lim := limiter.New(st, limiter.Rate{Period: cfg.window, Limit: int64(cfg.limit)})
	return keyed(func(r *http.Request, key string) (bool, error) {
		lc, err := lim.Get(r.Context(), key)
		return !lc.Reached, err
	}), nil, nil
}

func redisRate(_ context.Context, cfg config, app *porch.App, _ clock.Clock) (func(http.Handler) http.Handler, statser, error) {
	c, prefix := redisClient(cfg, app)
	lim := redis_rate.NewLimiter(c)
	l := redis_rate.Limit{Rate: cfg.limit, Burst: cfg.limit, Period: cfg.window}
	return keyed(func(r *http.Request, key string) (bool, error) {
		res, err := lim.Allow(r.Context(), prefix+key, l)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}), nil, nil
}

// keyed is a peer's middleware, keyed as porch's: allow decides the
// client's request; an error answers 503 (fail closed, as porch does), a
// refusal 429.
func keyed(allow func(r *http.Request, key string) (bool, error)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key, _ := clientIP(r)
			ok, err := allow(r, key)
			switch {
			case err != nil:
				w.Header().Set("Retry-After", "1")
				http.Error(w, "limiter unavailable", http.StatusServiceUnavailable)
			case !ok:
				http.Error(w, "too many requests", http.StatusTooManyRequests)
			default:
				next.ServeHTTP(w, r)
			}
		})
	}
}
