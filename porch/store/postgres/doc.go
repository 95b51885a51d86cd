// Package postgres is porch's store for several instances sharing one
// PostgreSQL database: counters are counted by the database, one atomic
// upsert per batch of hits, and one update more when the batch refused some
// ([driver.SharedCounters]), and idempotency keys
// are held across instances by advisory locks. It is pure Go (pgx), so a
// program that uses only this driver builds with CGO_ENABLED=0.
//
//	st, err := postgres.Open(ctx, os.Getenv("DATABASE_URL"), postgres.Options{})
//	if err != nil { ... }
//	defer st.Close(context.Background())
//	db := stdlib.OpenDBFromPool(st.Pool()) // the application's own tables
package postgres
