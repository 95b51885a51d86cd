// Package postgres is porch's store for several instances sharing one
// PostgreSQL database: counters are counted by the database, one atomic
// upsert per batch of hits, and one update more when the batch refused some
// ([driver.SharedCounters]), and idempotency keys
// are held across instances by advisory locks. It is pure Go (pgx), so a
// program that uses only this driver builds with CGO_ENABLED=0.
//
// Every commit a request waits for has a bound, Options.Timeout (3 s by
// default): past it, as when a synchronous standby stops confirming
// commits, the request is answered 503 and the server is asked to cancel
// the commit, which PostgreSQL does by committing it on the primary
// alone. So a 503 may mean "done": a count errs high, and a stored
// response is replayed to the retry with the same key.
//
//	st, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), postgres.Options{})
//	if err != nil { ... }
//	defer st.Close(context.Background())
//	db := stdlib.OpenDBFromPool(st.Pool()) // the application's own tables
package postgres
