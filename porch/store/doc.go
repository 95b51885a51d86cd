// Package store is what every porch store shares with the application that
// opens one: what a store can hold ([Counters] for rate.New, [Keys] for
// idem.New; kit takes both), the [Options] each driver takes, the errors a
// caller may meet ([ErrClosed], [ErrWriteFailed], [ErrPolicyConflict], …),
// the commit [Observer] and the [Stats] a store reports. The seam a driver
// implements and the middlewares call is porch/store/driver; the
// conformance suites are porch/store/storetest. It holds no driver. The
// drivers are leaves that import it:
//
//   - porch/store/sqlite: one SQLite file written by one process (cgo);
//     counters and idempotency keys.
//   - porch/store/postgres: one PostgreSQL database shared by several
//     instances (pure Go); counters and idempotency keys.
//   - porch/store/redis: one Redis server, Sentinel primary or Cluster
//     shared by several instances (pure Go); counters only.
//   - porch/store/memory: the process's memory, kept nothing of across a
//     restart (pure Go); counters and idempotency keys, for tests and for
//     one process that can afford to forget.
//
// so a program links only the drivers it opens, and the middlewares
// (porch/rate, porch/idem), which take a [Counters] or [Keys], link none.
//
// The SQL drivers keep two purpose-shaped tables: porch_rate_counters (one
// integer counter per client key and window) and porch_idem_responses (a
// stored status, content type and body beside the digest of the request
// that produced it). The SQLite driver adds a hit journal,
// porch_rate_journal, that counter writes append to while it runs; Close
// folds it into porch_rate_counters. Expiry is lazy: a row is reset or
// pruned when its key is next touched, and a bounded number of expired rows
// is pruned on the commit path, so clients that never return do not grow a
// table without bound. There is no background sweeper. Redis keeps each
// key's state under an expiry of its own.
//
// Writes go through group commit: one committer goroutine drains every
// pending write into one transaction (on Redis, one pipeline), and each
// write's callback runs only after that transaction has committed
// (synchronous=FULL for SQLite; on Redis, once the pipeline has answered),
// so one fsync or round trip serves a whole batch and no answer goes out
// before its write is committed.
// A store's Health reports whether commits succeed: from the last batch, or from
// one shared probe write when the store is idle, so a health endpoint can
// poll it without queueing a write per call.
//
//	st, err := sqlite.Open("app.db", sqlite.Options{})
//	// or: st, err := postgres.Open(ctx, dsn, postgres.Options{})
//	if err != nil { ... }
//	defer st.Close(context.Background())
//	limiter, err := rate.New(pool, st, 100, time.Minute, rate.Options{})
package store
