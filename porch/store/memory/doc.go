// Package memory is a store kept in the process's memory: the rate
// limiter's counters and idempotency keys in plain Go maps. It needs no database, no file and no C
// compiler, so a program or a test can start on it in one line:
//
//	k := kit.Must(kit.Open(memory.Open()))
//
// What it does not keep, plainly:
//
//   - Nothing survives the process. A restart, a crash or Close forgets
//     every count and every stored response: after a restart each client
//     has its whole limit again, and a retried request whose response was
//     stored runs its handler a second time.
//   - It runs no SQL. An idempotent handler's writes through
//     idem.Exec fail with [store.ErrWriteFailed],
//     since there is no database to commit them with the response; the
//     response is then not stored. Keep such handlers on SQLite or
//     PostgreSQL.
//   - One process. Several instances each count on their own, so behind a
//     load balancer of n instances a client gets n times its limit; share
//     PostgreSQL or Redis instead.
//
// Use it for tests, for development, and for a single process that
// accepts forgetting on restart. Otherwise it keeps what the interfaces
// promise, as porch/store/sqlite does for one process: exact counts, one
// owner per idempotency key, expiry on the store's timeline, policy
// conflicts, [store.ErrClosed] after Close. A write is done when its call
// returns; there is no committer, so [store.Options] (queue, batch,
// observer) has nothing to configure and Open takes its own [Options].
//
// Expired counters and responses are dropped as later writes pass them,
// a bounded number per write, and by a timer set for the earliest one,
// with or without further traffic; once a quarter of the peak is left
// the maps are rebuilt to its size. So memory follows the live keys
// rather than every key ever seen, also after a burst of keys that never
// come back.
package memory
