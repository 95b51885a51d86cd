// Package rate is porch's durable, exact fixed-window rate limiter.
//
// Every request asks its key's pool actor for a verdict. The actor is the only
// writer of its keys, so it keeps their counts in memory, decides, and hands
// the new count to the store's committer; the verdict reaches the client only
// after that write has committed. Counting is therefore exact under any
// parallelism (no read-modify-write runs on a handler goroutine) and survives
// a restart, including a kill -9: every request that was answered 2xx is in
// the table.
//
// A saturated pool or a failed write answers 503 with Retry-After: a limiter
// that stops counting under load would make overload the bypass.
//
//	pool := porch.NewPool(porch.PoolOptions{})
//	st, _ := store.OpenSQLite("app.db", store.Options{})
//	lim, err := rate.New(pool, st, 100, time.Minute, rate.Options{})
//	if err != nil { ... }
//	r := chi.NewRouter()
//	r.Use(lim.Handler)
//
// Outside a handler, count by principal (an API key, a user id) with
// lim.Allow(ctx, "user42"); it shares its counter with requests whose
// Options.Key returns that principal.
package rate
